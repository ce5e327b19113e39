package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/tools/buildinfo"
	"google.golang.org/protobuf/encoding/protojson"
)

func rebootMsg(reason string) *curev1.CoordinatorMessage {
	return &curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_Reboot{Reboot: &curev1.Reboot{Reason: reason}}}
}

// runnerPhases hands a batch of in-band phases to the node's runner and
// follows them through the store until each ends. It returns the first phase
// that failed (with its message), or an error when the node is lost for good.
//
// The runner may vanish and come back: a runner that reports IN_PHASE for
// this run is re-attached to (its work goes on); a fresh one gets the
// remaining phases again with its resume count raised. Each look is
// reconciled from the run's stored status (decideBatch); the batch's state
// lives there, so a coordinator stopped mid-batch leaves it to the next.
func (bc *batchCtl) runnerPhases(ctx context.Context, r *store.Run, batch []modes.PhaseName, log *slog.Logger) (modes.PhaseName, string, error) {
	pol := bc.batchPolicy(r, batch, log)
	signal, unsub := bc.cfg.Store.Signals().Subscribe(r.ID)
	defer unsub()
	defer func() {
		if ctx.Err() == nil { // keep it for the next coordinator when stopping
			r.Pipeline.Batch = nil
			bc.save(ctx, r)
		}
	}()
	w := &batchWatch{fresh: true}
	for {
		obs, changed, more, err := bc.observeBatch(ctx, r, w)
		if err != nil {
			return "", "", err
		}
		next, acts := decideBatch(*r, pol, obs)
		*r = next
		res := bc.applyBatch(ctx, r, acts, log)
		bc.save(ctx, r)
		switch {
		case res.end:
			return res.phase, res.msg, res.err
		case res.requeue || more:
			continue
		}
		look := 5 * time.Second
		if so := obs.session; so.unsettled(r.ID) && !so.held.At.IsZero() {
			look = min(look, time.Until(so.held.At)+10*time.Millisecond) // the held session's claim settles
		}
		if (requeue{sched: bc.sched, session: changed, events: signal}).until(ctx, time.Now().Add(look)) != nil {
			return "", "", errStopped
		}
	}
}

// batchPolicy is what the run's batch is judged by.
func (bc *batchCtl) batchPolicy(r *store.Run, batch []modes.PhaseName, log *slog.Logger) batchPolicy {
	s := bc.batchSuite(r, batch, log)
	return batchPolicy{phases: batch, suite: s, phaseBound: bc.cfg.Timeouts.RunnerPhase,
		reconnect: bc.cfg.Timeouts.Reconnect, waitForCURE: bc.cfg.Timeouts.WaitForCURE, disconnects: bc.cfg.Budgets.Disconnects,
		pairs: pairConfigs(s)}
}

// batchWatch is where a batch's observer has read the run's events to: a
// read position, not a decision (events that ask for nothing move it past
// the stored cursor without a write).
type batchWatch struct {
	fresh  bool
	readTo int64
}

// maxEventsPerLook bounds the events one look reads; more are read by the
// next look at once.
const maxEventsPerLook = 1000

// observeBatch looks at the batch: its events since the read position, the
// node's current session, the clock. changed wakes the caller when the
// node's session changes; more says events were left to read.
func (bc *batchCtl) observeBatch(ctx context.Context, r *store.Run, w *batchWatch) (obs batchObs, changed <-chan struct{}, more bool, err error) {
	obs = batchObs{now: time.Now(), fresh: w.fresh}
	from := w.readTo
	if w.fresh {
		if b := r.Pipeline.Batch; b != nil {
			from = b.Cursor // a coordinator stopped mid-batch: act on what it left
		} else if obs.tail, err = bc.host.lastEventID(ctx, r.ID); err != nil {
			return obs, nil, false, err
		} else {
			from = obs.tail
		}
		w.fresh = false
	}
	if obs.events, err = bc.cfg.Store.Events(ctx, r.ID, from, maxEventsPerLook); err != nil {
		return obs, nil, false, err
	}
	obs.readTo = from
	if n := len(obs.events); n > 0 {
		obs.readTo = obs.events[n-1].ID
	}
	w.readTo = obs.readTo
	changed = bc.cfg.Hub.Changed(r.NodeID)
	if obs.session, err = bc.observeSession(ctx, r, obs.fresh); err != nil {
		return obs, nil, false, err
	}
	if obs.pairs, err = bc.observePairs(ctx, r); err != nil {
		return obs, nil, false, err
	}
	return obs, changed, len(obs.events) == maxEventsPerLook, nil
}

// observeSession is the node's current session as a batch sees it; for a
// session the batch does not follow yet, what its runner has stored.
func (bc *batchCtl) observeSession(ctx context.Context, r *store.Run, fresh bool) (*sessionObs, error) {
	s := bc.cfg.Hub.Current(r.NodeID)
	if s == nil {
		return nil, nil
	}
	so := &sessionObs{ref: sessionRef(s), runID: s.RunID, state: s.Hello.GetState(), heartbeat: s.LastHeartbeat()}
	if b := r.Pipeline.Batch; !fresh && b != nil && so.ref == b.Bound || s.RunID != r.ID {
		return so, nil
	}
	claim, err := bc.boot.Claim(ctx, *r, s)
	if err != nil {
		return nil, err
	}
	if !claim.Settled {
		so.held = &claim
	}
	if so.stored, err = bc.cfg.Store.MaxSeq(ctx, r.ID, s.BootID); err != nil {
		return nil, err
	}
	if so.since, err = bc.cfg.Store.LastPhaseEventKind(ctx, r.ID, s.BootID, so.state.GetLastEventSeq()); err != nil {
		return nil, err
	}
	return so, nil
}

// batchResult is how a look at a batch ends.
type batchResult struct {
	end, requeue bool
	phase        modes.PhaseName // the failed phase
	msg          string
	err          error // the node is lost for good
}

// applyBatch carries out a batch decision's actions, in order.
func (bc *batchCtl) applyBatch(ctx context.Context, r *store.Run, acts []action, log *slog.Logger) batchResult {
	for _, a := range acts {
		switch a.kind {
		case actRecordStart:
			bc.driver.recordStart(ctx, r, a.phase, runstate.SourceRunner)
		case actRecordEnd:
			bc.driver.recordEnd(ctx, r, a.phase, a.out, a.dur, runstate.SourceRunner)
		case actRebootCURE:
			if err := bc.power.rebootIntoCURE(ctx, r, a.msg); err != nil {
				return batchResult{end: true, err: err}
			}
			rebootedIntoCURE(r.Pipeline.Batch, time.Now())
		case actEvent:
			bc.coordEvent(ctx, *r, a.phase, runstate.EventInfo, "", a.msg, 0)
		case actNote, actReattach:
			bc.coordNote(ctx, *r, a.phase, a.msg)
		case actRetry:
			bc.cfg.Metrics.Retry(a.phase, a.cause)
		case actPairSend:
			bc.sendPair(r, a, log)
		case actAssign:
			if err := bc.sendAssignment(ctx, r, a, log); err != nil {
				return batchResult{end: true, err: err}
			}
		case actFail:
			return batchResult{end: true, phase: a.phase, msg: a.msg}
		case actLost:
			return batchResult{end: true, err: errors.New(a.msg)}
		case actDone:
			return batchResult{end: true}
		case actRequeue:
			return batchResult{requeue: true}
		case actEndBootWindow, actRebootOutOfCURE, actOrderReboot:
			panic(fmt.Sprintf("pipeline: batch decision asked for wait action %s", a.kind))
		default:
			panic(fmt.Sprintf("pipeline: batch decision asked for action %s", a.kind))
		}
	}
	return batchResult{}
}

// sendAssignment gives the session the batch's remaining phases; only a
// session that took them is followed. The status (cursor, resume count,
// host token) is saved before the runner can act on it.
func (bc *batchCtl) sendAssignment(ctx context.Context, r *store.Run, a action, log *slog.Logger) error {
	s := bc.cfg.Hub.Current(r.NodeID)
	if s == nil || sessionRef(s) != a.session {
		return nil // gone meanwhile: the next look decides again
	}
	asg, err := bc.assignment(ctx, r, a.phases, s)
	if err != nil {
		return err
	}
	bc.save(ctx, r)
	if err := s.Send(&curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_Assignment{Assignment: asg}}); err != nil {
		log.Warn("send assignment", "err", err)
		return nil
	}
	b := r.Pipeline.Batch
	r.Pipeline.Handled = a.session
	b.Bound, b.LastAlive, b.HadRunner = a.session, time.Now(), true
	bc.save(ctx, r)
	bc.coordNote(ctx, *r, a.phases[0], fmt.Sprintf("assignment sent: phases=%s resume_count=%d", strings.Join(modes.PhaseStrings(a.phases), ","), r.ResumeCount))
	return nil
}

// sendPair sends the bound session's runner a node-pair message: its
// schedule (stamped with the coordinator's clock now, by which the runner
// places the plan's times) or its verdicts. A session gone meanwhile is
// given it again when its runner reconnects (the status records the
// session it went to).
func (bc *batchCtl) sendPair(r *store.Run, a action, log *slog.Logger) {
	s := bc.cfg.Hub.Current(r.NodeID)
	if s == nil || sessionRef(s) != a.session {
		return
	}
	if sc := a.pair.GetPairSchedule(); sc != nil {
		sc.NowUnixMs = time.Now().UnixMilli()
	}
	if err := s.Send(a.pair); err != nil {
		log.Warn("send node-pair message", "err", err)
	}
}

// noPhaseEnd starts the failure message of an in-band phase that sent no
// phase_end in time (a retry of cause phase_timeout).
const noPhaseEnd = "no phase_end within"

func rebootRequired(ev store.Event) bool {
	if len(ev.Payload) == 0 {
		return false
	}
	var pe curev1.Event
	if err := protojson.Unmarshal(ev.Payload, &pe); err != nil {
		return false
	}
	return pe.GetPhaseEnd().GetRebootRequired()
}

// assignment builds what the runner needs for the remaining phases, and no
// more: PSIDs only for a sed_revert in a mode that wipes, for the disks the
// wipe selects; a host callback token only for an os_install, minted anew.
func (bc *batchCtl) assignment(ctx context.Context, r *store.Run, phases []modes.PhaseName, sess *sessions.Session) (*curev1.Assignment, error) {
	raw, doc, err := bc.cfg.Manifests.LoadDocument(r.Manifest)
	if err != nil {
		return nil, err
	}
	n, err := bc.cfg.Store.GetNode(ctx, r.NodeID)
	if err != nil {
		return nil, err
	}
	mode := r.Mode
	var psids map[string]string
	if slices.Contains(phases, modes.SEDRevert) && (mode == modes.Provision || mode == modes.Wipe) {
		if psids, err = bc.psidsFor(n, r.Manifest, sess.Hello.GetInventory()); err != nil {
			return nil, err
		}
	}
	// A suite run's hardware check compares against the node's SKU, which
	// the suite does not carry. A SKU that does not load leaves the check
	// skipped (the runner says so) rather than the diagnostic undone.
	var skuYAML []byte
	var skuName string
	if slices.Contains(phases, modes.Hardware) && (mode == modes.Diagnostic || mode == modes.Burnin) && n.SKU != "" {
		if raw, _, err := bc.cfg.Manifests.Load(n.SKU); err != nil {
			bc.coordEvent(ctx, *r, modes.Hardware, runstate.EventInfo, "", fmt.Sprintf("node SKU %s not sent for the hardware check: %v", n.SKU, err), 0)
		} else {
			skuYAML, skuName = raw, n.SKU+".yaml"
		}
	}
	hostname := n.Hostname
	if hostname == "" {
		hostname = n.ID
	}
	base := strings.TrimRight(bc.cfg.BaseURL, "/")
	var firstBoot *curev1.FirstBoot
	if err := bc.day2.forgetInstalledOS(ctx, r, phases); err != nil {
		return nil, err
	}
	if slices.Contains(phases, modes.OSInstall) {
		tok := NewToken()
		r.Pipeline.AddHostToken(store.TokenHash(tok))
		bc.save(ctx, r)
		firstBoot = &curev1.FirstBoot{
			Hostname:      hostname,
			InstanceId:    r.ID,
			CallbackUrl:   fmt.Sprintf("%s/v1/nodes/%s/ready", base, n.ID),
			CallbackToken: tok,
		}
	}
	var resume *curev1.SuiteResume
	if slices.Contains(phases, modes.Validate) {
		if resume, err = bc.suiteResume(ctx, r); err != nil {
			return nil, err
		}
	}
	return &curev1.Assignment{
		SuiteResume:     resume,
		HeartbeatMs:     heartbeatEvery(bc.cfg.Timeouts.Reconnect).Milliseconds(),
		RunId:           r.ID,
		NodeId:          r.NodeID,
		Mode:            modes.ToProto(r.Mode),
		ManifestYaml:    raw,
		ManifestName:    r.Manifest + ".yaml",
		Resume:          &curev1.ResumeState{PhaseReached: string(r.Phase), ResumeCount: uint32(r.ResumeCount), CompletedPhases: modes.PhaseStrings(r.CompletedPhases)},
		Phases:          modes.PhaseStrings(phases),
		ArtifactBaseUrl: base + "/artifacts/",
		Psids:           psids,
		FirstBoot:       firstBoot,
		SkuYaml:         skuYAML,
		SkuName:         skuName,
		ToolBundle:      bc.toolBundleRef(ctx, r, phases, doc),
		// A runner that does not know a phase names this beside its own.
		CoordinatorVersion: coordinatorVersion,
	}, nil
}

// coordinatorVersion is this coordinator's build, sent in every assignment.
var coordinatorVersion = buildinfo.Version("")

// batchSuite is the run's validation suite when the batch runs one (nil
// otherwise, or when it does not load: the runner then fails the phase
// saying why, within the fixed in-band bound).
func (bc *batchCtl) batchSuite(r *store.Run, batch []modes.PhaseName, log *slog.Logger) *manifests.ValidationSuite {
	if !slices.Contains(batch, modes.Validate) {
		return nil
	}
	_, doc, err := bc.cfg.Manifests.LoadDocument(r.Manifest)
	if err != nil || doc.Suite == nil {
		log.Warn("validate phase without a suite deadline", "manifest", r.Manifest, "err", err)
		return nil
	}
	return doc.Suite
}

// suiteResume is the Assignment's SuiteResume when the validate phase is
// given again while its latest attempt never ended (the node lost it: a
// reset, a crash), nil for a first try or a retry after a failure. It
// records the resume in the run's timeline.
func (bc *batchCtl) suiteResume(ctx context.Context, r *store.Run) (*curev1.SuiteResume, error) {
	ps, err := bc.cfg.Store.Phases(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	interrupted := false
	for _, p := range ps {
		interrupted = interrupted || (p.Name == modes.Validate && p.Status == curev1.PhaseStatus_PHASE_RUNNING)
	}
	if !interrupted {
		return nil, nil
	}
	_, doc, err := bc.cfg.Manifests.LoadDocument(r.Manifest)
	if err != nil {
		return nil, err
	}
	if doc.Suite == nil {
		return nil, nil // the runner refuses it, saying so
	}
	var last *curev1.Progress
	if rec, err := bc.cfg.Store.RunProgress(ctx, r.ID); err == nil {
		last = &curev1.Progress{}
		if err := protojson.Unmarshal(rec.JSON, last); err != nil {
			return nil, fmt.Errorf("run %s: stored progress: %w", r.ID, err)
		}
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	sr, note := planSuiteResume(doc.Suite, last)
	bc.coordEvent(ctx, *r, modes.Validate, runstate.EventInfo, "", note, 0)
	return sr, nil
}
