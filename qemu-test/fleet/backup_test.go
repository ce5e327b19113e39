package fleet

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// A coordinator is backed up while it drives a node's provision (the
// node's NIC flashed, its OS not yet written), with `provisioner-lite
// backup` against its live, locked state dir; it is then killed for good,
// the backup is restored with `provisioner-lite restore` into a fresh state
// dir, and a fresh coordinator on the restored state resumes the run and
// finishes it.
func TestBackupRestoreContinuesRun(t *testing.T) {
	if testing.Short() {
		t.Skip("fleet simulation: not in -short")
	}
	// SQLite: the PostgreSQL dump and load are TestBackupRestorePostgres's
	// (provisioner-lite/backup); a second simulated run here would double
	// the test's time for the same coordinator path.
	start := time.Now()
	cfg := Config{Nodes: 1, Seed: 34, Work: t.TempDir(), Scale: 1000}
	ctx := context.Background()
	s, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	restored := make(chan error, 1)
	go func() { restored <- s.backupAndRestoreMidRun(ctx) }()
	res, err := s.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-restored; err != nil {
		t.Fatal(err)
	}
	if res.Started != 1 || res.HealthyFirstPass != 1 {
		t.Fatalf("the run did not continue to success on the restored coordinator: %+v", res.Problems)
	}
	log, err := os.ReadFile(filepath.Join(cfg.Work, "fleet-1.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "resumed_runs=1 state="+filepath.Join(cfg.Work, "restored-state")) {
		t.Fatal("the coordinator on the restored state dir did not resume the run")
	}
	t.Logf("provision backed up mid-run, restored into a fresh coordinator and finished: %s (flashes %v)",
		time.Since(start).Round(time.Millisecond), s.Nodes[0].AllFlashes())
}

// backupAndRestoreMidRun waits for the node's NIC flash, backs the live
// coordinator up, kills it, restores the backup into a fresh state dir
// and starts a coordinator there on the same addresses.
func (s *Sim) backupAndRestoreMidRun(ctx context.Context) error {
	n := s.Nodes[0]
	deadline := time.Now().Add(2 * time.Minute)
	for n.Flashes()[nicComponent] == 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("the node's NIC was never flashed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.coordMu.Lock()
	c := s.coords[0]
	oldState := c.stateDir
	s.coordMu.Unlock()
	archive := filepath.Join(s.cfg.Work, "mid-run.backup")
	args := []string{"backup", "--state-dir", oldState, "--out", archive}
	if s.cfg.DSN != "" {
		args = append(args, "--db", s.cfg.DSN)
	}
	if out, err := exec.CommandContext(ctx, s.cfg.Bin, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("backup of the running coordinator: %v\n%s", err, out)
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	fs, err := s.Client().Fleet(fctx, &curev1.FleetRequest{})
	cancel()
	if err != nil || fs.GetActive() != 1 {
		return fmt.Errorf("the run had ended when the backup did (%v, %v): not mid-run", fs, err)
	}
	s.stopCoordinator(0, true)
	fresh := filepath.Join(s.cfg.Work, "restored-state")
	args = []string{"restore", "--in", archive, "--state-dir", fresh}
	out, err := exec.CommandContext(ctx, s.cfg.Bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("restore: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "restored") {
		return fmt.Errorf("restore said: %s", out)
	}
	s.coordMu.Lock()
	c.stateDir = fresh
	s.coordMu.Unlock()
	return s.startCoordinator(ctx, 0)
}
