package checks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"sort"
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
	// Without one, a check that matches nothing yields a SKIP verdict.
	Count Limit
	Func  Func
}

// Options tune Run.
type Options struct {
	// FailFast stops after the first check with a FAIL or ERROR verdict;
	// the remaining checks yield SKIP verdicts.
	FailFast bool
	Log      *slog.Logger
	// OnVerdict, when set, sees each verdict as soon as its check ends
	// (the runner streams them to the coordinator).
	OnVerdict func(Verdict)
	Now       func() time.Time
}

// Run executes cs in order and returns every verdict.
func Run(ctx context.Context, cs []Check, o Options) []Verdict {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	var all []Verdict
	stopped := ""
	for _, c := range cs {
		var vs []Verdict
		if stopped != "" {
			now := o.Now()
			vs = []Verdict{{Component: c.Type, Check: c.Name, Status: Skip, Started: now, Finished: now,
				Message: fmt.Sprintf("not run: failFast after check %q failed", stopped)}}
		} else {
			o.Log.Info("check start", "check", c.Name, "type", c.Type, "appliesTo", c.AppliesTo)
			vs = RunOne(ctx, c, o.Now)
			w := Worst(vs)
			o.Log.Info("check end", "check", c.Name, "status", w, "verdicts", len(vs))
			if o.FailFast && (w == Fail || w == Error) {
				stopped = c.Name
			}
		}
		for _, v := range vs {
			if o.OnVerdict != nil {
				o.OnVerdict(v)
			}
		}
		all = append(all, vs...)
	}
	return all
}

// RunOne executes one check (repeating it when c.Sample) and returns its
// verdicts, filtered by AppliesTo, sorted by component, one per component.
func RunOne(ctx context.Context, c Check, now func() time.Time) []Verdict {
	if now == nil {
		now = time.Now
	}
	start := now()
	whole := func(st Status, msg string) Verdict {
		return Verdict{Component: c.Type, Check: c.Name, Status: st, Message: msg, Started: start, Finished: now()}
	}
	if c.Func == nil {
		return []Verdict{whole(Error, "check has no implementation")}
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
	case runErr != nil:
		msg := runErr.Error()
		if errors.Is(runErr, context.Canceled) || errors.Is(runErr, context.DeadlineExceeded) {
			msg = "interrupted: " + msg
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
		out = append(out, whole(Skip, msg))
	}
	return out
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
