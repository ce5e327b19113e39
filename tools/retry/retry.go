// Package retry is the one exponential backoff of the module: a delay that
// doubles per failed attempt up to a cap, jittered so a rack of nodes (or of
// BMCs, or of webhook receivers) is not hit in lockstep, a wait that ends
// with its context, and a loop that retries a call under a bounded number of
// attempts. It imports only the standard library, so both the runner and
// the coordinator use it.
package retry

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Jitter is how a delay is spread.
type Jitter int

const (
	// Full waits uniformly in [0, d]: the least contention (the AWS
	// analysis), for callers many of which fail together.
	Full Jitter = iota
	// Half waits uniformly in [d/2, d]: a floor, for a reconnect that
	// must not spin when the peer answers and drops at once.
	Half
	// None waits d.
	None
)

// Policy is exponential backoff with jitter: the wait after the n-th failed
// attempt (1-based) is min(Max, Base·2^(n-1)), jittered.
type Policy struct {
	Base, Max time.Duration
	Jitter    Jitter
	// Attempts bounds Do (the first call included); 0: until the context
	// ends.
	Attempts int
	// OnRetry, when set, is told of each failed attempt Do retries, with
	// the wait before the next (logs, metrics).
	OnRetry func(attempt int, err error, wait time.Duration)
	// Sleep waits d or until ctx ends; nil: the real clock (tests inject
	// one that records the waits).
	Sleep func(ctx context.Context, d time.Duration) error
}

// Delay is the wait after the attempt-th failed attempt (1-based; an
// attempt below 1 counts as 1).
func (p Policy) Delay(attempt int) time.Duration {
	d := p.Base
	// Doubling in a loop rather than shifting: a long outage's attempt
	// count must not overflow into a negative delay.
	for i := 1; i < attempt && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, p.Max)
	if d <= 0 {
		return 0
	}
	switch p.Jitter {
	case Full:
	case Half:
		return d/2 + rand.N(d-d/2+1)
	case None:
		return d
	}
	return rand.N(d + 1) // Full, and a Jitter this version does not know
}

// Sleep waits d, or until ctx ends (its error then).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// After marks err as retryable after exactly d (a server's Retry-After),
// not after the policy's delay.
func After(d time.Duration, err error) error { return &after{err: err, d: d} }

type after struct {
	err error
	d   time.Duration
}

func (a *after) Error() string { return a.err.Error() }
func (a *after) Unwrap() error { return a.err }

// Permanent marks err as not worth another attempt: Do returns it at once.
func Permanent(err error) error { return &permanent{err} }

type permanent struct{ err error }

func (p *permanent) Error() string { return p.err.Error() }
func (p *permanent) Unwrap() error { return p.err }

// IsPermanent reports whether err was marked Permanent.
func IsPermanent(err error) bool {
	var p *permanent
	return errors.As(err, &p)
}

// Do calls f (attempt 1-based) until it returns nil, returns a Permanent
// error, the attempts are spent, or ctx ends. It returns f's last error,
// unwrapped of Permanent and After; where ctx ended during a wait, ctx's
// error joined to it.
func (p Policy) Do(ctx context.Context, f func(ctx context.Context, attempt int) error) error {
	sleep := p.Sleep
	if sleep == nil {
		sleep = Sleep
	}
	for attempt := 1; ; attempt++ {
		err := f(ctx, attempt)
		if err == nil {
			return nil
		}
		var perm *permanent
		if errors.As(err, &perm) {
			return unwrap(perm.err)
		}
		if (p.Attempts > 0 && attempt >= p.Attempts) || ctx.Err() != nil {
			return unwrap(err)
		}
		wait := p.Delay(attempt)
		var a *after
		if errors.As(err, &a) {
			wait = a.d
		}
		if p.OnRetry != nil {
			p.OnRetry(attempt, unwrap(err), wait)
		}
		if serr := sleep(ctx, wait); serr != nil {
			return errors.Join(unwrap(err), serr)
		}
	}
}

// unwrap strips the markers Do reads (at the top of err only).
func unwrap(err error) error {
	for {
		switch e := err.(type) {
		case *after:
			err = e.err
		case *permanent:
			err = e.err
		default:
			return err
		}
	}
}
