// Package chunklist is the chunked digest of an artifact: the digest of
// every fixed-size chunk, so a writer can verify the chunks on all cores
// as they arrive and hand on nothing unverified, where one sha256 of the
// whole file can only be checked on one core, and only at the end.
//
// A list is a small binary file, itself an artifact: a manifest pins the
// sha256 of the list beside the artifact's own sha256 and size. The list
// names that sha256 and size in its header, so a list is bound to one
// artifact: a list made for another file (or another version of it) is
// refused before any chunk is checked.
//
// Layout (integers little-endian):
//
//	magic    [8]byte  "CURECHK1"
//	alg      uint8    1 = sha256, 2 = BLAKE3-256
//	reserved [3]byte  zero
//	chunk    uint32   chunk size in bytes, a power of two, 64 KiB..16 MiB
//	size     uint64   artifact size in bytes
//	whole    [32]byte the artifact's sha256
//	digests  [n][32]byte, n = ceil(size/chunk); the last chunk may be short
package chunklist

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/zeebo/blake3"
)

// Alg is a chunk digest algorithm.
type Alg uint8

const (
	SHA256 Alg = 1
	BLAKE3 Alg = 2
)

func (a Alg) String() string {
	switch a {
	case SHA256:
		return "sha256"
	case BLAKE3:
		return "blake3"
	}
	return fmt.Sprintf("alg(%d)", uint8(a))
}

// ParseAlg reads an algorithm name as String writes it.
func ParseAlg(s string) (Alg, error) {
	switch s {
	case "sha256":
		return SHA256, nil
	case "blake3":
		return BLAKE3, nil
	}
	return 0, fmt.Errorf("chunk digest algorithm %q: expected sha256 or blake3", s)
}

// Sum returns the digest of p.
func (a Alg) Sum(p []byte) [32]byte {
	if a == BLAKE3 {
		return blake3.Sum256(p)
	}
	return sha256.Sum256(p)
}

const (
	magic      = "CURECHK1"
	headerSize = 8 + 1 + 3 + 4 + 8 + 32
	MinChunk   = 64 << 10
	MaxChunk   = 16 << 20
	// DefaultChunk is what `provisioner-lite artifacts add` uses: 1 MiB
	// keeps the writer's buffers small (a chunk is verified before any of
	// it moves on) and the list at 32 bytes per MiB (320 KiB for 10 GiB).
	DefaultChunk = 1 << 20
	// DefaultAlg is the measured choice (docs/BENCHMARKS.md, `make bench-install`):
	// BLAKE3 costs this writer about half the CPU per byte of sha256 with
	// SHA-NI, which matters where the cores are the limit.
	DefaultAlg = BLAKE3
	// MaxListSize bounds a list a writer will download: a 16 TiB artifact
	// in 1 MiB chunks.
	MaxListSize = headerSize + (16<<40/DefaultChunk)*32
)

// List is a parsed chunk list.
type List struct {
	Alg     Alg
	Chunk   int64
	Size    int64    // of the artifact
	Whole   [32]byte // the artifact's sha256
	Digests [][32]byte
}

// Chunks is how many chunks an artifact of size bytes has.
func Chunks(size, chunk int64) int64 { return (size + chunk - 1) / chunk }

// Span returns the byte range [from, to) of chunk i.
func (l *List) Span(i int) (from, to int64) {
	from = int64(i) * l.Chunk
	return from, min(from+l.Chunk, l.Size)
}

// Check verifies chunk i; p must be exactly the chunk's bytes.
func (l *List) Check(i int, p []byte) error {
	if i < 0 || i >= len(l.Digests) {
		return fmt.Errorf("chunk %d: the list has %d chunks", i, len(l.Digests))
	}
	from, to := l.Span(i)
	if int64(len(p)) != to-from {
		return fmt.Errorf("chunk %d (bytes %d-%d): got %d bytes, expected %d", i, from, to-1, len(p), to-from)
	}
	if got := l.Alg.Sum(p); got != l.Digests[i] {
		return fmt.Errorf("chunk %d (bytes %d-%d): %s mismatch: list says %s, downloaded %s",
			i, from, to-1, l.Alg, hex.EncodeToString(l.Digests[i][:]), hex.EncodeToString(got[:]))
	}
	return nil
}

// String names the verification for logs and benchmarks, e.g.
// "chunked-blake3-1MiB".
func (l *List) String() string {
	return fmt.Sprintf("chunked-%s-%s", l.Alg, sizeName(l.Chunk))
}

func sizeName(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// Marshal encodes the list.
func (l *List) Marshal() []byte {
	b := make([]byte, headerSize, headerSize+32*len(l.Digests))
	copy(b, magic)
	b[8] = byte(l.Alg)
	binary.LittleEndian.PutUint32(b[12:], uint32(l.Chunk))
	binary.LittleEndian.PutUint64(b[16:], uint64(l.Size))
	copy(b[24:56], l.Whole[:])
	for _, d := range l.Digests {
		b = append(b, d[:]...)
	}
	return b
}

// Parse decodes a list and binds it to the artifact it must describe:
// wantSHA256 (hex) and wantSize are the manifest's. The caller has already
// checked the list's own sha256 against the manifest's pin.
func Parse(b []byte, wantSHA256 string, wantSize int64) (*List, error) {
	if len(b) < headerSize || string(b[:8]) != magic {
		return nil, errors.New("chunk list: not a CURECHK1 list (bad magic or shorter than its header)")
	}
	l := &List{Alg: Alg(b[8]), Chunk: int64(binary.LittleEndian.Uint32(b[12:])), Size: int64(binary.LittleEndian.Uint64(b[16:]))}
	copy(l.Whole[:], b[24:56])
	switch {
	case l.Alg != SHA256 && l.Alg != BLAKE3:
		return nil, fmt.Errorf("chunk list: algorithm %d: expected 1 (sha256) or 2 (blake3)", b[8])
	case b[9] != 0 || b[10] != 0 || b[11] != 0:
		return nil, errors.New("chunk list: reserved header bytes are not zero")
	case l.Chunk < MinChunk || l.Chunk > MaxChunk || l.Chunk&(l.Chunk-1) != 0:
		return nil, fmt.Errorf("chunk list: chunk size %d: expected a power of two from %d to %d", l.Chunk, MinChunk, MaxChunk)
	case l.Size <= 0:
		return nil, fmt.Errorf("chunk list: artifact size %d: expected > 0", l.Size)
	}
	n := Chunks(l.Size, l.Chunk)
	if int64(len(b)-headerSize) != 32*n {
		return nil, fmt.Errorf("chunk list: %d bytes of digests for %d chunks of %d bytes (expected %d)", len(b)-headerSize, n, l.Chunk, 32*n)
	}
	want, err := hex.DecodeString(wantSHA256)
	if err != nil || len(want) != 32 {
		return nil, fmt.Errorf("chunk list: artifact sha256 %q: expected 64 hex digits", wantSHA256)
	}
	if !bytes.Equal(want, l.Whole[:]) || wantSize != l.Size {
		return nil, fmt.Errorf("chunk list describes sha256:%s, %d bytes, not the manifest's sha256:%s, %d bytes: it belongs to another artifact",
			hex.EncodeToString(l.Whole[:]), l.Size, wantSHA256, wantSize)
	}
	l.Digests = make([][32]byte, n)
	for i := range l.Digests {
		copy(l.Digests[i][:], b[headerSize+32*i:])
	}
	return l, nil
}

// Build reads an artifact to its end and returns its chunk list (whose
// Whole is the artifact's sha256). The whole-file sha256 runs on this
// goroutine; chunk digests on the other cores.
func Build(r io.Reader, alg Alg, chunk int64) (*List, error) {
	if alg != SHA256 && alg != BLAKE3 {
		return nil, fmt.Errorf("chunk list: algorithm %d unknown", alg)
	}
	if chunk < MinChunk || chunk > MaxChunk || chunk&(chunk-1) != 0 {
		return nil, fmt.Errorf("chunk list: chunk size %d: expected a power of two from %d to %d", chunk, MinChunk, MaxChunk)
	}
	type job struct {
		i int
		b []byte
	}
	workers := max(1, runtime.GOMAXPROCS(0))
	jobs := make(chan job, workers)
	free := make(chan []byte, 2*workers+2)
	for range cap(free) {
		free <- make([]byte, chunk)
	}
	var (
		mu      sync.Mutex
		digests = map[int][32]byte{}
		wg      sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				d := alg.Sum(j.b)
				free <- j.b[:cap(j.b)]
				mu.Lock()
				digests[j.i] = d
				mu.Unlock()
			}
		}()
	}
	whole := sha256.New()
	var size int64
	var rerr error
	for i := 0; ; i++ {
		b := <-free
		n, err := io.ReadFull(r, b)
		if n > 0 {
			whole.Write(b[:n])
			size += int64(n)
			jobs <- job{i, b[:n]}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			rerr = err
			break
		}
	}
	close(jobs)
	wg.Wait()
	if rerr != nil {
		return nil, fmt.Errorf("chunk list: read: %w", rerr)
	}
	if size == 0 {
		return nil, errors.New("chunk list: the artifact is empty")
	}
	l := &List{Alg: alg, Chunk: chunk, Size: size, Digests: make([][32]byte, len(digests))}
	copy(l.Whole[:], whole.Sum(nil))
	for i, d := range digests {
		l.Digests[i] = d
	}
	return l, nil
}

// SumHex is the sha256 (hex) of b: what a manifest pins for a list.
func SumHex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
