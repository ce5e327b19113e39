package pipeline

import (
	"fmt"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
)

// phaseBudget is how long an in-band phase may go without its end: for
// validate the suite's deadline (its planned duration plus its grace, so a
// soak of days is not cut at a fixed bound), for the others def. why says
// where a validate budget came from, for the failure message.
func phaseBudget(phase modes.PhaseName, suite *manifests.ValidationSuite, def time.Duration) (d time.Duration, why string) {
	if phase != modes.Validate || suite == nil {
		return def, ""
	}
	grace := suite.Spec.Grace
	if grace <= 0 {
		grace = manifests.DefaultGrace
	}
	return suite.Spec.Deadline(), fmt.Sprintf("suite %s planned %s + grace %s", suite.Metadata.Name, suite.Spec.Planned(), time.Duration(grace))
}

// heartbeatEvery is the heartbeat period the coordinator asks of a runner:
// a third of the liveness budget (so a heartbeat lost in transit is not a
// lost runner), at most a minute, at least a second.
func heartbeatEvery(reconnect time.Duration) time.Duration {
	return min(max(reconnect/3, time.Second), time.Minute)
}

// planSuiteResume is what a validate phase given again after the node lost
// its suite (a reset, a crash) keeps of the earlier try, from the runner's
// last heartbeat (nil: none arrived), by the suite's resume policy:
// continue keeps the checks that had ended (their verdicts are stored) and
// runs the rest, the interrupted one again; restart runs everything again.
// note says so, for the run's timeline.
func planSuiteResume(suite *manifests.ValidationSuite, last *curev1.Progress) (*curev1.SuiteResume, string) {
	policy := suite.Spec.Resume
	if policy == "" {
		policy = manifests.ResumeContinue
	}
	sr := &curev1.SuiteResume{Resumed: last.GetResumed() + 1, Policy: policy}
	var kept, again []string
	state := map[string]*curev1.CheckProgress{}
	for _, c := range last.GetChecks() {
		state[c.GetCheck()] = c
	}
	for _, c := range suite.Spec.Checks {
		p := state[c.Name]
		switch {
		case policy == manifests.ResumeContinue && p.GetState() == "done":
			sr.Done = append(sr.Done, &curev1.CheckProgress{Check: c.Name, Stage: c.Stage, State: "done", Worst: p.GetWorst(),
				ElapsedMs: p.GetElapsedMs(), PlannedMs: p.GetPlannedMs()})
			kept = append(kept, fmt.Sprintf("%s %s", c.Name, p.GetWorst()))
		case p.GetState() == "running":
			again = append(again, c.Name+" (interrupted)")
		default:
			again = append(again, c.Name)
		}
	}
	note := fmt.Sprintf("node lost its suite mid validate (reset %d of suite %s): resume policy %s; kept %d ended check(s)", sr.Resumed,
		suite.Metadata.Name, policy, len(kept))
	if len(kept) > 0 {
		note += " (" + strings.Join(kept, ", ") + ")"
	}
	if last == nil {
		note += "; no heartbeat had arrived"
	}
	return sr, note + "; running again: " + nonEmpty(strings.Join(again, ", "), "nothing")
}
