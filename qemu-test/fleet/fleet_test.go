package fleet

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func runFleet(t *testing.T, cfg Config) *Result {
	t.Helper()
	if testing.Short() {
		t.Skip("fleet simulation: not in -short")
	}
	cfg.Work = t.TempDir()
	if d := os.Getenv("FLEET_KEEP"); d != "" {
		// Keep the coordinator logs and state for a look afterwards.
		cfg.Work = filepath.Join(d, t.Name())
		if err := os.MkdirAll(cfg.Work, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if os.Getenv("FLEET_LOG") != "" {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	ctx := context.Background()
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Run(ctx)
	if err != nil {
		if b, rerr := os.ReadFile(cfg.Work + "/coordinator.log"); rerr == nil && len(b) > 0 {
			tail := b[max(0, len(b)-8000):]
			t.Logf("coordinator log tail:\n%s", tail)
		}
		t.Fatal(err)
	}
	t.Logf("%d nodes: %d started, %d refused; wall %s; healthy first pass %d/%d; faults named %d/%d; coordinator peak RSS %.0f MiB, CPU %.1f s; ack p50 %s p99 %s; transitions p50 %s p99 %s; %d commits (%.1f per run); %d boots; %d coordinator kills",
		res.Nodes, res.Started, res.Refused, res.Wall.Round(time.Millisecond), res.HealthyFirstPass, res.Healthy, res.FaultsNamed, res.Faulted,
		res.RSSMiB, res.CPUSeconds, res.AckP50, res.AckP99, res.TransP50, res.TransP99, res.Commits, res.CommitsPerRun, res.Reboots, res.CoordinatorKills)
	for _, p := range res.Problems {
		t.Errorf("%s", p)
	}
	return res
}

// check asserts what every fleet run must hold.
func check(t *testing.T, res *Result) {
	t.Helper()
	if res.Started != res.Nodes {
		t.Errorf("%d of %d nodes started (%d refused: %v)", res.Started, res.Nodes, res.Refused, res.RefusedReasons)
	}
	if res.HealthyFirstPass != res.Healthy || res.Healthy == 0 {
		t.Errorf("healthy nodes on the first pass: %d of %d", res.HealthyFirstPass, res.Healthy)
	}
	if res.FaultsNamed != res.Faulted {
		t.Errorf("hardware faults named: %d of %d", res.FaultsNamed, res.Faulted)
	}
	if res.DoubleFlashes != 0 {
		t.Errorf("%d components flashed twice", res.DoubleFlashes)
	}
}

func TestFleetSmall(t *testing.T) {
	res := runFleet(t, Config{Nodes: 12, Seed: 1, TransientRate: 0.2, HardwareRate: 0.25})
	check(t, res)
	if res.Faulted != 3 {
		t.Errorf("%d hardware-faulted nodes, want 3", res.Faulted)
	}
}

func TestFleet500WithFaults(t *testing.T) {
	res := runFleet(t, Config{Nodes: 500, Seed: 500, TransientRate: 0.03, HardwareRate: 0.03, DiagnosticShare: 0.05, KillCoordinatorAt: 0.3})
	check(t, res)
	if res.CoordinatorKills != 1 {
		t.Errorf("coordinator killed %d times, want once", res.CoordinatorKills)
	}
	if res.Faulted < 10 {
		t.Errorf("only %d hardware-faulted nodes in 500", res.Faulted)
	}
}

func TestFleetCoordinatorKilled(t *testing.T) {
	res := runFleet(t, Config{Nodes: 30, Seed: 3, KillCoordinatorAt: 0.01})
	check(t, res)
}
