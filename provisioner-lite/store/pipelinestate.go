package store

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cure-oss/cure/modes"
)

// PipelineState is the pipeline's status of one run, typed and stored as one
// JSON column (runs.pipeline): what the coordinator driving the run needs to
// pick it up where it stood after a restart or a takeover. The pipeline reads
// it, decides, and writes it back; there are no free-form keys.
type PipelineState struct {
	// RunnerAddr is the runner address list of the instance driving the
	// run, itself first.
	RunnerAddr string `json:"runner_addr,omitempty"`
	// Boot is what the node should boot next.
	Boot BootTarget `json:"boot,omitempty"`
	// CUREWindow is the id of the run's latest CURE boot window.
	CUREWindow string `json:"cure_window,omitempty"`
	// BootRequestedAt is when the coordinator last powered on or rebooted
	// the node.
	BootRequestedAt time.Time `json:"boot_requested_at,omitzero"`
	// PowerOn is the power_on phase's action, once taken.
	PowerOn PowerAction `json:"power_on,omitzero"`
	// FreshCURE is why the next runner batch must boot a fresh CURE ("": it
	// need not).
	FreshCURE string `json:"fresh_cure,omitempty"`
	// CUREMACs are the node's MACs the wait for CURE expects it to boot
	// with (recorded when the wait began, or last re-armed the boot): the
	// inventory changing them re-arms the boot at once.
	CUREMACs []string `json:"cure_macs,omitempty"`
	// HostTokens are the digests of the host callback tokens the run's
	// assignments carried, oldest first (at most MaxHostTokens).
	HostTokens []string `json:"host_tokens,omitempty"`
	// Phases holds each phase's attempts, start and deadline.
	Phases map[modes.PhaseName]PhaseState `json:"phases,omitempty"`
	// Host is the wait for the installed OS.
	Host HostWait `json:"host,omitzero"`
	// BMC is the out-of-band work the run has pending.
	BMC BMCWork `json:"bmc,omitzero"`
	// Batch is the in-band batch the run's runner works on (nil: none).
	Batch *RunnerBatch `json:"batch,omitempty"`
	// Pair is the run's part in its batch's node-pair burn-in (nil: its
	// suite has not reached a node-pair check).
	Pair *PairWork `json:"pair,omitempty"`
	// Handled is the latest runner session given work or re-attached to:
	// never re-attached to again (its Hello is stale by then).
	Handled SessionRef `json:"handled,omitzero"`
	// Malformed is set by the schema upgrade when the run's earlier scratch
	// data held a value it could not read (naming the run, the key and the
	// value): the pipeline does not drive such a run on a guess.
	Malformed string `json:"malformed,omitempty"`
}

// PhaseState is the coordinator's record of one phase's attempts.
type PhaseState struct {
	Attempts int `json:"attempts,omitempty"`
	// StartedAt is the start of the latest attempt, by the coordinator's clock.
	StartedAt time.Time `json:"started_at,omitzero"`
	// Deadline is when the coordinator gives up on the latest attempt of an
	// in-band phase that sent no end (zero: none set). Kept so a restarted
	// coordinator holds the same deadline.
	Deadline time.Time `json:"deadline,omitzero"`
	// Ended says the latest attempt ended (ok, skipped or failed): a
	// coordinator phase found started and not ended was cut short by a
	// stop of the coordinator and continues as the same attempt.
	Ended bool `json:"ended,omitempty"`
}

// Open reports whether the latest attempt started and did not end.
func (ps PhaseState) Open() bool { return ps.Attempts > 0 && !ps.Ended }

// HostWait is the state of the wait for the installed OS's callback.
type HostWait struct {
	// RebootAttempt is the wait_for_host_os attempt that rebooted the node
	// out of CURE (0: none did).
	RebootAttempt int `json:"reboot_attempt,omitempty"`
	// RebootedAt is when it did; zero until then (no callback is taken
	// before it).
	RebootedAt time.Time `json:"rebooted_at,omitzero"`
	// WaitFrom is the event id the wait reads the callback from.
	WaitFrom int64 `json:"wait_from,omitempty"`
}

// BMCWork is the out-of-band work of a run that outlives one step.
type BMCWork struct {
	// ResetAt is when the run asked the BMC to reset and has not seen it
	// back since (zero: no reset pending).
	ResetAt time.Time `json:"reset_at,omitzero"`
	// Resets is how many BMC resets the run caused.
	Resets int `json:"resets,omitempty"`
	// Updates records each out-of-band firmware update submitted, by
	// manifest entry name, until its targets are verified.
	Updates map[string]FirmwareSubmission `json:"updates,omitempty"`
	// LegacySubmissions is the free-text record older coordinators wrote
	// ("submitting <time>", "submitted task <URI>"): read once into
	// Updates (see unmarshalPipeline), never written.
	LegacySubmissions map[string]string `json:"submissions,omitempty"`
	// BIOS is the BIOS settings apply in progress (zero: none).
	BIOS BIOSApply `json:"bios,omitzero"`
}

// SubmissionState is how far one out-of-band firmware update got.
type SubmissionState string

const (
	// SubmissionSending: the request was about to be sent, or sent and its
	// answer not recorded (lost, or the coordinator stopped). The BMC's
	// tasks not in KnownTasks tell whether it took.
	SubmissionSending SubmissionState = "sending"
	// SubmissionAccepted: the BMC took it; its task is followed, never
	// submitted again.
	SubmissionAccepted SubmissionState = "accepted"
	// SubmissionApplied: the task ended well; activation and verification
	// remain.
	SubmissionApplied SubmissionState = "applied"
	// SubmissionActivating: the activation (BMC reset or host reboot) was
	// requested at At; it is waited for, not requested again.
	SubmissionActivating SubmissionState = "activating"
)

// FirmwareSubmission is one out-of-band firmware update the run sent to
// the node's BMC, typed so that a coordinator that restarts follows the
// task it finds instead of sending the image again.
type FirmwareSubmission struct {
	State SubmissionState `json:"state"`
	// At is when State was entered, by the coordinator's clock.
	At time.Time `json:"at"`
	// Op and URI are the operation and where it was sent (SimpleUpdate's
	// action target, or the MultipartHttpPushUri): a task whose payload
	// targets another URI is not this update's.
	Op  string `json:"op,omitempty"`
	URI string `json:"uri,omitempty"`
	// KnownTasks are the BMC's task URIs listed before the request
	// (TasksListed: the list was read): a task not among them is this
	// request's.
	KnownTasks  []string `json:"known_tasks,omitempty"`
	TasksListed bool     `json:"tasks_listed,omitempty"`
	// TaskURI and MonitorURI are where the BMC said to follow the update.
	TaskURI    string `json:"task_uri,omitempty"`
	MonitorURI string `json:"monitor_uri,omitempty"`
}

// MaxKnownTasks bounds the task URIs a submission keeps: a BMC lists tens;
// one listing more is treated as one whose list could not be read.
const MaxKnownTasks = 512

// BIOSStage is how far a BIOS settings apply got.
type BIOSStage string

const (
	// BIOSStaged: the changed attributes were written to the pending
	// settings object; the reboot that applies them is next.
	BIOSStaged BIOSStage = "staged"
	// BIOSRebooted: the reboot that applies them was requested (the run's
	// BootRequestedAt); the node coming back into CURE is waited for.
	BIOSRebooted BIOSStage = "rebooted"
)

// BIOSApply is a BIOS settings apply in progress.
type BIOSApply struct {
	Stage BIOSStage `json:"stage,omitempty"`
	At    time.Time `json:"at,omitzero"`
	// Changes are the attributes written (name -> value), verified after
	// the reboot.
	Changes map[string]any `json:"changes,omitempty"`
	// Matched is how many desired attributes already matched.
	Matched int `json:"matched,omitempty"`
}

// PowerAction is the coordinator's power action of a run's power_on phase,
// recorded with the action so a restart does not act again.
type PowerAction struct {
	At  time.Time `json:"at,omitzero"`
	Msg string    `json:"msg,omitempty"`
}

// RunnerBatch is the state of one batch of in-band phases handed to the
// node's runner: how far its events were acted on, which runner session it
// follows, and the budgets that session is judged by.
type RunnerBatch struct {
	// Phases are the batch's phases as it was started (the ones still to do
	// are those not in the run's CompletedPhases).
	Phases []modes.PhaseName `json:"phases"`
	// Cursor is the id of the last stored event the pipeline acted on: a
	// coordinator that stopped mid-batch reads on from there, so runner
	// events stored while it was away are acted on, once.
	Cursor int64 `json:"cursor"`
	// Current is the in-band phase the runner is in ("": none started).
	Current modes.PhaseName `json:"current,omitempty"`
	// HadRunner says a runner has worked on the batch since the node last
	// booted: one gone counts against the reconnect budget, not the budget
	// of a fresh CURE boot.
	HadRunner bool `json:"had_runner,omitempty"`
	// Bound is the session the batch follows (zero: none).
	Bound SessionRef `json:"bound,omitzero"`
	// Seen is a new session first looked at, and SeenStored the highest
	// event seq of its boot the store held then: it is judged only after
	// the events stored by then were acted on.
	Seen       SessionRef `json:"seen,omitzero"`
	SeenStored uint64     `json:"seen_stored,omitempty"`
	// Silent is a session whose runner stopped sending heartbeats: its
	// stream may outlive the node's reset until keepalives close it.
	Silent SessionRef `json:"silent,omitzero"`
	// LostSince is when the batch last had no runner (zero: it has one).
	LostSince time.Time `json:"lost_since,omitzero"`
	// LastAlive is the last sign of life of the bound runner other than a
	// heartbeat: its session (re)attached or a phase started.
	LastAlive time.Time `json:"last_alive,omitzero"`
}

// SessionRef names one runner session: the boot it came from and when it
// connected (a reconnect of the same boot is another session).
type SessionRef struct {
	BootID      string `json:"boot_id,omitempty"`
	ConnectedNs int64  `json:"connected_ns,omitempty"`
}

// IsZero reports whether the reference names no session.
func (s SessionRef) IsZero() bool { return s == SessionRef{} }

// MaxHostTokens bounds the host callback token digests a run keeps: a run
// reassigns os_install a handful of times.
const MaxHostTokens = 8

// BootTarget is what the node should boot next.
type BootTarget string

const (
	BootUnset BootTarget = ""     // nothing armed: the boot server sends the node to its disk
	BootCURE  BootTarget = "cure" // a CURE boot window is open
	BootDisk  BootTarget = "disk" // the installed OS
)

// Attempts is how many attempts of phase have started.
func (p PipelineState) Attempts(phase modes.PhaseName) int { return p.Phases[phase].Attempts }

// Phase is the record of one phase (zero if it never started).
func (p PipelineState) Phase(phase modes.PhaseName) PhaseState { return p.Phases[phase] }

// SetPhase replaces the record of one phase.
func (p *PipelineState) SetPhase(phase modes.PhaseName, ps PhaseState) {
	if p.Phases == nil {
		p.Phases = map[modes.PhaseName]PhaseState{}
	}
	p.Phases[phase] = ps
}

// SetDeadline sets the deadline of phase's latest attempt.
func (p *PipelineState) SetDeadline(phase modes.PhaseName, t time.Time) {
	ps := p.Phase(phase)
	ps.Deadline = t.UTC()
	p.SetPhase(phase, ps)
}

// AddHostToken appends a digest, keeping the newest MaxHostTokens. Every
// token of the run stays good for its one callback: a runner busy with an
// os_install ignores a re-sent assignment (and its new token), so only the
// node knows which one its disk carries. All of them went only to this run's
// authenticated CURE sessions.
func (p *PipelineState) AddHostToken(digest string) {
	ds := append(slices.Clone(p.HostTokens), digest)
	if len(ds) > MaxHostTokens {
		ds = ds[len(ds)-MaxHostTokens:]
	}
	p.HostTokens = ds
}

// Submission is the record of an out-of-band update of the named firmware
// (zero State if none was submitted).
func (p PipelineState) Submission(firmware string) FirmwareSubmission {
	return p.BMC.Updates[firmware]
}

// SetSubmission records an out-of-band update of the named firmware; a
// zero State forgets it (verified, or failed for good).
func (p *PipelineState) SetSubmission(firmware string, sub FirmwareSubmission) {
	if sub.State == "" {
		delete(p.BMC.Updates, firmware)
		if len(p.BMC.Updates) == 0 {
			p.BMC.Updates = nil
		}
		return
	}
	if len(sub.KnownTasks) > MaxKnownTasks {
		sub.KnownTasks, sub.TasksListed = nil, false
	}
	if p.BMC.Updates == nil {
		p.BMC.Updates = map[string]FirmwareSubmission{}
	}
	sub.At = sub.At.UTC()
	p.BMC.Updates[firmware] = sub
}

// LegacySubmission reads an older coordinator's free-text record: "submitted
// task URI" is an accepted update to follow; anything else ("submitting
// TIME") was sending, with no task list to tell its task by.
func LegacySubmission(rec string) FirmwareSubmission {
	if uri, ok := strings.CutPrefix(rec, "submitted task "); ok && strings.HasPrefix(uri, "/") {
		return FirmwareSubmission{State: SubmissionAccepted, TaskURI: uri}
	}
	sub := FirmwareSubmission{State: SubmissionSending}
	if t, err := time.Parse(time.RFC3339, strings.TrimPrefix(rec, "submitting ")); err == nil {
		sub.At = t
	}
	return sub
}

// Clone is a deep copy: the pipeline's decisions work on a copy of the
// stored status.
func (p PipelineState) Clone() PipelineState {
	if p.Pair != nil {
		w := *p.Pair
		w.Ports = slices.Clone(w.Ports)
		w.Results = slices.Clone(w.Results)
		w.Verdicts = slices.Clone(w.Verdicts)
		if w.Plan != nil {
			pl := *w.Plan
			pl.Members = slices.Clone(pl.Members)
			pl.Notes = slices.Clone(pl.Notes)
			pl.Key = slices.Clone(pl.Key)
			w.Plan = &pl
		}
		p.Pair = &w
	}
	p.HostTokens = slices.Clone(p.HostTokens)
	p.CUREMACs = slices.Clone(p.CUREMACs)
	p.Phases = maps.Clone(p.Phases)
	p.BMC.Updates = maps.Clone(p.BMC.Updates)
	for k, u := range p.BMC.Updates {
		u.KnownTasks = slices.Clone(u.KnownTasks)
		p.BMC.Updates[k] = u
	}
	p.BMC.LegacySubmissions = maps.Clone(p.BMC.LegacySubmissions)
	p.BMC.BIOS.Changes = maps.Clone(p.BMC.BIOS.Changes)
	if p.Batch != nil {
		b := *p.Batch
		b.Phases = slices.Clone(b.Phases)
		p.Batch = &b
	}
	return p
}

// marshalPipeline is the column's text: "{}" for a run with no state. It
// is json.Marshal's text, encoded straight into the string (every UpdateRun
// encodes the state to see whether it changed, and Marshal's bytes copied
// into a string were 3 % of the bytes a 1,000-node fleet allocated).
func marshalPipeline(p PipelineState) (string, error) {
	var b strings.Builder
	if err := json.NewEncoder(&b).Encode(p); err != nil {
		return "", fmt.Errorf("pipeline state: %w", err)
	}
	return strings.TrimSuffix(b.String(), "\n"), nil
}

// unmarshalPipeline reads the column; empty is a run with no state.
func unmarshalPipeline(s string) (PipelineState, error) {
	var p PipelineState
	if s == "" {
		return p, nil
	}
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		return PipelineState{}, fmt.Errorf("pipeline state: %w", err)
	}
	for name, rec := range p.BMC.LegacySubmissions {
		if _, ok := p.BMC.Updates[name]; !ok {
			p.SetSubmission(name, LegacySubmission(rec))
		}
	}
	p.BMC.LegacySubmissions = nil
	return p, nil
}

// PairWork is a run's part in a node-pair burn-in: the node-pair check its
// runner is at, the ports it offered, the batch's plan once made (by the
// batch's first run in id order, the others adopt it), the links its
// runner measured as a client, and what was sent to which session. Each
// run writes only its own; the batch's plan and results are read from
// its members' runs.
type PairWork struct {
	Check   string     `json:"check"`
	Stage   string     `json:"stage,omitempty"`
	ReadyAt time.Time  `json:"ready_at,omitzero"`
	Ports   []PairPort `json:"ports,omitempty"`
	// Plan is the batch's plan this run takes part in (nil: not planned
	// yet).
	Plan *PairPlan `json:"plan,omitempty"`
	// Results are the links this run's runner measured as a client.
	Results []PairResult `json:"results,omitempty"`
	// Verdicts are the batch's judgement of this node (protojson of a
	// PairVerdicts), once judged.
	Verdicts []byte `json:"verdicts,omitempty"`
	// ScheduleSent and VerdictsSent are the sessions given the schedule
	// and the judgement: a new session (a reconnect) is given them again.
	ScheduleSent SessionRef `json:"schedule_sent,omitzero"`
	VerdictsSent SessionRef `json:"verdicts_sent,omitzero"`
}

// PairPort is one port a runner offered.
type PairPort struct {
	Name      string `json:"name"`
	Address   string `json:"address"`
	Transport string `json:"transport"`
}

// PairPlan is what the batch's plan is made from (the planner is pure, so
// every member derives the same rounds from it) and when it runs.
type PairPlan struct {
	// Planner is the run that made the plan.
	Planner string       `json:"planner"`
	Members []PairMember `json:"members"`
	Start   time.Time    `json:"start"`
	End     time.Time    `json:"end"`
	Notes   []string     `json:"notes,omitempty"`
	// Key is the plan's random key (crypto/rand, 32 bytes) from which each
	// link's per-window secret is derived (pairplan.SlotSecret): every
	// member adopts the planner's copy, so both ends get the same secret.
	Key []byte `json:"key,omitempty"`
}

// PairMember is one node of a plan, with its run and ports.
type PairMember struct {
	Node  string     `json:"node"`
	Run   string     `json:"run"`
	Ports []PairPort `json:"ports"`
}

// PairResult is one link a runner measured as the client.
type PairResult struct {
	Round       int     `json:"round"`
	Partner     string  `json:"partner"`
	Port        string  `json:"port"`
	PartnerPort string  `json:"partner_port"`
	Transport   string  `json:"transport"`
	Forward     float64 `json:"forward"`
	Reverse     float64 `json:"reverse"`
	Unit        string  `json:"unit"`
	Error       string  `json:"error,omitempty"`
}
