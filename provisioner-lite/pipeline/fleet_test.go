package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/fleetband"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/protobuf/encoding/protojson"
)

const fleetSuite = `apiVersion: cure.dev/v1
kind: ValidationSuite
metadata:
  name: fleet-read
spec:
  fleet: {window: 24h, minNodes: 3}
  checks:
    - name: disk-read
      type: storage-throughput
      appliesTo: "disk/*"
      thresholds:
        readMBps: {min: 5}
      fleet:
        readMBps: {below: 3}
`

// seedFleet stores a finished diagnostic run of each other node of the
// SKU with a passing disk-read verdict measuring readMBps.
func seedFleet(t *testing.T, st *store.Store, vals ...float64) {
	t.Helper()
	for i, v := range vals {
		seedPeer(t, st, i+1, v)
	}
}

// seedPeer stores peer node i's diagnostic run with a passing disk-read
// measuring readMBps v.
func seedPeer(t *testing.T, st *store.Store, i int, v float64) {
	t.Helper()
	ctx := context.Background()
	node, run := fmt.Sprintf("peer%d", i), fmt.Sprintf("peer-run-%d", i)
	if err := st.UpsertNode(ctx, store.Node{ID: node, BMCURL: "https://10.0.0.9", SKU: "qemu-nvme", MACs: []string{fmt.Sprintf("52:54:00:aa:00:%02x", i)}}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateRun(ctx, store.Run{ID: run, NodeID: node, Mode: "diagnostic", Manifest: "fleet-read", Status: curev1.RunStatus_RUN_RUNNING, StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	verdict := store.Verdict{RunID: run, Component: "disk/nvme0n1", Check: "disk-read", Status: curev1.VerdictStatus_PASS, Measurements: []store.Measurement{{Metric: "readMBps", Value: v, Unit: "MB/s"}}}
	if _, err := st.AppendRunnerEvent(ctx, store.Event{RunID: run, NodeID: node, BootID: "b", Seq: 1, Time: time.Now(), Kind: runstate.EventVerdict, Phase: modes.Validate}, &verdict, store.DefaultEventLimits); err != nil {
		t.Fatal(err)
	}
}

func fleetFixture(t *testing.T, mbps float64) *fixture {
	t.Helper()
	return fleetFixtureCfg(t, mbps, nil)
}

// fleetFixtureCfg is fleetFixture with the engine's Config edited (hooks).
func fleetFixtureCfg(t *testing.T, mbps float64, cfgEdit func(*pipeline.Config)) *fixture {
	t.Helper()
	var dir string
	f := newFixtureCfg(t, func(_ *manifests.SKU, casDir string) { dir = filepath.Dir(filepath.Dir(casDir)) }, nil, cfgEdit)
	if err := os.MkdirAll(filepath.Join(dir, "manifests", "suites"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifests", "suites", "fleet-read.yaml"), []byte(fleetSuite), 0o644); err != nil {
		t.Fatal(err)
	}
	f.verdicts = map[modes.PhaseName][]*curev1.Verdict{modes.Validate: {{Component: "disk/nvme0n1", Check: "disk-read", Status: curev1.VerdictStatus_PASS,
		Observed: fmt.Sprintf("readMBps=%g", mbps), Expected: "readMBps>=5",
		Measurements: []*curev1.Measurement{{Metric: "readMBps", Value: mbps, Unit: "MB/s"}, {Metric: "readMB", Value: 8, Unit: "MB"}}}}}
	return f
}

func fleetRecord(t *testing.T, st *store.Store, runID string) *curev1.FleetJudgements {
	t.Helper()
	js, _, err := st.RunFleetJudgement(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	rec := &curev1.FleetJudgements{}
	if err := protojson.Unmarshal(js, rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestFleetMarginalFailsGate: a diagnostic whose disk passes its absolute
// bar but reads far below the three other nodes of its SKU ends failed, its
// verdict MARGINAL naming the metric, value, fleet median, band and
// percentile; the timeline and the stored judgement say so.
func TestFleetMarginalFailsGate(t *testing.T) {
	f := fleetFixture(t, 41)
	seedFleet(t, f.st, 200, 206, 196)
	runID, err := f.eng.Start(context.Background(), "node1", modes.Diagnostic, "fleet-read", false)
	if err != nil {
		t.Fatal(err)
	}
	r := f.waitRun(runID)
	if r.Status != curev1.RunStatus_RUN_FAILED || !strings.Contains(r.Message, "MARGINAL against the SKU's fleet") || !strings.Contains(r.Message, "disk/nvme0n1 disk-read readMBps=41 MB/s") {
		t.Fatalf("run %s: %s", r.Status, r.Message)
	}
	vs, _ := f.st.Verdicts(context.Background(), runID)
	if len(vs) != 1 || vs[0].Status != curev1.VerdictStatus_MARGINAL ||
		vs[0].Message != "outside the fleet band: readMBps=41 MB/s, fleet median 200 MB/s (n=3), band >= 182 MB/s (3.0 MAD), percentile 0" ||
		vs[0].Expected != "readMBps>=5; readMBps >= 182 MB/s (fleet band)" {
		t.Fatalf("verdicts %+v", vs)
	}
	rec := fleetRecord(t, f.st, runID)
	if len(rec.GetJudgements()) != 1 || !rec.GetJudgements()[0].GetMarginal() || len(rec.GetDistributions()) != 1 {
		t.Fatalf("record %v", rec)
	}
	d := rec.GetDistributions()[0]
	if d.GetSku() != "qemu-nvme" || d.GetNodes() != 3 || d.GetMedian() != 200 || len(d.GetValues()) != 3 || len(d.GetMarks()) != 1 || d.GetMarks()[0].GetValue() != 41 {
		t.Errorf("distribution %v", d)
	}
	evs, _ := f.st.Events(context.Background(), runID, 0, 0)
	var marginal, summary bool
	for _, e := range evs {
		marginal = marginal || (e.Kind == runstate.EventVerdict && e.Status == "MARGINAL" && strings.Contains(e.Message, "disk/nvme0n1 disk-read"))
		summary = summary || strings.Contains(e.Message, "fleet bands (SKU qemu-nvme): 1 MARGINAL, 0 within the band")
	}
	if !marginal || !summary {
		t.Errorf("timeline lacks the MARGINAL verdict (%v) or the summary (%v)", marginal, summary)
	}
	// The node's result is not a fleet sample: a later node is not judged
	// against it.
	got, _ := f.st.FleetSamples(context.Background(), store.FleetQuery{SKU: "qemu-nvme", Check: "disk-read", Metric: "readMBps"})
	if len(got) != 3 {
		t.Errorf("fleet after the MARGINAL run: %d samples, want the 3 others", len(got))
	}
}

// TestFleetTooFewNodesPasses: with two other nodes (the suite wants three)
// the band is not applied, the run succeeds on its absolute bars, and the
// judgement and the timeline say why.
func TestFleetTooFewNodesPasses(t *testing.T) {
	f := fleetFixture(t, 41)
	seedFleet(t, f.st, 200, 206)
	runID, err := f.eng.Start(context.Background(), "node1", modes.Diagnostic, "fleet-read", false)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.waitRun(runID); r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("run %s: %s", r.Status, r.Message)
	}
	j := fleetRecord(t, f.st, runID).GetJudgements()
	if len(j) != 1 || j[0].GetApplied() || j[0].GetNote() != "fleet band not applied: 2 of 3 nodes" {
		t.Fatalf("judgements %v", j)
	}
	evs, _ := f.st.Events(context.Background(), runID, 0, 0)
	found := false
	for _, e := range evs {
		found = found || strings.Contains(e.Message, "1 fleet band not applied: 2 of 3 nodes (only the absolute thresholds apply)")
	}
	if !found {
		t.Error("timeline does not say the band was not applied")
	}
	// This node's passing result joins the fleet for the next one.
	if got, _ := f.st.FleetSamples(context.Background(), store.FleetQuery{SKU: "qemu-nvme", Check: "disk-read", Metric: "readMBps"}); len(got) != 3 {
		t.Errorf("fleet after a passing run: %d samples, want 3", len(got))
	}
}

// TestFleetUnmeasuredPassFailsGate: a banded check's PASS that leaves its
// measurement out (a node escaping its band, or one whose measurement the
// coordinator refused) is not "band not applied, passed on its absolute
// bars": the verdict becomes an ERROR naming the metric and the run fails.
func TestFleetUnmeasuredPassFailsGate(t *testing.T) {
	f := fleetFixture(t, 41)
	f.verdicts[modes.Validate][0].Measurements = []*curev1.Measurement{{Metric: "readMB", Value: 8, Unit: "MB"}}
	seedFleet(t, f.st, 200, 206, 196)
	runID, err := f.eng.Start(context.Background(), "node1", modes.Diagnostic, "fleet-read", false)
	if err != nil {
		t.Fatal(err)
	}
	r := f.waitRun(runID)
	if r.Status != curev1.RunStatus_RUN_FAILED || !strings.Contains(r.Message, "not judgeable") || !strings.Contains(r.Message, "readMBps") {
		t.Fatalf("run %s: %s", r.Status, r.Message)
	}
	vs, _ := f.st.Verdicts(context.Background(), runID)
	if len(vs) != 1 || vs[0].Status != curev1.VerdictStatus_ERROR || !strings.HasPrefix(vs[0].Message, fleetband.Unjudgeable) {
		t.Fatalf("verdicts %+v", vs)
	}
}

// TestFleetBandOneNodeOneVote: one runner session reporting a banded
// check on many components, ten times faster than the fleet, invented
// drives included, cannot move its SKU's band. The invented drives'
// measurements are refused at ingest (not in the inventory its Hello
// reported); its real drives make one vote, and an audit run's results
// none. The honest node judged against the band (day-0, rejudged when the
// band fills) stays PASS, where the per-component pool had a median of
// 2000 MB/s and found it MARGINAL.
func TestFleetBandOneNodeOneVote(t *testing.T) {
	ctx := context.Background()
	var h rejudged
	f := fleetFixtureCfg(t, 2000, h.hook)
	var vs []*curev1.Verdict
	for _, d := range append([]string{"nvme0n1", "sda", "nvme1n1"}, invented(30)...) {
		vs = append(vs, &curev1.Verdict{Component: "disk/" + d, Check: "disk-read", Status: curev1.VerdictStatus_PASS,
			Measurements: []*curev1.Measurement{{Metric: "readMBps", Value: 2000, Unit: "MB/s"}}})
	}
	f.verdicts = map[modes.PhaseName][]*curev1.Verdict{modes.Validate: vs}
	seedFleet(t, f.st, 200, 206)
	// The honest node: judged when its band lacked its minimum, ended.
	seedPeer(t, f.st, 3, 196)
	honest := "peer-run-3"
	r, _ := f.st.GetRun(ctx, honest)
	r.Status, r.EndedAt = curev1.RunStatus_RUN_SUCCEEDED, time.Now().UTC()
	if err := f.st.UpdateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	if _, err := f.st.WriteFleetJudgement(ctx, store.FleetWrite{RunID: honest, SKU: "qemu-nvme", Pending: store.FleetUnbanded, Judgements: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	// An audit of a fourth node measured far above: not a fleet sample.
	auditRun(t, f.st, 4, 5000)

	runID, err := f.eng.Start(ctx, "node1", modes.Diagnostic, "fleet-read", false)
	if err != nil {
		t.Fatal(err)
	}
	// Its invented drives' PASS verdicts lost their refused measurements:
	// unjudgeable against the band, so its own run fails.
	if r := f.waitRun(runID); r.Status != curev1.RunStatus_RUN_FAILED || !strings.Contains(r.Message, "disk/vd00 disk-read "+fleetband.Unjudgeable) {
		t.Fatalf("the hostile node's run %s: %s", r.Status, r.Message)
	}
	ms, _ := f.st.RunMeasurements(ctx, runID)
	if len(ms) != 3 {
		t.Errorf("the hostile run kept %d measurements, want its 3 inventoried drives' (%+v)", len(ms), ms)
	}
	rows, _ := f.st.FleetSamples(ctx, store.FleetQuery{SKU: "qemu-nvme", Check: "disk-read", Metric: "readMBps", ExcludeNode: "peer3"})
	if st := fleetband.Describe(samplesOf(rows)); st.Median != 2000 {
		t.Fatalf("the per-component pool's median %v: the attack this test is about moves it to 2000", st.Median)
	}
	if _, err := f.eng.RejudgeFleet(ctx, "qemu-nvme"); err != nil {
		t.Fatal(err)
	}
	if v, _ := verdictOf(t, f.st, honest, "disk/nvme0n1", "disk-read"); v.Status != curev1.VerdictStatus_PASS {
		t.Fatalf("the honest node's verdict %+v, want PASS", v)
	}
	rec := fleetRecord(t, f.st, honest)
	j, d := rec.GetJudgements(), rec.GetDistributions()
	if len(j) != 1 || !j[0].GetApplied() || j[0].GetMarginal() || len(d) != 1 || d[0].GetNodes() != 3 || d[0].GetMedian() != 206 || len(d[0].GetValues()) != 3 {
		t.Fatalf("the honest node's judgement %v", rec)
	}
	if c := h.got(); len(c) != 1 || c[0].run != honest || c[0].marginal {
		t.Errorf("hook calls %+v, want one: %s within the band", c, honest)
	}
}

func invented(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("vd%02d", i)
	}
	return out
}

// samplesOf is the store's rows as fleetband samples, each its own vote:
// the per-component pool the fleet used before one node had one vote.
func samplesOf(rows []store.MeasurementRecord) []fleetband.Sample {
	out := make([]fleetband.Sample, 0, len(rows))
	for _, m := range rows {
		out = append(out, fleetband.Sample{Node: m.NodeID + "/" + m.Component, Run: m.RunID, Value: m.Value, Unit: m.Unit, Time: m.Time})
	}
	return out
}

// auditRun stores peer node i's audit run with a passing disk-read
// measuring readMBps v.
func auditRun(t *testing.T, st *store.Store, i int, v float64) {
	t.Helper()
	ctx := context.Background()
	node, run := fmt.Sprintf("peer%d", i), fmt.Sprintf("peer-audit-%d", i)
	if err := st.UpsertNode(ctx, store.Node{ID: node, BMCURL: "https://10.0.0.9", SKU: "qemu-nvme", MACs: []string{fmt.Sprintf("52:54:00:aa:00:%02x", i)}}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateRun(ctx, store.Run{ID: run, NodeID: node, Mode: "audit", Manifest: "fleet-read", Status: curev1.RunStatus_RUN_RUNNING, StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	verdict := store.Verdict{RunID: run, Component: "disk/nvme0n1", Check: "disk-read", Status: curev1.VerdictStatus_PASS, Measurements: []store.Measurement{{Metric: "readMBps", Value: v, Unit: "MB/s"}}}
	if _, err := st.AppendRunnerEvent(ctx, store.Event{RunID: run, NodeID: node, BootID: "b", Seq: 1, Time: time.Now(), Kind: runstate.EventVerdict, Phase: modes.Validate}, &verdict, store.DefaultEventLimits); err != nil {
		t.Fatal(err)
	}
}
