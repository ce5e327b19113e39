package server_test

import (
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
)

// A session's metrics, logs and heartbeats are acked without a commit each
// (the store writes them in batches, store.QueueRunnerEvent); its phase
// events are committed before their ack; the timeline keeps the runner's
// order.
func TestSessionProgressAckedWithoutCommit(t *testing.T) {
	h := newHostile(t)
	tok := h.fetchToken(nodeA.mac)
	s, cancel := h.session(helloOpts{token: tok, boot: "b1", node: nodeA})
	defer cancel()
	before := h.st.Stats()
	const n = 300
	var seq uint64
	for i := range n {
		seq++
		ev := logEvent(seq, "", "working")
		switch i % 3 {
		case 1:
			ev = &curev1.Event{Seq: seq, TimeUnixMs: time.Now().UnixMilli(), Body: &curev1.Event_Metric{Metric: &curev1.Metric{Name: "gpu0_temp", Value: 61, Unit: "C"}}}
		case 2:
			ev = progressEvent(seq, string(modes.SEDRevert), &curev1.Progress{Suite: "soak", ElapsedMs: int64(seq)})
		}
		if err := send(s, ev); err != nil {
			t.Fatalf("seq %d: %v", seq, err)
		}
	}
	mid := h.st.Stats()
	c := mid.Commits - before.Commits
	t.Logf("%d commits while %d metrics, logs and heartbeats were acked", c, n)
	if c > n/10 {
		t.Errorf("%d commits for %d acked metrics, logs and heartbeats: want them batched", c, n)
	}
	if q := mid.ProgressQueued - before.ProgressQueued; q != n {
		t.Errorf("%d queued, want %d", q, n)
	}
	seq++
	if err := send(s, &curev1.Event{Seq: seq, Phase: string(modes.SEDRevert), TimeUnixMs: time.Now().UnixMilli(), Body: &curev1.Event_PhaseStart{PhaseStart: &curev1.PhaseStart{}}}); err != nil {
		t.Fatal(err)
	}
	if h.st.Stats().Commits == mid.Commits {
		t.Error("a phase start was acked before any commit")
	}
	evs := h.runnerEvents(nodeA.run)
	if len(evs) != n*2/3+1 || evs[len(evs)-1].Kind != runstate.EventPhaseStart {
		t.Fatalf("%d runner events, want %d logs and metrics then the phase start", len(evs), n*2/3)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq <= evs[i-1].Seq {
			t.Fatalf("timeline out of the runner's order at %d: seq %d after %d", i, evs[i].Seq, evs[i-1].Seq)
		}
	}
}
