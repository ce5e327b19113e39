package phases

import (
	"context"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/checks"
)

const stagedLinks = `apiVersion: cure.dev/v1
kind: ValidationSuite
metadata:
  name: staged-links
spec:
  grace: 1m
  stages:
    - name: before
      checks:
        - name: links-before
          type: ethernet
          appliesTo: "nic/*"
          thresholds:
            operstate: {equals: up}
    - name: soak
      duration: 300ms
      checks:
        - name: links-soak
          type: ethernet
          appliesTo: "nic/*"
          interval: 50ms
          thresholds:
            operstate: {equals: up}
        - name: hwmon-soak
          type: thermal
          interval: 50ms
          optional: {reason: "the test fixture has no hwmon sensor"}
`

// TestSuiteProgressRemaining: the estimate sums, per step, the longest
// time one of its checks still has to run, and a stage's checks count once.
func TestSuiteProgressRemaining(t *testing.T) {
	s, err := manifests.ParseSuite("s.yaml", []byte(`apiVersion: cure.dev/v1
kind: ValidationSuite
metadata: {name: s}
spec:
  stages:
    - name: before
      checks:
        - {name: smart, type: nvme-smart}
    - name: soak
      duration: 2h
      checks:
        - {name: cpu, type: cpu}
        - {name: disk, type: storage-throughput, duration: 1h}
    - name: cool
      duration: 10m
      checks:
        - {name: thermal, type: thermal}
`))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	p := newSuiteProgress(s, nil, 0, clock)
	left := func() time.Duration { return time.Duration(p.snapshot().GetRemainingMs()) * time.Millisecond }
	if got := left(); got != 2*time.Hour+10*time.Minute {
		t.Errorf("at start: %s left, want 2h10m", got)
	}
	if got := time.Duration(p.snapshot().GetPlannedMs()) * time.Millisecond; got != 2*time.Hour+10*time.Minute {
		t.Errorf("planned %s", got)
	}
	p.check("smart", checks.CheckRunning, "")
	p.check("smart", checks.CheckDone, checks.Pass)
	p.stageEvent(checks.StageEvent{Stage: "soak"})
	p.check("cpu", checks.CheckRunning, "")
	p.check("disk", checks.CheckRunning, "")
	now = now.Add(90 * time.Minute)
	if got := left(); got != 30*time.Minute+10*time.Minute {
		t.Errorf("90m into the soak: %s left, want 40m (the cpu's 30m, then the cool stage)", got)
	}
	p.check("disk", checks.CheckDone, checks.Pass)
	snap := p.snapshot()
	if snap.GetStage() != "soak" || snap.GetElapsedMs() != (90*time.Minute).Milliseconds() {
		t.Errorf("snapshot stage %q elapsed %d", snap.GetStage(), snap.GetElapsedMs())
	}
	states := map[string]*curev1.CheckProgress{}
	for _, c := range snap.GetChecks() {
		states[c.GetCheck()] = c
	}
	if c := states["disk"]; c.GetState() != "done" || c.GetWorst() != curev1.VerdictStatus_PASS || c.GetElapsedMs() != (90*time.Minute).Milliseconds() {
		t.Errorf("disk %v", c)
	}
	if c := states["cpu"]; c.GetState() != "running" || c.GetPlannedMs() != (2*time.Hour).Milliseconds() || c.GetStage() != "soak" {
		t.Errorf("cpu %v", c)
	}
	if c := states["thermal"]; c.GetState() != "pending" {
		t.Errorf("thermal %v", c)
	}
	now = now.Add(3 * time.Hour) // overdue: nothing negative
	if got := left(); got != 10*time.Minute {
		t.Errorf("overdue soak: %s left, want the cool stage's 10m", got)
	}
}

// TestValidateStagedHeartbeats runs a staged suite: a heartbeat on every
// check state change, the running stage named, and a last one with every
// check done and nothing left.
func TestValidateStagedHeartbeats(t *testing.T) {
	e := New(Config{Log: quiet(), Root: nicFixture(t, map[string]string{"eth0": "up"})})
	em := &recEmitter{}
	a := &curev1.Assignment{RunId: "r", Mode: curev1.Mode_MODE_BURNIN, ManifestYaml: []byte(stagedLinks), ManifestName: "staged-links.yaml", HeartbeatMs: 1000}
	out := e.Run(context.Background(), "validate", a, em)
	if out.Status != curev1.PhaseStatus_PHASE_OK {
		t.Fatalf("outcome %+v", out)
	}
	if len(em.progress) < 7 { // first, 3 starts, 3 ends, stage events, last
		t.Fatalf("%d heartbeats, want one per check state change at least", len(em.progress))
	}
	together := false
	for _, p := range em.progress {
		running := 0
		for _, c := range p.GetChecks() {
			if c.GetState() == "running" {
				running++
			}
		}
		together = together || (p.GetStage() == "soak" && running == 2)
	}
	if !together {
		t.Error("no heartbeat shows the soak stage with its two checks running")
	}
	last := em.progress[len(em.progress)-1]
	want := map[string]curev1.VerdictStatus{"links-before": curev1.VerdictStatus_PASS, "links-soak": curev1.VerdictStatus_PASS,
		"hwmon-soak": curev1.VerdictStatus_SKIP} // the fixture has no hwmon sensor: optional, so SKIP
	for _, c := range last.GetChecks() {
		if c.GetState() != "done" || c.GetWorst() != want[c.GetCheck()] {
			t.Errorf("last heartbeat: %s %s %s", c.GetCheck(), c.GetState(), c.GetWorst())
		}
	}
	if last.GetRemainingMs() != 0 || last.GetSuite() != "staged-links" || last.GetPlannedMs() != 300 {
		t.Errorf("last heartbeat remaining %d suite %q planned %d", last.GetRemainingMs(), last.GetSuite(), last.GetPlannedMs())
	}
}

// TestValidateResumeSkipsDone: a suite resumed after a node reset does not
// run the checks that had ended; it reports them done in its heartbeats,
// and one that had failed still fails the phase.
func TestValidateResumeSkipsDone(t *testing.T) {
	resumed := func(worst curev1.VerdictStatus) *curev1.Assignment {
		return &curev1.Assignment{RunId: "r", Mode: curev1.Mode_MODE_BURNIN, ManifestYaml: []byte(stagedLinks), ManifestName: "staged-links.yaml",
			SuiteResume: &curev1.SuiteResume{Resumed: 1, Policy: "continue", Done: []*curev1.CheckProgress{
				{Check: "links-before", Stage: "before", State: "done", Worst: worst, ElapsedMs: 40}}}}
	}
	e := New(Config{Log: quiet(), Root: nicFixture(t, map[string]string{"eth0": "up"})})
	em := &recEmitter{}
	out := e.Run(context.Background(), "validate", resumed(curev1.VerdictStatus_PASS), em)
	if out.Status != curev1.PhaseStatus_PHASE_OK || !strings.Contains(out.Message, "1 check(s) kept from before 1 node reset(s)") {
		t.Fatalf("outcome %+v", out)
	}
	for _, v := range em.verdicts {
		if v.GetCheck() == "links-before" {
			t.Errorf("links-before ran again: %v", v)
		}
	}
	first := em.progress[0]
	if first.GetResumed() != 1 || first.GetChecks()[0].GetState() != "done" || first.GetChecks()[0].GetElapsedMs() != 40 {
		t.Errorf("first heartbeat of the resumed suite: %v", first)
	}

	out = e.Run(context.Background(), "validate", resumed(curev1.VerdictStatus_FAIL), &recEmitter{})
	if out.Status != curev1.PhaseStatus_PHASE_FAILED || !strings.Contains(out.Message, "links-before (FAIL before the reset)") {
		t.Errorf("a check that failed before the reset: %+v", out)
	}
}
