package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/fleetband"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// Day-0 batches. The first nodes of a new SKU finish before its fleet band
// has its minimum of nodes: their results are judged on the absolute bars
// only, and their record stays pending (store.FleetUnbanded). Once a
// judgement of the SKU applies a band, every such run of the SKU that ended
// within its suite's window is judged again against the full band; so is a
// run whose judgement had failed (store.FleetError). The rewrite is
// conditional on the record's revision: of two coordinators sweeping at
// once, one writes and tells OnFleetRejudged, the other sees the conflict
// and moves on.

// rejudgeHorizon bounds how far back a sweep looks for pending records
// (each is then held to its own suite's window), and rejudgeBatch how many
// one sweep takes.
const (
	rejudgeHorizon = 30 * 24 * time.Hour
	rejudgeBatch   = 500
)

// rejudgeAfter sweeps the SKU after a judgement that applied a band (the
// judged run itself is left out: it was just judged).
func (f *fleetCtl) rejudgeAfter(ctx context.Context, sku, judgedRun string) {
	if _, err := f.rejudgeSKU(ctx, sku, judgedRun); err != nil {
		f.cfg.Log.Error("fleet rejudge", "sku", sku, "err", err)
	}
}

// RejudgeFleet judges again every ended run of the SKU whose fleet
// judgement is pending (judged before its band had its minimum of nodes, or
// not judged for an error), and reports how many were rejudged. The
// pipeline calls it after each judgement that applies a band; an operator
// or a periodic task may call it too.
func (f *fleetCtl) RejudgeFleet(ctx context.Context, sku string) (int, error) {
	return f.rejudgeSKU(context.WithoutCancel(ctx), sku, "")
}

// SweepFleet is RejudgeFleet for every SKU with a pending judgement: the
// periodic sweep (Config.FleetSweep) that judges again a run whose
// judgement failed, or whose band filled, when no other judgement of its
// SKU came to do it.
func (f *fleetCtl) SweepFleet(ctx context.Context) (int, error) {
	ctx = context.WithoutCancel(ctx)
	skus, err := f.cfg.Store.PendingFleetSKUs(ctx, time.Now().Add(-rejudgeHorizon), rejudgeBatch)
	if err != nil {
		return 0, err
	}
	total := 0
	var errs []error
	for _, sku := range skus {
		n, err := f.rejudgeSKU(ctx, sku, "")
		total += n
		if err != nil {
			errs = append(errs, fmt.Errorf("SKU %s: %w", sku, err))
		}
	}
	return total, errors.Join(errs...)
}

// sweepFleetLoop runs SweepFleet every Config.FleetSweep until the engine
// stops.
func (f *fleetCtl) sweepFleetLoop() {
	defer f.wg.Done()
	t := time.NewTicker(f.cfg.FleetSweep)
	defer t.Stop()
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-t.C:
		}
		if n, err := f.SweepFleet(f.ctx); err != nil {
			f.cfg.Log.Error("fleet sweep", "rejudged", n, "err", err)
		} else if n > 0 {
			f.cfg.Log.Info("fleet sweep", "rejudged", n)
		}
	}
}

func (f *fleetCtl) rejudgeSKU(ctx context.Context, sku, skipRun string) (int, error) {
	now := time.Now().UTC()
	pend, err := f.cfg.Store.PendingFleetJudgements(ctx, sku, now.Add(-rejudgeHorizon), rejudgeBatch)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, p := range pend {
		if p.RunID == skipRun {
			continue
		}
		done, err := f.rejudgeRun(ctx, p, now)
		switch {
		case errors.Is(err, store.ErrFleetConflict):
			// Another coordinator rejudged it first: it told the hook.
		case err != nil:
			errs = append(errs, fmt.Errorf("run %s: %w", p.RunID, err))
		case done:
			n++
		}
	}
	return n, errors.Join(errs...)
}

// rejudgeRun judges one pending run again; done when its judgement was
// rewritten (and the hook told).
func (f *fleetCtl) rejudgeRun(ctx context.Context, p store.FleetRecord, now time.Time) (bool, error) {
	r, err := f.cfg.Store.GetRun(ctx, p.RunID)
	if err != nil {
		return false, err
	}
	if runstate.Active(r.Status) {
		return false, nil // its own gate judges it again when it ends
	}
	if p.Time.Before(now.Add(-f.suiteWindow(&r))) {
		return false, f.expireRejudge(ctx, &r, p)
	}
	plan, err := f.planFleet(ctx, &r, now)
	if err != nil {
		return false, err // the record stays pending: a later sweep tries again
	}
	if plan == nil {
		plan = &fleetPlan{sku: p.SKU, rec: []byte("{}")}
	}
	if plan.pending == store.FleetUnbanded && p.Pending == store.FleetUnbanded {
		return false, nil // the band still lacks its minimum for this run
	}
	w := store.FleetWrite{RunID: r.ID, SKU: plan.sku, Pending: plan.pending, Verdicts: plan.marginal, Judgements: plan.rec, IfRev: &p.Rev}
	if p.Pending == store.FleetError {
		w.Verdicts = append(w.Verdicts, errorReplaced(r.ID, now))
	}
	if _, err := f.cfg.Store.WriteFleetJudgement(ctx, w); err != nil {
		return false, err
	}
	f.fleetEvents(ctx, &r, plan)
	marginal := plan.out.Marginal()
	reason := rejudgeReason(plan, p.Pending)
	f.coordEvent(ctx, r, modes.Validate, runstate.EventInfo, "", reason, 0)
	f.cfg.Log.Info("fleet rejudged", "run", r.ID, "node", r.NodeID, "marginal", marginal, "reason", reason)
	if f.cfg.OnFleetRejudged != nil {
		f.cfg.OnFleetRejudged(ctx, r.NodeID, r.ID, marginal, reason)
	}
	return true, nil
}

// rejudgeReason is what the timeline and the hook hear of a rejudge.
func rejudgeReason(p *fleetPlan, was string) string {
	why := "judged before its fleet band had its minimum of nodes"
	if was == store.FleetError {
		why = "its fleet judgement had failed"
	}
	if !p.out.Marginal() {
		return fmt.Sprintf("fleet rejudge (%s): within the band", why)
	}
	var parts []string
	for _, v := range p.marginal {
		parts = append(parts, fmt.Sprintf("%s %s %s", v.Component, v.Check, strings.TrimPrefix(v.Message, "outside the fleet band: ")))
	}
	return fmt.Sprintf("fleet rejudge (%s): MARGINAL against the SKU's fleet: %s", why, strings.Join(parts, "; "))
}

// suiteWindow is the fleet window of the run's suite (the default when the
// suite cannot be read: the rejudge reports that error itself).
func (f *fleetCtl) suiteWindow(r *store.Run) time.Duration {
	if _, doc, err := f.cfg.Manifests.LoadDocument(r.Manifest); err == nil && doc.Suite != nil {
		w, _ := fleetband.Policy(&doc.Suite.Spec)
		return w
	}
	return time.Duration(manifests.DefaultFleetWindow)
}

// expireRejudge closes a pending record older than its suite's window: the
// band did not fill in time, the run stands as judged (an ERROR stays).
func (f *fleetCtl) expireRejudge(ctx context.Context, r *store.Run, p store.FleetRecord) error {
	rec, err := f.cfg.Store.FleetRecordOf(ctx, r.ID)
	if err != nil {
		return err
	}
	if _, err := f.cfg.Store.WriteFleetJudgement(ctx, store.FleetWrite{RunID: r.ID, SKU: p.SKU, Pending: store.FleetFinal, Judgements: rec.Judgements, IfRev: &p.Rev}); err != nil {
		return err
	}
	f.coordEvent(ctx, *r, modes.Validate, runstate.EventInfo, "", "fleet rejudge: not made, the band did not have its minimum of nodes within the suite's window", 0)
	return nil
}
