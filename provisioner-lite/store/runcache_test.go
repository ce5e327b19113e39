package store

import (
	"context"
	"errors"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// A run's update that shared its batch with a write that failed is written
// when the batch runs again: the run cache moves only after a commit. When
// the cache moved inside the rolled-back attempt, the retry found nothing to
// change, answered success and left the row as it was.
func TestUpdateRunSurvivesBatchRetry(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	if err := s.UpsertNode(ctx, testNode("n1")); err != nil {
		t.Fatal(err)
	}
	r := Run{ID: "r1", NodeID: "n1", Mode: "provision", Status: curev1.RunStatus_RUN_RUNNING, StartedAt: time.Now()}
	if err := s.CreateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	// Hold the committer so the update and the failing write share a batch.
	hold, held := make(chan struct{}), make(chan struct{})
	holder := make(chan error, 1)
	go func() {
		holder <- s.tx(context.Background(), func(*Tx) error { close(held); <-hold; return nil })
	}()
	<-held
	// A step of a run still active: the cache keeps active runs' rows.
	step := r
	step.Phase, step.Message = "nvme", "flashing"
	update := make(chan error, 1)
	go func() { update <- s.UpdateRun(ctx, step) }()
	failing := make(chan error, 1)
	boom := errors.New("a later write of the batch fails")
	waitQueued(t, s, 2)
	go func() { failing <- s.tx(ctx, func(*Tx) error { return boom }) }()
	waitQueued(t, s, 3)
	close(hold)
	if err := <-holder; err != nil {
		t.Fatal(err)
	}
	if err := <-failing; !errors.Is(err, boom) {
		t.Fatalf("the failing write answered %v", err)
	}
	if err := <-update; err != nil {
		t.Fatalf("UpdateRun: %v", err)
	}
	got, err := s.GetRun(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Phase != "nvme" || got.Message != "flashing" {
		t.Fatalf("after the batch ran again the run is at phase %q %q, want nvme, \"flashing\"", got.Phase, got.Message)
	}
}

// waitQueued waits until n writes are queued or running in the committer:
// the held one plus those sent after it.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(s.gc.ops)+1 < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued, want %d", len(s.gc.ops)+1, n)
		}
		time.Sleep(time.Millisecond)
	}
}
