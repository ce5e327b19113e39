package telemetry

// Thin brings a series to at most max points (max ≥ 4) when it has more:
// every run of four consecutive points keeps its lowest and its highest,
// in time order, until the series fits. A peak or a dip survives, so a
// thinned batch still shows the hottest sample. It returns the points
// kept (new slices when thinned) and how many were dropped. The
// coordinator's store thins the same way.
func Thin(t []int64, v []float64, max int) ([]int64, []float64, int) {
	if max < 4 {
		max = 4
	}
	dropped := 0
	for len(t) > max {
		nt, nv := make([]int64, 0, len(t)/2+2), make([]float64, 0, len(t)/2+2)
		for i := 0; i < len(t); i += 4 {
			j := min(i+4, len(t))
			lo, hi := i, i
			for k := i; k < j; k++ {
				if v[k] < v[lo] {
					lo = k
				}
				if v[k] > v[hi] {
					hi = k
				}
			}
			first, second := min(lo, hi), max2(lo, hi)
			nt, nv = append(nt, t[first]), append(nv, v[first])
			if second != first {
				nt, nv = append(nt, t[second]), append(nv, v[second])
			}
		}
		dropped += len(t) - len(nt)
		t, v = nt, nv
	}
	return t, v, dropped
}

func max2(a, b int) int {
	if a > b {
		return a
	}
	return b
}
