package transport

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/tools/retry"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// SessionOptions tunes a Session; zero values mean defaults.
type SessionOptions struct {
	ConnectTimeout time.Duration // per attempt, until the connection is READY (default 15s)
	BackoffBase    time.Duration // first reconnect delay (default 500ms)
	BackoffMax     time.Duration // cap of the exponential delay (default 30s)
	// MaxUnackedMetrics bounds the metric samples queued while the
	// coordinator is unreachable (default 20000, a few MiB): beyond it the
	// oldest samples are dropped. Verdicts, phase events and logs are
	// never dropped; a burn-in that outlives its coordinator keeps its
	// results, not every sample of the way there.
	MaxUnackedMetrics int
	// MaxUnackedSamples bounds the telemetry batches (Samples) queued the
	// same way (default 64): a stage sends one a minute or less, so an
	// outage of an hour keeps its latest hour.
	MaxUnackedSamples int
	Log               *slog.Logger
	// OnAck, if set, is called (outside the session's lock) with each event
	// the coordinator acknowledged: the fleet simulator measures
	// event-to-ack latency with it.
	OnAck func(ev *curev1.Event)
}

// Session keeps one logical conversation with the coordinator across
// reconnects. It is the agent's AssignmentSource (Next) and EventSink
// (Emit, Drain).
type Session struct {
	conn  *grpc.ClientConn
	hello func() *curev1.Hello
	opt   SessionOptions
	log   *slog.Logger
	// secret proves to the coordinator that a reconnect comes from the boot
	// that first used the boot token; it never leaves this process except
	// inside TLS.
	secret string

	mu      sync.Mutex
	lastSeq uint64          // last seq handed out; seqs are per boot, from 1
	unacked []*curev1.Event // seq order, gaps where metrics were dropped; removed when an Ack covers them
	metrics int             // metric events in unacked
	dropped int             // metric events dropped for the cap, this boot
	// droppedSamples counts telemetry batches dropped for their cap.
	droppedSamples int
	changed        chan struct{} // closed and replaced whenever unacked or directives change
	dirs           []agent.Directive
}

// NewSession returns a session over conn. hello builds the Hello for each
// (re)connection, so state and uptime are current; Session fills in
// state.last_event_seq for a runner that is mid-phase.
func NewSession(conn *grpc.ClientConn, hello func() *curev1.Hello, opt SessionOptions) *Session {
	if opt.ConnectTimeout == 0 {
		opt.ConnectTimeout = 15 * time.Second
	}
	if opt.BackoffBase == 0 {
		opt.BackoffBase = 500 * time.Millisecond
	}
	if opt.BackoffMax == 0 {
		opt.BackoffMax = 30 * time.Second
	}
	if opt.MaxUnackedMetrics == 0 {
		opt.MaxUnackedMetrics = 20000
	}
	if opt.MaxUnackedSamples == 0 {
		opt.MaxUnackedSamples = 64
	}
	log := opt.Log
	if log == nil {
		log = slog.Default()
	}
	return &Session{conn: conn, hello: hello, opt: opt, log: log, secret: newSecret(), changed: make(chan struct{})}
}

// newSecret returns 256 random bits, hex.
func newSecret() string {
	b := make([]byte, 32)
	if _, err := crand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// signal wakes every waiter; callers hold s.mu.
func (s *Session) signal() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Emit numbers ev and queues it until the coordinator acks it.
func (s *Session) Emit(ev *curev1.Event) {
	validUTF8(ev)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastSeq++
	ev.Seq = s.lastSeq
	s.unacked = append(s.unacked, ev)
	if ev.GetMetric() != nil {
		s.metrics++
		if s.metrics > s.opt.MaxUnackedMetrics {
			s.dropOldestMetric()
		}
	}
	if ev.GetProgress() != nil {
		s.dropOlderProgress()
	}
	if ev.GetSamples() != nil {
		s.capSamples()
	}
	s.signal()
}

// capSamples drops the oldest queued telemetry batches beyond
// MaxUnackedSamples; callers hold s.mu.
func (s *Session) capSamples() {
	n := 0
	for _, ev := range s.unacked {
		if ev.GetSamples() != nil {
			n++
		}
	}
	if n <= s.opt.MaxUnackedSamples {
		return
	}
	for i, ev := range s.unacked {
		if ev.GetSamples() != nil {
			s.unacked = append(s.unacked[:i:i], s.unacked[i+1:]...)
			s.droppedSamples++
			if s.droppedSamples == 1 || s.droppedSamples%100 == 0 {
				s.log.Warn("coordinator unreachable: dropping the oldest queued telemetry batches", "dropped", s.droppedSamples, "queued", len(s.unacked))
			}
			return
		}
	}
}

// dropOlderProgress removes queued heartbeats a newer one (the last in
// unacked) supersedes: the coordinator keeps only the latest, so a soak
// that outlives its coordinator for hours queues one, not one a minute.
// Callers hold s.mu. One being sent right now may still arrive: harmless.
func (s *Session) dropOlderProgress() {
	last := len(s.unacked) - 1
	kept := s.unacked[:0]
	for i, ev := range s.unacked {
		if i != last && ev.GetProgress() != nil {
			continue
		}
		kept = append(kept, ev)
	}
	clear(s.unacked[len(kept):])
	s.unacked = kept
}

// dropOldestMetric removes the oldest queued metric sample; callers hold
// s.mu. A sample being sent right now may still arrive: harmless.
func (s *Session) dropOldestMetric() {
	for i, ev := range s.unacked {
		if ev.GetMetric() != nil {
			s.unacked = append(s.unacked[:i:i], s.unacked[i+1:]...)
			s.metrics--
			s.dropped++
			if s.dropped == 1 || s.dropped%1000 == 0 {
				s.log.Warn("coordinator unreachable: dropping the oldest queued metric samples", "dropped", s.dropped, "queued", len(s.unacked))
			}
			return
		}
	}
}

// Dropped returns how many metric samples the cap has dropped this boot.
func (s *Session) Dropped() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropped
}

// Pending returns how many events await an ack.
func (s *Session) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.unacked)
}

// Drain waits until every emitted event is acked.
func (s *Session) Drain(ctx context.Context) error {
	for {
		s.mu.Lock()
		n, ch := len(s.unacked), s.changed
		var first uint64
		if n > 0 {
			first = s.unacked[0].Seq
		}
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("draining events: %d still unacked (from seq %d): %w", n, first, ctx.Err())
		}
	}
}

// Next returns the next directive from the coordinator (agent.AssignmentSource).
func (s *Session) Next(ctx context.Context) (agent.Directive, error) {
	for {
		s.mu.Lock()
		if len(s.dirs) > 0 {
			d := s.dirs[0]
			s.dirs = s.dirs[1:]
			s.mu.Unlock()
			return d, nil
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return agent.Directive{}, ctx.Err()
		}
	}
}

func (s *Session) ack(seq uint64) {
	s.mu.Lock()
	i := 0
	for i < len(s.unacked) && s.unacked[i].Seq <= seq {
		if s.unacked[i].GetMetric() != nil {
			s.metrics--
		}
		i++
	}
	var acked []*curev1.Event
	if i > 0 {
		if s.opt.OnAck != nil {
			acked = s.unacked[:i:i]
		}
		s.unacked = append([]*curev1.Event(nil), s.unacked[i:]...)
		s.signal()
	}
	s.mu.Unlock()
	for _, ev := range acked {
		s.opt.OnAck(ev)
	}
}

func (s *Session) pushDirective(d agent.Directive) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dirs = append(s.dirs, d)
	s.signal()
}

// ErrRunEnded is what Run returns once the coordinator said the run this
// boot was booted for has ended (a RunEnded status): nothing more will come,
// and dialling again would only be refused.
var ErrRunEnded = errors.New("the coordinator says this boot's run has ended")

// Run keeps the session up until ctx is done: connect, Hello, replay the
// unacked events, then stream new ones while handing directives to Next.
// Every stream error leads to a reconnect after a jittered exponential
// backoff; it never gives up on its own (the coordinator owns budgets),
// except when the coordinator says the boot's run has ended: then it logs
// that once and returns ErrRunEnded, and the runner stays up idle (the
// debug shell) until the node is rebooted.
func (s *Session) Run(ctx context.Context) error {
	attempt := 0
	for {
		start := time.Now()
		got, err := s.runOnce(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if re := runEnded(err); re != nil {
			validUTF8(re)
			s.log.Warn("the coordinator says this boot's run has ended: not dialling again; the node stays in CURE (debug shell on the console) until an operator boots it elsewhere (curectl nodes boot-os NODE)",
				"run", re.GetRunId(), "node", re.GetNodeId(), "status", re.GetStatus(), "message", re.GetMessage())
			return fmt.Errorf("%w: run %s (%s)", ErrRunEnded, re.GetRunId(), re.GetStatus())
		}
		if got {
			attempt = 0 // the coordinator answered: this was a real session, start backoff afresh
		}
		attempt++
		d := reconnect(s.opt.BackoffBase, s.opt.BackoffMax).Delay(attempt)
		s.log.Warn("coordinator session ended; reconnecting", "err", err, "lasted", time.Since(start).Round(time.Millisecond), "retry_in", d.Round(time.Millisecond), "unacked", s.Pending())
		if err := retry.Sleep(ctx, d); err != nil {
			return err
		}
	}
}

// runEnded is the RunEnded detail of a session's error (nil: none): only
// the coordinator's FailedPrecondition carries it.
func runEnded(err error) *curev1.RunEnded {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.FailedPrecondition {
		return nil
	}
	for _, d := range st.Details() {
		if re, ok := d.(*curev1.RunEnded); ok {
			return re
		}
	}
	return nil
}

// reconnect is the backoff between sessions: base doubling per failed
// reconnect up to max, the upper half jittered so a rack of nodes does not reconnect in lockstep
// (and a coordinator that answers and drops at once is not spun on).
func reconnect(base, max time.Duration) retry.Policy {
	return retry.Policy{Base: base, Max: max, Jitter: retry.Half}
}

// runOnce is one connection. It reports whether the coordinator sent anything.
func (s *Session) runOnce(ctx context.Context) (bool, error) {
	if err := waitReady(ctx, s.conn, s.opt.ConnectTimeout); err != nil {
		return false, err
	}
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stream, err := curev1.NewRunnerServiceClient(s.conn).Session(sctx)
	if err != nil {
		return false, fmt.Errorf("opening session stream: %w", err)
	}
	h, sentUpTo := s.helloNow()
	if err := stream.Send(&curev1.RunnerMessage{Msg: &curev1.RunnerMessage_Hello{Hello: h}}); err != nil {
		return false, fmt.Errorf("sending Hello: %w", err)
	}
	s.log.Info("hello sent to coordinator", "state", h.GetState().GetKind().String(), "replaying", s.Pending())

	var got bool
	var wg sync.WaitGroup
	wg.Go(func() { got = s.receive(stream, cancel) })

	// Sender: everything after sentUpTo, in seq order, then wait for more.
	var sendErr error
	for sendErr == nil {
		s.mu.Lock()
		var batch []*curev1.Event
		for _, ev := range s.unacked {
			if ev.Seq > sentUpTo {
				batch = append(batch, ev)
			}
		}
		ch := s.changed
		s.mu.Unlock()
		for _, ev := range batch {
			if err := stream.Send(&curev1.RunnerMessage{Msg: &curev1.RunnerMessage_Event{Event: ev}}); err != nil {
				sendErr = fmt.Errorf("sending event seq %d: %w", ev.Seq, err)
				break
			}
			sentUpTo = ev.Seq
		}
		if sendErr != nil {
			break
		}
		select {
		case <-ch:
		case <-sctx.Done():
			sendErr = context.Cause(sctx)
		}
	}
	cancel(sendErr)
	wg.Wait()
	return got, sendErr
}

// helloNow is the Hello a new connection opens with, and the seq after
// which the unacked events are sent again.
func (s *Session) helloNow() (*curev1.Hello, uint64) {
	h := s.hello()
	validUTF8(h)
	h.SessionSecret = s.secret
	s.mu.Lock()
	defer s.mu.Unlock()
	// Mid-phase or done, the coordinator compares this with what it has
	// stored to tell a runner still replaying its phases' ends from one
	// that needs new work.
	if st := h.GetState(); st != nil && st.GetRunId() != "" {
		st.LastEventSeq = s.lastSeq
	}
	// Replay from the oldest unacked event; anything older is stored.
	// (Dropped samples leave gaps, so this is not lastSeq - len.)
	sentUpTo := s.lastSeq
	if len(s.unacked) > 0 {
		sentUpTo = s.unacked[0].Seq - 1
	}
	return h, sentUpTo
}

// receive reads the coordinator's messages until the stream ends, which
// cancels the connection with the cause; it reports whether any came.
func (s *Session) receive(stream curev1.RunnerService_SessionClient, cancel context.CancelCauseFunc) (got bool) {
	for {
		m, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("coordinator closed the session")
			}
			cancel(fmt.Errorf("receiving: %w", err))
			return got
		}
		got = true
		s.handle(m)
	}
}

// handle acts on one coordinator message: an ack, or a directive for the
// agent.
func (s *Session) handle(m *curev1.CoordinatorMessage) {
	switch x := m.Msg.(type) {
	case *curev1.CoordinatorMessage_Ack:
		s.ack(x.Ack.GetSeq())
	case *curev1.CoordinatorMessage_Assignment:
		s.pushDirective(agent.Directive{Assignment: x.Assignment})
	case *curev1.CoordinatorMessage_Idle:
		s.pushDirective(agent.Directive{Idle: x.Idle})
	case *curev1.CoordinatorMessage_Reboot:
		s.pushDirective(agent.Directive{Reboot: x.Reboot})
	case *curev1.CoordinatorMessage_Cancel:
		s.pushDirective(agent.Directive{Cancel: x.Cancel})
	case *curev1.CoordinatorMessage_PairSchedule:
		s.pushDirective(agent.Directive{PairSchedule: x.PairSchedule})
	case *curev1.CoordinatorMessage_PairVerdicts:
		s.pushDirective(agent.Directive{PairVerdicts: x.PairVerdicts})
	default:
		s.log.Warn("unknown coordinator message ignored", "type", fmt.Sprintf("%T", m.Msg))
	}
}
