package qemutest

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/render"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/qemu-test/harness"
	"github.com/cure-oss/cure/qemu-test/vbmc"
)

// bmcSuite loads the node's CPUs for 15 seconds: long enough for the test
// to act on the BMC mid-run. It sets no stage bmcInterval: the coordinator's
// --bmc-poll applies.
const bmcSuite = `apiVersion: cure.dev/v1
kind: ValidationSuite
metadata:
  name: qemu-bmc-evidence
  description: CPU load with the BMC's sensors sampled (TestFailedPSUBlocksAdmission)
spec:
  duration: 5m
  checks:
    - name: cpu-stress
      type: cpu
      appliesTo: "cpu/*"
      duration: 15s
      interval: 2s
      thresholds:
        computeErrors: {equals: 0}
`

// TestFailedPSUBlocksAdmission: a PSU that fails during a diagnostic run
// (injected by the test on the virtual BMC) fails the run under the
// default BMC bars, the report naming the PSU (a FAIL verdict bmc/psu/Bay2
// and the run's message), and the node is not admitted (its pool state is
// not in_service; with an admission policy, the decision is not admit).
// The event the virtual BMC logs is in the run's report with its time,
// severity and message; events outside the run window (one logged before
// the run, one backdated into the past) are not. The report also carries
// the PSUs and fans with their identity and health, and the BMC's sensors
// sampled during the validate phase.
func TestFailedPSUBlocksAdmission(t *testing.T) {
	t.Parallel() // its own environment: see startEnv
	env := startEnv(t, harness.Options{ExtraCoordinatorArgs: []string{"--bmc-poll", "2s"}})
	n := env.Nodes[0]
	if err := os.WriteFile(filepath.Join(env.Opts.Work, "manifests", "suites", "qemu-bmc-evidence.yaml"), []byte(bmcSuite), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := n.BMC.LogEvent(vbmc.Event{Severity: "Critical", Message: "logged before the run", SensorType: "Temperature"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the BMC writes whole seconds: the run starts in a later one

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	runID, err := env.Run(ctx, n.ID, modes.Diagnostic, "qemu-bmc-evidence", false)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var mu sync.Mutex
	var injected time.Time
	var timeline []*curev1.TimelineEntry
	rep, err := env.Follow(ctx, runID, func(e *curev1.TimelineEntry) {
		t.Logf("%6.1fs %-11s %-9s %-11s %-8s %s", time.Since(start).Seconds(), e.GetSource(), e.GetPhase(), e.GetKind(), e.GetStatus(), e.GetMessage())
		mu.Lock()
		defer mu.Unlock()
		timeline = append(timeline, e)
		if e.GetPhase() != string(modes.Validate) || runstate.EventKind(e.GetKind()) != runstate.EventPhaseStart || !injected.IsZero() {
			return
		}
		// Mid-run: a PSU fails, and an event backdated to before the run.
		injected = time.Now()
		if err := n.BMC.SetPartHealth(vbmc.PartPSU, "Bay2", "Critical", "Power supply 'PSU 2' has failed: AC input lost."); err != nil {
			t.Error(err)
		}
		if _, err := n.BMC.LogEvent(vbmc.Event{Created: start.Add(-time.Hour), Severity: "Warning", Message: "backdated before the run", SensorType: "Fan"}); err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if injected.IsZero() {
		t.Fatal("the validate phase never started: nothing was injected")
	}
	if rep.GetStatus() != "failed" || !strings.Contains(rep.GetMessage(), "BMC evidence fails the suite's bars") || !strings.Contains(rep.GetMessage(), "bmc/psu/Bay2 PSU") {
		t.Fatalf("diagnostic ended %s: %s (a failed PSU must fail it, naming the PSU)", rep.GetStatus(), rep.GetMessage())
	}
	var psuVerdict *curev1.Verdict
	for _, v := range rep.GetVerdicts() {
		if v.GetComponent() == "bmc/psu/Bay2" {
			psuVerdict = v
		}
	}
	if psuVerdict == nil || psuVerdict.GetStatus() != curev1.VerdictStatus_FAIL || !strings.Contains(psuVerdict.GetMessage(), "health Critical") {
		t.Errorf("the report's verdict on the failed PSU: %v", psuVerdict)
	}
	adm, err := env.Client.NodeAdmission(ctx, &curev1.NodeAdmissionRequest{NodeId: n.ID})
	if err != nil {
		t.Fatal(err)
	}
	if adm.GetPool().GetState() == curev1.PoolState_POOL_IN_SERVICE || (adm.GetPolicy() && adm.GetDecision() == "admit") {
		t.Errorf("a node whose PSU failed is admitted: pool %v, decision %s (policy %v)", adm.GetPool().GetState(), adm.GetDecision(), adm.GetPolicy())
	}

	// The event of the run window, with its time, severity and message.
	var psu *curev1.BmcLogEntry
	for _, l := range rep.GetBmcLog() {
		t.Logf("BMC log: %s %-8s %-26s %s (%s)", time.UnixMilli(l.GetCreatedUnixMs()).UTC().Format(time.RFC3339), l.GetSeverity(), l.GetSensorType(), l.GetMessage(), l.GetMessageId())
		switch {
		case strings.Contains(l.GetMessage(), "before the run"):
			t.Errorf("an event outside the run window is in the report: %v", l)
		case strings.Contains(l.GetMessage(), "PSU 2"):
			psu = l
		}
	}
	if psu == nil {
		t.Fatalf("the PSU failure logged mid-run is not in the report (%d entries)", len(rep.GetBmcLog()))
	}
	at := time.UnixMilli(psu.GetCreatedUnixMs())
	if psu.GetSeverity() != "Critical" || psu.GetMessage() != "Power supply 'PSU 2' has failed: AC input lost." ||
		psu.GetSensorType() != "Power Supply / Converter" || at.Before(injected.Truncate(time.Second)) || at.After(injected.Add(time.Minute)) {
		t.Errorf("PSU failure entry %v (injected at %s)", psu, injected.UTC().Format(time.RFC3339))
	}
	// The BMC's own record of powering the host on for the run.
	if !strings.Contains(bmcLogText(rep), vbmc.MsgHostPoweredOn) {
		t.Error("the BMC's power-on for the run is not in the report")
	}

	// PSUs and fans with identity and health.
	ps := rep.GetBmcPowerSupplies()
	if len(ps) != 2 || ps[1].GetHealth() != "Critical" || ps[1].GetSerialNumber() != n.Serial+"-PSU2" || ps[0].GetHealth() != "OK" || ps[0].GetPartNumber() == "" {
		t.Errorf("PSUs in the report: %v", ps)
	}
	if len(rep.GetBmcFans()) != 4 {
		t.Errorf("fans in the report: %v", rep.GetBmcFans())
	}

	// Sensors sampled during the validate phase.
	var cpu *curev1.Series
	for _, s := range rep.GetBmcSeries() {
		if s.GetComponent() == "bmc/Sensors/CPU1Temp" {
			cpu = s
		}
	}
	if cpu == nil || len(cpu.GetValues()) < 3 {
		t.Fatalf("CPU temperature series in the report: %v (all: %d series)", cpu, len(rep.GetBmcSeries()))
	}
	t.Logf("CPU1Temp over the validate phase: %v C", cpu.GetValues())

	// The HTML report shows the entry.
	var page bytes.Buffer
	if err := render.WriteHTML(&page, rep, timeline); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.String(), "Power supply &#39;PSU 2&#39; has failed: AC input lost.") || !strings.Contains(page.String(), "<svg") {
		t.Error("the HTML report lacks the PSU failure or the sensor plots")
	}
	if dir := os.Getenv("CURE_REPORT_DIR"); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, "bmc-evidence-report.html"), page.Bytes(), 0o644)
	}
}

func bmcLogText(rep *curev1.RunReport) string {
	var b strings.Builder
	for _, l := range rep.GetBmcLog() {
		b.WriteString(l.GetMessageId() + " " + l.GetMessage() + "\n")
	}
	return b.String()
}
