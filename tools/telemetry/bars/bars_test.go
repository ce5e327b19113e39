package bars

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/telemetry"
)

var t0 = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

// series builds a series sampled every 10 s from t0.
func series(source, comp, metric string, vs ...float64) telemetry.Series {
	s := telemetry.Series{Source: source, Component: comp, Metric: metric}
	for i, v := range vs {
		s.Times = append(s.Times, t0.Add(time.Duration(i)*10*time.Second).UnixMilli())
		s.Values = append(s.Values, v)
	}
	return s
}

func f(x float64) *float64 { return &x }

func byComp(vs []Verdict) map[string]Verdict {
	out := map[string]Verdict{}
	for _, v := range vs {
		out[v.Component] = v
	}
	return out
}

func measurement(v Verdict, metric string) (Measurement, bool) {
	for _, m := range v.Measurements {
		if m.Metric == metric {
			return m, true
		}
	}
	return Measurement{}, false
}

func TestJudgeMaxTemperature(t *testing.T) {
	res := telemetry.Result{Stage: "soak", Start: t0, End: t0.Add(time.Minute), Series: []telemetry.Series{
		series("host", "hwmon/coretemp/Package id 0", "temp_c", 60, 80, 91, 95, 70),
		series("host", "hwmon/coretemp-3/Package id 1", "temp_c", 60, 70, 75),
		series("host", "hwmon/nvme/Composite", "temp_c", 40, 88, 41),
		series("gpu", "gpu/0", "temp_c", 60, 70),
	}}
	th := map[string]manifests.Threshold{CPUTempMaxC: {Max: f(90)}, HwmonTempMaxC: {Max: f(85)}}
	vs := byComp(Judge(res, th))
	pkg0 := vs["hwmon/coretemp/Package id 0"]
	if pkg0.Status != checks.Fail || pkg0.Check != "telemetry:soak" || pkg0.Stage != "soak" {
		t.Fatalf("package 0: %+v", pkg0)
	}
	// The first sample past 90 is the third (t0+20s), not the peak.
	if want := t0.Add(20 * time.Second); !pkg0.At.Equal(want) {
		t.Errorf("package 0 at %s, want the first sample past the bar %s", pkg0.At, want)
	}
	if m, ok := measurement(pkg0, CPUTempMaxC); !ok || m.Value != 95 || m.Unit != "C" {
		t.Errorf("package 0 measurement %+v", pkg0.Measurements)
	}
	for _, want := range []string{"cpuTempMaxC=95 C outside cpuTempMaxC<=90", "hwmonTempMaxC=95 C outside hwmonTempMaxC<=85",
		"first past the bar at 2026-11-26 10:00:20 UTC (20s into stage soak)", "over 5 samples"} {
		if !strings.Contains(pkg0.Message, want) {
			t.Errorf("package 0 message %q lacks %q", pkg0.Message, want)
		}
	}
	// The second coretemp device (named coretemp-3) is a CPU sensor too, and passes.
	if v := vs["hwmon/coretemp-3/Package id 1"]; v.Status != checks.Pass || !v.At.IsZero() || len(v.Measurements) != 2 {
		t.Errorf("package 1: %+v", v)
	}
	// The NVMe sensor is barred by hwmonTempMaxC only.
	nv := vs["hwmon/nvme/Composite"]
	if nv.Status != checks.Fail || nv.Observed != "hwmonTempMaxC=88" || !nv.At.Equal(t0.Add(10*time.Second)) {
		t.Errorf("nvme: %+v", nv)
	}
	if _, judged := vs["gpu/0"]; judged {
		t.Error("a GPU judged without a GPU bar")
	}
}

func TestJudgeThrottledShare(t *testing.T) {
	res := telemetry.Result{Stage: "load", Start: t0, End: t0.Add(time.Minute), Series: []telemetry.Series{
		// 3 of 10 intervals with throttle events, the first at t0+40s.
		series("host", "cpu/0", "throttled", 0, 0, 0, 0, 2, 0, 5, 0, 1, 0),
		series("host", "cpu/1", "throttled", 0, 0, 0, 0, 0, 0, 0, 0, 0, 1),
		// Thermal slowdown in 2 of 4 samples.
		series("gpu", "gpu/3", "throttled", 0, 0x40, 0x40, 0),
	}}
	th := map[string]manifests.Threshold{CPUThrottledShare: {Max: f(0.1)}, GPUThrottledShare: {Equals: int64(0)}}
	vs := byComp(Judge(res, th))
	c0 := vs["cpu/0"]
	if c0.Status != checks.Fail || !c0.At.Equal(t0.Add(40*time.Second)) {
		t.Errorf("cpu/0: %s at %s", c0.Status, c0.At)
	}
	if m, _ := measurement(c0, CPUThrottledShare); m.Value != 0.3 || m.Unit != "ratio" {
		t.Errorf("cpu/0 share %+v", m)
	}
	if !strings.Contains(c0.Message, "first throttled at 2026-11-26 10:00:40 UTC (40s into stage load)") {
		t.Errorf("cpu/0 message %q", c0.Message)
	}
	if c1 := vs["cpu/1"]; c1.Status != checks.Pass {
		t.Errorf("cpu/1 (1 of 10) %s: %s", c1.Status, c1.Message)
	}
	g := vs["gpu/3"]
	if g.Status != checks.Fail || g.Observed != "gpuThrottledShare=0.50" || g.Expected != "gpuThrottledShare=0" || !g.At.Equal(t0.Add(10*time.Second)) {
		t.Errorf("gpu/3: %+v", g)
	}
}

func TestJudgeClockShareOfBase(t *testing.T) {
	// 20 samples: clocks at 1.2× base but for two dips to 0.7× and 0.9×;
	// p5 by nearest rank of 20 is the lowest value.
	clock := make([]float64, 20)
	for i := range clock {
		clock[i] = 2400
	}
	clock[7], clock[12] = 1800, 1400
	gclock := []float64{1980, 1980, 1700, 1980}
	res := telemetry.Result{Stage: "soak", Start: t0, End: t0.Add(4 * time.Minute), Series: []telemetry.Series{
		series("host", "cpu/0", "clock_mhz", clock...),
		series("host", "cpu/0", "base_clock_mhz", 2000, 2000),
		series("host", "cpu/1", "clock_mhz", 2400, 2400), // no base: not judged
		series("gpu", "gpu/0", "clock_mhz", gclock...),
		series("gpu", "gpu/0", "base_clock_mhz", 1980),
	}}
	th := map[string]manifests.Threshold{CPUClockShareOfBase: {Min: f(0.8)}, GPUClockShareOfBase: {Min: f(0.85)}}
	vs := byComp(Judge(res, th))
	c0 := vs["cpu/0"]
	if m, _ := measurement(c0, CPUClockShareOfBase); c0.Status != checks.Fail || m.Value != 0.7 {
		t.Fatalf("cpu/0: %s %+v", c0.Status, c0.Measurements)
	}
	// The first sample under 0.8× base is the 13th (1400 MHz), the 0.9× dip is within.
	if want := t0.Add(120 * time.Second); !c0.At.Equal(want) {
		t.Errorf("cpu/0 at %s, want %s", c0.At, want)
	}
	if _, judged := vs["cpu/1"]; judged {
		t.Error("a clock without its base was judged")
	}
	g := vs["gpu/0"]
	// p5 of 4 samples is the lowest: 1700/1980.
	if m, _ := measurement(g, GPUClockShareOfBase); g.Status != checks.Pass || m.Value != math.Round(1700.0/1980*10000)/10000 {
		t.Errorf("gpu/0: %s %+v", g.Status, g.Measurements)
	}
	if p := Percentile([]float64{5, 1, 4, 2, 3}, 50); p != 3 {
		t.Errorf("median %v", p)
	}
	var many []float64
	for i := 1; i <= 100; i++ {
		many = append(many, float64(i))
	}
	if p := Percentile(many, 5); p != 5 {
		t.Errorf("p5 of 1..100 = %v, want 5", p)
	}
}

func TestJudgeNothingToJudge(t *testing.T) {
	res := telemetry.Result{Stage: "soak", Start: t0, End: t0.Add(time.Minute),
		Series:   []telemetry.Series{series("host", "cpu/0", "busy_pct", 99, 99)},
		Problems: map[string]string{"gpu": "cure-nvml exited 3: NVML unavailable"},
		Notes:    []string{"no hwmon temperature sensor on this node"}}
	th := map[string]manifests.Threshold{GPUTempMaxC: {Max: f(85)}, GPUThrottledShare: {Max: f(0)}, CPUTempMaxC: {Max: f(90)}}
	vs := byComp(Judge(res, th))
	if g := vs["gpu"]; g.Status != checks.Error || !strings.Contains(g.Message, "gpuTempMaxC, gpuThrottledShare not judged: gpu sampling failed") ||
		!strings.Contains(g.Message, "NVML unavailable") {
		t.Errorf("gpu: %+v", g)
	}
	if c := vs["cpu"]; c.Status != checks.Skip || !strings.Contains(c.Message, "no hwmon temperature sensor") {
		t.Errorf("cpu: %+v", c)
	}
	if len(vs) != 2 {
		t.Errorf("verdicts %v", vs)
	}
}

func TestValidate(t *testing.T) {
	got := Validate(map[string]manifests.Threshold{
		CPUTempMaxC:         {Max: f(90)},
		"gpuTempMax":        {Max: f(85)},
		CPUThrottledShare:   {Max: f(1.5)},
		GPUClockShareOfBase: {Equals: "fast"},
		GPUThrottledShare:   {Equals: int64(0)},
		HwmonTempMaxC:       {},
	})
	want := []string{
		"thresholds.cpuThrottledShare: 1.5 is outside [0, 1]",
		"thresholds.gpuClockShareOfBase: equals: expected a number",
		"thresholds.gpuTempMax: unknown metric for stage telemetry (want one of cpuTempMaxC, gpuTempMaxC, hwmonTempMaxC, cpuThrottledShare, gpuThrottledShare, cpuClockShareOfBase, gpuClockShareOfBase)",
		"thresholds.hwmonTempMaxC: set min, max or equals",
	}
	if len(got) != len(want) {
		t.Fatalf("got %q", got)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d: %q, want %q…", i, got[i], want[i])
		}
	}
	if !slices.Equal(Names(), []string{CPUTempMaxC, GPUTempMaxC, HwmonTempMaxC, CPUThrottledShare, GPUThrottledShare, CPUClockShareOfBase, GPUClockShareOfBase}) {
		t.Errorf("names %v", Names())
	}
}
