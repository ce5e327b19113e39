// Package agent is the runner loop: it takes directives from an
// AssignmentSource, runs each assigned phase through an Executor and reports
// everything through an EventSink. It knows nothing about gRPC or hardware,
// so it is tested with fakes; transport and phases plug in from outside.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// Directive is one instruction from the coordinator. Exactly one field is set.
type Directive struct {
	Assignment *curev1.Assignment
	Idle       *curev1.Idle
	Reboot     *curev1.Reboot
	Cancel     *curev1.Cancel
	// The node-pair burn-in's schedule and judgement, for the running
	// suite's node-pair check (PairInbox); they interrupt nothing.
	PairSchedule *curev1.PairSchedule
	PairVerdicts *curev1.PairVerdicts
}

// AssignmentSource yields the coordinator's directives in order. Next blocks
// until one arrives; it returns an error only when it cannot go on (ctx done).
type AssignmentSource interface {
	Next(ctx context.Context) (Directive, error)
}

// EventSink takes an event for delivery; it assigns the sequence number.
type EventSink interface {
	Emit(ev *curev1.Event)
}

// Drainer is implemented by sinks that can wait until every event is stored
// by the coordinator.
type Drainer interface {
	Drain(ctx context.Context) error
}

// Emitter is what an executor reports through; run id, phase and time are
// filled in for it.
type Emitter interface {
	Verdict(v *curev1.Verdict)
	Log(level, msg string, attrs map[string]string)
	Metric(name string, value float64, unit string, labels map[string]string)
	// Progress is a long phase's heartbeat: where it is and what is left.
	Progress(p *curev1.Progress)
	// Samples is a batch of telemetry sampled during a suite stage.
	Samples(s *curev1.Samples)
	// PairReady offers the node's ports to the node-pair burn-in;
	// PairResult reports one measured link.
	PairReady(p *curev1.PairReady)
	PairResult(p *curev1.PairResult)
}

// PhaseOutcome is how a phase ended.
type PhaseOutcome struct {
	Status         curev1.PhaseStatus
	Message        string
	RebootRequired bool
}

// Executor runs one in-band phase of an assignment.
type Executor interface {
	Run(ctx context.Context, phase string, a *curev1.Assignment, emit Emitter) PhaseOutcome
}

// Rebooter restarts the machine. It does not return on success.
type Rebooter interface {
	Reboot() error
}

// Agent is the runner loop. Create it with New.
type Agent struct {
	src      AssignmentSource
	exec     Executor
	sink     EventSink
	reboot   Rebooter
	log      *slog.Logger
	drainFor time.Duration
	now      func() time.Time

	// OnDirective and OnPhaseEnd, if set, are called from the loop (the
	// cure-runner binary prints console lines from them).
	OnDirective func(Directive)
	OnPhaseEnd  func(phase string, out PhaseOutcome, d time.Duration)
	// Pairs receives the node-pair directives (nil: they are dropped,
	// logged).
	Pairs *PairInbox

	mu    sync.Mutex
	state *curev1.RunnerState
}

// New returns an agent in state IDLE.
func New(src AssignmentSource, exec Executor, sink EventSink, reboot Rebooter, log *slog.Logger) *Agent {
	if log == nil {
		log = slog.Default()
	}
	return &Agent{
		src: src, exec: exec, sink: sink, reboot: reboot, log: log,
		drainFor: 60 * time.Second,
		now:      time.Now,
		state:    &curev1.RunnerState{Kind: curev1.RunnerState_IDLE},
	}
}

// SetDrainTimeout bounds how long a Reboot waits for unacked events.
func (a *Agent) SetDrainTimeout(d time.Duration) { a.drainFor = d }

// State returns a copy of the current runner state, for Hello after a
// reconnect. LastEventSeq is left to the transport, which numbers events.
func (a *Agent) State() *curev1.RunnerState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return &curev1.RunnerState{Kind: a.state.Kind, RunId: a.state.RunId, Phase: a.state.Phase}
}

func (a *Agent) setState(kind curev1.RunnerState_Kind, run, phase string) {
	a.mu.Lock()
	a.state = &curev1.RunnerState{Kind: kind, RunId: run, Phase: phase}
	a.mu.Unlock()
}

type activeRun struct {
	id     string
	phases []string
	done   chan struct{}
	cancel context.CancelCauseFunc
}

// sameBatch says whether asg is (part of) the batch cur runs, re-sent:
// ignored. The run's next batch shares no phase with it (coordinator
// phases stand between two batches).
func (cur *activeRun) sameBatch(asg *curev1.Assignment) bool {
	return slices.ContainsFunc(asg.GetPhases(), func(p string) bool { return slices.Contains(cur.phases, p) })
}

type nextResult struct {
	d   Directive
	err error
}

// Run processes directives until ctx is done or a reboot is issued. The
// assignment runs in its own goroutine so a Cancel or Reboot can interrupt
// it; directives are otherwise handled one at a time, in order.
func (a *Agent) Run(ctx context.Context) error {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	next := make(chan nextResult)
	go func() {
		for {
			d, err := a.src.Next(ctx)
			select {
			case next <- nextResult{d, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()

	rs := &runs{a: a, ctx: ctx}
	for {
		var runDone chan struct{}
		if rs.cur != nil {
			runDone = rs.cur.done
		}
		select {
		case <-ctx.Done():
			rs.stop(ctx.Err())
			return ctx.Err()
		case <-runDone:
			rs.ended()
		case r := <-next:
			if r.err != nil {
				rs.stop(r.err)
				return fmt.Errorf("agent: reading directives: %w", r.err)
			}
			if a.OnDirective != nil {
				a.OnDirective(r.d)
			}
			if r.d.Reboot != nil {
				a.log.Info("reboot requested", "reason", r.d.Reboot.GetReason())
				rs.stop(fmt.Errorf("reboot requested by coordinator: %s", r.d.Reboot.GetReason()))
				return a.doReboot(ctx)
			}
			rs.handle(r.d)
		}
	}
}

// runs is the agent loop's assignments: cur is the one in progress (nil
// when none); queued is the run's next batch, sent while cur was winding
// down (its last phase ended, so the coordinator moved on, but its
// goroutine had not returned yet): it starts when cur ends.
type runs struct {
	a      *Agent
	ctx    context.Context
	cur    *activeRun
	queued *curev1.Assignment
}

// begin runs asg in its own goroutine.
func (rs *runs) begin(asg *curev1.Assignment) {
	cur := &activeRun{id: asg.GetRunId(), phases: slices.Clone(asg.GetPhases()), done: make(chan struct{})}
	var rctx context.Context
	rctx, cur.cancel = context.WithCancelCause(rs.ctx)
	go func(done chan struct{}) {
		defer close(done)
		rs.a.runAssignment(rctx, asg)
	}(cur.done)
	rs.cur = cur
}

// stop cancels the assignment in progress (and forgets a queued one) and
// waits for it.
func (rs *runs) stop(cause error) {
	rs.queued = nil
	if rs.cur == nil {
		return
	}
	rs.cur.cancel(cause)
	<-rs.cur.done
	rs.cur = nil
}

// ended is cur's goroutine returning: a queued batch starts.
func (rs *runs) ended() {
	rs.cur.cancel(nil)
	rs.cur = nil
	if q := rs.queued; q != nil {
		rs.a.log.Info("starting the run's next batch, sent while the last one ended", "run", q.GetRunId(), "phases", q.GetPhases())
		rs.queued = nil
		rs.begin(q)
	}
}

// offer takes an assignment: run it, ignore it (another run's, or a
// re-send of the running batch), or queue it (the running run's next
// batch: select picks among ready cases at random, so it can be read
// before the end of the last one).
func (rs *runs) offer(asg *curev1.Assignment) {
	switch cur := rs.cur; {
	case cur == nil:
		rs.begin(asg)
	case asg.GetRunId() != cur.id:
		rs.a.log.Warn("assignment ignored: another run is in progress", "running", cur.id, "offered", asg.GetRunId())
	case cur.sameBatch(asg):
		rs.a.log.Info("assignment re-sent for the running run; continuing", "run", cur.id)
	default:
		rs.a.log.Info("next batch of the running run queued until the current one ends", "run", cur.id, "phases", asg.GetPhases())
		rs.queued = asg
	}
}

// handle acts on one directive other than a reboot.
func (rs *runs) handle(d Directive) {
	a := rs.a
	switch {
	case d.Assignment != nil:
		rs.offer(d.Assignment)
	case d.Idle != nil:
		a.log.Info("coordinator has nothing for this node", "reason", d.Idle.GetReason())
		if rs.cur == nil && a.State().Kind != curev1.RunnerState_DONE {
			a.setState(curev1.RunnerState_IDLE, "", "")
		}
	case d.Cancel != nil:
		a.log.Warn("run cancelled by coordinator", "running", rs.cur != nil, "reason", d.Cancel.GetReason())
		rs.stop(fmt.Errorf("cancelled by coordinator: %s", d.Cancel.GetReason()))
	case d.PairSchedule != nil || d.PairVerdicts != nil:
		if a.Pairs == nil {
			a.log.Warn("node-pair directive dropped: this runner has no inbox for it")
			return
		}
		a.Pairs.Put(d)
	default:
		a.log.Warn("empty directive ignored")
	}
}

// doReboot drains events (bounded), then reboots through the seam.
func (a *Agent) doReboot(ctx context.Context) error {
	if d, ok := a.sink.(Drainer); ok {
		dctx, cancel := context.WithTimeout(ctx, a.drainFor)
		err := d.Drain(dctx)
		cancel()
		if err != nil {
			a.log.Warn("rebooting with unacked events", "err", err)
		} else {
			a.log.Info("all events acknowledged; rebooting")
		}
	}
	if err := a.reboot.Reboot(); err != nil {
		return fmt.Errorf("agent: reboot: %w", err)
	}
	return nil
}

// runAssignment runs the phases in order, stopping after a failed phase or
// one that needs a reboot.
func (a *Agent) runAssignment(ctx context.Context, asg *curev1.Assignment) {
	run := asg.GetRunId()
	a.log.Info("assignment received", "run", run, "mode", asg.GetMode().String(), "phases", asg.GetPhases())
	last := ""
	for _, phase := range asg.GetPhases() {
		last = phase
		a.setState(curev1.RunnerState_IN_PHASE, run, phase)
		out := a.runPhase(ctx, phase, asg)
		if out.Status == curev1.PhaseStatus_PHASE_FAILED || out.RebootRequired || ctx.Err() != nil {
			break
		}
	}
	a.setState(curev1.RunnerState_DONE, run, last)
}

func (a *Agent) runPhase(ctx context.Context, phase string, asg *curev1.Assignment) PhaseOutcome {
	em := &emitter{a: a, run: asg.GetRunId(), phase: phase}
	start := a.now()
	em.emit(&curev1.Event{Body: &curev1.Event_PhaseStart{PhaseStart: &curev1.PhaseStart{}}})
	a.log.Info("phase start", "run", asg.GetRunId(), "phase", phase)

	out := a.execute(ctx, phase, asg, em)
	if cause := context.Cause(ctx); cause != nil && out.Status != curev1.PhaseStatus_PHASE_FAILED {
		// Whatever the executor said, it did not finish its job.
		out = PhaseOutcome{Status: curev1.PhaseStatus_PHASE_FAILED, Message: fmt.Sprintf("phase %s interrupted: %v", phase, cause)}
	} else if cause != nil {
		out.Message = fmt.Sprintf("%s (interrupted: %v)", out.Message, cause)
	}
	if out.Status == curev1.PhaseStatus_PHASE_STATUS_UNSPECIFIED {
		out = PhaseOutcome{Status: curev1.PhaseStatus_PHASE_FAILED, Message: fmt.Sprintf("executor for phase %s returned no status (bug): %s", phase, out.Message)}
	}
	d := a.now().Sub(start)
	em.emit(&curev1.Event{Body: &curev1.Event_PhaseEnd{PhaseEnd: &curev1.PhaseEnd{
		Status: out.Status, Message: out.Message, RebootRequired: out.RebootRequired, DurationMs: d.Milliseconds(),
	}}})
	a.log.Info("phase end", "run", asg.GetRunId(), "phase", phase, "status", out.Status.String(), "message", out.Message, "duration", d)
	if a.OnPhaseEnd != nil {
		a.OnPhaseEnd(phase, out, d)
	}
	return out
}

// execute runs the executor and turns a panic into a failed phase: the
// runner is PID 1's child and must not die.
func (a *Agent) execute(ctx context.Context, phase string, asg *curev1.Assignment, em Emitter) (out PhaseOutcome) {
	defer func() {
		if r := recover(); r != nil {
			a.log.Error("phase executor panicked", "phase", phase, "panic", r, "stack", string(debug.Stack()))
			out = PhaseOutcome{Status: curev1.PhaseStatus_PHASE_FAILED, Message: fmt.Sprintf("phase %s: executor panic: %v", phase, r)}
		}
	}()
	return a.exec.Run(ctx, phase, asg, em)
}

type emitter struct {
	a          *Agent
	run, phase string
}

func (e *emitter) emit(ev *curev1.Event) {
	ev.RunId = e.run
	ev.Phase = e.phase
	ev.TimeUnixMs = e.a.now().UnixMilli()
	e.a.sink.Emit(ev)
}

func (e *emitter) Verdict(v *curev1.Verdict) {
	e.emit(&curev1.Event{Body: &curev1.Event_Verdict{Verdict: v}})
}

func (e *emitter) Log(level, msg string, attrs map[string]string) {
	e.emit(&curev1.Event{Body: &curev1.Event_Log{Log: &curev1.Log{Level: level, Message: msg, Attrs: attrs}}})
}

func (e *emitter) Metric(name string, value float64, unit string, labels map[string]string) {
	e.emit(&curev1.Event{Body: &curev1.Event_Metric{Metric: &curev1.Metric{Name: name, Value: value, Unit: unit, Labels: labels}}})
}

func (e *emitter) Progress(p *curev1.Progress) {
	e.emit(&curev1.Event{Body: &curev1.Event_Progress{Progress: p}})
}

func (e *emitter) Samples(s *curev1.Samples) {
	e.emit(&curev1.Event{Body: &curev1.Event_Samples{Samples: s}})
}

func (e *emitter) PairReady(p *curev1.PairReady) {
	e.emit(&curev1.Event{Body: &curev1.Event_PairReady{PairReady: p}})
}

func (e *emitter) PairResult(p *curev1.PairResult) {
	e.emit(&curev1.Event{Body: &curev1.Event_PairResult{PairResult: p}})
}

// ErrNoReboot is returned by a Rebooter that is not allowed to reboot (dry run).
var ErrNoReboot = errors.New("reboot disabled")
