// Package memtest is a pattern-verifying memory stress: it maps an
// anonymous region sized as a fraction of MemAvailable, fills it with a
// pattern from several goroutines, reads every word back and fails on any
// mismatch, naming the address, pattern, expected and found values.
package memtest

import (
	"bufio"
	"context"
	"fmt"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/cure-oss/cure/tools/checks"
)

// Pattern is one fill/verify pattern.
type Pattern string

const (
	// WalkingOnes puts a single set bit in every word, its position moving
	// by one from word to word and from pass to pass: stuck-at-0 bits and
	// coupling between neighbouring bit lines.
	WalkingOnes Pattern = "walking-ones"
	// Random fills with a seeded xorshift stream regenerated for the
	// verify: data-dependent faults without storing a reference copy.
	Random Pattern = "random"
	// Address stores each word's own address (complemented on odd passes):
	// address-line faults that alias two locations.
	Address Pattern = "address"
)

// Patterns lists every pattern, in the order a cycle runs them.
var Patterns = []Pattern{WalkingOnes, Random, Address}

// Mismatch is one word that did not read back as written.
type Mismatch struct {
	Addr     uintptr
	Pattern  Pattern
	Pass     int
	Expected uint64
	Found    uint64
}

func (m Mismatch) String() string {
	return fmt.Sprintf("address %#x pattern %s pass %d: wrote %#016x read %#016x (bits %#016x)",
		m.Addr, m.Pattern, m.Pass, m.Expected, m.Found, m.Expected^m.Found)
}

// Options configure the test.
type Options struct {
	// Root holds proc/meminfo ("/" on a node).
	Root string
	// Fraction of MemAvailable to test, in (0, 1]. Ignored when Bytes is set.
	Fraction float64
	// Bytes is an explicit size to test.
	Bytes uint64
	// MaxBytes caps the size (tests; nodes where the runner needs headroom).
	MaxBytes uint64
	// Patterns to run in each cycle; empty means all.
	Patterns []Pattern
	// Seed of the Random pattern; the same seed gives the same bytes.
	Seed uint64
	// Workers is the number of goroutines; zero means GOMAXPROCS.
	Workers int
	// Duration repeats whole cycles until it has passed; zero runs one cycle.
	Duration time.Duration
	// Mismatches bars the mismatch count; zero means none allowed.
	Mismatches checks.Limit
	// Alloc maps n bytes; nil means an anonymous mmap. Tests may pass a
	// plain allocation.
	Alloc func(n int) (mem []byte, free func() error, err error)

	afterFill func(p Pattern, words []uint64) // tests inject faults here
}

// maxReported bounds the mismatches kept for the verdict message.
const maxReported = 8

// pageSize aligns the region; the kernel maps whole pages anyway.
const pageSize = 4096

// Check runs the test and returns one verdict, component "memory".
func Check(ctx context.Context, o Options) ([]checks.Verdict, error) {
	size, avail, err := o.size()
	if err != nil {
		return nil, err
	}
	pats := o.Patterns
	if len(pats) == 0 {
		pats = Patterns
	}
	for _, p := range pats {
		switch p {
		case WalkingOnes, Random, Address:
		default:
			return nil, fmt.Errorf("memtest: unknown pattern %q (want walking-ones, random or address)", p)
		}
	}
	alloc := o.Alloc
	if alloc == nil {
		alloc = mmapAnon
	}
	mem, free, err := alloc(int(size))
	if err != nil {
		return nil, fmt.Errorf("memtest: mapping %d bytes (of %d available): %w", size, avail, err)
	}
	defer free()
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), len(mem)/8)
	workers := o.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}

	start := time.Now()
	r := &result{}
	pass := 0
	for cycle := 0; ; cycle++ {
		for _, p := range pats {
			if err := run(ctx, words, p, pass, o.Seed, workers, r, o.afterFill); err != nil {
				return nil, fmt.Errorf("memtest: pattern %s pass %d: %w", p, pass, err)
			}
			pass++
		}
		if o.Duration <= 0 || time.Since(start) >= o.Duration {
			break
		}
	}
	elapsed := time.Since(start)
	mb := float64(size) / (1 << 20)
	bar := o.Mismatches
	if bar.IsZero() {
		bar = checks.AtMost(0)
	}
	v := checks.Judge("memory",
		checks.Value("mismatches", float64(r.count), bar),
		checks.Value("testedMiB", mb, checks.Limit{}).In("MiB"),
		checks.Value("passes", float64(pass), checks.Limit{}),
		checks.Value("MiBps", 2*mb*float64(pass)/elapsed.Seconds(), checks.Limit{}).In("MiB/s"),
	)
	var msgs []string
	if v.Message != "" {
		msgs = append(msgs, v.Message)
	}
	for _, m := range r.first {
		msgs = append(msgs, m.String())
	}
	if r.count > uint64(len(r.first)) {
		msgs = append(msgs, fmt.Sprintf("... %d more", r.count-uint64(len(r.first))))
	}
	msgs = append(msgs, fmt.Sprintf("%d workers, patterns %v, %s", workers, pats, elapsed.Round(time.Millisecond)))
	v.Message = strings.Join(msgs, "; ")
	return []checks.Verdict{v}, nil
}

// size decides how many bytes to test: a multiple of the page size.
func (o Options) size() (size, avail uint64, err error) {
	if o.Bytes == 0 {
		if o.Fraction <= 0 || o.Fraction > 1 {
			return 0, 0, fmt.Errorf("memtest: fraction %v is outside (0, 1]", o.Fraction)
		}
		avail, err = MemAvailable(o.Root)
		if err != nil {
			return 0, 0, err
		}
		size = uint64(float64(avail) * o.Fraction)
	} else {
		size = o.Bytes
	}
	if o.MaxBytes > 0 && size > o.MaxBytes {
		size = o.MaxBytes
	}
	size -= size % pageSize
	if size == 0 {
		return 0, avail, fmt.Errorf("memtest: size to test is below one page (MemAvailable %d bytes, fraction %v, cap %d)", avail, o.Fraction, o.MaxBytes)
	}
	return size, avail, nil
}

// MemAvailable reads MemAvailable from <root>/proc/meminfo, in bytes.
func MemAvailable(root string) (uint64, error) {
	path := filepath.Join(root, "proc/meminfo")
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("memtest: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != "MemAvailable" {
			continue
		}
		fs := strings.Fields(v)
		if len(fs) != 2 || fs[1] != "kB" {
			return 0, fmt.Errorf("memtest: %s: MemAvailable: expected \"<n> kB\", found %q", path, strings.TrimSpace(v))
		}
		n, err := strconv.ParseUint(fs[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("memtest: %s: MemAvailable: %w", path, err)
		}
		return n * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("memtest: reading %s: %w", path, err)
	}
	return 0, fmt.Errorf("memtest: %s has no MemAvailable line (kernel older than 3.14?)", path)
}

type result struct {
	mu    sync.Mutex
	count uint64
	first []Mismatch
}

func (r *result) add(n uint64, ms []Mismatch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count += n
	for _, m := range ms {
		if len(r.first) < maxReported {
			r.first = append(r.first, m)
		}
	}
}

// chunkWords is the unit of work between context checks and the span over
// which the Random stream is reseeded (so each chunk is independent).
const chunkWords = 1 << 17 // 1 MiB

// run fills words with p from workers goroutines, then verifies.
func run(ctx context.Context, words []uint64, p Pattern, pass int, seed uint64, workers int, r *result, hook func(Pattern, []uint64)) error {
	chunks := (len(words) + chunkWords - 1) / chunkWords
	each := func(f func(c int, w []uint64)) error {
		var wg sync.WaitGroup
		next := make(chan int)
		for range workers {
			wg.Go(func() {
				for c := range next {
					end := min((c+1)*chunkWords, len(words))
					f(c, words[c*chunkWords:end])
				}
			})
		}
		var err error
	feed:
		for c := range chunks {
			select {
			case next <- c:
			case <-ctx.Done():
				err = ctx.Err()
				break feed
			}
		}
		close(next)
		wg.Wait()
		return err
	}
	if err := each(func(c int, w []uint64) { fill(w, p, pass, seed, c) }); err != nil {
		return err
	}
	if hook != nil {
		hook(p, words)
	}
	return each(func(c int, w []uint64) {
		n, ms := verify(w, p, pass, seed, c)
		if n > 0 {
			r.add(n, ms)
		}
	})
}

// gen yields a pattern's words for one chunk in order; state carries the
// Random stream from word to word.
type gen struct {
	p     Pattern
	pass  int
	state uint64
	base  uintptr
	first int // index of w[0] within the whole region
}

func newGen(w []uint64, p Pattern, pass int, seed uint64, c int) *gen {
	g := &gen{p: p, pass: pass, base: uintptr(unsafe.Pointer(&w[0])), first: c * chunkWords}
	// SplitMix64 of (seed, pass, chunk): a non-zero xorshift state that
	// differs per chunk and per pass.
	z := seed + uint64(pass)*0x9e3779b97f4a7c15 + uint64(c+1)*0xbf58476d1ce4e5b9
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	g.state = z ^ z>>31 | 1
	return g
}

func (g *gen) next(i int) uint64 {
	switch g.p {
	case WalkingOnes:
		return bits.RotateLeft64(1, (g.first+i+g.pass)%64)
	case Random:
		// xorshift64* (Vigna 2014)
		g.state ^= g.state >> 12
		g.state ^= g.state << 25
		g.state ^= g.state >> 27
		return g.state * 0x2545f4914f6cdd1d
	case Address:
		fallthrough
	default:
		a := uint64(g.base) + uint64(i)*8
		if g.pass%2 == 1 {
			return ^a
		}
		return a
	}
}

func fill(w []uint64, p Pattern, pass int, seed uint64, c int) {
	g := newGen(w, p, pass, seed, c)
	for i := range w {
		w[i] = g.next(i)
	}
}

func verify(w []uint64, p Pattern, pass int, seed uint64, c int) (uint64, []Mismatch) {
	g := newGen(w, p, pass, seed, c)
	var n uint64
	var ms []Mismatch
	for i := range w {
		want := g.next(i)
		if got := w[i]; got != want {
			n++
			if len(ms) < maxReported {
				ms = append(ms, Mismatch{Addr: g.base + uintptr(i)*8, Pattern: p, Pass: pass, Expected: want, Found: got})
			}
		}
	}
	return n, ms
}
