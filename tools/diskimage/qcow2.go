package diskimage

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
)

// qcow2 support (docs/interop/qcow2.txt in QEMU) without staging the image:
//
//  1. The header, L1 table and L2 tables are read with Range requests
//     (a few KiB to a few MiB) and turned into extents: guest range ->
//     host offset. Unallocated and zero clusters are simply gaps.
//  2. The file is then streamed once, in file order, through the same
//     download stage as every other format (sha256 of the whole file,
//     Range resume), and each extent's bytes are emitted at their guest
//     offset as they pass by; gaps are emitted as zeros.
//
// Step 2 needs data clusters stored in guest order, which is what
// `qemu-img convert -O qcow2` and image builders produce. A file whose
// clusters are out of guest order is refused with a clear error rather than
// downloaded twice or held in RAM. The table bytes used in step 1 are
// hashed and compared when the stream passes them, so the mapping is
// covered by the artifact's sha256 like everything else.

const (
	qcowMagic = 0x514649fb // "QFI\xfb"

	// Incompatible feature bits.
	qcowIncDirty      = 1 << 0
	qcowIncCorrupt    = 1 << 1
	qcowIncExtData    = 1 << 2
	qcowIncCompressT  = 1 << 3
	qcowIncExtendedL2 = 1 << 4

	l2Compressed = 1 << 62
	l2ZeroFlag   = 1 << 0
	offsetMask   = 0x00fffffffffffe00 // bits 9-55
)

type qcowExtent struct {
	guest, host, length int64
}

// qcowRegion is table bytes read up front, to be matched in the stream.
type qcowRegion struct {
	off, length int64
	sum         [32]byte
	what        string
}

type qcowImage struct {
	clusterSize int64
	virtualSize int64
	fileSize    int64
	extents     []qcowExtent // sorted by guest and by host
	regions     []qcowRegion // sorted by offset, non-overlapping
}

// Limits on what a header may ask for. The header arrives before the
// artifact's sha256 can be checked, so no size, offset or count read from
// it is trusted before it is range-checked.
const (
	qcowHeaderLen   = 72       // version 2 header; version 3 has at least 104
	qcowV3HeaderLen = 104      // version 3 header up to header_length
	qcowMaxHeader   = 4096     // bytes read for the header
	qcowMaxL1Bytes  = 32 << 20 // QEMU's QCOW_MAX_L1_SIZE: larger L1 tables are refused by QEMU too
	qcowMinClusterB = 9
	qcowMaxClusterB = 21
)

// readQcow2 parses the image's tables through r (Range requests over
// HTTP in production) and checks it can be streamed.
func readQcow2(r io.ReaderAt, fileSize int64) (*qcowImage, error) {
	if fileSize < qcowHeaderLen {
		return nil, fmt.Errorf("qcow2: file size %d: shorter than the %d-byte qcow2 header", fileSize, qcowHeaderLen)
	}
	hdr := make([]byte, min(fileSize, qcowMaxHeader))
	if _, err := r.ReadAt(hdr, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("qcow2: read header: %w", err)
	}
	img, version, err := parseQcowHeader(hdr, fileSize)
	if err != nil {
		return nil, err
	}
	l1, need, err := img.readL1(r, hdr)
	if err != nil {
		return nil, err
	}
	if err := img.readL2s(r, l1, need, version); err != nil {
		return nil, err
	}
	sort.Slice(img.regions, func(a, b int) bool { return img.regions[a].off < img.regions[b].off })
	return img, img.checkLayout()
}

// parseQcowHeader checks the header (hdr: the file's first bytes) and
// returns the image it describes, with no tables read yet.
func parseQcowHeader(hdr []byte, fileSize int64) (*qcowImage, uint32, error) {
	be := binary.BigEndian
	if be.Uint32(hdr) != qcowMagic {
		return nil, 0, fmt.Errorf("qcow2: header: expected magic QFI\\xfb, found %q", hdr[:4])
	}
	version := be.Uint32(hdr[4:])
	if version != 2 && version != 3 {
		return nil, 0, fmt.Errorf("qcow2: header: version %d: expected 2 or 3", version)
	}
	if off := be.Uint64(hdr[8:]); off != 0 {
		return nil, 0, fmt.Errorf("qcow2: image has a backing file (header offset %d): only self-contained images can be installed; flatten it with qemu-img convert", off)
	}
	clusterBits := be.Uint32(hdr[20:])
	if clusterBits < qcowMinClusterB || clusterBits > qcowMaxClusterB {
		return nil, 0, fmt.Errorf("qcow2: header: cluster_bits %d: expected %d-%d", clusterBits, qcowMinClusterB, qcowMaxClusterB)
	}
	// virtual_size is a uint64 on disk; every guest offset below is an
	// int64, so a size of 2^63 or more must not get past here.
	vs := be.Uint64(hdr[24:])
	if vs > math.MaxInt64 {
		return nil, 0, fmt.Errorf("qcow2: header: virtual_size %d: larger than the largest disk offset (2^63-1)", vs)
	}
	img := &qcowImage{clusterSize: 1 << clusterBits, virtualSize: int64(vs), fileSize: fileSize}
	if m := be.Uint32(hdr[32:]); m != 0 {
		return nil, 0, fmt.Errorf("qcow2: image is encrypted (crypt_method %d): not supported", m)
	}
	hdrLen := int64(qcowHeaderLen)
	if version == 3 {
		if len(hdr) < qcowV3HeaderLen {
			return nil, 0, fmt.Errorf("qcow2: header: version 3 header shorter than %d bytes (file is %d bytes)", qcowV3HeaderLen, fileSize)
		}
		inc := be.Uint64(hdr[72:])
		switch {
		case inc&qcowIncCorrupt != 0:
			return nil, 0, errors.New("qcow2: image is marked corrupt (incompatible feature bit 1)")
		case inc&qcowIncExtData != 0:
			return nil, 0, errors.New("qcow2: image keeps its data in an external file (incompatible feature bit 2): not supported")
		case inc&qcowIncExtendedL2 != 0:
			return nil, 0, errors.New("qcow2: image uses extended L2 entries (subclusters, incompatible feature bit 4): not supported; convert with qemu-img convert -O qcow2")
		case inc&^(qcowIncDirty|qcowIncCompressT) != 0:
			return nil, 0, fmt.Errorf("qcow2: unknown incompatible features %#x: refusing to guess", inc)
		}
		hdrLen = int64(be.Uint32(hdr[100:]))
		if hdrLen < qcowV3HeaderLen || hdrLen > int64(len(hdr)) {
			return nil, 0, fmt.Errorf("qcow2: header: header_length %d: expected %d-%d", hdrLen, qcowV3HeaderLen, len(hdr))
		}
	}
	img.addRegion(hdr[:hdrLen], 0, "header")
	return img, version, nil
}

// readL1 reads the L1 table the header points at; need is its entry
// count for the virtual size.
func (img *qcowImage) readL1(r io.ReaderAt, hdr []byte) ([]byte, int64, error) {
	be := binary.BigEndian
	vs := uint64(img.virtualSize)
	fileSize := img.fileSize
	cs := img.clusterSize
	l2Entries := cs / 8
	// One L2 table maps cs*l2Entries bytes (2^15 to 2^39): the L1 entry
	// count the virtual size needs is computed without overflow since
	// virtual_size < 2^63.
	span := uint64(cs * l2Entries)
	need64 := vs/span + min(vs%span, 1)
	if need64 > qcowMaxL1Bytes/8 {
		return nil, 0, fmt.Errorf("qcow2: header: virtual_size %d with %d-byte clusters needs %d L1 entries: more than the %d-byte L1 table limit", vs, cs, need64, qcowMaxL1Bytes)
	}
	need := int64(need64)
	l1Size := int64(be.Uint32(hdr[36:]))
	if l1Size > qcowMaxL1Bytes/8 {
		return nil, 0, fmt.Errorf("qcow2: header: l1_size %d: more than the %d entries of the %d-byte L1 table limit", l1Size, qcowMaxL1Bytes/8, qcowMaxL1Bytes)
	}
	if l1Size < need {
		return nil, 0, fmt.Errorf("qcow2: header: l1_size %d: a %d-byte image needs at least %d entries", l1Size, img.virtualSize, need)
	}
	// l1_table_offset is a uint64: compare it as one, so an offset of 2^63
	// or more cannot turn negative and pass the bounds check.
	l1Off64 := be.Uint64(hdr[40:])
	if need > 0 && (l1Off64%uint64(cs) != 0 || l1Off64 > uint64(fileSize) || uint64(need*8) > uint64(fileSize)-l1Off64) {
		return nil, 0, fmt.Errorf("qcow2: header: l1_table_offset %d: expected a cluster-aligned offset with the %d-byte L1 table inside the %d-byte file", l1Off64, need*8, fileSize)
	}
	l1Off := int64(l1Off64) // < fileSize when need > 0; unused otherwise
	l1 := make([]byte, need*8)
	if need > 0 {
		if _, err := r.ReadAt(l1, l1Off); err != nil {
			return nil, 0, fmt.Errorf("qcow2: read L1 table at %d: %w", l1Off, err)
		}
		img.addRegion(l1, l1Off, "L1 table")
	}
	return l1, need, nil
}

// readL2s reads each L2 table the L1 table names and maps its data
// clusters.
func (img *qcowImage) readL2s(r io.ReaderAt, l1 []byte, need int64, version uint32) error {
	be := binary.BigEndian
	cs, fileSize := img.clusterSize, img.fileSize
	l2Entries := cs / 8
	l2 := make([]byte, cs)
	// Each L2 table is read once: a table shared by two L1 entries would
	// let a small file make this loop read far more than the file.
	l2Seen := map[int64]int64{}
	for i := range need {
		l2Off := int64(be.Uint64(l1[i*8:]) & offsetMask)
		if l2Off == 0 {
			continue // unallocated: reads as zeros
		}
		if l2Off%cs != 0 || l2Off > fileSize-cs {
			return fmt.Errorf("qcow2: L1[%d]: L2 table offset %d: expected a cluster-aligned offset with the %d-byte table inside the %d-byte file", i, l2Off, cs, fileSize)
		}
		if j, ok := l2Seen[l2Off]; ok {
			return fmt.Errorf("qcow2: L1[%d]: L2 table offset %d is also the table of L1[%d]: corrupt image", i, l2Off, j)
		}
		l2Seen[l2Off] = i
		if _, err := r.ReadAt(l2, l2Off); err != nil {
			return fmt.Errorf("qcow2: read L2 table %d at %d: %w", i, l2Off, err)
		}
		img.addRegion(l2, l2Off, fmt.Sprintf("L2 table %d", i))
		for j := range l2Entries {
			guest := (i*l2Entries + j) * cs
			if guest >= img.virtualSize {
				break
			}
			e := be.Uint64(l2[j*8:])
			if e&l2Compressed != 0 {
				return fmt.Errorf("qcow2: guest offset %d: compressed cluster: not supported (convert without -c: qemu-img convert -O qcow2)", guest)
			}
			host := int64(e & offsetMask)
			if host == 0 || (version == 3 && e&l2ZeroFlag != 0) {
				continue // zero or unallocated, no backing file: zeros
			}
			n := min(cs, img.virtualSize-guest)
			if host%cs != 0 || host > fileSize-n {
				return fmt.Errorf("qcow2: guest offset %d: data cluster at %d: expected a cluster-aligned offset inside the %d-byte file", guest, host, fileSize)
			}
			if err := img.addExtent(guest, host, n); err != nil {
				return err
			}
		}
	}
	return nil
}

func (img *qcowImage) addRegion(b []byte, off int64, what string) {
	img.regions = append(img.regions, qcowRegion{off: off, length: int64(len(b)), sum: sha256.Sum256(b), what: what})
}

func (img *qcowImage) addExtent(guest, host, n int64) error {
	if k := len(img.extents); k > 0 {
		last := &img.extents[k-1]
		if host < last.host+last.length {
			return fmt.Errorf("qcow2: guest offset %d is stored at %d, before the data of guest offset %d (at %d): clusters are not in guest order, so the image cannot be streamed; rewrite it with qemu-img convert -O qcow2",
				guest, host, last.guest, last.host)
		}
		if last.guest+last.length == guest && last.host+last.length == host {
			last.length += n
			return nil
		}
	}
	img.extents = append(img.extents, qcowExtent{guest: guest, host: host, length: n})
	return nil
}

// checkLayout refuses tables that overlap each other or data.
func (img *qcowImage) checkLayout() error {
	for i := 1; i < len(img.regions); i++ {
		a, b := img.regions[i-1], img.regions[i]
		if a.off+a.length > b.off {
			return fmt.Errorf("qcow2: %s at %d overlaps %s at %d: corrupt image", a.what, a.off, b.what, b.off)
		}
	}
	ri := 0
	for _, e := range img.extents {
		for ri < len(img.regions) && img.regions[ri].off+img.regions[ri].length <= e.host {
			ri++
		}
		if ri < len(img.regions) && img.regions[ri].off < e.host+e.length {
			return fmt.Errorf("qcow2: data for guest offset %d at %d overlaps the %s at %d: corrupt image", e.guest, e.host, img.regions[ri].what, img.regions[ri].off)
		}
	}
	return nil
}

// stream turns the file, read sequentially from src, into the guest image.
func (img *qcowImage) stream(src io.Reader) io.Reader {
	return &qcowStream{img: img, src: src}
}

type qcowStream struct {
	img     *qcowImage
	src     io.Reader
	pos     int64 // file bytes consumed
	guest   int64 // guest bytes produced
	ext     int   // next extent
	reg     int   // next region to match
	regBuf  []byte
	scratch []byte
	done    bool
}

func (s *qcowStream) Read(p []byte) (int, error) {
	img := s.img
	if s.guest >= img.virtualSize {
		if !s.done {
			// Match the tables that lie after the last data cluster.
			if k := len(img.regions); k > 0 {
				last := img.regions[k-1]
				if err := s.advance(last.off + last.length); err != nil {
					return 0, err
				}
			}
			s.done = true
		}
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	if s.ext >= len(img.extents) || s.guest < img.extents[s.ext].guest {
		end := img.virtualSize
		if s.ext < len(img.extents) {
			end = img.extents[s.ext].guest
		}
		n := int(min(int64(len(p)), end-s.guest))
		clear(p[:n])
		s.guest += int64(n)
		return n, nil
	}
	e := img.extents[s.ext]
	host := e.host + (s.guest - e.guest)
	if err := s.advance(host); err != nil {
		return 0, err
	}
	n := int(min(int64(len(p)), e.guest+e.length-s.guest))
	if _, err := io.ReadFull(s.src, p[:n]); err != nil {
		return 0, fmt.Errorf("qcow2: data for guest offset %d at file offset %d: %w", s.guest, host, noEOF(err))
	}
	s.pos += int64(n)
	s.guest += int64(n)
	if s.guest == e.guest+e.length {
		s.ext++
	}
	return n, nil
}

// advance consumes the file up to offset to, checking table regions
// against what was read up front.
func (s *qcowStream) advance(to int64) error {
	if s.scratch == nil {
		s.scratch = make([]byte, 256<<10)
	}
	for s.pos < to {
		n := min(int64(len(s.scratch)), to-s.pos)
		// Stop at region boundaries so each region is compared whole.
		if s.reg < len(s.img.regions) {
			r := s.img.regions[s.reg]
			if s.pos < r.off {
				n = min(n, r.off-s.pos)
			} else {
				n = min(n, r.off+r.length-s.pos)
			}
		}
		b := s.scratch[:n]
		if _, err := io.ReadFull(s.src, b); err != nil {
			return fmt.Errorf("qcow2: reading file offset %d: %w", s.pos, noEOF(err))
		}
		if s.reg < len(s.img.regions) {
			r := s.img.regions[s.reg]
			if s.pos >= r.off {
				s.regBuf = append(s.regBuf, b...)
				if s.pos+n == r.off+r.length {
					if sha256.Sum256(s.regBuf) != r.sum {
						return fmt.Errorf("qcow2: %s at %d differs between the Range read and the download stream: artifact changed mid-install", r.what, r.off)
					}
					s.regBuf = s.regBuf[:0]
					s.reg++
				}
			}
		}
		s.pos += n
	}
	return nil
}

func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
