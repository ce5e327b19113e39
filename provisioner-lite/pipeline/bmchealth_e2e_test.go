package pipeline_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/qemu-test/vbmc"
	"google.golang.org/protobuf/encoding/protojson"
)

// sampledSuite is a diagnostic suite whose one stage has the BMC polled
// every 100 ms.
const sampledSuite = `apiVersion: cure.dev/v1
kind: ValidationSuite
metadata:
  name: bmc-sampled
spec:
  stages:
    - name: load
      duration: 2s
      telemetry:
        bmcInterval: 100ms
      checks:
        - name: cpu-stress
          type: cpu
          appliesTo: "cpu/*"
          thresholds:
            computeErrors: {equals: 0}
`

// During a diagnostic's validate phase the coordinator polls the BMC's
// sensors into the run's series (and only then); at its end it stores the
// BMC's log entries of the run window and its PSUs and fans, and the PSU
// that failed mid-run fails the run.
func TestValidatePollsBMCSensors(t *testing.T) {
	var dir string
	f := newFixtureBMC(t, func(_ *manifests.SKU, casDir string) { dir = filepath.Dir(filepath.Dir(casDir)) },
		func(c *vbmc.Config) { c.EventLog = vbmc.LogShape{ID: "Sel", PageSize: 5, NewestFirst: true} })
	if err := os.MkdirAll(filepath.Join(dir, "manifests", "suites"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifests", "suites", "bmc-sampled.yaml"), []byte(sampledSuite), 0o644); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.hold = map[modes.PhaseName]time.Duration{modes.Validate: 1500 * time.Millisecond}
	f.mu.Unlock()
	f.bmc.SetLoad(1)
	// Before the run: outside its window.
	if _, err := f.bmc.LogEvent(vbmc.Event{Created: time.Now().Add(-time.Hour), Severity: "Critical", Message: "before the run"}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	runID, err := f.eng.Start(ctx, "node1", modes.Diagnostic, "bmc-sampled", false)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for f.phases(runID)[modes.Validate].Status != curev1.PhaseStatus_PHASE_RUNNING {
		if time.Now().After(deadline) {
			t.Fatal("validate never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := f.bmc.SetPartHealth(vbmc.PartPSU, "Bay1", "Critical", "Power supply 'PSU 1' has failed: AC input lost."); err != nil {
		t.Fatal(err)
	}
	run := f.waitRun(runID)
	// The failed PSU fails the run under the default bars (PSUs OK, no
	// Critical entry in the window), naming the PSU and the log entry.
	if run.Status != curev1.RunStatus_RUN_FAILED || !strings.HasPrefix(run.Message, "BMC evidence fails the suite's bars") ||
		!strings.Contains(run.Message, "bmc/psu/Bay1 PSU Power Supply Bay 1 (PSU 1) health Critical") || !strings.Contains(run.Message, "has failed: AC input lost.") {
		t.Fatalf("run %s: %s (a failed PSU must fail the run)", run.Status, run.Message)
	}
	val := f.phases(runID)[modes.Validate]

	series, err := f.st.RunSeries(ctx, runID, "bmc")
	if err != nil {
		t.Fatal(err)
	}
	var cpu *store.Series
	for i := range series {
		if series[i].Component == "bmc/Sensors/CPU1Temp" {
			cpu = &series[i]
		}
	}
	if cpu == nil || cpu.Metric != "temp_c" || cpu.Unit != "C" {
		t.Fatalf("no CPU temperature series among %d: %+v", len(series), series)
	}
	if len(cpu.Times) < 4 {
		t.Errorf("%d CPU temperature points over a 1.5 s validate phase polled every 100 ms", len(cpu.Times))
	}
	for _, ms := range cpu.Times {
		if at := time.UnixMilli(ms); at.Before(val.StartedAt.Add(-time.Second)) || at.After(val.EndedAt.Add(time.Second)) {
			t.Errorf("point at %s outside the validate phase %s..%s", at, val.StartedAt, val.EndedAt)
		}
	}
	if !slices.IsSorted(cpu.Values) || cpu.Values[len(cpu.Values)-1] <= cpu.Values[0] {
		t.Errorf("a loaded host's CPU temperature did not rise: %v", cpu.Values)
	}

	_, doc, err := f.st.BMCEvidence(ctx, runID)
	if err != nil {
		t.Fatal(err)
	}
	var ev curev1.BmcEvidence
	if err := protojson.Unmarshal(doc, &ev); err != nil {
		t.Fatal(err)
	}
	var msgs []string
	for _, l := range ev.GetLog() {
		msgs = append(msgs, l.GetSeverity()+": "+l.GetMessage())
	}
	joined := strings.Join(msgs, "\n")
	if !strings.Contains(joined, "Critical: Power supply 'PSU 1' has failed: AC input lost.") || strings.Contains(joined, "before the run") ||
		!strings.Contains(joined, "The host powered on") {
		t.Errorf("log of the run window:\n%s\ncollection %v", joined, ev.GetCollection())
	}
	if ps := ev.GetPowerSupplies(); len(ps) != 2 || ps[0].GetHealth() != "Critical" || ps[0].GetSerialNumber() != "S1-PSU1" {
		t.Errorf("PSUs %v", ps)
	}
	if len(ev.GetFans()) != 4 || ev.GetCollection().GetLogServices()[0] != "Sel" {
		t.Errorf("fans %v, log services %v", ev.GetFans(), ev.GetCollection().GetLogServices())
	}

	// The report carries it all.
	rep, err := server.BuildReport(ctx, f.st, run)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, l := range rep.GetBmcLog() {
		if l.GetSeverity() == "Critical" && strings.Contains(l.GetMessage(), "PSU 1") && l.GetCreatedUnixMs() >= run.StartedAt.Truncate(time.Second).UnixMilli() {
			found = true
		}
	}
	if !found || len(rep.GetBmcPowerSupplies()) != 2 || len(rep.GetBmcFans()) != 4 || rep.GetBmcCollection().GetWindowStartUnixMs() != run.StartedAt.UnixMilli() {
		t.Errorf("report: log %v, PSUs %d, fans %d, collection %v", rep.GetBmcLog(), len(rep.GetBmcPowerSupplies()), len(rep.GetBmcFans()), rep.GetBmcCollection())
	}
	if len(rep.GetBmcSeries()) != len(series) || rep.GetBmcSeries()[0].GetSource() != "bmc" || len(rep.GetBmcSeries()[0].GetValues()) == 0 {
		t.Errorf("report series: %d of %d", len(rep.GetBmcSeries()), len(series))
	}
}
