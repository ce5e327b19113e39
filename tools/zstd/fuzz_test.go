package zstd

import (
	"bytes"
	"errors"
	"io"
	"testing"

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
		want, kerr := kdec.DecodeAll(in, nil)
		// Past the output bound the decoders stop for different reasons
		// (our LimitReader, klauspost's max memory): nothing to compare.
		if len(got) > fuzzMaxOut || errors.Is(kerr, kzstd.ErrDecoderSizeExceeded) {
			return
		}
		// Both decoders enforce the same 8 MiB window; klauspost's own
		// limit error is the agreement case for ours.
		if errors.Is(err, ErrWindowTooLarge) && errors.Is(kerr, kzstd.ErrWindowSizeExceeded) {
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
