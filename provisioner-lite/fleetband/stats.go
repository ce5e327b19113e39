package fleetband

import (
	"math"
	"slices"
)

// MADScale makes the median absolute deviation estimate a normal
// distribution's standard deviation (1/Φ⁻¹(3/4)): a band of 3 robust
// deviations is then about three sigma, whatever the outliers.
const MADScale = 1.4826

// MinRelSpread is the smallest spread a band is measured in, as a share of
// the fleet median's magnitude. A fleet that agrees exactly (all values
// identical: a MAD of zero) would otherwise call any difference, however
// small, MARGINAL; two per cent is below what separates a healthy part from
// a degraded one and above the run-to-run noise of a real measurement.
const MinRelSpread = 0.02

// MaxPlotValues bounds the values a distribution keeps for plots and
// answers: evenly spaced quantiles of the sorted fleet when it has more.
const MaxPlotValues = 256

// Stats are robust statistics over a fleet's votes (one per node, Pool).
type Stats struct {
	Nodes   int // distinct nodes: the votes
	Samples int // component values behind the votes (a vote is their median)
	Median  float64
	MAD     float64 // median absolute deviation × MADScale
	// Spread is what bands are measured in: MAD, or MinRelSpread × |median|
	// when that is larger (a fleet that agrees too closely).
	Spread        float64
	P5, P50, P95  float64
	Min, Max      float64
	Values        []float64 // sorted, thinned to MaxPlotValues
	sortedAllVals []float64
}

// Describe computes the statistics of votes (one per node, see Pool): the
// median, spread, quantiles and percentiles are over nodes, never over
// components.
func Describe(votes []Sample) Stats {
	vals := make([]float64, 0, len(votes))
	nodes := map[string]bool{}
	samples := 0
	for _, s := range votes {
		vals = append(vals, s.Value)
		nodes[s.Node] = true
		samples += max(s.Components, 1)
	}
	st := describeValues(vals)
	st.Nodes, st.Samples = len(nodes), samples
	return st
}

func describeValues(vals []float64) Stats {
	vals = slices.Clone(vals)
	slices.Sort(vals)
	st := Stats{Samples: len(vals), sortedAllVals: vals}
	if len(vals) == 0 {
		return st
	}
	st.Median = quantile(vals, 0.5)
	dev := make([]float64, len(vals))
	for i, v := range vals {
		dev[i] = math.Abs(v - st.Median)
	}
	slices.Sort(dev)
	st.MAD = MADScale * quantile(dev, 0.5)
	st.Spread = max(st.MAD, MinRelSpread*math.Abs(st.Median))
	st.P5, st.P50, st.P95 = quantile(vals, 0.05), st.Median, quantile(vals, 0.95)
	st.Min, st.Max = vals[0], vals[len(vals)-1]
	st.Values = thin(vals, MaxPlotValues)
	return st
}

// quantile of sorted values, linear between order statistics (the
// definition spreadsheets and numpy use by default).
func quantile(sorted []float64, q float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	pos := q * float64(n-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, n-1)
	return sorted[lo] + (pos-float64(lo))*(sorted[hi]-sorted[lo])
}

// thin keeps at most k evenly spaced quantiles of sorted (its ends always).
func thin(sorted []float64, k int) []float64 {
	if len(sorted) <= k {
		return slices.Clone(sorted)
	}
	out := make([]float64, k)
	for i := range k {
		out[i] = sorted[int(math.Round(float64(i)*float64(len(sorted)-1)/float64(k-1)))]
	}
	return out
}

// Percentile is the share of the fleet's votes below v, 0..100; values
// equal to v count half (so the fleet's median sits at 50).
func (s Stats) Percentile(v float64) float64 {
	if len(s.sortedAllVals) == 0 {
		return math.NaN()
	}
	below, equal := 0, 0
	for _, x := range s.sortedAllVals {
		switch {
		case x < v:
			below++
		case x == v:
			equal++
		}
	}
	return 100 * (float64(below) + float64(equal)/2) / float64(len(s.sortedAllVals))
}
