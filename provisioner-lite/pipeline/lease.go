package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// Leases: several coordinator instances may share one database. Each run is
// leased by the instance that drives it and renewed by a heartbeat; when an
// instance stops renewing (killed, partitioned), another claims its runs once
// the lease expired and resumes them from the store, exactly as a restarted
// coordinator does. The store fences writes: an instance whose lease was
// taken over cannot overwrite the new owner's state (store.ErrLeaseLost), and
// its pipeline for that run stops.

// RunLeases renews this instance's leases and takes over runs whose lease
// expired, until ctx ends. It returns when ctx is done.
func (l *leaseCtl) RunLeases(ctx context.Context) {
	ttl := l.cfg.Store.LeaseTTL()
	if l.cfg.Store.Instance() == "" || !l.cfg.Store.Shared() {
		// One instance: nobody to take runs over or lose them to. (A
		// renewal stuck behind a busy store once made a lone instance
		// abandon all 5,000 of its runs.)
		return
	}
	tick := time.NewTicker(ttl / 3)
	defer tick.Stop()
	lastRenew := time.Now()
	var abandoned map[string]bool // runs stopped while renewals failed
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rctx, cancel := context.WithTimeout(ctx, ttl/3)
		_, err := l.cfg.Store.RenewLeases(rctx)
		cancel()
		if err != nil {
			l.cfg.Log.Error("renew run leases", "instance", l.cfg.Store.Instance(), "err", err)
			if time.Since(lastRenew) > ttl {
				// Another instance may own these runs by now: stop driving
				// them rather than act on a node twice. They are not ended;
				// whoever holds the lease resumes them.
				for _, id := range l.abandonAll(fmt.Sprintf("leases not renewed for %s: %v", time.Since(lastRenew).Round(time.Second), err)) {
					if abandoned == nil {
						abandoned = map[string]bool{}
					}
					abandoned[id] = true
				}
			}
			continue
		}
		lastRenew = time.Now()
		if len(abandoned) > 0 {
			// The renewal that just worked kept the runs nobody took over
			// meanwhile: they are this instance's again.
			l.resumeOwned(ctx, abandoned)
		}
		l.takeOver(ctx)
	}
}

// takeOver claims runs whose lease expired, as many as capacity allows.
func (l *leaseCtl) takeOver(ctx context.Context) {
	l.mu.Lock()
	free := l.cfg.MaxRuns - len(l.running) - l.starting
	l.mu.Unlock()
	if free <= 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, l.cfg.Store.LeaseTTL())
	runs, err := l.cfg.Store.ClaimExpired(cctx, min(free, 256))
	cancel()
	if err != nil {
		l.cfg.Log.Error("claim runs with expired leases", "instance", l.cfg.Store.Instance(), "err", err)
		return
	}
	for _, r := range runs {
		l.cfg.Log.Info("took over run whose lease expired", "run", r.ID, "node", r.NodeID, "phase", r.Phase, "instance", l.cfg.Store.Instance())
		l.coordEvent(ctx, r, r.Phase, runstate.EventInfo, "", fmt.Sprintf("instance %s took the run over from %s (its lease expired); resuming from %s", l.cfg.Store.Instance(), nonEmpty(r.PrevOwner, "nobody"), nonEmpty(r.Phase, "start")), 0)
		l.launch(r.ID)
	}
}

// resumeOwned relaunches the abandoned runs this instance still holds,
// once their old pipeline has exited, and forgets those it relaunched or
// no longer holds.
func (l *leaseCtl) resumeOwned(ctx context.Context, abandoned map[string]bool) {
	cctx, cancel := context.WithTimeout(ctx, l.cfg.Store.LeaseTTL())
	ids, err := l.cfg.Store.OwnedActiveRuns(cctx)
	cancel()
	if err != nil {
		l.cfg.Log.Error("list runs to resume after lost renewals", "err", err)
		return
	}
	owned := map[string]bool{}
	for _, id := range ids {
		owned[id] = true
	}
	for id := range abandoned {
		if !owned[id] {
			delete(abandoned, id) // another instance took it, or it ended
			continue
		}
		l.mu.Lock()
		_, driving := l.running[id]
		l.mu.Unlock()
		if driving {
			continue // its old pipeline is still winding down: next tick
		}
		l.cfg.Log.Info("resuming run kept after lease renewals recovered", "run", id)
		l.launch(id)
		delete(abandoned, id)
	}
}

// abandonAll stops every pipeline of this instance without ending its run.
func (l *leaseCtl) abandonAll(why string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for id, cancel := range l.running {
		l.cfg.Log.Warn("stopping run: this instance may have lost its lease", "run", id, "why", why)
		cancel()
		ids = append(ids, id)
	}
	return ids
}

// abandon stops one run's pipeline: another instance holds its lease.
func (l *leaseCtl) abandon(runID string) {
	l.mu.Lock()
	cancel, ok := l.running[runID]
	l.mu.Unlock()
	if ok {
		l.cfg.Log.Warn("run taken over by another instance; stopping this pipeline", "run", runID, "instance", l.cfg.Store.Instance())
		cancel()
	}
}

// leaseLost reports whether err means another instance owns the run.
func leaseLost(err error) bool { return errors.Is(err, store.ErrLeaseLost) }

// ReleaseAll gives up the leases of the runs this instance was driving when
// it stopped, so a peer takes them over at once instead of after the TTL.
// Call it after Wait.
func (e *Engine) ReleaseAll(ctx context.Context) {
	e.mu.Lock()
	ids := make([]string, 0, len(e.interrupted))
	for id := range e.interrupted {
		ids = append(ids, id)
	}
	e.interrupted = map[string]bool{}
	e.mu.Unlock()
	for _, id := range ids {
		if err := e.cfg.Store.ReleaseRun(ctx, id); err != nil {
			e.cfg.Log.Error("release run lease", "run", id, "err", err)
		}
	}
}
