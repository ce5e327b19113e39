package diskimage

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// zstdClass is one kind of image the zstd selector has to decide for.
type zstdClass struct {
	name string
	make func(tb testing.TB, scale int) ([]byte, error) // scale: MiB of the synthetic inputs
}

// zstdClasses are the benchmark's inputs (and TestChooseZstdFollowsBenchmark's):
//   - zero90: a disk image, 4 MiB regions, 90 % zero, the rest half random
//     and half text (what a fresh install's unused space looks like);
//   - ext4: an ext4 filesystem made by mkfs.ext4 -d over a real tree (the
//     Go toolchain), the tree filling ~60 % of it;
//   - stored: random bytes, which zstd stores as raw blocks;
//   - text: compressible text, every block Huffman/FSE coded.
var zstdClasses = []zstdClass{
	{"zero90", func(_ testing.TB, scale int) ([]byte, error) { return zero90Data(scale << 20), nil }},
	{"ext4", func(tb testing.TB, _ int) ([]byte, error) { return ext4Image(tb) }},
	{"stored", func(_ testing.TB, scale int) ([]byte, error) { return benchRandom(scale<<20, 7), nil }},
	{"text", func(_ testing.TB, scale int) ([]byte, error) { return benchText(scale<<20, 8), nil }},
}

func benchRandom(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

var benchWords = strings.Fields(`the of and to in is that for it as was with be by on not this are or from at
which but have an they were there been one all their has would when if so no will more can out into up who
disk image partition sector block kernel initramfs provision server gpu firmware boot loader grub efi nvme
device driver module config network address interface route table checksum stream frame`)

// benchText is text with a skewed word distribution, numbers and some
// repeated lines (matches at many distances): ~3-4x at zstd -3.
func benchText(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	var b bytes.Buffer
	var lines [][]byte
	for b.Len() < n {
		if len(lines) > 8 && r.IntN(5) == 0 {
			b.Write(lines[r.IntN(len(lines))])
			continue
		}
		start := b.Len()
		for i := 3 + r.IntN(12); i > 0; i-- {
			b.WriteString(benchWords[min(r.IntN(len(benchWords)), r.IntN(len(benchWords)))])
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

func zero90Data(n int) []byte {
	const region = 4 << 20
	b := make([]byte, n)
	for i := 0; i*region < n; i++ {
		end := min((i+1)*region, n)
		switch i % 20 {
		case 3:
			copy(b[i*region:end], benchRandom(end-i*region, uint64(i)))
		case 13:
			copy(b[i*region:end], benchText(end-i*region, uint64(i)))
		}
	}
	return b
}

// ext4Image is an ext4 filesystem image over ZSTD_BENCH_TREE (default the
// Go toolchain: binaries, archives, source), sized so the files fill ~60 %
// of it, as a root filesystem with room to grow would be.
func ext4Image(tb testing.TB) ([]byte, error) {
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		return nil, fmt.Errorf("mkfs.ext4 not installed: %w", err)
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
	path := filepath.Join(tb.TempDir(), "os.img")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		return nil, err
	}
	if err := os.Truncate(path, size); err != nil {
		return nil, err
	}
	if out, err := exec.Command(mkfs, "-q", "-F", "-E", "root_owner=0:0", "-d", tree, path).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mkfs.ext4 -d %s: %v: %s", tree, err, out)
	}
	return os.ReadFile(path)
}

// zstdCLI compresses data the way images are made: zstd(1) -3 -T0, which
// records the content size in the frame header.
func zstdCLI(tb testing.TB, data []byte) []byte {
	cmd := exec.Command("zstd", "-3", "-T0", "-q", "-c")
	cmd.Stdin = bytes.NewReader(data)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		tb.Fatalf("zstd -3: %v: %s", err, errb.String())
	}
	return out.Bytes()
}

type benchStream struct {
	comp []byte
	size int64
	crc  uint32 // CRC-32C of the decoded bytes
}

// benchStreams are built once per process, each on first use (so a -bench
// pattern naming one class builds only that one).
var benchStreams sync.Map // class name -> func() (benchStream, error)

func loadBenchStream(b *testing.B, c zstdClass) (benchStream, error) {
	f, _ := benchStreams.LoadOrStore(c.name, sync.OnceValues(func() (benchStream, error) {
		data, err := c.make(b, 128)
		if err != nil {
			return benchStream{}, err
		}
		return benchStream{comp: zstdCLI(b, data), size: int64(len(data)), crc: crc32.Checksum(data, castagnoli)}, nil
	}))
	return f.(func() (benchStream, error))()
}

// BenchmarkZstdDecoders decodes each class with the three decoders
// Options.Decoder can force, through newDecoder (zstd(1) through its two
// pipes, as nodes run it), into a CRC-32C that is checked each time. The
// table in decode.go comes from this benchmark, run as three processes in
// turn so the decoders alternate (-count would repeat each one in a row):
//
//	go test -c -o /tmp/di.test ./tools/diskimage
//	for i in 1 2 3; do /tmp/di.test -test.run XXX -test.bench ZstdDecoders -test.benchtime 3x; done
func BenchmarkZstdDecoders(b *testing.B) {
	if _, err := exec.LookPath("zstd"); err != nil {
		b.Skip("zstd(1) not installed: it makes the inputs and is one of the decoders")
	}
	for _, c := range zstdClasses {
		b.Run(c.name, func(b *testing.B) {
			s, err := loadBenchStream(b, c)
			if err != nil {
				b.Skipf("%s: %v", c.name, err)
			}
			for _, dec := range []string{DecoderCureZstd, DecoderKlauspostZstd, DecoderExec} {
				b.Run(dec, func(b *testing.B) { benchDecoder(b, dec, s) })
			}
		})
	}
}

func benchDecoder(b *testing.B, dec string, s benchStream) {
	b.SetBytes(s.size)
	b.ReportMetric(float64(s.size)/float64(len(s.comp)), "R")
	buf := make([]byte, 1<<20)
	for i := 0; i < b.N; i++ {
		d, err := newDecoder(FormatZstd, dec, bytes.NewReader(s.comp), int64(len(s.comp)), false)
		if err != nil {
			b.Fatal(err)
		}
		h := crc32.New(castagnoli)
		n, err := io.CopyBuffer(h, struct{ io.Reader }{d}, buf)
		d.close()
		if err != nil || n != s.size || h.Sum32() != s.crc {
			b.Fatalf("%s: decoded %d of %d bytes, crc match %v, err %v", d.name, n, s.size, h.Sum32() == s.crc, err)
		}
	}
}
