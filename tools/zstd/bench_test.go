package zstd

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	kzstd "github.com/klauspost/compress/zstd"
)

type benchInput struct {
	comp    []byte
	size    int64
	sum     [32]byte // sha256 of the uncompressed data
	encoder string
}

// decodedSum drains r and returns its length and sha256, so a benchmark
// proves it decoded the right bytes, not just the right number of them.
func decodedSum(r io.Reader, buf []byte) (int64, [32]byte, error) {
	h := sha256.New()
	n, err := io.CopyBuffer(h, struct{ io.Reader }{r}, buf)
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return n, sum, err
}

var (
	benchOnce   sync.Once
	benchInputs map[string]benchInput
)

// loadBenchInputs builds the streams once per process: a 256 MiB disk image
// (4 MiB regions, 90% zero, 10% random), 64 MiB random and 64 MiB text,
// and "osimage": a real ext4 filesystem over a real tree (see osImage),
// the case the 90%-zero image flatters.
func loadBenchInputs(b *testing.B) map[string]benchInput {
	benchOnce.Do(func() {
		benchInputs = map[string]benchInput{}
		disk := make([]byte, 256<<20)
		const region = 4 << 20
		for i := 0; i < len(disk)/region; i++ {
			if i%10 == 3 {
				copy(disk[i*region:], randomData(region, uint64(i)))
			}
		}
		inputs := map[string][]byte{
			"disk":   disk,
			"random": randomData(64<<20, 100),
			"text":   textData(64<<20, 101),
		}
		if img, err := osImage(b); err != nil {
			b.Logf("osimage skipped: %v", err)
		} else {
			inputs["osimage"] = img
		}
		bin, err := execLookPath("zstd")
		for name, data := range inputs {
			var comp []byte
			enc := "klauspost default"
			if err == nil {
				comp = cliEncode(b, bin, data, "-3", "-T0")
				enc = "zstd -3"
			} else {
				comp = klauspostEncode(b, data, true)
			}
			benchInputs[name] = benchInput{comp: comp, size: int64(len(data)), sum: sha256.Sum256(data), encoder: enc}
		}
	})
	return benchInputs
}

func BenchmarkDecode(b *testing.B) {
	in := loadBenchInputs(b)
	for _, name := range []string{"disk", "osimage", "random", "text"} {
		bi, ok := in[name]
		if !ok {
			continue // osimage without mkfs.ext4 (logged once)
		}
		b.Run(name+"/cure", func(b *testing.B) {
			b.SetBytes(bi.size)
			b.ReportMetric(float64(len(bi.comp))/float64(bi.size), "ratio")
			buf := make([]byte, 1<<20)
			for i := 0; i < b.N; i++ {
				r, err := NewReader(bytes.NewReader(bi.comp))
				if err != nil {
					b.Fatal(err)
				}
				n, sum, err := decodedSum(r, buf)
				if err != nil || n != bi.size || sum != bi.sum {
					b.Fatalf("decoded %d bytes (want %d), sha256 match %v, err %v", n, bi.size, sum == bi.sum, err)
				}
				r.Close()
			}
		})
		for _, conc := range []int{1, 0} {
			label := "/klauspost"
			if conc == 1 {
				label += "-sync"
			}
			b.Run(name+label, func(b *testing.B) {
				b.SetBytes(bi.size)
				buf := make([]byte, 1<<20)
				for i := 0; i < b.N; i++ {
					opts := []kzstd.DOption{kzstd.WithDecoderMaxWindow(512 << 20)}
					if conc == 1 {
						opts = append(opts, kzstd.WithDecoderConcurrency(1))
					}
					r, err := kzstd.NewReader(bytes.NewReader(bi.comp), opts...)
					if err != nil {
						b.Fatal(err)
					}
					n, sum, err := decodedSum(r, buf)
					if err != nil || n != bi.size || sum != bi.sum {
						b.Fatalf("decoded %d bytes (want %d), sha256 match %v, err %v", n, bi.size, sum == bi.sum, err)
					}
					r.Close()
				}
			})
		}
	}
}

// osImage returns a realistic OS disk image: an ext4 filesystem made by
// mkfs.ext4 -d over a real directory tree (ZSTD_BENCH_TREE, default the
// Go toolchain: binaries, archives, source text), sized so the tree fills
// ~60% of it, as a root filesystem image with room to grow would be.
func osImage(b *testing.B) ([]byte, error) {
	mkfs, err := execLookPath("mkfs.ext4")
	if err != nil {
		return nil, fmt.Errorf("mkfs.ext4 not installed (apt-get install e2fsprogs): %w", err)
	}
	tree := os.Getenv("ZSTD_BENCH_TREE")
	if tree == "" {
		tree = runtime.GOROOT()
	}
	var used int64
	err = filepath.WalkDir(tree, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				used += (fi.Size() + 4095) &^ 4095
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	size := (used*10/6 + 1<<20) &^ (1<<20 - 1)
	path := filepath.Join(b.TempDir(), "os.img")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		return nil, err
	}
	if err := os.Truncate(path, size); err != nil {
		return nil, err
	}
	if out, err := exec.Command(mkfs, "-q", "-F", "-E", "root_owner=0:0", "-d", tree, path).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mkfs.ext4 -d %s: %v: %s", tree, err, out)
	}
	b.Logf("osimage: ext4 over %s, %d MiB image, %d MiB of files", tree, size>>20, used>>20)
	return os.ReadFile(path)
}

// BenchmarkDecodeFile decodes a real stream (an ext4 image compressed with
// zstd -3 -T0) when it exists on this machine; it is skipped elsewhere.
// Set ZSTD_BENCH_FILE to use another file.
func BenchmarkDecodeFile(b *testing.B) {
	path := os.Getenv("ZSTD_BENCH_FILE")
	if path == "" {
		path = "/var/tmp/bx/fs.raw.zst"
	}
	comp, err := os.ReadFile(path)
	if err != nil {
		b.Skipf("bench file: %v", err)
	}
	// Size from a first pass with our decoder.
	r, err := NewReader(bytes.NewReader(comp))
	if err != nil {
		b.Fatal(err)
	}
	size, err := io.Copy(io.Discard, struct{ io.Reader }{r})
	if err != nil {
		b.Fatal(err)
	}
	r.Close()
	b.Run("cure", func(b *testing.B) {
		b.SetBytes(size)
		buf := make([]byte, 1<<20)
		for i := 0; i < b.N; i++ {
			r, err := NewReader(bytes.NewReader(comp))
			if err != nil {
				b.Fatal(err)
			}
			n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{r}, buf)
			if err != nil || n != size {
				b.Fatalf("n=%d err=%v", n, err)
			}
			r.Close()
		}
	})
	for _, conc := range []int{1, 0} {
		label := "klauspost"
		if conc == 1 {
			label += "-sync"
		}
		b.Run(label, func(b *testing.B) {
			b.SetBytes(size)
			buf := make([]byte, 1<<20)
			for i := 0; i < b.N; i++ {
				opts := []kzstd.DOption{kzstd.WithDecoderMaxWindow(512 << 20)}
				if conc == 1 {
					opts = append(opts, kzstd.WithDecoderConcurrency(1))
				}
				r, err := kzstd.NewReader(bytes.NewReader(comp), opts...)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{r}, buf)
				if err != nil || n != size {
					b.Fatalf("n=%d err=%v", n, err)
				}
				r.Close()
			}
		})
	}
}

// The benchmark streams, at a small size, decode to exactly their input
// with both decoders and through decodedSum: what the benchmarks rely on.
func TestBenchStreamsRoundTrip(t *testing.T) {
	disk := make([]byte, 8<<20)
	copy(disk[4<<20:], randomData(1<<20, 3))
	for name, data := range map[string][]byte{"disk": disk, "random": randomData(1<<20, 100), "text": textData(1<<20, 101)} {
		comp := klauspostEncode(t, data, true)
		want := sha256.Sum256(data)
		r, err := NewReader(bytes.NewReader(comp))
		if err != nil {
			t.Fatal(err)
		}
		n, sum, err := decodedSum(r, make([]byte, 4093))
		if err != nil || n != int64(len(data)) || sum != want {
			t.Errorf("%s: cure decoded %d of %d bytes, sha256 match %v, err %v", name, n, len(data), sum == want, err)
		}
		k, _ := kzstd.NewReader(bytes.NewReader(comp))
		n, sum, err = decodedSum(k, make([]byte, 1<<20))
		k.Close()
		if err != nil || n != int64(len(data)) || sum != want {
			t.Errorf("%s: klauspost decoded %d of %d bytes, sha256 match %v, err %v", name, n, len(data), sum == want, err)
		}
	}
}
