package pipeline_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/tools/buildinfo"
	"google.golang.org/protobuf/encoding/protojson"
)

const silentSuite = `apiVersion: cure.dev/v1
kind: ValidationSuite
metadata: {name: soak}
spec:
  grace: 1m
  stages:
    - name: before
      checks:
        - {name: smart-before, type: nvme-smart}
    - name: load
      duration: 10m
      checks:
        - {name: cpu-soak, type: cpu}
`

// TestSilentRunnerLostAndSuiteResumed: a validate runner whose stream
// stays up but whose heartbeats stop for the reconnect budget is lost (a
// hung node); the node is booted into CURE again and the suite resumed by
// its policy: the next runner is told the check that had ended, with its
// verdict, and the reset is in the timeline. The phase's deadline is the
// suite's planned 10m + grace 1m, not the fixture's 20s in-band bound.
func TestSilentRunnerLostAndSuiteResumed(t *testing.T) {
	f := newFixture(t, nil)
	if err := os.MkdirAll(filepath.Join(f.dir, "manifests", "suites"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, "manifests", "suites", "soak.yaml"), []byte(silentSuite), 0o644); err != nil {
		t.Fatal(err)
	}
	beat := func(emit func(*curev1.Event), done bool) {
		cpu := &curev1.CheckProgress{Check: "cpu-soak", Stage: "load", State: "running", PlannedMs: 600000}
		if done {
			cpu.State, cpu.Worst = "done", curev1.VerdictStatus_PASS
		}
		emit(&curev1.Event{Body: &curev1.Event_Progress{Progress: &curev1.Progress{Suite: "soak", Stage: "load", Checks: []*curev1.CheckProgress{
			{Check: "smart-before", Stage: "before", State: "done", Worst: curev1.VerdictStatus_PASS}, cpu}}}})
	}
	f.mu.Lock()
	f.during = func(phase modes.PhaseName, boot int, emit func(*curev1.Event)) bool {
		if phase != modes.Validate {
			return false
		}
		if boot == 1 {
			emit(&curev1.Event{Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{Component: "nvme/0", Check: "smart-before", Status: curev1.VerdictStatus_PASS}}})
			beat(emit, false)
			// Hung: the stream stays up, nothing more is sent, until the
			// coordinator resets the node.
			for len(f.m.Boots()) == boot {
				time.Sleep(20 * time.Millisecond)
			}
			return true
		}
		beat(emit, true)
		return false
	}
	f.mu.Unlock()
	runID, err := f.eng.Start(context.Background(), "node1", modes.Burnin, "soak", false)
	if err != nil {
		t.Fatal(err)
	}
	r := f.waitRun(runID)
	if r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("run ended %s: %s", r.Status, r.Message)
	}
	started := r.Pipeline.Phase(modes.Validate).StartedAt
	if d := r.Pipeline.Phase(modes.Validate).Deadline; d.Sub(started) < 11*time.Minute-time.Second || d.Sub(started) > 11*time.Minute+time.Second {
		t.Errorf("validate deadline %v for a start at %v: want planned 10m + grace 1m after it", d, started)
	}
	if r.Disconnects != 1 || len(f.m.Boots()) != 2 {
		t.Errorf("disconnects %d, boots %v: want the hung runner lost once and CURE booted again", r.Disconnects, f.m.Boots())
	}
	evs, err := f.st.Events(context.Background(), runID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	has := func(sub string) bool {
		for _, e := range evs {
			if e.Source == "coordinator" && strings.Contains(e.Message, sub) {
				return true
			}
		}
		return false
	}
	for _, want := range []string{"no heartbeat from the runner for", "the runner counts as lost",
		"node lost its suite mid validate (reset 1 of suite soak): resume policy continue; kept 1 ended check(s) (smart-before PASS); running again: cpu-soak (interrupted)"} {
		if !has(want) {
			t.Errorf("no coordinator event saying %q", want)
		}
	}
	for _, e := range evs {
		if e.Kind == "progress" {
			t.Errorf("a heartbeat stored as an event: %+v", e)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var validate []*curev1.Assignment
	for _, a := range f.assignments {
		if a.GetHeartbeatMs() != 1000 {
			t.Errorf("assignment asks for a heartbeat every %dms, want 1000 (a third of the 3s budget)", a.GetHeartbeatMs())
		}
		// What a runner that does not know a phase names beside its own.
		if a.GetCoordinatorVersion() == "" || a.GetCoordinatorVersion() != buildinfo.Version("") {
			t.Errorf("assignment carries coordinator version %q, want this build's %q", a.GetCoordinatorVersion(), buildinfo.Version(""))
		}
		if len(a.GetPhases()) > 0 && a.GetPhases()[len(a.GetPhases())-1] == string(modes.Validate) {
			validate = append(validate, a)
		}
	}
	if len(validate) != 2 || validate[0].GetSuiteResume() != nil {
		t.Fatalf("%d validate assignments, first resume %v: want a fresh one, then a resumed one", len(validate), validate[0].GetSuiteResume())
	}
	sr := validate[1].GetSuiteResume()
	if sr.GetResumed() != 1 || sr.GetPolicy() != "continue" || len(sr.GetDone()) != 1 || sr.GetDone()[0].GetCheck() != "smart-before" ||
		sr.GetDone()[0].GetWorst() != curev1.VerdictStatus_PASS {
		t.Errorf("resumed assignment: %v", sr)
	}
	rec, err := f.st.RunProgress(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	var last curev1.Progress
	if err := protojson.Unmarshal(rec.JSON, &last); err != nil || rec.Phase != modes.Validate || rec.BootID != "boot-2" || last.GetChecks()[1].GetState() != "done" {
		t.Errorf("latest heartbeat %+v (%v), %v", rec, &last, err)
	}
}
