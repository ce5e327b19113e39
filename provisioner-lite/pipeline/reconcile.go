package pipeline

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/bootgate"
	"github.com/cure-oss/cure/provisioner-lite/metrics"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/tools/checks/suite"
)

// The pipeline's waits are reconciled from the run's stored status
// (store.PipelineState): each look observes (stored events since the
// cursor, the hub's current session, the clock, heartbeats), a pure
// decision turns the status and the observations into the next status and
// a list of actions, and a small applier carries the actions out before
// the status is saved. Nothing a decision depends on lives in a local of
// a loop, so a coordinator that restarts decides from where the last one
// stood.

// actionKind is what an action asks the applier to do.
type actionKind int

const (
	actRecordStart     actionKind = iota // the runner started an attempt of phase: record it
	actRecordEnd                         // the runner ended phase with out: record it
	actRebootCURE                        // re-arm PXE once and reset the host into CURE (msg: why)
	actEvent                             // a timeline entry of phase
	actNote                              // a coordinator note of phase
	actRetry                             // count a retry of phase of cause
	actAssign                            // send phases to session
	actReattach                          // follow session, mid-phase (its Hello in msg)
	actFail                              // phase failed with msg: the attempt ends
	actLost                              // the node's runner is lost for good (msg)
	actDone                              // the wait reached its goal (msg)
	actRequeue                           // decide again at once: the status changed what to observe
	actEndBootWindow                     // tokens minted for this boot window and never used die
	actRebootOutOfCURE                   // reboot the node out of CURE into its installed OS
	actOrderReboot                       // tell session's runner to reboot again
	actPairSend                          // send session's runner a node-pair message (pair)
)

var actionNames = map[actionKind]string{
	actRecordStart: "record_start", actRecordEnd: "record_end", actRebootCURE: "reboot_into_cure", actEvent: "event",
	actNote: "note", actRetry: "retry", actAssign: "assign", actReattach: "reattach", actFail: "fail", actLost: "lost",
	actDone: "done", actRequeue: "requeue", actEndBootWindow: "end_boot_window", actRebootOutOfCURE: "reboot_out_of_cure",
	actOrderReboot: "order_reboot", actPairSend: "pair_send",
}

func (k actionKind) String() string {
	if n, ok := actionNames[k]; ok {
		return n
	}
	return fmt.Sprintf("action(%d)", int(k))
}

// action is one thing a decision asks for; which fields count depends on
// kind.
type action struct {
	kind    actionKind
	phase   modes.PhaseName
	msg     string
	out     outcome
	dur     time.Duration
	session store.SessionRef
	phases  []modes.PhaseName
	cause   string
	pair    *curev1.CoordinatorMessage
}

// sessionRef names a hub session in a run's status.
func sessionRef(s *sessions.Session) store.SessionRef {
	return store.SessionRef{BootID: s.BootID, ConnectedNs: s.ConnectedAt.UnixNano()}
}

// sessionObs is what the pipeline sees of the node's current runner
// session.
type sessionObs struct {
	ref       store.SessionRef
	runID     string              // the run its boot token was issued for
	state     *curev1.RunnerState // as its Hello reported it
	heartbeat time.Time           // its latest heartbeat (zero: none)
	// stored is the highest event seq of its boot the store held when the
	// batch first saw it (observed only then); since the kind of its
	// boot's latest phase event after its Hello's last seq (observed once
	// it was seen).
	stored uint64
	since  runstate.EventKind
	// held, when set, says its boot window's claim has not settled
	// (bootgate.Gate.Claim, observed for a session of the run the batch does not
	// follow yet): it is given nothing and followed in nothing.
	held *bootgate.Claim
}

// unsettled says whether the session is of the run and may not be given
// work or be followed yet.
func (s *sessionObs) unsettled(runID string) bool {
	return s != nil && s.runID == runID && s.held != nil
}

// batchObs is one look at a batch of in-band phases.
type batchObs struct {
	now time.Time
	// fresh: this coordinator looks at the batch for the first time (it
	// started it, or resumed it after a restart or a takeover); tail is
	// then the id of the run's last stored event.
	fresh bool
	tail  int64
	// events are the stored events after what was read so far, oldest
	// first; readTo is the id of the last event read, these included.
	events  []store.Event
	readTo  int64
	session *sessionObs // nil: no runner connected for the node
	// pairs is the node-pair batch as seen (nil: the run is at no
	// node-pair check).
	pairs *pairObs
}

// batchPolicy is what a batch is judged by.
type batchPolicy struct {
	phases      []modes.PhaseName          // the batch, as drive handed it
	suite       *manifests.ValidationSuite // the validate phase's suite (nil: none)
	phaseBound  time.Duration              // an in-band phase other than validate
	reconnect   time.Duration              // a runner gone (or silent) before it counts as lost
	waitForCURE time.Duration              // a fresh CURE boot until its runner registers
	disconnects int                        // runner losses per run
	// pairs are the suite's node-pair checks by name.
	pairs map[string]suite.PairConfig
}

// remaining is the batch's phases not completed yet.
func remaining(r *store.Run, batch []modes.PhaseName) []modes.PhaseName {
	var out []modes.PhaseName
	for _, p := range batch {
		if !slices.Contains(r.CompletedPhases, p) {
			out = append(out, p)
		}
	}
	return out
}

// cloneRun is a copy of r sharing nothing a decision changes.
func cloneRun(r store.Run) store.Run {
	r.CompletedPhases = slices.Clone(r.CompletedPhases)
	r.Pipeline = r.Pipeline.Clone()
	return r
}

// decideBatch is the decision of one look at a batch of in-band phases: r
// is the run as stored, the result the run as it is to be saved once the
// actions are carried out. It ends with one of actDone, actFail, actLost,
// actRequeue, or none of them (wait for the next change).
func decideBatch(r store.Run, pol batchPolicy, obs batchObs) (store.Run, []action) {
	r = cloneRun(r)
	d := &batchDecision{r: &r, pol: pol, obs: obs}
	d.decide()
	return r, d.acts
}

type batchDecision struct {
	r    *store.Run
	b    *store.RunnerBatch
	pol  batchPolicy
	obs  batchObs
	acts []action
}

func (d *batchDecision) add(a action) { d.acts = append(d.acts, a) }

// ended says whether the decision already ends the look.
func (d *batchDecision) ended() bool {
	if len(d.acts) == 0 {
		return false
	}
	switch d.acts[len(d.acts)-1].kind {
	case actDone, actFail, actLost, actRequeue:
		return true
	case actRecordStart, actRecordEnd, actRebootCURE, actEvent, actNote, actRetry, actAssign, actReattach,
		actEndBootWindow, actRebootOutOfCURE, actOrderReboot, actPairSend:
		return false
	}
	return false
}

func (d *batchDecision) decide() {
	if d.obs.fresh || d.r.Pipeline.Batch == nil {
		d.enter()
	}
	d.b = d.r.Pipeline.Batch
	if why := d.r.Pipeline.FreshCURE; why != "" {
		d.r.Pipeline.FreshCURE = ""
		d.freshCURE(why)
	}
	d.actOnEvents()
	if d.ended() {
		return
	}
	if len(remaining(d.r, d.b.Phases)) == 0 {
		d.add(action{kind: actDone})
		return
	}
	d.followSession()
	if d.ended() {
		return
	}
	d.pairs()
	d.checkDeadline()
}

// enter starts the batch, or resumes the one the run's status holds (a
// coordinator stopped mid-batch): the session it followed was this
// coordinator's predecessor's, so it is looked for again, and a runner that
// had worked on it gets the reconnect budget, not a fresh boot's.
func (d *batchDecision) enter() {
	b := d.r.Pipeline.Batch
	if b == nil {
		d.r.Pipeline.Batch = &store.RunnerBatch{Phases: slices.Clone(d.pol.phases), Cursor: d.obs.tail}
		return
	}
	b.Phases = slices.Clone(d.pol.phases)
	b.HadRunner = b.HadRunner || !b.Bound.IsZero()
	b.Bound, b.Seen, b.SeenStored, b.Silent = store.SessionRef{}, store.SessionRef{}, 0, store.SessionRef{}
	b.LostSince, b.LastAlive = time.Time{}, time.Time{}
	if b.Current == "" && b.HadRunner && slices.Contains(remaining(d.r, b.Phases), d.r.Phase) && d.r.Pipeline.Attempts(d.r.Phase) > 0 {
		// A status from before the batch kept its phase: the phase
		// reached was the runner's.
		b.Current = d.r.Phase
	}
}

// freshCURE is the first look of a batch in a run resumed by an operator:
// the run's end closed its runner's session, so a runner idling in CURE
// since then is no session of the run, and the batch boots a fresh CURE;
// but a runner connected for the run now registered since the resume (an
// ended run takes no session, its end closed every earlier one), with a
// token of this run: it is adopted, not rebooted.
func (d *batchDecision) freshCURE(why string) {
	if cur := d.obs.session; cur != nil && cur.runID == d.r.ID {
		var phase modes.PhaseName
		if left := remaining(d.r, d.b.Phases); len(left) > 0 {
			phase = left[0]
		}
		d.add(action{kind: actNote, phase: phase,
			msg: fmt.Sprintf("run %s: CURE boot %s registered for it since: adopted, no second boot", why, cur.ref.BootID)})
		return
	}
	d.reboot("run " + why + ": its earlier CURE session ended with the run")
}

// reboot asks for a reboot into CURE: whatever runner the batch followed is
// gone. The fresh boot gets the PXE budget only once the applier saw the
// reset done (rebootedIntoCURE): a coordinator that stopped between the
// decision and the reset leaves a runner that may still be there.
func (d *batchDecision) reboot(why string) {
	d.add(action{kind: actRebootCURE, msg: why})
	d.b.Bound = store.SessionRef{}
	d.b.LostSince = d.obs.now
}

// rebootedIntoCURE is the batch's status once a reboot into CURE was
// done: a fresh CURE boot is under way, with the PXE budget from now.
func rebootedIntoCURE(b *store.RunnerBatch, now time.Time) {
	b.HadRunner = false
	b.LostSince = now
}

// actOnEvents acts on the runner's phase events stored since the cursor:
// after a coordinator restart the runner may have finished phases this
// pipeline has not acted on yet, and a new assignment would run them (and
// mint a new host token) again.
func (d *batchDecision) actOnEvents() {
	held := ""
	if cur := d.obs.session; cur.unsettled(d.r.ID) {
		held = cur.ref.BootID // a boot given nothing yet cannot have done anything of the batch
	}
	for _, ev := range d.obs.events {
		if ev.Source != runstate.SourceRunner || !slices.Contains(remaining(d.r, d.b.Phases), ev.Phase) || (held != "" && ev.BootID == held) {
			continue
		}
		switch ev.Kind {
		case runstate.EventInfo:
			if len(ev.Payload) > 0 {
				d.pairEvent(ev)
				d.b.Cursor = ev.ID
			}
		case runstate.EventPhaseStart:
			budget, _ := phaseBudget(ev.Phase, d.pol.suite, d.pol.phaseBound)
			startAttempt(d.r, ev.Phase, d.obs.now)
			d.r.Pipeline.SetDeadline(ev.Phase, d.obs.now.Add(budget))
			d.b.Current, d.b.LastAlive = ev.Phase, d.obs.now
			// Acted on: a restarted coordinator reads on from here, and
			// does not start the phase's attempt a second time.
			d.b.Cursor = ev.ID
			d.add(action{kind: actRecordStart, phase: ev.Phase})
		case runstate.EventPhaseEnd:
			d.b.Cursor = ev.ID
			out := phaseEndOutcome(ev)
			endAttempt(d.r, ev.Phase, out)
			if d.b.Current == ev.Phase {
				d.b.Current = ""
			}
			d.add(action{kind: actRecordEnd, phase: ev.Phase, out: out, dur: time.Duration(ev.DurationMs) * time.Millisecond})
			if out.status == curev1.PhaseStatus_PHASE_FAILED {
				d.add(action{kind: actFail, phase: ev.Phase, msg: out.msg})
				return
			}
			if rebootRequired(ev) {
				d.reboot(string(ev.Phase) + " needs a reboot to activate")
			}
		case runstate.EventVerdict, runstate.EventLog, runstate.EventMetric, runstate.EventRunEnd, runstate.EventHostReady, runstate.EventProgress:
			// The timeline's, not the batch's: nothing to decide.
		}
	}
}

// followSession judges the node's current runner session: ours and alive,
// gone (for how long), or new (re-attach to it, or give it the phases).
func (d *batchDecision) followSession() {
	cur := d.obs.session
	if cur != nil && (cur.runID != d.r.ID || cur.ref == d.b.Silent) {
		cur = nil // a runner booted for another run is not ours; a silent one is gone
	}
	if cur != nil && cur.ref == d.b.Bound && d.silent(cur) {
		cur = nil
	}
	switch {
	case cur == nil:
		d.lost()
	case cur.ref != d.b.Bound:
		d.b.LostSince = time.Time{}
		d.newSession(cur)
	}
}

// silent says whether the followed runner of a validate phase has sent no
// heartbeat for the reconnect budget: lost, even with its stream up (a
// node reset mid soak leaves the stream until keepalives close it).
func (d *batchDecision) silent(cur *sessionObs) bool {
	if d.b.Current != modes.Validate {
		return false
	}
	last := d.b.LastAlive
	if cur.heartbeat.After(last) {
		last = cur.heartbeat
	}
	quiet := d.obs.now.Sub(last)
	if quiet <= d.pol.reconnect {
		return false
	}
	d.add(action{kind: actEvent, phase: d.b.Current, msg: fmt.Sprintf("no heartbeat from the runner for %s (budget %s): the runner counts as lost",
		quiet.Round(time.Second), d.pol.reconnect)})
	// Bound stays the silent one: the reconnect budget applies, and it
	// has run out.
	d.b.Silent = cur.ref
	d.b.LostSince = last
	return true
}

// lost counts the time without a runner against its budget (the reconnect
// budget for a runner that had worked on the batch, a fresh boot's
// otherwise); past it the node is rebooted into CURE, or, past the run's
// disconnect budget, given up.
func (d *batchDecision) lost() {
	now := d.obs.now
	if d.b.LostSince.IsZero() {
		d.b.LostSince = now
		if !d.b.Bound.IsZero() {
			d.add(action{kind: actNote, phase: d.b.Current, msg: "runner disconnected"})
		}
	}
	budget := d.pol.reconnect
	if d.b.Bound.IsZero() && !d.b.HadRunner {
		budget = d.pol.waitForCURE
	}
	if now.Sub(d.b.LostSince) <= budget {
		return
	}
	left := remaining(d.r, d.b.Phases)
	d.r.Disconnects++
	if d.r.Disconnects > d.pol.disconnects {
		d.add(action{kind: actLost, msg: fmt.Sprintf("runner lost %d times (budget %d) during %s", d.r.Disconnects, d.pol.disconnects, strings.Join(modes.PhaseStrings(left), ","))})
		return
	}
	phase := cmp.Or(d.b.Current, left[0])
	d.add(action{kind: actRetry, phase: phase, cause: metrics.CauseRunnerLost})
	d.reboot(fmt.Sprintf("runner gone for %s during %s", budget, phase))
}

// newSession decides about a session the batch does not follow: first the
// events its runner had stored when it was first seen are acted on (a
// runner that finished its phases while the coordinator was away may have
// replayed them all meanwhile, and a new assignment would run them again
// and void the host token the node was installed with); then it is
// re-attached to when it still carries the run's work, or given the
// remaining phases.
func (d *batchDecision) newSession(cur *sessionObs) {
	if d.b.Seen != cur.ref {
		d.b.Seen, d.b.SeenStored = cur.ref, cur.stored
		if cur.held != nil {
			d.add(action{kind: actNote, phase: cmp.Or(d.b.Current, remaining(d.r, d.b.Phases)[0]),
				msg: fmt.Sprintf("runner boot %s holds no assignment yet: %s", cur.ref.BootID, cur.held.Why)})
		}
		d.add(action{kind: actRequeue})
		return
	}
	if cur.held != nil {
		return // held: looked at again when the claim settles (runnerPhases)
	}
	if reattachable(d.r, cur, d.b.SeenStored) {
		// The runner kept working while its stream was down (or while the
		// coordinator restarted): follow it, don't restart it.
		st := cur.state
		d.r.Pipeline.Handled = cur.ref
		d.b.Bound, d.b.LastAlive, d.b.HadRunner = cur.ref, d.obs.now, true
		phase, _ := modes.ParsePhase(st.GetPhase()) // the runner's word: none when not a phase
		d.add(action{kind: actReattach, phase: phase, session: cur.ref,
			msg: fmt.Sprintf("runner re-attached mid-phase %s (last seq %d)", st.GetPhase(), st.GetLastEventSeq())})
		return
	}
	left := remaining(d.r, d.b.Phases)
	if !d.b.Bound.IsZero() || d.r.ResumeCount > 0 || d.r.Pipeline.Attempts(left[0]) > 0 {
		d.r.ResumeCount++
	}
	// A restarted coordinator reads the runner's events from where the
	// assignment was sent.
	d.b.Cursor = max(d.b.Cursor, d.obs.readTo)
	d.add(action{kind: actAssign, phases: left, session: cur.ref})
}

// reattachable says whether a connected runner is still carrying this run's
// work, so that it is followed rather than given the phases again. Its
// Hello said so (mid-phase, or done with events still to replay beyond
// stored, the events of its boot the store held when the batch first saw
// it), and neither has the Hello gone stale: since it, the runner's latest
// stored phase event is not a phase end (it finished what it was doing; a
// new assignment is then safe: a runner still busy with the run ignores
// it) and the run has not given the session work.
func reattachable(r *store.Run, s *sessionObs, stored uint64) bool {
	if s.ref == r.Pipeline.Handled {
		return false
	}
	st := s.state
	if st.GetRunId() != r.ID {
		return false
	}
	switch {
	case s.since == runstate.EventPhaseStart:
		return true
	case s.since == runstate.EventPhaseEnd:
		return false
	case st.GetKind() == curev1.RunnerState_IN_PHASE:
		return true
	case st.GetKind() == curev1.RunnerState_DONE:
		return st.GetLastEventSeq() > stored
	}
	return false
}

// checkDeadline fails the running in-band phase once its deadline passed
// without its end.
func (d *batchDecision) checkDeadline() {
	cur := d.b.Current
	if cur == "" {
		return
	}
	deadline := d.r.Pipeline.Phase(cur).Deadline
	if deadline.IsZero() || !d.obs.now.After(deadline) {
		return
	}
	budget, why := phaseBudget(cur, d.pol.suite, d.pol.phaseBound)
	msg := fmt.Sprintf("%s %s", noPhaseEnd, budget)
	if why != "" {
		msg += " (" + why + ")"
	}
	d.add(action{kind: actFail, phase: cur, msg: msg})
}

// phaseEndOutcome is the outcome a runner's phase_end event reports; a
// status the coordinator cannot read is a failure saying so.
func phaseEndOutcome(ev store.Event) outcome {
	st, err := runstate.ParsePhase(ev.Status)
	switch {
	case err != nil:
		return outcome{status: curev1.PhaseStatus_PHASE_FAILED, msg: fmt.Sprintf("phase_end event %d: %v: %s", ev.ID, err, ev.Message)}
	case st == curev1.PhaseStatus_PHASE_RUNNING:
		return outcome{status: curev1.PhaseStatus_PHASE_FAILED, msg: fmt.Sprintf("phase_end event %d says the phase is still running: %s", ev.ID, ev.Message)}
	}
	return outcome{status: st, msg: ev.Message}
}

// startAttempt is a phase attempt's start in the run's status: the
// coordinator's clock orders phases (a node's clock is not trusted).
func startAttempt(r *store.Run, phase modes.PhaseName, now time.Time) {
	r.Pipeline.SetPhase(phase, store.PhaseState{Attempts: r.Pipeline.Attempts(phase) + 1, StartedAt: now.UTC()})
	r.Phase = phase
}

// endAttempt is a phase attempt's end in the run's status.
func endAttempt(r *store.Run, phase modes.PhaseName, out outcome) {
	if out.status != curev1.PhaseStatus_PHASE_FAILED && !slices.Contains(r.CompletedPhases, phase) {
		r.CompletedPhases = append(r.CompletedPhases, phase)
	}
}

// cureObs is one look at a wait for the run's runner to register.
type cureObs struct {
	now     time.Time
	session *sessions.Session // the node's current session (nil: none)
	macs    []string          // the node's MACs in the inventory now (nil: not read)
}

// decideWaitCURE is the wait_for_cure decision: done once a runner of the
// run registered, failed past the phase's deadline (set when the attempt
// began waiting). The node's MACs changing in the inventory meanwhile (an
// operator fixed a mistyped one) re-arm the boot at once, with a fresh
// deadline: the node idles in its firmware after a network boot nobody
// answered, and would otherwise wait out the budget.
func decideWaitCURE(r store.Run, budget time.Duration, obs cureObs) (store.Run, []action) {
	r = cloneRun(r)
	if s := obs.session; s != nil && s.RunID == r.ID {
		msg := fmt.Sprintf("runner registered: boot_id=%s guest_uptime=%dms", s.BootID, s.Hello.GetUptimeMs())
		if t := r.Pipeline.BootRequestedAt; !t.IsZero() {
			msg += fmt.Sprintf(" power_on_to_registered=%s", s.ConnectedAt.Sub(t).Round(time.Millisecond))
		}
		r.Pipeline.CUREMACs = nil
		return r, []action{{kind: actDone, msg: msg}}
	}
	if was := r.Pipeline.CUREMACs; obs.macs != nil && !slices.Equal(was, obs.macs) {
		r.Pipeline.CUREMACs = slices.Clone(obs.macs)
		if was != nil {
			r.Pipeline.SetDeadline(modes.WaitForCURE, obs.now.Add(budget))
			return r, []action{{kind: actRebootCURE, phase: modes.WaitForCURE, msg: fmt.Sprintf("the node's MACs changed in the inventory while it waited for CURE (now %s, were %s)",
				strings.Join(obs.macs, ","), strings.Join(was, ","))}}
		}
	}
	if deadline := r.Pipeline.Phase(modes.WaitForCURE).Deadline; !obs.now.Before(deadline) {
		r.Pipeline.CUREMACs = nil
		return r, []action{{kind: actEndBootWindow}, {kind: actFail, phase: modes.WaitForCURE, msg: fmt.Sprintf("runner did not register within %s", budget)}}
	}
	return r, nil
}

// hostObs is one look at the wait for the installed OS.
type hostObs struct {
	now  time.Time
	tail int64 // the run's last stored event id
	// cure is a CURE session of the run connected now (nil: none).
	cure *sessions.Session
	// events are the run's stored events after the wait's cursor (and
	// after those earlier looks read: the cursor itself stays, it names
	// the wait's callback).
	events []store.Event
}

// decideHostOS is the wait_for_host_os decision. Each attempt reboots out
// of CURE once (the status records which attempt did), then waits for the
// installed OS's callback event after the reboot, until the deadline.
func decideHostOS(r store.Run, budget time.Duration, obs hostObs) (store.Run, []action) {
	r = cloneRun(r)
	h := &r.Pipeline.Host
	attempt := r.Pipeline.Attempts(modes.WaitForHostOS)
	if h.RebootAttempt != attempt {
		// No callback before this attempt's reboot counts.
		h.WaitFrom, h.RebootedAt = obs.tail, time.Time{}
		return r, []action{{kind: actRebootOutOfCURE, phase: modes.WaitForHostOS}, {kind: actRequeue}}
	}
	if s := obs.cure; s != nil {
		// A CURE session of the run that reconnects after the reboot order
		// (a runner replaying its last events before it resets) is told
		// again: while it is connected the installed OS's callback is
		// refused, so it must not linger.
		return r, []action{{kind: actNote, phase: modes.WaitForHostOS, msg: "CURE session of boot " + s.BootID + " connected after the reboot order: told to reboot again"},
			{kind: actOrderReboot, phase: modes.WaitForHostOS}, {kind: actRequeue}}
	}
	for _, ev := range obs.events {
		if ev.Kind == runstate.EventHostReady {
			return r, []action{{kind: actDone, msg: ev.Message}}
		}
	}
	if deadline := r.Pipeline.Phase(modes.WaitForHostOS).Deadline; !deadline.IsZero() && obs.now.After(deadline) {
		return r, []action{{kind: actFail, phase: modes.WaitForHostOS, msg: fmt.Sprintf("installed OS did not call back within %s", budget)}}
	}
	return r, nil
}
