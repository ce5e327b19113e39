package gpu

import (
	"os"
	"slices"
	"strings"
	"testing"
)

func TestParseGPUBurnFaulty(t *testing.T) {
	f, err := os.Open("testdata/gpu-burn-faulty.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := ParseGPUBurn(f)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Completed || len(b.GPUs) != 3 {
		t.Fatalf("parsed %+v", b)
	}
	// GPU 2: 7 errors before the summary reset, 2 after.
	want := []GPUBurnGPU{{0, "OK", 0, false}, {1, "OK", 0, false}, {2, "FAULTY", 9, false}}
	if !slices.Equal(b.GPUs, want) {
		t.Errorf("GPUs = %+v, want %+v", b.GPUs, want)
	}
	vs := b.Verdicts()
	if got := bad(vs); !slices.Equal(got, []string{"gpu/2 gpu_burn"}) {
		t.Errorf("failing = %q\n%s", got, dump(vs))
	}
	if v := find(vs, "gpu/2", CheckGPUBurn); v.Observed != "FAULTY, 9 errors" {
		t.Errorf("verdict = %v", v)
	}
	// The nvidia-smi -L lines at the top ("GPU 0: NVIDIA H100 ...") are not results.
	if v := find(vs, "gpu/0", CheckGPUBurn); v.Status != Pass {
		t.Errorf("verdict = %v", v)
	}
}

func TestParseGPUBurnAborted(t *testing.T) {
	data, err := os.ReadFile("testdata/gpu-burn-died.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseGPUBurn(strings.NewReader(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	vs := b.Verdicts()
	if len(vs) != 1 || vs[0].Status != Error || !strings.Contains(vs[0].Message, "No clients are alive") ||
		!strings.Contains(vs[0].Message, "gpu/0, gpu/1") {
		t.Errorf("verdicts = %s", dump(vs))
	}
}

func TestParseGPUBurnBadLine(t *testing.T) {
	_, err := ParseGPUBurn(strings.NewReader("10.0%  proc'd: 1 (2 Gflop/s)   errors: x - 0  temps: 1 C\n"))
	if err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("err = %v", err)
	}
	_, err = ParseGPUBurn(strings.NewReader("Tested 2 GPUs:\n\tGPU 0: MAYBE\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("err = %v", err)
	}
}

var eight = Targets(8)

func TestParseDCGMTable(t *testing.T) {
	out, err := os.ReadFile("testdata/dcgmi-diag-r2.txt")
	if err != nil {
		t.Fatal(err)
	}
	d, err := ParseDCGMDiag(out)
	if err != nil {
		t.Fatal(err)
	}
	if d.Version != "3.3.5" || len(d.Tests) != 12 {
		t.Fatalf("version %q, %d tests", d.Version, len(d.Tests))
	}
	vs := d.Verdicts(eight)
	if got := bad(vs); !slices.Equal(got, []string{"gpu/3 dcgm/pcie"}) {
		t.Errorf("failing = %q\n%s", got, dump(vs))
	}
	v := find(vs, "gpu/3", "dcgm/pcie")
	if v.Observed != "Fail" || !strings.Contains(v.Message, "412 PCIe replays which exceeds the maximum of 80") {
		t.Errorf("gpu/3 = %v", v)
	}
	if v := find(vs, "gpu/5", "dcgm/targeted_stress"); v.Status != Pass || v.Observed != "Warn" || !strings.Contains(v.Message, "throttled") {
		t.Errorf("gpu/5 warning lost: %v", v)
	}
	if v := find(vs, "gpu/0", "dcgm/pcie"); v.Message != "DCGM 3.3.5 Integration/PCIe" {
		t.Errorf("gpu/0 got another GPU's messages: %v", v)
	}
	// Twelve tests ran on every GPU (the table's GPU Memory says "All").
	if len(vs) != 8*12 {
		t.Errorf("%d verdicts, want 96", len(vs))
	}
}

func TestParseDCGMJSON(t *testing.T) {
	out, err := os.ReadFile("testdata/dcgmi-diag-r1.json")
	if err != nil {
		t.Fatal(err)
	}
	// dcgmi sometimes prints a line before the document.
	d, err := ParseDCGMDiag(append([]byte("WARNING: deprecated option\n"), out...))
	if err != nil {
		t.Fatal(err)
	}
	if d.Version != "3.3.5" || len(d.Tests) != 3 {
		t.Fatalf("version %q, %d tests", d.Version, len(d.Tests))
	}
	vs := d.Verdicts(eight)
	if got := bad(vs); !slices.Equal(got, []string{"gpu/3 dcgm/gpu_memory"}) {
		t.Errorf("failing = %q\n%s", got, dump(vs))
	}
	if v := find(vs, "gpu/3", "dcgm/gpu_memory"); !strings.Contains(v.Message, "DCGM_FR_VOLATILE_DBE_DETECTED (error 4, isolate): GPU 3 Detected 1 double bit ECC errors") {
		t.Errorf("gpu/3 = %v", v)
	}
}

func TestParseDCGMErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "GPU Memory", "results": [{"gpu_ids": 0, "status": "MAYBE"}]}]}]}}`,
			"test_categories[0].tests[0].results[0].status"},
		{`{"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "GPU Memory", "results": [{"gpu_ids": "0,x", "status": "PASS"}]}]}]}}`,
			`"x" is not a GPU id`},
		{"Error: unable to connect to host engine\n", ""},
		{"nothing here\n", "no \"| Diagnostic | Result |\" table"},
	} {
		d, err := ParseDCGMDiag([]byte(tc.in))
		if tc.want == "" {
			if err != nil || d.RuntimeError == "" {
				t.Errorf("%q: %v, %+v", tc.in, err, d)
				continue
			}
			if vs := d.Verdicts(eight); len(vs) != 1 || vs[0].Status != Error || vs[0].Component != "gpu" {
				t.Errorf("runtime error verdicts = %s", dump(vs))
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.in, err, tc.want)
		}
	}
}
