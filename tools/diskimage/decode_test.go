package diskimage

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
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

func TestChooseZstd(t *testing.T) {
	header := func(content uint64) []byte { // single segment, 8-byte FCS
		b := []byte{0x28, 0xB5, 0x2F, 0xFD, 0xE0}
		for i := 0; i < 8; i++ {
			b = append(b, byte(content>>(8*i)))
		}
		return b
	}
	noSize := []byte{0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x58}
	for _, c := range []struct {
		name, choice string
		head         []byte
		size         int64
		exec         bool
		want         string
	}{
		{"stored stream", DecoderAuto, header(1 << 30), 1<<30 + 4096, true, DecoderCureZstd},
		{"mostly zeros (R=12)", DecoderAuto, header(12 << 30), 1 << 30, true, DecoderCureZstd},
		{"filesystem data (R=3.4)", DecoderAuto, header(34 << 20), 10 << 20, true, DecoderExec},
		{"filesystem data, no zstd(1)", DecoderAuto, header(34 << 20), 10 << 20, false, DecoderKlauspostZstd},
		{"filesystem data, Go only", DecoderGo, header(34 << 20), 10 << 20, true, DecoderKlauspostZstd},
		{"R just under 10", DecoderAuto, header(99 << 20), 10 << 20, true, DecoderExec},
		{"no content size recorded", DecoderAuto, noSize, 10 << 20, true, DecoderExec},
		{"forced cure", DecoderCureZstd, header(34 << 20), 10 << 20, true, DecoderCureZstd},
		{"forced exec on a sparse image", DecoderExec, header(12 << 30), 1 << 30, true, DecoderExec},
	} {
		if got := chooseZstd(c.choice, c.head, c.size, c.exec); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// Through Write, the choice follows the frame header: cure's decoder for a
// stored stream and for a sparse one, zstd(1) for a compressible one.
func TestDecoderChoice(t *testing.T) {
	if _, err := exec.LookPath("zstd"); err != nil {
		t.Skip("zstd(1) not installed")
	}
	random := make([]byte, 4<<20)
	rand.Read(random)
	zeros := make([]byte, 4<<20)
	copy(zeros, random[:4096])
	// Words drawn at random from a small vocabulary: ~3x, like filesystem data.
	words := strings.Fields("the quick brown fox jumps over lazy dog kernel module firmware disk node rack power boot image")
	var tb strings.Builder
	for i := 0; tb.Len() < 4<<20; i++ {
		tb.WriteString(words[int(random[i%len(random)])%len(words)])
		tb.WriteByte(" \n"[random[(i+1)%len(random)]&1])
	}
	text := []byte(tb.String())[:4<<20]
	enc, _ := zstd.NewWriter(nil)
	files := map[string][]byte{"random": enc.EncodeAll(random, nil), "zeros": enc.EncodeAll(zeros, nil), "text": enc.EncodeAll(text, nil)}
	srv := newRangeServer(t, files)
	for name, want := range map[string]string{"random": "cure zstd", "zeros": "cure zstd", "text": "/zstd"} {
		art := files[name]
		res, err := Write(context.Background(), Options{URL: srv.URL + "/" + name, SHA256: hexSum(art), Size: int64(len(art)), Format: FormatZstd, Target: emptyTarget(t)})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(res.Decoder, want) {
			t.Errorf("%s (R=%.1f): decoder %q, want %q", name, float64(4<<20)/float64(len(art)), res.Decoder, want)
		}
	}
}

// chooseZstd picks, for each class of BenchmarkZstdDecoders, the decoder
// the table in decode.go measured fastest in its 2-core column: with
// zstd(1) at hand the winner, in Go only the faster Go decoder. R is the
// class's measured expansion; the synthetic classes are also encoded here
// (by klauspost, 4 MiB) to check they land on the same side of the
// thresholds.
func TestChooseZstdFollowsBenchmark(t *testing.T) {
	header := func(content uint64) []byte { // single segment, 8-byte FCS
		b := []byte{0x28, 0xB5, 0x2F, 0xFD, 0xE0}
		for i := 0; i < 8; i++ {
			b = append(b, byte(content>>(8*i)))
		}
		return b
	}
	table := map[string]struct {
		r            float64
		winner, inGo string
	}{
		"zero90": {13.8, DecoderCureZstd, DecoderCureZstd},
		"ext4":   {7.2, DecoderExec, DecoderKlauspostZstd},
		"stored": {1.0, DecoderCureZstd, DecoderCureZstd},
		"text":   {2.9, DecoderExec, DecoderKlauspostZstd},
	}
	enc, _ := zstd.NewWriter(nil)
	defer enc.Close()
	for _, c := range zstdClasses {
		row, ok := table[c.name]
		if !ok {
			t.Fatalf("class %s has no row in the table", c.name)
		}
		const size = 1 << 30
		head := header(uint64(row.r * size))
		if got := chooseZstd(DecoderAuto, head, size, true); got != row.winner {
			t.Errorf("%s (R=%.1f): %s, the table's winner is %s", c.name, row.r, got, row.winner)
		}
		if got := chooseZstd(DecoderGo, head, size, true); got != row.inGo {
			t.Errorf("%s (R=%.1f), Go only: %s, the table's winner is %s", c.name, row.r, got, row.inGo)
		}
		if c.name != "stored" && c.name != "text" {
			continue // zero90 needs 128 MiB to be itself, ext4 mkfs.ext4
		}
		data, err := c.make(t, 4)
		if err != nil {
			t.Fatal(err)
		}
		comp := enc.EncodeAll(data, nil)
		if got := chooseZstd(DecoderAuto, comp, int64(len(comp)), true); got != row.winner {
			t.Errorf("%s encoded here (R=%.1f): %s, the table's winner is %s", c.name, float64(len(data))/float64(len(comp)), got, row.winner)
		}
	}
}

// TestVerifiedSkipsContentChecksum: behind a chunk list the Go zstd
// decoders leave the frame's XXH64 to the chunk digests; without one a
// wrong checksum still fails the stream.
func TestVerifiedSkipsContentChecksum(t *testing.T) {
	enc, _ := zstd.NewWriter(nil, zstd.WithEncoderCRC(true))
	want := bytes.Repeat([]byte("cure "), 50000)
	b := enc.EncodeAll(want, nil)
	b[len(b)-1] ^= 0xff // the Content_Checksum's last byte
	for _, choice := range []string{DecoderCureZstd, DecoderKlauspostZstd} {
		for _, verified := range []bool{false, true} {
			d, err := newDecoder(FormatZstd, choice, bytes.NewReader(b), int64(len(b)), verified)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(d)
			d.close()
			if verified && (err != nil || !bytes.Equal(got, want)) {
				t.Errorf("%s verified: err=%v, %d of %d bytes", choice, err, len(got), len(want))
			}
			if !verified && err == nil {
				t.Errorf("%s unverified: a wrong content checksum was accepted", choice)
			}
		}
	}
}
