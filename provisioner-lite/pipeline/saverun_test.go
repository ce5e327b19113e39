package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// A run's write the store could not take in time (answered "context
// deadline exceeded" from behind a slow commit) is tried again until it
// lands: otherwise a run that ended stayed "running" in the store, and a
// 5,000-node batch never saw its end. Final refusals are not retried.
func TestSaveRunRetriesTransientFailures(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	plan := retryPlan{attempts: 4, timeout: time.Second, backoff: time.Millisecond}
	r := store.Run{ID: "r1", NodeID: "n1", Status: curev1.RunStatus_RUN_SUCCEEDED}
	for _, tc := range []struct {
		name      string
		failures  []error
		wantCalls int
		wantErr   error
	}{
		{"lands after two timeouts", []error{context.DeadlineExceeded, fmt.Errorf("store: update run r1: %w", context.DeadlineExceeded)}, 3, nil},
		{"lease lost is final", []error{fmt.Errorf("x: %w", store.ErrLeaseLost)}, 1, store.ErrLeaseLost},
		{"unknown run is final", []error{store.ErrNotFound}, 1, store.ErrNotFound},
		{"closed store is final", []error{store.ErrClosed}, 1, store.ErrClosed},
		{"gives up after the plan", []error{context.DeadlineExceeded, context.DeadlineExceeded, context.DeadlineExceeded, context.DeadlineExceeded, context.DeadlineExceeded}, 4, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			var written store.Run
			update := func(ctx context.Context, got store.Run) error {
				if _, ok := ctx.Deadline(); !ok {
					t.Error("a write without a deadline")
				}
				calls++
				if calls <= len(tc.failures) {
					return tc.failures[calls-1]
				}
				written = got
				return nil
			}
			err := saveRun(context.Background(), update, r, log, plan)
			if calls != tc.wantCalls {
				t.Errorf("%d writes, want %d", calls, tc.wantCalls)
			}
			if tc.wantErr == nil && (err != nil || written.Status != curev1.RunStatus_RUN_SUCCEEDED) {
				t.Errorf("err %v, written %v: want the run's end written", err, written.Status)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("err %v, want %v", err, tc.wantErr)
			}
		})
	}
	// Shutting down: one more try, not the whole plan.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	err := saveRun(ctx, func(context.Context, store.Run) error { calls++; return context.DeadlineExceeded }, r, log, plan)
	if calls != 2 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("while shutting down: %d writes (%v), want 2", calls, err)
	}
}
