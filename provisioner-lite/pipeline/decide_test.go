package pipeline

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/bootgate"
	"github.com/cure-oss/cure/provisioner-lite/metrics"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/protobuf/encoding/protojson"
)

// The decisions are pure: these tables give each a run's stored status and
// what a look observed, and check the actions asked for and the status to
// be saved. The restart and reconnect rows are the cases the QEMU fault
// tests drive end to end (TestResumeAfterVMKilled, TestStreamCutReattaches,
// TestCoordinatorRestartMidRun, TestBurninSurvivesCoordinatorRestart,
// TestBurninResumesAfterNodeReset, TestBurninOutlastsPhaseTimeout).

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) time.Time { return now.Add(-d) }

var (
	refA = store.SessionRef{BootID: "boot-a", ConnectedNs: 1}
	refB = store.SessionRef{BootID: "boot-b", ConnectedNs: 2}
	refC = store.SessionRef{BootID: "boot-c", ConnectedNs: 3}
)

// runner is the node's current session: a runner of run r1 in kind.
func runner(ref store.SessionRef, kind curev1.RunnerState_Kind, phase modes.PhaseName, seq uint64) *sessionObs {
	return &sessionObs{ref: ref, runID: "r1", state: &curev1.RunnerState{Kind: kind, RunId: "r1", Phase: string(phase), LastEventSeq: seq}}
}

func runnerEvent(id int64, phase modes.PhaseName, kind runstate.EventKind, status curev1.PhaseStatus) store.Event {
	return store.Event{ID: id, RunID: "r1", Source: runstate.SourceRunner, Phase: phase, Kind: kind, Status: runstate.PhaseName(status)}
}

func rebootEnd(t *testing.T, id int64, phase modes.PhaseName) store.Event {
	ev := runnerEvent(id, phase, runstate.EventPhaseEnd, curev1.PhaseStatus_PHASE_OK)
	b, err := protojson.Marshal(&curev1.Event{Body: &curev1.Event_PhaseEnd{PhaseEnd: &curev1.PhaseEnd{Status: curev1.PhaseStatus_PHASE_OK, RebootRequired: true}}})
	if err != nil {
		t.Fatal(err)
	}
	ev.Payload = b
	return ev
}

// describe renders actions for comparison: kind, phase(s), message.
func describe(acts []action) []string {
	var out []string
	for _, a := range acts {
		s := a.kind.String()
		if a.phase != "" {
			s += " " + string(a.phase)
		}
		if a.phases != nil {
			s += " " + strings.Join(modes.PhaseStrings(a.phases), ",")
		}
		if a.cause != "" {
			s += " (" + a.cause + ")"
		}
		if a.msg != "" {
			s += ": " + a.msg
		}
		out = append(out, s)
	}
	return out
}

// matches says whether each got starts with its want.
func matches(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			return false
		}
	}
	return true
}

var hwValidate = []modes.PhaseName{modes.Hardware, modes.Validate}

func batchRun(b *store.RunnerBatch) store.Run {
	return store.Run{ID: "r1", NodeID: "n1", Mode: modes.Burnin, Status: curev1.RunStatus_RUN_RUNNING, Phase: modes.Hardware,
		CompletedPhases: []modes.PhaseName{modes.Preflight, modes.SetBootPXE, modes.PoweringOn, modes.WaitForCURE},
		Pipeline:        store.PipelineState{Batch: b, Phases: map[modes.PhaseName]store.PhaseState{modes.Hardware: {Attempts: 1, StartedAt: ago(time.Minute), Deadline: now.Add(29 * time.Minute)}}}}
}

func TestDecideTable(t *testing.T) {
	t.Run("runner batch", testDecideBatch)
	t.Run("wait_for_cure", testDecideWaitCURE)
	t.Run("wait_for_host_os", testDecideHostOS)
	t.Run("drive", testDecideDrive)
}

type batchCase struct {
	name  string
	run   store.Run
	obs   batchObs
	want  []string // each action, by describe, as a prefix
	check func(t *testing.T, r store.Run)
}

func testDecideBatch(t *testing.T) {
	pol := batchPolicy{phases: hwValidate, phaseBound: 30 * time.Minute, reconnect: 3 * time.Minute, waitForCURE: 10 * time.Minute, disconnects: 5}
	for _, c := range batchCases(t) {
		t.Run(c.name, func(t *testing.T) {
			before := statusJSON(t, c.run)
			if c.obs.now.IsZero() {
				c.obs.now = now
			}
			got, acts := decideBatch(c.run, pol, c.obs)
			if d := describe(acts); !matches(d, c.want) {
				t.Errorf("actions\n got %q\nwant %q", d, c.want)
			}
			if after := statusJSON(t, c.run); after != before {
				t.Errorf("the decision changed the stored status it was given:\n%s\n%s", before, after)
			}
			if c.check != nil {
				c.check(t, got)
			}
		})
	}
}

func statusJSON(t *testing.T, r store.Run) string {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func batchCases(t *testing.T) []batchCase {
	var cs []batchCase
	cs = append(cs, startCases()...)
	cs = append(cs, lostCases()...)
	cs = append(cs, sessionCases()...)
	cs = append(cs, eventCases(t)...)
	cs = append(cs, restartCases()...)
	return cs
}

func startCases() []batchCase {
	fresh := batchRun(nil)
	resumed := batchRun(nil)
	resumed.Pipeline.FreshCURE = "resumed"
	done := batchRun(&store.RunnerBatch{Phases: hwValidate, Cursor: 9})
	done.CompletedPhases = append(done.CompletedPhases, hwValidate...)
	return []batchCase{
		{name: "a new batch reads from the run's last event", run: fresh, obs: batchObs{fresh: true, tail: 40, readTo: 40},
			check: func(t *testing.T, r store.Run) {
				b := r.Pipeline.Batch
				if b == nil || b.Cursor != 40 || !slices.Equal(b.Phases, hwValidate) || !b.LostSince.Equal(now) || b.HadRunner {
					t.Errorf("batch %+v", b)
				}
			}},
		{name: "operator resume boots a fresh CURE first", run: resumed, obs: batchObs{fresh: true, tail: 40},
			want: []string{"reboot_into_cure: run resumed: its earlier CURE session ended with the run"},
			check: func(t *testing.T, r store.Run) {
				if r.Pipeline.FreshCURE != "" || r.Pipeline.Batch.HadRunner {
					t.Errorf("status %+v", r.Pipeline)
				}
			}},
		{name: "operator resume adopts the runner registered for the run since", run: resumed,
			obs:  batchObs{fresh: true, tail: 40, session: runner(refA, curev1.RunnerState_IDLE, "", 0)},
			want: []string{"note hardware: run resumed: CURE boot boot-a registered for it since: adopted", "requeue"},
			check: func(t *testing.T, r store.Run) {
				if r.Pipeline.FreshCURE != "" || r.Pipeline.Batch.Seen != refA {
					t.Errorf("status %+v, batch %+v", r.Pipeline, r.Pipeline.Batch)
				}
			}},
		{name: "operator resume: a runner of another run is no reason not to boot", run: resumed,
			obs:  batchObs{fresh: true, tail: 40, session: &sessionObs{ref: refB, runID: "r0", state: &curev1.RunnerState{Kind: curev1.RunnerState_IDLE}}},
			want: []string{"reboot_into_cure: run resumed: its earlier CURE session ended with the run"}},
		{name: "every phase done", run: done, want: []string{"done"}},
	}
}

func lostCases() []batchCase {
	never := batchRun(&store.RunnerBatch{Phases: hwValidate, LostSince: ago(11 * time.Minute)})
	gone := batchRun(&store.RunnerBatch{Phases: hwValidate, Bound: refA, HadRunner: true, Current: modes.Hardware})
	within := batchRun(&store.RunnerBatch{Phases: hwValidate, Bound: refA, HadRunner: true, Current: modes.Hardware, LostSince: ago(2 * time.Minute)})
	past := batchRun(&store.RunnerBatch{Phases: hwValidate, Bound: refA, HadRunner: true, Current: modes.Hardware, LostSince: ago(4 * time.Minute)})
	spent := past
	spent.Disconnects = 5
	silent := batchRun(&store.RunnerBatch{Phases: hwValidate, Bound: refA, HadRunner: true, Current: modes.Validate, LastAlive: ago(10 * time.Minute)})
	silent.Phase = modes.Validate
	silentObs := runner(refA, curev1.RunnerState_IN_PHASE, modes.Validate, 9)
	silentObs.heartbeat = ago(4 * time.Minute)
	alive := *silentObs
	alive.heartbeat = ago(time.Minute)
	stillSilent := batchRun(&store.RunnerBatch{Phases: hwValidate, Silent: refA, LostSince: ago(time.Minute)})
	return []batchCase{
		{name: "no runner yet within the PXE budget waits", run: batchRun(&store.RunnerBatch{Phases: hwValidate, LostSince: ago(9 * time.Minute)})},
		{name: "no runner past the PXE budget reboots into CURE", run: never,
			want: []string{"retry hardware (" + metrics.CauseRunnerLost + ")", "reboot_into_cure: runner gone for 10m0s during hardware"},
			check: func(t *testing.T, r store.Run) {
				if r.Disconnects != 1 || !r.Pipeline.Batch.LostSince.Equal(now) {
					t.Errorf("disconnects %d, lost since %v", r.Disconnects, r.Pipeline.Batch.LostSince)
				}
			}},
		{name: "runner disconnects", run: gone, want: []string{"note hardware: runner disconnected"},
			check: func(t *testing.T, r store.Run) {
				if !r.Pipeline.Batch.LostSince.Equal(now) || r.Disconnects != 0 {
					t.Errorf("lost since %v, disconnects %d", r.Pipeline.Batch.LostSince, r.Disconnects)
				}
			}},
		{name: "reconnect within budget waits", run: within},
		{name: "runner lost past the reconnect budget", run: past,
			want: []string{"retry hardware (" + metrics.CauseRunnerLost + ")", "reboot_into_cure: runner gone for 3m0s during hardware"},
			check: func(t *testing.T, r store.Run) {
				b := r.Pipeline.Batch
				if r.Disconnects != 1 || !b.Bound.IsZero() || !b.HadRunner || !b.LostSince.Equal(now) {
					t.Errorf("disconnects %d, batch %+v: want no runner followed, the reconnect budget until the reset is done", r.Disconnects, b)
				}
				rebootedIntoCURE(b, now)
				if b.HadRunner {
					t.Error("after the reset the fresh boot does not get the PXE budget")
				}
			}},
		{name: "disconnect budget spent", run: spent, want: []string{"lost: runner lost 6 times (budget 5) during hardware,validate"}},
		{name: "heartbeat silence in validate loses the runner", run: silent, obs: batchObs{session: silentObs},
			want: []string{"event validate: no heartbeat from the runner for 4m0s (budget 3m0s)", "retry validate", "reboot_into_cure: runner gone for 3m0s during validate"},
			check: func(t *testing.T, r store.Run) {
				if r.Pipeline.Batch.Silent != refA || r.Disconnects != 1 {
					t.Errorf("silent %v, disconnects %d", r.Pipeline.Batch.Silent, r.Disconnects)
				}
			}},
		{name: "heartbeats keep a long validate alive", run: silent, obs: batchObs{session: &alive}},
		{name: "a silent session stays gone while its stream lingers", run: stillSilent, obs: batchObs{session: runner(refA, curev1.RunnerState_IN_PHASE, modes.Validate, 9)}},
	}
}

func sessionCases() []batchCase {
	cut := batchRun(&store.RunnerBatch{Phases: hwValidate, Bound: refA, HadRunner: true, Current: modes.Hardware, Seen: refB, SeenStored: 3, LostSince: ago(time.Second)})
	fresh := batchRun(&store.RunnerBatch{Phases: hwValidate, Cursor: 10, Seen: refB})
	fresh.CompletedPhases = append(fresh.CompletedPhases, modes.Hardware)
	fresh.Pipeline.Phases = nil
	handled := cut
	handled.Pipeline.Handled = refB
	other := runner(refB, curev1.RunnerState_IN_PHASE, modes.Hardware, 7)
	other.runID = "r0"
	ended := runner(refB, curev1.RunnerState_IN_PHASE, modes.Hardware, 7)
	ended.since = runstate.EventPhaseEnd
	started := runner(refB, curev1.RunnerState_IDLE, "", 7)
	started.since = runstate.EventPhaseStart
	newSession := runner(refB, curev1.RunnerState_IN_PHASE, modes.Hardware, 7)
	newSession.stored = 5
	held := runner(refB, curev1.RunnerState_IDLE, "", 0)
	held.held = &bootgate.Claim{At: now.Add(time.Minute), Why: "the boot is not attested: its boot window's claim settles at 12:01"}
	forged := runnerEvent(10, modes.Hardware, runstate.EventPhaseEnd, curev1.PhaseStatus_PHASE_OK)
	forged.BootID = refB.BootID
	return []batchCase{
		{name: "a session whose boot window's claim has not settled is noted once", run: batchRun(&store.RunnerBatch{Phases: hwValidate}), obs: batchObs{session: held},
			want: []string{"note hardware: runner boot boot-b holds no assignment yet: the boot is not attested", "requeue"}},
		{name: "a held session is given nothing and what its boot sends is not acted on", run: batchRun(&store.RunnerBatch{Phases: hwValidate, Seen: refB}),
			obs:  batchObs{session: held, events: []store.Event{forged}, readTo: 10},
			want: []string{},
			check: func(t *testing.T, r store.Run) {
				if b := r.Pipeline.Batch; !b.Bound.IsZero() || r.Pipeline.Handled == refB || slices.Contains(r.CompletedPhases, modes.Hardware) || b.Cursor != 0 {
					t.Errorf("batch %+v, handled %v, completed %v: want nothing given, the forged end not acted on", b, r.Pipeline.Handled, r.CompletedPhases)
				}
			}},
		{name: "a new session is judged after the events it had stored", run: batchRun(&store.RunnerBatch{Phases: hwValidate, Bound: refA}), obs: batchObs{session: newSession},
			want: []string{"requeue"},
			check: func(t *testing.T, r store.Run) {
				if b := r.Pipeline.Batch; b.Seen != refB || b.SeenStored != 5 || b.Bound != refA {
					t.Errorf("batch %+v", b)
				}
			}},
		{name: "re-attach mid-phase after a stream cut", run: cut, obs: batchObs{session: runner(refB, curev1.RunnerState_IN_PHASE, modes.Hardware, 7)},
			want: []string{"reattach hardware: runner re-attached mid-phase hardware (last seq 7)"},
			check: func(t *testing.T, r store.Run) {
				b := r.Pipeline.Batch
				if b.Bound != refB || r.Pipeline.Handled != refB || !b.LostSince.IsZero() || r.ResumeCount != 0 || r.Disconnects != 0 {
					t.Errorf("batch %+v, handled %v: want B followed, no retry spent", b, r.Pipeline.Handled)
				}
			}},
		{name: "a phase start since its Hello re-attaches", run: cut, obs: batchObs{session: started}, want: []string{"reattach"}},
		{name: "a runner that ended its phase since its Hello gets the phases", run: cut, obs: batchObs{session: ended, readTo: 30},
			want: []string{"assign hardware,validate"},
			check: func(t *testing.T, r store.Run) {
				if r.ResumeCount != 1 || r.Pipeline.Batch.Cursor != 30 {
					t.Errorf("resume count %d, cursor %d", r.ResumeCount, r.Pipeline.Batch.Cursor)
				}
			}},
		{name: "a done runner with events to replay is followed", run: cut, obs: batchObs{session: runner(refB, curev1.RunnerState_DONE, "", 4)}, want: []string{"reattach"}},
		{name: "a done runner with nothing to replay gets the phases", run: cut, obs: batchObs{session: runner(refB, curev1.RunnerState_DONE, "", 3)}, want: []string{"assign hardware,validate"}},
		{name: "a session given work is never re-attached", run: handled, obs: batchObs{session: runner(refB, curev1.RunnerState_IN_PHASE, modes.Hardware, 7)}, want: []string{"assign"}},
		{name: "first runner of the batch gets the remaining phases", run: fresh, obs: batchObs{readTo: 20, session: runner(refB, curev1.RunnerState_IDLE, "", 0)},
			want: []string{"assign validate"},
			check: func(t *testing.T, r store.Run) {
				if r.ResumeCount != 0 || r.Pipeline.Batch.Cursor != 20 {
					t.Errorf("resume count %d, cursor %d: a first assignment is no resume", r.ResumeCount, r.Pipeline.Batch.Cursor)
				}
			}},
		{name: "contested session: a runner of another run is not ours", run: batchRun(&store.RunnerBatch{Phases: hwValidate, Bound: refA, HadRunner: true}), obs: batchObs{session: other},
			want: []string{"note: runner disconnected"}},
	}
}

func eventCases(t *testing.T) []batchCase {
	b := func() store.Run {
		return batchRun(&store.RunnerBatch{Phases: hwValidate, Bound: refA, HadRunner: true, Current: modes.Hardware, Cursor: 10})
	}
	cur := runner(refA, curev1.RunnerState_IN_PHASE, modes.Hardware, 7)
	late := b()
	late.Pipeline.SetDeadline(modes.Hardware, ago(time.Second))
	return []batchCase{
		{name: "phase start and end are recorded", run: b(), obs: batchObs{session: cur, events: []store.Event{
			runnerEvent(11, modes.Hardware, runstate.EventPhaseEnd, curev1.PhaseStatus_PHASE_OK), runnerEvent(12, modes.Validate, runstate.EventPhaseStart, 0),
			{ID: 13, Source: runstate.SourceRunner, Phase: modes.Validate, Kind: runstate.EventLog}}},
			want: []string{"record_end hardware", "record_start validate"},
			check: func(t *testing.T, r store.Run) {
				ps := r.Pipeline.Phase(modes.Validate)
				if bt := r.Pipeline.Batch; bt.Cursor != 12 || bt.Current != modes.Validate || !bt.LastAlive.Equal(now) || r.Phase != modes.Validate {
					t.Errorf("batch %+v, phase %s: want the cursor at the last event acted on", bt, r.Phase)
				}
				if ps.Attempts != 1 || !ps.StartedAt.Equal(now) || !ps.Deadline.Equal(now.Add(30*time.Minute)) || !slices.Contains(r.CompletedPhases, modes.Hardware) {
					t.Errorf("validate %+v, completed %v", ps, r.CompletedPhases)
				}
			}},
		{name: "events of phases outside the batch's remaining are ignored", run: b(), obs: batchObs{session: cur, events: []store.Event{
			runnerEvent(11, modes.WaitForCURE, runstate.EventPhaseEnd, curev1.PhaseStatus_PHASE_OK), {ID: 12, Source: runstate.SourceCoordinator, Phase: modes.Hardware, Kind: runstate.EventPhaseEnd}}}},
		{name: "reboot required after a phase", run: b(), obs: batchObs{session: cur, events: []store.Event{rebootEnd(t, 11, modes.Hardware)}},
			// The session still up is the runner being reset: judged anew.
			want: []string{"record_end hardware", "reboot_into_cure: hardware needs a reboot to activate", "requeue"},
			check: func(t *testing.T, r store.Run) {
				if bt := r.Pipeline.Batch; !bt.Bound.IsZero() || bt.Current != "" {
					t.Errorf("batch %+v: want no runner followed, no phase running", bt)
				}
			}},
		{name: "a failed phase fails the batch", run: b(), obs: batchObs{session: cur, events: []store.Event{
			{ID: 11, Source: runstate.SourceRunner, Phase: modes.Hardware, Kind: runstate.EventPhaseEnd, Status: runstate.PhaseName(curev1.PhaseStatus_PHASE_FAILED), Message: "2 GPUs missing"},
			runnerEvent(12, modes.Validate, runstate.EventPhaseStart, 0)}},
			want: []string{"record_end hardware", "fail hardware: 2 GPUs missing"},
			check: func(t *testing.T, r store.Run) {
				if slices.Contains(r.CompletedPhases, modes.Hardware) || r.Pipeline.Batch.Cursor != 11 {
					t.Errorf("completed %v, cursor %d", r.CompletedPhases, r.Pipeline.Batch.Cursor)
				}
			}},
		{name: "a phase end the coordinator cannot read fails the phase, saying so", run: b(), obs: batchObs{session: cur, events: []store.Event{
			{ID: 11, Source: runstate.SourceRunner, Phase: modes.Hardware, Kind: runstate.EventPhaseEnd, Status: "weird", Message: "x"}}},
			want: []string{"record_end hardware", `fail hardware: phase_end event 11: phase status "weird" is not one of`}},
		{name: "deadline passed without a phase end", run: late, obs: batchObs{session: cur}, want: []string{"fail hardware: no phase_end within 30m0s"}},
	}
}

func restartCases() []batchCase {
	stored := batchRun(&store.RunnerBatch{Phases: hwValidate, Cursor: 10, Bound: refA, Current: modes.Hardware, LostSince: ago(time.Hour), Seen: refA, SeenStored: 4})
	legacy := batchRun(&store.RunnerBatch{Cursor: 10, HadRunner: true})
	reset := batchRun(&store.RunnerBatch{Phases: hwValidate, Seen: refC})
	reset.CompletedPhases = append(reset.CompletedPhases, modes.Hardware)
	reset.Phase = modes.Validate
	reset.Pipeline.SetPhase(modes.Validate, store.PhaseState{Attempts: 1, StartedAt: ago(time.Hour)})
	reset.Disconnects = 1
	return []batchCase{
		{name: "coordinator restart acts on events stored while it was away", run: stored, obs: batchObs{fresh: true, session: runner(refB, curev1.RunnerState_DONE, "", 9), events: []store.Event{
			runnerEvent(11, modes.Hardware, runstate.EventPhaseEnd, curev1.PhaseStatus_PHASE_OK), runnerEvent(12, modes.Validate, runstate.EventPhaseStart, 0),
			runnerEvent(13, modes.Validate, runstate.EventPhaseEnd, curev1.PhaseStatus_PHASE_OK)}},
			want: []string{"record_end hardware", "record_start validate", "record_end validate", "done"},
			check: func(t *testing.T, r store.Run) {
				if r.Pipeline.Batch.Cursor != 13 || r.Pipeline.Attempts(modes.Validate) != 1 || r.ResumeCount != 0 {
					t.Errorf("batch %+v, validate attempts %d: the runner's work is not redone", r.Pipeline.Batch, r.Pipeline.Attempts(modes.Validate))
				}
			}},
		{name: "coordinator restart mid-phase keeps the phase and the reconnect budget", run: stored, obs: batchObs{fresh: true},
			check: func(t *testing.T, r store.Run) {
				b := r.Pipeline.Batch
				if !b.HadRunner || b.Current != modes.Hardware || !b.Bound.IsZero() || !b.Seen.IsZero() || !b.LostSince.Equal(now) {
					t.Errorf("batch %+v: want the predecessor's session dropped, its phase and budget kept", b)
				}
				if !r.Pipeline.Phase(modes.Hardware).Deadline.Equal(now.Add(29 * time.Minute)) {
					t.Errorf("deadline %v: want the one stored", r.Pipeline.Phase(modes.Hardware).Deadline)
				}
			}},
		{name: "coordinator restart: the runner still in its phase is seen, then re-attached", run: stored,
			obs:  batchObs{fresh: true, session: &sessionObs{ref: refB, runID: "r1", stored: 9, state: &curev1.RunnerState{Kind: curev1.RunnerState_IN_PHASE, RunId: "r1", Phase: string(modes.Hardware), LastEventSeq: 9}}},
			want: []string{"requeue"}},
		{name: "coordinator restart after a reboot it decided but never saw done: the reconnect budget", obs: batchObs{fresh: true},
			run: batchRun(&store.RunnerBatch{Phases: hwValidate, Cursor: 10, HadRunner: true, Current: modes.Hardware, LostSince: ago(10 * time.Minute)}),
			check: func(t *testing.T, r store.Run) {
				if b := r.Pipeline.Batch; !b.HadRunner || !b.LostSince.Equal(now) || r.Disconnects != 0 {
					t.Errorf("batch %+v, disconnects %d: want the runner that may still be there looked for with the reconnect budget", b, r.Disconnects)
				}
			}},
		{name: "a batch from before the status was typed resumes at the run's phase", run: legacy, obs: batchObs{fresh: true},
			check: func(t *testing.T, r store.Run) {
				if b := r.Pipeline.Batch; !slices.Equal(b.Phases, hwValidate) || b.Current != modes.Hardware || b.Cursor != 10 {
					t.Errorf("batch %+v", b)
				}
			}},
		{name: "suite resume after a node reset: validate again, as a resume", run: reset, obs: batchObs{readTo: 50, session: runner(refC, curev1.RunnerState_IDLE, "", 0)},
			want: []string{"assign validate"},
			check: func(t *testing.T, r store.Run) {
				if r.ResumeCount != 1 || r.Pipeline.Attempts(modes.Validate) != 1 || slices.Contains(r.CompletedPhases, modes.Validate) {
					t.Errorf("resume count %d, validate %+v: want the interrupted attempt given again (assignment's suite resume)", r.ResumeCount, r.Pipeline.Phase(modes.Validate))
				}
			}},
	}
}

func testDecideWaitCURE(t *testing.T) {
	r := store.Run{ID: "r1", NodeID: "n1", Pipeline: store.PipelineState{BootRequestedAt: ago(90 * time.Second)}}
	r.Pipeline.SetPhase(modes.WaitForCURE, store.PhaseState{Attempts: 1, StartedAt: ago(2 * time.Minute), Deadline: now.Add(8 * time.Minute)})
	late := cloneRun(r)
	late.Pipeline.SetDeadline(modes.WaitForCURE, ago(time.Second))
	mine := sessions.NewSession("n1", "r1", &curev1.Hello{BootId: "b1", UptimeMs: 4000})
	mine.ConnectedAt = ago(30 * time.Second)
	theirs := sessions.NewSession("n1", "r0", &curev1.Hello{BootId: "b0"})
	expecting := cloneRun(r)
	expecting.Pipeline.CUREMACs = []string{"52:54:00:00:00:99"}
	fixed := []string{"52:54:00:00:00:01"}
	for _, c := range []struct {
		name  string
		run   store.Run
		s     *sessions.Session
		macs  []string
		want  []string
		check func(t *testing.T, r store.Run)
	}{
		{name: "waiting", run: r},
		{name: "runner registered", run: r, s: mine, want: []string{"done: runner registered: boot_id=b1 guest_uptime=4000ms power_on_to_registered=1m0s"}},
		{name: "a runner of another run does not count", run: r, s: theirs},
		{name: "deadline passed", run: late, want: []string{"end_boot_window", "fail wait_for_cure: runner did not register within 10m0s"}},
		{name: "the MACs it waits with are recorded", run: r, macs: fixed, check: func(t *testing.T, got store.Run) {
			if !slices.Equal(got.Pipeline.CUREMACs, fixed) || !got.Pipeline.Phase(modes.WaitForCURE).Deadline.Equal(now.Add(8*time.Minute)) {
				t.Errorf("status %+v", got.Pipeline)
			}
		}},
		{name: "the same MACs change nothing", run: expecting, macs: expecting.Pipeline.CUREMACs},
		{name: "MACs fixed in the inventory re-arm the boot at once", run: expecting, macs: fixed,
			want: []string{"reboot_into_cure wait_for_cure: the node's MACs changed in the inventory while it waited for CURE (now 52:54:00:00:00:01, were 52:54:00:00:00:99)"},
			check: func(t *testing.T, got store.Run) {
				if !slices.Equal(got.Pipeline.CUREMACs, fixed) || !got.Pipeline.Phase(modes.WaitForCURE).Deadline.Equal(now.Add(10*time.Minute)) {
					t.Errorf("status %+v: want the new MACs and a fresh deadline", got.Pipeline)
				}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, acts := decideWaitCURE(c.run, 10*time.Minute, cureObs{now: now, session: c.s, macs: c.macs})
			if d := describe(acts); !matches(d, c.want) {
				t.Errorf("actions\n got %q\nwant %q", d, c.want)
			}
			if c.check != nil {
				c.check(t, got)
			}
		})
	}
}

func testDecideHostOS(t *testing.T) {
	base := store.Run{ID: "r1", NodeID: "n1"}
	base.Pipeline.SetPhase(modes.WaitForHostOS, store.PhaseState{Attempts: 2, StartedAt: ago(time.Minute)})
	waiting := cloneRun(base)
	waiting.Pipeline.Host = store.HostWait{RebootAttempt: 2, RebootedAt: ago(time.Minute), WaitFrom: 70}
	waiting.Pipeline.SetDeadline(modes.WaitForHostOS, now.Add(14*time.Minute))
	late := cloneRun(waiting)
	late.Pipeline.SetDeadline(modes.WaitForHostOS, ago(time.Second))
	earlier := cloneRun(waiting)
	earlier.Pipeline.Host.RebootAttempt = 1 // a coordinator restart began attempt 2
	cure := sessions.NewSession("n1", "r1", &curev1.Hello{BootId: "b2"})
	ready := store.Event{ID: 80, Source: runstate.SourceHostOS, Kind: runstate.EventHostReady, Message: "host OS called back ready"}
	for _, c := range []struct {
		name  string
		run   store.Run
		obs   hostObs
		want  []string
		check func(t *testing.T, r store.Run)
	}{
		{"each attempt reboots out of CURE once", base, hostObs{tail: 77}, []string{"reboot_out_of_cure", "requeue"}, func(t *testing.T, r store.Run) {
			if h := r.Pipeline.Host; h.WaitFrom != 77 || !h.RebootedAt.IsZero() {
				t.Errorf("host wait %+v: want it anchored at the last event, no callback before the reboot", h)
			}
		}},
		{"a new attempt reboots again", earlier, hostObs{tail: 90}, []string{"reboot_out_of_cure", "requeue"}, nil},
		{"waiting for the callback", waiting, hostObs{events: []store.Event{{ID: 75, Kind: runstate.EventInfo}}}, nil, func(t *testing.T, r store.Run) {
			if r.Pipeline.Host.WaitFrom != 70 {
				t.Errorf("wait cursor %d: it names the wait's callback and stays", r.Pipeline.Host.WaitFrom)
			}
		}},
		{"a CURE session back after the reboot order is told again", waiting, hostObs{cure: cure},
			[]string{"note wait_for_host_os: CURE session of boot b2 connected after the reboot order", "order_reboot", "requeue"}, nil},
		{"the installed OS called back", waiting, hostObs{events: []store.Event{{ID: 75, Kind: runstate.EventInfo}, ready}}, []string{"done: host OS called back ready"}, nil},
		{"deadline passed", late, hostObs{}, []string{"fail wait_for_host_os: installed OS did not call back within 15m0s"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.obs.now = now
			got, acts := decideHostOS(c.run, 15*time.Minute, c.obs)
			if d := describe(acts); !matches(d, c.want) {
				t.Errorf("actions\n got %q\nwant %q", d, c.want)
			}
			if c.check != nil {
				c.check(t, got)
			}
		})
	}
}

func testDecideDrive(t *testing.T) {
	plan, err := modes.For(modes.Provision)
	if err != nil {
		t.Fatal(err)
	}
	// The plan's longest run of runner-owned phases, from index idx.
	idx, runnerPhases := 0, []modes.PhaseName(nil)
	for i := range plan.Phases {
		var run []modes.PhaseName
		for _, p := range plan.Phases[i:] {
			if p.Owner != modes.Runner {
				break
			}
			run = append(run, p.Name)
		}
		if len(run) > len(runnerPhases) {
			idx, runnerPhases = i, run
		}
	}
	if len(runnerPhases) < 2 {
		t.Fatalf("plan %v has no batch of two in-band phases", phaseNames(plan))
	}
	first := runnerPhases[0]
	before := phaseNames(plan)[:idx]
	for _, c := range []struct {
		name      string
		completed []modes.PhaseName
		from      int
		want      step
	}{
		{"a new run starts with its first phase", nil, 0, step{phase: plan.Phases[0].Name}},
		{"a coordinator phase goes alone", before[:1], 0, step{phase: before[1]}},
		{"in-band phases go as one batch", before, 0, step{batch: runnerPhases}},
		{"a retried batch leaves out what completed", append(slices.Clone(before), first), idx, step{batch: runnerPhases[1:]}},
		{"the phase reached is where a resumed run starts", nil, idx, step{batch: runnerPhases}},
		{"all done", phaseNames(plan), 0, step{done: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := nextStep(plan, c.completed, c.from)
			if got.phase != c.want.phase || got.done != c.want.done || !slices.Equal(got.batch, c.want.batch) {
				t.Errorf("nextStep = %+v, want %+v", got, c.want)
			}
		})
	}
	failedOnce := outcome{status: curev1.PhaseStatus_PHASE_FAILED, msg: "BMC unreachable"}
	final := failedFinal("a refused BMC login is not retried", "login refused")
	for _, c := range []struct {
		name     string
		attempts int
		out      outcome
		want     string
	}{
		{"a failure within the budget is retried", 1, failedOnce, ""},
		{"the budget spent fails the run", 3, failedOnce, "phase bmc failed 3 times (budget 3): BMC unreachable"},
		{"a final failure is not retried", 1, final, "phase bmc failed: login refused (a refused BMC login is not retried)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := retryRefused(modes.BMC, c.attempts, 3, c.out); got != c.want {
				t.Errorf("retryRefused = %q, want %q", got, c.want)
			}
		})
	}
}

func phaseNames(p modes.Plan) []modes.PhaseName {
	var out []modes.PhaseName
	for _, ph := range p.Phases {
		out = append(out, ph.Name)
	}
	return out
}
