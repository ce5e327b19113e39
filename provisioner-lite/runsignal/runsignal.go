// Package runsignal tells a run's watchers that the run changed: the store
// notifies it after each commit that appends an event to a run or updates
// it, and the pipeline's waits and the operator's watch subscribe. A signal
// carries nothing: a watcher re-reads the store after each. Signals are
// coalesced (one pending per subscriber) and never block the notifier.
package runsignal

import "sync"

// Bus holds the subscribers of each run. The zero value is not usable:
// create it with New. It is safe for concurrent use.
type Bus struct {
	mu   sync.Mutex
	subs map[string]map[*subscriber]struct{}
}

type subscriber struct{ ch chan struct{} }

// New returns a bus without subscribers.
func New() *Bus { return &Bus{subs: map[string]map[*subscriber]struct{}{}} }

// Subscribe returns a channel signalled whenever runID is notified, and a
// func that unsubscribes (idempotent). A notification while a signal is
// still pending is folded into it.
func (b *Bus) Subscribe(runID string) (<-chan struct{}, func()) {
	sub := &subscriber{ch: make(chan struct{}, 1)}
	b.mu.Lock()
	m := b.subs[runID]
	if m == nil {
		m = map[*subscriber]struct{}{}
		b.subs[runID] = m
	}
	m[sub] = struct{}{}
	b.mu.Unlock()
	var once sync.Once
	return sub.ch, func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			delete(b.subs[runID], sub)
			if len(b.subs[runID]) == 0 {
				delete(b.subs, runID)
			}
		})
	}
}

// Notify signals runID's subscribers without waiting for any of them.
func (b *Bus) Notify(runID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for sub := range b.subs[runID] {
		select {
		case sub.ch <- struct{}{}:
		default: // a signal is already pending; the watcher will see this change too
		}
	}
}

// subscribers is how many subscribers runID has (tests).
func (b *Bus) subscribers(runID string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs[runID])
}
