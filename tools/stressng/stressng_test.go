package stressng

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func load(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCPU(t *testing.T) {
	r, err := ParseYAML(load(t, "cpu-package0.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := r.Stressor("cpu")
	if r.Version != "0.15.06" || !ok {
		t.Fatalf("version %q, cpu metrics %v", r.Version, ok)
	}
	if m.BogoOps != 3542 || m.BogoOpsPerSec != 708.087917 || m.WallClockSec != 5.002204 {
		t.Errorf("cpu metrics %+v", m)
	}
	if m.Extra["bogo-ops-per-second-usr-sys-time"] != 2232.552276 || m.Extra["max-rss"] != 6416 {
		t.Errorf("extra metrics %v", m.Extra)
	}
	l := ParseLog(load(t, "cpu-package0.stderr"))
	if !l.Successful || l.Unsuccessful || len(l.Problems) != 0 || len(l.Rates) != 0 {
		t.Errorf("log %+v, want a clean successful run", l)
	}
}

func TestStream(t *testing.T) {
	r, err := ParseYAML(load(t, "stream-node0.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := r.Stressor("stream")
	if !ok || m.Extra["memory-read-rate-mb-per-sec"] != 2440.913892 || m.Extra["memory-write-rate-mb-per-sec"] != 1627.275928 {
		t.Errorf("stream metrics %+v", m)
	}
	l := ParseLog(load(t, "stream-node0.stderr"))
	want := []InstanceRate{{"stream", 0, 2083.71, 1389.14}, {"stream", 1, 2798.12, 1865.41}}
	if !l.Successful || len(l.Problems) != 0 || len(l.Rates) != len(want) {
		t.Fatalf("log %+v", l)
	}
	for i := range want {
		if l.Rates[i] != want[i] {
			t.Errorf("rate %d = %+v, want %+v", i, l.Rates[i], want[i])
		}
	}
}

// TestStressorFailed: the stressor could not allocate its buffers; the
// YAML still has a (zero) metrics line, the log says why and that the run
// was unsuccessful.
func TestStressorFailed(t *testing.T) {
	r, err := ParseYAML(load(t, "stream-cannot-allocate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := r.Stressor("stream"); m.BogoOps != 0 {
		t.Errorf("bogo ops %v, want 0", m.BogoOps)
	}
	l := ParseLog(load(t, "stream-cannot-allocate.stderr"))
	if l.Successful || !l.Unsuccessful || len(l.Problems) != 2 {
		t.Fatalf("log %+v", l)
	}
	if l.Problems[0] != "error: stream: cannot allocate 274877906944 bytes" || !strings.Contains(l.Problems[1], "exit status=2 (stressor failed)") {
		t.Errorf("problems %q", l.Problems)
	}
}

func TestRefusedBeforeRun(t *testing.T) {
	l := ParseLog(load(t, "bad-method.stderr"))
	if l.Successful || l.Unsuccessful || len(l.Problems) != 0 {
		t.Errorf("log %+v: a refused command line is neither run", l)
	}
	if _, err := ParseYAML(nil); err == nil {
		t.Error("no YAML parsed")
	}
}

func TestParseYAMLRejects(t *testing.T) {
	for name, in := range map[string]string{
		"no metrics":     "system-info:\n  stress-ng-version: 0.15.06\n",
		"nameless":       "metrics:\n  - bogo-ops: 3\n",
		"negative":       "metrics:\n  - stressor: cpu\n    bogo-ops: -3\n",
		"text value":     "metrics:\n  - stressor: cpu\n    bogo-ops: many\n",
		"nested value":   "metrics:\n  - stressor: cpu\n    bogo-ops: [1]\n",
		"not a list":     "metrics: 3\n",
		"infinite":       "metrics:\n  - stressor: cpu\n    bogo-ops: .inf\n",
		"over the bound": strings.Repeat("#", MaxOutput+1),
	} {
		if _, err := ParseYAML([]byte(in)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

// TestParseLogFail: a --verify mismatch is logged at level fail (the
// format of stress-ng's pr_fail lines).
func TestParseLogFail(t *testing.T) {
	l := ParseLog([]byte("stress-ng: fail:  [812] cpu: matrixprod: result mismatch\nstress-ng: info:  [811] unsuccessful run completed in 5.00s\n"))
	if len(l.Problems) != 1 || l.Problems[0] != "fail: cpu: matrixprod: result mismatch" || !l.Unsuccessful {
		t.Errorf("log %+v", l)
	}
}
