package server

import (
	"context"
	"errors"
	"fmt"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/protobuf/encoding/protojson"
)

// ReportSeriesPoints bounds the points of each series a report carries (a
// plot needs no more); the store keeps up to store.MaxSeriesPoints.
const ReportSeriesPoints = 300

// addBMCEvidence puts what the run's BMC showed in its report: the log
// entries of the run window, PSUs and fans, how they were read, and the
// sensors sampled during the validate phase.
func addBMCEvidence(ctx context.Context, st *store.Store, runID string, rep *curev1.RunReport) error {
	_, doc, err := st.BMCEvidence(ctx, runID)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return err
	default:
		var ev curev1.BmcEvidence
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(doc, &ev); err != nil {
			return fmt.Errorf("run %s: stored BMC evidence unreadable: %w", runID, err)
		}
		rep.BmcLog, rep.BmcPowerSupplies, rep.BmcFans, rep.BmcCollection = ev.GetLog(), ev.GetPowerSupplies(), ev.GetFans(), ev.GetCollection()
	}
	series, err := st.RunSeries(ctx, runID, runstate.SeriesBMC)
	if err != nil {
		return err
	}
	rep.BmcSeries = SeriesProto(series, ReportSeriesPoints)
	return nil
}

// SeriesProto turns stored series into the report's, each thinned to at
// most maxPoints (extremes kept).
func SeriesProto(series []store.Series, maxPoints int) []*curev1.Series {
	var out []*curev1.Series
	for _, s := range series {
		t, v, _ := store.ThinPoints(s.Times, s.Values, maxPoints)
		out = append(out, &curev1.Series{Component: s.Component, Metric: s.Metric, Unit: s.Unit, Source: s.Source, TimeUnixMs: t, Values: v})
	}
	return out
}
