// Package peerlimit holds the budgets every listener of the coordinator
// charges a peer against, and the summary that replaces one log line per
// refused peer. A flood must cost the coordinator a counter, never a queue,
// a row or a line each.
package peerlimit

import (
	"sync"
	"time"
)

// Bucket is a token bucket that refuses instead of waiting: a client that
// is refused retries (DHCP, TFTP, TCP), and a flood must not queue work.
type Bucket struct {
	mu     sync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
	now    func() time.Time
}

// NewBucket refills rate tokens a second up to burst (full at start).
func NewBucket(rate float64, burst int) *Bucket {
	return newBucket(rate, burst, time.Now)
}

func newBucket(rate float64, burst int, now func() time.Time) *Bucket {
	return &Bucket{rate: rate, burst: float64(burst), tokens: float64(burst), last: now(), now: now}
}

// Allow takes one token if there is one.
func (b *Bucket) Allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// Keyed is one bucket per key (a source address, a MAC), each refilling at
// rate up to burst. It holds at most maxKeys keys: when full, keys whose
// bucket has refilled completely are forgotten first (they are
// indistinguishable from new ones), and if none has, the new key is refused
// outright: a flood of distinct spoofed sources costs a bounded map, and
// sources already known keep their budget.
type Keyed struct {
	mu      sync.Mutex
	rate    float64
	burst   float64
	maxKeys int
	keys    map[string]*keyState
	now     func() time.Time
}

type keyState struct {
	tokens float64
	last   time.Time
}

// NewKeyed makes per-key budgets; maxKeys <= 0 means 65,536.
func NewKeyed(rate float64, burst, maxKeys int) *Keyed {
	return newKeyed(rate, burst, maxKeys, time.Now)
}

func newKeyed(rate float64, burst, maxKeys int, now func() time.Time) *Keyed {
	if maxKeys <= 0 {
		maxKeys = 1 << 16
	}
	return &Keyed{rate: rate, burst: float64(burst), maxKeys: maxKeys, keys: map[string]*keyState{}, now: now}
}

// Allow takes one token from key's bucket.
func (k *Keyed) Allow(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	s := k.keys[key]
	if s == nil {
		if len(k.keys) >= k.maxKeys && !k.pruneLocked(now) {
			return false
		}
		s = &keyState{tokens: k.burst, last: now}
		k.keys[key] = s
	}
	s.tokens = min(k.burst, s.tokens+now.Sub(s.last).Seconds()*k.rate)
	s.last = now
	if s.tokens < 1 {
		return false
	}
	s.tokens--
	return true
}

// pruneLocked forgets keys whose bucket is full again; it reports whether
// any room was made.
func (k *Keyed) pruneLocked(now time.Time) bool {
	freed := false
	for key, s := range k.keys {
		if s.tokens+now.Sub(s.last).Seconds()*k.rate >= k.burst {
			delete(k.keys, key)
			freed = true
		}
	}
	return freed
}

// Len is the number of keys held (for tests and metrics).
func (k *Keyed) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.keys)
}
