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
func (e *Engine) RunLeases(ctx context.Context) {
	ttl := e.cfg.Store.LeaseTTL()
	if e.cfg.Store.Instance() == "" || !e.cfg.Store.Shared() {
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
		_, err := e.cfg.Store.RenewLeases(rctx)
		cancel()
		if err != nil {
			e.cfg.Log.Error("renew run leases", "instance", e.cfg.Store.Instance(), "err", err)
			if time.Since(lastRenew) > ttl {
				// Another instance may own these runs by now: stop driving
				// them rather than act on a node twice. They are not ended;
				// whoever holds the lease resumes them.
				for _, id := range e.abandonAll(fmt.Sprintf("leases not renewed for %s: %v", time.Since(lastRenew).Round(time.Second), err)) {
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
			e.resumeOwned(ctx, abandoned)
		}
		e.takeOver(ctx)
	}
}

// takeOver claims runs whose lease expired, as many as capacity allows.
func (e *Engine) takeOver(ctx context.Context) {
	e.mu.Lock()
	free := e.cfg.MaxRuns - len(e.running) - e.starting
	e.mu.Unlock()
	if free <= 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, e.cfg.Store.LeaseTTL())
	runs, err := e.cfg.Store.ClaimExpired(cctx, min(free, 256))
	cancel()
	if err != nil {
		e.cfg.Log.Error("claim runs with expired leases", "instance", e.cfg.Store.Instance(), "err", err)
		return
	}
	for _, r := range runs {
		e.cfg.Log.Info("took over run whose lease expired", "run", r.ID, "node", r.NodeID, "phase", r.Phase, "instance", e.cfg.Store.Instance())
		e.coordEvent(ctx, r, r.Phase, runstate.EventInfo, "", fmt.Sprintf("instance %s took the run over from %s (its lease expired); resuming from %s", e.cfg.Store.Instance(), nonEmpty(r.PrevOwner, "nobody"), nonEmpty(r.Phase, "start")), 0)
		e.launch(r.ID)
	}
}

// resumeOwned relaunches the abandoned runs this instance still holds,
// once their old pipeline has exited, and forgets those it relaunched or
// no longer holds.
func (e *Engine) resumeOwned(ctx context.Context, abandoned map[string]bool) {
	cctx, cancel := context.WithTimeout(ctx, e.cfg.Store.LeaseTTL())
	ids, err := e.cfg.Store.OwnedActiveRuns(cctx)
	cancel()
	if err != nil {
		e.cfg.Log.Error("list runs to resume after lost renewals", "err", err)
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
		e.mu.Lock()
		_, driving := e.running[id]
		e.mu.Unlock()
		if driving {
			continue // its old pipeline is still winding down: next tick
		}
		e.cfg.Log.Info("resuming run kept after lease renewals recovered", "run", id)
		e.launch(id)
		delete(abandoned, id)
	}
}

// abandonAll stops every pipeline of this instance without ending its run.
func (e *Engine) abandonAll(why string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var ids []string
	for id, cancel := range e.running {
		e.cfg.Log.Warn("stopping run: this instance may have lost its lease", "run", id, "why", why)
		cancel()
		ids = append(ids, id)
	}
	return ids
}

// abandon stops one run's pipeline: another instance holds its lease.
func (e *Engine) abandon(runID string) {
	e.mu.Lock()
	cancel, ok := e.running[runID]
	e.mu.Unlock()
	if ok {
		e.cfg.Log.Warn("run taken over by another instance; stopping this pipeline", "run", runID, "instance", e.cfg.Store.Instance())
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
