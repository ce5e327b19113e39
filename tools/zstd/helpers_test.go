package zstd

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"

	kzstd "github.com/klauspost/compress/zstd"
)

// Deterministic test inputs.

func randomData(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for k := 0; k < 8; k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

var words = strings.Fields(`the of and to in is that for it as was with be by on not he this are or his
from at which but have an they you were her she there been one all we their has would when if so no
will more can out into up who do time some could them other than then now only its over also new
disk image partition sector block kernel initramfs provision server gpu firmware boot loader grub
efi nvme device driver module config network address interface route table checksum stream frame`)

// textData makes compressible, text-like data: words with a skewed
// distribution, punctuation and line breaks, plus some repeated lines so
// there are long matches at various distances.
func textData(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	var b bytes.Buffer
	var lines [][]byte
	for b.Len() < n {
		if len(lines) > 8 && r.IntN(5) == 0 {
			b.Write(lines[r.IntN(len(lines))])
			continue
		}
		start := b.Len()
		nw := 3 + r.IntN(12)
		for i := 0; i < nw; i++ {
			w := words[min(r.IntN(len(words)), r.IntN(len(words)))]
			b.WriteString(w)
			if r.IntN(9) == 0 {
				fmt.Fprintf(&b, " %d", r.IntN(100000))
			}
			b.WriteByte(' ')
		}
		b.WriteString(".\n")
		lines = append(lines, bytes.Clone(b.Bytes()[start:]))
	}
	return b.Bytes()[:n]
}

// diskData looks like a disk image: zero regions with islands of random
// and text-like data.
func diskData(n, region int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 3))
	b := make([]byte, n)
	for off := 0; off < n; off += region {
		end := min(off+region, n)
		switch r.IntN(10) {
		case 0:
			copy(b[off:end], randomData(end-off, r.Uint64()))
		case 1:
			// a partly filled region: data then zeros
			k := r.IntN(end - off + 1)
			copy(b[off:off+k], textData(k, r.Uint64()))
		case 2:
			// a run of a non-zero byte (0xff is common: erased flash)
			fill(b[off:end], 0xff)
		}
	}
	return b
}

type namedInput struct {
	name string
	data []byte
}

func testInputs(short bool) []namedInput {
	in := []namedInput{
		{"empty", nil},
		{"one", []byte{'x'}},
		{"zero1", []byte{0}},
		{"text-1k", textData(1000, 1)},
		{"random-127k", randomData(127<<10, 2)},
		{"text-128k-1", textData(128<<10-1, 3)},
		{"text-128k", textData(128<<10, 4)},
		{"text-128k+1", textData(128<<10+1, 5)},
		{"zeros-128k+1", make([]byte, 128<<10+1)},
		{"repetitive-300k", bytes.Repeat([]byte("abcdefghij0123456789"), 15000)},
	}
	if !short {
		in = append(in,
			namedInput{"zeros-1m", make([]byte, 1<<20)},
			namedInput{"disk-3m", diskData(3<<20, 64<<10, 6)},
			namedInput{"text-2m", textData(2<<20, 7)},
			namedInput{"random-1m", randomData(1<<20, 8)},
		)
	}
	return in
}

// decodeAll decodes with this package, reading with the given buffer
// size to exercise the streaming path.
func decodeAll(comp []byte, bufSize int, opts ...Option) ([]byte, error) {
	r, err := NewReader(bytes.NewReader(comp), opts...)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out bytes.Buffer
	buf := make([]byte, bufSize)
	for {
		n, err := r.Read(buf)
		out.Write(buf[:n])
		if err == io.EOF {
			return out.Bytes(), nil
		}
		if err != nil {
			return out.Bytes(), err
		}
	}
}

func checkDecode(t *testing.T, name string, comp, want []byte) {
	t.Helper()
	for _, bs := range []int{1 << 20, 4093} {
		got, err := decodeAll(comp, bs)
		if err != nil {
			t.Fatalf("%s: decode (buffer %d): %v", name, bs, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: output differs (buffer %d): got %d bytes, want %d; first difference at %d",
				name, bs, len(got), len(want), firstDiff(got, want))
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func klauspostEncode(t testing.TB, data []byte, stream bool, opts ...kzstd.EOption) []byte {
	t.Helper()
	w, err := kzstd.NewWriter(nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if !stream {
		return w.EncodeAll(data, nil)
	}
	var buf bytes.Buffer
	w.Reset(&buf)
	// Write in uneven pieces so frames see several flush points.
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 200<<10+17)
		if _, err := w.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zstdCLI(t testing.TB) string {
	p, err := exec.LookPath("zstd")
	if err != nil {
		t.Skip("zstd(1) not installed")
	}
	return p
}

func cliEncode(t testing.TB, bin string, data []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-c", "-q"}, args...)...)
	cmd.Stdin = bytes.NewReader(data)
	var out, stderr bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("zstd %v: %v: %s", args, err, stderr.String())
	}
	return out.Bytes()
}

var execLookPath = exec.LookPath
