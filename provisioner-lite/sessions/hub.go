// Package sessions keeps track of which runner is connected for which node.
// Events themselves go through the store (the durable record); the hub only
// answers "who is connected right now, since when, in what state" and wakes
// whoever waits for that to change.
//
// A session's stream belongs to the server: Send only queues a message on the
// session's bounded outbox, and the server's session goroutine, the stream's
// one writer, drains it alongside its acks. A pipeline goroutine never blocks
// on a runner that does not read.
package sessions

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// Session is one connected runner stream.
type Session struct {
	NodeID      string
	RunID       string // run the boot token was issued for
	BootID      string
	Hello       *curev1.Hello
	ConnectedAt time.Time
	// Attested: the boot's TPM attestation verified (docs/SECURITY.md).
	// An unattested boot the node's policy lets through (no TPM, never
	// enrolled, SKU does not require it) is attached with Attested false.
	Attested bool

	// mu orders Send against close: once Done is closed no message is
	// queued any more, so a sender either reaches the outbox or gets
	// ErrClosed.
	mu     sync.Mutex
	outbox chan *curev1.CoordinatorMessage
	closed chan struct{}
	once   sync.Once
	// beat is when the runner last sent a heartbeat (unix ns, 0: never).
	beat atomic.Int64
	// lastRecv is when the runner last sent a message (unix nanoseconds):
	// a runner told to reboot has drained its events once it falls silent.
	lastRecv atomic.Int64
	// wake, if set (OnChange), is called under mu when a message is queued
	// and when the session closes: the server then needs no goroutine
	// waiting on the outbox and on Done for every connected runner.
	wake func()
}

// OnChange sets f to be called when a message is queued on the outbox and
// when the session closes (f must not block nor call the session back:
// it runs under the session's lock). A session closed already calls f at
// once.
func (s *Session) OnChange(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wake = f
	select {
	case <-s.closed:
		if f != nil {
			f()
		}
	default:
	}
}

// Heartbeat records that the runner sent a heartbeat (Progress) now: a
// long phase's proof that the runner is alive, not just its stream.
func (s *Session) Heartbeat(t time.Time) { s.beat.Store(t.UnixNano()) }

// LastHeartbeat is when the runner last sent a heartbeat (zero: never on
// this session).
func (s *Session) LastHeartbeat() time.Time {
	if ns := s.beat.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// OutboxSize bounds the messages queued for one runner and not yet written
// to its stream. The coordinator sends a runner few messages (an assignment
// per batch, node-pair schedules and verdicts, a reboot order): a runner
// this far behind is not reading its stream.
const OutboxSize = 64

// NewSession is a session of the runner that sent hello, with an empty
// outbox; whoever owns the stream drains Outbox.
func NewSession(nodeID, runID string, hello *curev1.Hello) *Session {
	s := &Session{
		NodeID: nodeID, RunID: runID, BootID: hello.GetBootId(), Hello: hello,
		ConnectedAt: time.Now(), outbox: make(chan *curev1.CoordinatorMessage, OutboxSize), closed: make(chan struct{}),
	}
	s.lastRecv.Store(s.ConnectedAt.UnixNano())
	return s
}

// Received records that the runner sent a message now.
func (s *Session) Received() { s.lastRecv.Store(time.Now().UnixNano()) }

// LastReceived is when the runner last sent a message (its Hello at first).
func (s *Session) LastReceived() time.Time { return time.Unix(0, s.lastRecv.Load()) }

// ErrClosed is returned when sending on a session whose stream has ended.
var ErrClosed = errors.New("runner session closed")

// ErrOutboxFull is returned by the Send that found the outbox full: the
// session is closed with it (later sends get ErrClosed).
var ErrOutboxFull = errors.New("runner session outbox full")

// Send queues m for the runner and never blocks: messages reach the stream
// in the order they were queued. A closed session refuses m (ErrClosed). A
// full outbox means the runner stopped reading its stream: rather than
// drop a message silently, or hold the pipeline, the session is closed
// (ErrOutboxFull); its runner reconnects and replays what was not acked,
// and the pipeline decides again with the new session. A message queued
// when the stream ends is not delivered, as one written to a dying stream.
func (s *Session) Send(m *curev1.CoordinatorMessage) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.closed:
		return fmt.Errorf("%s: %w", s, ErrClosed)
	default:
	}
	select {
	case s.outbox <- m:
		if s.wake != nil {
			s.wake()
		}
		return nil
	default:
		s.closeLocked()
		return fmt.Errorf("%s: %d messages not taken by the runner: %w", s, OutboxSize, ErrOutboxFull)
	}
}

// Outbox is what Send queued, for the stream's one writer (the server's
// session goroutine) to drain until Done.
func (s *Session) Outbox() <-chan *curev1.CoordinatorMessage { return s.outbox }

// String names the session in errors and logs.
func (s *Session) String() string {
	return fmt.Sprintf("runner session of node %s (run %s, boot %s)", s.NodeID, s.RunID, s.BootID)
}

// Done is closed when the stream ends.
func (s *Session) Done() <-chan struct{} { return s.closed }

func (s *Session) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeLocked()
}

func (s *Session) closeLocked() {
	s.once.Do(func() {
		close(s.closed)
		if s.wake != nil {
			s.wake()
		}
	})
}

// Hub maps node ids to their current session.
type Hub struct {
	mu      sync.Mutex
	current map[string]*Session
	changed map[string]chan struct{}
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{current: map[string]*Session{}, changed: map[string]chan struct{}{}}
}

// Attach makes s the node's current session; an older one is closed, since a
// node has one runner and a new Hello means the old stream is stale.
func (h *Hub) Attach(s *Session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if old := h.current[s.NodeID]; old != nil && old != s {
		old.close()
	}
	h.current[s.NodeID] = s
	h.notifyLocked(s.NodeID)
}

// Detach removes s if it is still current.
func (h *Hub) Detach(s *Session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s.close()
	if h.current[s.NodeID] == s {
		delete(h.current, s.NodeID)
		h.notifyLocked(s.NodeID)
	}
}

// CloseRun closes every session of a run (it ended, or two boots claimed it)
// and returns how many it closed.
func (h *Hub) CloseRun(runID string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for node, s := range h.current {
		if s.RunID == runID {
			s.close()
			delete(h.current, node)
			h.notifyLocked(node)
			n++
		}
	}
	return n
}

// Current returns the node's connected session, or nil.
func (h *Hub) Current(nodeID string) *Session {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.current[nodeID]
}

// Changed returns a channel closed at the node's next attach or detach.
func (h *Hub) Changed(nodeID string) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch, ok := h.changed[nodeID]
	if !ok {
		ch = make(chan struct{})
		h.changed[nodeID] = ch
	}
	return ch
}

func (h *Hub) notifyLocked(nodeID string) {
	if ch, ok := h.changed[nodeID]; ok {
		close(ch)
		delete(h.changed, nodeID)
	}
}
