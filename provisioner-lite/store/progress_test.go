package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// TestRunProgress: a run keeps one heartbeat, the newest of its boot, and a
// new boot's replaces it; none of them is an event, so the run's event caps
// never see them; a run that ended takes none.
func TestRunProgress(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	if err := s.CreateRun(ctx, Run{ID: "r1", NodeID: "n1", Status: curev1.RunStatus_RUN_RUNNING}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunProgress(ctx, "r1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("progress before any heartbeat: %v, want ErrNotFound", err)
	}
	t0 := time.UnixMilli(1_700_000_000_000).UTC()
	rec := func(boot string, seq uint64) ProgressRecord {
		return ProgressRecord{RunID: "r1", BootID: boot, Seq: seq, Phase: "validate", Time: t0.Add(time.Duration(seq) * time.Minute),
			Received: t0.Add(time.Duration(seq) * time.Minute), JSON: []byte(fmt.Sprintf(`{"suite":"soak","elapsedMs":"%d"}`, seq*60000))}
	}
	// Half a day of a heartbeat a minute: still one row, no events. (Each
	// heartbeat is a committed write; more of them only slow a loaded
	// PostgreSQL past the test's deadline without proving more.)
	const beats = 12 * 60
	for seq := uint64(1); seq <= beats; seq++ {
		if kept, err := s.PutProgress(ctx, rec("b1", seq)); err != nil || !kept {
			t.Fatalf("heartbeat %d: kept=%v err=%v", seq, kept, err)
		}
	}
	if kept, err := s.PutProgress(ctx, rec("b1", 17)); err != nil || kept {
		t.Fatalf("replayed older heartbeat: kept=%v err=%v, want ignored", kept, err)
	}
	got, err := s.RunProgress(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	want := rec("b1", beats)
	if got.BootID != "b1" || got.Seq != want.Seq || string(got.JSON) != string(want.JSON) || !got.Received.Equal(want.Received) || got.Phase != "validate" {
		t.Errorf("latest = %+v, want %+v", got, want)
	}
	var rows int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM run_progress`).Scan(&rows); err != nil || rows != 1 {
		t.Errorf("run_progress rows = %d (%v), want 1", rows, err)
	}
	if evs, err := s.Events(ctx, "r1", 0, 0); err != nil || len(evs) != 0 {
		t.Errorf("events = %d (%v): heartbeats must not be events", len(evs), err)
	}
	// The node was reset: the new boot counts from seq 1 again.
	if kept, err := s.PutProgress(ctx, rec("b2", 1)); err != nil || !kept {
		t.Fatalf("new boot's first heartbeat: kept=%v err=%v", kept, err)
	}
	if got, _ := s.RunProgress(ctx, "r1"); got.BootID != "b2" || got.Seq != 1 {
		t.Errorf("after the reset: %+v", got)
	}
	r, err := s.GetRun(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	r.Status = curev1.RunStatus_RUN_SUCCEEDED
	if err := s.UpdateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutProgress(ctx, rec("b2", 2)); !errors.Is(err, ErrRunInactive) {
		t.Errorf("heartbeat of an ended run: %v, want ErrRunInactive", err)
	}
	if got, _ := s.RunProgress(ctx, "r1"); got.Seq != 1 {
		t.Errorf("the ended run's last heartbeat is kept for its report: %+v", got)
	}
}
