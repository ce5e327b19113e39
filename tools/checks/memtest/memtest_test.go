package memtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/tools/checks"
)

func meminfo(t *testing.T, body string) string {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "proc"), 0o755)
	if err := os.WriteFile(filepath.Join(root, "proc/meminfo"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestMemtest(t *testing.T) {
	ctx := context.Background()
	root := meminfo(t, "MemTotal:       16384000 kB\nMemFree:         8000000 kB\nMemAvailable:    8192 kB\n")

	t.Run("clean", func(t *testing.T) {
		// Half of 8 MiB available, over the real mmap path.
		vs, err := Check(ctx, Options{Root: root, Fraction: 0.5, Workers: 3, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		v := vs[0]
		if v.Component != "memory" || v.Status != checks.Pass || !strings.Contains(v.Observed, "mismatches=0 testedMiB=4 passes=3") {
			t.Errorf("verdict %s", v)
		}
	})

	for _, p := range Patterns {
		t.Run("fault/"+string(p), func(t *testing.T) {
			var flipped uintptr
			o := Options{Root: root, Bytes: 1 << 20, Patterns: []Pattern{p}, Workers: 2, Seed: 7,
				afterFill: func(_ Pattern, w []uint64) {
					w[12345] ^= 1 << 17 // a stuck bit
					w[99999] ^= 0xff
					flipped = addrOf(w, 12345)
				}}
			vs, err := Check(ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			v := vs[0]
			want := "address " + hex(flipped) + " pattern " + string(p)
			if v.Status != checks.Fail || !strings.Contains(v.Observed, "mismatches=2") || !strings.Contains(v.Message, want) {
				t.Errorf("verdict %s\nwant message containing %q", v, want)
			}
		})
	}

	t.Run("random is reproducible from the seed", func(t *testing.T) {
		a, b := make([]uint64, 2*chunkWords), make([]uint64, 2*chunkWords)
		fill(a[:chunkWords], Random, 0, 42, 0)
		fill(b[:chunkWords], Random, 0, 42, 0)
		fill(b[chunkWords:], Random, 0, 42, 1)
		if a[100] != b[100] || a[100] == b[chunkWords+100] {
			t.Error("random pattern is not a function of (seed, chunk)")
		}
	})

	t.Run("bad input", func(t *testing.T) {
		if _, err := Check(ctx, Options{Root: root, Fraction: 1.5}); err == nil || !strings.Contains(err.Error(), "fraction 1.5") {
			t.Errorf("fraction 1.5: %v", err)
		}
		if _, err := Check(ctx, Options{Root: meminfo(t, "MemTotal: 1 kB\n"), Fraction: 0.5}); err == nil || !strings.Contains(err.Error(), "no MemAvailable") {
			t.Errorf("no MemAvailable: %v", err)
		}
		if _, err := Check(ctx, Options{Bytes: 1 << 16, Patterns: []Pattern{"zeros"}}); err == nil || !strings.Contains(err.Error(), `"zeros"`) {
			t.Errorf("unknown pattern: %v", err)
		}
	})

	t.Run("cancelled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := Check(cctx, Options{Bytes: 4 << 20}); err == nil {
			t.Error("cancelled run returned no error")
		}
	})
}

func addrOf(w []uint64, i int) uintptr {
	return newGen(w, Address, 0, 0, 0).base + uintptr(i)*8
}

func hex(a uintptr) string { return fmt.Sprintf("%#x", a) }
