package fleet

import (
	"context"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// recordEmitter keeps what an executor emits, with the time of each heartbeat.
type recordEmitter struct {
	mu       sync.Mutex
	beats    []time.Time
	verdicts []*curev1.Verdict
}

func (e *recordEmitter) Verdict(v *curev1.Verdict) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.verdicts = append(e.verdicts, v)
}
func (e *recordEmitter) Log(string, string, map[string]string)             {}
func (e *recordEmitter) Metric(string, float64, string, map[string]string) {}
func (e *recordEmitter) Samples(*curev1.Samples)                           {}
func (e *recordEmitter) PairReady(*curev1.PairReady)                       {}
func (e *recordEmitter) PairResult(*curev1.PairResult)                     {}
func (e *recordEmitter) Progress(*curev1.Progress) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.beats = append(e.beats, time.Now())
}

// The simulated validate phase heartbeats through its whole length at the
// period the assignment asks for, as the real runner's suite does: the
// coordinator counts a validate runner silent for its reconnect budget as
// lost, and a simulated suite longer than that budget (every bench-fleet
// scale: 5 min of checks against a 3 min budget) lost its runner until the
// run's disconnect budget ran out, before naming the missing GPU.
func TestValidateHeartbeats(t *testing.T) {
	const validate = 2200 * time.Millisecond
	n := &Node{Faults: Faults{GPUMissing: true}, sim: &Sim{cfg: Config{Scale: 1, Durations: Durations{Validate: validate}}}}
	em := &recordEmitter{}
	start := time.Now()
	out := (&executor{n: n}).Run(context.Background(), "validate", &curev1.Assignment{HeartbeatMs: 1000}, em)
	end := time.Now()
	if out.Status != curev1.PhaseStatus_PHASE_FAILED {
		t.Errorf("validate of a node missing a GPU: %v %q, want failed", out.Status, out.Message)
	}
	named := false
	for _, v := range em.verdicts {
		named = named || (v.GetComponent() == "gpu/5" && v.GetStatus() == curev1.VerdictStatus_FAIL)
	}
	if !named {
		t.Errorf("no failed verdict on gpu/5 in %v", em.verdicts)
	}
	if len(em.beats) < 3 {
		t.Fatalf("%d heartbeats in a %s validate at a 1 s period, want at least 3", len(em.beats), validate)
	}
	// No gap longer than the period (with slack for a loaded machine).
	const slack = 500 * time.Millisecond
	prev := start
	for i, b := range append(em.beats, end) {
		if gap := b.Sub(prev); gap > time.Second+slack {
			t.Errorf("gap %d: %s without a heartbeat (period 1s)", i, gap.Round(time.Millisecond))
		}
		prev = b
	}
}
