package render

import (
	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
)

// RunStatusOf is a report's run status. A coordinator from before the enum
// fields sent only the status's name.
func RunStatusOf(r *curev1.RunReport) curev1.RunStatus {
	if s := r.GetRunStatus(); s != curev1.RunStatus_RUN_STATUS_UNSPECIFIED {
		return s
	}
	s, _ := runstate.ParseRun(r.GetStatus())
	return s
}

// phaseStatusOf is a phase record's status (see RunStatusOf).
func phaseStatusOf(p *curev1.PhaseRecord) curev1.PhaseStatus {
	if s := p.GetPhaseStatus(); s != curev1.PhaseStatus_PHASE_STATUS_UNSPECIFIED {
		return s
	}
	s, _ := runstate.ParsePhase(p.GetStatus())
	return s
}

// fleetRunStatus is a listed run's status (see RunStatusOf).
func fleetRunStatus(f *curev1.FleetRun) curev1.RunStatus {
	if s := f.GetRunStatus(); s != curev1.RunStatus_RUN_STATUS_UNSPECIFIED {
		return s
	}
	s, _ := runstate.ParseRun(f.GetStatus())
	return s
}

// entryPhaseStatus is the phase status a phase_end timeline entry names
// (unspecified when it names none).
func entryPhaseStatus(e *curev1.TimelineEntry) curev1.PhaseStatus {
	s, _ := runstate.ParsePhase(e.GetStatus())
	return s
}

// RunLabel is how a run status reads: its name, "none" for no run.
func RunLabel(s curev1.RunStatus) string {
	if n := runstate.RunName(s); n != "" {
		return n
	}
	return "none"
}

// runOrder is the order run statuses are counted in: failures first, nodes
// never run last.
var runOrder = []curev1.RunStatus{curev1.RunStatus_RUN_FAILED, curev1.RunStatus_RUN_ATTENTION, curev1.RunStatus_RUN_RUNNING,
	curev1.RunStatus_RUN_PENDING, curev1.RunStatus_RUN_CANCELED, curev1.RunStatus_RUN_SUCCEEDED, curev1.RunStatus_RUN_STATUS_UNSPECIFIED}
