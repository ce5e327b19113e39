package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/fleetband"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// runMeasurements are a run's measurements by (component, check).
func runMeasurements(ctx context.Context, st *store.Store, runID string) (map[[2]string][]*curev1.Measurement, error) {
	ms, err := st.RunMeasurements(ctx, runID)
	if err != nil {
		return nil, err
	}
	by := map[[2]string][]store.MeasurementRecord{}
	for _, m := range ms {
		k := [2]string{m.Component, m.Check}
		by[k] = append(by[k], m)
	}
	out := make(map[[2]string][]*curev1.Measurement, len(by))
	for k, v := range by {
		out[k] = measurementsProto(v)
	}
	return out, nil
}

// fleetReport adds the run's fleet judgement, as the coordinator stored it
// when the validate phase ended, to rep (nothing when none was made).
func fleetReport(ctx context.Context, st *store.Store, runID string, rep *curev1.RunReport) error {
	js, _, err := st.RunFleetJudgement(ctx, runID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	var rec curev1.FleetJudgements
	if err := protojson.Unmarshal(js, &rec); err != nil {
		return fmt.Errorf("run %s: stored fleet judgement: %w", runID, err)
	}
	rep.FleetJudgements, rep.FleetDistributions = rec.GetJudgements(), rec.GetDistributions()
	return nil
}

// Bounds of a FleetBands answer.
const (
	maxFleetKeys   = 200
	maxFleetWindow = 10 * 365 * 24 * time.Hour
)

// FleetBands answers the distribution of recent passing results per SKU,
// check and metric (one vote per node: the median of its components in its
// latest acceptance run, fleetband.Pool), and where a node
// sits: with node_id, its components are marked and it is left out of the
// distribution, as when it is judged.
func (o *OperatorService) FleetBands(ctx context.Context, req *curev1.FleetBandsRequest) (*curev1.FleetBandsResponse, error) {
	window := time.Duration(req.GetWindowMs()) * time.Millisecond
	switch {
	case window == 0:
		window = time.Duration(manifests.DefaultFleetWindow)
	case window < 0 || window > maxFleetWindow:
		return nil, status.Errorf(codes.InvalidArgument, "window_ms %d: want 0 (the default) up to %d", req.GetWindowMs(), maxFleetWindow.Milliseconds())
	}
	sku, node := req.GetSku(), req.GetNodeId()
	if node != "" {
		n, err := o.Store.GetNode(ctx, node)
		if errors.Is(err, store.ErrNotFound) {
			return nil, status.Errorf(codes.NotFound, "unknown node id %q", node)
		} else if err != nil {
			return nil, err
		}
		if sku == "" {
			if n.SKU == "" {
				return nil, status.Errorf(codes.FailedPrecondition, "node %s has no SKU: it has no fleet", node)
			}
			sku = n.SKU
		}
	}
	since := time.Now().Add(-window)
	keys, truncated, err := o.Store.FleetKeys(ctx, sku, req.GetCheck(), req.GetMetric(), since, maxFleetKeys)
	if err != nil {
		return nil, err
	}
	resp := &curev1.FleetBandsResponse{WindowMs: window.Milliseconds(), Truncated: truncated}
	for _, k := range keys {
		rows, err := o.Store.FleetSamples(ctx, store.FleetQuery{SKU: k.SKU, Check: k.Check, Metric: k.Metric, Since: since, ExcludeNode: node})
		if err != nil {
			return nil, err
		}
		var mine []store.MeasurementRecord
		if node != "" {
			if mine, err = o.Store.FleetSamples(ctx, store.FleetQuery{SKU: k.SKU, Node: node, Check: k.Check, Metric: k.Metric, Since: since, IncludeFailing: true}); err != nil {
				return nil, err
			}
		}
		resp.Distributions = append(resp.Distributions, distribution(k, rows, mine, window))
	}
	return resp, nil
}

// distribution is one fleet and the node's place in it. Units: the fleet's
// most common unit (a metric whose unit changed keeps only its newest
// meaning's values comparable); the node's values in another unit are not
// placed.
func distribution(k store.FleetKey, rows, mine []store.MeasurementRecord, window time.Duration) *curev1.FleetDistribution {
	units := map[string]int{}
	unit := ""
	for _, m := range rows {
		units[m.Unit]++
		if units[m.Unit] > units[unit] || (units[m.Unit] == units[unit] && m.Unit < unit) {
			unit = m.Unit
		}
	}
	var ss []fleetband.Sample
	for _, m := range rows {
		ss = append(ss, fleetband.Sample{Node: m.NodeID, Run: m.RunID, Component: m.Component, Value: m.Value, Unit: m.Unit, Time: m.Time})
	}
	st := fleetband.Describe(fleetband.Pool(ss, "", time.Time{}, unit))
	d := fleetband.DistributionProto(k.SKU, fleetband.Key{Check: k.Check, Metric: k.Metric}, unit, st, window)
	if len(rows) == 0 && len(mine) > 0 {
		d.Unit = mine[0].Unit
	}
	for _, m := range mine {
		if m.Unit != d.Unit {
			continue
		}
		mark := &curev1.FleetNodeMark{NodeId: m.NodeID, Component: m.Component, Value: m.Value, RunId: m.RunID, Passed: m.Passed, TimeUnixMs: m.Time.UnixMilli()}
		if st.Samples > 0 {
			mark.Percentile = st.Percentile(m.Value)
		}
		d.Marks = append(d.Marks, mark)
	}
	return d
}
