package gpu

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// buildFakeDCGM builds testdata/fakedcgm and links it as nv-hostengine and
// dcgmi in a directory of its own.
func buildFakeDCGM(t *testing.T) (hostEngine, dcgmi string) {
	t.Helper()
	dir := t.TempDir()
	hostEngine, dcgmi = filepath.Join(dir, "nv-hostengine"), filepath.Join(dir, "dcgmi")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", hostEngine, "./testdata/fakedcgm")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the DCGM stand-in: %v\n%s", err, out)
	}
	if err := os.Symlink(hostEngine, dcgmi); err != nil {
		t.Fatal(err)
	}
	return hostEngine, dcgmi
}

// h100Serials are the serials the DCGM 4 fixtures list per GPU id.
var h100Serials = []string{"1654024085490", "1654024085491", "1654024085492", "1654024085493",
	"1654024085494", "1654024085495", "1654024085496", "1654024085497"}

func TestDCGMDiagRun(t *testing.T) {
	he, dcgmi := buildFakeDCGM(t)
	outputs := t.TempDir()
	for level, fixture := range map[string]string{
		"1": "dcgmi-diag-r1.json",            // DCGM 3.x JSON, one GPU failing
		"2": "dcgmi-diag-r2-dcgm4-pass.json", // DCGM 4.x, every test passing
		"3": "dcgmi-diag-r3-dcgm4-fail.json", // DCGM 4.x, two GPUs failing
	} {
		b, err := os.ReadFile(filepath.Join("testdata", fixture))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(outputs, "diag-r"+level+".json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("FAKE_DCGM_DIR", outputs)
	dcgm := DCGM{HostEngine: he, Dcgmi: dcgmi, StartTimeout: 20 * time.Second, StopTimeout: 20 * time.Second}

	// run runs one diagnostic and returns its verdicts and what the
	// stand-in was asked to do.
	run := func(t *testing.T, level int, targets []DCGMTarget) ([]Verdict, []string) {
		t.Helper()
		logFile := filepath.Join(t.TempDir(), "calls")
		t.Setenv("FAKE_DCGM_LOG", logFile)
		d := dcgm
		// Short: a Unix socket path must fit in 108 bytes, and subtest
		// names make t.TempDir long.
		work, err := os.MkdirTemp("", "dcgm")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(work) })
		d.WorkDir = work
		vs, err := d.RunDiag(context.Background(), level, time.Minute, targets)
		if err != nil {
			t.Fatal(err)
		}
		if left, _ := os.ReadDir(d.WorkDir); len(left) != 0 {
			t.Errorf("work directory not cleaned up: %v", left)
		}
		b, _ := os.ReadFile(logFile)
		return vs, strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	// lifecycle checks the host engine was started in the foreground on a
	// private socket, dcgmi pointed at it, and the engine stopped after.
	lifecycle := func(t *testing.T, calls []string, level string) {
		t.Helper()
		if len(calls) != 4 {
			t.Fatalf("calls = %q, want start, diag, --term and the engine's exit", calls)
		}
		start := strings.Fields(calls[0])
		if start[0] != "nv-hostengine" || start[1] != "-n" || start[2] != "--domain-socket" || !slices.Contains(start, "--pid") {
			t.Errorf("host engine started as %q", calls[0])
		}
		sock := start[3]
		if want := "dcgmi diag --host unix://" + sock + " -r " + level + " -j"; calls[1] != want {
			t.Errorf("dcgmi ran as %q, want %q", calls[1], want)
		}
		if !strings.HasPrefix(calls[2], "nv-hostengine --term --pid ") || calls[3] != "nv-hostengine exited on SIGTERM" {
			t.Errorf("host engine not stopped through --term: %q", calls[2:])
		}
		if _, err := os.Stat(sock); err == nil {
			t.Errorf("socket %s still there", sock)
		}
	}

	t.Run("level 2 passing", func(t *testing.T) {
		targets := Targets(8)
		for i := range targets {
			targets[i].Serial = h100Serials[i]
		}
		vs, calls := run(t, 2, targets)
		lifecycle(t, calls, "2")
		if got := bad(vs); len(got) != 0 {
			t.Errorf("failing = %q\n%s", got, dump(vs))
		}
		if len(vs) != 8*3 {
			t.Errorf("%d verdicts, want one per GPU and test (software, pcie, memory)\n%s", len(vs), dump(vs))
		}
		for _, c := range []string{"dcgm/software", "dcgm/pcie", "dcgm/memory"} {
			if v := find(vs, "gpu/7", c); v.Status != Pass || !strings.Contains(v.Message, "DCGM 4.6.0") {
				t.Errorf("gpu/7 %s = %v", c, v)
			}
		}
	})

	t.Run("level 3 failing, GPUs named by serial", func(t *testing.T) {
		// The components follow the board's slot order, which here is
		// NVML's reversed: DCGM's GPU 5 is the board in slot 2.
		var targets []DCGMTarget
		for slot := range 8 {
			targets = append(targets, DCGMTarget{ID: slot, Component: "gpu/" + string(rune('0'+slot)), Serial: h100Serials[7-slot]})
		}
		vs, calls := run(t, 3, targets)
		lifecycle(t, calls, "3")
		if got := bad(vs); !slices.Equal(got, []string{"gpu/2 dcgm/targeted_power", "gpu/4 dcgm/pcie"}) {
			t.Fatalf("failing = %q\n%s", got, dump(vs))
		}
		v := find(vs, "gpu/4", "dcgm/pcie")
		for _, want := range []string{"DCGM_FR_PCIE_REPLAY_THRESHOLD_VIOLATION (error 107, isolate)",
			"Detected 412 pcie_replay_counter for GPU 3 which is above the threshold 80", "Integration/pcie"} {
			if !strings.Contains(v.Message, want) {
				t.Errorf("gpu/4 pcie message %q lacks %q", v.Message, want)
			}
		}
		v = find(vs, "gpu/2", "dcgm/targeted_power")
		if v.Observed != "Fail" || !strings.Contains(v.Message, "DCGM_FR_TARGET_POWER (error 63, triage): Max power of 612.3") {
			t.Errorf("gpu/2 targeted_power = %v", v)
		}
		if len(vs) != 8*7 {
			t.Errorf("%d verdicts, want 8 GPUs x 7 tests", len(vs))
		}
	})

	t.Run("level 1, DCGM 3 JSON", func(t *testing.T) {
		vs, calls := run(t, 1, Targets(8))
		lifecycle(t, calls, "1")
		if got := bad(vs); !slices.Equal(got, []string{"gpu/3 dcgm/gpu_memory"}) {
			t.Fatalf("failing = %q\n%s", got, dump(vs))
		}
		if v := find(vs, "gpu/6", "dcgm/gpu_memory"); v.Status != Skip || !strings.Contains(v.Message, "ECC is not enabled") {
			t.Errorf("gpu/6 = %v", v)
		}
	})

	t.Run("host engine does not start", func(t *testing.T) {
		t.Setenv("FAKE_DCGM_FAIL_START", "1")
		vs, calls := run(t, 2, Targets(8))
		if len(vs) != 1 || vs[0].Component != "gpu" || vs[0].Status != Error ||
			!strings.Contains(vs[0].Message, "Err: Failed to start DCGM Server") || !strings.Contains(vs[0].Message, "Could not load NVML library") {
			t.Fatalf("verdicts = %s", dump(vs))
		}
		if slices.ContainsFunc(calls, func(c string) bool { return strings.HasPrefix(c, "dcgmi") }) {
			t.Errorf("dcgmi ran without a host engine: %q", calls)
		}
	})

	t.Run("targeted_stress as the load", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join("testdata", "dcgmi-diag-targeted-stress-dcgm4.json"))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(outputs, "diag-rtargeted_stress.json"), b, 0o644)
		logFile := filepath.Join(t.TempDir(), "calls")
		t.Setenv("FAKE_DCGM_LOG", logFile)
		d := dcgm
		d.WorkDir, _ = os.MkdirTemp("", "dcgm")
		defer os.RemoveAll(d.WorkDir)
		vs, err := d.RunLoad(context.Background(), "targeted_stress", 22*time.Hour+30*time.Minute, Targets(8))
		if err != nil {
			t.Fatal(err)
		}
		calls, _ := os.ReadFile(logFile)
		if !strings.Contains(string(calls), " -r targeted_stress -p targeted_stress.test_duration=81000 -j\n") {
			t.Errorf("calls = %s", calls)
		}
		if got := bad(vs); !slices.Equal(got, []string{"gpu/6 dcgm/targeted_stress"}) || len(vs) != 8 {
			t.Fatalf("failing = %q\n%s", got, dump(vs))
		}
		if v := find(vs, "gpu/6", "dcgm/targeted_stress"); !strings.Contains(v.Message,
			"DCGM_FR_STRESS_LEVEL (error 50, triage): Max stress level of 31842.7 did not reach desired stress level of 39123.9 for GPU 6") {
			t.Errorf("gpu/6 = %v", v)
		}
		if _, err := d.RunLoad(context.Background(), "diagnostic", time.Hour, Targets(8)); err == nil {
			t.Error("a test that is not a timed load accepted")
		}
	})

	t.Run("bad level", func(t *testing.T) {
		if _, err := dcgm.RunDiag(context.Background(), 5, time.Minute, Targets(1)); err == nil {
			t.Error("level 5 accepted")
		}
	})
}
