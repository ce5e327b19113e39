package zstd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"testing/iotest"
	"unsafe"

	kzstd "github.com/klauspost/compress/zstd"
)

// stutterReader returns (0, nil) twice before every read and at most max
// bytes per read: legal io.Reader behaviour the input must ride out.
type stutterReader struct {
	r     io.Reader
	max   int
	calls int
}

func (s *stutterReader) Read(p []byte) (int, error) {
	s.calls++
	if s.calls%3 != 0 {
		return 0, nil
	}
	return s.r.Read(p[:min(len(p), s.max)])
}

// skippable is a skippable frame of n bytes of payload.
func skippable(n int) []byte {
	b := make([]byte, 8+n)
	binary.LittleEndian.PutUint32(b, skippableMagic|7)
	binary.LittleEndian.PutUint32(b[4:], uint32(n))
	return b
}

// Every way a source may hand out its bytes decodes to the same output:
// stored (raw-block) frames, compressed ones, and a skippable frame
// larger than the input buffer in front.
func TestInputSources(t *testing.T) {
	stored := randomData(700<<10, 81)
	mixed := append(textData(200<<10, 82), diskData(400<<10, 16<<10, 83)...)
	rawFrame := klauspostEncode(t, stored, false)
	if len(rawFrame) <= len(stored) {
		t.Fatalf("random data compressed to %d of %d bytes: the test needs raw blocks", len(rawFrame), len(stored))
	}
	streams := map[string]struct{ comp, want []byte }{
		"stored":             {rawFrame, stored},
		"mixed":              {klauspostEncode(t, mixed, false), mixed},
		"skippable + stored": {append(skippable(300<<10), rawFrame...), stored},
		"stored + mixed":     {append(bytes.Clone(rawFrame), klauspostEncode(t, mixed, true)...), append(bytes.Clone(stored), mixed...)},
	}
	sources := map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"halves":   iotest.HalfReader,
		"data+EOF": iotest.DataErrReader,
		"stutter":  func(r io.Reader) io.Reader { return &stutterReader{r: r, max: 7001} },
	}
	for sname, s := range streams {
		for rname, wrap := range sources {
			t.Run(sname+"/"+rname, func(t *testing.T) {
				z, err := NewReader(wrap(bytes.NewReader(s.comp)))
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(z)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, s.want) {
					t.Fatalf("decoded %d bytes, want %d; first difference at %d", len(got), len(s.want), firstDiff(got, s.want))
				}
			})
		}
	}
}

// failAfter hands out n bytes of r, then fails with err.
type failAfter struct {
	r   io.Reader
	n   int
	err error
}

func (f *failAfter) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, f.err
	}
	k, err := f.r.Read(p[:min(len(p), f.n)])
	f.n -= k
	return k, err
}

// A source's error surfaces as itself wherever it strikes: in a block
// header, a raw block read directly, a compressed block, a skippable
// frame. A source that never makes progress is an error, not a hang.
func TestInputSourceErrors(t *testing.T) {
	errNet := errors.New("connection reset")
	stored := klauspostEncode(t, randomData(300<<10, 91), false)
	comp := klauspostEncode(t, textData(300<<10, 92), false)
	skip := append(skippable(200<<10), stored...)
	for _, c := range []struct {
		name string
		in   []byte
		cut  int
	}{
		{"frame header", stored, 5},
		{"raw block", stored, 100 << 10},
		{"second raw block", stored, 200 << 10},
		{"compressed block", comp, len(comp) / 2},
		{"skippable frame", skip, 150 << 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			z, _ := NewReader(&failAfter{r: bytes.NewReader(c.in), n: c.cut, err: errNet})
			got, err := io.ReadAll(z)
			if !errors.Is(err, errNet) {
				t.Fatalf("err = %v after %d bytes, want the source's error", err, len(got))
			}
			// Sticky: the source is not asked again.
			if _, err2 := z.Read(make([]byte, 10)); !errors.Is(err2, errNet) {
				t.Errorf("second read: %v", err2)
			}
		})
	}
	z, _ := NewReader(readerFunc(func([]byte) (int, error) { return 0, nil }))
	if _, err := io.ReadAll(z); !errors.Is(err, io.ErrNoProgress) {
		t.Errorf("source without progress: err = %v, want io.ErrNoProgress", err)
	}
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// spyReader records how many bytes each read delivered into dst.
type spyReader struct {
	r        io.Reader
	dst      []byte // the input buffer
	intoDst  int
	elsewise int
}

func (s *spyReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 && within(p, s.dst) {
		s.intoDst += n
	} else {
		s.elsewise += n
	}
	return n, err
}

func within(p, buf []byte) bool {
	a, lo := uintptr(unsafe.Pointer(&p[0])), uintptr(unsafe.Pointer(&buf[0]))
	return a >= lo && a < lo+uintptr(len(buf))
}

// Stored data goes from the source straight into the window: all but the
// block headers and what a header read brings along (minRead, 1/16 of
// the 64 KiB blocks this encoder writes) bypasses the input buffer, so
// most bytes are copied once on their way in, not twice.
func TestRawBlocksBypassInputBuffer(t *testing.T) {
	data := randomData(4<<20, 95)
	comp := klauspostEncode(t, data, false, kzstd.WithEncoderLevel(kzstd.SpeedFastest))
	spy := &spyReader{r: bytes.NewReader(comp)}
	z, _ := NewReader(spy)
	spy.dst = z.in.buf
	got, err := io.ReadAll(z)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("decode: err=%v equal=%v", err, bytes.Equal(got, data))
	}
	if total := spy.intoDst + spy.elsewise; spy.intoDst > total/10 {
		t.Errorf("%d of %d input bytes went through the input buffer, want under 10%%", spy.intoDst, total)
	}
	// Compressed blocks must be whole in the buffer to be decoded: they
	// go through it.
	text := textData(1<<20, 96)
	comp = klauspostEncode(t, text, false)
	spy = &spyReader{r: bytes.NewReader(comp)}
	z, _ = NewReader(spy)
	spy.dst = z.in.buf
	if got, err := io.ReadAll(z); err != nil || !bytes.Equal(got, text) {
		t.Fatalf("decode text: err=%v", err)
	}
	if spy.elsewise > len(comp)/20 {
		t.Errorf("%d of %d bytes of a compressed stream bypassed the input buffer", spy.elsewise, len(comp))
	}
}
