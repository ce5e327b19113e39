package qemutest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/qemu-test/harness"
	"github.com/cure-oss/cure/qemu-test/vbmc"
)

// TestMarginalNodeCaught: four QEMU nodes of one SKU run the qemu-fleet
// diagnostic (a read of each node's NVMe disk, an absolute bar every drive
// clears, a fleet band on readMBps with minNodes 3). Every drive is a model
// rated 4 MB/s (QEMU block throttling, well under what the emulation reads
// even on a loaded host, 11 MB/s at worst here: the fleet agrees as drives
// of one model do, not as the host's load makes TCG vary); node4's is
// degraded to 0.5 MB/s. The three
// healthy nodes run first, at once: each is judged before its fleet has
// three other nodes, so each passes with "fleet band not applied". node4
// passes the absolute bar and is MARGINAL against the three, naming its
// drive, the metric, its value, the fleet median and its percentile, and
// its run fails.
func TestMarginalNodeCaught(t *testing.T) {
	// Four nodes at once: 512 MiB each, which the SKU then declares.
	env := startEnv(t, harness.Options{Nodes: 4, MemoryMiB: 512, PhaseAttempts: 1,
		EditManifest: func(sku *manifests.SKU) { sku.Spec.Hardware.Memory.DIMMSize = 512 << 20 },
		DiskThrottle: map[string]vbmc.DiskThrottle{"node1": {BPS: 4_000_000}, "node2": {BPS: 4_000_000}, "node3": {BPS: 4_000_000}, "node4": {BPS: 500_000}}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	run := func(node string) *curev1.RunReport {
		runID, err := env.Run(ctx, node, modes.Diagnostic, "qemu-fleet", false)
		if err != nil {
			t.Errorf("%s: %v", node, err)
			return nil
		}
		rep, err := env.Follow(ctx, runID, func(e *curev1.TimelineEntry) {
			if e.GetKind() == "metric" || e.GetKind() == "log" {
				return
			}
			t.Logf("%6.1fs %-5s %-6s %-15s %-11s %-8s %s", time.Since(start).Seconds(), node, e.GetSource(), e.GetPhase(), e.GetKind(), e.GetStatus(), e.GetMessage())
		})
		if err != nil {
			t.Errorf("follow %s: %v", node, err)
		}
		return rep
	}
	healthy := make([]*curev1.RunReport, 3)
	var wg sync.WaitGroup
	for i := range healthy {
		wg.Add(1)
		go func() { defer wg.Done(); healthy[i] = run(env.Nodes[i].ID) }()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, rep := range healthy {
		v := verdict(rep, "disk/nvme0n1", "disk-read")
		if rep.GetStatus() != "succeeded" || v == nil || v.GetStatus() != curev1.VerdictStatus_PASS {
			t.Fatalf("healthy %s ended %s (%s), disk-read %v", rep.GetNodeId(), rep.GetStatus(), rep.GetMessage(), v)
		}
		mbps := measured(v, "readMBps")
		j := rep.GetFleetJudgements()
		if len(j) != 1 || j[0].GetApplied() || !strings.HasPrefix(j[0].GetNote(), "fleet band not applied: ") || !strings.HasSuffix(j[0].GetNote(), " of 3 nodes") {
			t.Errorf("healthy %s (readMBps %.1f): fleet judgement %v, want not applied (too few nodes)", rep.GetNodeId(), mbps, j)
		}
		t.Logf("%s readMBps %.1f MB/s: %s", rep.GetNodeId(), mbps, j[0].GetNote())
	}

	slow := run("node4")
	if slow == nil {
		t.FailNow()
	}
	v := verdict(slow, "disk/nvme0n1", "disk-read")
	if v == nil || v.GetStatus() != curev1.VerdictStatus_MARGINAL {
		t.Fatalf("throttled node4's disk-read: %v (run %s: %s)", v, slow.GetStatus(), slow.GetMessage())
	}
	t.Logf("node4: %s", v.GetMessage())
	for _, want := range []string{"readMBps=", " MB/s, fleet median ", "(n=3)", "band >= ", "(3.0 MAD)", "percentile 0"} {
		if !strings.Contains(v.GetMessage(), want) {
			t.Errorf("MARGINAL verdict lacks %q: %s", want, v.GetMessage())
		}
	}
	if slow.GetStatus() != "failed" || !strings.Contains(slow.GetMessage(), "MARGINAL") || !strings.Contains(slow.GetMessage(), "disk/nvme0n1 disk-read readMBps=") {
		t.Errorf("node4's run ended %s: %s; want failed naming the MARGINAL drive", slow.GetStatus(), slow.GetMessage())
	}
	if m := measured(v, "readMBps"); m <= 0.2 || m > 1 {
		t.Errorf("throttled drive read %.2f MB/s; want about 0.5 (and above the absolute bar)", m)
	}
	// Where node4 sits in its fleet, as curectl fleet-bands shows it.
	resp, err := env.Client.FleetBands(ctx, &curev1.FleetBandsRequest{NodeId: "node4", Check: "disk-read", Metric: "readMBps"})
	if err != nil {
		t.Fatal(err)
	}
	if d := resp.GetDistributions(); len(d) != 1 || d[0].GetNodes() != 3 || len(d[0].GetMarks()) != 1 || d[0].GetMarks()[0].GetComponent() != "disk/nvme0n1" || d[0].GetMarks()[0].GetPercentile() != 0 {
		t.Errorf("fleet bands for node4: %v", resp)
	}
}

func measured(v *curev1.Verdict, metric string) float64 {
	for _, m := range v.GetMeasurements() {
		if m.GetMetric() == metric {
			return m.GetValue()
		}
	}
	return -1
}
