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
// more than store.MaxVerdictMeasurements, a metric without a plain name or
// repeated is refused (a runner bug or a peer probing the bounds); a value that is not
// finite is not a measurement and is left out.
func verdictMeasurements(in []*curev1.Measurement) ([]store.Measurement, error) {
	if len(in) > store.MaxVerdictMeasurements {
		return nil, fmt.Errorf("%d measurements in one verdict (at most %d)", len(in), store.MaxVerdictMeasurements)
	}
	out := make([]store.Measurement, 0, len(in))
	seen := map[string]bool{}
	for i, m := range in {
		name := m.GetMetric()
		if !metricName(name) {
			return nil, fmt.Errorf("measurement %d: metric name %q is not 1 to %d of A-Z a-z 0-9 _ . - /", i, textsafe.BoundedLine(name, maxMetricName), maxMetricName)
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

// metricName: a metric is a key of the fleet history and a word in
// reports, so its name is plain.
func metricName(s string) bool {
	if s == "" || len(s) > maxMetricName {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-' || c == '/') {
			return false
		}
	}
	return true
}

// measurementsProto puts stored measurements back on the wire.
func measurementsProto(ms []store.MeasurementRecord) []*curev1.Measurement {
	out := make([]*curev1.Measurement, 0, len(ms))
	for _, m := range ms {
		out = append(out, &curev1.Measurement{Metric: m.Metric, Value: m.Value, Unit: m.Unit})
	}
	return out
}
