// Package pacing spaces operations per group: power-ons per rack or PDU (eight
// 700 W GPUs per node make a rack's inrush current real when every node
// powers on at once).
package pacing

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Pacer is a token bucket per group key: each group may do Burst operations
// at once, then Rate per second. Groups do not wait on each other. The zero
// Rate means no pacing.
type Pacer struct {
	Rate  float64 // operations per second per group
	Burst int     // operations allowed back to back (at least 1)
	// Now and Sleep are injectable for tests.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error

	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

func (p *Pacer) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Pacer) sleep(ctx context.Context, d time.Duration) error {
	if p.Sleep != nil {
		return p.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reserve takes a token for group now (possibly going negative, which
// queues the caller) and says how long to wait before acting.
func (p *Pacer) reserve(group string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.buckets == nil {
		p.buckets = map[string]*rate.Limiter{}
	}
	lim, ok := p.buckets[group]
	if !ok {
		lim = rate.NewLimiter(rate.Limit(p.Rate), max(p.Burst, 1))
		p.buckets[group] = lim
	}
	now := p.now()
	return lim.ReserveN(now, 1).DelayFrom(now)
}

// Wait blocks until group may do one more operation, or ctx ends (the
// token is then not given back: a cancelled power-on rarely retries at once).
func (p *Pacer) Wait(ctx context.Context, group string) (time.Duration, error) {
	if p == nil || p.Rate <= 0 {
		return 0, ctx.Err()
	}
	d := p.reserve(group)
	if d <= 0 {
		return 0, ctx.Err()
	}
	return d, p.sleep(ctx, d)
}

// Group is the pacing group of a node: the first of keys present in its
// labels (e.g. "pdu", then "rack"), else "default".
func Group(labels map[string]string, keys []string) string {
	for _, k := range keys {
		if v := labels[k]; v != "" {
			return k + "=" + v
		}
	}
	return "default"
}
