package gpu

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func addTestdata(f *testing.F, glob string) {
	paths, _ := filepath.Glob(filepath.Join("testdata", glob))
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
}

// FuzzParseDCGMDiag reads dcgmi diag output, JSON (-j) or table. What
// matters is that no failure is lost: every GPU a failed result names gets
// a FAIL verdict.
func FuzzParseDCGMDiag(f *testing.F) {
	addTestdata(f, "dcgmi-diag-*")
	f.Add([]byte(`{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "PCIe", "results": [{"gpu_id": 1, "status": "Fail", "warnings": ["GPU 1 replays"]}]}]}]}}`))
	f.Add([]byte(`{"runtime_error": "Error: unable to connect to host engine"}`))
	f.Add([]byte("| Diagnostic | Result |\n|-----  Integration  ----+----|\n| PCIe | Fail - GPU: -1 |\n"))
	f.Add([]byte("Error: unable to establish a connection to the specified host: localhost\n"))
	f.Add([]byte("| Diagnostic | Result |\n| Warning | before any result |\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		d, err := ParseDCGMDiag(out)
		if err != nil {
			return
		}
		if !utf8.ValidString(d.Version) || !utf8.ValidString(d.RuntimeError) {
			t.Fatalf("version %q, runtime error %q", d.Version, d.RuntimeError)
		}
		gpus := []int{0, 1, 2, 3, 7}
		failed := map[int]bool{}
		for _, test := range d.Tests {
			if !utf8.ValidString(test.Name) || !utf8.ValidString(test.Category) {
				t.Fatalf("test %q/%q", test.Category, test.Name)
			}
			for _, r := range test.Results {
				switch r.Status {
				case Pass, Fail, Skip:
				case Error:
					fallthrough
				default:
					t.Fatalf("result status %q", r.Status)
				}
				if r.Warn && r.Status != Pass {
					t.Fatalf("warning on a %s result", r.Status)
				}
				for _, g := range r.GPUs {
					if g < 0 {
						t.Fatalf("GPU id %d", g)
					}
				}
				for _, m := range r.Messages {
					if !utf8.ValidString(m) {
						t.Fatalf("message %q", m)
					}
				}
				for _, g := range gpus {
					if r.Status == Fail && (r.GPUs == nil || slices.Contains(r.GPUs, g)) {
						failed[g] = true
					}
				}
			}
		}
		vs := d.Verdicts(Targets(8)[:4])
		if d.RuntimeError != "" {
			if len(vs) != 1 || vs[0].Status != Error {
				t.Fatalf("runtime error %q: verdicts %+v", d.RuntimeError, vs)
			}
			return
		}
		got := map[int]bool{}
		for _, v := range vs {
			if !utf8.ValidString(v.Message) || !utf8.ValidString(v.Observed) || !utf8.ValidString(v.Check) {
				t.Fatalf("verdict text %q / %q / %q", v.Check, v.Observed, v.Message)
			}
			if v.Status != Fail {
				continue
			}
			var g int
			if _, err := fmt.Sscanf(v.Component, "gpu/%d", &g); err == nil {
				got[g] = true
			} else if v.Component == "gpu" {
				// A failure about a GPU not checked: it must be said.
				got[-1] = true
			}
		}
		for _, g := range gpus {
			if g < 4 && failed[g] != got[g] {
				t.Fatalf("GPU %d: a failed result names it: %t; a FAIL verdict names it: %t\n%+v", g, failed[g], got[g], vs)
			}
		}
		if failed[7] && !got[-1] {
			t.Fatalf("GPU 7 (not checked) failed but no verdict says so: %+v", vs)
		}
	})
}

// FuzzParseGPUBurn reads gpu-burn output. Accepted output gives one entry
// per index, error counts that never go negative, and a FAIL verdict for
// every GPU that was marked FAULTY, had errors or whose worker died.
func FuzzParseGPUBurn(f *testing.F) {
	addTestdata(f, "gpu-burn-*")
	f.Add([]byte("10.0%  proc'd: 1 (2 Gflop/s) - 1 (2 Gflop/s)   errors: 9223372036854775807 - 0  temps: 1 C - 1 C\n\tSummary at: now\n" +
		"20.0%  proc'd: 1 (2 Gflop/s) - 1 (2 Gflop/s)   errors: 9 - 0 (DIED!)  temps: 1 C\n\tSummary at: later\nTested 2 GPUs:\n\tGPU 0: OK\n\tGPU 1: OK\n"))
	f.Add([]byte("Tested 2 GPUs:\n\tGPU 1: FAULTY\n\tGPU 1: OK\n"))
	f.Add([]byte("Tested 1 GPUs:\n\tGPU -1: OK\n"))
	f.Add([]byte("Tested 99999999999 GPUs:\n"))
	f.Add([]byte("No clients are alive!  Aborting\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		b, err := ParseGPUBurn(bytes.NewReader(out))
		crlf, err2 := ParseGPUBurn(bytes.NewReader(bytes.ReplaceAll(out, []byte("\n"), []byte("\r\n"))))
		if (err == nil) != (err2 == nil) || err == nil && !reflect.DeepEqual(b, crlf) {
			t.Fatalf("CRLF line endings changed the result: %v / %v", err, err2)
		}
		if err != nil {
			return
		}
		if len(b.GPUs) > maxBurnGPUs || !utf8.ValidString(b.Aborted) {
			t.Fatalf("%d GPUs, aborted %q", len(b.GPUs), b.Aborted)
		}
		for i, g := range b.GPUs {
			if g.Index != i || g.Errors < 0 || g.Result != "" && g.Result != "OK" && g.Result != "FAULTY" {
				t.Fatalf("GPU %d: %+v", i, g)
			}
		}
		vs := b.Verdicts()
		if !b.Completed || len(b.GPUs) == 0 {
			if len(vs) != 1 || vs[0].Status != Error {
				t.Fatalf("incomplete run: %+v", vs)
			}
			return
		}
		if len(vs) != len(b.GPUs) {
			t.Fatalf("%d verdicts for %d GPUs", len(vs), len(b.GPUs))
		}
		for i, v := range vs {
			g := b.GPUs[i]
			if bad := g.Result != "OK" || g.Errors > 0 || g.Died; bad != (v.Status == Fail) || !bad && v.Status != Pass {
				t.Fatalf("GPU %+v: verdict %s", g, v.Status)
			}
		}
		if !strings.HasPrefix(vs[0].Component, "gpu/") {
			t.Fatalf("component %q", vs[0].Component)
		}
	})
}

// Hostile gpu-burn output: a negative or huge GPU index used to panic or
// allocate an entry per index, error counts could wrap negative into
// "0 errors", and a second "OK" line hid a "FAULTY" one.
func TestParseGPUBurnHostile(t *testing.T) {
	for _, c := range []struct{ out, want string }{
		{"Tested 1 GPUs:\n\tGPU -1: OK\n", "GPU index -1: expected 0-1023"},
		{"Tested 1 GPUs:\n\tGPU 999999999: OK\n", "GPU index 999999999"},
		{"Tested 99999999999 GPUs:\n", "GPU count is not a number from 0 to 1024"},
		{"Tested 2 GPUs:\n\tGPU 1: FAULTY\n\tGPU 1: OK\n", `gpu-burn output line 3: "GPU 1: OK": GPU 1 already reported FAULTY`},
		{"1%  proc'd: 1 (1 Gflop/s)   errors: " + strings.Repeat("0 - ", 1100) + "0  temps: 1 C\n", "1101 error counts: expected at most one per GPU (1024)"},
	} {
		if _, err := ParseGPUBurn(strings.NewReader(c.out)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%.60q: err = %v, want containing %q", c.out, err, c.want)
		}
	}
	b, err := ParseGPUBurn(strings.NewReader("1%  proc'd: 1 (1 Gflop/s)   errors: 9223372036854775807  temps: 1 C\n\tSummary at: x\n" +
		"2%  proc'd: 1 (1 Gflop/s)   errors: 5  temps: 1 C\n\tSummary at: y\nTested 1 GPUs:\n\tGPU 0: OK\n"))
	if err != nil || b.GPUs[0].Errors <= 0 || b.Verdicts()[0].Status != Fail {
		t.Errorf("saturating error count: %+v, %v", b, err)
	}
	if _, err := ParseDCGMDiag([]byte("| Diagnostic | Result |\n| PCIe | Fail - GPU: -1 |\n")); err == nil || !strings.Contains(err.Error(), `"-1" is not a GPU id`) {
		t.Errorf("negative GPU id in a table: %v", err)
	}
	if _, err := ParseDCGMDiag([]byte(`{"DCGM GPU Diagnostic": {"test_categories": [{"tests": [{"name": "x", "results": [{"gpu_id": -3, "status": "Fail"}]}]}]}}`)); err == nil || !strings.Contains(err.Error(), "GPU id -3 is negative") {
		t.Errorf("negative GPU id in JSON: %v", err)
	}
}

// FuzzParseNVBandwidth reads nvbandwidth's text output. Accepted output
// has tables whose every row is as wide as its header, values that are
// bandwidths (non-negative) or N/A, and verdicts for it never panic: a
// pair whose bar is missed is a FAIL.
func FuzzParseNVBandwidth(f *testing.F) {
	addTestdata(f, "nvbandwidth-*")
	f.Add([]byte("Running device_to_device_memcpy_write_ce.\nmemcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)\n  0 1\n 0 N/A 5\n 1 1 N/A\n\nSUM device_to_device_memcpy_write_ce 6\n"))
	f.Add([]byte("Waived: \nERROR: Testcase x not found!\nRunning host_to_device_memcpy_ce.\nError: out of memory\n"))
	f.Add([]byte("Device 0: X (0000000g:zz:00)\nSUM x 1\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		r, err := ParseNVBandwidth(out)
		if err != nil {
			return
		}
		for _, tc := range r.Tests {
			switch tc.Status {
			case NVBPassed, NVBWaived, NVBError:
			default:
				t.Fatalf("status %q", tc.Status)
			}
			for _, m := range tc.Matrices {
				for _, row := range m.Values {
					if len(row) != len(m.Values[0]) {
						t.Fatalf("ragged table %v", m.Values)
					}
					for _, v := range row {
						if v < 0 || math.IsInf(v, 0) {
							t.Fatalf("value %v", v)
						}
					}
				}
			}
		}
		bars := map[string]float64{"d2dWriteGBps": 1e9, "h2dGBps": 1e9}
		vs := NVBandwidthVerdicts(r, []string{"device_to_device_memcpy_write_ce"}, bars, func(i int, _ string) string { return "gpu/" + strconv.Itoa(i) })
		for _, v := range vs {
			if !utf8.ValidString(v.Message) {
				t.Fatalf("message %q", v.Message)
			}
			for _, m := range v.Measurements {
				if b, ok := bars[m.Metric]; ok && m.Value < b && v.Status != Fail {
					t.Fatalf("%s %s=%v under its bar but %s", v.Component, m.Metric, m.Value, v.Status)
				}
			}
		}
	})
}

// FuzzParseNCCLTest reads nccl-tests output. Accepted output has
// non-negative numbers, and a run with wrong elements or without its
// summary never passes.
func FuzzParseNCCLTest(f *testing.F) {
	addTestdata(f, "nccl-*")
	f.Add([]byte("#  Rank  0 Pid 1 on h device  0 [0x1b] NVIDIA H100\n 8 2 float sum -1 1.0 0.01 0.01 N/A 1.0 0.01 0.01 N/A\n# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.01\n"))
	f.Add([]byte(" 8 2 float sum -1 1.0 0.01 0.01 3 1.0 0.01 0.01 0\n# Out of bounds values : 3 FAILED\n# Avg bus bandwidth    : nan\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		r, err := ParseNCCLTest(out)
		if err != nil {
			return
		}
		for _, row := range r.Rows {
			for _, h := range []NCCLResult{row.OutOfPlace, row.InPlace} {
				if h.TimeUs < 0 || h.AlgBW < 0 || h.BusBW < 0 || h.Wrong < -1 {
					t.Fatalf("row %+v", row)
				}
			}
		}
		v := NCCLVerdict(r, "gpu", MetricAllReduceBusBW, nil)
		if v.Status == Pass && (!r.Summary || r.WrongElements() > 0 || r.OutOfBounds > 0 || len(r.Failures) > 0) {
			t.Fatalf("passed: %+v", r)
		}
		if !utf8.ValidString(v.Message) || !utf8.ValidString(v.Observed) {
			t.Fatalf("verdict text %q", v.Message)
		}
	})
}

// FuzzParseSXid reads kernel log messages: an accepted SXid has a code and
// a switch, and a fatal one always fails the verdict.
func FuzzParseSXid(f *testing.F) {
	f.Add("nvidia-nvswitch3: SXid (PCI:0000:88:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)")
	f.Add("nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 24007, Fatal, Link 44 sourcetrack TCEN0 crumbstore ECC DBE Error (First)")
	f.Add("nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 24007, Data {0x00000000, 0x00000001}")
	f.Add("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 30 LTSSM Fault Up")
	f.Fuzz(func(t *testing.T, msg string) {
		s, ok := ParseSXid(msg)
		if !ok {
			return
		}
		if s.Code < 0 || s.Switch == "" || s.Link < -1 {
			t.Fatalf("%+v", s)
		}
		if v := SXidVerdict([]string{msg}); s.Fatal != (v.Status == Fail) {
			t.Fatalf("fatal %t, verdict %v", s.Fatal, v)
		}
	})
}
