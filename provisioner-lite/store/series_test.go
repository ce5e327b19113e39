package store

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// Series are created on their first points, appended in time order (late
// points merged into place), bounded per run, and read back per source.
func TestSeries(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	if err := s.CreateRun(ctx, Run{ID: "r1", NodeID: "n1"}); err != nil {
		t.Fatal(err)
	}
	temp := Series{Source: "bmc", Component: "bmc/CPU1Temp", Metric: "temp_c", Unit: "C"}
	for _, p := range []struct {
		t int64
		v float64
	}{{1000, 40}, {3000, 60}, {2000, 50}} { // the third arrives late
		in := temp
		in.Times, in.Values = []int64{p.t}, []float64{p.v}
		res, err := s.AppendSeries(ctx, "r1", []Series{in, {Source: "host", Component: "gpu/10", Metric: "power_w", Unit: "W", Times: []int64{p.t}, Values: []float64{p.v * 10}},
			{Source: "host", Component: "gpu/2", Metric: "power_w", Unit: "W", Times: []int64{p.t}, Values: []float64{math.NaN()}}})
		if err != nil || res.Points != 2 || res.Invalid != 1 || res.Refused != 0 {
			t.Fatalf("AppendSeries = %+v, %v", res, err)
		}
	}
	bmc, err := s.RunSeries(ctx, "r1", "bmc")
	if err != nil || len(bmc) != 1 {
		t.Fatalf("RunSeries(bmc) = %+v, %v", bmc, err)
	}
	if !slices.Equal(bmc[0].Times, []int64{1000, 2000, 3000}) || !slices.Equal(bmc[0].Values, []float64{40, 50, 60}) || bmc[0].Unit != "C" {
		t.Errorf("bmc series %+v", bmc[0])
	}
	all, err := s.RunSeries(ctx, "r1", "")
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, sr := range all {
		order = append(order, fmt.Sprintf("%s %s %d", sr.Source, sr.Component, len(sr.Times)))
	}
	// gpu/2 had no finite point: created empty, in natural order before gpu/10.
	if want := []string{"bmc bmc/CPU1Temp 3", "host gpu/2 0", "host gpu/10 3"}; !slices.Equal(order, want) {
		t.Errorf("RunSeries order %v, want %v", order, want)
	}

	// Bad input names the series.
	if _, err := s.AppendSeries(ctx, "r1", []Series{{Source: "bmc", Component: "x", Metric: "m", Times: []int64{1}}}); err == nil {
		t.Error("times and values of different lengths accepted")
	}
	if _, err := s.AppendSeries(ctx, "r1", []Series{{Source: "bmc", Metric: "m"}}); err == nil {
		t.Error("series without a component accepted")
	}
}

// A run holds at most MaxSeriesPerRun series; a long series is thinned to
// fit and keeps its extremes.
func TestSeriesBounds(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	if err := s.CreateRun(ctx, Run{ID: "r1", NodeID: "n1"}); err != nil {
		t.Fatal(err)
	}
	var batch []Series
	for i := range MaxSeriesPerRun + 3 {
		batch = append(batch, Series{Source: "host", Component: fmt.Sprintf("cpu/%d", i), Metric: "clock_mhz", Unit: "MHz", Times: []int64{1}, Values: []float64{1}})
	}
	res, err := s.AppendSeries(ctx, "r1", batch)
	if err != nil || res.Refused != 3 || res.Points != MaxSeriesPerRun {
		t.Fatalf("over the series bound: %+v, %v", res, err)
	}
	// Existing series still take points at the bound.
	later := batch[0]
	later.Times = []int64{2}
	if res, err := s.AppendSeries(ctx, "r1", []Series{later}); err != nil || res.Points != 1 || res.Refused != 0 {
		t.Fatalf("append to an existing series at the bound: %+v, %v", res, err)
	}

	// A soak: 3 × MaxSeriesPoints points in batches, one spike and one dip.
	soak := Series{Source: "bmc", Component: "bmc/FanBay1", Metric: "fan_rpm", Unit: "RPM"}
	mustNode(t, s, testNode("n2", "52:54:00:00:00:02"))
	if err := s.CreateRun(ctx, Run{ID: "r2", NodeID: "n2"}); err != nil {
		t.Fatal(err)
	}
	n := 3 * MaxSeriesPoints
	for start := 0; start < n; start += 100 {
		in := soak
		for i := start; i < min(start+100, n); i++ {
			v := 5000.0 + float64(i%7)
			switch i {
			case 1234:
				v = 9999
			case 2345:
				v = 0
			}
			in.Times, in.Values = append(in.Times, int64(i)*30_000), append(in.Values, v)
		}
		if _, err := s.AppendSeries(ctx, "r2", []Series{in}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.RunSeries(ctx, "r2", "bmc")
	if err != nil || len(got) != 1 {
		t.Fatal(got, err)
	}
	g := got[0]
	if len(g.Times) > MaxSeriesPoints || len(g.Times) < MaxSeriesPoints/4 || g.Thinned != n-len(g.Times) {
		t.Errorf("thinned series: %d points, %d thinned (of %d)", len(g.Times), g.Thinned, n)
	}
	if !slices.IsSorted(g.Times) || g.Times[len(g.Times)-1] < int64(n-4)*30_000 {
		t.Errorf("thinned series lost its order or its end: last point at %d", g.Times[len(g.Times)-1])
	}
	if slices.Max(g.Values) != 9999 || slices.Min(g.Values) != 0 {
		t.Errorf("thinning lost the extremes: max %v min %v", slices.Max(g.Values), slices.Min(g.Values))
	}
}

// The runner's series take at most their budget of a run, leaving the
// BMC room; a replayed batch (points at times the series has) is not
// stored twice.
func TestSeriesRunnerBudgetAndReplay(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	if err := s.CreateRun(ctx, Run{ID: "r1", NodeID: "n1"}); err != nil {
		t.Fatal(err)
	}
	budget := SeriesBudget{Sources: []string{"host", "gpu"}, Max: MaxRunnerSeriesPerRun}
	var batch []Series
	for i := range MaxRunnerSeriesPerRun + 10 {
		src := "host"
		if i%2 == 1 {
			src = "gpu"
		}
		batch = append(batch, Series{Source: src, Component: fmt.Sprintf("cpu/%d", i), Metric: "busy_pct", Unit: "%", Times: []int64{1000, 2000}, Values: []float64{10, 20}})
	}
	res, err := s.AppendSeriesWithin(ctx, "r1", batch, budget)
	if err != nil || res.Refused != 10 || res.Points != 2*MaxRunnerSeriesPerRun {
		t.Fatalf("over the runner's budget: %+v, %v", res, err)
	}
	// The BMC still has room.
	bmc := Series{Source: "bmc", Component: "bmc/CPU1Temp", Metric: "temp_c", Unit: "C", Times: []int64{1000}, Values: []float64{40}}
	if res, err := s.AppendSeries(ctx, "r1", []Series{bmc}); err != nil || res.Points != 1 || res.Refused != 0 {
		t.Fatalf("BMC series after the runner's budget: %+v, %v", res, err)
	}
	// A source outside the budget is refused outright.
	if _, err := s.AppendSeriesWithin(ctx, "r1", []Series{bmc}, budget); err == nil {
		t.Error("a bmc series appended within the runner's budget")
	}
	// A replay of the first batch, with one new point.
	replay := batch[0]
	replay.Times, replay.Values = []int64{1000, 2000, 3000}, []float64{10, 20, 30}
	res, err = s.AppendSeriesWithin(ctx, "r1", []Series{replay}, budget)
	if err != nil || res.Points != 1 || res.Duplicate != 2 {
		t.Fatalf("replay: %+v, %v", res, err)
	}
	got, err := s.RunSeries(ctx, "r1", "host")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got[0].Times, []int64{1000, 2000, 3000}) {
		t.Errorf("after the replay: %v", got[0].Times)
	}
}

func TestThinPoints(t *testing.T) {
	ts := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9}
	vs := []float64{5, 9, 1, 5, 5, 5, 5, 5, 7}
	gt, gv, dropped := ThinPoints(ts, vs, 8)
	// Runs of four: {5 9 1 5} keeps 9 and 1, {5 5 5 5} one 5, {7} itself.
	if !slices.Equal(gt, []int64{2, 3, 5, 9}) || !slices.Equal(gv, []float64{9, 1, 5, 7}) || dropped != 5 {
		t.Errorf("ThinPoints = %v %v %d", gt, gv, dropped)
	}
	if gt, _, d := ThinPoints(ts, vs, 100); len(gt) != len(ts) || d != 0 {
		t.Error("a series within the bound was thinned")
	}
}

// The BMC evidence of a run is kept as given and replaced by a later read.
func TestBMCEvidence(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	if err := s.CreateRun(ctx, Run{ID: "r1", NodeID: "n1"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.BMCEvidence(ctx, "r1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no evidence yet: %v", err)
	}
	at := time.UnixMilli(1_700_000_000_000).UTC()
	for _, doc := range []string{`{"log":[]}`, `{"log":[{"message":"PSU 2 failed"}]}`} {
		if err := s.PutBMCEvidence(ctx, "r1", at, []byte(doc)); err != nil {
			t.Fatal(err)
		}
	}
	got, doc, err := s.BMCEvidence(ctx, "r1")
	if err != nil || !got.Equal(at) || string(doc) != `{"log":[{"message":"PSU 2 failed"}]}` {
		t.Fatalf("BMCEvidence = %v %s %v", got, doc, err)
	}
}
