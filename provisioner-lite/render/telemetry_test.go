package render

import (
	"bytes"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"golang.org/x/net/html"
)

// hostReport is sampleReport with the telemetry of a stage and a cut.
func hostReport() (*curev1.RunReport, []*curev1.TimelineEntry) {
	r, tl := sampleReport()
	var times []int64
	var temp, clock, busy []float64
	for i := range 12 {
		times = append(times, t0+int64(i)*10_000)
		temp, clock, busy = append(temp, 60+float64(i)), append(clock, 2900), append(busy, 99.5)
	}
	r.HostSeries = []*curev1.Series{
		{Component: "hwmon/coretemp/Package id 0", Metric: "temp_c", Unit: "C", Source: "host", TimeUnixMs: times, Values: temp},
		{Component: "cpu/0", Metric: "clock_mhz", Unit: "MHz", Source: "host", TimeUnixMs: times, Values: clock},
		{Component: "cpu/0", Metric: "busy_pct", Unit: "%", Source: "host", TimeUnixMs: times, Values: busy},
		{Component: "gpu/0", Metric: "temp_c", Unit: "C", Source: "gpu", TimeUnixMs: times[:3], Values: []float64{70, 88, 91}},
	}
	r.SeriesBound = &curev1.ReportSeriesBound{PointsPerSeries: 75, SeriesOmitted: 3, Note: "to keep the report's sampled series within 1024 KiB, each series is thinned to at most 75 points"}
	return r, tl
}

// The HTML report plots the host's series (one plot per source, metric
// and unit) and says what the report cut.
func TestHTMLReportHostTelemetry(t *testing.T) {
	r, tl := hostReport()
	var b bytes.Buffer
	if err := writeHTML(&b, r, tl, time.UnixMilli(t0+800_000)); err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	var plots int
	var titles []string
	walk(doc, func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "div" && attr(n, "id") == "host-plots" {
			walk(n, func(m *html.Node) {
				if m.Type == html.ElementNode && m.Data == "svg" {
					plots++
					titles = append(titles, attr(m, "aria-label"))
				}
			})
		}
	})
	if plots != 4 || !strings.Contains(strings.Join(titles, ","), "gpu temp_c") || !strings.Contains(strings.Join(titles, ","), "host clock_mhz") {
		t.Errorf("%d host plots %q, want 4 (gpu temp, host busy, clock, temp)", plots, titles)
	}
	if !strings.Contains(b.String(), `id="series-bound"`) || !strings.Contains(b.String(), "thinned to at most 75 points") {
		t.Error("the series bound is not said")
	}
	// A report without host telemetry has no such section.
	plain, _ := sampleReport()
	b.Reset()
	if err := writeHTML(&b, plain, tl, time.UnixMilli(t0+800_000)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "Host telemetry") {
		t.Error("host section without host series")
	}
}

func TestPrintReportHostTelemetry(t *testing.T) {
	r, _ := hostReport()
	var b bytes.Buffer
	PrintReport(&b, r)
	words := strings.Join(strings.Fields(b.String()), " ")
	for _, want := range []string{"HOST TELEMETRY SOURCE METRIC POINTS MIN MAX LAST", "hwmon/coretemp/Package id 0 host temp_c 12 60 C 71 C 71 C",
		"gpu/0 gpu temp_c 3 70 C 91 C 91 C", "(to keep the report's sampled series within 1024 KiB"} {
		if !strings.Contains(words, want) {
			t.Errorf("text report lacks %q:\n%s", want, b.String())
		}
	}
}
