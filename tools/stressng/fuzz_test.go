package stressng

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func seeds(f *testing.F, glob string) {
	files, _ := filepath.Glob(filepath.Join("testdata", glob))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
}

// FuzzParseYAML: what parses names its stressors and has no negative or
// non-finite number.
func FuzzParseYAML(f *testing.F) {
	seeds(f, "*.yaml")
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseYAML(b)
		if err != nil {
			return
		}
		for _, m := range r.Metrics {
			if m.Stressor == "" || m.BogoOps < 0 || m.BogoOpsPerSec < 0 {
				t.Fatalf("bad metric %+v", m)
			}
			for k, v := range m.Extra {
				if !(v >= 0) {
					t.Fatalf("extra %s=%v", k, v)
				}
			}
		}
	})
}

// FuzzParseLog: any log parses without panicking; rates are non-negative.
func FuzzParseLog(f *testing.F) {
	seeds(f, "*.stderr")
	f.Fuzz(func(t *testing.T, b []byte) {
		l := ParseLog(b)
		for _, r := range l.Rates {
			if !(r.ReadMiBps >= 0) || !(r.WriteMiBps >= 0) || r.Instance < 0 {
				t.Fatalf("bad rate %+v", r)
			}
		}
		for _, p := range l.Problems {
			if !strings.HasPrefix(p, "fail: ") && !strings.HasPrefix(p, "error: ") {
				t.Fatalf("problem %q", p)
			}
		}
	})
}
