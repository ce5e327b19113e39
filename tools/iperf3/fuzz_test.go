package iperf3

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: the report comes from a tool on the node (and its numbers
// from a peer): no input panics, and a report without an error has a
// stream and sane numbers.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err != nil || r.Error != "" {
			return
		}
		if r.Remote == "" || r.ReceivedBps < 0 || r.SentBps < 0 || r.Retransmits < 0 {
			t.Fatalf("report %+v", r)
		}
	})
}
