package server

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// fleetStore has nodes n1..n4 of SKU hgx with a diagnostic run each whose
// disk/vdb disk-read verdict measured readMBps (n4's is the slow one).
func fleetStore(t *testing.T, vals ...float64) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "cure.db"), store.WithStateKey(bytes.Repeat([]byte{5}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	for i, v := range vals {
		node, run := fmt.Sprintf("n%d", i+1), fmt.Sprintf("r%d", i+1)
		if err := st.UpsertNode(ctx, store.Node{ID: node, BMCURL: "https://192.0.2.1", SKU: "hgx", MACs: []string{fmt.Sprintf("52:54:00:00:00:%02x", i+1)}}); err != nil {
			t.Fatal(err)
		}
		if err := st.CreateRun(ctx, store.Run{ID: run, NodeID: node, Mode: "diagnostic", Manifest: "fleet-read", Status: curev1.RunStatus_RUN_RUNNING, StartedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		ev := &curev1.Event{Seq: 1, TimeUnixMs: time.Now().UnixMilli(), Phase: "validate", Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{
			Component: "disk/vdb", Check: "disk-read", Status: curev1.VerdictStatus_PASS, Observed: fmt.Sprintf("readMBps=%g", v),
			Measurements: []*curev1.Measurement{{Metric: "readMBps", Value: v, Unit: "MB/s"}, {Metric: "readMB", Value: 8, Unit: "MB"}}}}}
		e, sv, err := runnerEvent(node, run, "boot", ev, map[string]bool{"validate": true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.AppendRunnerEvent(ctx, e, sv, store.DefaultEventLimits); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// TestFleetBandsAnswer: the distribution of each SKU/check/metric and where
// the asked-for node sits (left out of its own fleet, as when judged).
func TestFleetBandsAnswer(t *testing.T) {
	st := fleetStore(t, 200, 206, 196, 41)
	o := &OperatorService{Store: st}
	ctx := context.Background()
	resp, err := o.FleetBands(ctx, &curev1.FleetBandsRequest{NodeId: "n4", Metric: "readMBps"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetDistributions()) != 1 || resp.GetTruncated() || resp.GetWindowMs() != (30*24*time.Hour).Milliseconds() {
		t.Fatalf("answer %v", resp)
	}
	d := resp.GetDistributions()[0]
	if d.GetSku() != "hgx" || d.GetCheck() != "disk-read" || d.GetUnit() != "MB/s" || d.GetNodes() != 3 || d.GetMedian() != 200 ||
		math.Abs(d.GetMad()-4*1.4826) > 1e-9 || d.GetMin() != 196 || d.GetMax() != 206 || len(d.GetValues()) != 3 {
		t.Errorf("distribution %v", d)
	}
	if len(d.GetMarks()) != 1 || d.GetMarks()[0].GetComponent() != "disk/vdb" || d.GetMarks()[0].GetValue() != 41 || d.GetMarks()[0].GetPercentile() != 0 || d.GetMarks()[0].GetRunId() != "r4" {
		t.Errorf("marks %v", d.GetMarks())
	}
	all, err := o.FleetBands(ctx, &curev1.FleetBandsRequest{})
	if err != nil || len(all.GetDistributions()) != 2 || all.GetDistributions()[0].GetMetric() != "readMB" || all.GetDistributions()[1].GetNodes() != 4 {
		t.Errorf("every metric: %v %v", all, err)
	}
	if _, err := o.FleetBands(ctx, &curev1.FleetBandsRequest{NodeId: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("unknown node: %v", err)
	}
	if _, err := o.FleetBands(ctx, &curev1.FleetBandsRequest{WindowMs: -1}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("negative window: %v", err)
	}
}

// TestReportCarriesMeasurementsAndFleet: the report gives each verdict its
// measurements and the run's stored fleet judgement; MARGINAL ranks with
// drift when the answer must be cut.
func TestReportCarriesMeasurementsAndFleet(t *testing.T) {
	st := fleetStore(t, 41)
	ctx := context.Background()
	rec := &curev1.FleetJudgements{Judgements: []*curev1.FleetJudgement{{Component: "disk/vdb", Check: "disk-read", Metric: "readMBps", Note: "fleet band not applied: 0 of 3 nodes"}},
		Distributions: []*curev1.FleetDistribution{{Sku: "hgx", Check: "disk-read", Metric: "readMBps"}}}
	js, _ := protojson.Marshal(rec)
	if err := st.PutFleetJudgement(ctx, "r1", nil, js); err != nil {
		t.Fatal(err)
	}
	r, _ := st.GetRun(ctx, "r1")
	rep, err := BuildReport(ctx, st, r)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.GetVerdicts()) != 1 || len(rep.GetVerdicts()[0].GetMeasurements()) != 2 || rep.GetVerdicts()[0].GetMeasurements()[1].GetValue() != 41 {
		t.Errorf("verdicts %v", rep.GetVerdicts())
	}
	if len(rep.GetFleetJudgements()) != 1 || rep.GetFleetJudgements()[0].GetNote() != "fleet band not applied: 0 of 3 nodes" || len(rep.GetFleetDistributions()) != 1 {
		t.Errorf("fleet %v %v", rep.GetFleetJudgements(), rep.GetFleetDistributions())
	}
	if verdictRank(curev1.VerdictStatus_MARGINAL) >= verdictRank(curev1.VerdictStatus_PASS) {
		t.Error("MARGINAL ranks with PASS")
	}
}

// TestRunnerVerdictMeasurements: measurements are cleaned and bounded as
// the rest of a runner's verdict; too many or nameless or repeated metrics
// refuse the event; values that are not numbers are left out.
func TestRunnerVerdictMeasurements(t *testing.T) {
	ev := func(ms ...*curev1.Measurement) *curev1.Event {
		return &curev1.Event{Seq: 1, Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{Component: "disk/vdb", Check: "disk-read", Status: curev1.VerdictStatus_PASS, Measurements: ms}}}
	}
	phases := map[string]bool{"validate": true}
	_, v, err := runnerEvent("n", "r", "b", ev(&curev1.Measurement{Metric: "readMBps", Value: 1, Unit: "MB/s\x1b]0;x" + strings.Repeat("x", 40)},
		&curev1.Measurement{Metric: "lat", Value: math.NaN(), Unit: "us"}), phases)
	if err != nil || len(v.Measurements) != 1 || v.Measurements[0].Metric != "readMBps" || len(v.Measurements[0].Unit) > maxUnit || strings.Contains(v.Measurements[0].Unit, "\x1b") {
		t.Errorf("cleaned: %+v %v", v, err)
	}
	many := make([]*curev1.Measurement, store.MaxVerdictMeasurements+1)
	for i := range many {
		many[i] = &curev1.Measurement{Metric: fmt.Sprint("m", i)}
	}
	for name, e := range map[string]*curev1.Event{
		"too many": ev(many...),
		"nameless": ev(&curev1.Measurement{Value: 1}),
		"repeated": ev(&curev1.Measurement{Metric: "a"}, &curev1.Measurement{Metric: "a"}),
		"bidi":     ev(&curev1.Measurement{Metric: "read\u202eMBps"}),
		"escape":   ev(&curev1.Measurement{Metric: "read\x1bMBps"}),
		"long":     ev(&curev1.Measurement{Metric: strings.Repeat("m", maxMetricName+1)}),
	} {
		if _, _, err := runnerEvent("n", "r", "b", e, phases); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
