// Package runstate defines, once, the event kinds and sources the
// coordinator stores, and maps the statuses (the proto enums of api/curev1:
// RunStatus, PhaseStatus, VerdictStatus) to and from the names the store
// keeps them by, which the operator API's older string fields, the
// timeline and the metrics' labels carry too. Code compares statuses as
// enums, never as names. It imports only the API, so a client (curectl, the
// fleet simulator) can use it without the store's database drivers.
package runstate

import (
	"fmt"
	"slices"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// RunStatuses lists every run status, the active ones first.
var RunStatuses = []curev1.RunStatus{curev1.RunStatus_RUN_PENDING, curev1.RunStatus_RUN_RUNNING, curev1.RunStatus_RUN_SUCCEEDED,
	curev1.RunStatus_RUN_FAILED, curev1.RunStatus_RUN_ATTENTION, curev1.RunStatus_RUN_CANCELED}

// runNames are the names the store keeps run statuses by.
var runNames = map[curev1.RunStatus]string{
	curev1.RunStatus_RUN_PENDING: "pending", curev1.RunStatus_RUN_RUNNING: "running", curev1.RunStatus_RUN_SUCCEEDED: "succeeded",
	curev1.RunStatus_RUN_FAILED: "failed", curev1.RunStatus_RUN_ATTENTION: "attention", curev1.RunStatus_RUN_CANCELED: "canceled",
}

// RunName is a run status's stored name ("" for none).
func RunName(s curev1.RunStatus) string { return runNames[s] }

// ParseRun is the run status named name.
func ParseRun(name string) (curev1.RunStatus, error) {
	for s, n := range runNames {
		if n == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("run status %q is not one of %s", name, strings.Join(names(RunStatuses, RunName), "|"))
}

// Active reports whether a run in status s is still to be driven.
func Active(s curev1.RunStatus) bool {
	return s == curev1.RunStatus_RUN_PENDING || s == curev1.RunStatus_RUN_RUNNING
}

// PhaseStatuses lists every phase status a phase record takes.
var PhaseStatuses = []curev1.PhaseStatus{curev1.PhaseStatus_PHASE_RUNNING, curev1.PhaseStatus_PHASE_OK, curev1.PhaseStatus_PHASE_SKIPPED,
	curev1.PhaseStatus_PHASE_FAILED}

var phaseNames = map[curev1.PhaseStatus]string{
	curev1.PhaseStatus_PHASE_RUNNING: "running", curev1.PhaseStatus_PHASE_OK: "ok", curev1.PhaseStatus_PHASE_SKIPPED: "skipped",
	curev1.PhaseStatus_PHASE_FAILED: "failed",
}

// PhaseName is a phase status's stored name ("" for none).
func PhaseName(s curev1.PhaseStatus) string { return phaseNames[s] }

// ParsePhase is the phase status named name.
func ParsePhase(name string) (curev1.PhaseStatus, error) {
	for s, n := range phaseNames {
		if n == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("phase status %q is not one of %s", name, strings.Join(names(PhaseStatuses, PhaseName), "|"))
}

// VerdictStatuses lists every verdict status, in the enum's order.
var VerdictStatuses = func() []curev1.VerdictStatus {
	var out []curev1.VerdictStatus
	for n := range curev1.VerdictStatus_name {
		if s := curev1.VerdictStatus(n); s != curev1.VerdictStatus_VERDICT_STATUS_UNSPECIFIED {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}()

// VerdictName is a verdict status's stored name: the enum's (PASS, DRIFT...),
// "" for none.
func VerdictName(s curev1.VerdictStatus) string {
	if s == curev1.VerdictStatus_VERDICT_STATUS_UNSPECIFIED {
		return ""
	}
	if _, ok := curev1.VerdictStatus_name[int32(s)]; !ok {
		return ""
	}
	return s.String()
}

// ParseVerdict is the verdict status named name.
func ParseVerdict(name string) (curev1.VerdictStatus, error) {
	if v, ok := curev1.VerdictStatus_value[name]; ok && v != 0 {
		return curev1.VerdictStatus(v), nil
	}
	return 0, fmt.Errorf("verdict status %q is not one of %s", name, strings.Join(names(VerdictStatuses, VerdictName), "|"))
}

func names[S ~int32](ss []S, name func(S) string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = name(s)
	}
	return out
}

// EventKind is the kind of a timeline event, as stored (the events
// table's kind column) and shown.
type EventKind string

// Event kinds of a run's timeline. The runner sends proto events; the
// server stores each under one of the first five kinds.
const (
	EventPhaseStart EventKind = "phase_start"
	EventPhaseEnd   EventKind = "phase_end"
	EventVerdict    EventKind = "verdict"
	EventLog        EventKind = "log"
	EventMetric     EventKind = "metric"
	EventInfo       EventKind = "info"    // a coordinator note (retry, reboot, resume...)
	EventRunEnd     EventKind = "run_end" // the run's final status
	// EventHostReady marks the installed OS's callback; the pipeline waits
	// for it in the timeline rather than in memory, so the wait survives a
	// coordinator restart.
	EventHostReady EventKind = "host_ready"
	// EventProgress is a runner's latest heartbeat as a following Watch
	// streams it live; it is never stored as an event (the store keeps the
	// latest per run), so it is not in EventKinds.
	EventProgress EventKind = "progress"
)

// EventKinds lists every event kind.
var EventKinds = []EventKind{EventPhaseStart, EventPhaseEnd, EventVerdict, EventLog, EventMetric, EventInfo, EventRunEnd, EventHostReady}

// Boot paths into CURE: the coordinator's info event that hands a boot
// its token carries BootPathStatusPrefix+path as its status
// (RunReport.boot_path).
const (
	BootPathPXE          = "pxe"
	BootPathHTTPS        = "uefi-https"
	BootPathStatusPrefix = "boot:"
)

// EventSource says who appended an event (the events table's source
// column).
type EventSource string

// Event sources.
const (
	SourceCoordinator EventSource = "coordinator"
	SourceRunner      EventSource = "runner"
	SourceHostOS      EventSource = "hostos"
)

// SeriesBMC is the source of the series sampled from a node's BMC sensors
// (a run's series from the node itself name theirs).
const SeriesBMC = "bmc"

// Sources of the series the runner samples during a suite stage: the
// host's files and the GPUs through NVML.
const (
	SeriesHost = "host"
	SeriesGPU  = "gpu"
)
