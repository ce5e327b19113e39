package checks

import (
	"context"
	"errors"
	"strings"
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
		Measured("readMBps", 512.5, AtLeast(1000), "MB/s"),
		Value("readbackMismatches", 0, AtMost(0)),
		Measured("p99ReadLatencyUs", 180, Limit{}, "us"),
		Missing("randReadIOPS", AtLeast(1)),
		Text("state", "up", ""))
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
		if len(vs) != 1 || vs[0].Status != Skip || !strings.Contains(vs[0].Message, `"ib/*"`) {
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
