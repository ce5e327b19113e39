package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/grpc/codes"
)

func progressEvent(seq uint64, phase string, p *curev1.Progress) *curev1.Event {
	return &curev1.Event{Seq: seq, Phase: phase, TimeUnixMs: time.Now().UnixMilli(), Body: &curev1.Event_Progress{Progress: p}}
}

// A soak's heartbeats are liveness and the latest state, not history: the
// coordinator acks each, keeps the newest in one row (never an event, so
// three days of them do not touch the run's event caps), records the
// session alive, cleans and bounds what it keeps, and refuses a heartbeat
// that is not of a runner phase or says what no check can be.
func TestProgressKeptLatestNotStoredPerEvent(t *testing.T) {
	h := newHostile(t)
	ctx := context.Background()
	tok := h.fetchToken(nodeA.mac)
	s, cancel := h.session(helloOpts{token: tok, boot: "b1", node: nodeA})
	defer cancel()
	if err := send(s, logEvent(1, "", "hello")); err != nil {
		t.Fatal(err)
	}
	sess := h.hub.Current(nodeA.id)
	if sess == nil || !sess.LastHeartbeat().IsZero() {
		t.Fatalf("session %v before any heartbeat", sess)
	}
	before := time.Now()
	checks := []*curev1.CheckProgress{{Check: "cpu-soak", Stage: "load", State: "running", ElapsedMs: 1000, PlannedMs: 60000}}
	const beats = 3 * 24 * 60 // three days, one a minute
	for seq := uint64(2); seq < 2+beats; seq++ {
		if err := send(s, progressEvent(seq, string(modes.SEDRevert), &curev1.Progress{Suite: "soak", Stage: "load", Checks: checks, ElapsedMs: int64(seq)})); err != nil {
			t.Fatalf("heartbeat seq %d: %v", seq, err)
		}
	}
	if got := sess.LastHeartbeat(); got.Before(before) {
		t.Errorf("session's last heartbeat %v, before the heartbeats", got)
	}
	if evs := h.runnerEvents(nodeA.run); len(evs) != 1 {
		t.Errorf("%d runner events stored, want 1 (the log): heartbeats are not events", len(evs))
	}
	rec, err := h.st.RunProgress(ctx, nodeA.run)
	if err != nil || rec.Seq != 1+beats || rec.BootID != "b1" || rec.Phase != modes.SEDRevert {
		t.Fatalf("latest heartbeat %+v, %v; want seq %d of boot b1", rec, err, 1+beats)
	}

	// Cleaned and bounded: control characters out, at most 512 checks,
	// no negative numbers, no MARGINAL from a runner.
	var many []*curev1.CheckProgress
	for i := range 2000 {
		many = append(many, &curev1.CheckProgress{Check: fmt.Sprintf("c%d\x1b[31m", i), State: "done", ElapsedMs: -5, Worst: curev1.VerdictStatus_MARGINAL})
	}
	if err := send(s, progressEvent(2+beats, string(modes.SEDRevert), &curev1.Progress{Suite: "soak\u202e", Checks: many, RemainingMs: -1})); err != nil {
		t.Fatal(err)
	}
	rep, err := server.BuildReport(ctx, h.st, h.run(nodeA.run))
	if err != nil {
		t.Fatal(err)
	}
	p := rep.GetProgress()
	if len(p.GetChecks()) != 512 || strings.ContainsAny(p.GetSuite()+p.GetChecks()[0].GetCheck(), "\x1b\u202e") || p.GetRemainingMs() != 0 {
		t.Fatalf("stored heartbeat: suite %q, %d checks, first %v, remaining %d", p.GetSuite(), len(p.GetChecks()), p.GetChecks()[0], p.GetRemainingMs())
	}
	if c := p.GetChecks()[0]; c.GetWorst() != curev1.VerdictStatus_VERDICT_STATUS_UNSPECIFIED || c.GetElapsedMs() != 0 {
		t.Errorf("stored check %v: want no MARGINAL, no negative time", c)
	}
	if rep.GetProgressUnixMs() < before.UnixMilli() {
		t.Errorf("report progress time %d", rep.GetProgressUnixMs())
	}

	// Not a runner phase of the run; a state no check has.
	if err := send(s, progressEvent(3+beats, string(modes.BMC), &curev1.Progress{Suite: "x"})); codeOf(err) != codes.InvalidArgument {
		t.Errorf("heartbeat of a coordinator phase: %v, want InvalidArgument", err)
	}
	s, cancel2 := h.session(helloOpts{token: tok, boot: "b1", node: nodeA})
	defer cancel2()
	if err := send(s, progressEvent(4+beats, string(modes.SEDRevert), &curev1.Progress{Checks: []*curev1.CheckProgress{{Check: "c", State: "exploded"}}})); codeOf(err) != codes.InvalidArgument {
		t.Errorf("heartbeat with an unknown check state: %v, want InvalidArgument", err)
	}
	if rec, _ := h.st.RunProgress(ctx, nodeA.run); rec.Seq != 2+beats {
		t.Errorf("a refused heartbeat replaced the latest: seq %d", rec.Seq)
	}
}

// A following Watch streams the latest heartbeat live, with the phase's
// deadline; the report carries both.
func TestWatchStreamsProgress(t *testing.T) {
	h := newHostile(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tok := h.fetchToken(nodeA.mac)
	s, cancelS := h.session(helloOpts{token: tok, boot: "b1", node: nodeA})
	defer cancelS()
	deadline := time.Now().Add(3 * time.Hour).Truncate(time.Millisecond)
	r := h.run(nodeA.run)
	r.Phase = modes.SEDRevert
	r.Pipeline.SetDeadline(modes.SEDRevert, deadline)
	if err := h.st.UpdateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := h.st.UpsertPhase(ctx, store.Phase{RunID: r.ID, Name: modes.SEDRevert, Status: curev1.PhaseStatus_PHASE_RUNNING, Attempts: 1, StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	op := h.operatorClient("watcher", pki.RoleViewer)
	w, err := op.Watch(ctx, &curev1.WatchRequest{RunId: nodeA.run, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := send(s, progressEvent(1, string(modes.SEDRevert), &curev1.Progress{Suite: "soak", Stage: "load", ElapsedMs: 60000, PlannedMs: 3600000, RemainingMs: 3540000,
		Checks: []*curev1.CheckProgress{{Check: "cpu", Stage: "load", State: "running"}, {Check: "smart", State: "done", Worst: curev1.VerdictStatus_PASS}}})); err != nil {
		t.Fatal(err)
	}
	for {
		e, err := w.Recv()
		if err != nil {
			t.Fatalf("watch ended before a progress entry: %v", err)
		}
		if runstate.EventKind(e.GetKind()) != runstate.EventProgress {
			continue
		}
		if e.GetProgress().GetStage() != "load" || len(e.GetProgress().GetChecks()) != 2 || e.GetDeadlineUnixMs() != deadline.UnixMilli() ||
			!strings.Contains(e.GetMessage(), "1/2 checks done, 1 running") || !strings.Contains(e.GetMessage(), "eta 59m0s") {
			t.Fatalf("progress entry %v", e)
		}
		break
	}
	rep, err := op.Report(ctx, &curev1.ReportRequest{RunId: nodeA.run})
	if err != nil || rep.GetProgress().GetSuite() != "soak" || rep.GetDeadlineUnixMs() != deadline.UnixMilli() {
		t.Fatalf("report progress %v deadline %d: %v", rep.GetProgress(), rep.GetDeadlineUnixMs(), err)
	}
}
