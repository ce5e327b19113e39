package pipeline_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/qemu-test/vbmc"
)

// restartWhen restarts the engine once, the first time the stored run
// satisfies cond; fired says whether it did.
func (f *fixture) restartWhen(ctx context.Context, runID string, cond func(store.Run) bool) (fired *atomic.Bool) {
	fired = &atomic.Bool{}
	go func() {
		for ctx.Err() == nil {
			r, err := f.st.GetRun(ctx, runID)
			if err == nil && cond(r) {
				f.restart()
				fired.Store(true)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return fired
}

// stopAtBIOSReset stops the engine the instant the BMC has done the BIOS
// reboot's reset, before its answer reaches the engine (as a stop landing
// while the answer is on the wire does), and starts another.
func (f *fixture) stopAtBIOSReset() (fired *atomic.Bool) {
	fired = &atomic.Bool{}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wrapBMC = func(b pipeline.BMC) pipeline.BMC {
		return &resetHookBMC{BMC: b, after: func(ctx context.Context) error {
			r, err := f.st.GetRun(ctx, f.onlyRun())
			if err != nil || r.Pipeline.BMC.BIOS.Stage != store.BIOSRebooted || !fired.CompareAndSwap(false, true) {
				return nil
			}
			f.mu.Lock()
			stop := f.cancel
			f.mu.Unlock()
			stop()
			go f.restart()
			return ctx.Err() // what a cut HTTP call returns
		}}
	}
	return fired
}

// onlyRun is the fixture node's active run.
func (f *fixture) onlyRun() string {
	runs, err := f.st.ActiveRuns(context.Background())
	if err != nil || len(runs) != 1 {
		return ""
	}
	return runs[0].ID
}

// resetHookBMC runs after once the BMC has done a Reset.
type resetHookBMC struct {
	pipeline.BMC
	after func(ctx context.Context) error
}

func (b *resetHookBMC) Reset(ctx context.Context, resetType string) error {
	if err := b.BMC.Reset(ctx, resetType); err != nil {
		return err
	}
	return b.after(ctx)
}

// bmcOnly pins new BMC firmware, activated by a BMC reset.
func bmcOnly(t *testing.T) func(*manifests.SKU, string) {
	return func(sku *manifests.SKU, cas string) {
		sku.Spec.Firmware = append(sku.Spec.Firmware,
			manifests.Firmware{Name: "bmc", Component: "bmc", Via: "redfish", Match: manifests.Match{RedfishID: "BMC"}, Version: "1.50.0", Gate: "equal",
				Artifact: fwPackage(t, cas, "BMC", "1.50.0"), Activation: "bmc-reset"})
	}
}

// The coordinator stops while the BMC's update task runs and starts again:
// the new one follows the task it finds in the run's status to its end;
// the BMC sees exactly one submission and the run succeeds.
func TestCoordinatorRestartMidFirmwareTask(t *testing.T) {
	f := newFixtureBMC(t, bmcOnly(t), func(c *vbmc.Config) { c.TaskDuration = 3 * time.Second })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runID, err := f.eng.Start(ctx, "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	var flashedBefore atomic.Int32
	fired := f.restartWhen(ctx, runID, func(r store.Run) bool {
		if r.Pipeline.Submission("bmc").State != store.SubmissionAccepted {
			return false
		}
		flashedBefore.Store(int32(f.bmc.Flashes("BMC")))
		return true
	})
	r := f.waitRun(runID)
	if !fired.Load() {
		t.Fatal("the run never had an accepted update task to restart in")
	}
	if n := flashedBefore.Load(); n != 0 {
		t.Fatalf("fixture: the task had already flashed (%d) when the coordinator stopped", n)
	}
	if r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("run ended %s: %s", r.Status, r.Message)
	}
	if tasks := f.bmc.Tasks(); len(tasks) != 1 {
		t.Errorf("the BMC saw %d update submissions %v, want exactly one", len(tasks), tasks)
	}
	if n := f.bmc.Flashes("BMC"); n != 1 {
		t.Errorf("BMC flashed %d times, want once", n)
	}
	if v, _, _ := f.bmc.FirmwareVersion("BMC"); v != "1.50.0" {
		t.Errorf("BMC runs %q", v)
	}
	if notes := f.notes(runID, "continuing attempt 1 after a coordinator stop"); len(notes) == 0 {
		t.Error("the bmc phase did not continue its attempt after the restart")
	}
	if r.Pipeline.Submission("bmc").State != "" {
		t.Errorf("the update's record outlived its verification: %+v", r.Pipeline.Submission("bmc"))
	}
}

// actionCounts are the actions a provision takes on the node that a
// restart must not repeat.
type actionCounts struct {
	Boots, Reboots, Tasks, BiosApplied, Overrides int
}

func (f *fixture) actions(r store.Run) actionCounts {
	return actionCounts{Boots: len(f.bmc.History()), Reboots: r.Reboots, Tasks: len(f.bmc.Tasks()), BiosApplied: f.bmc.BiosApplied(),
		Overrides: len(f.bmc.Overrides())}
}

// biosAndBMC pins new BMC firmware and one BIOS attribute.
func biosAndBMC(t *testing.T) func(*manifests.SKU, string) {
	return func(sku *manifests.SKU, cas string) {
		bmcOnly(t)(sku, cas)
		sku.Spec.BIOS = &manifests.BIOS{Settings: map[string]any{"ProcTurboMode": "Disabled"}}
	}
}

// For each wait of a provision, a coordinator restart at that point
// resumes without repeating an action: the node is powered, booted,
// flashed, configured and rebooted exactly as often as in a run nobody
// interrupted.
func TestRestartDuringEveryWait(t *testing.T) {
	slow := func(f *fixture) {
		f.mu.Lock()
		f.pxeDelay, f.hostBootDelay = 600*time.Millisecond, 600*time.Millisecond
		f.hold = map[modes.PhaseName]time.Duration{modes.Hardware: 800 * time.Millisecond}
		f.mu.Unlock()
	}
	base := newFixture(t, biosAndBMC(t))
	slow(base)
	baseRun, err := base.eng.Start(context.Background(), "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	br := base.waitRun(baseRun)
	if br.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("uninterrupted run ended %s: %s", br.Status, br.Message)
	}
	want := base.actions(br)
	t.Logf("an uninterrupted provision: %+v", want)

	points := []struct {
		name string
		// at is the restart point, seen in the stored run (nil: the boot
		// hook, between the boot decision and the runner's Hello).
		at func(store.Run) bool
	}{
		{"power", func(r store.Run) bool { return !r.Pipeline.PowerOn.At.IsZero() }},
		{"boot", nil},
		{"cure", func(r store.Run) bool { return r.Phase == modes.Hardware }},
		{"bios_apply", func(r store.Run) bool { return r.Pipeline.BMC.BIOS.Stage == store.BIOSRebooted }},
		{"host_os", func(r store.Run) bool { return !r.Pipeline.Host.RebootedAt.IsZero() }},
		// The BIOS reboot's reset done by the BMC, its answer not back yet.
		{"bios_reset_answer", nil},
	}
	for _, p := range points {
		t.Run(p.name, func(t *testing.T) {
			// Each point has its own store, BMC and engine; the runs mostly
			// wait (boot and callback delays), so they overlap.
			t.Parallel()
			f := newFixture(t, biosAndBMC(t))
			slow(f)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var fired *atomic.Bool
			if p.name == "bios_reset_answer" {
				fired = f.stopAtBIOSReset()
			} else if p.at == nil {
				fired = &atomic.Bool{}
				f.onBoot = func() {
					if fired.CompareAndSwap(false, true) {
						f.restart()
					}
				}
			}
			runID, err := f.eng.Start(ctx, "node1", modes.Provision, "", false)
			if err != nil {
				t.Fatal(err)
			}
			if p.at != nil {
				fired = f.restartWhen(ctx, runID, p.at)
			}
			r := f.waitRun(runID)
			if !fired.Load() {
				t.Fatalf("the run never reached the restart point")
			}
			if r.Status != curev1.RunStatus_RUN_SUCCEEDED {
				t.Fatalf("run ended %s: %s", r.Status, r.Message)
			}
			if got := f.actions(r); got != want {
				t.Errorf("actions after a restart at %s: %+v, want %+v as uninterrupted", p.name, got, want)
			}
			for _, ph := range []modes.PhaseName{modes.PoweringOn, modes.WaitForCURE, modes.BIOSSettings, modes.WaitForHostOS} {
				if n := r.Pipeline.Attempts(ph); n != 1 {
					t.Errorf("%s took %d attempts, want 1 (a restart continues the attempt)", ph, n)
				}
			}
		})
	}
}
