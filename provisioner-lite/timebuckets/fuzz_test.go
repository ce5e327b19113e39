package timebuckets

import (
	"testing"
	"time"

	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// FuzzRunnerText: the runner writes the metric and Hello text the buckets
// read (stage seconds, guest uptime). Whatever it sends, the buckets and
// their sub-buckets stay non-negative and add up to the run's wall time:
// a node's numbers never move a boundary the coordinator's clock set.
func FuzzRunnerText(f *testing.F) {
	for _, s := range []string{
		StageMetric + "=12.5s disk=nvme0n1 stage=download",
		StageMetric + "=1e308s stage=write",
		StageMetric + "=-0s stage=decode",
		StageMetric + "=NaNs stage=readback",
		StageMetric + "=InFs stage=stream",
		"runner connected from x: guest_uptime=99999999999999999999ms",
		"runner connected from x: guest_uptime=-5ms",
	} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, metric, hello string) {
		run := store.Run{StartedAt: at(0), EndedAt: at(100)}
		phases := []store.Phase{ph(modes.WaitForCURE, 0, 40, 1, "ok"), ph(modes.OSInstall, 40, 100, 1, "ok")}
		events := []store.Event{
			info(modes.WaitForCURE, 30, "runner connected from x: "+hello),
			{Kind: "metric", Phase: modes.OSInstall, Time: at(50), Message: metric},
			{Kind: "metric", Phase: modes.OSInstall, Time: at(60), Message: StageMetric + "=5s stage=readback " + metric},
		}
		b := Compute(run, phases, events, time.Time{})
		if b.Total() != 100*time.Second {
			t.Fatalf("buckets add up to %v, want 100s: %+v", b.Total(), b.Buckets)
		}
		for _, x := range b.Buckets {
			var sub time.Duration
			for _, s := range x.Sub {
				if s.Duration < 0 {
					t.Fatalf("negative sub-bucket %+v", s)
				}
				sub += s.Duration
			}
			if x.Duration < 0 || (len(x.Sub) > 0 && sub != x.Duration) {
				t.Fatalf("bucket %s = %v, its sub-buckets %v: %+v", x.Name, x.Duration, sub, x.Sub)
			}
		}
	})
}
