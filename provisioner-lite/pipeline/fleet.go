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

// judgeFleet judges the run's measured results against the recent passing
// results of other nodes of its SKU, for the metrics its suite names fleet
// bands for (package fleetband), when the validate phase ends: the MARGINAL
// verdicts and the judgement are stored, and the timeline says what was
// judged and what was not (too few nodes). A run whose suite names no band
// is left alone.
func (e *Engine) judgeFleet(ctx context.Context, r *store.Run) error {
	ctx = context.WithoutCancel(ctx)
	m := modes.Mode(r.Mode)
	if m != modes.Diagnostic && m != modes.Burnin {
		return nil
	}
	_, doc, err := e.cfg.Manifests.LoadDocument(r.Manifest)
	if err != nil {
		return fmt.Errorf("fleet bands: suite %s: %w", r.Manifest, err)
	}
	if doc.Suite == nil {
		return nil
	}
	bands := fleetband.Bands(&doc.Suite.Spec)
	if len(bands) == 0 {
		return nil
	}
	n, err := e.cfg.Store.GetNode(ctx, r.NodeID)
	if err != nil {
		return fmt.Errorf("fleet bands: %w", err)
	}
	vs, err := e.cfg.Store.Verdicts(ctx, r.ID)
	if err != nil {
		return fmt.Errorf("fleet bands: %w", err)
	}
	ms, err := e.cfg.Store.RunMeasurements(ctx, r.ID)
	if err != nil {
		return fmt.Errorf("fleet bands: %w", err)
	}
	window, minNodes := fleetband.Policy(&doc.Suite.Spec)
	now := time.Now().UTC()
	in := fleetband.Input{Node: r.NodeID, Now: now, Window: window, MinNodes: minNodes, Bands: bands,
		Results: results(vs, ms), Fleet: map[fleetband.Key][]fleetband.Sample{}}
	if n.SKU != "" {
		for check, metrics := range bands {
			if !slices.ContainsFunc(in.Results, func(r fleetband.Result) bool { return r.Check == check }) {
				continue
			}
			for metric := range metrics {
				rows, err := e.cfg.Store.FleetSamples(ctx, store.FleetQuery{SKU: n.SKU, Check: check, Metric: metric, Since: now.Add(-window), ExcludeNode: r.NodeID})
				if err != nil {
					return fmt.Errorf("fleet bands: %w", err)
				}
				in.Fleet[fleetband.Key{Check: check, Metric: metric}] = samples(rows)
			}
		}
	}
	out := fleetband.Judge(in)
	if len(out.Judgements) == 0 {
		return nil
	}
	rec, err := protojson.Marshal(out.Record(r.NodeID, n.SKU, window, now))
	if err != nil {
		return fmt.Errorf("fleet bands: %w", err)
	}
	var marginal []store.Verdict
	orig := map[[2]string]store.Verdict{}
	for _, v := range vs {
		orig[[2]string{v.Component, v.Check}] = v
	}
	for _, v := range out.Verdicts {
		o := orig[[2]string{v.Component, v.Check}]
		marginal = append(marginal, store.Verdict{RunID: r.ID, Component: v.Component, Check: v.Check, Status: curev1.VerdictStatus_MARGINAL,
			Observed: textsafe.Bounded(v.Observed, 1024), Expected: textsafe.Bounded(joinNonEmpty("; ", o.Expected, v.Expected), 1024),
			Message: textsafe.Bounded(v.Message, 4096), Time: now, Stage: o.Stage})
	}
	if err := e.cfg.Store.PutFleetJudgement(ctx, r.ID, marginal, rec); err != nil {
		return err
	}
	for _, v := range marginal {
		e.coordEvent(ctx, *r, modes.Validate, runstate.EventVerdict, runstate.VerdictName(v.Status), fmt.Sprintf("%s %s: %s", v.Component, v.Check, v.Message), 0)
	}
	e.coordEvent(ctx, *r, modes.Validate, runstate.EventInfo, "", fleetSummary(out, n.SKU), 0)
	return nil
}

// fleetGate is the run's fleet verdict before it can end succeeded: the
// message of a failure when a MARGINAL verdict stands ("" when none). A
// judgement the coordinator did not make (it stopped between the validate
// phase's end and its judgement) is made now.
func (e *Engine) fleetGate(ctx context.Context, r *store.Run) string {
	m := modes.Mode(r.Mode)
	if m != modes.Diagnostic && m != modes.Burnin {
		return ""
	}
	if _, _, err := e.cfg.Store.RunFleetJudgement(ctx, r.ID); errors.Is(err, store.ErrNotFound) {
		if err := e.judgeFleet(ctx, r); err != nil {
			e.cfg.Log.Error("fleet bands", "run", r.ID, "err", err)
		}
	}
	vs, err := e.cfg.Store.Verdicts(context.WithoutCancel(ctx), r.ID)
	if err != nil {
		e.cfg.Log.Error("fleet bands: verdicts", "run", r.ID, "err", err)
		return ""
	}
	var bad []string
	for _, v := range vs {
		if v.Status == curev1.VerdictStatus_MARGINAL {
			bad = append(bad, fmt.Sprintf("%s %s %s", v.Component, v.Check, strings.TrimPrefix(v.Message, "outside the fleet band: ")))
		}
	}
	if len(bad) == 0 {
		return ""
	}
	return textsafe.Truncate(fmt.Sprintf("MARGINAL against the SKU's fleet, the gate fails (every absolute bar passed): %s", strings.Join(bad, "; ")), 4096)
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
	var marginal, within int
	notes := map[string]int{}
	var order []string
	for _, j := range o.Judgements {
		switch {
		case j.Marginal:
			marginal++
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
