package server

import (
	"fmt"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// boundSeries thins first, then leaves out the lowest-ranked series
// (constant limits, then load) and keeps temperatures and throttling.
func TestBoundSeriesDropsLowestRankFirst(t *testing.T) {
	mk := func(source, comp, metric string) *curev1.Series {
		s := &curev1.Series{Source: source, Component: comp, Metric: metric}
		for i := range ReportSeriesPoints {
			s.TimeUnixMs = append(s.TimeUnixMs, 1795600000000+int64(i)*10000)
			s.Values = append(s.Values, float64(i%17)+0.5)
		}
		return s
	}
	rep := &curev1.RunReport{}
	for i := range 8 {
		rep.HostSeries = append(rep.HostSeries, mk("host", fmt.Sprintf("cpu/%d", i), "busy_pct"), mk("host", fmt.Sprintf("cpu/%d", i), "base_clock_mhz"),
			mk("host", fmt.Sprintf("cpu/%d", i), "throttled"))
		rep.BmcSeries = append(rep.BmcSeries, mk("bmc", fmt.Sprintf("bmc/Temp%d", i), "temp_c"))
	}
	// Room for about 16 series of minReportSeriesPoints points.
	max := 16 * (minReportSeriesPoints*14 + 40)
	boundSeries(rep, max)
	b := rep.GetSeriesBound()
	if seriesBytes(rep) > max || b.GetPointsPerSeries() > minReportSeriesPoints || b.GetSeriesOmitted() == 0 {
		t.Fatalf("%d bytes (max %d), bound %v", seriesBytes(rep), max, b)
	}
	kept := map[string]int{}
	for _, s := range append(rep.GetBmcSeries(), rep.GetHostSeries()...) {
		kept[s.GetMetric()]++
	}
	if kept["temp_c"] != 8 || kept["throttled"] != 8 || kept["base_clock_mhz"] != 0 {
		t.Errorf("kept %v: want every temperature and throttling series, no constant limit", kept)
	}
	if int(b.GetSeriesOmitted())+len(rep.GetBmcSeries())+len(rep.GetHostSeries()) != 32 {
		t.Errorf("%d omitted + %d kept of 32", b.GetSeriesOmitted(), len(rep.GetBmcSeries())+len(rep.GetHostSeries()))
	}
	if !strings.Contains(b.GetNote(), fmt.Sprintf("%d series are left out", b.GetSeriesOmitted())) {
		t.Errorf("note %q", b.GetNote())
	}
	// Within the bound, nothing changes and nothing is said.
	small := &curev1.RunReport{HostSeries: []*curev1.Series{mk("host", "cpu/0", "busy_pct")}}
	boundSeries(small, MaxReportSeriesBytes)
	if small.GetSeriesBound() != nil || len(small.GetHostSeries()[0].GetValues()) != ReportSeriesPoints {
		t.Errorf("a small report was cut: %v", small.GetSeriesBound())
	}
}
