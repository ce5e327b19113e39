// Package zstd is a streaming decoder for the Zstandard format (RFC 8878).
//
// It is written for large, mostly-zero disk images: Raw and RLE blocks are
// produced with one copy() or clear() straight into the window buffer, and
// Read copies each decoded byte out exactly once. Memory is bounded by the
// frame's window plus one block, regardless of stream length.
//
// Dictionaries are not supported; frames that need one are refused.
//
// Its speed against klauspost/compress and zstd(1) is measured where the
// decoder is chosen: BenchmarkZstdDecoders and the table in
// tools/diskimage/decode.go.
package zstd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/cespare/xxhash/v2"
)

const (
	frameMagic        = 0xFD2FB528
	skippableMagic    = 0x184D2A50 // low 4 bits are free (section 3.1.2)
	skippableMask     = 0xFFFFFFF0
	maxBlockSize      = 128 << 10
	blockHeaderSize   = 3
	initialBufSize    = 1 << 20
	inputBufferSize   = maxBlockSize + 64 // a whole compressed block can be peeked
	DefaultMaxWindow  = 512 << 20
	absoluteMaxWindow = 1 << 31 // keeps offsets and sizes within int on any platform
	// wildSlack is how far past a copy's end the fast copies may write.
	wildSlack = 32
)

// Option configures a Reader.
type Option func(*Reader) error

// WithMaxWindow sets the largest Window_Size (RFC 8878 section 3.1.1.1.2)
// accepted; frames declaring more are refused with ErrWindowTooLarge. The
// decoder's memory is about this much plus one block. Default 512 MiB.
func WithMaxWindow(n uint64) Option {
	return func(r *Reader) error {
		if n < 1<<10 || n > absoluteMaxWindow {
			return fmt.Errorf("zstd: WithMaxWindow(%d): must be between 1 KiB and 2 GiB", n)
		}
		r.maxWindow = n
		return nil
	}
}

// WithIgnoreChecksum skips the XXH64 of each frame's content (its
// Content_Checksum is still read past). For callers that have already
// verified the compressed stream against a trusted digest: the checksum
// then only re-proves what that digest did, at a cost of one more pass
// over every decoded byte (about 6 % of an incompressible install's CPU,
// 17 % of a mostly-zero one's).
func WithIgnoreChecksum(ignore bool) Option {
	return func(r *Reader) error {
		r.ignoreChecksum = ignore
		return nil
	}
}

// Reader decompresses a stream of Zstandard frames. It reads ahead from the
// underlying reader, so bytes after the last frame may be consumed.
type Reader struct {
	in             *input
	maxWindow      uint64
	ignoreChecksum bool
	err            error // sticky

	// History ring. Blocks are decoded in place at buf[pos:]; when one
	// might not fit before the end, writing restarts at 0 and wrapAt
	// marks where the older lap ends. buf[rd:wr] is not yet returned.
	buf    []byte
	pos    int
	wrapAt int
	rd, wr int
	// rle is set while buf[rd:wr] is one RLE block of rleByte: Read
	// fills p instead of copying (a write-only pass, no read of buf).
	rle     bool
	rleByte byte
	// zeroAware: the caller uses SkipZeros, so Read stops short before
	// an RLE block of zeros rather than filling it into p.
	zeroAware bool

	// Current frame.
	inFrame     bool
	frameNum    int // 1-based, skippable frames included
	blockNum    int // 1-based within the frame
	window      int
	blockMax    int
	target      int // ring size this frame needs
	hasFCS      bool
	fcs         uint64
	frameOut    uint64
	hasChecksum bool
	hashing     bool          // hasChecksum, unless WithIgnoreChecksum
	hash        xxhash.Digest // XXH64 of the frame's content (Content_Checksum)

	dec blockDecoder
}

// NewReader returns a Reader decompressing r.
func NewReader(r io.Reader, opts ...Option) (*Reader, error) {
	z := &Reader{maxWindow: DefaultMaxWindow}
	for _, o := range opts {
		if err := o(z); err != nil {
			return nil, err
		}
	}
	z.in = newInput(r, inputBufferSize)
	return z, nil
}

// Close releases the buffers; further Reads fail. It does not close the
// underlying reader.
func (z *Reader) Close() error {
	z.buf = nil
	z.dec.litBuf = nil
	z.in = nil
	z.rd, z.wr = 0, 0
	z.err = ErrClosed
	return nil
}

// Read implements io.Reader. Decoding happens one block at a time; each
// decoded byte is copied to p once.
func (z *Reader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if z.rd < z.wr {
			if n > 0 && z.zeroAware && z.rle && z.rleByte == 0 {
				break
			}
			var c int
			if z.rle {
				c = min(len(p)-n, z.wr-z.rd)
				fill(p[n:n+c], z.rleByte)
			} else {
				c = copy(p[n:], z.buf[z.rd:z.wr])
			}
			z.rd += c
			n += c
			continue
		}
		if z.err != nil {
			break
		}
		z.err = z.step()
	}
	if n > 0 {
		return n, nil
	}
	if n == 0 && len(p) == 0 {
		return 0, nil
	}
	return 0, z.err
}

// SkipZeros consumes up to max bytes of output that are known to be zero
// (an RLE block of zeros) without producing them, and returns how many.
// It returns 0 when the next output is anything else, or an error is
// pending: Read that. A disk image writer uses it to skip zero runs
// without clearing a buffer and scanning it for the zeros it was given.
func (z *Reader) SkipZeros(max int) int {
	z.zeroAware = true
	for z.rd == z.wr && z.err == nil {
		z.err = z.step()
	}
	if z.rd == z.wr || !z.rle || z.rleByte != 0 {
		return 0
	}
	c := min(max, z.wr-z.rd)
	z.rd += c
	return c
}

// WriteTo implements io.WriterTo, handing whole blocks to w without the
// caller's intermediate buffer.
func (z *Reader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if z.rd < z.wr {
			n, err := w.Write(z.buf[z.rd:z.wr])
			z.rd += n
			total += int64(n)
			if err != nil {
				return total, err
			}
			if z.rd < z.wr {
				return total, io.ErrShortWrite
			}
			continue
		}
		if z.err != nil {
			if z.err == io.EOF {
				return total, nil
			}
			return total, z.err
		}
		z.err = z.step()
	}
}

// step advances by one frame header, block, or frame end. It returns
// io.EOF only at a frame boundary at the end of the input.
func (z *Reader) step() error {
	if !z.inFrame {
		return z.startFrame()
	}
	return z.decodeBlock()
}

func (z *Reader) readFull(b []byte) error {
	_, err := z.in.readFull(b)
	return err
}

// unexpected turns EOF inside a frame into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func (z *Reader) frameErr(what string, err error) error {
	return fmt.Errorf("zstd: frame %d (input offset %d): %s: %w", z.frameNum, z.in.off, what, err)
}

func (z *Reader) blockErr(what string, err error) error {
	return fmt.Errorf("zstd: frame %d, block %d (input offset %d): %s: %w", z.frameNum, z.blockNum, z.in.off, what, err)
}

// startFrame reads a magic number and, for a Zstandard frame, its header
// (RFC 8878 section 3.1.1.1); skippable frames are discarded whole.
func (z *Reader) startFrame() error {
	var hdr [4]byte
	if _, err := z.in.readFull(hdr[:]); err != nil {
		if err == io.EOF {
			return io.EOF // clean end between frames
		}
		return fmt.Errorf("zstd: frame %d (input offset %d): reading magic number: %w", z.frameNum+1, z.in.off, err)
	}
	z.frameNum++
	magic := binary.LittleEndian.Uint32(hdr[:])
	if magic&skippableMask == skippableMagic {
		if err := z.readFull(hdr[:]); err != nil {
			return z.frameErr("skippable frame size", unexpected(err))
		}
		size := int64(binary.LittleEndian.Uint32(hdr[:]))
		if _, err := z.in.discard(size); err != nil {
			return z.frameErr("skippable frame data", unexpected(err))
		}
		return nil
	}
	if magic != frameMagic {
		return z.frameErr("bad magic number", corruptf("0x%08x is not a Zstandard frame", magic))
	}
	window, checksum, err := z.readFrameHeader()
	if err != nil {
		return err
	}
	if window > z.maxWindow {
		return z.frameErr("frame header", fmt.Errorf("%w: Window_Size %s exceeds the maximum %s",
			ErrWindowTooLarge, sizeString(window), sizeString(z.maxWindow)))
	}
	z.window = int(window)
	z.blockMax = min(z.window, maxBlockSize)
	z.target = z.window + z.blockMax + 2*wildSlack
	z.hasChecksum = checksum
	z.hashing = checksum && !z.ignoreChecksum
	z.frameOut = 0
	z.blockNum = 0
	z.inFrame = true
	if z.hashing {
		z.hash.Reset()
	}
	// A frame cannot refer to the previous frame's data.
	z.pos, z.wrapAt, z.rd, z.wr = 0, 0, 0, 0
	z.dec.resetFrame()
	return nil
}

// readFrameHeader reads the frame header after the magic number: it sets
// z.fcs and z.hasFCS and returns the Window_Size and whether the frame
// ends with a Content_Checksum.
func (z *Reader) readFrameHeader() (uint64, bool, error) {
	var hdr [14]byte
	if err := z.readFull(hdr[:1]); err != nil {
		return 0, false, z.frameErr("frame header", unexpected(err))
	}
	fhd := hdr[0]
	fcsFlag := fhd >> 6
	single := fhd&0x20 != 0
	if fhd&0x08 != 0 {
		return 0, false, z.frameErr("frame header", corrupt("reserved bit set in Frame_Header_Descriptor"))
	}
	checksum := fhd&0x04 != 0
	didSize := [4]int{0, 1, 2, 4}[fhd&3]
	fcsSize := [4]int{0, 2, 4, 8}[fcsFlag]
	if fcsFlag == 0 && single {
		fcsSize = 1
	}
	wdSize := 1
	if single {
		wdSize = 0
	}
	rest := hdr[:wdSize+didSize+fcsSize]
	if err := z.readFull(rest); err != nil {
		return 0, false, z.frameErr("frame header", unexpected(err))
	}
	var window uint64
	if !single {
		// Window_Descriptor (section 3.1.1.1.2).
		wd := rest[0]
		wlog := 10 + uint(wd>>3)
		base := uint64(1) << wlog
		window = base + base/8*uint64(wd&7)
		rest = rest[1:]
	}
	if didSize > 0 {
		var did uint32
		for i := didSize - 1; i >= 0; i-- {
			did = did<<8 | uint32(rest[i])
		}
		rest = rest[didSize:]
		if did != 0 {
			return 0, false, z.frameErr("frame header", fmt.Errorf("%w (frame needs dictionary ID %d)", ErrDictionary, did))
		}
	}
	z.hasFCS = fcsSize > 0
	switch fcsSize {
	case 0:
		z.fcs = 0
	case 1:
		z.fcs = uint64(rest[0])
	case 2:
		z.fcs = uint64(binary.LittleEndian.Uint16(rest)) + 256
	case 4:
		z.fcs = uint64(binary.LittleEndian.Uint32(rest))
	case 8:
		z.fcs = binary.LittleEndian.Uint64(rest)
	}
	if single {
		// Single_Segment_Flag: the window is the whole content.
		window = z.fcs
	}
	return window, checksum, nil
}

// ensureSpace makes buf[pos:pos+n+wildSlack] writable without disturbing
// the last window bytes of history: it grows the ring (only before the
// first wrap) or wraps to the start. Wrapping only when the ring holds
// target = window+blockMax+2*wildSlack bytes keeps wrapAt >= window +
// wildSlack, so a match source in the older lap always lies at least
// wildSlack bytes ahead of the write position, out of reach of the
// over-long copies in execSequences.
func (z *Reader) ensureSpace(n int) {
	n += wildSlack
	if z.pos+n <= len(z.buf) {
		return
	}
	if len(z.buf) < z.target {
		size := max(2*len(z.buf), initialBufSize, z.pos+n)
		size = min(size, max(z.target, z.pos+n))
		if size <= cap(z.buf) {
			z.buf = z.buf[:size]
			return
		}
		nb := make([]byte, size)
		copy(nb, z.buf[:z.pos])
		z.buf = nb
		return
	}
	z.wrapAt = z.pos
	z.pos = 0
}

// decodeBlock decodes one block (RFC 8878 section 3.1.1.2) and, after the
// last block, verifies the frame's size and checksum.
func (z *Reader) decodeBlock() error {
	z.blockNum++
	var bh [blockHeaderSize]byte
	if err := z.readFull(bh[:]); err != nil {
		return z.blockErr("block header", unexpected(err))
	}
	h := uint32(bh[0]) | uint32(bh[1])<<8 | uint32(bh[2])<<16
	last := h&1 != 0
	typ := (h >> 1) & 3
	size := int(h >> 3)

	var n int
	z.rle = false
	switch typ {
	case 0: // Raw_Block: read straight into history, bypassing the input buffer.
		if size > z.blockMax {
			return z.blockErr("raw block", corruptf("size %d exceeds Block_Maximum_Size %d", size, z.blockMax))
		}
		z.ensureSpace(size)
		if err := z.readFull(z.buf[z.pos : z.pos+size]); err != nil {
			return z.blockErr("raw block", unexpected(err))
		}
		n = size
	case 1: // RLE_Block: Block_Size is the regenerated size.
		if size > z.blockMax {
			return z.blockErr("RLE block", corruptf("size %d exceeds Block_Maximum_Size %d", size, z.blockMax))
		}
		var b [1]byte
		if err := z.readFull(b[:]); err != nil {
			return z.blockErr("RLE block", unexpected(err))
		}
		z.ensureSpace(size)
		fill(z.buf[z.pos:z.pos+size], b[0])
		n = size
		z.rle, z.rleByte = true, b[0]
	case 2: // Compressed_Block
		if size > z.blockMax {
			return z.blockErr("compressed block", corruptf("size %d exceeds Block_Maximum_Size %d", size, z.blockMax))
		}
		src, err := z.in.peek(size)
		if err != nil {
			if errors.Is(err, io.EOF) {
				// Account for what was there so the offset is useful.
				z.in.off += int64(len(src))
				return z.blockErr("compressed block", io.ErrUnexpectedEOF)
			}
			return z.blockErr("compressed block", err)
		}
		if z.dec.litBuf == nil {
			// Slack past the largest literals section lets
			// execSequences copy short literal runs blindly.
			z.dec.litBuf = make([]byte, maxBlockSize+wildSlack)
		}
		z.ensureSpace(z.blockMax)
		n, err = z.decodeCompressed(src)
		if err != nil {
			return z.blockErr("compressed block", err)
		}
		z.in.discard(int64(size))
	default:
		return z.blockErr("block header", corrupt("reserved block type"))
	}

	out := z.buf[z.pos : z.pos+n]
	z.frameOut += uint64(n)
	if z.hasFCS && z.frameOut > z.fcs {
		return z.blockErr("frame content", corruptf("more than Frame_Content_Size %d bytes", z.fcs))
	}
	if z.hashing {
		z.hash.Write(out)
	}
	z.rd, z.wr = z.pos, z.pos+n
	z.pos += n
	if last {
		return z.endFrame()
	}
	return nil
}

func (z *Reader) endFrame() error {
	z.inFrame = false
	if z.hasFCS && z.frameOut != z.fcs {
		return z.frameErr("frame content", corruptf("decoded %d bytes, Frame_Content_Size is %d", z.frameOut, z.fcs))
	}
	if z.hasChecksum {
		var b [4]byte
		if err := z.readFull(b[:]); err != nil {
			return z.frameErr("content checksum", unexpected(err))
		}
		want := binary.LittleEndian.Uint32(b[:])
		if got := uint32(z.hash.Sum64()); z.hashing && want != got {
			return z.frameErr("content checksum", fmt.Errorf("%w: computed %08x, frame says %08x", ErrChecksum, got, want))
		}
	}
	return nil
}

func sizeString(n uint64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
