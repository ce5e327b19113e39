package phases

import (
	"fmt"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/runner/agent"
)

// update is one drifted component and the step that brings it to target;
// apply returns the component's verdict and whether a host reboot must
// activate the change.
type update struct {
	component string
	apply     func() (*curev1.Verdict, bool)
}

// applyUpdates runs every update, streams its verdict and sums the phase
// up: any FAIL or ERROR (a version the gate cannot read after the update)
// fails the phase (naming each component), otherwise OK with
// a reboot request when one update needs it. Shared by nvme, nic and dpu.
func applyUpdates(kind, done string, ups []update, emit agent.Emitter) agent.PhaseOutcome {
	var failures, updated []string
	reboot := false
	for _, u := range ups {
		v, needReboot := u.apply()
		emit.Verdict(v)
		switch {
		case v.GetStatus() == curev1.VerdictStatus_FAIL, v.GetStatus() == curev1.VerdictStatus_ERROR:
			failures = append(failures, u.component+": "+v.GetMessage())
		case needReboot:
			reboot = true
			updated = append(updated, u.component+" (at next reboot)")
		default:
			updated = append(updated, u.component)
		}
	}
	if len(failures) > 0 {
		return failed("%s failed: %s", kind, strings.Join(failures, "; "))
	}
	return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_OK, RebootRequired: reboot, Message: done + " " + strings.Join(updated, ", ")}
}

// judged is a compared component: its verdict and, when drifted, the
// "component running -> desired" line for the phase message.
type judged struct {
	verdict *curev1.Verdict
	desired string
}

// tally streams every comparison verdict and sorts the outcomes: drift
// lines, error messages and how many components were judged at all (a SKIP
// verdict is reported but not judged).
func tally(emit agent.Emitter, js []judged) (drift, errs []string, n int) {
	for _, j := range js {
		v := j.verdict
		emit.Verdict(v)
		switch v.GetStatus() {
		case curev1.VerdictStatus_DRIFT:
			drift = append(drift, fmt.Sprintf("%s %s -> %s", v.GetComponent(), v.GetObserved(), j.desired))
		case curev1.VerdictStatus_ERROR:
			errs = append(errs, v.GetMessage())
		case curev1.VerdictStatus_MATCH:
		case curev1.VerdictStatus_SKIP, curev1.VerdictStatus_PASS, curev1.VerdictStatus_FAIL, curev1.VerdictStatus_MARGINAL,
			curev1.VerdictStatus_VERDICT_STATUS_UNSPECIFIED:
			continue // not judged
		default:
			continue
		}
		n++
	}
	return drift, errs, n
}
