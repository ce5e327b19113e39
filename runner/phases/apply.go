package phases

import (
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
// up: any FAIL fails the phase (naming each component), otherwise OK with
// a reboot request when one update needs it. Shared by nvme, nic and dpu.
func applyUpdates(kind, done string, ups []update, emit agent.Emitter) agent.PhaseOutcome {
	var failures, updated []string
	reboot := false
	for _, u := range ups {
		v, needReboot := u.apply()
		emit.Verdict(v)
		switch {
		case v.GetStatus() == curev1.VerdictStatus_FAIL:
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
