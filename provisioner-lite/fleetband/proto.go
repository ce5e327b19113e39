package fleetband

import (
	"math"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// DistributionProto is st on the wire.
func DistributionProto(sku string, k Key, unit string, st Stats, window time.Duration) *curev1.FleetDistribution {
	return &curev1.FleetDistribution{
		Sku: sku, Check: k.Check, Metric: k.Metric, Unit: unit,
		Nodes: uint32(st.Nodes), Samples: uint32(st.Samples),
		Median: finite(st.Median), Mad: finite(st.MAD), Spread: finite(st.Spread),
		P5: finite(st.P5), P50: finite(st.P50), P95: finite(st.P95), Min: finite(st.Min), Max: finite(st.Max),
		Values: st.Values, WindowMs: window.Milliseconds(),
	}
}

// Record is what the coordinator keeps of a run's judgement: every
// judgement and the distributions they used, with the node's components
// marked in them.
func (o Outcome) Record(node, sku string, window time.Duration, at time.Time) *curev1.FleetJudgements {
	rec := &curev1.FleetJudgements{TimeUnixMs: at.UnixMilli(), JudgementsOmitted: uint32(o.Omitted)}
	marks := map[Key][]*curev1.FleetNodeMark{}
	for _, j := range o.Judgements {
		pj := &curev1.FleetJudgement{
			Component: j.Component, Check: j.Check, Metric: j.Metric, Unit: j.Unit, Value: j.Value, Percentile: finite(j.Percentile),
			Applied: j.Applied, Marginal: j.Marginal, BandLow: j.Low, BandHigh: j.High, Below: j.Below, Above: j.Above,
			MinNodes: uint32(j.MinNodes), Note: j.Note, Message: j.Message,
		}
		rec.Judgements = append(rec.Judgements, pj)
		if j.Measured {
			k := Key{j.Check, j.Metric}
			marks[k] = append(marks[k], &curev1.FleetNodeMark{NodeId: node, Component: j.Component, Value: j.Value,
				Percentile: finite(j.Percentile), Passed: !j.Marginal})
		}
	}
	for _, d := range o.Distributions {
		pd := DistributionProto(sku, d.Key, d.Unit, d.Stats, window)
		pd.Marks = marks[d.Key]
		rec.Distributions = append(rec.Distributions, pd)
	}
	return rec
}

// finite keeps NaN (no fleet) off the wire: JSON has no NaN, and 0 with
// zero samples says the same.
func finite(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return x
}
