package zstd

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	kzstd "github.com/klauspost/compress/zstd"
)

// fuzzMaxOut bounds how much output one fuzz input may produce; inputs that
// decode to more (runs of RLE blocks) are only checked for not panicking.
const fuzzMaxOut = 16 << 20

func FuzzDecode(f *testing.F) {
	seeds := [][]byte{
		nil,
		textData(100, 1),
		textData(3000, 2),
		randomData(300, 3),
		make([]byte, 5000),
		bytes.Repeat([]byte("abcab"), 700),
		append(textData(2000, 4), make([]byte, 2000)...),
	}
	for _, s := range seeds {
		for _, lvl := range []kzstd.EncoderLevel{kzstd.SpeedFastest, kzstd.SpeedBestCompression} {
			f.Add(klauspostEncode(f, s, false, kzstd.WithEncoderLevel(lvl)))
			f.Add(klauspostEncode(f, s, true, kzstd.WithEncoderLevel(lvl), kzstd.WithWindowSize(1<<10), kzstd.WithEncoderCRC(false)))
		}
	}
	// Inputs both decoders must reject, and one both must accept: a
	// flipped content checksum, a truncated frame, a frame after a
	// skippable one, and a frame declaring a 16 MiB window (over the 8 MiB
	// limit both are given below).
	good := klauspostEncode(f, textData(3000, 5), false)
	badSum := bytes.Clone(good)
	badSum[len(badSum)-1] ^= 1
	f.Add(badSum)
	f.Add(good[:len(good)-1])
	f.Add(append([]byte{0x50, 0x2A, 0x4D, 0x18, 3, 0, 0, 0, 'a', 'b', 'c'}, good...))
	f.Add([]byte{0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x70, 0x01, 0x00, 0x00}) // window 2^24, one empty raw block
	if bin, err := execLookPath("zstd"); err == nil {
		for _, s := range seeds[1:] {
			f.Add(cliEncode(f, bin, s, "-19"))
			f.Add(cliEncode(f, bin, s, "-1", "--no-check"))
		}
	}

	kdec, err := kzstd.NewReader(nil, kzstd.WithDecoderConcurrency(1),
		kzstd.WithDecoderMaxMemory(fuzzMaxOut), kzstd.WithDecoderMaxWindow(8<<20))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := NewReader(bytes.NewReader(in), WithMaxWindow(8<<20))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(io.LimitReader(r, fuzzMaxOut+1))
		// The source's piece sizes must not matter (raw blocks bypass the
		// input buffer, the rest goes through it): halves decode the same.
		rh, _ := NewReader(iotest.HalfReader(bytes.NewReader(in)), WithMaxWindow(8<<20))
		if goth, errh := io.ReadAll(io.LimitReader(rh, fuzzMaxOut+1)); (err == nil) != (errh == nil) || !bytes.Equal(got, goth) {
			t.Fatalf("read in halves: %d bytes, err %v; read whole: %d bytes, err %v", len(goth), errh, len(got), err)
		}
		// Zero runs skipped (SkipZeros) stand for the same zeros.
		rz, _ := NewReader(bytes.NewReader(in), WithMaxWindow(8<<20))
		if gotz, errz := readSkippingZeros(rz, fuzzMaxOut+1); (err == nil) != (errz == nil) || !bytes.Equal(got, gotz) {
			t.Fatalf("read skipping zeros: %d bytes, err %v; read whole: %d bytes, err %v", len(gotz), errz, len(got), err)
		}
		want, kerr := kdec.DecodeAll(in, nil)
		// Past the output bound the decoders stop for different reasons
		// (our LimitReader, klauspost's max memory): nothing to compare.
		if len(got) > fuzzMaxOut || errors.Is(kerr, kzstd.ErrDecoderSizeExceeded) {
			return
		}
		switch {
		case err != nil && kerr == nil:
			// A false rejection: an image klauspost and zstd(1) decode
			// would fail to install.
			t.Fatalf("cure rejects what klauspost decodes (%d bytes): %v", len(want), err)
		case err == nil && kerr != nil:
			// A false acceptance: corrupt input written to a disk as if good.
			t.Fatalf("cure accepts (%d bytes) what klauspost rejects: %v", len(got), kerr)
		case err != nil:
			return // both reject
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("both decoders succeed but differ: got %d bytes, klauspost %d, first difference at %d",
				len(got), len(want), firstDiff(got, want))
		}
	})
}

// readSkippingZeros reads r to the end (or limit bytes) through SkipZeros
// and 1000-byte Reads, standing the zeros skipped in for themselves.
func readSkippingZeros(r *Reader, limit int) ([]byte, error) {
	var out []byte
	buf := make([]byte, 1000)
	for len(out) < limit {
		if k := r.SkipZeros(min(3000, limit-len(out))); k > 0 {
			out = append(out, make([]byte, k)...)
			continue
		}
		n, err := r.Read(buf[:min(len(buf), limit-len(out))])
		out = append(out, buf[:n]...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}
