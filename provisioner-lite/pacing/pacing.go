// Package pacing spaces operations per group: power-ons per rack or PDU (eight
// 700 W GPUs per node make a rack's inrush current real when every node
// powers on at once).
package pacing

import (
	"context"
	"sync"
	"time"
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
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
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
		p.buckets = map[string]*bucket{}
	}
	burst := float64(max(p.Burst, 1))
	now := p.now()
	b, ok := p.buckets[group]
	if !ok {
		b = &bucket{tokens: burst, last: now}
		p.buckets[group] = b
	}
	b.tokens = min(burst, b.tokens+now.Sub(b.last).Seconds()*p.Rate)
	b.last = now
	b.tokens--
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / p.Rate * float64(time.Second))
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
