package server

import (
	"math"
	"slices"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/protobuf/proto"
)

// FuzzRunnerSamples feeds any bytes a runner could send as a Samples
// event: what is accepted is within the bounds, of a runner's sources,
// clean, finite and dated within the window.
func FuzzRunnerSamples(f *testing.F) {
	now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	for _, ev := range []*curev1.Event{
		{Seq: 1, Phase: "nvme", Body: &curev1.Event_Samples{Samples: &curev1.Samples{Series: []*curev1.Series{
			{Component: "hwmon/coretemp/Package id 0", Metric: "temp_c", Unit: "C", Source: "host", TimeUnixMs: []int64{now.UnixMilli()}, Values: []float64{71}},
			{Component: "gpu/0\x1b[2J", Metric: "power_w", Unit: "W\u202e", Source: "gpu", TimeUnixMs: []int64{1, now.UnixMilli()}, Values: []float64{1, 2}}}}}},
		{Seq: 2, Phase: "sed_revert", Body: &curev1.Event_Samples{Samples: &curev1.Samples{Series: []*curev1.Series{
			{Component: "bmc/x", Metric: "temp_c", Source: "bmc", TimeUnixMs: []int64{1}, Values: []float64{math.Inf(1)}}}}}},
	} {
		b, _ := proto.Marshal(ev)
		f.Add(b)
	}
	from, to := now.Add(-time.Hour), now.Add(time.Hour)
	f.Fuzz(func(t *testing.T, b []byte) {
		var ev curev1.Event
		if proto.Unmarshal(b, &ev) != nil || ev.GetSamples() == nil {
			return
		}
		out, _, err := runnerSamples(&ev, fuzzPhases, from, to)
		if err != nil {
			return
		}
		if len(out) == 0 || len(out) > maxSamplesSeries {
			t.Fatalf("%d series accepted", len(out))
		}
		points := 0
		for _, s := range out {
			if !slices.Contains(samplesSources, s.Source) || !samplesMetric.MatchString(s.Metric) || s.Component == "" ||
				!textsafe.Safe(s.Component) || !textsafe.Safe(s.Unit) || len(s.Component) > maxName+8 || len(s.Unit) > maxSamplesUnit+8 {
				t.Fatalf("series %q %q %q %q", s.Source, s.Component, s.Metric, s.Unit)
			}
			if len(s.Times) != len(s.Values) || len(s.Times) > maxSamplesSeriesPoints {
				t.Fatalf("series of %d times, %d values", len(s.Times), len(s.Values))
			}
			for i, v := range s.Values {
				if math.IsNaN(v) || math.IsInf(v, 0) || s.Times[i] < from.UnixMilli() || s.Times[i] > to.UnixMilli() {
					t.Fatalf("point %d, %v", s.Times[i], v)
				}
			}
			points += len(s.Times)
		}
		if points > maxSamplesPoints {
			t.Fatalf("%d points accepted", points)
		}
	})
}
