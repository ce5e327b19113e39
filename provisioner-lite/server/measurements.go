package server

import (
	"fmt"
	"math"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
)

// Bounds of a verdict's measurements as a runner sends them.
const (
	maxMetricName = 64
	maxUnit       = 16
)

// verdictMeasurements cleans a runner verdict's measurements for the store:
// more than store.MaxVerdictMeasurements, a nameless or repeated metric is
// refused (a runner bug or a peer probing the bounds); a value that is not
// finite is not a measurement and is left out.
func verdictMeasurements(in []*curev1.Measurement) ([]store.Measurement, error) {
	if len(in) > store.MaxVerdictMeasurements {
		return nil, fmt.Errorf("%d measurements in one verdict (at most %d)", len(in), store.MaxVerdictMeasurements)
	}
	out := make([]store.Measurement, 0, len(in))
	seen := map[string]bool{}
	for i, m := range in {
		name := textsafe.BoundedLine(m.GetMetric(), maxMetricName)
		if name == "" {
			return nil, fmt.Errorf("measurement %d has no metric name", i)
		}
		if seen[name] {
			return nil, fmt.Errorf("measurement %d: metric %q twice in one verdict", i, name)
		}
		seen[name] = true
		if v := m.GetValue(); math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		out = append(out, store.Measurement{Metric: name, Value: m.GetValue(), Unit: textsafe.BoundedLine(m.GetUnit(), maxUnit)})
	}
	return out, nil
}

// measurementsProto puts stored measurements back on the wire.
func measurementsProto(ms []store.MeasurementRecord) []*curev1.Measurement {
	out := make([]*curev1.Measurement, 0, len(ms))
	for _, m := range ms {
		out = append(out, &curev1.Measurement{Metric: m.Metric, Value: m.Value, Unit: m.Unit})
	}
	return out
}
