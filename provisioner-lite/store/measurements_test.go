package store

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store/pgtest"
)

// suiteRunOn creates a running diagnostic run of suite on node.
func suiteRunOn(t *testing.T, s *Store, id, node, suite string) {
	t.Helper()
	if err := s.CreateRun(ctxT(t), Run{ID: id, NodeID: node, Mode: "diagnostic", Manifest: suite, Status: curev1.RunStatus_RUN_RUNNING, StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

// verdictEvent stores a runner verdict with measurements through the
// runner's path (AppendRunnerEvent).
func verdictEvent(t *testing.T, s *Store, run, node string, seq uint64, v Verdict) {
	t.Helper()
	v.RunID = run
	e := Event{RunID: run, NodeID: node, BootID: "b1", Seq: seq, Time: time.Now(), Phase: "validate", Kind: runstate.EventVerdict, Status: runstate.VerdictName(v.Status)}
	if _, err := s.AppendRunnerEvent(ctxT(t), e, &v, DefaultEventLimits); err != nil {
		t.Fatal(err)
	}
}

func readVerdict(status string, mbps float64) Verdict {
	st, err := runstate.ParseVerdict(status)
	if err != nil {
		panic(err)
	}
	return Verdict{Component: "disk/vdb", Check: "disk-read", Status: st, Observed: fmt.Sprintf("readMBps=%g", mbps),
		Measurements: []Measurement{{"readMBps", mbps, "MB/s"}, {"readMB", 8.39, "MB"}}}
}

// TestMeasurementsStoredWithVerdict: a runner verdict's measurements are
// kept with the run's node, SKU and suite (the store's, not the runner's
// word), non-finite, nameless and repeated metrics are not; a verdict sent
// again replaces them; a failing verdict's are not fleet samples.
func TestMeasurementsStoredWithVerdict(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	suiteRunOn(t, s, "r1", "n1", "qemu-fleet")
	v := readVerdict("PASS", 41.5)
	v.Measurements = append(v.Measurements, Measurement{"readMBps", 99, "MB/s"}, Measurement{"", 1, "x"}, Measurement{"lat", math.NaN(), "us"}, Measurement{"inf", math.Inf(1), "us"})
	verdictEvent(t, s, "r1", "n1", 1, v)
	ms, err := s.RunMeasurements(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, fmt.Sprintf("%s %s %s %s %s %s=%g %s passed=%v", m.RunID, m.NodeID, m.SKU, m.Suite, m.Component, m.Metric, m.Value, m.Unit, m.Passed))
		if time.Since(m.Time) > time.Minute || m.Check != "disk-read" {
			t.Errorf("measurement %+v", m)
		}
	}
	want := "r1 n1 hgx-h100 qemu-fleet disk/vdb readMB=8.39 MB passed=true|r1 n1 hgx-h100 qemu-fleet disk/vdb readMBps=41.5 MB/s passed=true"
	if strings.Join(got, "|") != want {
		t.Errorf("measurements:\n got %s\nwant %s", strings.Join(got, "|"), want)
	}
	// The check ran again (a resumed suite): its new verdict's numbers
	// replace the old ones; a FAIL's are kept, but not as a fleet sample.
	verdictEvent(t, s, "r1", "n1", 2, Verdict{Component: "disk/vdb", Check: "disk-read", Status: curev1.VerdictStatus_FAIL, Measurements: []Measurement{{"readMBps", 3, "MB/s"}}})
	ms, _ = s.RunMeasurements(ctx, "r1")
	if len(ms) != 1 || ms[0].Value != 3 || ms[0].Passed {
		t.Errorf("after the second verdict: %+v", ms)
	}
	if u, err := s.Usage(ctx, "r1"); err != nil || u.Verdicts != 1 {
		t.Errorf("usage %+v %v", u, err)
	}
}

// TestMeasurementsBoundedPerRun: past the run's bound a verdict is stored
// without its measurements; a verdict replaced frees its rows.
func TestMeasurementsBoundedPerRun(t *testing.T) {
	s, _ := openTest(t, WithMaxMeasurements(5))
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	suiteRunOn(t, s, "r1", "n1", "qemu-fleet")
	for i := range 4 {
		verdictEvent(t, s, "r1", "n1", uint64(i+1), Verdict{Component: fmt.Sprintf("disk/vd%c", 'b'+i), Check: "disk-read", Status: curev1.VerdictStatus_PASS,
			Measurements: []Measurement{{"readMBps", 100, "MB/s"}, {"readMB", 8, "MB"}}})
	}
	ms, _ := s.RunMeasurements(ctx, "r1")
	if len(ms) != 5 {
		t.Fatalf("%d measurements kept, want the bound 5", len(ms))
	}
	vs, _ := s.Verdicts(ctx, "r1")
	if len(vs) != 4 {
		t.Fatalf("%d verdicts, want 4 (a verdict past the bound is kept without its numbers)", len(vs))
	}
	// disk/vdb's two rows replaced by one: room for one more elsewhere.
	verdictEvent(t, s, "r1", "n1", 5, Verdict{Component: "disk/vdb", Check: "disk-read", Status: curev1.VerdictStatus_PASS, Measurements: []Measurement{{"readMBps", 90, "MB/s"}}})
	verdictEvent(t, s, "r1", "n1", 6, Verdict{Component: "disk/vdf", Check: "disk-read", Status: curev1.VerdictStatus_PASS, Measurements: []Measurement{{"readMBps", 90, "MB/s"}, {"readMB", 8, "MB"}}})
	if ms, _ := s.RunMeasurements(ctx, "r1"); len(ms) != 5 {
		t.Errorf("%d measurements after a replacement, want 5", len(ms))
	}
	many := make([]Measurement, 2*MaxVerdictMeasurements)
	for i := range many {
		many[i] = Measurement{fmt.Sprintf("m%d", i), 1, "x"}
	}
	s2, _ := openTest(t)
	mustNode(t, s2, testNode("n1", "52:54:00:00:00:01"))
	suiteRunOn(t, s2, "r1", "n1", "x")
	verdictEvent(t, s2, "r1", "n1", 1, Verdict{Component: "cpu/0", Check: "cpu", Status: curev1.VerdictStatus_PASS, Measurements: many})
	if ms, _ := s2.RunMeasurements(ctx, "r1"); len(ms) != MaxVerdictMeasurements {
		t.Errorf("%d measurements of one verdict kept, want %d", len(ms), MaxVerdictMeasurements)
	}
}

// TestFleetSamples: the components of each node's latest passing run of one
// SKU's check and metric; the node judged left out; a node's own place
// (failing results too) on request; the window; the keys listed.
func TestFleetSamples(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	other := testNode("x1", "52:54:00:00:00:09")
	other.SKU = "other-sku"
	mustNode(t, s, other)
	for i, n := range []string{"n1", "n2", "n3"} {
		mustNode(t, s, testNode(n, fmt.Sprintf("52:54:00:00:00:0%d", i+1)))
	}
	run := func(id, node string, vs ...Verdict) {
		suiteRunOn(t, s, id, node, "qemu-fleet")
		for i, v := range vs {
			verdictEvent(t, s, id, node, uint64(i+1), v)
		}
		r, _ := s.GetRun(ctx, id)
		r.Status, r.EndedAt = curev1.RunStatus_RUN_SUCCEEDED, time.Now()
		if err := s.UpdateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	run("r1", "n1", readVerdict("PASS", 150))
	run("r2", "n1", readVerdict("PASS", 200)) // n1's latest
	run("r3", "n2", readVerdict("PASS", 210), Verdict{Component: "disk/vdc", Check: "disk-read", Status: curev1.VerdictStatus_PASS, Measurements: []Measurement{{"readMBps", 205, "MB/s"}}})
	run("r4", "n3", readVerdict("FAIL", 2))
	run("r5", "x1", readVerdict("PASS", 999))
	q := FleetQuery{SKU: "hgx-h100", Check: "disk-read", Metric: "readMBps"}
	got, err := s.FleetSamples(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	desc := func(ms []MeasurementRecord) string {
		var out []string
		for _, m := range ms {
			out = append(out, fmt.Sprintf("%s/%s/%s=%g", m.NodeID, m.RunID, m.Component, m.Value))
		}
		return strings.Join(out, ",")
	}
	if d := desc(got); d != "n1/r2/disk/vdb=200,n2/r3/disk/vdb=210,n2/r3/disk/vdc=205" {
		t.Errorf("fleet %s", d)
	}
	q.ExcludeNode = "n2"
	if got, _ := s.FleetSamples(ctx, q); desc(got) != "n1/r2/disk/vdb=200" {
		t.Errorf("without n2: %s", desc(got))
	}
	mine, _ := s.FleetSamples(ctx, FleetQuery{Node: "n3", Check: "disk-read", Metric: "readMBps", IncludeFailing: true})
	if desc(mine) != "n3/r4/disk/vdb=2" || mine[0].Passed {
		t.Errorf("n3's own place: %s", desc(mine))
	}
	if got, _ := s.FleetSamples(ctx, FleetQuery{SKU: "hgx-h100", Check: "disk-read", Metric: "readMBps", Since: time.Now().Add(time.Hour)}); len(got) != 0 {
		t.Errorf("window in the future still returned %s", desc(got))
	}
	if _, err := s.FleetSamples(ctx, FleetQuery{SKU: "hgx-h100"}); err == nil {
		t.Error("a fleet query without check and metric was answered")
	}
	keys, truncated, err := s.FleetKeys(ctx, "", "", "", time.Time{}, 10)
	if err != nil || truncated {
		t.Fatal(err, truncated)
	}
	if fmt.Sprint(keys) != "[{hgx-h100 disk-read readMB} {hgx-h100 disk-read readMBps} {other-sku disk-read readMB} {other-sku disk-read readMBps}]" {
		t.Errorf("keys %v", keys)
	}
	if keys, truncated, _ := s.FleetKeys(ctx, "hgx-h100", "", "readMBps", time.Time{}, 10); len(keys) != 1 || truncated {
		t.Errorf("filtered keys %v", keys)
	}
	if keys, truncated, _ := s.FleetKeys(ctx, "", "", "", time.Time{}, 3); len(keys) != 3 || !truncated {
		t.Errorf("bounded keys %v %v", keys, truncated)
	}
}

// TestFleetSamplesAcceptanceLatestRun: only acceptance runs (burn-in,
// diagnostic) give fleet samples, an audit's or a provision's measurements
// never; a node brings the components of its latest qualifying run only,
// at most MaxNodeComponents of them; the keys list only acceptance
// measurements.
func TestFleetSamplesAcceptanceLatestRun(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	for i, n := range []string{"n1", "n2", "n3"} {
		mustNode(t, s, testNode(n, fmt.Sprintf("52:54:00:00:00:0%d", i+1)))
	}
	run := func(id, node string, mode modes.Mode, vs ...Verdict) {
		if err := s.CreateRun(ctx, Run{ID: id, NodeID: node, Mode: mode, Manifest: "qemu-fleet", Status: curev1.RunStatus_RUN_RUNNING, StartedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		for i, v := range vs {
			verdictEvent(t, s, id, node, uint64(i+1), v)
		}
		r, _ := s.GetRun(ctx, id)
		r.Status, r.EndedAt = curev1.RunStatus_RUN_SUCCEEDED, time.Now()
		if err := s.UpdateRun(ctx, r); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // the next run's rows are later
	}
	disk := func(comp string, v float64) Verdict {
		return Verdict{Component: comp, Check: "disk-read", Status: curev1.VerdictStatus_PASS, Measurements: []Measurement{{"readMBps", v, "MB/s"}}}
	}
	run("r1", "n1", "burnin", disk("disk/vdb", 200), disk("disk/vdc", 210))
	run("r2", "n1", "diagnostic", disk("disk/vdb", 190)) // n1's latest: vdc is not in it
	run("r3", "n2", "audit", disk("disk/vdb", 5000))
	run("r4", "n2", "provision", disk("disk/vdb", 5000))
	many := make([]Verdict, 0, MaxNodeComponents+8)
	for i := range MaxNodeComponents + 8 {
		many = append(many, disk(fmt.Sprintf("disk/x%02d", i), 2000))
	}
	run("r5", "n3", "burnin", many...)
	got, err := s.FleetSamples(ctx, FleetQuery{SKU: "hgx-h100", Check: "disk-read", Metric: "readMBps"})
	if err != nil {
		t.Fatal(err)
	}
	perNode := map[string]int{}
	for _, m := range got {
		perNode[m.NodeID+"/"+m.RunID]++
		if m.NodeID == "n1" && (m.RunID != "r2" || m.Value != 190) {
			t.Errorf("n1 sample %+v: want its latest run r2 only", m)
		}
	}
	if want := map[string]int{"n1/r2": 1, "n3/r5": MaxNodeComponents}; fmt.Sprint(perNode) != fmt.Sprint(want) {
		t.Errorf("samples per node and run %v, want %v (no audit or provision run)", perNode, want)
	}
	// The audit's and provision's measurements are kept for their reports.
	if ms, _ := s.RunMeasurements(ctx, "r3"); len(ms) != 1 {
		t.Errorf("audit run measurements %+v", ms)
	}
	if keys, _, _ := s.FleetKeys(ctx, "", "", "", time.Time{}, 10); fmt.Sprint(keys) != "[{hgx-h100 disk-read readMBps}]" {
		t.Errorf("keys %v", keys)
	}
	run("r6", "n2", "verify", Verdict{Component: "disk/vdb", Check: "other", Status: curev1.VerdictStatus_PASS, Measurements: []Measurement{{"m", 1, ""}}})
	if keys, _, _ := s.FleetKeys(ctx, "", "other", "", time.Time{}, 10); len(keys) != 0 {
		t.Errorf("a verify run's measurement is a fleet key: %v", keys)
	}
}

// TestPutFleetJudgement: the MARGINAL verdict replaces the runner's PASS,
// its measurements leave the fleet, the judgement is kept with the run.
func TestPutFleetJudgement(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	suiteRunOn(t, s, "r1", "n1", "qemu-fleet")
	verdictEvent(t, s, "r1", "n1", 1, readVerdict("PASS", 41))
	if _, _, err := s.RunFleetJudgement(ctx, "r1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("judgement before any: %v", err)
	}
	m := Verdict{Component: "disk/vdb", Check: "disk-read", Status: curev1.VerdictStatus_MARGINAL, Observed: "readMBps=41 MB/s", Expected: "readMBps >= 150 MB/s (fleet band)",
		Message: "outside the fleet band", Time: time.Now()}
	if err := s.PutFleetJudgement(ctx, "r1", []Verdict{m}, []byte(`{"judgements":[]}`)); err != nil {
		t.Fatal(err)
	}
	vs, _ := s.Verdicts(ctx, "r1")
	if len(vs) != 1 || vs[0].Status != curev1.VerdictStatus_MARGINAL || vs[0].Expected != m.Expected {
		t.Errorf("verdicts %+v", vs)
	}
	if got, _ := s.FleetSamples(ctx, FleetQuery{SKU: "hgx-h100", Check: "disk-read", Metric: "readMBps"}); len(got) != 0 {
		t.Errorf("a MARGINAL result is still a fleet sample: %+v", got)
	}
	js, at, err := s.RunFleetJudgement(ctx, "r1")
	if err != nil || string(js) != `{"judgements":[]}` || time.Since(at) > time.Minute {
		t.Errorf("judgement %q %v %v", js, at, err)
	}
	if err := s.PutFleetJudgement(ctx, "r1", nil, []byte(`{"judgements":[{}]}`)); err != nil {
		t.Fatal(err)
	}
	if js, _, _ := s.RunFleetJudgement(ctx, "r1"); string(js) != `{"judgements":[{}]}` {
		t.Errorf("replaced judgement %q", js)
	}
}

// TestPruneMeasurements: measurements go by their own retention; verdicts
// and judgements stay.
func TestPruneMeasurements(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	suiteRunOn(t, s, "r1", "n1", "qemu-fleet")
	verdictEvent(t, s, "r1", "n1", 1, readVerdict("PASS", 200))
	if n, err := s.PruneMeasurements(ctx, time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("pruned %d recent measurements (%v)", n, err)
	}
	s.prune(ctx, time.Now().Add(DefaultRetention.Fleet+time.Hour), Retention{Fleet: DefaultRetention.Fleet}, slog.New(slog.DiscardHandler))
	if ms, _ := s.RunMeasurements(ctx, "r1"); len(ms) != 0 {
		t.Errorf("%d measurements past the fleet retention", len(ms))
	}
	if vs, _ := s.Verdicts(ctx, "r1"); len(vs) != 1 {
		t.Errorf("verdicts pruned with the measurements: %+v", vs)
	}
}

// TestPostgresFleetMeasurements runs the fleet history tests on PostgreSQL.
func TestPostgresFleetMeasurements(t *testing.T) {
	pgtest.Shared(t)
	backend = "postgres"
	defer func() { backend = "sqlite" }()
	t.Run("StoredWithVerdict", TestMeasurementsStoredWithVerdict)
	t.Run("BoundedPerRun", TestMeasurementsBoundedPerRun)
	t.Run("FleetSamples", TestFleetSamples)
	t.Run("FleetSamplesAcceptanceLatestRun", TestFleetSamplesAcceptanceLatestRun)
	t.Run("PutFleetJudgement", TestPutFleetJudgement)
	t.Run("WriteFleetJudgementCAS", TestWriteFleetJudgementCAS)
	t.Run("Prune", TestPruneMeasurements)
}
