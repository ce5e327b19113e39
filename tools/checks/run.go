package checks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"path"
	"sort"
	"strings"
	"sync"
	"time"
)

// Func measures and judges; it returns one verdict per sub-component it
// found (Check and timestamps are filled in by Run). An error means the
// check as a whole could not run.
type Func func(ctx context.Context) ([]Verdict, error)

// Check is one configured check of a suite.
type Check struct {
	Name string // the suite's check name
	Type string // manifests check type, used as the component of whole-check verdicts
	// Stage is the suite stage the check belongs to ("" : a lone check).
	// Consecutive checks of one stage run at the same time.
	Stage string
	// AppliesTo is a path.Match glob over component ids; "" keeps all.
	AppliesTo string
	// Sample makes Run repeat Func every Interval until Duration has passed
	// and keep the worst verdict per component (probes such as thermal or
	// SMART sampled through a soak). Stress checks run their own Duration.
	Sample   bool
	Duration time.Duration
	Interval time.Duration
	// Timeout bounds one call of Func; zero means none beyond ctx.
	Timeout time.Duration
	// Count is a bar on how many components matched (e.g. 8 IB ports).
	// Without one, a check that tests nothing (TestedNothing) is an ERROR.
	Count Limit
	// Optional is the suite's reason why this check may test nothing on
	// some nodes ("QEMU test node: no GPU"); "" means it may not.
	Optional string
	Func     Func
}

// CheckState is where a check is in a run (Options.OnCheck).
type CheckState string

const (
	CheckPending CheckState = "pending"
	CheckRunning CheckState = "running"
	CheckDone    CheckState = "done"
)

// StageEvent is a stage starting (End false) or ending (Options.OnStage).
type StageEvent struct {
	Stage string
	// Checks are the stage's checks run now: not those that ended in an
	// earlier try of the suite (Options.Done).
	Checks []string
	End    bool
	Time   time.Time
}

// Options tune Run.
type Options struct {
	// FailFast stops after the first check with a FAIL or ERROR verdict:
	// the checks of later steps yield SKIP verdicts, and the failed
	// check's stage siblings are stopped (SKIP, saying so).
	FailFast bool
	Log      *slog.Logger
	// OnVerdict, when set, sees each verdict as soon as its check ends
	// (the runner streams them to the coordinator).
	OnVerdict func(Verdict)
	// OnCheck, when set, sees each check start (CheckRunning) and end
	// (CheckDone with its worst status), the end after its verdicts went
	// to OnVerdict. OnVerdict and OnCheck are never called concurrently.
	OnCheck func(name string, st CheckState, worst Status)
	// OnStage, when set, is called before a stage's checks start and after
	// the last of them ended: where telemetry sampling starts and stops.
	OnStage func(StageEvent)
	// Done are checks that ended in an earlier try of the suite (before a
	// node reset), with their worst status: they are not run again and
	// nothing is reported for them; with FailFast a failed one stops the
	// rest as if it had just failed.
	Done map[string]Status
	Now  func() time.Time
}

// Steps groups cs into what Run runs one after another: a lone check, or
// the consecutive checks of one stage, which run at the same time.
func Steps(cs []Check) [][]Check {
	var out [][]Check
	for i, c := range cs {
		if c.Stage != "" && i > 0 && cs[i-1].Stage == c.Stage {
			out[len(out)-1] = append(out[len(out)-1], c)
			continue
		}
		out = append(out, []Check{c})
	}
	return out
}

// errFailFast stops a stage's other checks when one of them failed.
var errFailFast = errors.New("failFast")

// Run executes cs step by step (Steps) and returns every verdict, in the
// order of cs.
func Run(ctx context.Context, cs []Check, o Options) []Verdict {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	r := &suiteRun{o: o}
	var all []Verdict
	for _, step := range Steps(cs) {
		all = append(all, r.step(ctx, step)...)
	}
	return all
}

// suiteRun is one Run's shared state; mu serialises the callbacks and
// guards stopped.
type suiteRun struct {
	o       Options
	mu      sync.Mutex
	stopped string // the check whose failure stopped the run (failFast)
}

func bad(s Status) bool { return s == Fail || s == Error }

func (r *suiteRun) step(ctx context.Context, step []Check) []Verdict {
	var todo []Check
	r.mu.Lock()
	for _, c := range step {
		if st, done := r.o.Done[c.Name]; done {
			if r.o.FailFast && bad(st) && r.stopped == "" {
				r.stopped = c.Name
			}
			continue
		}
		todo = append(todo, c)
	}
	stopped := r.stopped
	r.mu.Unlock()
	if len(todo) == 0 {
		return nil
	}
	if stopped != "" {
		var out []Verdict
		for _, c := range todo {
			now := r.o.Now()
			vs := []Verdict{{Component: c.Type, Check: c.Name, Status: Skip, Started: now, Finished: now,
				Message: fmt.Sprintf("not run: failFast after check %q failed", stopped)}}
			r.report(c, vs)
			out = append(out, vs...)
		}
		return out
	}
	if todo[0].Stage == "" {
		r.started(todo[0])
		vs, _ := runOne(ctx, todo[0], r.o.Now)
		r.ended(todo[0], vs)
		return vs
	}
	return r.stage(ctx, todo)
}

// stage runs a stage's checks at once.
func (r *suiteRun) stage(ctx context.Context, todo []Check) []Verdict {
	names := make([]string, len(todo))
	for i, c := range todo {
		names[i] = c.Name
	}
	stage := todo[0].Stage
	r.o.Log.Info("stage start", "stage", stage, "checks", names)
	if r.o.OnStage != nil {
		r.o.OnStage(StageEvent{Stage: stage, Checks: names, Time: r.o.Now()})
	}
	sctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	results := make([][]Verdict, len(todo))
	var wg sync.WaitGroup
	for i, c := range todo {
		r.started(c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			vs, interrupted := runOne(sctx, c, r.o.Now)
			if interrupted && ctx.Err() == nil && errors.Is(context.Cause(sctx), errFailFast) {
				// Stopped because a sibling failed, not broken itself.
				w := &vs[len(vs)-1]
				w.Status = Skip
				w.Message = fmt.Sprintf("stopped: failFast after check %q failed in stage %q", r.stopper(), stage)
			}
			results[i] = vs
			if r.ended(c, vs) {
				stop(errFailFast)
			}
		}()
	}
	wg.Wait()
	if r.o.OnStage != nil {
		r.o.OnStage(StageEvent{Stage: stage, Checks: names, End: true, Time: r.o.Now()})
	}
	r.o.Log.Info("stage end", "stage", stage)
	var out []Verdict
	for _, vs := range results {
		out = append(out, vs...)
	}
	return out
}

func (r *suiteRun) stopper() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped
}

func (r *suiteRun) started(c Check) {
	r.o.Log.Info("check start", "check", c.Name, "type", c.Type, "appliesTo", c.AppliesTo, "stage", c.Stage)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.o.OnCheck != nil {
		r.o.OnCheck(c.Name, CheckRunning, "")
	}
}

// ended reports a check's verdicts and end; it says whether the check's
// failure stops the run (failFast, and no earlier check stopped it).
func (r *suiteRun) ended(c Check, vs []Verdict) bool {
	w := Worst(vs)
	r.o.Log.Info("check end", "check", c.Name, "status", w, "verdicts", len(vs))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reportLocked(c, vs)
	if r.o.FailFast && bad(w) && r.stopped == "" {
		r.stopped = c.Name
		return true
	}
	return false
}

func (r *suiteRun) report(c Check, vs []Verdict) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reportLocked(c, vs)
}

func (r *suiteRun) reportLocked(c Check, vs []Verdict) {
	for _, v := range vs {
		if r.o.OnVerdict != nil {
			r.o.OnVerdict(v)
		}
	}
	if r.o.OnCheck != nil {
		r.o.OnCheck(c.Name, CheckDone, Worst(vs))
	}
}

// RunOne executes one check (repeating it when c.Sample) and returns its
// verdicts, filtered by AppliesTo, sorted by component, one per component.
func RunOne(ctx context.Context, c Check, now func() time.Time) []Verdict {
	vs, _ := runOne(ctx, c, now)
	return vs
}

// runOne is RunOne; interrupted says the last verdict is the whole-check
// ERROR of a check that ctx stopped.
func runOne(ctx context.Context, c Check, now func() time.Time) (_ []Verdict, interrupted bool) {
	if now == nil {
		now = time.Now
	}
	start := now()
	whole := func(st Status, msg string) Verdict {
		return Verdict{Component: c.Type, Check: c.Name, Status: st, Message: msg, Started: start, Finished: now()}
	}
	if c.Func == nil {
		return []Verdict{whole(Error, "check has no implementation")}, false
	}
	byComp := map[string]Verdict{}
	samples := 0
	var runErr error
	for {
		vs, err := c.once(ctx)
		samples++
		for _, v := range vs {
			// Whole-check verdicts (component = type) are never filtered.
			if c.AppliesTo != "" && v.Component != c.Type {
				if ok, _ := path.Match(c.AppliesTo, v.Component); !ok {
					continue
				}
			}
			// Keep the first occurrence of the worst status: it is the
			// sample that says what went wrong.
			if old, seen := byComp[v.Component]; !seen || v.Status.Worse(old.Status) {
				byComp[v.Component] = v
			}
		}
		if err != nil {
			runErr = err
			break
		}
		if !c.Sample || c.Duration <= 0 || now().Sub(start) >= c.Duration {
			break
		}
		if err := sleep(ctx, min(c.interval(), c.Duration-now().Sub(start))); err != nil {
			runErr = err
			break
		}
	}
	out := make([]Verdict, 0, len(byComp)+1)
	for _, v := range byComp {
		v.Check = c.Name
		if v.Started.IsZero() {
			v.Started = start
		}
		if v.Finished.IsZero() {
			v.Finished = now()
		}
		if samples > 1 {
			v.Message = joinMsg(v.Message, fmt.Sprintf("worst of %d samples over %s", samples, now().Sub(start).Round(time.Second)))
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Component < out[j].Component })
	switch {
	case runErr != nil && ToolMissing(runErr):
		msg := runErr.Error()
		if !strings.Contains(msg, ErrToolMissing.Error()) {
			msg = ErrToolMissing.Error() + ": " + msg
		}
		out = c.testedNothing(out, whole, msg)
	case runErr != nil:
		msg := runErr.Error()
		if errors.Is(runErr, context.Canceled) || errors.Is(runErr, context.DeadlineExceeded) {
			msg = "interrupted: " + msg
			interrupted = ctx.Err() != nil
		}
		out = append(out, whole(Error, msg))
	case !c.Count.IsZero():
		n := 0
		for _, v := range out {
			if v.Component != c.Type {
				n++
			}
		}
		v := Judge(c.Type, Value("components", float64(n), c.Count))
		v.Check, v.Started, v.Finished = c.Name, start, now()
		out = append(out, v)
	case len(out) == 0:
		msg := "no component found"
		if c.AppliesTo != "" {
			msg = fmt.Sprintf("no component matched appliesTo %q", c.AppliesTo)
		}
		out = c.testedNothing(out, whole, msg)
	case TestedNothing(out):
		out = c.testedNothing(out, whole, "")
	}
	return out, interrupted
}

// TestedNothing reports whether vs judged no component: empty, or every
// verdict a SKIP (no GPU on the bus, every sensor without a bar).
func TestedNothing(vs []Verdict) bool {
	for _, v := range vs {
		if v.Status != Skip {
			return false
		}
	}
	return true
}

// ToolMissing reports whether err says a program the check drives is not
// there (ErrToolMissing, or exec's not found).
func ToolMissing(err error) bool {
	return errors.Is(err, ErrToolMissing) || errors.Is(err, exec.ErrNotFound)
}

// testedNothing fails closed on a check that tested nothing: its SKIP
// verdicts (or, without any, one whole-check verdict saying why) become
// ERROR, since "nothing found" on a node that should have it is exactly the
// doubt a gate must not pass. A check the suite marks optional stays SKIP,
// saying "optional: <reason>".
func (c Check) testedNothing(vs []Verdict, whole func(Status, string) Verdict, why string) []Verdict {
	st, note := Error, "tested nothing (mark the check optional: {reason: ...} in the suite where that is expected)"
	if c.Optional != "" {
		st, note = Skip, "optional: "+c.Optional
	}
	if why != "" || len(vs) == 0 {
		return append(vs, whole(st, note+": "+nonEmptyMsg(why, "no verdict")))
	}
	for i := range vs {
		vs[i].Status = st
		vs[i].Message = note + ": " + nonEmptyMsg(vs[i].Message, "skipped")
	}
	return vs
}

func nonEmptyMsg(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func (c Check) once(ctx context.Context) ([]Verdict, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	vs, err := c.Func(ctx)
	if err != nil {
		return vs, fmt.Errorf("check %s (%s): %w", c.Name, c.Type, err)
	}
	return vs, nil
}

// interval defaults to a tenth of the duration, at most a minute.
func (c Check) interval() time.Duration {
	if c.Interval > 0 {
		return c.Interval
	}
	return max(min(c.Duration/10, time.Minute), time.Millisecond)
}

// Sleep waits d or until ctx ends, returning ctx's error in that case.
func Sleep(ctx context.Context, d time.Duration) error { return sleep(ctx, d) }

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func joinMsg(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
