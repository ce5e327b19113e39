package pipeline

import (
	"container/heap"
	"context"
	"errors"
	"sync"
	"time"
)

// The pipeline's waits share one way to wait, and one scheduler. A wait decides from the
// run's stored status and what it sees now; when the decision is "not
// yet", it requeues: it is looked at again when the node's runner session
// changes, when the run's events change (if the wait reads them), at a
// time the decision computed from stored status (a deadline, the next
// poll), or when the engine stops. No wait sleeps on a deadline it holds
// only in a local variable, so a coordinator that restarts computes the
// same times from the same status.

// errStoppedWaiting is a requeue cut short by the engine stopping.
var errStoppedWaiting = errors.New("stopped")

// scheduler holds every requeue's time in one heap and wakes each at its
// time from one goroutine: the engine's waits, however many runs it
// drives, share one timer, and what is pending is one number to look at.
type scheduler struct {
	mu    sync.Mutex
	heap  wakeHeap
	kick  chan struct{} // the earliest time changed
	timer *time.Timer
}

// wake is one requeue's time; ch is closed at it.
type wake struct {
	at    time.Time
	ch    chan struct{}
	index int // in the heap; -1 once fired or cancelled
}

func newScheduler() *scheduler {
	return &scheduler{kick: make(chan struct{}, 1)}
}

// at returns a channel closed at t, and a func that forgets it (a wait
// woken by something else).
func (s *scheduler) at(t time.Time) (<-chan struct{}, func()) {
	w := &wake{at: t, ch: make(chan struct{})}
	s.mu.Lock()
	heap.Push(&s.heap, w)
	first := s.heap[0] == w
	s.mu.Unlock()
	if first {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	return w.ch, func() {
		s.mu.Lock()
		if w.index >= 0 {
			heap.Remove(&s.heap, w.index)
		}
		s.mu.Unlock()
	}
}

// pending is how many requeues wait for their time.
func (s *scheduler) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.heap)
}

// run fires the due requeues until ctx ends (the waits end with it).
func (s *scheduler) run(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		next := s.fire(time.Now())
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-t.C:
		}
	}
}

// fire closes every requeue due by now; the wait until the next one.
func (s *scheduler) fire(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.heap) > 0 && !s.heap[0].at.After(now) {
		close(heap.Pop(&s.heap).(*wake).ch)
	}
	if len(s.heap) == 0 {
		return time.Hour
	}
	return s.heap[0].at.Sub(now)
}

// wakeHeap orders requeues by time (container/heap).
type wakeHeap []*wake

func (h wakeHeap) Len() int           { return len(h) }
func (h wakeHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h wakeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *wakeHeap) Push(x any) {
	w := x.(*wake)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *wakeHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	w.index = -1
	*h = old[:len(old)-1]
	return w
}

// requeue is a wait's registration for its next look, taken before the
// look so that nothing that changes during the look is missed.
type requeue struct {
	sched   *scheduler
	session <-chan struct{} // the node's runner session changed
	events  <-chan struct{} // the run's stored events changed (nil: not watched)
}

// watch registers for the node's session changes.
func (c *core) watch(nodeID string) requeue {
	return requeue{sched: c.sched, session: c.cfg.Hub.Changed(nodeID)}
}

// withEvents also wakes on the run's stored events (the store's signal).
func (q requeue) withEvents(signal <-chan struct{}) requeue {
	q.events = signal
	return q
}

// until blocks until a registered change, the time at (the scheduler's),
// or the engine's stop (errStoppedWaiting). A zero at waits for a change
// only.
func (q requeue) until(ctx context.Context, at time.Time) error {
	var due <-chan struct{}
	if !at.IsZero() {
		ch, forget := q.sched.at(at)
		defer forget()
		due = ch
	}
	select {
	case <-ctx.Done():
		return errStoppedWaiting
	case <-q.session:
	case <-q.events:
	case <-due:
	}
	return nil
}
