package render

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"golang.org/x/net/html"
)

// bmcReport is sampleReport with what a BMC showed over the run.
func bmcReport() (*curev1.RunReport, []*curev1.TimelineEntry) {
	r, tl := sampleReport()
	r.BmcLog = []*curev1.BmcLogEntry{
		{Service: "Sel", Id: "41", CreatedUnixMs: t0 + 120_000, Severity: "OK", Message: "The host powered on (On).", MessageId: "VBMC.1.0.HostPoweredOn", SensorType: "System ACPI Power State"},
		{Service: "Sel", Id: "42", CreatedUnixMs: t0 + 300_000, Severity: "Critical", Message: `Power supply 'PSU 2' has failed: <b>AC lost</b>`, MessageId: "Power.1.0.PowerSupplyFailed", SensorType: "Power Supply / Converter"},
	}
	r.BmcPowerSupplies = []*curev1.BmcPart{
		{Id: "Bay1", Location: "PSU 1", Manufacturer: "Contoso Power", Model: "RKS-440DC", PartNumber: "23456-133", SerialNumber: "SN-PSU1", FirmwareVersion: "1.00", Health: "OK"},
		{Id: "Bay2", Location: "PSU 2", Manufacturer: "Contoso Power", Model: "RKS-440DC", PartNumber: "23456-133", SerialNumber: "SN-PSU2", FirmwareVersion: "1.00", Health: "Critical"},
	}
	r.BmcFans = []*curev1.BmcPart{{Id: "CPU1", Location: "CPU #1 Fan", Model: "RKS-440DC", SerialNumber: "SN-FAN1", Health: "OK"}}
	r.BmcCollection = &curev1.BmcCollection{CollectedUnixMs: t0 + 750_000, WindowStartUnixMs: t0, WindowEndUnixMs: t0 + 750_000,
		LogServices: []string{"Sel", "Log"}, LogEntriesRead: 57,
		Notes: []*curev1.BmcNote{{Resource: "event_log", Message: "log Log: page linked twice; stopped there"}}}
	var times []int64
	var cpu, dimm []float64
	for i := range 20 {
		times = append(times, t0+int64(i)*30_000)
		cpu, dimm = append(cpu, 40+float64(i)), append(dimm, 35)
	}
	r.BmcSeries = []*curev1.Series{
		{Component: "bmc/Sensors/CPU1Temp", Metric: "temp_c", Unit: "C", Source: "bmc", TimeUnixMs: times, Values: cpu},
		{Component: "bmc/Sensors/<script>x</script>", Metric: "temp_c", Unit: "C", Source: "bmc", TimeUnixMs: times, Values: dimm},
		{Component: "bmc/Sensors/TotalPower", Metric: "power_w", Unit: "W", Source: "bmc", TimeUnixMs: times[:1], Values: []float64{405.5}},
	}
	return r, tl
}

// The HTML report shows the BMC's log of the run window (time, severity,
// message), its PSUs and fans with identity and health, and one plot per
// sensor metric.
func TestHTMLReportBMC(t *testing.T) {
	r, tl := bmcReport()
	var b bytes.Buffer
	if err := writeHTML(&b, r, tl, time.UnixMilli(t0+800_000)); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	doc, err := html.Parse(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	log := tableRows(t, doc, "bmc-log")
	if len(log) != 2 {
		t.Fatalf("bmc-log rows %v", log)
	}
	if got := log[1]; got[0] != "+05:00.0" || got[1] != "2025-10-09 08:58:20 UTC" || got[2] != "Critical" || got[4] != "Power supply 'PSU 2' has failed: <b>AC lost</b>" || got[5] != "Power.1.0.PowerSupplyFailed" {
		t.Errorf("PSU failure row %q", got)
	}
	parts := tableRows(t, doc, "bmc-parts")
	if len(parts) != 3 || parts[1][6] != "SN-PSU2" || parts[1][8] != "Critical" || parts[2][0] != "fan" {
		t.Errorf("bmc-parts rows %q", parts)
	}
	if strings.Contains(out, "<b>AC lost</b>") || strings.Contains(out, "<script>x</script>") {
		t.Error("BMC text reached the page unescaped")
	}
	if !strings.Contains(out, "not offered by the BMC") && !strings.Contains(out, "could not be read") {
		t.Error("the collection's notes are not shown")
	}
	var svgs int
	walk(doc, func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "svg" {
			svgs++
		}
	})
	if svgs != 2 {
		t.Errorf("%d plots, want 2 (temp_c with two lines, power_w)", svgs)
	}
}

func TestPrintReportBMC(t *testing.T) {
	r, _ := bmcReport()
	var b bytes.Buffer
	PrintReport(&b, r)
	out := b.String()
	// Columns compared by their words: tabwriter pads them.
	words := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"BMC LOG (RUN WINDOW)", "2025-10-09 08:58:20 Critical Power Supply / Converter Power supply 'PSU 2' has failed",
		"Power.1.0.PowerSupplyFailed", "psu Bay2 PSU 2 RKS-440DC 23456-133 SN-PSU2 1.00 Critical", "bmc/Sensors/CPU1Temp temp_c 20 40 C 59 C 59 C",
		"bmc/Sensors/TotalPower power_w 1 405.5 W", "logs Sel, Log, 57 entries examined", "event log could not be read: log Log: page linked twice"} {
		if !strings.Contains(words, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
	// A run the BMC was never read for shows no BMC section.
	plain, _ := sampleReport()
	b.Reset()
	PrintReport(&b, plain)
	if strings.Contains(b.String(), "BMC") {
		t.Error("BMC section without BMC evidence")
	}
}

// PlotSVG draws well-formed, inert SVG: one polyline per line of two or
// more points, a dot for a single point, labels escaped, non-finite points
// skipped, every point inside the plot area.
func TestPlotSVG(t *testing.T) {
	p := Plot{Title: `GPU temps <&>`, Unit: "C", Origin: 1000, Lines: []PlotLine{
		{Label: "gpu/0", Times: []int64{1000, 2000, 3000, 4000}, Values: []float64{40, math.NaN(), 60, 50}},
		{Label: `"><script>alert(1)</script>`, Times: []int64{2500}, Values: []float64{55}},
		{Label: "empty"},
	}}
	svg := string(PlotSVG(p))
	if strings.Contains(svg, "<script>") || strings.Contains(svg, "<&>") {
		t.Fatalf("unescaped text in %s", svg)
	}
	type elem struct {
		XMLName xml.Name
		Attrs   []xml.Attr `xml:",any,attr"`
	}
	dec := xml.NewDecoder(strings.NewReader(svg))
	counts := map[string]int{}
	var polyline string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok {
			counts[se.Name.Local]++
			if se.Name.Local == "polyline" {
				for _, a := range se.Attr {
					if a.Name.Local == "points" {
						polyline = a.Value
					}
				}
			}
			if se.Name.Local == "script" || se.Name.Local == "image" || se.Name.Local == "foreignObject" {
				t.Errorf("<%s> in a plot", se.Name.Local)
			}
		}
	}
	if counts["svg"] != 1 || counts["polyline"] != 1 || counts["circle"] != 1 {
		t.Errorf("elements %v: want one polyline (gpu/0) and one dot (the single point)", counts)
	}
	pts := strings.Fields(polyline)
	if len(pts) != 3 {
		t.Errorf("polyline of %d points, want 3 (the NaN skipped): %q", len(pts), polyline)
	}
	for _, pt := range pts {
		var x, y float64
		if _, err := fmtSscanf(pt, &x, &y); err != nil || x < 56 || x > 640-12 || y < 22 || y > 200-34 {
			t.Errorf("point %s outside the plot area (%v)", pt, err)
		}
	}
	if !strings.Contains(svg, ">+00:00.0<") || !strings.Contains(svg, ">+00:03.0<") || !strings.Contains(svg, ">60 C<") || !strings.Contains(svg, ">40 C<") {
		t.Errorf("axis labels missing: %s", svg)
	}
	if empty := string(PlotSVG(Plot{Title: "nothing"})); !strings.Contains(empty, "no samples") {
		t.Errorf("empty plot: %s", empty)
	}
	if flat := string(PlotSVG(Plot{Lines: []PlotLine{{Times: []int64{1, 2}, Values: []float64{7, 7}}}})); !strings.Contains(flat, ">8<") || !strings.Contains(flat, ">6<") {
		t.Errorf("a flat line gets a ±1 range: %s", flat)
	}
}

// TestPlotSVGGap: a line sampled in two stages with nothing between them
// is drawn as two pieces, not joined across the gap; a lone point after a
// gap is a dot.
func TestPlotSVGGap(t *testing.T) {
	svg := string(PlotSVG(Plot{Lines: []PlotLine{
		{Label: "cpu/0", Times: []int64{0, 1000, 2000, 3000, 60000, 61000, 62000, 120000}, Values: []float64{1, 2, 3, 4, 5, 6, 7, 8}},
		{Label: "steady", Times: []int64{0, 1000, 2500, 3000}, Values: []float64{1, 2, 3, 4}},
	}}))
	if n, d := strings.Count(svg, "<polyline"), strings.Count(svg, "<circle"); n != 3 || d != 1 {
		t.Errorf("%d polylines and %d dots, want 3 (cpu/0's two runs, steady's one) and 1 (cpu/0's last point):\n%s", n, d, svg)
	}
}

func TestSeriesPlotsGroups(t *testing.T) {
	var ss []*curev1.Series
	for i := range 10 {
		ss = append(ss, &curev1.Series{Component: "gpu/" + string(rune('0'+i)), Metric: "temp_c", Unit: "C", Source: "host"})
	}
	ss = append(ss, &curev1.Series{Component: "bmc/Fan1", Metric: "fan_rpm", Unit: "RPM", Source: "bmc"})
	plots := SeriesPlots(ss, t0)
	if len(plots) != 3 || plots[0].Title != "bmc fan_rpm" || len(plots[1].Lines) != maxPlotLines || len(plots[2].Lines) != 2 || plots[2].Title != "host temp_c (9–10 of 10)" {
		var got []string
		for _, p := range plots {
			got = append(got, p.Title)
		}
		t.Errorf("plots %v", got)
	}
}

func fmtSscanf(pt string, x, y *float64) (int, error) {
	return fmt.Sscanf(pt, "%g,%g", x, y)
}
