// Package peerlimit holds the budgets every listener of the coordinator
// charges a peer against, and the summary that replaces one log line per
// refused peer. A flood must cost the coordinator a counter, never a queue,
// a row or a line each.
package peerlimit

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Bucket is a token bucket that refuses instead of waiting: a client that
// is refused retries (DHCP, TFTP, TCP), and a flood must not queue work.
type Bucket struct {
	lim *rate.Limiter
	now func() time.Time
}

// NewBucket refills rate tokens a second up to burst (full at start).
func NewBucket(r float64, burst int) *Bucket {
	return newBucket(r, burst, time.Now)
}

func newBucket(r float64, burst int, now func() time.Time) *Bucket {
	return &Bucket{lim: rate.NewLimiter(rate.Limit(r), burst), now: now}
}

// Allow takes one token if there is one.
func (b *Bucket) Allow() bool { return b.lim.AllowN(b.now(), 1) }

// Keyed is one bucket per key (a source address, a MAC), each refilling at
// rate up to burst. It holds at most maxKeys keys: when full, keys whose
// bucket has refilled completely are forgotten first (they are
// indistinguishable from new ones), and if none has, the new key is refused
// outright: a flood of distinct spoofed sources costs a bounded map, and
// sources already known keep their budget.
type Keyed struct {
	mu      sync.Mutex
	rate    rate.Limit
	burst   int
	maxKeys int
	keys    map[string]*rate.Limiter
	now     func() time.Time
}

// NewKeyed makes per-key budgets; maxKeys <= 0 means 65,536.
func NewKeyed(r float64, burst, maxKeys int) *Keyed {
	return newKeyed(r, burst, maxKeys, time.Now)
}

func newKeyed(r float64, burst, maxKeys int, now func() time.Time) *Keyed {
	if maxKeys <= 0 {
		maxKeys = 1 << 16
	}
	return &Keyed{rate: rate.Limit(r), burst: burst, maxKeys: maxKeys, keys: map[string]*rate.Limiter{}, now: now}
}

// Allow takes one token from key's bucket.
func (k *Keyed) Allow(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	lim := k.keys[key]
	if lim == nil {
		if len(k.keys) >= k.maxKeys && !k.pruneLocked(now) {
			return false
		}
		lim = rate.NewLimiter(k.rate, k.burst)
		k.keys[key] = lim
	}
	return lim.AllowN(now, 1)
}

// pruneLocked forgets keys whose bucket is full again; it reports whether
// any room was made.
func (k *Keyed) pruneLocked(now time.Time) bool {
	freed := false
	for key, lim := range k.keys {
		if lim.TokensAt(now) >= float64(k.burst) {
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
