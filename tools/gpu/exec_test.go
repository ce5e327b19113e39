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
	vs, err := RunGPUBurn(context.Background(), fake, "/usr/bin/gpu_burn", 90*time.Second)
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
	if _, err := RunGPUBurn(context.Background(), fake, "gpu_burn", 0); err == nil {
		t.Error("zero duration accepted")
	}
}
