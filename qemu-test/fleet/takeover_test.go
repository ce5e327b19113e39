//go:build e2e_fleet

package fleet

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/store/pgtest"
)

// TestInstanceKilledRunsTakenOver is the 40-node version of
// TestThreeInstancesOnPostgres's takeover (make e2e-fleet): two coordinator
// instances on one PostgreSQL database; instance 1 is
// SIGKILLed mid-batch and never comes back. Instance 2 takes its runs over
// once their leases expire and finishes them: every healthy node succeeds in
// its one run, every component is flashed exactly once, and every run's
// timeline holds the end of every in-band phase.
func TestInstanceKilledRunsTakenOver(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet simulation: not in -short")
	}
	dsn := pgtest.Start(t).NewDatabase(t)
	const nodes = 40
	cfg := Config{Nodes: nodes, Seed: 42, Instances: 2, DSN: dsn, KillAfter: 2 * time.Second, LeaseTTL: 3 * time.Second, Work: t.TempDir()}
	var timelineProblems []string
	var sim *Sim
	cfg.AfterBatch = func(ctx context.Context, c curev1.OperatorServiceClient) error {
		var err error
		timelineProblems, err = phaseEndProblems(ctx, c, sim.Nodes)
		return err
	}
	ctx := context.Background()
	s, err := Start(ctx, cfg)
	sim = s
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d nodes on 2 instances: wall %s, healthy first pass %d/%d, %d commits, instance kills %d",
		res.Nodes, res.Wall.Round(time.Millisecond), res.HealthyFirstPass, res.Healthy, res.Commits, res.CoordinatorKills)
	for _, p := range res.Problems {
		t.Error(p)
	}
	check(t, res)
	for _, p := range timelineProblems {
		t.Error(p)
	}
	if res.CoordinatorKills != 1 {
		t.Fatalf("instance killed %d times, want once", res.CoordinatorKills)
	}
	log2, err := os.ReadFile(filepath.Join(cfg.Work, "fleet-2.log"))
	if err != nil {
		t.Fatal(err)
	}
	took := strings.Count(string(log2), "took over run whose lease expired")
	if took == 0 {
		t.Fatal("instance 2 took no run over: the kill came too late to test a takeover")
	}
	t.Logf("instance 2 took %d runs over", took)
	for _, n := range s.Nodes {
		f := n.AllFlashes()
		if f[nicComponent] != 1 || f["nvme/0"] != 1 || f["bmc"] != 1 || f["bios"] != 1 {
			t.Errorf("%s: flashes %v, want bmc, bios, nic and nvme flashed exactly once", n.ID, f)
		}
	}
}
