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
	"github.com/cure-oss/cure/provisioner-lite/metrics"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
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
// remaining phases again with its resume count raised.
func (e *Engine) runnerPhases(ctx context.Context, r *store.Run, batch []string, log *slog.Logger) (string, string, error) {
	remaining := slices.Clone(batch)
	cursor, err := e.lastEventID(ctx, r.ID)
	if err != nil {
		return "", "", err
	}
	// A coordinator that died mid-batch may have stored runner events it
	// never acted on: resume reading from where the assignment was sent.
	from, hadRunner, err := r.AssignCursor()
	if err != nil {
		return "", "", err
	}
	if from > 0 && from < cursor {
		cursor = from
	}
	defer func() {
		if ctx.Err() == nil { // keep it for the next coordinator when stopping
			r.ClearAssignCursor()
			e.save(ctx, r)
		}
	}()
	signal, unsub := e.cfg.Store.Subscribe(r.ID)
	defer unsub()

	if why := r.FreshCURE(); why != "" {
		if err := e.rebootIntoCURE(ctx, r, "run "+why+": its earlier CURE session ended with the run"); err != nil {
			return "", "", err
		}
		r.SetFreshCURE("")
		e.save(ctx, r)
	}
	var sess *sessions.Session
	var lostSince time.Time
	// A run resumed mid-batch (coordinator restart or takeover) had a
	// runner: it reconnects within the reconnect budget or is gone (the
	// node reset meanwhile), not the whole PXE budget.
	current := ""
	var deadline time.Time
	suite := e.batchSuite(r, batch, log)
	if hadRunner {
		// The coordinator stopped while the runner was in a phase: the
		// phase, its deadline and its attempt carry on (the phase_start
		// was acted on; the cursor is past it).
		current, deadline = e.runningPhase(ctx, r, remaining, suite)
	}
	// lastAlive is the last sign of life of the followed runner: its
	// session (re)attached, a phase started, or (LastHeartbeat) a
	// heartbeat. A validate phase without one for the reconnect budget
	// has lost its runner, even with its stream up.
	var lastAlive time.Time
	// dead is a session whose runner stopped sending heartbeats: its
	// stream may outlive the node's reset until keepalives close it.
	var dead *sessions.Session
	// A new session is judged only after the events it had stored when it
	// was first seen have been acted on (see reattachable).
	var seen *sessions.Session
	var seenStored uint64

	for len(remaining) > 0 {
		// Stored events first: after a coordinator restart the runner may
		// have finished phases this pipeline has not acted on yet, and a new
		// assignment would run them (and mint a new host token) again.
		evs, err := e.cfg.Store.Events(ctx, r.ID, cursor, 1000)
		if err != nil {
			return "", "", err
		}
		for _, ev := range evs {
			cursor = ev.ID
			if ev.Source != runstate.SourceRunner || !slices.Contains(remaining, ev.Phase) {
				continue
			}
			switch ev.Kind {
			case runstate.EventPhaseStart:
				current = ev.Phase
				budget, _ := phaseBudget(ev.Phase, suite, e.cfg.Timeouts.RunnerPhase)
				deadline = time.Now().Add(budget)
				lastAlive = time.Now()
				r.SetPhaseDeadline(ev.Phase, deadline)
				// Acted on: a restarted coordinator reads on from here, and
				// does not start the phase's attempt a second time.
				r.SetAssignCursor(ev.ID)
				e.begin(ctx, r, ev.Phase, runstate.SourceRunner)
			case runstate.EventPhaseEnd:
				r.SetAssignCursor(ev.ID)
				out := outcome{status: ev.Status, msg: ev.Message}
				e.end(ctx, r, ev.Phase, out, time.Duration(ev.DurationMs)*time.Millisecond, runstate.SourceRunner)
				if out.status == runstate.PhaseFailed {
					return ev.Phase, ev.Message, nil
				}
				remaining = slices.DeleteFunc(remaining, func(p string) bool { return p == ev.Phase })
				if rebootRequired(ev) {
					if err := e.rebootIntoCURE(ctx, r, ev.Phase+" needs a reboot to activate"); err != nil {
						return "", "", err
					}
					sess = nil
					lostSince = time.Now()
					hadRunner = false
				}
			}
		}
		if len(remaining) == 0 {
			break
		}
		changed := e.cfg.Hub.Changed(r.NodeID)
		cur := e.cfg.Hub.Current(r.NodeID)
		if cur != nil && (cur.RunID != r.ID || cur == dead) {
			cur = nil // a runner booted for another run is not ours; a silent one is gone
		}
		if cur != nil && cur == sess && current == modes.Validate {
			last := lastAlive
			if hb := cur.LastHeartbeat(); hb.After(last) {
				last = hb
			}
			if silent := time.Since(last); silent > e.cfg.Timeouts.Reconnect {
				e.coordEvent(ctx, *r, current, runstate.EventInfo, "", fmt.Sprintf("no heartbeat from the runner for %s (budget %s): the runner counts as lost",
					silent.Round(time.Second), e.cfg.Timeouts.Reconnect), 0)
				// sess stays the silent one: the reconnect budget applies,
				// and it has run out.
				dead, cur = cur, nil
				lostSince = last
			}
		}
		switch {
		case cur == nil:
			if lostSince.IsZero() {
				lostSince = time.Now()
				if sess != nil {
					e.coordNote(ctx, *r, current, "runner disconnected")
				}
			}
			budget := e.cfg.Timeouts.Reconnect
			if sess == nil && !hadRunner {
				budget = e.cfg.Timeouts.WaitForCURE
			}
			if time.Since(lostSince) > budget {
				r.Disconnects++
				e.save(ctx, r)
				if r.Disconnects > e.cfg.Budgets.Disconnects {
					return "", "", fmt.Errorf("runner lost %d times (budget %d) during %s", r.Disconnects, e.cfg.Budgets.Disconnects, strings.Join(remaining, ","))
				}
				e.cfg.Metrics.Retry(nonEmpty(current, remaining[0]), metrics.CauseRunnerLost)
				if err := e.rebootIntoCURE(ctx, r, fmt.Sprintf("runner gone for %s during %s", budget, nonEmpty(current, remaining[0]))); err != nil {
					return "", "", err
				}
				lostSince = time.Now()
				sess = nil
				hadRunner = false // a fresh CURE boots: the PXE budget applies
			}
		case cur != sess:
			lostSince = time.Time{}
			if seen != cur {
				// Snapshot what this runner has stored, then read the
				// events again before deciding: a runner that finished its
				// phases while the coordinator was away may have replayed
				// them all between the read above and now, and a new
				// assignment would run them again (and void the host token
				// the node was installed with).
				stored, err := e.cfg.Store.MaxSeq(ctx, r.ID, cur.BootID)
				if err != nil {
					return "", "", err
				}
				seen, seenStored = cur, stored
				continue
			}
			since, err := e.cfg.Store.LastPhaseEventKind(ctx, r.ID, cur.BootID, cur.Hello.GetState().GetLastEventSeq())
			if err != nil {
				return "", "", err
			}
			if e.reattachable(r, cur, seenStored, since) {
				st := cur.Hello.GetState()
				// The runner kept working while its stream was down (or while
				// the coordinator restarted): follow it, don't restart it.
				e.coordNote(ctx, *r, st.GetPhase(), fmt.Sprintf("runner re-attached mid-phase %s (last seq %d)", st.GetPhase(), st.GetLastEventSeq()))
				e.markHandled(cur)
				sess, lastAlive = cur, time.Now()
				break
			}
			if sess != nil || r.ResumeCount > 0 || e.attempts(r, remaining[0]) > 0 {
				r.ResumeCount++
			}
			a, err := e.assignment(ctx, r, remaining, cur)
			if err != nil {
				return "", "", err
			}
			r.SetAssignCursor(cursor)
			e.save(ctx, r)
			if err := cur.Send(&curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_Assignment{Assignment: a}}); err != nil {
				log.Warn("send assignment", "err", err)
				break
			}
			e.markHandled(cur)
			e.save(ctx, r)
			e.coordNote(ctx, *r, remaining[0], fmt.Sprintf("assignment sent: phases=%s resume_count=%d", strings.Join(remaining, ","), r.ResumeCount))
			sess, lastAlive = cur, time.Now()
		}

		if len(remaining) == 0 {
			break
		}
		if current != "" && !deadline.IsZero() && time.Now().After(deadline) {
			budget, why := phaseBudget(current, suite, e.cfg.Timeouts.RunnerPhase)
			msg := fmt.Sprintf("%s %s", noPhaseEnd, budget)
			if why != "" {
				msg += " (" + why + ")"
			}
			return current, msg, nil
		}
		select {
		case <-ctx.Done():
			return "", "", errStopped
		case <-signal:
		case <-changed:
		case <-time.After(5 * time.Second):
		}
	}
	return "", "", nil
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
func (e *Engine) assignment(ctx context.Context, r *store.Run, phases []string, sess *sessions.Session) (*curev1.Assignment, error) {
	raw, doc, err := e.cfg.Manifests.LoadDocument(r.Manifest)
	if err != nil {
		return nil, err
	}
	n, err := e.cfg.Store.GetNode(ctx, r.NodeID)
	if err != nil {
		return nil, err
	}
	mode := modes.Mode(r.Mode)
	var psids map[string]string
	if slices.Contains(phases, modes.SEDRevert) && (mode == modes.Provision || mode == modes.Wipe) {
		if psids, err = e.psidsFor(n, r.Manifest, sess.Hello.GetInventory()); err != nil {
			return nil, err
		}
	}
	// A suite run's hardware check compares against the node's SKU, which
	// the suite does not carry. A SKU that does not load leaves the check
	// skipped (the runner says so) rather than the diagnostic undone.
	var skuYAML []byte
	var skuName string
	if slices.Contains(phases, modes.Hardware) && (mode == modes.Diagnostic || mode == modes.Burnin) && n.SKU != "" {
		if raw, _, err := e.cfg.Manifests.Load(n.SKU); err != nil {
			e.coordEvent(ctx, *r, modes.Hardware, runstate.EventInfo, "", fmt.Sprintf("node SKU %s not sent for the hardware check: %v", n.SKU, err), 0)
		} else {
			skuYAML, skuName = raw, n.SKU+".yaml"
		}
	}
	hostname := n.Hostname
	if hostname == "" {
		hostname = n.ID
	}
	base := strings.TrimRight(e.cfg.BaseURL, "/")
	var firstBoot *curev1.FirstBoot
	if err := e.forgetInstalledOS(ctx, r, phases); err != nil {
		return nil, err
	}
	if slices.Contains(phases, modes.OSInstall) {
		tok := NewToken()
		r.AddHostToken(store.TokenHash(tok))
		e.save(ctx, r)
		firstBoot = &curev1.FirstBoot{
			Hostname:      hostname,
			InstanceId:    r.ID,
			CallbackUrl:   fmt.Sprintf("%s/v1/nodes/%s/ready", base, n.ID),
			CallbackToken: tok,
		}
	}
	var resume *curev1.SuiteResume
	if slices.Contains(phases, modes.Validate) {
		if resume, err = e.suiteResume(ctx, r); err != nil {
			return nil, err
		}
	}
	return &curev1.Assignment{
		SuiteResume:     resume,
		HeartbeatMs:     heartbeatEvery(e.cfg.Timeouts.Reconnect).Milliseconds(),
		RunId:           r.ID,
		NodeId:          r.NodeID,
		Mode:            modes.ToProto(modes.Mode(r.Mode)),
		ManifestYaml:    raw,
		ManifestName:    r.Manifest + ".yaml",
		Resume:          &curev1.ResumeState{PhaseReached: r.Phase, ResumeCount: uint32(r.ResumeCount), CompletedPhases: r.CompletedPhases},
		Phases:          phases,
		ArtifactBaseUrl: base + "/artifacts/",
		Psids:           psids,
		FirstBoot:       firstBoot,
		SkuYaml:         skuYAML,
		SkuName:         skuName,
		ToolBundle:      e.toolBundleRef(ctx, r, phases, doc),
	}, nil
}

// batchSuite is the run's validation suite when the batch runs one (nil
// otherwise, or when it does not load: the runner then fails the phase
// saying why, within the fixed in-band bound).
func (e *Engine) batchSuite(r *store.Run, batch []string, log *slog.Logger) *manifests.ValidationSuite {
	if !slices.Contains(batch, modes.Validate) {
		return nil
	}
	_, doc, err := e.cfg.Manifests.LoadDocument(r.Manifest)
	if err != nil || doc.Suite == nil {
		log.Warn("validate phase without a suite deadline", "manifest", r.Manifest, "err", err)
		return nil
	}
	return doc.Suite
}

// runningPhase is the in-band phase a restarted coordinator finds running
// (started, not ended) and its deadline as stored; "" when none.
func (e *Engine) runningPhase(ctx context.Context, r *store.Run, remaining []string, suite *manifests.ValidationSuite) (string, time.Time) {
	if !slices.Contains(remaining, r.Phase) {
		return "", time.Time{}
	}
	ps, err := e.cfg.Store.Phases(ctx, r.ID)
	if err != nil {
		return "", time.Time{}
	}
	for _, p := range ps {
		if p.Name != r.Phase || p.Status != runstate.PhaseRunning {
			continue
		}
		d, err := r.PhaseDeadline(p.Name)
		if err != nil || d.IsZero() {
			budget, _ := phaseBudget(p.Name, suite, e.cfg.Timeouts.RunnerPhase)
			d = p.StartedAt.Add(budget)
		}
		return p.Name, d
	}
	return "", time.Time{}
}

// suiteResume is the Assignment's SuiteResume when the validate phase is
// given again while its latest attempt never ended (the node lost it: a
// reset, a crash), nil for a first try or a retry after a failure. It
// records the resume in the run's timeline.
func (e *Engine) suiteResume(ctx context.Context, r *store.Run) (*curev1.SuiteResume, error) {
	ps, err := e.cfg.Store.Phases(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	interrupted := false
	for _, p := range ps {
		interrupted = interrupted || (p.Name == modes.Validate && p.Status == runstate.PhaseRunning)
	}
	if !interrupted {
		return nil, nil
	}
	_, doc, err := e.cfg.Manifests.LoadDocument(r.Manifest)
	if err != nil {
		return nil, err
	}
	if doc.Suite == nil {
		return nil, nil // the runner refuses it, saying so
	}
	var last *curev1.Progress
	if rec, err := e.cfg.Store.RunProgress(ctx, r.ID); err == nil {
		last = &curev1.Progress{}
		if err := protojson.Unmarshal(rec.JSON, last); err != nil {
			return nil, fmt.Errorf("run %s: stored progress: %w", r.ID, err)
		}
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	sr, note := planSuiteResume(doc.Suite, last)
	e.coordEvent(ctx, *r, modes.Validate, runstate.EventInfo, "", note, 0)
	return sr, nil
}

// reattachable says whether a connected runner is still carrying this run's
// work, so that it is followed rather than given the phases again. Its
// Hello said so (mid-phase, or done with events still to replay beyond
// stored, the events of its boot the store held before the pipeline last
// read them), and neither has the Hello gone stale: since it, the runner's
// latest stored phase event (since) is not a phase end (it finished what it
// was doing; a new assignment is then safe: a runner still busy with the run
// ignores it) and this engine has not given the session work.
func (e *Engine) reattachable(r *store.Run, s *sessions.Session, stored uint64, since string) bool {
	if e.handled(s) {
		return false
	}
	st := s.Hello.GetState()
	if st.GetRunId() != r.ID {
		return false
	}
	switch {
	case since == runstate.EventPhaseStart:
		return true
	case since == runstate.EventPhaseEnd:
		return false
	case st.GetKind() == curev1.RunnerState_IN_PHASE:
		return true
	case st.GetKind() == curev1.RunnerState_DONE:
		return st.GetLastEventSeq() > stored
	}
	return false
}

func (e *Engine) handled(s *sessions.Session) bool {
	_, ok := e.sessionsSeen.Load(s)
	return ok
}

func (e *Engine) markHandled(s *sessions.Session) {
	if _, loaded := e.sessionsSeen.LoadOrStore(s, true); !loaded {
		go func() { <-s.Done(); e.sessionsSeen.Delete(s) }()
	}
}
