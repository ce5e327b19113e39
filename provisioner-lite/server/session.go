// Package server implements the coordinator's gRPC services: the runner
// session (authenticate, register, store and ack events) and the operator API.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"sync"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/attestation"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/enlist"
	"github.com/cure-oss/cure/provisioner-lite/metrics"
	"github.com/cure-oss/cure/provisioner-lite/peerlimit"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
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
	// Enlist, if set (--enlist), takes enlisting machines' inspection
	// reports; nil: every report is refused.
	Enlist *enlist.Enlister

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
// and acks its events, attributed to the session's node, run and boot. The
// first message must be a Hello; every later one is an event, handled by its
// body's entry in eventHandlers and then acked (ack).
func (s *RunnerService) Session(stream curev1.RunnerService_SessionServer) error {
	s.init()
	ctx := stream.Context()
	if ctl := streamControl(ctx); ctl != nil {
		ctx = ctl.parent // the session's work outlives a cancelled read (its closing status reads the store)
	}
	peerIP := peerHost(ctx)
	hello, err := s.awaitHello(stream)
	if err != nil {
		return err
	}
	node, run, outcome, err := s.authenticate(ctx, hello, peerIP)
	if err != nil {
		s.Metrics.RunnerSession("refused")
		return err
	}
	s.Metrics.RunnerSession("accepted")
	s.Metrics.RunnerConnected(1)
	defer s.Metrics.RunnerConnected(-1)
	rs := s.greet(ctx, node, run, hello, outcome, peerIP)
	if rs.admit {
		s.Hub.Attach(rs.sess)
		defer func() {
			s.Hub.Detach(rs.sess)
			rs.log.Info("runner disconnected")
		}()
	} else {
		// Not attached: the pipeline never sees this boot, so it gets no
		// assignment, no PSID and no host token; what it sends is kept
		// as unattested and acted on by nothing.
		rs.log.Warn("runner session kept apart: its boot is not attested")
	}
	return rs.serve(ctx, stream)
}

// closed is the status a session the coordinator closed ends with: its
// run's end (RunEnded: the runner stops dialling), or Aborted (a newer
// session of the node, a contest: the runner dials again and is judged).
func (rs *liveSession) closed(ctx context.Context) error {
	if r, err := rs.s.Store.GetRun(ctx, rs.sess.RunID); err == nil && !runActive(r) {
		rs.log.Info("runner session closed: its run ended", "status", runstate.RunName(r.Status))
		return runEndedStatus(r, r.ID, rs.sess.NodeID)
	}
	return status.Error(codes.Aborted, "session closed by the coordinator")
}

// awaitHello is the session's first message, its Hello (nil when it is
// something else: authenticate refuses that), received within HelloTimeout
// while the session counts among those waiting for theirs.
func (s *RunnerService) awaitHello(stream curev1.RunnerService_SessionServer) (*curev1.Hello, error) {
	select {
	case s.pending <- struct{}{}:
	default:
		return nil, status.Errorf(codes.ResourceExhausted, "%d sessions are waiting for their Hello: try again", s.MaxPendingHellos)
	}
	first, err := recvWithTimeout(stream, s.HelloTimeout)
	<-s.pending
	if err != nil {
		return nil, status.Errorf(codes.DeadlineExceeded, "waiting for hello: %v", err)
	}
	return first.GetHello(), nil
}

// liveSession is one authenticated runner session: what its event
// handlers share from one message to the next.
type liveSession struct {
	s        *RunnerService
	sess     *sessions.Session
	peerIP   string
	log      *slog.Logger
	admit    bool                     // the boot is attested: the pipeline acts on what it sends
	phases   map[modes.PhaseName]bool // the runner phases of the run's mode
	runStart time.Time
	samples  samplesState
	parts    partsCache // the run's inventory, for the components verdicts measure
}

// greet takes an authenticated Hello: the boot's first connect is noted on
// the run's timeline (a reconnect is counted), its inventory kept, and its
// attestation judged, which decides whether the pipeline may see it.
func (s *RunnerService) greet(ctx context.Context, node store.Node, run store.Run, hello *curev1.Hello, outcome, peerIP string) *liveSession {
	sess := sessions.NewSession(node.ID, run.ID, hello)
	rs := &liveSession{s: s, sess: sess, peerIP: peerIP, phases: runnerPhases(run.Mode), runStart: run.StartedAt,
		log: s.Log.With("node", sess.NodeID, "run", sess.RunID, "boot_id", sess.BootID, "peer", peerIP)}
	firstOfBoot := outcome == store.Bound
	if firstOfBoot {
		s.noteFirstConnect(ctx, rs, run, hello)
	} else {
		// A reconnect is counted against the run and summarised in one
		// note per boot, not written as an event each.
		n, err := s.Store.NoteReconnect(ctx, store.Reconnect{TokenHash: store.TokenHash(hello.GetToken()), RunID: sess.RunID, NodeID: sess.NodeID,
			BootID: sess.BootID, Phase: run.Phase, Peer: peerIP, Time: time.Now().UTC()}, s.Limits)
		if err != nil {
			rs.log.Warn("runner reconnect not counted", "err", err)
		}
		rs.log.Info("runner reconnected", "state", hello.GetState().GetKind().String(), "reconnects", n)
	}
	s.storeInventory(ctx, sess, hello.GetInventory(), peerIP, firstOfBoot, rs.log)
	if firstOfBoot {
		s.judgeCabling(ctx, node, run.ID, hello.GetInventory(), rs.log)
	}
	verdict := s.judgeBoot(ctx, node, run, hello, outcome, peerIP, rs.log)
	sess.Attested = verdict.attested
	rs.admit = verdict.admit
	return rs
}

// noteFirstConnect records a boot's first connect: it is part of the run's
// essential timeline (the time buckets read it), and what the boot reports
// about itself (boot timeline) is taken now, once.
func (s *RunnerService) noteFirstConnect(ctx context.Context, rs *liveSession, run store.Run, hello *curev1.Hello) {
	st := hello.GetState()
	s.event(ctx, store.Event{
		RunID: rs.sess.RunID, NodeID: rs.sess.NodeID, Source: runstate.SourceCoordinator, Time: time.Now().UTC(), Phase: run.Phase, Kind: runstate.EventInfo,
		Message: textsafe.BoundedLine(fmt.Sprintf("runner connected from %s: state=%s boot_id=%s guest_uptime=%dms mac=%s serial=%s runner=%s",
			rs.peerIP, st.GetKind(), hello.GetBootId(), hello.GetUptimeMs(), hello.GetIdentity().GetBootMac(), hello.GetIdentity().GetSystemSerial(),
			hello.GetRunnerVersion()), maxMessage),
	})
	rs.log.Info("runner connected", "state", st.GetKind().String(), "uptime_ms", hello.GetUptimeMs())
	if steps := curev1.BootSteps(hello.GetBootStages()); len(steps) > 0 {
		s.Metrics.BootStages(steps)
		rs.log.Info("runner boot timeline", "stages", curev1.FormatBootSteps(steps))
	}
}

// runnerPhases are the phases a run's mode gives the runner (none for a
// mode this coordinator does not know).
func runnerPhases(mode modes.Mode) map[modes.PhaseName]bool {
	phases := map[modes.PhaseName]bool{}
	if plan, err := modes.For(mode); err == nil {
		for _, ph := range plan.Phases {
			if ph.Owner == modes.Runner {
				phases[ph.Name] = true
			}
		}
	}
	return phases
}

// eventHandler handles one kind of runner event; a nil error acks it, an
// error ends the session with it.
type eventHandler func(rs *liveSession, ctx context.Context, ev *curev1.Event) error

// eventHandlers is the handler of each event body, keyed by its oneof
// type. An event without a body (or with one newer than this coordinator,
// which protobuf drops) has no entry: storeEvent refuses it.
var eventHandlers = map[reflect.Type]eventHandler{
	reflect.TypeFor[*curev1.Event_Samples]():    (*liveSession).onSamples,
	reflect.TypeFor[*curev1.Event_Progress]():   (*liveSession).onProgress,
	reflect.TypeFor[*curev1.Event_PairReady]():  (*liveSession).onPairReady,
	reflect.TypeFor[*curev1.Event_PhaseStart](): (*liveSession).storeEvent,
	reflect.TypeFor[*curev1.Event_PhaseEnd]():   (*liveSession).storeEvent,
	reflect.TypeFor[*curev1.Event_Verdict]():    (*liveSession).storeEvent,
	reflect.TypeFor[*curev1.Event_Log]():        (*liveSession).storeEvent,
	reflect.TypeFor[*curev1.Event_Metric]():     (*liveSession).storeEvent,
	reflect.TypeFor[*curev1.Event_PairResult](): (*liveSession).storeEvent,
}

// serve handles the messages after the Hello until the runner goes or the
// hub closes the session: each is checked (accept), handled by its body's
// handler and acked. It alone writes the acks; what the pipeline queued on
// the session's outbox (sessions.Session.Send) is written in the order it
// was queued. With the stream's control (sessionTap) the handler's
// goroutine is the session's only one (serveInline, sessionloop.go).
func (rs *liveSession) serve(ctx context.Context, stream curev1.RunnerService_SessionServer) error {
	if ctl := streamControl(stream.Context()); ctl != nil {
		return rs.serveInline(ctx, stream, ctl)
	}
	w := &sessionWriter{stream: stream, sess: rs.sess}
	msgs, stop := receive(stream)
	defer stop()
	for {
		var msg *curev1.RunnerMessage
		select {
		case <-rs.sess.Done():
			return rs.closed(ctx)
		case out := <-rs.sess.Outbox():
			if err := w.send(out); err != nil {
				return nil // the runner is gone; the hub's Detach ends the session for its senders
			}
			continue
		case r := <-msgs:
			if r.err != nil {
				return nil
			}
			msg = r.m
			rs.sess.Received()
		}
		if gone, err := rs.handleMessage(ctx, w, msg); gone || err != nil {
			return err
		}
	}
}

// handleMessage checks one message after the Hello (accept), handles it by
// its body's handler and acks it: an error ends the session with it, gone
// says the runner is gone (the ack could not be written).
func (rs *liveSession) handleMessage(ctx context.Context, w *sessionWriter, msg *curev1.RunnerMessage) (gone bool, err error) {
	ev, err := rs.accept(ctx, msg)
	if err != nil {
		return false, err
	}
	handle, ok := eventHandlers[reflect.TypeOf(ev.GetBody())]
	if !ok {
		handle = (*liveSession).storeEvent
	}
	if err := handle(rs, ctx, ev); err != nil {
		return false, err
	}
	if err := ack(w, ev.GetSeq()); err != nil {
		return true, nil // the runner is gone; it replays what was not acked
	}
	return false, nil
}

// ack tells the runner that event seq is handled (kept, or deliberately
// not): the one way any event is acknowledged. Only handleMessage calls
// it, through the session's writer.
func ack(w *sessionWriter, seq uint64) error {
	return w.send(&curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_Ack{Ack: &curev1.Ack{Seq: seq}}})
}

// received is one message from the runner, or why none came.
type received struct {
	m   *curev1.RunnerMessage
	err error
}

// receive reads the stream in a goroutine, so that a session the hub
// closes (superseded by a newer Hello, run ended, identity contested) ends
// at once on a server without the stream's control; stop ends the
// goroutine's wait to hand over a message.
func receive(stream curev1.RunnerService_SessionServer) (msgs <-chan received, stop func()) {
	ch := make(chan received, 1)
	done := make(chan struct{})
	go func() {
		for {
			m, err := stream.Recv()
			select {
			case ch <- received{m, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return ch, func() { close(done) }
}

// accept checks a message after the Hello: it must be an event (a second
// Hello, or an empty message, is refused), of the session's run if it names
// one. A refusal ends the session and is a security event.
func (rs *liveSession) accept(ctx context.Context, msg *curev1.RunnerMessage) (*curev1.Event, error) {
	ev := msg.GetEvent()
	if ev == nil {
		rs.s.security(ctx, audit.RunnerSession, rs.sess, rs.peerIP, "a second Hello (or an empty message) inside a session")
		return nil, status.Error(codes.InvalidArgument, "only events may follow the Hello")
	}
	if ev.GetRunId() != "" && ev.GetRunId() != rs.sess.RunID {
		rs.s.security(ctx, audit.EventOtherRun, rs.sess, rs.peerIP, fmt.Sprintf("event seq %d names run %q; the session belongs to run %s",
			ev.GetSeq(), textsafe.BoundedLine(ev.GetRunId(), maxName), rs.sess.RunID))
		return nil, status.Errorf(codes.PermissionDenied, "event names run %q: this session belongs to run %s",
			textsafe.BoundedLine(ev.GetRunId(), maxName), rs.sess.RunID)
	}
	return ev, nil
}

// onSamples keeps a telemetry batch (samples.go); an unattested boot's is
// acked and kept nowhere.
func (rs *liveSession) onSamples(ctx context.Context, ev *curev1.Event) error {
	if !rs.admit {
		return nil
	}
	return rs.s.samples(ctx, rs.sess, rs.peerIP, ev, rs.phases, rs.runStart, &rs.samples, rs.log)
}

// onProgress keeps a runner's heartbeat as its run's latest (one row
// replaced, never an event: a soak of days would fill the run's event caps)
// and as the session's proof of life; an unattested boot's is acked and
// kept nowhere.
func (rs *liveSession) onProgress(ctx context.Context, ev *curev1.Event) error {
	if !rs.admit {
		return nil
	}
	sess := rs.sess
	rec, err := runnerProgress(sess.RunID, sess.BootID, ev, rs.phases)
	if err != nil {
		rs.s.security(ctx, audit.RunnerSession, sess, rs.peerIP, err.Error())
		return status.Error(codes.InvalidArgument, err.Error())
	}
	now := time.Now()
	sess.Heartbeat(now)
	rec.Received = now
	err = rs.s.Store.QueueProgress(ctx, rec) // written within the second (store.ProgressFlushEvery)
	switch {
	case errors.Is(err, store.ErrRunInactive):
		return rs.closed(ctx) // the run ended: its runner is told so
	case err != nil:
		rs.log.Error("store runner progress", "seq", ev.GetSeq(), "err", err)
		return status.Errorf(codes.Unavailable, "store: %v", err) // runner replays unacked events
	}
	return nil
}

// onPairReady checks that a node-pair offer's addresses are the node's own
// (pairs.go), which marks the offer refused if not, then stores it.
func (rs *liveSession) onPairReady(ctx context.Context, ev *curev1.Event) error {
	rs.s.pairOffer(ctx, rs.sess, rs.peerIP, ev, rs.log)
	return rs.storeEvent(ctx, ev)
}

// storeEvent keeps a runner event on its run's timeline (an unattested
// boot's marked so, its verdict dropped), with the verdict it carries and
// the metric it reports; past the run's event cap metrics and logs are
// acked but not stored.
func (rs *liveSession) storeEvent(ctx context.Context, ev *curev1.Event) error {
	s, sess := rs.s, rs.sess
	e, v, err := runnerEvent(sess.NodeID, sess.RunID, sess.BootID, ev, rs.phases)
	if err != nil {
		s.security(ctx, audit.RunnerSession, sess, rs.peerIP, err.Error())
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if !rs.admit {
		e, v = unattestedEvent(e), nil
	}
	s.measuredInInventory(ctx, sess, rs.peerIP, v, &rs.parts, rs.log)
	res, err := s.keepRunnerEvent(ctx, e, v, rs.admit)
	switch {
	case errors.Is(err, store.ErrRunInactive):
		return rs.closed(ctx) // the run ended: its runner is told so
	case errors.Is(err, store.ErrRunCap):
		s.security(ctx, audit.RunEventCap, sess, rs.peerIP, err.Error())
		return status.Errorf(codes.ResourceExhausted, "run %s: %v", sess.RunID, err)
	case err != nil:
		rs.log.Error("store runner event", "seq", ev.GetSeq(), "err", err)
		return status.Errorf(codes.Unavailable, "store: %v", err) // runner replays unacked events
	}
	s.Metrics.EventStored(e.Kind, time.Since(e.Time))
	if m := ev.GetMetric(); m != nil {
		s.Metrics.NodeMetric(sess.NodeID, sess.RunID, m.GetName(), m.GetUnit(), m.GetLabels(), m.GetValue())
	}
	if res.FirstDrop {
		rs.log.Warn("run event cap reached: metrics and logs are acknowledged but not stored")
		s.event(ctx, store.Event{RunID: sess.RunID, NodeID: sess.NodeID, Source: runstate.SourceCoordinator, Time: time.Now().UTC(), Kind: runstate.EventInfo,
			Message: fmt.Sprintf("event cap reached (%d events or %d bytes): the runner's further metrics and logs are not stored", s.Limits.MaxEvents, s.Limits.MaxBytes)})
	}
	return nil
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
