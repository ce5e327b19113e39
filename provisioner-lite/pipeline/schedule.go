package pipeline

import (
	"context"
	"errors"
	"time"
)

// The pipeline's waits share one way to wait. A wait decides from the
// run's stored status and what it sees now; when the decision is "not
// yet", it requeues: it is looked at again when the node's runner session
// changes, when the run's events change (if the wait reads them), at a
// time the decision computed from stored status (a deadline, the next
// poll), or when the engine stops. No wait sleeps on a deadline it holds
// only in a local variable, so a coordinator that restarts computes the
// same times from the same status.

// errStoppedWaiting is a requeue cut short by the engine stopping.
var errStoppedWaiting = errors.New("stopped")

// requeue is a wait's registration for its next look, taken before the
// look so that nothing that changes during the look is missed.
type requeue struct {
	session <-chan struct{} // the node's runner session changed
	events  <-chan struct{} // the run's stored events changed (nil: not watched)
}

// watch registers for the node's session changes.
func (c *core) watch(nodeID string) requeue {
	return requeue{session: c.cfg.Hub.Changed(nodeID)}
}

// withEvents also wakes on the run's stored events (the store's signal).
func (q requeue) withEvents(signal <-chan struct{}) requeue {
	q.events = signal
	return q
}

// until blocks until a registered change, the time at, or the engine's
// stop (errStoppedWaiting). A zero at waits for a change only.
func (q requeue) until(ctx context.Context, at time.Time) error {
	var timer <-chan time.Time
	if !at.IsZero() {
		t := time.NewTimer(max(time.Until(at), 0))
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-ctx.Done():
		return errStoppedWaiting
	case <-q.session:
	case <-q.events:
	case <-timer:
	}
	return nil
}
