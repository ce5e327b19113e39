package gpu

import (
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRunGPUBurnAndDCGMThroughExec(t *testing.T) {
	burn, _ := os.ReadFile("testdata/gpu-burn-faulty.txt")
	diag, _ := os.ReadFile("testdata/dcgmi-diag-r1.json")
	var calls []string
	fake := func(_ context.Context, env []string, name string, args ...string) ([]byte, error) {
		calls = append(calls, strings.Join(append(append(env, name), args...), " "))
		if name == "dcgmi" {
			// dcgmi exits 226 or similar when a test fails; output still counts.
			return diag, &exec.ExitError{}
		}
		return burn, nil
	}
	vs, err := RunGPUBurn(context.Background(), fake, "/usr/bin/gpu_burn", "", 90*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := bad(vs); !slices.Equal(got, []string{"gpu/2 gpu_burn"}) {
		t.Errorf("gpu-burn failing = %q", got)
	}
	vs, err = RunDCGMDiag(context.Background(), fake, "dcgmi", 1, time.Minute, Targets(8))
	if err != nil {
		t.Fatal(err)
	}
	if got := bad(vs); !slices.Equal(got, []string{"gpu/3 dcgm/gpu_memory"}) {
		t.Errorf("dcgm failing = %q", got)
	}
	want := []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID /usr/bin/gpu_burn 90", "dcgmi diag -r 1 -j"}
	if !slices.Equal(calls, want) {
		t.Errorf("calls = %q, want %q", calls, want)
	}
	if _, err := RunDCGMDiag(context.Background(), fake, "dcgmi", 5, time.Minute, Targets(8)); err == nil {
		t.Error("level 5 accepted")
	}
	if _, err := RunGPUBurn(context.Background(), fake, "gpu_burn", "", 0); err == nil {
		t.Error("zero duration accepted")
	}
}

// TestDCGMLoadSkipIsError: a GPU DCGM's load test skipped had no load; the
// check cannot pass it, so it is an ERROR, and the load runs for the
// stage's length.
func TestDCGMLoadSkipIsError(t *testing.T) {
	doc := `{"DCGM GPU Diagnostic": {"version": "3.3.9", "test_categories": [{"category": "Stress", "tests": [
		{"name": "targeted_power", "results": [{"gpu_ids": "0", "status": "Pass"}, {"gpu_ids": "1", "status": "Skip", "info": ["GPU 1 power limit cannot be read"]}]}]}]}}`
	var argv []string
	fake := func(_ context.Context, _ []string, name string, args ...string) ([]byte, error) {
		argv = append([]string{name}, args...)
		return []byte(doc), nil
	}
	vs, err := RunDCGMLoad(context.Background(), fake, "dcgmi", "targeted_power", 90*time.Minute, Targets(2), "--host", "unix:///s")
	if err != nil {
		t.Fatal(err)
	}
	if want := "dcgmi diag --host unix:///s -r targeted_power -p targeted_power.test_duration=5400 -j"; strings.Join(argv, " ") != want {
		t.Errorf("ran %q, want %q", argv, want)
	}
	v := find(vs, "gpu/1", "dcgm/targeted_power")
	if v.Status != Error || !strings.Contains(v.Message, "did not run on this GPU") || find(vs, "gpu/0", "dcgm/targeted_power").Status != Pass {
		t.Errorf("verdicts %s", dump(vs))
	}
}

// TestGPUBurnKernelArg: the bundle's compare kernel is passed with -c
// before the time; a path gpu_burn would read as an option is refused.
func TestGPUBurnKernelArg(t *testing.T) {
	burn, _ := os.ReadFile("testdata/gpu-burn-faulty.txt")
	var call string
	fake := func(_ context.Context, env []string, name string, args ...string) ([]byte, error) {
		call = strings.Join(append(append(env, name), args...), " ")
		return burn, nil
	}
	if _, err := RunGPUBurn(context.Background(), fake, "/usr/bin/gpu_burn", "/usr/share/gpu-burn/compare.ptx", time.Hour); err != nil {
		t.Fatal(err)
	}
	if want := "CUDA_DEVICE_ORDER=PCI_BUS_ID /usr/bin/gpu_burn -c /usr/share/gpu-burn/compare.ptx 3600"; call != want {
		t.Errorf("ran %q, want %q", call, want)
	}
	if _, err := RunGPUBurn(context.Background(), fake, "gpu_burn", "/opt/gpu-data/compare.ptx", time.Hour); err == nil || !strings.Contains(err.Error(), `"-d"`) {
		t.Errorf("err = %v", err)
	}
}
