// Package checks is the common ground of CURE's validation checks: the
// per-sub-component Verdict, pass bars (Limit) and how readings are judged
// against them, and Run, which executes a suite's configured checks with
// appliesTo filtering, soak repetition and fail-fast.
//
// The check families live in sub-packages (memtest, cpustress, nvmehealth,
// storage, netcheck, thermal), each behind a device seam; checks/suite turns
// a manifests.ValidationSuite into []Check.
package checks

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Status of one verdict; the names match api/curev1 VerdictStatus.
type Status string

const (
	Pass  Status = "PASS"
	Fail  Status = "FAIL"
	Skip  Status = "SKIP"
	Error Status = "ERROR" // the check could not measure
)

// rank orders statuses for "worst of": a definite FAIL outranks an ERROR.
func (s Status) rank() int {
	switch s {
	case Pass:
		return 0
	case Skip:
		return 1
	case Error:
		return 2
	case Fail:
		return 3
	}
	return 2
}

// Worse reports whether s is worse than t.
func (s Status) Worse(t Status) bool { return s.rank() > t.rank() }

// Verdict is the result of one check on one sub-component.
type Verdict struct {
	Component string // nvme/0, nic/eth0, ib/mlx5_0/1, hwmon/coretemp/Core 0, cpu/0, memory, disk/nvme0n1
	Check     string // the suite's check name
	Status    Status
	Observed  string
	Expected  string
	Message   string
	Started   time.Time
	Finished  time.Time
	// Measurements are the verdict's numbers with their units (the
	// readings made with In), what reports tabulate and fleet bands compare.
	Measurements []Measurement
}

// Measurement is one measured number with its unit.
type Measurement struct {
	Metric string  // readMBps, randReadIOPS, p99ReadLatencyUs
	Value  float64 // in Unit
	Unit   string  // MB/s, IOPS, us, bogo-ops/s, Mb/s, ratio, C
}

func (v Verdict) String() string {
	s := fmt.Sprintf("%s %s: %s", v.Component, v.Check, v.Status)
	if v.Observed != "" || v.Expected != "" {
		s += fmt.Sprintf(" (observed %s; expected %s)", v.Observed, v.Expected)
	}
	if v.Message != "" {
		s += ": " + v.Message
	}
	return s
}

// Worst is the worst status among vs (Pass when empty).
func Worst(vs []Verdict) Status {
	w := Pass
	for _, v := range vs {
		if v.Status.Worse(w) {
			w = v.Status
		}
	}
	return w
}

// Limit is a numeric pass bar; nil bounds are open. The zero Limit accepts
// everything (an informational reading).
type Limit struct {
	Min, Max *float64
}

// AtMost is the bar v <= x.
func AtMost(x float64) Limit { return Limit{Max: &x} }

// AtLeast is the bar v >= x.
func AtLeast(x float64) Limit { return Limit{Min: &x} }

// Between is the bar lo <= v <= hi.
func Between(lo, hi float64) Limit { return Limit{Min: &lo, Max: &hi} }

// IsZero reports whether l has no bound.
func (l Limit) IsZero() bool { return l.Min == nil && l.Max == nil }

// OK reports whether v passes l. NaN never passes a set bar.
func (l Limit) OK(v float64) bool {
	if l.IsZero() {
		return true
	}
	if math.IsNaN(v) {
		return false
	}
	return (l.Min == nil || v >= *l.Min) && (l.Max == nil || v <= *l.Max)
}

// Expr renders the bar on metric: "x<=5", "x>=10", "10<=x<=20".
func (l Limit) Expr(metric string) string {
	switch {
	case l.Min != nil && l.Max != nil && *l.Min == *l.Max:
		return metric + "=" + Num(*l.Min)
	case l.Min != nil && l.Max != nil:
		return Num(*l.Min) + "<=" + metric + "<=" + Num(*l.Max)
	case l.Min != nil:
		return metric + ">=" + Num(*l.Min)
	case l.Max != nil:
		return metric + "<=" + Num(*l.Max)
	}
	return ""
}

// Num formats a reading: integers without a fraction, others to 2 places.
func Num(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// Reading is one measured metric of a component with its pass bar.
type Reading struct {
	Metric string
	Value  float64
	Text   string // for textual readings (operstate, IB state); Value unused
	Limit  Limit  // numeric bar
	Want   string // textual bar, compared case-insensitively; "" means none
	// Missing marks a metric the device did not report; it fails a set bar
	// (a bar that cannot be checked is not a pass).
	Missing bool
	// Unit makes a numeric reading a Measurement of its verdict.
	Unit    string
	textual bool
}

// Value is a numeric reading with bar l (zero Limit: informational).
func Value(metric string, v float64, l Limit) Reading {
	return Reading{Metric: metric, Value: v, Limit: l}
}

// Text is a textual reading with expected value want ("" : informational).
func Text(metric, v, want string) Reading {
	return Reading{Metric: metric, Text: v, Want: want, textual: true}
}

// Missing is a metric the device did not report, with the bar it had.
func Missing(metric string, l Limit) Reading {
	return Reading{Metric: metric, Limit: l, Missing: true}
}

// In gives a numeric reading its unit: the verdict then carries it as a
// Measurement (a missing or textual reading carries none).
func (r Reading) In(unit string) Reading {
	r.Unit = unit
	return r
}

func (r Reading) barred() bool { return !r.Limit.IsZero() || r.Want != "" }

func (r Reading) ok() bool {
	switch {
	case r.Missing:
		return !r.barred()
	case r.textual:
		return r.Want == "" || strings.EqualFold(r.Text, r.Want)
	}
	return r.Limit.OK(r.Value)
}

func (r Reading) observed() string {
	switch {
	case r.Missing:
		return r.Metric + "=n/a"
	case r.textual:
		return r.Metric + "=" + r.Text
	}
	return r.Metric + "=" + Num(r.Value)
}

func (r Reading) expected() string {
	if r.textual {
		return r.Metric + "=" + r.Want
	}
	return r.Limit.Expr(r.Metric)
}

// Judge turns a component's readings into its verdict: PASS when every
// barred reading is within its bar, FAIL naming each one that is not.
// Observed lists every reading; Expected lists the bars.
func Judge(component string, rs ...Reading) Verdict {
	v := Verdict{Component: component, Status: Pass}
	var obs, exp, bad []string
	for _, r := range rs {
		obs = append(obs, r.observed())
		if r.Unit != "" && !r.Missing && !r.textual {
			v.Measurements = append(v.Measurements, Measurement{Metric: r.Metric, Value: r.Value, Unit: r.Unit})
		}
		if !r.barred() {
			continue
		}
		exp = append(exp, r.expected())
		if !r.ok() {
			v.Status = Fail
			if r.Missing {
				bad = append(bad, r.Metric+" not reported by the device")
			} else {
				bad = append(bad, r.observed()+" outside "+r.expected())
			}
		}
	}
	v.Observed = strings.Join(obs, " ")
	v.Expected = strings.Join(exp, " ")
	v.Message = strings.Join(bad, "; ")
	return v
}
