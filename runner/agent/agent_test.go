package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

type chanSource chan Directive

func (c chanSource) Next(ctx context.Context) (Directive, error) {
	select {
	case d := <-c:
		return d, nil
	case <-ctx.Done():
		return Directive{}, ctx.Err()
	}
}

type recSink struct {
	mu      sync.Mutex
	events  []*curev1.Event
	drained bool
}

func (s *recSink) Emit(ev *curev1.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, ev)
}

func (s *recSink) Drain(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drained = true
	return nil
}

// summary renders events as "phase:kind[:status]" for compact assertions.
func (s *recSink) summary() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, ev := range s.events {
		switch b := ev.Body.(type) {
		case *curev1.Event_PhaseStart:
			out = append(out, ev.Phase+":start")
		case *curev1.Event_PhaseEnd:
			st := ev.Phase + ":end:" + b.PhaseEnd.Status.String()
			if b.PhaseEnd.RebootRequired {
				st += ":reboot"
			}
			out = append(out, st)
		case *curev1.Event_Verdict:
			out = append(out, ev.Phase+":verdict:"+b.Verdict.Component)
		case *curev1.Event_Log:
			out = append(out, ev.Phase+":log")
		case *curev1.Event_Metric:
			out = append(out, ev.Phase+":metric")
		}
	}
	return out
}

type funcExec func(ctx context.Context, phase string, a *curev1.Assignment, emit Emitter) PhaseOutcome

func (f funcExec) Run(ctx context.Context, phase string, a *curev1.Assignment, emit Emitter) PhaseOutcome {
	return f(ctx, phase, a, emit)
}

type fakeRebooter struct{ called chan struct{} }

func (f *fakeRebooter) Reboot() error { close(f.called); return nil }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func start(t *testing.T, exec Executor) (chanSource, *recSink, *fakeRebooter, *Agent, chan error) {
	src := make(chanSource, 4)
	sink := &recSink{}
	rb := &fakeRebooter{called: make(chan struct{})}
	a := New(src, exec, sink, rb, quiet())
	errc := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { errc <- a.Run(ctx) }()
	return src, sink, rb, a, errc
}

func equal(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

func TestAssignmentStopsAfterFailedPhase(t *testing.T) {
	var ran []string
	var mu sync.Mutex
	exec := funcExec(func(ctx context.Context, phase string, a *curev1.Assignment, emit Emitter) PhaseOutcome {
		mu.Lock()
		ran = append(ran, phase)
		mu.Unlock()
		emit.Verdict(&curev1.Verdict{Component: "nvme/0", Check: "firmware", Status: curev1.VerdictStatus_MATCH})
		if phase == "b" {
			return PhaseOutcome{Status: curev1.PhaseStatus_PHASE_FAILED, Message: "boom"}
		}
		return PhaseOutcome{Status: curev1.PhaseStatus_PHASE_OK}
	})
	src, sink, _, a, _ := start(t, exec)
	if a.State().Kind != curev1.RunnerState_IDLE {
		t.Fatalf("initial state %v, want IDLE", a.State().Kind)
	}
	src <- Directive{Assignment: &curev1.Assignment{RunId: "r1", Phases: []string{"a", "b", "c"}}}
	waitFor(t, "DONE", func() bool { return a.State().Kind == curev1.RunnerState_DONE })
	want := []string{"a:start", "a:verdict:nvme/0", "a:end:PHASE_OK", "b:start", "b:verdict:nvme/0", "b:end:PHASE_FAILED"}
	if got := sink.summary(); !equal(got, want) {
		t.Errorf("events\n got %v\nwant %v", got, want)
	}
	if st := a.State(); st.RunId != "r1" || st.Phase != "b" {
		t.Errorf("state = %v, want DONE r1/b", st)
	}
	for _, ev := range sink.events {
		if ev.RunId != "r1" || ev.TimeUnixMs == 0 {
			t.Errorf("event without run id or time: %v", ev)
		}
	}
	if len(ran) != 2 {
		t.Errorf("phases run %v; c must not run after b failed", ran)
	}
}

func TestRebootRequiredStops(t *testing.T) {
	exec := funcExec(func(ctx context.Context, phase string, a *curev1.Assignment, emit Emitter) PhaseOutcome {
		return PhaseOutcome{Status: curev1.PhaseStatus_PHASE_OK, RebootRequired: phase == "nic"}
	})
	src, sink, _, a, _ := start(t, exec)
	src <- Directive{Assignment: &curev1.Assignment{RunId: "r", Phases: []string{"nic", "nvme"}}}
	waitFor(t, "DONE", func() bool { return a.State().Kind == curev1.RunnerState_DONE })
	want := []string{"nic:start", "nic:end:PHASE_OK:reboot"}
	if got := sink.summary(); !equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}

func TestStateInPhaseAndCancel(t *testing.T) {
	entered := make(chan struct{})
	exec := funcExec(func(ctx context.Context, phase string, a *curev1.Assignment, emit Emitter) PhaseOutcome {
		close(entered)
		<-ctx.Done()
		return PhaseOutcome{Status: curev1.PhaseStatus_PHASE_OK} // lies: the loop must not believe it
	})
	src, sink, _, a, _ := start(t, exec)
	src <- Directive{Assignment: &curev1.Assignment{RunId: "r9", Phases: []string{"os_install", "x"}}}
	<-entered
	st := a.State()
	if st.Kind != curev1.RunnerState_IN_PHASE || st.RunId != "r9" || st.Phase != "os_install" {
		t.Fatalf("state during phase = %v", st)
	}
	src <- Directive{Cancel: &curev1.Cancel{Reason: "operator"}}
	waitFor(t, "DONE", func() bool { return a.State().Kind == curev1.RunnerState_DONE })
	got := sink.summary()
	if !equal(got, []string{"os_install:start", "os_install:end:PHASE_FAILED"}) {
		t.Fatalf("events %v", got)
	}
	end := sink.events[1].GetPhaseEnd()
	if !strings.Contains(end.Message, "cancelled by coordinator: operator") {
		t.Errorf("end message %q does not say why", end.Message)
	}
}

func TestRebootDrainsThenReboots(t *testing.T) {
	exec := funcExec(func(ctx context.Context, phase string, a *curev1.Assignment, emit Emitter) PhaseOutcome {
		return PhaseOutcome{Status: curev1.PhaseStatus_PHASE_OK}
	})
	src, sink, rb, _, errc := start(t, exec)
	src <- Directive{Reboot: &curev1.Reboot{Reason: "firmware activation"}}
	select {
	case <-rb.called:
	case <-time.After(5 * time.Second):
		t.Fatal("rebooter not called")
	}
	if !sink.drained {
		t.Error("rebooted without draining events")
	}
	if err := <-errc; err != nil {
		t.Errorf("Run after reboot = %v", err)
	}
}

func TestPanicAndMissingStatusBecomeFailures(t *testing.T) {
	exec := funcExec(func(ctx context.Context, phase string, a *curev1.Assignment, emit Emitter) PhaseOutcome {
		if phase == "p" {
			panic("nil map")
		}
		return PhaseOutcome{}
	})
	var ends []PhaseOutcome
	src, _, _, a, _ := start(t, exec)
	a.OnPhaseEnd = func(phase string, out PhaseOutcome, d time.Duration) { ends = append(ends, out) }
	src <- Directive{Assignment: &curev1.Assignment{RunId: "r", Phases: []string{"p"}}}
	waitFor(t, "DONE", func() bool { return a.State().Kind == curev1.RunnerState_DONE })
	src <- Directive{Assignment: &curev1.Assignment{RunId: "r2", Phases: []string{"q"}}}
	waitFor(t, "r2 DONE", func() bool { s := a.State(); return s.Kind == curev1.RunnerState_DONE && s.RunId == "r2" })
	if len(ends) != 2 || ends[0].Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(ends[0].Message, "panic") ||
		ends[1].Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(ends[1].Message, "no status") {
		t.Fatalf("outcomes %+v", ends)
	}
}

type errSource struct{}

func (errSource) Next(ctx context.Context) (Directive, error) { return Directive{}, errors.New("gone") }

func TestSourceErrorEndsRun(t *testing.T) {
	a := New(errSource{}, nil, &recSink{}, nil, quiet())
	err := a.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("Run = %v", err)
	}
}

// The run's next batch can be read before the goroutine of the batch that
// just ended returned (select picks among ready cases at random): it is
// queued and run, never dropped as a re-send; a true re-send (a phase of
// the running batch) is still ignored.
func TestNextBatchSentAsLastEndsRuns(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	ran := map[string]int{}
	exec := funcExec(func(ctx context.Context, phase string, a *curev1.Assignment, emit Emitter) PhaseOutcome {
		mu.Lock()
		ran[phase]++
		mu.Unlock()
		if phase == "hardware" {
			<-release // the batch's last phase ended on the coordinator's side; its goroutine lingers
		}
		return PhaseOutcome{Status: curev1.PhaseStatus_PHASE_OK}
	})
	src, _, _, _, _ := start(t, exec)
	src <- Directive{Assignment: &curev1.Assignment{RunId: "r1", Phases: []string{"hardware"}}}
	waitFor(t, "hardware to start", func() bool { mu.Lock(); defer mu.Unlock(); return ran["hardware"] == 1 })
	src <- Directive{Assignment: &curev1.Assignment{RunId: "r1", Phases: []string{"hardware"}}} // a re-send
	src <- Directive{Assignment: &curev1.Assignment{RunId: "r1", Phases: []string{"nic", "nvme"}}}
	time.Sleep(50 * time.Millisecond) // both read while hardware still runs
	close(release)
	waitFor(t, "the next batch to run", func() bool { mu.Lock(); defer mu.Unlock(); return ran["nvme"] == 1 })
	mu.Lock()
	defer mu.Unlock()
	if ran["hardware"] != 1 || ran["nic"] != 1 {
		t.Errorf("phases ran %v: want hardware once (the re-send ignored) and the next batch once", ran)
	}
}
