package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/timebuckets"
)

// TestTimeBuckets runs a provision through the pipeline fixture and splits
// it into time buckets from what the store kept: they add up to the run's
// wall time (within a second: stored times are milliseconds), and the boot
// into CURE and the install show their steps.
func TestTimeBuckets(t *testing.T) {
	f := newFixture(t, nil)
	runID, err := f.eng.Start(context.Background(), "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	r := f.waitRun(runID)
	if r.Status != "succeeded" {
		t.Fatalf("run ended %s: %s", r.Status, r.Message)
	}
	ctx := context.Background()
	phases, err := f.st.Phases(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	events, err := f.st.Events(ctx, runID, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	b := timebuckets.Compute(r, phases, events, time.Now())
	wall := r.EndedAt.Sub(r.StartedAt)
	if d := b.Total() - wall; d > time.Second || d < -time.Second {
		t.Fatalf("buckets add up to %s, wall time %s", b.Total(), wall)
	}
	for _, name := range []string{timebuckets.BMCOps, timebuckets.BootToCURE, timebuckets.FirmwarePrefix + modes.BIOS, timebuckets.OSInstall,
		timebuckets.BootInstalledOS, timebuckets.FirmwarePOST, timebuckets.KernelAndRunner, timebuckets.ImageStream, timebuckets.OSBootCallback} {
		if _, ok := b.Get(name); !ok {
			t.Errorf("bucket %s missing: %+v", name, b.Buckets)
		}
	}
	if g, _ := b.Get(timebuckets.BMCOps); g.Reboots < 1 {
		t.Errorf("bmc_operations reboots = %d, want the power-on", g.Reboots)
	}
	for _, x := range b.Buckets {
		t.Logf("%-28s %10s reboots=%d attempts=%d", x.Name, x.Duration.Round(time.Millisecond), x.Reboots, x.Attempts)
		for _, s := range x.Sub {
			t.Logf("  %-26s %10s", s.Name, s.Duration.Round(time.Millisecond))
		}
	}
}
