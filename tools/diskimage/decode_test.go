package diskimage

import (
	"context"
	"crypto/rand"
	"os/exec"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func TestZstdContentSize(t *testing.T) {
	magic := []byte{0x28, 0xB5, 0x2F, 0xFD}
	frame := func(rest ...byte) []byte { return append(append([]byte(nil), magic...), rest...) }
	for _, c := range []struct {
		name string
		b    []byte
		want uint64
		ok   bool
	}{
		// FHD 0x20: single segment, FCS flag 0 → 1-byte FCS.
		{"single segment, 1 byte", frame(0x20, 200, 0, 0), 200, true},
		// FCS flag 1 → 2 bytes, value + 256; window descriptor present.
		{"2 bytes plus 256", frame(0x40, 0x58, 0x34, 0x12), 0x1234 + 256, true},
		// FCS flag 2, dictionary id flag 1 (1 byte), window descriptor.
		{"4 bytes after dict id", frame(0x81, 0x58, 0x07, 0x00, 0x00, 0x00, 0x40), 1 << 30, true},
		{"8 bytes single segment", frame(0xE0, 0, 0, 0, 0, 0x02, 0, 0, 0), 1 << 33, true},
		{"not recorded", frame(0x00, 0x58, 0, 0), 0, false},
		{"cut header", frame(0x80, 0x58, 1), 0, false},
		{"skippable frame first", []byte{0x50, 0x2A, 0x4D, 0x18, 4, 0, 0, 0}, 0, false},
	} {
		got, ok := zstdContentSize(c.b)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: got %d %v, want %d %v", c.name, got, ok, c.want, c.ok)
		}
	}
	// The encoder's own header agrees.
	enc, _ := zstd.NewWriter(nil)
	b := enc.EncodeAll(make([]byte, 3<<20), nil)
	if got, ok := zstdContentSize(b); !ok || got != 3<<20 {
		t.Errorf("klauspost frame: %d %v", got, ok)
	}
}

// The automatic choice runs zstd(1) for a stream that expands and stays
// in Go for one that is stored (random data), as the header says.
func TestDecoderChoice(t *testing.T) {
	if _, err := exec.LookPath("zstd"); err != nil {
		t.Skip("zstd(1) not installed")
	}
	random := make([]byte, 4<<20)
	rand.Read(random)
	zeros := make([]byte, 4<<20)
	copy(zeros, random[:4096])
	enc, _ := zstd.NewWriter(nil)
	files := map[string][]byte{"random": enc.EncodeAll(random, nil), "zeros": enc.EncodeAll(zeros, nil)}
	srv := newRangeServer(t, files)
	for name, want := range map[string]string{"random": "go zstd", "zeros": "/zstd"} {
		art := files[name]
		res, err := Write(context.Background(), Options{URL: srv.URL + "/" + name, SHA256: hexSum(art), Size: int64(len(art)), Format: FormatZstd, Target: emptyTarget(t)})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(res.Decoder, want) {
			t.Errorf("%s: decoder %q, want %q", name, res.Decoder, want)
		}
	}
}
