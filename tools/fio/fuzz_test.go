package fio

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: fio's output comes from a tool on the node; no input may
// panic, and what parses is a report with jobs and sane numbers.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err != nil {
			return
		}
		if len(r.Jobs) == 0 {
			t.Fatal("parsed a report without jobs")
		}
		for _, j := range r.Jobs {
			if j.Read.IOPS < 0 || j.Write.IOPS < 0 || j.Read.TotalIOs < 0 {
				t.Fatalf("negative reading in %+v", j)
			}
		}
	})
}
