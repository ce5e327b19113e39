package zstd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"testing"
	"testing/iotest"

	kzstd "github.com/klauspost/compress/zstd"
)

func TestKlauspostRoundTrip(t *testing.T) {
	levels := []kzstd.EncoderLevel{kzstd.SpeedFastest, kzstd.SpeedDefault, kzstd.SpeedBetterCompression, kzstd.SpeedBestCompression}
	for _, in := range testInputs(testing.Short()) {
		for _, lvl := range levels {
			for _, crc := range []bool{true, false} {
				for _, stream := range []bool{false, true} {
					name := fmt.Sprintf("%s/%v/crc=%v/stream=%v", in.name, lvl, crc, stream)
					comp := klauspostEncode(t, in.data, stream,
						kzstd.WithEncoderLevel(lvl), kzstd.WithEncoderCRC(crc), kzstd.WithEncoderConcurrency(1))
					checkDecode(t, name, comp, in.data)
				}
			}
		}
	}
}

// Small windows force matches that reach back across many blocks and make
// the history ring wrap many times.
func TestKlauspostSmallWindows(t *testing.T) {
	text := textData(1<<20, 11)
	// Long-range structure: the same 600-byte chunks recur at distances
	// just under 1 KiB and much further.
	var rep bytes.Buffer
	chunks := [][]byte{textData(600, 12), randomData(600, 13), textData(600, 14)}
	for i := 0; rep.Len() < 1<<20; i++ {
		rep.Write(chunks[i%3])
		rep.Write(randomData(i%50, uint64(i)))
	}
	disk := diskData(2<<20, 16<<10, 15)
	for _, w := range []int{1 << 10, 1 << 12, 1 << 17, 1 << 18} {
		for _, in := range []namedInput{{"text", text}, {"rep", rep.Bytes()}, {"disk", disk}} {
			for _, lvl := range []kzstd.EncoderLevel{kzstd.SpeedFastest, kzstd.SpeedBetterCompression} {
				comp := klauspostEncode(t, in.data, true, kzstd.WithWindowSize(w), kzstd.WithEncoderLevel(lvl),
					kzstd.WithEncoderConcurrency(1))
				checkDecode(t, fmt.Sprintf("window=%d/%s/%v", w, in.name, lvl), comp, in.data)
			}
		}
	}
}

func TestCLIRoundTrip(t *testing.T) {
	bin := zstdCLI(t)
	type cfg struct {
		args    []string
		maxSize int // skip larger inputs (level 19 is slow)
	}
	cfgs := []cfg{
		{[]string{"-1"}, 1 << 30},
		{[]string{"-3"}, 1 << 30},
		{[]string{"-9"}, 1 << 30},
		{[]string{"-19"}, 300 << 10},
		{[]string{"-3", "--long=27"}, 1 << 30},
		{[]string{"-3", "-T0"}, 1 << 30},
		{[]string{"-5", "-T2", "--no-check"}, 1 << 30},
		{[]string{"-3", "--no-check"}, 1 << 30},
		// Minimum window: the ring wraps constantly.
		{[]string{"-3", "--zstd=wlog=10"}, 1 << 30},
		{[]string{"-12", "--zstd=wlog=17"}, 1 << 30},
		// Without a known size zstd(1) writes no Frame_Content_Size.
		{[]string{"-3", "--no-content-size"}, 1 << 30},
	}
	for _, in := range testInputs(testing.Short()) {
		for _, c := range cfgs {
			if len(in.data) > c.maxSize {
				continue
			}
			comp := cliEncode(t, bin, in.data, c.args...)
			checkDecode(t, fmt.Sprintf("%s/%v", in.name, c.args), comp, in.data)
		}
	}
}

// TestConcatenated checks multiple frames from different encoders with
// skippable frames between them, read through a one-byte-at-a-time reader.
func TestConcatenated(t *testing.T) {
	parts := [][]byte{textData(50<<10, 20), nil, diskData(300<<10, 8<<10, 21), []byte("tail")}
	var comp, want bytes.Buffer
	skippable := func(nibble byte, payload []byte) {
		var h [8]byte
		binary.LittleEndian.PutUint32(h[:], 0x184D2A50|uint32(nibble))
		binary.LittleEndian.PutUint32(h[4:], uint32(len(payload)))
		comp.Write(h[:])
		comp.Write(payload)
	}
	skippable(0, []byte("leading skippable frame"))
	for i, p := range parts {
		comp.Write(klauspostEncode(t, p, i%2 == 1, kzstd.WithEncoderCRC(i%2 == 0)))
		want.Write(p)
		skippable(byte(i*5), make([]byte, i*1000))
	}
	if bin, err := execLookZstd(); err == nil {
		p := textData(200<<10, 22)
		comp.Write(cliEncode(t, bin, p, "-3"))
		want.Write(p)
	}
	skippable(15, nil)
	checkDecode(t, "concatenated", comp.Bytes(), want.Bytes())

	r, err := NewReader(iotest.OneByteReader(bytes.NewReader(comp.Bytes())))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("one-byte reader: %v", err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("one-byte reader: output differs at %d", firstDiff(got, want.Bytes()))
	}

	// WriteTo (used by io.Copy) must give the same bytes.
	r2, _ := NewReader(bytes.NewReader(comp.Bytes()))
	var sink bytes.Buffer
	n, err := io.Copy(&sink, r2)
	if err != nil || n != int64(want.Len()) || !bytes.Equal(sink.Bytes(), want.Bytes()) {
		t.Fatalf("io.Copy: n=%d err=%v equal=%v", n, err, bytes.Equal(sink.Bytes(), want.Bytes()))
	}
}

// TestReuseAcrossFrames decodes a small-window frame after a large one:
// the ring must reset and not let the second frame see the first.
func TestReuseAcrossFrames(t *testing.T) {
	a := textData(3<<20, 30)
	b := textData(700<<10, 31)
	var comp bytes.Buffer
	comp.Write(klauspostEncode(t, a, true, kzstd.WithWindowSize(1<<20)))
	comp.Write(klauspostEncode(t, b, true, kzstd.WithWindowSize(1<<15)))
	comp.Write(klauspostEncode(t, a[:1<<20], false))
	want := append(append(bytes.Clone(a), b...), a[:1<<20]...)
	checkDecode(t, "reuse", comp.Bytes(), want)
}

func execLookZstd() (string, error) {
	return execLookPath("zstd")
}

func TestTruncated(t *testing.T) {
	data := append(textData(40<<10, 40), diskData(200<<10, 4<<10, 41)...)
	frames := map[string][]byte{
		"klauspost": klauspostEncode(t, data, false),
		"raw":       klauspostEncode(t, randomData(1000, 42), false),
	}
	if bin, err := execLookZstd(); err == nil {
		frames["cli"] = cliEncode(t, bin, data, "-3")
	}
	for name, comp := range frames {
		step := max(1, len(comp)/400)
		for cut := 1; cut < len(comp); cut += step {
			got, err := decodeAll(comp[:cut], 1<<20)
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("%s cut at %d/%d: got err %v (%d bytes), want io.ErrUnexpectedEOF", name, cut, len(comp), err, len(got))
			}
		}
		// Cutting right after a complete frame is a clean end.
		if _, err := decodeAll(comp, 1<<20); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if got, err := decodeAll(nil, 10); err != nil || len(got) != 0 {
		t.Fatalf("empty input: %v, %d bytes", err, len(got))
	}
}

// TestCorrupt flips bytes of checksummed frames: every result must be an
// error or the original output (a flip in a don't-care header bit), never a
// panic or a hang.
func TestCorrupt(t *testing.T) {
	data := append(textData(30<<10, 50), diskData(100<<10, 4<<10, 51)...)
	frames := map[string][]byte{
		"fast": klauspostEncode(t, data, false, kzstd.WithEncoderLevel(kzstd.SpeedFastest)),
		"best": klauspostEncode(t, data, true, kzstd.WithEncoderLevel(kzstd.SpeedBestCompression), kzstd.WithWindowSize(1<<12)),
	}
	if bin, err := execLookZstd(); err == nil {
		frames["cli"] = cliEncode(t, bin, data, "-19")
	}
	for name, comp := range frames {
		errs, same := 0, 0
		step := max(1, len(comp)/600)
		for pos := 0; pos < len(comp); pos += step {
			for _, mask := range []byte{0x01, 0x80, 0xff} {
				bad := bytes.Clone(comp)
				bad[pos] ^= mask
				got, err := decodeAll(bad, 1<<20)
				switch {
				case err != nil:
					errs++
				case bytes.Equal(got, data):
					same++
				default:
					t.Fatalf("%s: flip 0x%02x at %d: no error but output differs at %d", name, mask, pos, firstDiff(got, data))
				}
			}
		}
		if errs == 0 {
			t.Fatalf("%s: no flip was detected", name)
		}
		t.Logf("%s: %d flips detected, %d harmless", name, errs, same)
	}
}

func TestErrors(t *testing.T) {
	frame := func(fhd byte, rest ...byte) []byte {
		return append([]byte{0x28, 0xb5, 0x2f, 0xfd, fhd}, rest...)
	}
	lastRaw := []byte{0x01, 0, 0} // last, raw, size 0
	for _, tc := range []struct {
		name string
		in   []byte
		is   error
		opts []Option
	}{
		{"bad magic", []byte{1, 2, 3, 4, 5, 6, 7, 8}, ErrCorrupt, nil},
		{"reserved fhd bit", frame(0x08, append([]byte{0x00}, lastRaw...)...), ErrCorrupt, nil},
		{"dictionary", frame(0x01, append([]byte{0x00, 0x07}, lastRaw...)...), ErrDictionary, nil},
		// Window_Descriptor exponent 20: 1 GiB.
		{"window 1GiB", frame(0x00, append([]byte{20 << 3}, lastRaw...)...), ErrWindowTooLarge, nil},
		{"window over option", frame(0x00, append([]byte{10 << 3}, lastRaw...)...), ErrWindowTooLarge, []Option{WithMaxWindow(1 << 19)}},
		{"reserved block", frame(0x00, 0x00, 0x07, 0, 0), ErrCorrupt, nil},
		{"raw block over max", frame(0x00, 0x00, 0x01, 0x00, 0x01), ErrCorrupt, nil},  // 8 KiB > 1 KiB window
		{"fcs too small", frame(0x20, 2, 0x19, 0, 0, 'a', 'b', 'c'), ErrCorrupt, nil}, // single segment FCS=2, raw 3
		{"fcs too large", frame(0x20, 4, 0x19, 0, 0, 'a', 'b', 'c'), ErrCorrupt, nil},
		{"checksum", frame(0x04, append(append([]byte{0x00}, lastRaw...), 1, 2, 3, 4)...), ErrChecksum, nil},
		{"treeless first", frame(0x00, 0x00, 0x25, 0, 0, 0x03, 0, 0, 0), ErrCorrupt, nil},
		{"truncated header", frame(0x00), io.ErrUnexpectedEOF, nil},
	} {
		_, err := decodeAll(tc.in, 100, tc.opts...)
		if !errors.Is(err, tc.is) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.is)
			continue
		}
		t.Logf("%s: %v", tc.name, err)
	}
	if _, err := NewReader(nil, WithMaxWindow(1)); err == nil {
		t.Error("WithMaxWindow(1) accepted")
	}
	r, _ := NewReader(bytes.NewReader(nil))
	r.Close()
	if _, err := r.Read(make([]byte, 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("read after close: %v", err)
	}
}

// TestWindowLimitCLI checks that --long=27 frames are refused under a
// smaller limit and accepted with the default one.
func TestWindowLimitCLI(t *testing.T) {
	bin := zstdCLI(t)
	data := textData(100<<10, 60)
	comp := cliEncode(t, bin, data, "--long=27", "--no-content-size")
	if _, err := decodeAll(comp, 1<<16, WithMaxWindow(1<<26)); !errors.Is(err, ErrWindowTooLarge) {
		t.Fatalf("want ErrWindowTooLarge, got %v", err)
	}
	checkDecode(t, "long27", comp, data)
}

// TestMemoryBound decodes a stream much longer than its window and checks
// the ring never grew past window + one block + slack.
func TestMemoryBound(t *testing.T) {
	data := diskData(4<<20, 32<<10, 70)
	const window = 1 << 15
	comp := klauspostEncode(t, data, true, kzstd.WithWindowSize(window))
	r, err := NewReader(bytes.NewReader(comp))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("decode: err=%v equal=%v", err, bytes.Equal(got, data))
	}
	limit := window + window + 2*wildSlack // blockMax = window here
	if cap(r.buf) > limit {
		t.Fatalf("window buffer is %d bytes, want at most %d", cap(r.buf), limit)
	}
	if r.wrapAt == 0 {
		t.Fatalf("ring never wrapped; test does not exercise wrapping")
	}
}

// TestIgnoreChecksum: a wrong Content_Checksum is refused by default and
// read past with WithIgnoreChecksum, the content decoded all the same.
func TestIgnoreChecksum(t *testing.T) {
	// Raw block "abc", then a Content_Checksum that cannot match.
	in := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x04, 0x00, 0x19, 0, 0, 'a', 'b', 'c', 1, 2, 3, 4}
	if _, err := decodeAll(in, 100); !errors.Is(err, ErrChecksum) {
		t.Fatalf("default: got %v, want ErrChecksum", err)
	}
	got, err := decodeAll(in, 100, WithIgnoreChecksum(true))
	if err != nil || string(got) != "abc" {
		t.Fatalf("WithIgnoreChecksum: got %q, %v; want \"abc\", nil", got, err)
	}
}

// TestRLERead reads RLE blocks (which Read fills rather than copies)
// through buffers that split them at every kind of boundary.
func TestRLERead(t *testing.T) {
	rle := func(last bool, size int, v byte) []byte {
		h := size<<3 | 1<<1
		if last {
			h |= 1
		}
		return []byte{byte(h), byte(h >> 8), byte(h >> 16), v}
	}
	// Window 1 KiB; RLE 'a' ×1000, raw "xyz", RLE 0 ×700, RLE 'b' ×1 (last).
	in := []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x00}
	in = append(in, rle(false, 1000, 'a')...)
	in = append(in, 0x18, 0, 0, 'x', 'y', 'z')
	in = append(in, rle(false, 700, 0)...)
	in = append(in, rle(true, 1, 'b')...)
	want := append(append(append(bytes.Repeat([]byte{'a'}, 1000), "xyz"...), make([]byte, 700)...), 'b')
	for _, bs := range []int{1, 7, 999, 1000, 1003, 4096} {
		got, err := decodeAll(in, bs)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("buffer %d: err=%v, first difference at %d", bs, err, firstDiff(got, want))
		}
	}
}
