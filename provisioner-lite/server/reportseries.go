package server

import (
	"context"
	"fmt"
	"slices"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/natural"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// MaxReportSeriesBytes bounds the sampled series of a report (the BMC's
// and the host's together): a run may hold 512 series of 1,024 points,
// several MiB, and the whole answer must stay under MaxReportBytes.
const MaxReportSeriesBytes = 1 << 20

// minReportSeriesPoints is as far as boundSeries thins before it leaves
// series out: fewer points no longer show a soak's shape.
const minReportSeriesPoints = 32

// addHostSeries puts the telemetry the runner sampled during the suite's
// stages in the report, each series thinned like the BMC's.
func addHostSeries(ctx context.Context, st *store.Store, runID string, rep *curev1.RunReport) error {
	all, err := st.RunSeries(ctx, runID, "")
	if err != nil {
		return err
	}
	host := slices.DeleteFunc(all, func(s store.Series) bool { return s.Source != runstate.SeriesHost && s.Source != runstate.SeriesGPU })
	rep.HostSeries = SeriesProto(host, ReportSeriesPoints)
	return nil
}

// seriesRank orders series by what a reader needs most: temperatures,
// throttling, clocks, power, fans, load; a part's constant limits last.
func seriesRank(metric string) int {
	switch metric {
	case "temp_c":
		return 0
	case "throttled":
		return 1
	case "clock_mhz":
		return 2
	case "power_w":
		return 3
	case "fan_rpm":
		return 4
	case "busy_pct":
		return 5
	case "base_clock_mhz", "temp_crit_c", "temp_max_c":
		return 7
	}
	return 6
}

// seriesBytes is what the report's series add to its encoding.
func seriesBytes(rep *curev1.RunReport) int {
	n := 0
	for _, list := range [][]*curev1.Series{rep.GetBmcSeries(), rep.GetHostSeries()} {
		for _, s := range list {
			sz := proto.Size(s)
			n += 2 + protowire.SizeVarint(uint64(sz)) + sz
		}
	}
	return n
}

// boundSeries keeps rep's series within limit encoded bytes: every series
// is thinned (extremes kept) by halves down to minReportSeriesPoints, then
// the lowest-ranked series are left out; SeriesBound says what was cut.
func boundSeries(rep *curev1.RunReport, limit int) {
	if seriesBytes(rep) <= limit {
		return
	}
	pps := ReportSeriesPoints
	for seriesBytes(rep) > limit && pps > minReportSeriesPoints {
		pps = max(pps/2, minReportSeriesPoints)
		for _, list := range [][]*curev1.Series{rep.GetBmcSeries(), rep.GetHostSeries()} {
			for _, s := range list {
				s.TimeUnixMs, s.Values, _ = store.ThinPoints(s.GetTimeUnixMs(), s.GetValues(), pps)
			}
		}
	}
	omitted := 0
	if seriesBytes(rep) > limit {
		type ref struct {
			s   *curev1.Series
			bmc bool
		}
		var all []ref
		for _, s := range rep.GetBmcSeries() {
			all = append(all, ref{s, true})
		}
		for _, s := range rep.GetHostSeries() {
			all = append(all, ref{s, false})
		}
		// Lowest priority first: the highest rank, the last component.
		slices.SortStableFunc(all, func(a, b ref) int {
			if ra, rb := seriesRank(a.s.GetMetric()), seriesRank(b.s.GetMetric()); ra != rb {
				return rb - ra
			}
			return -natural.Compare(a.s.GetComponent(), b.s.GetComponent())
		})
		drop := map[*curev1.Series]bool{}
		over := seriesBytes(rep) - limit
		for _, r := range all {
			if over <= 0 {
				break
			}
			sz := proto.Size(r.s)
			over -= 2 + protowire.SizeVarint(uint64(sz)) + sz
			drop[r.s] = true
			omitted++
		}
		rep.BmcSeries = slices.DeleteFunc(rep.BmcSeries, func(s *curev1.Series) bool { return drop[s] })
		rep.HostSeries = slices.DeleteFunc(rep.HostSeries, func(s *curev1.Series) bool { return drop[s] })
	}
	note := fmt.Sprintf("to keep the report's sampled series within %d KiB, each series is thinned to at most %d points (highs and lows kept)", limit>>10, pps)
	if omitted > 0 {
		note += fmt.Sprintf(" and %d series are left out (constant limits, load, fans and power before clocks, throttling and temperatures)", omitted)
	}
	rep.SeriesBound = &curev1.ReportSeriesBound{PointsPerSeries: uint32(pps), SeriesOmitted: uint32(omitted), Note: note}
}
