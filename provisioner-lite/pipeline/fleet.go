package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/fleetband"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/protobuf/encoding/protojson"
)

// Fleet verdicts the coordinator adds of its own: the judgement's ERROR
// (component fleet) names what could not be judged.
const (
	fleetComponent     = "fleet"
	checkFleetBand     = "fleet-band"
	checkFleetVerdicts = "verdict-read"
)

// fleetPlan is a run's fleet judgement as made, before it is stored.
type fleetPlan struct {
	sku      string
	out      fleetband.Outcome
	marginal []store.Verdict
	rec      []byte
	pending  string // store.FleetUnbanded when a band lacked its minimum of nodes
	window   time.Duration
}

// planFleet judges the run's measured results against the recent passing
// results of other nodes of its SKU, for the metrics its suite names fleet
// bands for (package fleetband). nil: nothing to judge (not a suite run, no
// band named, no banded result). It only reads.
func (f *fleetCtl) planFleet(ctx context.Context, r *store.Run, now time.Time) (*fleetPlan, error) {
	if !suiteMode(r) {
		return nil, nil
	}
	_, doc, err := f.cfg.Manifests.LoadDocument(r.Manifest)
	if err != nil {
		return nil, fmt.Errorf("suite %s: %w", r.Manifest, err)
	}
	if doc.Suite == nil {
		return nil, fmt.Errorf("suite %s: a %s, not a ValidationSuite", r.Manifest, doc.Kind)
	}
	bands := fleetband.Bands(&doc.Suite.Spec)
	if len(bands) == 0 {
		return nil, nil
	}
	n, err := f.cfg.Store.GetNode(ctx, r.NodeID)
	if err != nil {
		return nil, err
	}
	vs, err := f.cfg.Store.Verdicts(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	ms, err := f.cfg.Store.RunMeasurements(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	window, minNodes := fleetband.Policy(&doc.Suite.Spec)
	in := fleetband.Input{Node: r.NodeID, Now: now, Window: window, MinNodes: minNodes, Bands: bands,
		Results: results(vs, ms), Fleet: map[fleetband.Key][]fleetband.Sample{}}
	if n.SKU != "" {
		if err := f.fleetSamples(ctx, &in, n.SKU); err != nil {
			return nil, err
		}
	}
	out := fleetband.Judge(in)
	if len(out.Judgements) == 0 {
		return nil, nil
	}
	rec, err := protojson.Marshal(out.Record(r.NodeID, n.SKU, window, now))
	if err != nil {
		return nil, err
	}
	p := &fleetPlan{sku: n.SKU, out: out, rec: rec, window: window, marginal: marginalVerdicts(r.ID, vs, out, now)}
	if unbanded(out) {
		p.pending = store.FleetUnbanded
	}
	return p, nil
}

// fleetSamples reads the SKU's fleet of each banded metric the run has a
// result of.
func (f *fleetCtl) fleetSamples(ctx context.Context, in *fleetband.Input, sku string) error {
	for check, metrics := range in.Bands {
		if !slices.ContainsFunc(in.Results, func(r fleetband.Result) bool { return r.Check == check }) {
			continue
		}
		for metric := range metrics {
			rows, err := f.cfg.Store.FleetSamples(ctx, store.FleetQuery{SKU: sku, Check: check, Metric: metric, Since: in.Now.Add(-in.Window), ExcludeNode: in.Node})
			if err != nil {
				return err
			}
			in.Fleet[fleetband.Key{Check: check, Metric: metric}] = samples(rows)
		}
	}
	return nil
}

// unbanded says a measured result was not banded because its fleet lacked
// the minimum of nodes: the run is to be judged again when it has it.
func unbanded(o fleetband.Outcome) bool {
	return slices.ContainsFunc(o.Judgements, func(j fleetband.Judgement) bool { return j.Measured && !j.Applied })
}

// applied says some band of the outcome had its minimum of nodes.
func applied(o fleetband.Outcome) bool {
	return slices.ContainsFunc(o.Judgements, func(j fleetband.Judgement) bool { return j.Applied })
}

func marginalVerdicts(runID string, vs []store.Verdict, out fleetband.Outcome, now time.Time) []store.Verdict {
	var marginal []store.Verdict
	orig := map[[2]string]store.Verdict{}
	for _, v := range vs {
		orig[[2]string{v.Component, v.Check}] = v
	}
	for _, v := range out.Verdicts {
		o := orig[[2]string{v.Component, v.Check}]
		status := curev1.VerdictStatus_MARGINAL
		if len(v.Unmeasured) > 0 {
			status = curev1.VerdictStatus_ERROR
		}
		marginal = append(marginal, store.Verdict{RunID: runID, Component: v.Component, Check: v.Check, Status: status,
			Observed: textsafe.Bounded(v.Observed, 1024), Expected: textsafe.Bounded(joinNonEmpty("; ", o.Expected, v.Expected), 1024),
			Message: textsafe.Bounded(v.Message, 4096), Time: now, Stage: o.Stage})
	}
	return marginal
}

// judgeFleet judges the run against its SKU's fleet when the validate
// phase ends (and at its gate, when that judgement is missing or pending):
// the MARGINAL verdicts and the judgement are stored, and the timeline says
// what was judged and what was not (too few nodes). A judgement that cannot
// be made is an ERROR verdict (fleet fleet-band) and a pending record, so the
// gate fails and a later sweep judges the run again. A judgement that
// applied a band sweeps the SKU's runs that were judged before their band
// had its minimum (rejudgeSKU).
func (f *fleetCtl) judgeFleet(ctx context.Context, r *store.Run) error {
	ctx = context.WithoutCancel(ctx)
	now := time.Now().UTC()
	prev, err := f.cfg.Store.FleetRecordOf(ctx, r.ID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return f.fleetError(ctx, r, "", fmt.Errorf("fleet band: %w", err))
	}
	p, err := f.planFleet(ctx, r, now)
	if err != nil {
		return f.fleetError(ctx, r, prev.SKU, fmt.Errorf("fleet band: %w", err))
	}
	if p == nil {
		if prev.Pending == store.FleetError {
			// Nothing to judge any more (the suite names no band now):
			// the ERROR is replaced and the record final.
			p = &fleetPlan{sku: prev.SKU, rec: []byte("{}")}
		} else {
			return nil
		}
	}
	w := store.FleetWrite{RunID: r.ID, SKU: p.sku, Pending: p.pending, Verdicts: p.marginal, Judgements: p.rec}
	if prev.Pending == store.FleetError {
		w.Verdicts = append(w.Verdicts, errorReplaced(r.ID, now))
	}
	if _, err := f.cfg.Store.WriteFleetJudgement(ctx, w); err != nil {
		return f.fleetError(ctx, r, p.sku, fmt.Errorf("fleet band: %w", err))
	}
	f.fleetEvents(ctx, r, p)
	if applied(p.out) && p.sku != "" {
		f.rejudgeAfter(ctx, p.sku, r.ID)
	}
	return nil
}

// errorReplaced is the verdict that replaces an earlier fleet ERROR once
// the judgement could be made.
func errorReplaced(runID string, now time.Time) store.Verdict {
	return store.Verdict{RunID: runID, Component: fleetComponent, Check: checkFleetBand, Status: curev1.VerdictStatus_PASS, Time: now,
		Message: "fleet judgement made " + now.Format(time.RFC3339) + " (replaces an earlier ERROR: the judgement could not be made then)"}
}

func (f *fleetCtl) fleetEvents(ctx context.Context, r *store.Run, p *fleetPlan) {
	for _, v := range p.marginal {
		f.coordEvent(ctx, *r, modes.Validate, runstate.EventVerdict, runstate.VerdictName(v.Status), fmt.Sprintf("%s %s: %s", v.Component, v.Check, v.Message), 0)
	}
	if len(p.out.Judgements) > 0 {
		f.coordEvent(ctx, *r, modes.Validate, runstate.EventInfo, "", fleetSummary(p.out, p.sku), 0)
	}
}

// fleetError records a judgement that could not be made, where the store
// still works: an ERROR verdict naming what (the gate fails on it) and a
// record pending in error (the run is judged again). It returns cause.
func (f *fleetCtl) fleetError(ctx context.Context, r *store.Run, sku string, cause error) error {
	f.cfg.Log.Error("fleet judgement not made", "run", r.ID, "node", r.NodeID, "err", cause)
	f.errorVerdict(ctx, r, fleetComponent, checkFleetBand, cause)
	if _, err := f.cfg.Store.WriteFleetJudgement(ctx, store.FleetWrite{RunID: r.ID, SKU: sku, Pending: store.FleetError, Judgements: []byte("{}")}); err != nil {
		f.cfg.Log.Error("fleet judgement: record the error", "run", r.ID, "err", err)
	}
	return cause
}

// errorVerdict stores an ERROR verdict of the coordinator's judgement and
// puts it in the timeline (a store that fails is logged: the caller's
// error fails the gate anyway).
func (c *core) errorVerdict(ctx context.Context, r *store.Run, component, check string, cause error) {
	v := store.Verdict{RunID: r.ID, Component: component, Check: check, Status: curev1.VerdictStatus_ERROR, Time: time.Now().UTC(),
		Message: textsafe.Bounded("not judged, so the run does not pass: "+cause.Error(), 4096)}
	if err := c.cfg.Store.PutVerdict(ctx, v); err != nil {
		c.cfg.Log.Error("store ERROR verdict", "run", r.ID, "component", component, "check", check, "err", err)
	}
	c.coordEvent(ctx, *r, modes.Validate, runstate.EventVerdict, runstate.VerdictName(v.Status), fmt.Sprintf("%s %s: %s", component, check, v.Message), 0)
}

// fleetGate is the run's fleet verdict before it can end succeeded: the
// message of a failure when a MARGINAL verdict stands ("" when none), or an
// error naming what could not be judged (the gate fails closed). A
// judgement that is missing (the coordinator stopped between the validate
// phase's end and its judgement), in error or unbanded is made again now.
func (f *fleetCtl) fleetGate(ctx context.Context, r *store.Run) (string, error) {
	if !suiteMode(r) {
		return "", nil
	}
	ctx = context.WithoutCancel(ctx)
	rec, err := f.cfg.Store.FleetRecordOf(ctx, r.ID)
	if errors.Is(err, store.ErrNotFound) || err == nil && rec.Pending != store.FleetFinal {
		if err := f.judgeFleet(ctx, r); err != nil {
			return "", err
		}
	} else if err != nil {
		return "", f.fleetError(ctx, r, "", fmt.Errorf("fleet band: %w", err))
	}
	vs, err := f.cfg.Store.Verdicts(ctx, r.ID)
	if err != nil {
		cause := fmt.Errorf("verdict read: %w", err)
		f.errorVerdict(ctx, r, fleetComponent, checkFleetVerdicts, cause)
		return "", cause
	}
	var bad []string
	for _, v := range vs {
		switch {
		case v.Status == curev1.VerdictStatus_MARGINAL:
			bad = append(bad, fmt.Sprintf("%s %s %s", v.Component, v.Check, strings.TrimPrefix(v.Message, "outside the fleet band: ")))
		case v.Status == curev1.VerdictStatus_ERROR && strings.HasPrefix(v.Message, fleetband.Unjudgeable):
			bad = append(bad, fmt.Sprintf("%s %s %s", v.Component, v.Check, v.Message))
		case v.Status == curev1.VerdictStatus_ERROR && v.Component == fleetComponent:
			return "", fmt.Errorf("%s %s: %s", v.Component, v.Check, v.Message)
		}
	}
	if len(bad) == 0 {
		return "", nil
	}
	return textsafe.Truncate(fmt.Sprintf("MARGINAL against the SKU's fleet, or not judgeable by it, the gate fails: %s", strings.Join(bad, "; ")), 4096), nil
}

// results pairs the run's verdicts with their stored measurements.
func results(vs []store.Verdict, ms []store.MeasurementRecord) []fleetband.Result {
	byKey := map[[2]string][]fleetband.Measurement{}
	for _, m := range ms {
		k := [2]string{m.Component, m.Check}
		byKey[k] = append(byKey[k], fleetband.Measurement{Metric: m.Metric, Value: m.Value, Unit: m.Unit})
	}
	out := make([]fleetband.Result, 0, len(vs))
	for _, v := range vs {
		out = append(out, fleetband.Result{Component: v.Component, Check: v.Check, Status: v.Status, Measurements: byKey[[2]string{v.Component, v.Check}]})
	}
	return out
}

func samples(rows []store.MeasurementRecord) []fleetband.Sample {
	out := make([]fleetband.Sample, 0, len(rows))
	for _, m := range rows {
		out = append(out, fleetband.Sample{Node: m.NodeID, Run: m.RunID, Component: m.Component, Value: m.Value, Unit: m.Unit, Time: m.Time})
	}
	return out
}

// fleetSummary is the timeline's line on a judgement: "fleet bands (SKU x):
// 1 MARGINAL, 3 within the band, 2 not applied (fleet band not applied: 2
// of 5 nodes)".
func fleetSummary(o fleetband.Outcome, sku string) string {
	var marginal, within, unmeasured int
	notes := map[string]int{}
	var order []string
	for _, j := range o.Judgements {
		switch {
		case j.Marginal:
			marginal++
		case !j.Measured && j.Note != "":
			unmeasured++
		case j.Applied:
			within++
		default:
			if notes[j.Note] == 0 {
				order = append(order, j.Note)
			}
			notes[j.Note]++
		}
	}
	parts := []string{fmt.Sprintf("%d MARGINAL", marginal), fmt.Sprintf("%d within the band", within)}
	if unmeasured > 0 {
		parts = append(parts, fmt.Sprintf("%d ERROR (a banded PASS without its measurement)", unmeasured))
	}
	for _, n := range order {
		parts = append(parts, fmt.Sprintf("%d %s (only the absolute thresholds apply)", notes[n], n))
	}
	if o.Omitted > 0 {
		parts = append(parts, fmt.Sprintf("%d not judged (more than %d)", o.Omitted, fleetband.MaxJudgements))
	}
	return fmt.Sprintf("fleet bands (SKU %s): %s", nonEmpty(sku, "none"), strings.Join(parts, ", "))
}

func joinNonEmpty(sep string, ss ...string) string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return strings.Join(out, sep)
}

// gate is the coordinator's judgement of a run whose phases are all done,
// against its SKU's fleet and on its BMC's evidence: "" passes; otherwise
// why it fails. What could not be judged is an ERROR and fails the run:
// doubt never passes.
func (f *fleetCtl) gate(ctx context.Context, r *store.Run) string {
	var errs, fails []string
	for _, g := range []func(context.Context, *store.Run) (string, error){f.fleetGate, f.bmc.bmcGate} {
		msg, err := g(ctx, r)
		if err != nil {
			errs = append(errs, err.Error())
		}
		if msg != "" {
			fails = append(fails, msg)
		}
	}
	if len(errs) > 0 {
		return textsafe.Truncate("ERROR: not judged, so the run does not pass: "+strings.Join(append(errs, fails...), "; "), 4096)
	}
	return strings.Join(fails, "; ")
}
