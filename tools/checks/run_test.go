package checks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestJudge(t *testing.T) {
	v := Judge("nvme/0",
		Value("percentageUsed", 97, AtMost(80)),
		Value("tempC", 40.5, Limit{}),
		Text("state", "active", "ACTIVE"),
		Missing("rateGbps", AtLeast(400)),
		Missing("info", Limit{}))
	if v.Status != Fail {
		t.Fatalf("status %s, want FAIL", v.Status)
	}
	if want := "percentageUsed=97 tempC=40.50 state=active rateGbps=n/a info=n/a"; v.Observed != want {
		t.Errorf("observed %q, want %q", v.Observed, want)
	}
	if want := "percentageUsed<=80 state=ACTIVE rateGbps>=400"; v.Expected != want {
		t.Errorf("expected %q, want %q", v.Expected, want)
	}
	if want := "percentageUsed=97 outside percentageUsed<=80; rateGbps not reported by the device"; v.Message != want {
		t.Errorf("message %q, want %q", v.Message, want)
	}
	if Between(1, 2).Expr("x") != "1<=x<=2" || Between(0, 0).Expr("x") != "x=0" {
		t.Error("Limit.Expr")
	}
}

// TestJudgeMeasurements: readings with a unit become the verdict's
// measurements, in order, bar or no bar; missing and textual ones do not.
func TestJudgeMeasurements(t *testing.T) {
	v := Judge("disk/nvme1n1",
		Value("readMBps", 512.5, AtLeast(1000)).In("MB/s"),
		Value("readbackMismatches", 0, AtMost(0)),
		Value("p99ReadLatencyUs", 180, Limit{}).In("us"),
		Missing("randReadIOPS", AtLeast(1)).In("IOPS"),
		Text("state", "up", "").In("x"))
	if v.Status != Fail {
		t.Errorf("status %s, want FAIL (readMBps under its bar)", v.Status)
	}
	want := []Measurement{{"readMBps", 512.5, "MB/s"}, {"p99ReadLatencyUs", 180, "us"}}
	if len(v.Measurements) != len(want) {
		t.Fatalf("measurements %v, want %v", v.Measurements, want)
	}
	for i := range want {
		if v.Measurements[i] != want[i] {
			t.Errorf("measurement %d = %v, want %v", i, v.Measurements[i], want[i])
		}
	}
}

func TestRun(t *testing.T) {
	ctx := context.Background()
	pass := func(comps ...string) Func {
		return func(context.Context) ([]Verdict, error) {
			var out []Verdict
			for _, c := range comps {
				out = append(out, Verdict{Component: c, Status: Pass})
			}
			return out, nil
		}
	}
	t.Run("appliesTo and count", func(t *testing.T) {
		vs := RunOne(ctx, Check{Name: "ib", Type: "infiniband", AppliesTo: "ib/mlx5_[01]/*", Count: AtLeast(3),
			Func: pass("ib/mlx5_0/1", "ib/mlx5_1/1", "ib/mlx5_2/1")}, nil)
		if len(vs) != 3 || vs[0].Component != "ib/mlx5_0/1" || vs[1].Component != "ib/mlx5_1/1" {
			t.Fatalf("verdicts %v", vs)
		}
		if c := vs[2]; c.Component != "infiniband" || c.Status != Fail || c.Observed != "components=2" || c.Check != "ib" {
			t.Errorf("count verdict %v", c)
		}
	})
	t.Run("nothing matched", func(t *testing.T) {
		vs := RunOne(ctx, Check{Name: "ib", Type: "infiniband", AppliesTo: "ib/*", Func: pass()}, nil)
		if len(vs) != 1 || vs[0].Status != Error || !strings.Contains(vs[0].Message, `"ib/*"`) {
			t.Errorf("verdicts %v", vs)
		}
	})
	t.Run("sampling keeps the worst", func(t *testing.T) {
		n := 0
		f := func(context.Context) ([]Verdict, error) {
			n++
			st := Pass
			if n == 1 {
				st = Fail
			}
			return []Verdict{{Component: "hwmon/x/y", Status: st, Observed: "sample " + string(rune('0'+n))}}, nil
		}
		vs := RunOne(ctx, Check{Name: "t", Type: "thermal", Sample: true, Duration: 30 * time.Millisecond, Interval: time.Millisecond, Func: f}, nil)
		if n < 2 || len(vs) != 1 || vs[0].Status != Fail || vs[0].Observed != "sample 1" || !strings.Contains(vs[0].Message, "worst of") {
			t.Errorf("after %d samples: %v", n, vs)
		}
	})
	t.Run("error and failFast", func(t *testing.T) {
		var seen []Verdict
		vs := Run(ctx, []Check{
			{Name: "a", Type: "memory", Func: func(context.Context) ([]Verdict, error) { return nil, errors.New("mmap: cannot allocate memory") }},
			{Name: "b", Type: "cpu", Func: pass("cpu/0")},
		}, Options{FailFast: true, OnVerdict: func(v Verdict) { seen = append(seen, v) }})
		if len(vs) != 2 || vs[0].Status != Error || !strings.Contains(vs[0].Message, "check a (memory): mmap") {
			t.Fatalf("verdicts %v", vs)
		}
		if vs[1].Status != Skip || !strings.Contains(vs[1].Message, `failFast after check "a"`) {
			t.Errorf("second check: %v", vs[1])
		}
		if len(seen) != 2 || Worst(vs) != Error {
			t.Errorf("OnVerdict saw %d, worst %s", len(seen), Worst(vs))
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		vs := RunOne(cctx, Check{Name: "a", Type: "cpu", Func: pass("cpu/0")}, nil)
		if len(vs) != 1 || vs[0].Status != Error || !strings.Contains(vs[0].Message, "interrupted") {
			t.Errorf("verdicts %v", vs)
		}
	})
}

// TestRunStages runs a stage of two checks, a lone check and a second
// stage: the stage's checks run at the same time (each waits until the
// other has started), and every step ends before the next begins.
func TestRunStages(t *testing.T) {
	var mu sync.Mutex
	var order []string
	note := func(s string) {
		mu.Lock()
		order = append(order, s)
		mu.Unlock()
	}
	started := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	// waitFor blocks until the sibling started: run one after the other,
	// the first never returns a PASS.
	waitFor := func(me, other string) Func {
		return func(ctx context.Context) ([]Verdict, error) {
			close(started[me])
			select {
			case <-started[other]:
				return []Verdict{{Component: me + "/0", Status: Pass}}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(10 * time.Second):
				return nil, fmt.Errorf("%s: %s never started while %s ran", me, other, me)
			}
		}
	}
	one := func(name string) Func {
		return func(context.Context) ([]Verdict, error) {
			return []Verdict{{Component: name + "/0", Status: Pass}}, nil
		}
	}
	cs := []Check{
		{Name: "a", Type: "cpu", Stage: "load", Func: waitFor("a", "b")},
		{Name: "b", Type: "memory", Stage: "load", Func: waitFor("b", "a")},
		{Name: "c", Type: "thermal", Func: one("c")},
		{Name: "d", Type: "nvme-smart", Stage: "after", Func: one("d")},
		{Name: "e", Type: "ethernet", Stage: "after", Func: one("e")},
	}
	if got := len(Steps(cs)); got != 3 {
		t.Fatalf("Steps: %d steps, want 3 (load, c, after)", got)
	}
	vs := Run(context.Background(), cs, Options{
		OnCheck: func(name string, st CheckState, _ Status) { note(name + ":" + string(st)) },
		OnStage: func(e StageEvent) {
			if e.End {
				note("end " + e.Stage)
			} else {
				note("start " + e.Stage + " " + strings.Join(e.Checks, ","))
			}
		},
	})
	for _, v := range vs {
		if v.Status != Pass {
			t.Errorf("%s %s: %s %s", v.Check, v.Component, v.Status, v.Message)
		}
	}
	if got := []string{vs[0].Check, vs[1].Check, vs[2].Check, vs[3].Check, vs[4].Check}; strings.Join(got, "") != "abcde" {
		t.Errorf("verdicts in order %v, want the checks' order", got)
	}
	pos := map[string]int{}
	for i, s := range order {
		pos[s] = i
	}
	before := func(x, y string) {
		if px, ok := pos[x]; !ok || pos[y] <= px {
			t.Errorf("%q not before %q in %v", x, y, order)
		}
	}
	before("start load a,b", "a:running")
	before("a:done", "end load")
	before("b:done", "end load")
	before("end load", "c:running")
	before("c:done", "start after d,e")
	before("start after d,e", "d:running")
	before("e:done", "end after")
}

// TestRunStageFailFast: a check failing in a stage stops its running
// sibling (SKIP saying why, not an ERROR) and every later step.
func TestRunStageFailFast(t *testing.T) {
	blocker := func(ctx context.Context) ([]Verdict, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	vs := Run(context.Background(), []Check{
		{Name: "soak", Type: "cpu", Stage: "load", Func: blocker},
		{Name: "bad", Type: "memory", Stage: "load", Func: func(context.Context) ([]Verdict, error) {
			return []Verdict{{Component: "memory", Status: Fail, Message: "mismatch"}}, nil
		}},
		{Name: "later", Type: "thermal", Func: func(context.Context) ([]Verdict, error) {
			t.Error("a check after the failed stage ran")
			return nil, nil
		}},
	}, Options{FailFast: true})
	got := map[string]Verdict{}
	for _, v := range vs {
		got[v.Check] = v
	}
	if v := got["bad"]; v.Status != Fail {
		t.Errorf("bad: %v", v)
	}
	if v := got["soak"]; v.Status != Skip || !strings.Contains(v.Message, `failFast after check "bad" failed in stage "load"`) {
		t.Errorf("stopped sibling: %v", v)
	}
	if v := got["later"]; v.Status != Skip || !strings.Contains(v.Message, `not run: failFast after check "bad"`) {
		t.Errorf("later step: %v", v)
	}
}

// TestRunResumeSkipsDone: checks that ended before a node reset are not run
// or reported again; the others run; a failed one still stops the rest
// under failFast.
func TestRunResumeSkipsDone(t *testing.T) {
	ran := map[string]int{}
	var mu sync.Mutex
	f := func(name string) Func {
		return func(context.Context) ([]Verdict, error) {
			mu.Lock()
			ran[name]++
			mu.Unlock()
			return []Verdict{{Component: name, Status: Pass}}, nil
		}
	}
	cs := []Check{
		{Name: "before", Type: "nvme-smart", Func: f("before")},
		{Name: "cpu", Type: "cpu", Stage: "soak", Func: f("cpu")},
		{Name: "mem", Type: "memory", Stage: "soak", Func: f("mem")},
		{Name: "after", Type: "nvme-smart", Func: f("after")},
	}
	var stages []string
	var reported []string
	vs := Run(context.Background(), cs, Options{
		Done:      map[string]Status{"before": Pass, "cpu": Pass},
		OnStage:   func(e StageEvent) { stages = append(stages, fmt.Sprint(e.End, e.Checks)) },
		OnVerdict: func(v Verdict) { reported = append(reported, v.Check) },
	})
	if ran["before"] != 0 || ran["cpu"] != 0 || ran["mem"] != 1 || ran["after"] != 1 {
		t.Errorf("ran %v: want mem and after once, the done checks never", ran)
	}
	if len(vs) != 2 || strings.Join(reported, ",") != "mem,after" {
		t.Errorf("verdicts %v, reported %v", vs, reported)
	}
	if strings.Join(stages, ";") != "false [mem];true [mem]" {
		t.Errorf("stage events %v: the stage runs with its remaining check", stages)
	}

	clear(ran)
	vs = Run(context.Background(), cs, Options{FailFast: true, Done: map[string]Status{"before": Fail}})
	if len(ran) != 0 {
		t.Errorf("ran %v after a check that had failed before the reset", ran)
	}
	for _, v := range vs {
		if v.Status != Skip || !strings.Contains(v.Message, `failFast after check "before"`) {
			t.Errorf("%v", v)
		}
	}
}

// TestCheckThatTestsNothingFails: a check that judged no component (its
// appliesTo matched nothing, every verdict a SKIP) or whose program is
// missing is an ERROR, and the run fails on it; the same check marked
// optional by the suite is a SKIP whose message gives the reason.
func TestCheckThatTestsNothingFails(t *testing.T) {
	ctx := context.Background()
	found := func(vs ...Verdict) Func {
		return func(context.Context) ([]Verdict, error) { return vs, nil }
	}
	missingTool := func(ctx context.Context) ([]Verdict, error) {
		_, err := HostTools(ctx, "cure-no-such-load-program")
		return nil, fmt.Errorf("gpu-load: %w", err)
	}
	const reason = "QEMU test node: no GPU"
	for _, tc := range []struct {
		name string
		c    Check
		why  string // what the verdict must say
	}{
		{"appliesTo matches nothing", Check{Name: "ib", Type: "infiniband", AppliesTo: "ib/*", Func: found(Verdict{Component: "nic/eth0", Status: Pass})}, `no component matched appliesTo "ib/*"`},
		{"no component at all", Check{Name: "ib", Type: "infiniband", Func: found()}, "no component found"},
		{"every verdict a SKIP", Check{Name: "gpu", Type: "gpu", Func: found(Verdict{Component: "gpu", Status: Skip, Message: "no NVIDIA GPU on this node"})}, "no NVIDIA GPU on this node"},
		{"tool missing", Check{Name: "load", Type: "gpu", Func: missingTool}, "cure-no-such-load-program not on PATH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := RunOne(ctx, tc.c, nil)
			if len(vs) != 1 || vs[0].Status != Error || !strings.Contains(vs[0].Message, tc.why) || !strings.Contains(vs[0].Message, "optional: {reason:") {
				t.Fatalf("not optional: %v, want one ERROR saying %q and how to mark it optional", vs, tc.why)
			}
			if tc.name == "tool missing" && !strings.Contains(vs[0].Message, "tool missing") {
				t.Errorf("missing tool not named as such: %v", vs[0])
			}
			opt := tc.c
			opt.Optional = reason
			vs = RunOne(ctx, opt, nil)
			if len(vs) != 1 || vs[0].Status != Skip || !strings.Contains(vs[0].Message, "optional: "+reason) || !strings.Contains(vs[0].Message, tc.why) {
				t.Errorf("optional: %v, want one SKIP saying %q and %q", vs, "optional: "+reason, tc.why)
			}
		})
	}
	t.Run("some component tested", func(t *testing.T) {
		vs := RunOne(ctx, Check{Name: "disk", Type: "storage", Func: found(Verdict{Component: "disk/sda", Status: Skip, Message: "boot medium"},
			Verdict{Component: "disk/sdb", Status: Pass})}, nil)
		if len(vs) != 2 || vs[0].Status != Skip || vs[1].Status != Pass {
			t.Errorf("a check that tested one disk and skipped the boot medium: %v", vs)
		}
	})
	t.Run("the run fails", func(t *testing.T) {
		var worst []Status
		cs := []Check{
			{Name: "gpu", Type: "gpu", AppliesTo: "gpu/*", Func: found()},
			{Name: "ib", Type: "infiniband", Optional: "no InfiniBand here", Func: found()},
			{Name: "cpu", Type: "cpu", Func: found(Verdict{Component: "cpu/0", Status: Pass})},
		}
		vs := Run(ctx, cs, Options{Log: quietLog(), OnCheck: func(_ string, st CheckState, w Status) {
			if st == CheckDone {
				worst = append(worst, w)
			}
		}})
		if Worst(vs) != Error || len(worst) != 3 || worst[0] != Error || worst[1] != Skip || worst[2] != Pass {
			t.Errorf("worst %s, per check %v: %v", Worst(vs), worst, vs)
		}
		vs = Run(ctx, cs, Options{Log: quietLog(), FailFast: true})
		if len(vs) != 3 || vs[1].Check != "ib" || vs[1].Status != Skip || !strings.Contains(vs[1].Message, `failFast after check "gpu"`) {
			t.Errorf("failFast did not stop on the check that tested nothing: %v", vs)
		}
	})
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
