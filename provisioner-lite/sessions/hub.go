// Package sessions keeps track of which runner is connected for which node.
// Events themselves go through the store (the durable record); the hub only
// answers "who is connected right now, since when, in what state" and wakes
// whoever waits for that to change.
package sessions

import (
	"errors"
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

	mu     sync.Mutex
	send   func(*curev1.CoordinatorMessage) error
	closed chan struct{}
	once   sync.Once
	// beat is when the runner last sent a heartbeat (unix ns, 0: never).
	beat atomic.Int64
	// lastRecv is when the runner last sent a message (unix nanoseconds):
	// a runner told to reboot has drained its events once it falls silent.
	lastRecv atomic.Int64
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

// NewSession wraps a stream's send function.
func NewSession(nodeID, runID string, hello *curev1.Hello, send func(*curev1.CoordinatorMessage) error) *Session {
	s := &Session{
		NodeID: nodeID, RunID: runID, BootID: hello.GetBootId(), Hello: hello,
		ConnectedAt: time.Now(), send: send, closed: make(chan struct{}),
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

// Send serialises writes: gRPC streams allow one sender at a time, and both
// the ack loop and the pipeline send.
func (s *Session) Send(m *curev1.CoordinatorMessage) error {
	select {
	case <-s.closed:
		return ErrClosed
	default:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.send(m)
}

// Done is closed when the stream ends.
func (s *Session) Done() <-chan struct{} { return s.closed }

func (s *Session) close() { s.once.Do(func() { close(s.closed) }) }

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
