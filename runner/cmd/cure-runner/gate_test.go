package main

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/runner/agent"
)

type countingExecutor struct{ runs atomic.Int32 }

func (c *countingExecutor) Run(context.Context, string, *curev1.Assignment, agent.Emitter) agent.PhaseOutcome {
	c.runs.Add(1)
	return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_OK}
}

// No phase runs before every kernel module load has ended; a phase
// cancelled while waiting fails without running.
func TestGatedExecutorWaitsForModules(t *testing.T) {
	inner := &countingExecutor{}
	ready := make(chan struct{})
	g := gatedExecutor{Executor: inner, ready: ready}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if out := g.Run(ctx, "hardware", nil, nil); out.Status != curev1.PhaseStatus_PHASE_FAILED || inner.runs.Load() != 0 {
		t.Fatalf("cancelled before the modules: %v, runs %d", out, inner.runs.Load())
	}

	done := make(chan agent.PhaseOutcome, 1)
	go func() { done <- g.Run(context.Background(), "hardware", nil, nil) }()
	select {
	case out := <-done:
		t.Fatalf("phase ran before the modules loaded: %v", out)
	case <-time.After(20 * time.Millisecond):
	}
	close(ready)
	if out := <-done; out.Status != curev1.PhaseStatus_PHASE_OK || inner.runs.Load() != 1 {
		t.Fatalf("after the modules: %v, runs %d", out, inner.runs.Load())
	}
}
