package zstd

import (
	"io"
)

// minRead is the smallest read input asks of its source: small enough
// that the buffer rarely holds much of the next block, large enough that
// a network source is not read a few bytes at a time.
const minRead = 4 << 10

// input buffers the compressed stream. Unlike a bufio.Reader it reads
// from the source only about as much as the decoder needs next (at least
// minRead), so a Raw_Block can go from the source straight into the
// window (readFull) instead of being copied through the buffer first: on
// stored (incompressible) data that is one copy of every byte saved.
type input struct {
	src  io.Reader
	buf  []byte // len inputBufferSize: a whole compressed block fits
	r, w int    // buf[r:w] is buffered, unread
	err  error  // the source's first error; the source is not read again
	off  int64  // bytes consumed, for error messages
}

func newInput(src io.Reader, size int) *input {
	return &input{src: src, buf: make([]byte, size)}
}

func (in *input) buffered() int { return in.w - in.r }

// read is one read of the source that remembers its error. A source
// returning nothing and no error many times in a row is broken, not slow.
func (in *input) read(p []byte) int {
	for range 100 {
		if in.err != nil {
			return 0
		}
		n, err := in.src.Read(p)
		if err != nil {
			in.err = err
		}
		if n > 0 {
			return n
		}
	}
	in.err = io.ErrNoProgress
	return 0
}

// fill buffers at least n bytes (n <= len(buf)), fewer only when the
// source has failed or ended.
func (in *input) fill(n int) {
	if in.buffered() >= n {
		return
	}
	if len(in.buf)-in.r < n {
		// Not enough room after the unread bytes: move them to the front.
		in.w = copy(in.buf, in.buf[in.r:in.w])
		in.r = 0
	}
	for in.buffered() < n && in.err == nil {
		end := min(in.r+max(n, in.buffered()+minRead), len(in.buf))
		in.w += in.read(in.buf[in.w:end])
	}
}

// peek returns the next n bytes without consuming them; fewer, with the
// source's error, when it ends or fails first.
func (in *input) peek(n int) ([]byte, error) {
	in.fill(n)
	if in.buffered() < n {
		return in.buf[in.r:in.w], in.err
	}
	return in.buf[in.r : in.r+n], nil
}

// discard consumes n bytes (any n: skippable frames may be 4 GiB) and
// reports how many it did.
func (in *input) discard(n int64) (int64, error) {
	var done int64
	for done < n {
		if in.buffered() == 0 {
			in.r, in.w = 0, 0
			in.fill(int(min(n-done, int64(len(in.buf)))))
			if in.buffered() == 0 {
				return done, in.err
			}
		}
		k := int(min(int64(in.buffered()), n-done))
		in.r += k
		in.off += int64(k)
		done += int64(k)
	}
	return done, nil
}

// readFull fills b like io.ReadFull: io.EOF when nothing was read before
// the end, io.ErrUnexpectedEOF when part was. What is not buffered yet is
// read from the source directly into b.
func (in *input) readFull(b []byte) (int, error) {
	n := copy(b, in.buf[in.r:in.w])
	in.r += n
	if n < len(b) && len(b)-n < minRead {
		// A short remainder (a header): through the buffer, so the next
		// small read does not go to the source again.
		in.r, in.w = 0, 0
		in.fill(len(b) - n)
		k := copy(b[n:], in.buf[in.r:in.w])
		in.r += k
		n += k
	}
	for n < len(b) {
		k := in.read(b[n:])
		if k == 0 {
			break
		}
		n += k
	}
	in.off += int64(n)
	switch {
	case n == len(b):
		return n, nil
	case n > 0 && in.err == io.EOF:
		return n, io.ErrUnexpectedEOF
	}
	return n, in.err
}
