package pipeline

import (
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
)

func parseSuite(t *testing.T, yaml string) *manifests.ValidationSuite {
	t.Helper()
	s, err := manifests.ParseSuite("s.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const soakSuite = `apiVersion: cure.dev/v1
kind: ValidationSuite
metadata: {name: soak}
spec:
  grace: 20m
  stages:
    - name: before
      checks:
        - {name: smart-before, type: nvme-smart}
    - name: load
      duration: 72h
      checks:
        - {name: cpu, type: cpu}
        - {name: mem, type: memory, duration: 24h, params: {fraction: 0.5}}
    - name: after
      checks:
        - {name: smart-after, type: nvme-smart}
`

// TestPhaseBudget: a validate phase may run its suite's planned length plus
// grace, however long (no fixed cap); the other in-band phases keep the
// configured bound, and so does a validate phase without a suite.
func TestPhaseBudget(t *testing.T) {
	s := parseSuite(t, soakSuite)
	if d, why := phaseBudget(modes.Validate, s, 30*time.Minute); d != 72*time.Hour+20*time.Minute || !strings.Contains(why, "planned 72h0m0s + grace 20m0s") {
		t.Errorf("validate of a 72h soak: %s (%s), want 72h20m", d, why)
	}
	noGrace := parseSuite(t, strings.Replace(soakSuite, "  grace: 20m\n", "  duration: 80h\n", 1))
	if d, _ := phaseBudget(modes.Validate, noGrace, 30*time.Minute); d != 80*time.Hour+time.Duration(manifests.DefaultGrace) {
		t.Errorf("validate with the suite's duration bound and no grace: %s, want 80h + the default grace", d)
	}
	if d, why := phaseBudget(modes.OSInstall, s, 30*time.Minute); d != 30*time.Minute || why != "" {
		t.Errorf("os_install: %s %q, want the fixed bound", d, why)
	}
	if d, _ := phaseBudget(modes.Validate, nil, 30*time.Minute); d != 30*time.Minute {
		t.Errorf("validate without a suite: %s", d)
	}
}

func TestHeartbeatEvery(t *testing.T) {
	for budget, want := range map[time.Duration]time.Duration{3 * time.Minute: time.Minute, 6 * time.Second: 2 * time.Second, time.Second: time.Second, time.Hour: time.Minute} {
		if got := heartbeatEvery(budget); got != want {
			t.Errorf("reconnect %s: heartbeat every %s, want %s", budget, got, want)
		}
	}
}

// TestPlanSuiteResume: continue keeps the checks that had ended and runs
// the interrupted one and the rest again; restart keeps nothing; a reset
// before any heartbeat keeps nothing either. Each counts the reset.
func TestPlanSuiteResume(t *testing.T) {
	last := &curev1.Progress{Suite: "soak", Stage: "load", Resumed: 1, Checks: []*curev1.CheckProgress{
		{Check: "smart-before", State: "done", Worst: curev1.VerdictStatus_PASS, ElapsedMs: 900},
		{Check: "cpu", Stage: "load", State: "running", ElapsedMs: 3600000},
		{Check: "mem", Stage: "load", State: "done", Worst: curev1.VerdictStatus_FAIL, ElapsedMs: 86400000},
		{Check: "smart-after", State: "pending"},
	}}
	s := parseSuite(t, soakSuite)
	sr, note := planSuiteResume(s, last)
	if sr.GetResumed() != 2 || sr.GetPolicy() != "continue" || len(sr.GetDone()) != 2 {
		t.Fatalf("continue: %v", sr)
	}
	if d := sr.GetDone()[1]; d.GetCheck() != "mem" || d.GetStage() != "load" || d.GetWorst() != curev1.VerdictStatus_FAIL || d.GetElapsedMs() != 86400000 {
		t.Errorf("kept mem as %v", d)
	}
	for _, want := range []string{"reset 2 of suite soak", "policy continue", "kept 2 ended check(s) (smart-before PASS, mem FAIL)", "running again: cpu (interrupted), smart-after"} {
		if !strings.Contains(note, want) {
			t.Errorf("note %q lacks %q", note, want)
		}
	}

	restart := parseSuite(t, strings.Replace(soakSuite, "  grace: 20m\n", "  resume: restart\n", 1))
	sr, note = planSuiteResume(restart, last)
	if sr.GetResumed() != 2 || sr.GetPolicy() != "restart" || len(sr.GetDone()) != 0 || !strings.Contains(note, "running again: smart-before, cpu (interrupted), mem, smart-after") {
		t.Errorf("restart: %v; %s", sr, note)
	}

	sr, note = planSuiteResume(s, nil)
	if sr.GetResumed() != 1 || len(sr.GetDone()) != 0 || !strings.Contains(note, "no heartbeat had arrived") {
		t.Errorf("reset before any heartbeat: %v; %s", sr, note)
	}
}
