// Package runstate defines, once, the run statuses, phase statuses and event
// kinds the coordinator stores, serves over the operator API and shows. The
// store validates against these sets; the pipeline, server, dashboard,
// time buckets, curectl and the fleet simulator compare with these names
// rather than with literals. It imports nothing, so a client (curectl, the
// fleet simulator) can use it without the store's database drivers.
package runstate

import "slices"

// Run statuses, as stored and as the operator API reports them.
const (
	RunPending   = "pending"
	RunRunning   = "running"
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
	RunAttention = "attention"
	RunCanceled  = "canceled"
)

// RunStatuses lists every run status, the active ones first.
var RunStatuses = []string{RunPending, RunRunning, RunSucceeded, RunFailed, RunAttention, RunCanceled}

// ValidRun reports whether s is a run status.
func ValidRun(s string) bool { return slices.Contains(RunStatuses, s) }

// Active reports whether a run in status s is still to be driven.
func Active(s string) bool { return s == RunPending || s == RunRunning }

// Phase statuses, as stored and as a phase_end event carries them.
const (
	PhaseRunning = "running"
	PhaseOK      = "ok"
	PhaseSkipped = "skipped"
	PhaseFailed  = "failed"
)

// PhaseStatuses lists every phase status.
var PhaseStatuses = []string{PhaseRunning, PhaseOK, PhaseSkipped, PhaseFailed}

// ValidPhase reports whether s is a phase status.
func ValidPhase(s string) bool { return slices.Contains(PhaseStatuses, s) }

// Event kinds of a run's timeline. The runner sends proto events; the
// server stores each under one of the first five kinds.
const (
	EventPhaseStart = "phase_start"
	EventPhaseEnd   = "phase_end"
	EventVerdict    = "verdict"
	EventLog        = "log"
	EventMetric     = "metric"
	EventInfo       = "info"    // a coordinator note (retry, reboot, resume...)
	EventRunEnd     = "run_end" // the run's final status
	// EventHostReady marks the installed OS's callback; the pipeline waits
	// for it in the timeline rather than in memory, so the wait survives a
	// coordinator restart.
	EventHostReady = "host_ready"
	// EventProgress is a runner's latest heartbeat as a following Watch
	// streams it live; it is never stored as an event (the store keeps the
	// latest per run), so it is not in EventKinds.
	EventProgress = "progress"
)

// EventKinds lists every event kind.
var EventKinds = []string{EventPhaseStart, EventPhaseEnd, EventVerdict, EventLog, EventMetric, EventInfo, EventRunEnd, EventHostReady}

// Event sources: who appended an event.
const (
	SourceCoordinator = "coordinator"
	SourceRunner      = "runner"
	SourceHostOS      = "hostos"
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
