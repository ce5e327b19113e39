// Package server implements the coordinator's gRPC services: the runner
// session (authenticate, register, store and ack events) and the operator API.
package server

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/attestation"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/inventory"
	"github.com/cure-oss/cure/provisioner-lite/metrics"
	"github.com/cure-oss/cure/provisioner-lite/peerlimit"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// RunGuard is told when two boots claimed one boot window of a run: the
// coordinator cannot tell which is the node, so the run must stop.
type RunGuard interface {
	IdentityContested(ctx context.Context, runID, detail string)
}

// RunnerService serves runner sessions. Identity comes from the session the
// coordinator established (token bound to a boot), never from what the
// runner writes in its events (docs/SECURITY.md).
type RunnerService struct {
	curev1.UnimplementedRunnerServiceServer
	Store *store.Store
	Hub   *sessions.Hub
	Log   *slog.Logger
	Audit *audit.Recorder
	Guard RunGuard
	// Instance is this coordinator instance: a runner whose run another
	// live instance leases is sent away (Unavailable) to retry.
	Instance string
	// HelloTimeout bounds the wait for the first message (default 10s).
	HelloTimeout time.Duration
	// MaxPendingHellos bounds the sessions that have not sent their Hello
	// yet (default 256): more are refused at once.
	MaxPendingHellos int
	// BindPeer makes a boot's address its identity: a first Hello
	// presenting a token from another address than the one its boot
	// window's tokens went to is a second claimant, which contests the
	// window (the run stops in attention, docs/SECURITY.md).
	BindPeer bool
	// Limits caps what one run's runner may make the store keep.
	Limits store.EventLimits
	// Metrics, if set, hears of sessions, event lag and node metrics.
	Metrics *metrics.Metrics
	// SessionRate and SessionBurst bound how often one boot may open a
	// session (its first Hello and every reconnect): a token bucket per
	// boot, refilled SessionRate times a second up to SessionBurst
	// (defaults 0.1 and 10). A runner refused backs off and retries.
	SessionRate  float64
	SessionBurst int
	// Attestation is the measured-boot policy (image report, SKUs); nil:
	// no image expectations and no SKU requires attestation (a boot that
	// presents one must still pass it, an enrolled EK still binds).
	Attestation AttestPolicy
	// Challenges are the issued attestation challenges (default: kept in
	// the store, so that any instance sharing it judges a Hello).
	Challenges *attestation.Challenges
	// EKRoots are the TPM manufacturers' roots an unpinned EK's
	// certificate must chain to (--ek-roots); nil: EKs are trusted on
	// first use (docs/SECURITY.md).
	EKRoots *attestation.EKRoots
	// OnMeasurementDrift, if set, hears of a firmware measurement drift
	// the pipeline did not cause, after the node's hold is recorded (the
	// pool quarantines the node).
	OnMeasurementDrift func(ctx context.Context, nodeID, runID, detail string)

	once     sync.Once
	pending  chan struct{}
	sessions *peerlimit.Keyed // per boot (run and boot id)
	// samplesRate budgets telemetry batches per run, across its sessions.
	samplesRate *peerlimit.Keyed
	attest      *attestation.Challenges
	// challengeRate budgets BeginAttestation per boot token, as sessions
	// are per boot: a runner asks once per Hello.
	challengeRate *peerlimit.Keyed
}

// Field limits of runner text, in bytes: enough for any real message, small
// enough that a hostile runner cannot bloat the store or a terminal.
const (
	maxName    = 128
	maxValue   = 1024
	maxMessage = 4096
	maxAttrs   = 8
)

const sessionSecretMin = 32

func (s *RunnerService) init() {
	s.once.Do(func() {
		if s.Log == nil {
			s.Log = slog.Default()
		}
		if s.Audit == nil {
			s.Audit = audit.New(s.Store, s.Log, 0)
		}
		if s.HelloTimeout == 0 {
			s.HelloTimeout = 10 * time.Second
		}
		if s.MaxPendingHellos == 0 {
			s.MaxPendingHellos = 256
		}
		if s.Limits == (store.EventLimits{}) {
			s.Limits = store.DefaultEventLimits
		}
		if s.SessionRate <= 0 {
			s.SessionRate = 0.1
		}
		if s.SessionBurst <= 0 {
			s.SessionBurst = 10
		}
		s.pending = make(chan struct{}, s.MaxPendingHellos)
		s.sessions = peerlimit.NewKeyed(s.SessionRate, s.SessionBurst, 0)
		s.samplesRate = peerlimit.NewKeyed(1/samplesEvery.Seconds(), samplesBurst, 0)
		s.challengeRate = peerlimit.NewKeyed(s.SessionRate, s.SessionBurst, 0)
		s.attest = s.Challenges
		if s.attest == nil {
			s.attest = &attestation.Challenges{Keeper: storeChallenges{st: s.Store, instance: s.Instance}}
		}
	})
}

// peerHost is the session's remote IP address (no port).
func peerHost(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	if h, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
		return h
	}
	return p.Addr.String()
}

// Session authenticates the runner (boot token bound to its boot), then stores
// and acks its events, attributed to the session's node, run and boot.
func (s *RunnerService) Session(stream curev1.RunnerService_SessionServer) error {
	s.init()
	ctx := stream.Context()
	peerIP := peerHost(ctx)
	select {
	case s.pending <- struct{}{}:
	default:
		return status.Errorf(codes.ResourceExhausted, "%d sessions are waiting for their Hello: try again", s.MaxPendingHellos)
	}
	first, err := recvWithTimeout(stream, s.HelloTimeout)
	<-s.pending
	if err != nil {
		return status.Errorf(codes.DeadlineExceeded, "waiting for hello: %v", err)
	}
	hello := first.GetHello()
	node, run, outcome, err := s.authenticate(ctx, hello, peerIP)
	if err != nil {
		s.Metrics.RunnerSession("refused")
		return err
	}
	s.Metrics.RunnerSession("accepted")
	s.Metrics.RunnerConnected(1)
	defer s.Metrics.RunnerConnected(-1)
	sess := sessions.NewSession(node.ID, run.ID, hello, stream.Send)
	log := s.Log.With("node", sess.NodeID, "run", sess.RunID, "boot_id", sess.BootID, "peer", peerIP)
	st := hello.GetState()
	firstOfBoot := outcome == store.Bound
	if firstOfBoot {
		// The boot's first connect is part of the run's essential timeline
		// (the time buckets read it); what this boot reports about itself
		// (boot timeline, inventory) is taken now, once.
		s.event(ctx, store.Event{
			RunID: sess.RunID, NodeID: sess.NodeID, Source: runstate.SourceCoordinator, Time: time.Now().UTC(), Phase: run.Phase, Kind: runstate.EventInfo,
			Message: textsafe.BoundedLine(fmt.Sprintf("runner connected from %s: state=%s boot_id=%s guest_uptime=%dms mac=%s serial=%s runner=%s",
				peerIP, st.GetKind(), hello.GetBootId(), hello.GetUptimeMs(), hello.GetIdentity().GetBootMac(), hello.GetIdentity().GetSystemSerial(),
				hello.GetRunnerVersion()), maxMessage),
		})
		log.Info("runner connected", "state", st.GetKind().String(), "uptime_ms", hello.GetUptimeMs())
		if steps := curev1.BootSteps(hello.GetBootStages()); len(steps) > 0 {
			s.Metrics.BootStages(steps)
			log.Info("runner boot timeline", "stages", curev1.FormatBootSteps(steps))
		}
	} else {
		// A reconnect is counted against the run and summarised in one
		// note per boot, not written as an event each.
		n, err := s.Store.NoteReconnect(ctx, store.Reconnect{TokenHash: store.TokenHash(hello.GetToken()), RunID: sess.RunID, NodeID: sess.NodeID,
			BootID: sess.BootID, Phase: run.Phase, Peer: peerIP, Time: time.Now().UTC()}, s.Limits)
		if err != nil {
			log.Warn("runner reconnect not counted", "err", err)
		}
		log.Info("runner reconnected", "state", st.GetKind().String(), "reconnects", n)
	}
	s.storeInventory(ctx, sess, hello.GetInventory(), peerIP, firstOfBoot, log)
	verdict := s.judgeBoot(ctx, node, run, hello, outcome, peerIP, log)
	sess.Attested = verdict.attested
	if verdict.admit {
		s.Hub.Attach(sess)
		defer func() {
			s.Hub.Detach(sess)
			log.Info("runner disconnected")
		}()
	} else {
		// Not attached: the pipeline never sees this boot, so it gets no
		// assignment, no PSID and no host token; what it sends is kept
		// as unattested and acted on by nothing.
		log.Warn("runner session kept apart: its boot is not attested")
	}

	runnerPhases := map[string]bool{}
	if plan, err := modes.For(modes.Mode(run.Mode)); err == nil {
		for _, ph := range plan.Phases {
			if ph.Owner == modes.Runner {
				runnerPhases[ph.Name] = true
			}
		}
	}
	// Receive in a goroutine so that a session the hub closes (superseded by
	// a newer Hello, run ended, identity contested) ends at once.
	type recv struct {
		m   *curev1.RunnerMessage
		err error
	}
	var samplesSt samplesState
	var parts partsCache // the run's inventory, for the components verdicts measure
	msgs := make(chan recv, 1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			m, err := stream.Recv()
			select {
			case msgs <- recv{m, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		var msg *curev1.RunnerMessage
		select {
		case <-sess.Done():
			return status.Error(codes.Aborted, "session closed by the coordinator")
		case r := <-msgs:
			if r.err != nil {
				return nil
			}
			msg = r.m
			sess.Received()
		}
		ev := msg.GetEvent()
		if ev == nil {
			s.security(ctx, audit.RunnerSession, sess, peerIP, "a second Hello (or an empty message) inside a session")
			return status.Error(codes.InvalidArgument, "only events may follow the Hello")
		}
		if ev.GetRunId() != "" && ev.GetRunId() != sess.RunID {
			s.security(ctx, audit.EventOtherRun, sess, peerIP, fmt.Sprintf("event seq %d names run %q; the session belongs to run %s",
				ev.GetSeq(), textsafe.BoundedLine(ev.GetRunId(), maxName), sess.RunID))
			return status.Errorf(codes.PermissionDenied, "event names run %q: this session belongs to run %s", textsafe.BoundedLine(ev.GetRunId(), maxName), sess.RunID)
		}
		if !verdict.admit && (ev.GetSamples() != nil || ev.GetProgress() != nil) {
			if err := sess.Send(&curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_Ack{Ack: &curev1.Ack{Seq: ev.GetSeq()}}}); err != nil {
				return nil
			}
			continue
		}
		if ev.GetSamples() != nil {
			if err := s.samples(ctx, sess, peerIP, ev, runnerPhases, run.StartedAt, &samplesSt, log); err != nil {
				return err
			}
			if err := sess.Send(&curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_Ack{Ack: &curev1.Ack{Seq: ev.GetSeq()}}}); err != nil {
				return nil
			}
			continue
		}
		if ev.GetProgress() != nil {
			if err := s.progress(ctx, sess, peerIP, ev, runnerPhases, log); err != nil {
				return err
			}
			if err := sess.Send(&curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_Ack{Ack: &curev1.Ack{Seq: ev.GetSeq()}}}); err != nil {
				return nil
			}
			continue
		}
		s.pairOffer(ctx, sess, peerIP, ev, log) // an offer's addresses must be the node's own (pairs.go)
		e, v, err := runnerEvent(sess.NodeID, sess.RunID, sess.BootID, ev, runnerPhases)
		if err != nil {
			s.security(ctx, audit.RunnerSession, sess, peerIP, err.Error())
			return status.Error(codes.InvalidArgument, err.Error())
		}
		if !verdict.admit {
			e, v = unattestedEvent(e), nil
		}
		s.measuredInInventory(ctx, sess, peerIP, v, &parts, log)
		res, err := s.Store.AppendRunnerEvent(ctx, e, v, s.Limits)
		switch {
		case errors.Is(err, store.ErrRunInactive):
			return status.Errorf(codes.FailedPrecondition, "run %s is no longer active", sess.RunID)
		case errors.Is(err, store.ErrRunCap):
			s.security(ctx, audit.RunEventCap, sess, peerIP, err.Error())
			return status.Errorf(codes.ResourceExhausted, "run %s: %v", sess.RunID, err)
		case err != nil:
			log.Error("store runner event", "seq", ev.GetSeq(), "err", err)
			return status.Errorf(codes.Unavailable, "store: %v", err) // runner replays unacked events
		}
		s.Metrics.EventStored(e.Kind, time.Since(e.Time))
		if m := ev.GetMetric(); m != nil {
			s.Metrics.NodeMetric(sess.NodeID, sess.RunID, m.GetName(), m.GetUnit(), m.GetLabels(), m.GetValue())
		}
		if res.FirstDrop {
			log.Warn("run event cap reached: metrics and logs are acknowledged but not stored")
			s.event(ctx, store.Event{RunID: sess.RunID, NodeID: sess.NodeID, Source: runstate.SourceCoordinator, Time: time.Now().UTC(), Kind: runstate.EventInfo,
				Message: fmt.Sprintf("event cap reached (%d events or %d bytes): the runner's further metrics and logs are not stored", s.Limits.MaxEvents, s.Limits.MaxBytes)})
		}
		if err := sess.Send(&curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_Ack{Ack: &curev1.Ack{Seq: ev.GetSeq()}}}); err != nil {
			return nil
		}
	}
}

// progress keeps a runner's heartbeat as its run's latest (one row
// replaced, never an event: a soak of days would fill the run's event caps)
// and as the session's proof of life.
func (s *RunnerService) progress(ctx context.Context, sess *sessions.Session, peerIP string, ev *curev1.Event, runnerPhases map[string]bool,
	log *slog.Logger) error {
	rec, err := runnerProgress(sess.RunID, sess.BootID, ev, runnerPhases)
	if err != nil {
		s.security(ctx, audit.RunnerSession, sess, peerIP, err.Error())
		return status.Error(codes.InvalidArgument, err.Error())
	}
	now := time.Now()
	sess.Heartbeat(now)
	rec.Received = now
	_, err = s.Store.PutProgress(ctx, rec)
	switch {
	case errors.Is(err, store.ErrRunInactive):
		return status.Errorf(codes.FailedPrecondition, "run %s is no longer active", sess.RunID)
	case err != nil:
		log.Error("store runner progress", "seq", ev.GetSeq(), "err", err)
		return status.Errorf(codes.Unavailable, "store: %v", err) // runner replays unacked events
	}
	return nil
}

// Bounds of a heartbeat: a suite has tens of checks.
const maxProgressChecks = 512

var progressStates = []string{"pending", "running", "done", "interrupted"}

// runnerProgress turns a runner's heartbeat into what the store keeps:
// attributed to the session, of a runner phase of its run, every string
// cleaned and bounded, numbers not negative, at most maxProgressChecks
// checks, a worst verdict only one a runner may give.
func runnerProgress(runID, bootID string, ev *curev1.Event, runnerPhases map[string]bool) (store.ProgressRecord, error) {
	if ev.GetSeq() == 0 || ev.GetSeq() > 1<<62 {
		return store.ProgressRecord{}, fmt.Errorf("event seq %d: want 1..2^62", ev.GetSeq())
	}
	phase := ev.GetPhase()
	if !runnerPhases[phase] {
		return store.ProgressRecord{}, fmt.Errorf("event seq %d: progress of %q, not a runner phase of this run", ev.GetSeq(), textsafe.BoundedLine(phase, maxName))
	}
	in := ev.GetProgress()
	nonNeg := func(x int64) int64 { return max(x, 0) }
	out := &curev1.Progress{
		Suite: textsafe.BoundedLine(in.GetSuite(), maxName), Stage: textsafe.BoundedLine(in.GetStage(), maxName),
		ElapsedMs: nonNeg(in.GetElapsedMs()), PlannedMs: nonNeg(in.GetPlannedMs()), RemainingMs: nonNeg(in.GetRemainingMs()), Resumed: in.GetResumed(),
	}
	for i, c := range in.GetChecks() {
		if i == maxProgressChecks {
			break
		}
		st := c.GetState()
		if !slices.Contains(progressStates, st) {
			return store.ProgressRecord{}, fmt.Errorf("event seq %d: check %d of the progress has state %q (want one of %s)",
				ev.GetSeq(), i, textsafe.BoundedLine(st, maxName), strings.Join(progressStates, ", "))
		}
		worst := c.GetWorst()
		if _, known := curev1.VerdictStatus_name[int32(worst)]; !known || worst == curev1.VerdictStatus_MARGINAL {
			worst = curev1.VerdictStatus_VERDICT_STATUS_UNSPECIFIED // MARGINAL is the coordinator's to give
		}
		out.Checks = append(out.Checks, &curev1.CheckProgress{Check: textsafe.BoundedLine(c.GetCheck(), maxName), Stage: textsafe.BoundedLine(c.GetStage(), maxName),
			State: st, ElapsedMs: nonNeg(c.GetElapsedMs()), PlannedMs: nonNeg(c.GetPlannedMs()), Worst: worst})
	}
	js, err := protojson.Marshal(out)
	if err != nil {
		return store.ProgressRecord{}, err
	}
	return store.ProgressRecord{RunID: runID, BootID: bootID, Seq: ev.GetSeq(), Phase: phase, Time: time.UnixMilli(ev.GetTimeUnixMs()).UTC(), JSON: js}, nil
}

// authenticate turns a Hello into a session: the token is bound to this boot
// (or this boot proves it is the one the token was bound to), the boot has
// not opened sessions faster than its budget, the hardware matches the
// token's node, and the token's run is active. It returns the binding's
// outcome: store.Bound for the boot's first Hello, store.Resumed for a
// reconnect.
func (s *RunnerService) authenticate(ctx context.Context, hello *curev1.Hello, peerIP string) (store.Node, store.Run, string, error) {
	node, run, outcome, err := s.authenticateHello(ctx, hello, peerIP)
	if err == nil {
		s.Log.Info("runner authenticated", "node", node.ID, "run", run.ID, "boot_id", hello.GetBootId(), "how", outcome)
	}
	return node, run, outcome, err
}

func (s *RunnerService) authenticateHello(ctx context.Context, hello *curev1.Hello, peerIP string) (store.Node, store.Run, string, error) {
	claimed := textsafe.BoundedLine(hello.GetIdentity().GetNodeId(), maxName)
	refuse := func(action, detail string, code codes.Code, msg string) (store.Node, store.Run, string, error) {
		s.Audit.Security(ctx, store.AuditEntry{Actor: claimed, Peer: peerIP, Action: action, Result: "refused", Detail: detail})
		return store.Node{}, store.Run{}, "", status.Error(code, msg)
	}
	if hello == nil {
		return refuse(audit.RunnerSession, "first message is not a Hello", codes.InvalidArgument, "first message must be Hello")
	}
	if hello.GetToken() == "" || len(hello.GetSessionSecret()) < sessionSecretMin || hello.GetBootId() == "" || len(hello.GetBootId()) > maxName {
		return refuse(audit.RunnerSession, "Hello without token, boot id or session secret", codes.InvalidArgument,
			fmt.Sprintf("Hello needs token, boot_id and a session_secret of at least %d characters", sessionSecretMin))
	}
	hash := store.TokenHash(hello.GetToken())
	tok, err := s.Store.LookupBootToken(ctx, hash)
	if err != nil {
		return refuse(audit.BootTokenRejected, "unknown boot token", codes.Unauthenticated, "unknown or expired boot token")
	}
	// A boot's sessions are charged to its budget; a reconnect (the token
	// is bound to this boot id and secret, which authenticates it) is
	// charged before anything is written, so one refused costs reads only.
	boot := tok.RunID + "\x00" + hello.GetBootId()
	charged := false
	if tok.State == store.TokenBound && tok.BootID == hello.GetBootId() &&
		subtle.ConstantTimeCompare([]byte(tok.SessionHash), []byte(store.TokenHash(hello.GetSessionSecret()))) == 1 {
		if !s.sessions.Allow(boot) {
			s.Audit.Security(ctx, store.AuditEntry{Actor: tok.NodeID, Peer: peerIP, Action: audit.RunnerSession, RunID: tok.RunID, Nodes: []string{tok.NodeID},
				Result: "refused", Detail: fmt.Sprintf("boot %s reconnects faster than its budget (%g a second, burst %d)",
					textsafe.BoundedLine(hello.GetBootId(), maxName), s.SessionRate, s.SessionBurst)})
			return store.Node{}, store.Run{}, "", status.Errorf(codes.ResourceExhausted, "boot %s reconnects too often: back off and retry",
				textsafe.BoundedLine(hello.GetBootId(), maxName))
		}
		charged = true
	}
	node, err := s.Store.GetNode(ctx, tok.NodeID)
	if err != nil {
		return store.Node{}, store.Run{}, "", status.Errorf(codes.Internal, "node %s: %v", tok.NodeID, err)
	}
	if err := checkIdentity(node, hello.GetIdentity()); err != nil {
		s.Audit.Security(ctx, store.AuditEntry{Actor: node.ID, Peer: peerIP, Action: audit.RunnerIdentity, RunID: tok.RunID, Result: "refused",
			Nodes: []string{node.ID}, Detail: textsafe.BoundedLine(err.Error(), maxMessage)})
		return store.Node{}, store.Run{}, "", status.Errorf(codes.PermissionDenied, "token of node %s: %s", node.ID, textsafe.BoundedLine(err.Error(), maxMessage))
	}
	run, err := s.Store.GetRun(ctx, tok.RunID)
	if err != nil || (run.Status != curev1.RunStatus_RUN_RUNNING && run.Status != curev1.RunStatus_RUN_PENDING) {
		s.Log.Info("runner refused: its run is not active", "node", node.ID, "run", tok.RunID, "status", run.Status)
		return store.Node{}, store.Run{}, "", status.Errorf(codes.FailedPrecondition, "run %s is not active", tok.RunID)
	}
	if s.Instance != "" && run.Owner != "" && run.Owner != s.Instance && run.LeaseUntil.After(time.Now()) {
		// Another live instance drives this run and waits for its runner
		// there; the runner retries, and reaches this instance only if that
		// one dies (then this one takes the run over once its lease expired).
		s.Log.Info("runner refused: its run is driven by another instance", "node", node.ID, "run", run.ID, "owner", run.Owner)
		return store.Node{}, store.Run{}, "", status.Errorf(codes.Unavailable, "run %s is driven by coordinator instance %s; retry", run.ID, run.Owner)
	}
	outcome, tok, err := s.Store.BindBootToken(ctx, store.BindRequest{
		Hash: hash, BootID: hello.GetBootId(), SessionHash: store.TokenHash(hello.GetSessionSecret()), Peer: peerIP, RequirePeer: s.BindPeer,
	})
	var contested *store.ContestedError
	switch {
	case errors.As(err, &contested):
		s.contested(ctx, node.ID, peerIP, "boot "+textsafe.BoundedLine(hello.GetBootId(), maxName)+" presented a boot token", contested)
		return store.Node{}, store.Run{}, "", status.Error(codes.PermissionDenied, "another party claimed this boot window; the run is stopped for an operator")
	case errors.Is(err, store.ErrWindowContested):
		s.Audit.Security(ctx, store.AuditEntry{Actor: node.ID, Peer: peerIP, RunID: run.ID, Nodes: []string{node.ID}, Result: "refused",
			Action: audit.BootTokenRejected, Detail: err.Error()})
		return store.Node{}, store.Run{}, "", status.Error(codes.PermissionDenied, "this boot window was contested by two claimants; the run is stopped for an operator")
	case err != nil:
		s.Audit.Security(ctx, store.AuditEntry{Actor: node.ID, Peer: peerIP, RunID: run.ID, Nodes: []string{node.ID}, Result: "refused",
			Action: audit.BootTokenRejected, Detail: err.Error()})
		return store.Node{}, store.Run{}, "", status.Error(codes.Unauthenticated, "unknown, expired or superseded boot token")
	}
	if !charged {
		// The first Hello opens the boot's budget (or a reconnect that raced
		// its own first Hello): it is never refused for it.
		s.sessions.Allow(boot)
	}
	return node, run, outcome, nil
}

// contested records that two parties claimed one boot window (the store
// revoked its tokens): a security event naming both, and the run stopped
// in attention with its sessions closed (Guard).
func (s *RunnerService) contested(ctx context.Context, nodeID, peerIP, what string, ce *store.ContestedError) {
	detail := fmt.Sprintf("%s from %s, but boot window %s of run %s was claimed from %s first", what, peerIP, ce.Window, ce.RunID, ce.First)
	if ce.Bound.BootID != "" {
		detail += fmt.Sprintf(" (boot %s registered from there)", textsafe.BoundedLine(ce.Bound.BootID, maxName))
	}
	detail += fmt.Sprintf(": two claimants for node %s (%s and %s); every token of the window is revoked and neither gets a secret", nodeID, ce.First, ce.Second)
	s.Audit.Security(ctx, store.AuditEntry{Actor: nodeID, Peer: peerIP, Action: audit.BootWindowContested, RunID: ce.RunID, Nodes: []string{nodeID},
		Result: "refused", Detail: textsafe.BoundedLine(detail, maxMessage)})
	if s.Guard != nil {
		s.Guard.IdentityContested(ctx, ce.RunID, detail)
	}
}

// storeInventory keeps the hardware a boot reported in its Hello, cleaned
// and bounded (package inventory), once per boot: a reconnect of the same
// boot changes nothing, and costs one read when the boot's inventory is
// stored (a reconnect stores it only if its first Hello's was lost). Only an
// authenticated session gets here, so the record is the node's by the
// session, whatever its fields claim.
func (s *RunnerService) storeInventory(ctx context.Context, sess *sessions.Session, inv *curev1.Inventory, peerIP string, firstOfBoot bool, log *slog.Logger) {
	if inv == nil {
		return
	}
	if !firstOfBoot {
		if have, err := s.Store.HasInventory(ctx, sess.RunID, textsafe.BoundedLine(sess.BootID, maxName)); err != nil || have {
			return
		}
	}
	js, cut, err := inventory.Marshal(inv)
	if err != nil {
		log.Warn("hello inventory not stored", "err", err)
		return
	}
	stored, err := s.Store.PutInventory(ctx, store.InventoryRecord{NodeID: sess.NodeID, RunID: sess.RunID,
		BootID: textsafe.BoundedLine(sess.BootID, maxName), Time: time.Now().UTC(), Peer: peerIP, JSON: js, Truncated: cut})
	switch {
	case err != nil:
		log.Warn("hello inventory not stored", "err", err)
	case stored && cut:
		log.Warn("hello inventory stored cut to its bounds (strings, lists or size)", "bytes", len(js))
	}
}

func (s *RunnerService) security(ctx context.Context, action string, sess *sessions.Session, peerIP, detail string) {
	s.Audit.Security(ctx, store.AuditEntry{Actor: sess.NodeID, Peer: peerIP, Action: action, RunID: sess.RunID, Nodes: []string{sess.NodeID},
		Result: "refused", Detail: textsafe.BoundedLine(detail, maxMessage)})
}

func (s *RunnerService) event(ctx context.Context, e store.Event) {
	if _, _, err := s.Store.AppendEvent(ctx, e); err != nil {
		s.Log.Error("store event", "err", err)
	}
}

// runnerEvent turns a runner's event into what the store keeps: attributed to
// the session (node, run, boot), every string cleaned and bounded, the phase
// one the run's mode gives the runner. Only a phase_end keeps its proto
// payload (the pipeline reads reboot_required from it).
func runnerEvent(nodeID, runID, bootID string, ev *curev1.Event, runnerPhases map[string]bool) (store.Event, *store.Verdict, error) {
	if ev.GetSeq() == 0 || ev.GetSeq() > 1<<62 {
		return store.Event{}, nil, fmt.Errorf("event seq %d: want 1..2^62", ev.GetSeq())
	}
	phase := ev.GetPhase()
	if phase != "" && !runnerPhases[phase] {
		return store.Event{}, nil, fmt.Errorf("event seq %d: phase %q is not a runner phase of this run", ev.GetSeq(), textsafe.BoundedLine(phase, maxName))
	}
	t := time.UnixMilli(ev.GetTimeUnixMs()).UTC()
	e := store.Event{RunID: runID, NodeID: nodeID, Source: runstate.SourceRunner, BootID: bootID, Seq: ev.GetSeq(), Time: t, Phase: phase}
	var v *store.Verdict
	var err error
	switch b := ev.GetBody().(type) {
	case *curev1.Event_PhaseStart:
		e.Kind = runstate.EventPhaseStart
	case *curev1.Event_PhaseEnd:
		e.Kind = runstate.EventPhaseEnd
		e.Status = phaseStatus(b.PhaseEnd.GetStatus())
		e.Message = textsafe.Bounded(b.PhaseEnd.GetMessage(), maxMessage)
		e.DurationMs = max(b.PhaseEnd.GetDurationMs(), 0)
		payload, err := protojson.Marshal(&curev1.Event{Seq: ev.GetSeq(), Phase: phase, Body: &curev1.Event_PhaseEnd{PhaseEnd: &curev1.PhaseEnd{
			Status: b.PhaseEnd.GetStatus(), Message: e.Message, RebootRequired: b.PhaseEnd.GetRebootRequired(), DurationMs: e.DurationMs}}})
		if err != nil {
			return store.Event{}, nil, err
		}
		e.Payload = payload
	case *curev1.Event_Verdict:
		in := b.Verdict
		status := in.GetStatus()
		if _, known := curev1.VerdictStatus_name[int32(status)]; !known || status == curev1.VerdictStatus_VERDICT_STATUS_UNSPECIFIED {
			return store.Event{}, nil, fmt.Errorf("event seq %d: verdict status %d is not a verdict", ev.GetSeq(), status)
		}
		if status == curev1.VerdictStatus_MARGINAL {
			// The fleet band is the coordinator's judgement of the node
			// against its peers; a runner cannot pass it off as its own.
			return store.Event{}, nil, fmt.Errorf("event seq %d: a runner cannot send a MARGINAL verdict (the coordinator judges fleet bands)", ev.GetSeq())
		}
		v = &store.Verdict{
			RunID: runID, Component: textsafe.BoundedLine(in.GetComponent(), maxName), Check: textsafe.BoundedLine(in.GetCheck(), maxName),
			Status: status, Observed: textsafe.Bounded(in.GetObserved(), maxValue), Expected: textsafe.Bounded(in.GetExpected(), maxValue),
			Message: textsafe.Bounded(in.GetMessage(), maxMessage), Time: t,
		}
		if v.Component == "" || v.Check == "" {
			return store.Event{}, nil, fmt.Errorf("event seq %d: verdict without component or check", ev.GetSeq())
		}
		// When the finding happened (a bar on a sampled series) and its stage.
		if at := in.GetAtUnixMs(); at > 0 && at < 1<<50 {
			v.At = time.UnixMilli(at).UTC()
		}
		v.Stage = textsafe.BoundedLine(in.GetStage(), maxName)
		if v.Measurements, err = verdictMeasurements(in.GetMeasurements()); err != nil {
			return store.Event{}, nil, fmt.Errorf("event seq %d: verdict %s %s: %w", ev.GetSeq(), v.Component, v.Check, err)
		}
		e.Kind = runstate.EventVerdict
		e.Status = runstate.VerdictName(v.Status)
		e.Message = textsafe.Truncate(fmt.Sprintf("%s %s: %s", v.Component, v.Check, v.Message), maxMessage)
	case *curev1.Event_Log:
		e.Kind = runstate.EventLog
		e.Status = textsafe.BoundedLine(strings.ToUpper(b.Log.GetLevel()), 8)
		e.Message = textsafe.Bounded(b.Log.GetMessage()+logAttrs(b.Log.GetAttrs()), maxMessage)
	case *curev1.Event_Metric:
		m := b.Metric
		e.Kind = runstate.EventMetric
		e.Message = textsafe.BoundedLine(fmt.Sprintf("%s=%g%s%s", m.GetName(), m.GetValue(), m.GetUnit(), logAttrs(m.GetLabels())), maxValue)
	case *curev1.Event_PairReady, *curev1.Event_PairResult:
		// The node-pair burn-in's exchange: an info entry of the runner's
		// on the timeline, its payload what the pipeline acts on.
		clean, msg, err := pairEvent(ev)
		if err != nil {
			return store.Event{}, nil, fmt.Errorf("event seq %d: %w", ev.GetSeq(), err)
		}
		e.Kind = runstate.EventInfo
		e.Message = textsafe.Bounded(msg, maxMessage)
		if e.Payload, err = protojson.Marshal(clean); err != nil {
			return store.Event{}, nil, err
		}
	default:
		return store.Event{}, nil, fmt.Errorf("event seq %d has no body", ev.GetSeq())
	}
	return e, v, nil
}

// maxPairPorts bounds the ports a runner may offer (an HGX node has 8
// compute and 2 storage ports).
const maxPairPorts = 32

// pairEvent is a runner's PairReady or PairResult cleaned and checked
// (names bounded, addresses IP addresses, transports known, rates finite),
// with its timeline line.
func pairEvent(ev *curev1.Event) (*curev1.Event, string, error) {
	out := &curev1.Event{Seq: ev.GetSeq(), Phase: ev.GetPhase()}
	transport := func(t string) error {
		if t != "ethernet" && t != "rdma" {
			return fmt.Errorf("node-pair transport %q (want ethernet or rdma)", textsafe.BoundedLine(t, maxName))
		}
		return nil
	}
	if in := ev.GetPairReady(); in != nil {
		// Refused is the coordinator's (pairOffer), set before this.
		r := &curev1.PairReady{Check: textsafe.BoundedLine(in.GetCheck(), maxName), Stage: textsafe.BoundedLine(in.GetStage(), maxName),
			Refused: textsafe.Bounded(in.GetRefused(), maxValue)}
		if r.Check == "" || len(in.GetPorts()) == 0 || len(in.GetPorts()) > maxPairPorts {
			return nil, "", fmt.Errorf("node-pair ready: check %q with %d ports (want a check and 1..%d ports)", r.Check, len(in.GetPorts()), maxPairPorts)
		}
		var names []string
		for _, p := range in.GetPorts() {
			ip := net.ParseIP(p.GetAddress())
			if ip == nil {
				return nil, "", fmt.Errorf("node-pair ready: port %q address %q is not an IP address", textsafe.BoundedLine(p.GetName(), maxName), textsafe.BoundedLine(p.GetAddress(), maxName))
			}
			if err := transport(p.GetTransport()); err != nil {
				return nil, "", err
			}
			pp := &curev1.PairPort{Name: textsafe.BoundedLine(p.GetName(), maxName), Address: ip.String(), Transport: p.GetTransport()}
			r.Ports = append(r.Ports, pp)
			names = append(names, fmt.Sprintf("%s %s (%s)", pp.Name, pp.Address, pp.Transport))
		}
		out.Body = &curev1.Event_PairReady{PairReady: r}
		if r.Refused != "" {
			return out, fmt.Sprintf("node-pair %s: offer of ports %s refused: %s", r.Check, strings.Join(names, ", "), r.Refused), nil
		}
		return out, fmt.Sprintf("node-pair %s: ports offered: %s", r.Check, strings.Join(names, ", ")), nil
	}
	in := ev.GetPairResult()
	r := &curev1.PairResult{Check: textsafe.BoundedLine(in.GetCheck(), maxName), Round: in.GetRound(), Partner: textsafe.BoundedLine(in.GetPartner(), maxName),
		Port: textsafe.BoundedLine(in.GetPort(), maxName), PartnerPort: textsafe.BoundedLine(in.GetPartnerPort(), maxName),
		Transport: in.GetTransport(), Forward: in.GetForward(), Reverse: in.GetReverse(), Unit: textsafe.BoundedLine(in.GetUnit(), 16),
		Error: textsafe.Bounded(in.GetError(), maxValue)}
	if err := transport(r.Transport); err != nil {
		return nil, "", err
	}
	for _, x := range []float64{r.Forward, r.Reverse} {
		if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
			return nil, "", fmt.Errorf("node-pair result: rate %v", x)
		}
	}
	if r.Check == "" || r.Partner == "" {
		return nil, "", errors.New("node-pair result without check or partner")
	}
	out.Body = &curev1.Event_PairResult{PairResult: r}
	msg := fmt.Sprintf("node-pair %s round %d: %s to %s:%s: forward %g %s, reverse %g %s", r.Check, r.Round, r.Port, r.Partner, r.PartnerPort, r.Forward, r.Unit, r.Reverse, r.Unit)
	if r.Error != "" {
		msg = fmt.Sprintf("node-pair %s round %d: %s to %s:%s not measured: %s", r.Check, r.Round, r.Port, r.Partner, r.PartnerPort, r.Error)
	}
	return out, msg, nil
}

// logAttrs renders up to maxAttrs key=value pairs, sorted, for the timeline.
func logAttrs(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i == maxAttrs {
			fmt.Fprintf(&b, " (+%d attrs)", len(keys)-maxAttrs)
			break
		}
		fmt.Fprintf(&b, " %s=%s", textsafe.BoundedLine(k, 64), textsafe.BoundedLine(m[k], 256))
	}
	return b.String()
}

// phaseStatus is the stored name of the status a runner's PhaseEnd
// reports: what is not an end it can report counts as a failure.
func phaseStatus(s curev1.PhaseStatus) string {
	switch s {
	case curev1.PhaseStatus_PHASE_OK, curev1.PhaseStatus_PHASE_SKIPPED, curev1.PhaseStatus_PHASE_FAILED:
		return runstate.PhaseName(s)
	case curev1.PhaseStatus_PHASE_RUNNING, curev1.PhaseStatus_PHASE_STATUS_UNSPECIFIED:
		return runstate.PhaseName(curev1.PhaseStatus_PHASE_FAILED)
	default:
		return runstate.PhaseName(curev1.PhaseStatus_PHASE_FAILED) // a status newer than this coordinator
	}
}

// checkIdentity ties a token to the hardware presenting it: the runner's
// boot MAC must be one the inventory registered for the node, and a serial,
// when both sides know it, must agree. The MAC and serial are not secrets
// (the token is): this catches a token that reached the wrong node.
func checkIdentity(n store.Node, id *curev1.Identity) error {
	if id.GetNodeId() != "" && id.GetNodeId() != n.ID {
		return fmt.Errorf("runner says it is node %q", id.GetNodeId())
	}
	mac := strings.ToLower(id.GetBootMac())
	found := false
	for _, m := range n.MACs {
		if strings.EqualFold(m, mac) {
			found = true
		}
	}
	if !found {
		return fmt.Errorf("boot MAC %q is not registered for the node (have %s)", mac, strings.Join(n.MACs, ","))
	}
	if n.SystemSerial != "" && id.GetSystemSerial() != "" && n.SystemSerial != id.GetSystemSerial() {
		return fmt.Errorf("system serial %q, inventory says %q", id.GetSystemSerial(), n.SystemSerial)
	}
	return nil
}

func recvWithTimeout(stream curev1.RunnerService_SessionServer, d time.Duration) (*curev1.RunnerMessage, error) {
	type res struct {
		m   *curev1.RunnerMessage
		err error
	}
	ch := make(chan res, 1)
	go func() {
		m, err := stream.Recv()
		ch <- res{m, err}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.m, r.err
	case <-t.C:
		return nil, errors.New("timeout")
	}
}
