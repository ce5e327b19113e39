package fleetband

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
)

var now = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

func f(x float64) *float64 { return &x }

// fleet makes one sample per value, node n1, n2, ... (one drive each), an
// hour old.
func fleet(vals ...float64) []Sample {
	var out []Sample
	for i, v := range vals {
		out = append(out, Sample{Node: fmt.Sprintf("n%d", i+1), Run: fmt.Sprintf("r%d", i+1), Component: "disk/vdb", Value: v, Unit: "MB/s", Time: now.Add(-time.Hour)})
	}
	return out
}

func readResult(v float64) []Result {
	return []Result{{Component: "disk/vdb", Check: "disk-read", Status: curev1.VerdictStatus_PASS,
		Measurements: []Measurement{{"readMB", 8, "MB"}, {"readMBps", v, "MB/s"}}}}
}

func input(node string, results []Result, samples []Sample, band manifests.Band) Input {
	return Input{Node: node, Now: now, Window: 24 * time.Hour, MinNodes: 3,
		Bands:   map[string]map[string]manifests.Band{"disk-read": {"readMBps": band}},
		Results: results, Fleet: map[Key][]Sample{{"disk-read", "readMBps"}: samples}}
}

// TestJudgeSyntheticFleets: table tests over synthetic fleets.
func TestJudgeSyntheticFleets(t *testing.T) {
	below3 := manifests.Band{Below: f(3)}
	for _, tc := range []struct {
		name     string
		in       Input
		applied  bool
		marginal bool
		nodes    int
		note     string // substring of the judgement's note
		median   float64
	}{
		{name: "within the band", in: input("me", readResult(195), fleet(200, 205, 190, 210), below3), applied: true, nodes: 4, median: 202.5},
		{name: "slow outlier below", in: input("me", readResult(41), fleet(200, 205, 190, 210), below3), applied: true, marginal: true, nodes: 4, median: 202.5},
		{name: "fast outlier is fine with a below-only band", in: input("me", readResult(900), fleet(200, 205, 190, 210), below3), applied: true, nodes: 4, median: 202.5},
		{name: "fast outlier above", in: input("me", readResult(900), fleet(200, 205, 190, 210), manifests.Band{Above: f(3)}), applied: true, marginal: true, nodes: 4, median: 202.5},
		{name: "both sides, low", in: input("me", readResult(10), fleet(200, 205, 190, 210), manifests.Band{Below: f(3), Above: f(3)}), applied: true, marginal: true, nodes: 4, median: 202.5},
		{name: "too few nodes", in: input("me", readResult(41), fleet(200, 205), below3), nodes: 2, note: "fleet band not applied: 2 of 3 nodes", median: 202.5},
		{name: "no fleet at all", in: input("me", readResult(41), nil, below3), nodes: 0, note: "fleet band not applied: 0 of 3 nodes"},
		// n1 is the node judged: its own results (slow, as it is) are not
		// its fleet, which leaves two nodes.
		{name: "the node itself excluded", in: input("n1", readResult(41), fleet(41, 200, 205), below3), nodes: 2, note: "2 of 3 nodes", median: 202.5},
		// All identical: MAD 0, the floor (2 % of 200 = 4) makes 190 (2.5
		// floors below) pass and 180 (5 below) MARGINAL.
		{name: "zero MAD, inside the floor", in: input("me", readResult(190), fleet(200, 200, 200, 200), below3), applied: true, nodes: 4, median: 200},
		{name: "zero MAD, outside the floor", in: input("me", readResult(180), fleet(200, 200, 200, 200), below3), applied: true, marginal: true, nodes: 4, median: 200},
		// A bad node in the fleet does not drag the band down: the median
		// and MAD ignore it.
		{name: "outlier in the fleet", in: input("me", readResult(41), fleet(200, 205, 190, 210, 3), below3), applied: true, marginal: true, nodes: 5, median: 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := Judge(tc.in)
			if len(out.Judgements) != 1 {
				t.Fatalf("%d judgements, want 1: %+v", len(out.Judgements), out.Judgements)
			}
			j := out.Judgements[0]
			if j.Applied != tc.applied || j.Marginal != tc.marginal || j.Nodes != tc.nodes {
				t.Errorf("applied %v marginal %v nodes %d, want %v %v %d (%+v)", j.Applied, j.Marginal, j.Nodes, tc.applied, tc.marginal, tc.nodes, j)
			}
			if tc.nodes > 0 && j.Median != tc.median {
				t.Errorf("median %v, want %v", j.Median, tc.median)
			}
			if !strings.Contains(j.Note, tc.note) || (tc.note == "") != (j.Note == "") {
				t.Errorf("note %q, want %q", j.Note, tc.note)
			}
			if out.Marginal() != tc.marginal || len(out.Verdicts) != map[bool]int{true: 1}[tc.marginal] {
				t.Errorf("verdicts %+v, marginal %v", out.Verdicts, tc.marginal)
			}
		})
	}
}

// TestMarginalMessage: the MARGINAL verdict names the metric, the value
// with its unit, the fleet median with n, the band in the unit with its
// factor, and the percentile.
func TestMarginalMessage(t *testing.T) {
	// median 203, |dev| = 3 3 7 17 -> MAD 5 -> 7.413; 203 - 3·7.413 = 180.76.
	out := Judge(input("me", readResult(41.3), fleet(200, 206, 196, 220), manifests.Band{Below: f(3)}))
	if len(out.Verdicts) != 1 {
		t.Fatalf("verdicts %+v", out.Verdicts)
	}
	v := out.Verdicts[0]
	want := "outside the fleet band: readMBps=41.3 MB/s, fleet median 203 MB/s (n=4), band >= 181 MB/s (3.0 MAD), percentile 0"
	if v.Component != "disk/vdb" || v.Check != "disk-read" || v.Message != want {
		t.Errorf("verdict %s %s:\n got %q\nwant %q", v.Component, v.Check, v.Message, want)
	}
	if v.Observed != "readMBps=41.3 MB/s" || v.Expected != "readMBps >= 181 MB/s (fleet band)" {
		t.Errorf("observed %q expected %q", v.Observed, v.Expected)
	}
	d := out.Distributions[0]
	if d.Check != "disk-read" || d.Metric != "readMBps" || d.Unit != "MB/s" || d.Nodes != 4 || d.Samples != 4 || math.Abs(d.MAD-7.413) > 1e-9 {
		t.Errorf("distribution %+v", d)
	}
}

// TestPoolOneVotePerNode: a node's older runs, samples out of the window,
// in another unit or not finite are not its fleet weight; a node's vote is
// the median of its components in its latest run, each component once, so
// a node naming many components weighs as much as a node with one.
// (Was TestPoolOneValuePerNodeComponent: each drive of a node counted.)
func TestPoolOneVotePerNode(t *testing.T) {
	old := now.Add(-48 * time.Hour)
	s := []Sample{
		{Node: "a", Run: "r1", Component: "disk/vdb", Value: 10, Unit: "MB/s", Time: now.Add(-3 * time.Hour)},
		{Node: "a", Run: "r2", Component: "disk/vdb", Value: 200, Unit: "MB/s", Time: now.Add(-2 * time.Hour)}, // a's latest run
		{Node: "a", Run: "r2", Component: "disk/vdc", Value: 210, Unit: "MB/s", Time: now.Add(-2 * time.Hour)},
		{Node: "a", Run: "r1", Component: "disk/vdd", Value: 1, Unit: "MB/s", Time: now.Add(-3 * time.Hour)}, // not in its latest run
		{Node: "b", Run: "r3", Component: "disk/vdb", Value: 1, Unit: "MB/s", Time: old},                     // out of the window
		{Node: "b", Run: "r4", Component: "disk/vdb", Value: 190, Unit: "MiB/s", Time: now.Add(-time.Hour)},  // another unit
		{Node: "c", Run: "r5", Component: "disk/vdb", Value: math.NaN(), Unit: "MB/s", Time: now.Add(-time.Hour)},
		{Node: "me", Run: "r6", Component: "disk/vdb", Value: 5, Unit: "MB/s", Time: now.Add(-time.Hour)},
		{Node: "d", Run: "r7", Component: "disk/vdb", Value: 205, Unit: "MB/s", Time: now.Add(-time.Hour)},
	}
	// e names 100 drives, all ten times faster: one vote.
	for i := range 100 {
		s = append(s, Sample{Node: "e", Run: "r8", Component: fmt.Sprintf("disk/x%d", i), Value: 2000, Unit: "MB/s", Time: now.Add(-time.Hour)})
	}
	got := Pool(s, "me", now.Add(-24*time.Hour), "MB/s")
	var desc []string
	for _, x := range got {
		desc = append(desc, fmt.Sprintf("%s %s %g/%d", x.Node, x.Run, x.Value, x.Components))
	}
	if want := "a r2 205/2,d r7 205/1,e r8 2000/100"; strings.Join(desc, ",") != want {
		t.Errorf("pool %q, want %q", strings.Join(desc, ","), want)
	}
	if st := Describe(got); st.Nodes != 3 || st.Samples != 103 || st.Median != 205 || len(st.Values) != 3 {
		t.Errorf("stats %+v", st)
	}
}

// TestWindowHonoured: the same fleet judged later, when its samples have
// aged out of the suite's window, has too few nodes.
func TestWindowHonoured(t *testing.T) {
	in := input("me", readResult(41), fleet(200, 205, 190, 210), manifests.Band{Below: f(3)})
	if j := Judge(in).Judgements[0]; !j.Marginal {
		t.Fatalf("within the window: %+v", j)
	}
	in.Now = now.Add(24 * time.Hour) // the samples are now 25 h old
	if j := Judge(in).Judgements[0]; j.Applied || j.Nodes != 0 || j.Note != "fleet band not applied: 0 of 3 nodes" {
		t.Errorf("past the window: %+v", j)
	}
}

// TestOnlyPassingBandedResults: FAIL results and checks without bands are
// left alone; a PASS without the banded metric is an ERROR (it would escape
// its band by leaving the measurement out); a result already
// MARGINAL (a judgement repeated after a restart) is judged again.
func TestOnlyPassingBandedResults(t *testing.T) {
	in := input("me", []Result{
		{Component: "disk/vdb", Check: "disk-read", Status: curev1.VerdictStatus_FAIL, Measurements: []Measurement{{"readMBps", 1, "MB/s"}}},
		{Component: "disk/vdc", Check: "disk-read", Status: curev1.VerdictStatus_PASS},
		{Component: "disk/vdd", Check: "disk-read", Status: curev1.VerdictStatus_MARGINAL, Measurements: []Measurement{{"readMBps", 41, "MB/s"}}},
		{Component: "cpu/0", Check: "cpu-stress", Status: curev1.VerdictStatus_PASS, Measurements: []Measurement{{"readMBps", 1, "MB/s"}}},
	}, fleet(200, 205, 190, 210), manifests.Band{Below: f(3)})
	out := Judge(in)
	if len(out.Judgements) != 2 {
		t.Fatalf("judgements %+v", out.Judgements)
	}
	if j := out.Judgements[0]; j.Component != "disk/vdc" || j.Applied || j.Note != "fleet band not applied: the verdict carries no readMBps measurement" {
		t.Errorf("no measurement: %+v", j)
	}
	if j := out.Judgements[1]; j.Component != "disk/vdd" || !j.Marginal {
		t.Errorf("re-judged: %+v", j)
	}
	// The PASS without its measurement would escape its band: an ERROR
	// verdict (Unmeasured) names the metric it lacks.
	if len(out.Verdicts) != 2 || out.Verdicts[0].Component != "disk/vdc" || !slices.Equal(out.Verdicts[0].Unmeasured, []string{"readMBps"}) ||
		!strings.Contains(out.Verdicts[0].Message, "carries no such measurement") || out.Verdicts[1].Component != "disk/vdd" || len(out.Verdicts[1].Unmeasured) != 0 {
		t.Errorf("verdicts %+v", out.Verdicts)
	}
}

// TestSeveralMetricsOneVerdict: two metrics of one check outside their
// bands make one MARGINAL verdict naming both.
func TestSeveralMetricsOneVerdict(t *testing.T) {
	var samples []Sample
	for i, v := range []float64{200, 205, 190, 210} {
		samples = append(samples, Sample{Node: fmt.Sprintf("n%d", i), Component: "disk/vdb", Value: v, Unit: "MB/s", Time: now})
	}
	in := Input{Node: "me", Now: now, Window: time.Hour, MinNodes: 2,
		Bands: map[string]map[string]manifests.Band{"disk": {"readMBps": {Below: f(3)}, "writeMBps": {Below: f(3)}}},
		Results: []Result{{Component: "disk/vdb", Check: "disk", Status: curev1.VerdictStatus_PASS,
			Measurements: []Measurement{{"readMBps", 20, "MB/s"}, {"writeMBps", 30, "MB/s"}}}},
		Fleet: map[Key][]Sample{{"disk", "readMBps"}: samples, {"disk", "writeMBps"}: samples}}
	out := Judge(in)
	if len(out.Verdicts) != 1 || len(out.Distributions) != 2 {
		t.Fatalf("verdicts %+v distributions %d", out.Verdicts, len(out.Distributions))
	}
	v := out.Verdicts[0]
	if v.Observed != "readMBps=20 MB/s; writeMBps=30 MB/s" || !strings.Contains(v.Message, "readMBps=20 MB/s") || !strings.Contains(v.Message, "writeMBps=30 MB/s") {
		t.Errorf("verdict %+v", v)
	}
}

func TestStatsQuantilesAndPercentile(t *testing.T) {
	var vals []float64
	for i := 1; i <= 100; i++ {
		vals = append(vals, float64(i))
	}
	st := describeValues(vals)
	if st.Median != 50.5 || math.Abs(st.P5-5.95) > 1e-9 || math.Abs(st.P95-95.05) > 1e-9 || st.Min != 1 || st.Max != 100 {
		t.Errorf("quantiles %+v", st)
	}
	if p := st.Percentile(0); p != 0 {
		t.Errorf("percentile below all %v", p)
	}
	if p := st.Percentile(50); p != 49.5 {
		t.Errorf("percentile of 50: %v", p)
	}
	if p := st.Percentile(1000); p != 100 {
		t.Errorf("percentile above all %v", p)
	}
	many := describeValues(make([]float64, 10*MaxPlotValues))
	if len(many.Values) != MaxPlotValues || many.Samples != 10*MaxPlotValues {
		t.Errorf("thinned to %d of %d", len(many.Values), many.Samples)
	}
}

func TestPolicyDefaults(t *testing.T) {
	w, n := Policy(&manifests.ValidationSuiteSpec{})
	if w != time.Duration(manifests.DefaultFleetWindow) || n != manifests.DefaultFleetMinNodes {
		t.Errorf("defaults %v %d", w, n)
	}
	w, n = Policy(&manifests.ValidationSuiteSpec{Fleet: &manifests.FleetPolicy{Window: manifests.Duration(time.Hour), MinNodes: 2}})
	if w != time.Hour || n != 2 {
		t.Errorf("suite's %v %d", w, n)
	}
}

func TestNum(t *testing.T) {
	for v, want := range map[float64]string{41.3: "41.3", 203: "203", 3.27: "3.27", 0: "0", 0.00123: "0.00123", 12500.4: "12500", 10: "10", -2.5: "-2.5"} {
		if got := Num(v); got != want {
			t.Errorf("Num(%v) = %q, want %q", v, got, want)
		}
	}
}
