package store

import (
	"context"
	"log/slog"
	"time"
)

// Retention says how long the store keeps what only grows.
type Retention struct {
	BootTokens time.Duration // unbound tokens past their expiry (a late PXE request is told "expired", not "unknown")
	RunEvents  time.Duration // runner metrics and logs of finished runs
	Audit      time.Duration // audit log entries
	// Fleet keeps verdicts' measurements, the history fleet bands judge
	// against: longer than logs, and never shorter than a suite's fleet
	// window (the coordinator raises it to the longest at start).
	Fleet time.Duration
}

// DefaultRetention is what provisioner-lite uses unless told otherwise.
var DefaultRetention = Retention{BootTokens: time.Hour, RunEvents: 30 * 24 * time.Hour, Audit: 365 * 24 * time.Hour, Fleet: 180 * 24 * time.Hour}

// Maintain prunes by r every interval until ctx ends; a zero duration keeps
// that kind forever.
func (s *Store) Maintain(ctx context.Context, every time.Duration, r Retention, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.prune(ctx, now, r, log)
		}
	}
}

func (s *Store) prune(ctx context.Context, now time.Time, r Retention, log *slog.Logger) {
	type job struct {
		what string
		keep time.Duration
		f    func(context.Context, time.Time) (int64, error)
	}
	for _, j := range []job{
		{"expired boot tokens", r.BootTokens, s.PruneBootTokens},
		{"metrics and logs of finished runs", r.RunEvents, s.PruneRunEvents},
		{"inventories of finished runs but their latest", r.RunEvents, s.PruneInventories},
		{"audit log entries", r.Audit, s.PruneAudit},
		{"fleet measurements", r.Fleet, s.PruneMeasurements},
	} {
		if j.keep <= 0 {
			continue
		}
		n, err := j.f(ctx, now.Add(-j.keep))
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("pruning "+j.what, "err", err)
		case n > 0:
			log.Info("pruned "+j.what, "count", n, "older_than", j.keep)
		}
	}
}
