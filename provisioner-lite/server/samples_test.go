package server_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/grpc/codes"
)

func samplesEvent(seq uint64, series ...*curev1.Series) *curev1.Event {
	return &curev1.Event{Seq: seq, Phase: string(modes.SEDRevert), TimeUnixMs: time.Now().UnixMilli(), Body: &curev1.Event_Samples{Samples: &curev1.Samples{Series: series}}}
}

// hostSeries is n points of one metric, one a second ending now.
func hostSeries(comp, metric string, n int, v float64) *curev1.Series {
	s := &curev1.Series{Component: comp, Metric: metric, Unit: "C", Source: "host"}
	now := time.Now().UnixMilli()
	for i := range n {
		s.TimeUnixMs = append(s.TimeUnixMs, now-int64(n-i)*1000)
		s.Values = append(s.Values, v+float64(i))
	}
	return s
}

func (h *hostile) notes(run string) []string {
	h.t.Helper()
	evs, err := h.st.Events(context.Background(), run, 0, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		if e.Source == "coordinator" {
			out = append(out, e.Message)
		}
	}
	return out
}

// A soak's telemetry is stored in the run's series, never as events (a
// batch a minute for days must not eat the run's event caps); a replayed
// batch is not stored twice; the report carries the series.
func TestSamplesStoredNotAsEvents(t *testing.T) {
	h := newHostile(t)
	ctx := context.Background()
	tok := h.fetchToken(nodeA.mac)
	s, cancel := h.session(helloOpts{token: tok, boot: "b1", node: nodeA})
	defer cancel()
	if err := send(s, logEvent(1, "", "hello")); err != nil {
		t.Fatal(err)
	}
	const batches = 60
	for i := range batches {
		ev := samplesEvent(uint64(2+i), hostSeries("hwmon/coretemp/Package id 0", "temp_c", 6, float64(50+i)),
			&curev1.Series{Component: "gpu/0", Metric: "power_w", Unit: "W", Source: "gpu", TimeUnixMs: []int64{time.Now().UnixMilli() - int64(batches-i)}, Values: []float64{650}})
		if err := send(s, ev); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	if evs := h.runnerEvents(nodeA.run); len(evs) != 1 {
		t.Errorf("%d runner events stored, want 1 (the log): samples are not events", len(evs))
	}
	series, err := h.st.RunSeries(ctx, nodeA.run, "")
	if err != nil || len(series) != 2 {
		t.Fatalf("series %+v, %v", series, err)
	}
	if gpu := series[0]; gpu.Source != "gpu" || len(gpu.Times) != batches {
		t.Errorf("gpu series: %s %d points", gpu.Source, len(gpu.Times))
	}
	temp := series[1]
	stored := len(temp.Times)
	// The runner replays its last batch after a reconnect: nothing new.
	s2, cancel2 := h.session(helloOpts{token: tok, boot: "b1", node: nodeA})
	defer cancel2()
	last := samplesEvent(1+batches, hostSeries("hwmon/coretemp/Package id 0", "temp_c", 6, 50+batches-1))
	last.GetSamples().GetSeries()[0].TimeUnixMs = temp.Times[len(temp.Times)-6:]
	if err := send(s2, last); err != nil {
		t.Fatal(err)
	}
	if again, _ := h.st.RunSeries(ctx, nodeA.run, "host"); len(again[0].Times) != stored {
		t.Errorf("a replayed batch changed the series: %d points, then %d", stored, len(again[0].Times))
	}
	rep, err := server.BuildReport(ctx, h.st, h.run(nodeA.run))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.GetHostSeries()) != 2 || rep.GetSeriesBound() != nil || len(rep.GetBmcSeries()) != 0 {
		t.Errorf("report: %d host series, %d bmc, bound %v", len(rep.GetHostSeries()), len(rep.GetBmcSeries()), rep.GetSeriesBound())
	}
}

// What a runner never sends is refused: a batch past the bounds, values
// that are not numbers, a source or metric no runner has, a coordinator
// phase. Points dated outside the run are dropped and noted.
func TestSamplesBounds(t *testing.T) {
	h := newHostile(t)
	ctx := context.Background()
	tok := h.fetchToken(nodeA.mac)
	manySeries := make([]*curev1.Series, 257)
	for i := range manySeries {
		manySeries[i] = hostSeries(fmt.Sprintf("cpu/%d", i), "busy_pct", 1, 1)
	}
	var manyPoints []*curev1.Series
	for i := range 9 {
		manyPoints = append(manyPoints, hostSeries(fmt.Sprintf("cpu/%d", i), "busy_pct", 4000, 1))
	}
	nan := hostSeries("cpu/0", "busy_pct", 3, 1)
	nan.Values[1] = math.NaN()
	bmc := hostSeries("bmc/CPU1Temp", "temp_c", 1, 40)
	bmc.Source = "bmc"
	uneven := hostSeries("cpu/0", "busy_pct", 3, 1)
	uneven.Values = uneven.Values[:2]
	coord := samplesEvent(2, hostSeries("cpu/0", "busy_pct", 1, 1))
	coord.Phase = string(modes.BMC)
	for _, tc := range []struct {
		name string
		ev   *curev1.Event
		want string
	}{
		{"too many series", samplesEvent(2, manySeries...), "257 series"},
		{"too many points", samplesEvent(2, manyPoints...), "36000 points"},
		{"too long a series", samplesEvent(2, hostSeries("cpu/0", "busy_pct", 5000, 1)), "at most 4096 points a series"},
		{"not a number", samplesEvent(2, nan), "value 1 is NaN"},
		{"the BMC's source", samplesEvent(2, bmc), `source "bmc" is not one a runner samples`},
		{"a metric that is no name", samplesEvent(2, hostSeries("cpu/0", "Busy %", 1, 1)), "is not a plain name"},
		{"uneven", samplesEvent(2, uneven), "3 times for 2 values"},
		{"empty", samplesEvent(2), "0 series"},
		{"a coordinator phase", coord, "not a runner phase"},
	} {
		s, cancel := h.session(helloOpts{token: tok, boot: "b1", node: nodeA})
		err := send(s, tc.ev)
		cancel()
		if codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want InvalidArgument saying %q", tc.name, err, tc.want)
		}
	}
	if series, _ := h.st.RunSeries(ctx, nodeA.run, ""); len(series) != 0 {
		t.Errorf("refused batches stored %d series", len(series))
	}

	// A node whose clock is a day ahead: its points are not stored, the
	// timeline says why, the session goes on.
	s, cancel := h.session(helloOpts{token: tok, boot: "b1", node: nodeA})
	defer cancel()
	ahead := hostSeries("cpu/0", "busy_pct", 3, 1)
	for i := range ahead.TimeUnixMs {
		ahead.TimeUnixMs[i] += (24 * time.Hour).Milliseconds()
	}
	if err := send(s, samplesEvent(2, ahead, hostSeries("cpu/1", "busy_pct", 2, 1))); err != nil {
		t.Fatal(err)
	}
	series, _ := h.st.RunSeries(ctx, nodeA.run, "host")
	if len(series) != 2 || len(series[0].Times) != 0 || len(series[1].Times) != 2 {
		t.Errorf("series after a batch from the future: %+v", series)
	}
	if notes := strings.Join(h.notes(nodeA.run), "\n"); !strings.Contains(notes, "3 telemetry points dated outside the run") {
		t.Errorf("notes %q", notes)
	}
}

// Telemetry batches past the run's rate budget are acknowledged but not
// stored (a runner replaying its queue after an outage sends at most 64),
// and the timeline says so once.
func TestSamplesRateBounded(t *testing.T) {
	h := newHostile(t)
	ctx := context.Background()
	tok := h.fetchToken(nodeA.mac)
	s, cancel := h.session(helloOpts{token: tok, boot: "b1", node: nodeA})
	defer cancel()
	const sent = 150
	base := time.Now().UnixMilli() - sent
	for i := range sent {
		sr := &curev1.Series{Component: "cpu/0", Metric: "busy_pct", Unit: "%", Source: "host", TimeUnixMs: []int64{base + int64(i)}, Values: []float64{50}}
		if err := send(s, samplesEvent(uint64(1+i), sr)); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	series, err := h.st.RunSeries(ctx, nodeA.run, "host")
	if err != nil || len(series) != 1 {
		t.Fatal(series, err)
	}
	// The burst is 100; the budget refills one every 5 s while the test runs.
	if n := len(series[0].Times); n < 100 || n > 110 {
		t.Errorf("%d of %d batches stored, want the burst of 100", n, sent)
	}
	notes := 0
	for _, n := range h.notes(nodeA.run) {
		if strings.Contains(n, "telemetry batches arrive faster") {
			notes++
		}
	}
	if notes != 1 {
		t.Errorf("%d rate notes, want 1", notes)
	}
}

// The report of a run whose series fill the store's caps (512 series of
// 1,024 points) keeps its series within MaxReportSeriesBytes and says how.
func TestReportSeriesBoundedForClient(t *testing.T) {
	h := newHostile(t)
	ctx := context.Background()
	now := time.Now().UnixMilli()
	mk := func(source, comp, metric string) store.Series {
		s := store.Series{Source: source, Component: comp, Metric: metric, Unit: "C"}
		for i := range store.MaxSeriesPoints {
			s.Times = append(s.Times, now-int64(store.MaxSeriesPoints-i)*1000)
			s.Values = append(s.Values, 40+float64(i%13)+0.123456789)
		}
		return s
	}
	var runnerSeries, bmcSeries []store.Series
	for i := range store.MaxRunnerSeriesPerRun {
		runnerSeries = append(runnerSeries, mk("host", fmt.Sprintf("hwmon/chip%d/a-long-sensor-label-%d", i, i), "temp_c"))
	}
	for i := range store.MaxSeriesPerRun - store.MaxRunnerSeriesPerRun {
		bmcSeries = append(bmcSeries, mk("bmc", fmt.Sprintf("bmc/Temperatures/Sensor%d", i), "temp_c"))
	}
	for start := 0; start < len(runnerSeries); start += 64 {
		if _, err := h.st.AppendSeriesWithin(ctx, nodeA.run, runnerSeries[start:min(start+64, len(runnerSeries))],
			store.SeriesBudget{Sources: []string{"host", "gpu"}, Max: store.MaxRunnerSeriesPerRun}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := h.st.AppendSeries(ctx, nodeA.run, bmcSeries); err != nil {
		t.Fatal(err)
	}
	rep, err := server.BuildReport(ctx, h.st, h.run(nodeA.run))
	if err != nil {
		t.Fatal(err)
	}
	b := rep.GetSeriesBound()
	t.Logf("series: %d bmc + %d host, %d points each at most, %d omitted: %s", len(rep.GetBmcSeries()), len(rep.GetHostSeries()), b.GetPointsPerSeries(), b.GetSeriesOmitted(), b.GetNote())
	if b == nil || b.GetPointsPerSeries() >= server.ReportSeriesPoints || !strings.Contains(b.GetNote(), "thinned") {
		t.Fatalf("series bound %v", b)
	}
	if len(rep.GetBmcSeries())+len(rep.GetHostSeries())+int(b.GetSeriesOmitted()) != store.MaxSeriesPerRun {
		t.Errorf("%d + %d series + %d omitted, want all %d accounted", len(rep.GetBmcSeries()), len(rep.GetHostSeries()), b.GetSeriesOmitted(), store.MaxSeriesPerRun)
	}
	for _, s := range append(rep.GetBmcSeries(), rep.GetHostSeries()...) {
		if len(s.GetTimeUnixMs()) > int(b.GetPointsPerSeries()) {
			t.Fatalf("%s: %d points over the bound %d", s.GetComponent(), len(s.GetTimeUnixMs()), b.GetPointsPerSeries())
		}
	}
	// Through the real client, whose receive limit is 4 MiB.
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got, err := h.operatorClient("vic", pki.RoleViewer).Report(rctx, &curev1.ReportRequest{RunId: nodeA.run})
	if err != nil || len(got.GetHostSeries()) != len(rep.GetHostSeries()) {
		t.Fatalf("report over gRPC: %v", err)
	}
}

// A runner's verdict on a sampled series keeps when it happened and its
// stage through to the report.
func TestVerdictAtAndStageInReport(t *testing.T) {
	h := newHostile(t)
	tok := h.fetchToken(nodeA.mac)
	s, cancel := h.session(helloOpts{token: tok, boot: "b1", node: nodeA})
	defer cancel()
	at := time.Now().Add(-3 * time.Minute).UnixMilli()
	ev := &curev1.Event{Seq: 1, Phase: string(modes.SEDRevert), TimeUnixMs: time.Now().UnixMilli(), Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{
		Component: "gpu/3", Check: "telemetry:soak", Status: curev1.VerdictStatus_FAIL, Message: "gpuTempMaxC=91 C outside gpuTempMaxC<=85",
		AtUnixMs: at, Stage: "soak\x1b[1m"}}}
	if err := send(s, ev); err != nil {
		t.Fatal(err)
	}
	if err := send(s, verdictEvent(2, "")); err != nil {
		t.Fatal(err)
	}
	rep, err := server.BuildReport(context.Background(), h.st, h.run(nodeA.run))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range rep.GetVerdicts() {
		switch v.GetComponent() {
		case "gpu/3":
			if v.GetAtUnixMs() != at || strings.ContainsRune(v.GetStage(), '\x1b') || !strings.HasPrefix(v.GetStage(), "soak") {
				t.Errorf("gpu/3: at %d stage %q, want %d and a clean stage", v.GetAtUnixMs(), v.GetStage(), at)
			}
		case "disk/nvme0n1":
			if v.GetAtUnixMs() != 0 || v.GetStage() != "" {
				t.Errorf("disk verdict: at %d stage %q, want none", v.GetAtUnixMs(), v.GetStage())
			}
		}
	}
}
