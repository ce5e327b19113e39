package wipe

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
)

// Block is the disk's data, read and written at 4 KiB-aligned offsets in
// 4 KiB multiples (the real implementation uses O_DIRECT, so reads see the
// medium, not the page cache).
type Block interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	Sync() error
	Size() int64
}

const (
	blockSize = 4096
	mib       = 1 << 20
)

// region is a sampled byte range of the disk.
type region struct {
	Name string
	Off  int64
	Len  int64
}

// marker is a random token and the regions it was written to. Every
// 4 KiB block carries the token, its own offset and SHA-256-derived
// filler, so no erase method (zeros, ones, or fresh ciphertext) can leave
// a block that passes for the marker by accident.
type marker struct {
	Token   [16]byte
	Regions []region
}

// planMarker picks the first MiB, the last MiB and n random 4 KiB blocks
// between them (fewer on a disk too small to have room).
func planMarker(size int64, n int, rnd io.Reader) (*marker, error) {
	if size < 2*mib+blockSize {
		return nil, fmt.Errorf("disk is %d bytes; a marker needs at least 2 MiB + 4 KiB", size)
	}
	m := &marker{}
	if _, err := io.ReadFull(rnd, m.Token[:]); err != nil {
		return nil, fmt.Errorf("marker token: %w", err)
	}
	lastStart := (size - mib) / blockSize * blockSize
	m.Regions = append(m.Regions, region{"first MiB", 0, mib}, region{"last MiB", lastStart, mib})
	inner := (lastStart - mib) / blockSize // 4 KiB blocks strictly between
	// The random offsets come from the token so a run is reproducible from
	// its evidence; the token itself is random.
	r := rand.New(rand.NewPCG(binary.LittleEndian.Uint64(m.Token[:8]), binary.LittleEndian.Uint64(m.Token[8:])))
	seen := map[int64]bool{}
	for i := 0; i < n && int64(len(seen)) < inner; {
		off := mib + r.Int64N(inner)*blockSize
		if seen[off] {
			continue
		}
		seen[off] = true
		i++
	}
	var offs []int64
	for o := range seen {
		offs = append(offs, o)
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	for _, o := range offs {
		m.Regions = append(m.Regions, region{fmt.Sprintf("random block @%d", o), o, blockSize})
	}
	return m, nil
}

// TokenHex is the token as hex, for the report.
func (m *marker) TokenHex() string { return hex.EncodeToString(m.Token[:]) }

// fill writes the marker content for the block at disk offset off into p.
func (m *marker) fill(p []byte, off int64) {
	copy(p, "CURE-WIPE-MARKER")
	copy(p[16:], m.Token[:])
	binary.BigEndian.PutUint64(p[32:], uint64(off))
	for i := 40; i < len(p); i += sha256.Size {
		var seed [40]byte
		copy(seed[:], p[16:40])
		binary.BigEndian.PutUint64(seed[32:], uint64(i))
		h := sha256.Sum256(seed[:])
		copy(p[i:], h[:])
	}
}

func (m *marker) content(r region) []byte {
	b := make([]byte, r.Len)
	for o := int64(0); o < r.Len; o += blockSize {
		m.fill(b[o:o+blockSize], r.Off+o)
	}
	return b
}

// write puts the marker on the disk and reads it back.
func (m *marker) write(b Block) error {
	for _, r := range m.Regions {
		want := m.content(r)
		if _, err := b.WriteAt(want, r.Off); err != nil {
			return fmt.Errorf("write marker to %s [%d, +%d): %w", r.Name, r.Off, r.Len, err)
		}
	}
	if err := b.Sync(); err != nil {
		return fmt.Errorf("flush marker: %w", err)
	}
	for _, r := range m.Regions {
		got := make([]byte, r.Len)
		if _, err := b.ReadAt(got, r.Off); err != nil {
			return fmt.Errorf("read back marker at %s: %w", r.Name, err)
		}
		if !bytes.Equal(got, m.content(r)) {
			return fmt.Errorf("marker at %s did not read back as written: the disk does not store what it is given, so an erase could not be proven", r.Name)
		}
	}
	return nil
}

// check reads every region and reports, per region, whether any block
// still carries the marker and what the region holds now; zeros says
// every region reads as zeros.
func (m *marker) check(b Block) (evidence []string, survivors int, zeros bool, err error) {
	zeros = true
	for _, r := range m.Regions {
		got := make([]byte, r.Len)
		if _, err := b.ReadAt(got, r.Off); err != nil {
			return evidence, survivors, false, fmt.Errorf("read %s after wipe: %w", r.Name, err)
		}
		left := 0
		for o := int64(0); o < r.Len; o += blockSize {
			blk := got[o : o+blockSize]
			// Either the exact block, or the token anywhere in it (a
			// remapped or shifted copy) counts as a survivor.
			want := make([]byte, blockSize)
			m.fill(want, r.Off+o)
			if bytes.Equal(blk, want) || bytes.Contains(blk, m.Token[:]) {
				left++
			}
		}
		survivors += left
		state := "marker gone"
		if left > 0 {
			state = fmt.Sprintf("MARKER STILL PRESENT in %d of %d blocks", left, r.Len/blockSize)
		}
		now := describeData(got)
		zeros = zeros && now == dataZeros
		evidence = append(evidence, fmt.Sprintf("%s [%d, +%d): %s, now %s", r.Name, r.Off, r.Len, state, now))
	}
	return evidence, survivors, zeros, nil
}

const dataZeros = "all zeros"

// describeData characterises erased content: all zeros (format, block
// erase), all ones, or other data (crypto erase: old ciphertext under a
// new key reads as noise).
func describeData(b []byte) string {
	allSame := func(v byte) bool {
		for _, c := range b {
			if c != v {
				return false
			}
		}
		return true
	}
	switch {
	case allSame(0):
		return dataZeros
	case allSame(0xff):
		return "all 0xff"
	}
	return "non-uniform data"
}
