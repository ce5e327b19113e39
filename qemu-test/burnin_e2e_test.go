package qemutest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/qemu-test/harness"
)

// The staged burn-in the TestBurnin* tests run (qemu-test/testdata/suites):
// a one-shot SMART stage, a soakLength stage loading CPU, memory and NVMe
// at once, a disk read-back.
const (
	burninSuite = "qemu-burnin-staged"
	soakLength  = 30 * time.Second
)

// Coordinator budgets far shorter than the soak: a runner silent this
// long is lost, an in-band phase other than validate fails this long
// without its end.
var shortBudgets = []string{"--reconnect", "8s", "--runner-phase-timeout", "10s"}

func burninEnv(t *testing.T, coordinatorArgs ...string) *harness.Env {
	t.Helper()
	return startEnv(t, harness.Options{ExtraSuites: []string{"testdata/suites/" + burninSuite + ".yaml"}, ExtraCoordinatorArgs: coordinatorArgs})
}

// followBurnin runs the staged burn-in on the node to its end; hook sees
// every timeline entry, live heartbeats included.
func followBurnin(t *testing.T, env *harness.Env, hook func(*curev1.TimelineEntry)) *curev1.RunReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	runID, err := env.Run(ctx, env.Nodes[0].ID, modes.Burnin, burninSuite, false)
	if err != nil {
		t.Fatalf("start burn-in: %v", err)
	}
	start := time.Now()
	rep, err := env.Follow(ctx, runID, func(e *curev1.TimelineEntry) {
		if e.GetKind() != "progress" {
			t.Logf("%6.1fs %-11s %-10s %-11s %-8s %s", time.Since(start).Seconds(), e.GetSource(), e.GetPhase(), e.GetKind(), e.GetStatus(), e.GetMessage())
		}
		if hook != nil {
			hook(e)
		}
	})
	if err != nil {
		t.Fatalf("follow run %s: %v", runID, err)
	}
	t.Logf("run %s: %s in %s, %d reboots", runID, rep.GetStatus(), time.Since(start).Round(time.Second), rep.GetReboots())
	return rep
}

// heartbeats records the live heartbeats a Watch streamed.
type heartbeats struct {
	mu   sync.Mutex
	seen []*curev1.TimelineEntry
}

func (h *heartbeats) hook(e *curev1.TimelineEntry) {
	if e.GetKind() == "progress" {
		h.mu.Lock()
		h.seen = append(h.seen, e)
		h.mu.Unlock()
	}
}

// inSoak says a heartbeat shows the soak stage with its checks running at
// once (and, when done is set, that check done before it).
func inSoak(e *curev1.TimelineEntry, running int) bool {
	p := e.GetProgress()
	if e.GetKind() != "progress" || p.GetStage() != "soak" {
		return false
	}
	n := 0
	for _, c := range p.GetChecks() {
		if c.GetState() == "running" && c.GetStage() == "soak" {
			n++
		}
	}
	return n >= running
}

// checkStarts counts the runner's "check NAME started" lines per check.
func checkStarts(evs []store.Event) map[string]int {
	n := map[string]int{}
	for _, e := range evs {
		if e.Source != "runner" || e.Kind != "log" {
			continue
		}
		// "check NAME started" and the log's attributes
		if f := strings.Fields(e.Message); len(f) >= 3 && f[0] == "check" && f[2] == "started" {
			n[f[1]]++
		}
	}
	return n
}

// checkBurninPassed: the run succeeded, every check of the suite has its
// verdicts and they pass, and the last heartbeat shows every check done.
func checkBurninPassed(t *testing.T, rep *curev1.RunReport) {
	t.Helper()
	if rep.GetStatus() != "succeeded" {
		t.Fatalf("burn-in ended %s: %s", rep.GetStatus(), rep.GetMessage())
	}
	checks := map[string]bool{}
	for _, v := range rep.GetVerdicts() {
		if v.GetCheck() == "hardware" {
			continue
		}
		checks[v.GetCheck()] = true
		if v.GetStatus() != curev1.VerdictStatus_PASS {
			t.Errorf("%s %s: %s %s (observed %s)", v.GetComponent(), v.GetCheck(), v.GetStatus(), v.GetMessage(), v.GetObserved())
		}
	}
	for _, c := range []string{"nvme-health-before", "cpu-soak", "memory-soak", "nvme-soak", "disk-read-after"} {
		if !checks[c] {
			t.Errorf("no verdict of check %s (have %v)", c, checks)
		}
	}
	p := rep.GetProgress()
	if p.GetSuite() != burninSuite || len(p.GetChecks()) != 5 {
		t.Fatalf("last heartbeat %v", p)
	}
	for _, c := range p.GetChecks() {
		if c.GetState() != "done" || c.GetWorst() != curev1.VerdictStatus_PASS {
			t.Errorf("last heartbeat: %s %s %s", c.GetCheck(), c.GetState(), c.GetWorst())
		}
	}
}

// TestBurninOutlastsPhaseTimeout runs a burn-in whose soak lasts several
// times the coordinator's liveness budget (--reconnect) and its in-band
// phase bound (--runner-phase-timeout): the validate phase's deadline is
// the suite's planned length plus grace, and its heartbeats keep the
// runner alive. The soak stage's checks run at once.
func TestBurninOutlastsPhaseTimeout(t *testing.T) {
	env := burninEnv(t, shortBudgets...)
	var hb heartbeats
	rep := followBurnin(t, env, hb.hook)
	checkBurninPassed(t, rep)
	st := openStore(t, env)
	run := storeRun(t, st, rep.GetRunId())
	if run.Disconnects != 0 || run.PhaseFailures != 0 {
		t.Errorf("disconnects %d, phase failures %d: want none", run.Disconnects, run.PhaseFailures)
	}
	v := storePhases(t, st, rep.GetRunId())[modes.Validate]
	took := v.EndedAt.Sub(v.StartedAt)
	if v.Status != curev1.PhaseStatus_PHASE_OK || v.Attempts != 1 || took < soakLength || took < 3*8*time.Second {
		t.Errorf("validate %s after %d attempt(s) in %s: want ok in one, longer than the soak and than 3 liveness budgets", v.Status, v.Attempts, took)
	}
	t.Logf("validate took %s against a liveness budget of 8s and an in-band phase bound of 10s", took.Round(time.Second))
	hb.mu.Lock()
	defer hb.mu.Unlock()
	together, deadline := false, int64(0)
	for _, e := range hb.seen {
		together = together || inSoak(e, 3)
		if e.GetPhase() == string(modes.Validate) && e.GetDeadlineUnixMs() > 0 {
			deadline = e.GetDeadlineUnixMs()
		}
	}
	if !together {
		t.Errorf("no heartbeat of %d showed the soak stage's 3 checks running at once", len(hb.seen))
	}
	// planned 30s + grace 3m from the validate phase's start (the
	// coordinator's clock, within the test's).
	if want := v.StartedAt.Add(soakLength + 3*time.Minute); deadline == 0 || time.UnixMilli(deadline).Sub(want).Abs() > 5*time.Second {
		t.Errorf("heartbeats carried deadline %v, want about %v (start + planned + grace)", time.UnixMilli(deadline), want)
	}
	if n := len(hb.seen); n < int(soakLength/(8*time.Second/3))/2 {
		t.Errorf("only %d heartbeats over a %s soak with a heartbeat asked every %s", n, soakLength, 8*time.Second/3)
	}
}

// TestBurninSurvivesCoordinatorRestart kills the coordinator mid soak and
// starts it again: the runner's soak goes on (no check starts twice, the
// validate phase has one attempt, the node is not rebooted), the restarted
// coordinator re-attaches, and the phase's deadline and latest heartbeat
// are what they were.
func TestBurninSurvivesCoordinatorRestart(t *testing.T) {
	env := burninEnv(t, "--reconnect", "20s", "--runner-phase-timeout", "10s")
	n := env.Nodes[0]
	var before, after *curev1.RunReport
	restarted := false
	rep := followBurnin(t, env, once(func(e *curev1.TimelineEntry) bool { return inSoak(e, 3) }, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var err error
		if before, err = env.Report(ctx, latestRunID(env)); err != nil {
			t.Errorf("report before the restart: %v", err)
			return
		}
		if err := env.StopCoordinator(true); err != nil {
			t.Errorf("kill coordinator: %v", err)
			return
		}
		if err := env.StartCoordinator(ctx); err != nil {
			t.Errorf("restart coordinator: %v", err)
			return
		}
		if after, err = env.Report(ctx, before.GetRunId()); err != nil {
			t.Errorf("report after the restart: %v", err)
			return
		}
		restarted = true
		t.Log("coordinator killed and restarted mid soak")
	}))
	if !restarted {
		t.Fatal("the coordinator was never restarted: no heartbeat of the soak stage seen")
	}
	checkBurninPassed(t, rep)
	if before.GetDeadlineUnixMs() == 0 || after.GetDeadlineUnixMs() != before.GetDeadlineUnixMs() {
		t.Errorf("validate deadline %d before the restart, %d after: want the same, set", before.GetDeadlineUnixMs(), after.GetDeadlineUnixMs())
	}
	if after.GetProgress().GetStage() != "soak" || after.GetProgressUnixMs() < before.GetProgressUnixMs() {
		t.Errorf("latest heartbeat after the restart: %v at %d (before: %d)", after.GetProgress(), after.GetProgressUnixMs(), before.GetProgressUnixMs())
	}
	st := openStore(t, env)
	evs := storeEvents(t, st, rep.GetRunId())
	for check, n := range checkStarts(evs) {
		if n != 1 {
			t.Errorf("check %s started %d times: the restart restarted the soak", check, n)
		}
	}
	if countEvents(evs, func(e store.Event) bool {
		return e.Source == "coordinator" && strings.Contains(e.Message, "re-attached mid-phase "+string(modes.Validate))
	}) == 0 {
		t.Error("no re-attached event for validate in the store")
	}
	if c := countEvents(evs, func(e store.Event) bool {
		return e.Source == "runner" && e.Phase == modes.Validate && e.Kind == "phase_start"
	}); c != 1 {
		t.Errorf("runner started validate %d times, want once", c)
	}
	run := storeRun(t, st, rep.GetRunId())
	if a := run.Pipeline.Attempts(modes.Validate); a != 1 || run.Disconnects != 0 {
		t.Errorf("validate attempts %d, disconnects %d: want 1 and 0", a, run.Disconnects)
	}
	if devs := bootDevices(n); !slices.Equal(devs, []string{"Pxe"}) {
		t.Errorf("boots = %v, want [Pxe]: the restart must not cost a reboot", devs)
	}
}

// TestBurninResumesAfterNodeReset resets the node through its BMC
// (ComputerSystem.Reset ForceRestart: QEMU restarts) mid soak. The runner
// goes silent; the coordinator calls it lost after its liveness budget,
// boots CURE again and resumes the suite by its policy (continue): the
// check that had ended is not run again, the interrupted soak checks run
// again, and the reset is in the timeline and the heartbeats.
func TestBurninResumesAfterNodeReset(t *testing.T) {
	env := burninEnv(t, shortBudgets...)
	n := env.Nodes[0]
	reset := false
	rep := followBurnin(t, env, once(func(e *curev1.TimelineEntry) bool { return inSoak(e, 3) }, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		bmc, err := redfish.Connect(ctx, redfish.Endpoint{URL: n.BMCURL, Username: "admin", Password: "password", Fingerprint: n.BMCFingerprint},
			redfish.Options{Timeout: 30 * time.Second})
		if err != nil {
			t.Errorf("connect to the node's BMC: %v", err)
			return
		}
		defer bmc.Close(context.Background())
		if err := bmc.Reset(ctx, "ForceRestart"); err != nil {
			t.Errorf("reset the node: %v", err)
			return
		}
		reset = true
		t.Log("node reset through its BMC mid soak")
	}))
	if !reset {
		t.Fatal("the node was never reset: no heartbeat of the soak stage seen")
	}
	checkBurninPassed(t, rep)
	if p := rep.GetProgress(); p.GetResumed() != 1 {
		t.Errorf("last heartbeat says resumed %d times, want 1", p.GetResumed())
	}
	st := openStore(t, env)
	evs := storeEvents(t, st, rep.GetRunId())
	starts := checkStarts(evs)
	want := map[string]int{"nvme-health-before": 1, "cpu-soak": 2, "memory-soak": 2, "nvme-soak": 2, "disk-read-after": 1}
	if fmt.Sprint(starts) != fmt.Sprint(want) {
		t.Errorf("check starts %v, want %v: the ended check once, the interrupted stage again", starts, want)
	}
	if countEvents(evs, func(e store.Event) bool {
		return e.Source == "coordinator" && e.Phase == modes.Validate && strings.Contains(e.Message, "node lost its suite mid validate") &&
			strings.Contains(e.Message, "kept 1 ended check(s) (nvme-health-before PASS)") && strings.Contains(e.Message, "cpu-soak (interrupted)")
	}) != 1 {
		t.Error("no timeline event recording the reset and what was resumed")
	}
	if countEvents(evs, func(e store.Event) bool {
		return e.Source == "coordinator" && strings.Contains(e.Message, "no heartbeat from the runner")
	}) == 0 {
		t.Log("the runner's stream closed before its heartbeats were missed (the reset was seen as a disconnect)")
	}
	run := storeRun(t, st, rep.GetRunId())
	if a := run.Pipeline.Attempts(modes.Validate); a != 2 || run.Disconnects != 1 {
		t.Errorf("validate attempts %d, disconnects %d: want 2 and 1", a, run.Disconnects)
	}
	if a := run.Pipeline.Attempts(modes.Hardware); a != 1 {
		t.Errorf("hardware ran %d times: the resume restarted earlier phases", a)
	}
}

// latestRunID is the node's latest run (one per test environment).
func latestRunID(env *harness.Env) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := env.Client.Report(ctx, &curev1.ReportRequest{NodeId: env.Nodes[0].ID})
	if err != nil {
		return ""
	}
	return rep.GetRunId()
}
