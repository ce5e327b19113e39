package pipeline_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/render"
	"github.com/cure-oss/cure/provisioner-lite/server"
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
	if r.Status != curev1.RunStatus_RUN_SUCCEEDED {
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
	for _, name := range []string{timebuckets.BMCOps, timebuckets.BootToCURE, timebuckets.FirmwarePrefix + string(modes.BIOS), timebuckets.OSInstall,
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

	// The report carries them; curectl prints them; the fleet summary of
	// this one run has its wall time as p50 and p90.
	rep, err := server.BuildReport(ctx, f.st, r)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, x := range rep.GetBuckets() {
		sum += x.GetDurationMs()
	}
	if d := sum - wall.Milliseconds(); d > 1000 || d < -1000 || len(rep.GetBuckets()) != len(b.Buckets) {
		t.Errorf("report buckets: %d of them, %dms, want %d and %s", len(rep.GetBuckets()), sum, len(b.Buckets), wall)
	}
	var out bytes.Buffer
	render.PrintReport(&out, rep)
	if !strings.Contains(out.String(), "TIME BUCKET") || !strings.Contains(out.String(), "  "+timebuckets.FirmwarePOST) {
		t.Errorf("curectl report has no bucket table:\n%s", out.String())
	}
	o := &server.OperatorService{Store: f.st}
	s, err := o.TimeBuckets(ctx, &curev1.TimeBucketsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if s.GetRuns() != 1 || len(s.GetSkus()) != 2 || s.GetSkus()[1].GetSku() != "qemu-nvme" || s.GetSkus()[0].GetWall().GetP90Ms() != wall.Milliseconds() {
		t.Errorf("fleet summary %v", s)
	}
	if s, _ := o.TimeBuckets(ctx, &curev1.TimeBucketsRequest{Selector: map[string]string{"sku": "other"}}); s.GetRuns() != 0 {
		t.Errorf("selector ignored: %d runs", s.GetRuns())
	}
	out.Reset()
	render.PrintBucketSummary(&out, s)
	t.Logf("%s", out.String())
}
