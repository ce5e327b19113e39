package render

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/fleetband"
)

// The fleet plot is server-rendered SVG: the dashboard's CSP allows no
// inline script or style, and the HTML report travels as one file, so the
// plot is plain markup with presentation attributes only (fill, stroke),
// every label escaped. It shows the fleet's values as a histogram with a
// tick per value, the band (shaded), the median (a dark line) and the
// node's components (red markers with their value and percentile).

// Plot geometry, in SVG user units.
const (
	plotW, plotH        = 560, 150
	plotLeft, plotRight = 16, 16
	plotTop, plotBase   = 34, 110
	plotBins            = 28
)

// FleetPlotSVG draws distribution d with its marks; j, when given, adds its
// band (and its component's mark when d has none for it).
func FleetPlotSVG(d *curev1.FleetDistribution, j *curev1.FleetJudgement) template.HTML {
	vals := d.GetValues()
	marks := d.GetMarks()
	if j != nil && !hasMark(marks, j.GetComponent()) && (j.GetUnit() != "" || j.GetValue() != 0) {
		marks = append(marks, &curev1.FleetNodeMark{Component: j.GetComponent(), Value: j.GetValue(), Percentile: j.GetPercentile()})
	}
	sc := fleetScaleOf(vals, marks, j)
	unit := d.GetUnit()
	var b strings.Builder
	title := fmt.Sprintf("%s %s on SKU %s: %d nodes, median %s", d.GetCheck(), d.GetMetric(), d.GetSku(), d.GetNodes(), withUnit(d.GetMedian(), unit))
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="fleet-plot" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`,
		plotW, plotH, plotW, plotH, esc(title))
	fmt.Fprintf(&b, `<title>%s</title>`, esc(title))
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%d" height="%d" fill="#ffffff" stroke="#d0d7de"/>`, plotW, plotH)
	// The band: what lies outside it is MARGINAL.
	if j != nil && (j.BandLow != nil || j.BandHigh != nil) {
		bl, bh := sc.lo, sc.hi
		if j.BandLow != nil {
			bl = j.GetBandLow()
		}
		if j.BandHigh != nil {
			bh = j.GetBandHigh()
		}
		fmt.Fprintf(&b, `<rect class="band" x="%.1f" y="%d" width="%.1f" height="%d" fill="#dafbe1" stroke="#1a7f37" stroke-dasharray="4 3"><title>%s</title></rect>`,
			sc.x(bl), plotTop-6, math.Max(sc.x(bh)-sc.x(bl), 0.5), plotBase-plotTop+6, esc("band "+bandText(j)))
	}
	fleetHistogram(&b, d, sc)
	// Axis: the ends of the range.
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#8c959f"/>`, plotLeft, plotW-plotRight, plotBase, plotBase)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" font-family="sans-serif" fill="#6e7781">%s</text>`, plotLeft, plotH-4, esc(withUnit(sc.lo+sc.pad, unit)))
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" font-family="sans-serif" fill="#6e7781" text-anchor="end">%s</text>`, plotW-plotRight, plotH-4, esc(withUnit(sc.hi-sc.pad, unit)))
	fleetMarks(&b, marks, len(vals) > 0, unit, sc)
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // built from escaped text and numbers only
}

// fleetScale places values on the plot's x axis: lo..hi, the range of
// what is drawn widened by pad on each side.
type fleetScale struct{ lo, hi, pad float64 }

func (s fleetScale) x(v float64) float64 {
	return plotLeft + (v-s.lo)/(s.hi-s.lo)*float64(plotW-plotLeft-plotRight)
}

// fleetScaleOf is the scale that shows every finite value, mark and band
// edge (a unit range around a single value, 0..1 when there is none).
func fleetScaleOf(vals []float64, marks []*curev1.FleetNodeMark, j *curev1.FleetJudgement) fleetScale {
	lo, hi := math.Inf(1), math.Inf(-1)
	see := func(x float64) {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			lo, hi = math.Min(lo, x), math.Max(hi, x)
		}
	}
	for _, v := range vals {
		see(v)
	}
	for _, m := range marks {
		see(m.GetValue())
	}
	if j != nil {
		if j.BandLow != nil {
			see(j.GetBandLow())
		}
		if j.BandHigh != nil {
			see(j.GetBandHigh())
		}
	}
	if math.IsInf(lo, 0) {
		lo, hi = 0, 1
	}
	if hi-lo < 1e-9*math.Max(1, math.Abs(hi)) {
		lo, hi = lo-math.Max(1, math.Abs(lo)*0.05), hi+math.Max(1, math.Abs(hi)*0.05)
	}
	pad := (hi - lo) * 0.04
	return fleetScale{lo: lo - pad, hi: hi + pad, pad: pad}
}

// fleetHistogram draws the fleet's values as a histogram with a tick per
// value under it and the median, or says there are none.
func fleetHistogram(b *strings.Builder, d *curev1.FleetDistribution, sc fleetScale) {
	vals := d.GetValues()
	if len(vals) == 0 {
		fmt.Fprintf(b, `<text x="%d" y="%d" font-size="12" font-family="sans-serif" fill="#6e7781" text-anchor="middle">no fleet results in the window</text>`, plotW/2, (plotTop+plotBase)/2)
		return
	}
	counts := make([]int, plotBins)
	peak := 0
	for _, v := range vals {
		i := min(int((v-sc.lo)/(sc.hi-sc.lo)*plotBins), plotBins-1)
		counts[max(i, 0)]++
		peak = max(peak, counts[max(i, 0)])
	}
	bw := float64(plotW-plotLeft-plotRight) / plotBins
	for i, c := range counts {
		if c == 0 {
			continue
		}
		h := float64(plotBase-plotTop) * float64(c) / float64(peak)
		fmt.Fprintf(b, `<rect class="bin" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#8c959f"/>`, plotLeft+float64(i)*bw+1, plotBase-h, bw-2, h)
	}
	for _, v := range vals {
		fmt.Fprintf(b, `<line class="value" x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#57606a" stroke-width="1"/>`, sc.x(v), sc.x(v), plotBase+2, plotBase+8)
	}
	fmt.Fprintf(b, `<line class="median" x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#1f2328" stroke-width="2"/>`, sc.x(d.GetMedian()), sc.x(d.GetMedian()), plotTop-10, plotBase+8)
	fmt.Fprintf(b, `<text class="median-label" x="%.1f" y="%d" font-size="11" font-family="sans-serif" fill="#1f2328" text-anchor="middle">median %s (n=%d)</text>`,
		sc.x(d.GetMedian()), plotTop-13, esc(withUnit(d.GetMedian(), d.GetUnit())), d.GetNodes())
}

// fleetMarks draws the node: a marker per component, the first two
// labelled with their value (and percentile, when the fleet has values).
func fleetMarks(b *strings.Builder, marks []*curev1.FleetNodeMark, fleetValues bool, unit string, sc fleetScale) {
	for i, m := range marks {
		mx := sc.x(m.GetValue())
		label := fmt.Sprintf("%s %s", m.GetComponent(), withUnit(m.GetValue(), unit))
		if fleetValues {
			label += fmt.Sprintf(" (percentile %s)", fleetband.Num(m.GetPercentile()))
		}
		ly := plotBase + 22 + 12*i
		anchor := "middle"
		switch {
		case mx < plotW/4:
			anchor = "start"
		case mx > plotW*3/4:
			anchor = "end"
		}
		fmt.Fprintf(b, `<g class="node-mark"><title>%s</title>`, esc(strings.TrimSpace(m.GetNodeId()+" "+label)))
		fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#cf222e" stroke-width="2"/>`, mx, mx, plotTop-6, plotBase+8)
		fmt.Fprintf(b, `<path d="M%.1f %d l-6 -9 h12 z" fill="#cf222e"/>`, mx, plotTop-6)
		if i < 2 { // more labels would overlap; every marker keeps its title
			fmt.Fprintf(b, `<text x="%.1f" y="%d" font-size="11" font-family="sans-serif" fill="#cf222e" text-anchor="%s">%s</text>`, mx, ly, anchor, esc(label))
		}
		b.WriteString(`</g>`)
	}
}

func hasMark(ms []*curev1.FleetNodeMark, component string) bool {
	for _, m := range ms {
		if m.GetComponent() == component {
			return true
		}
	}
	return false
}

func esc(s string) string { return html.EscapeString(clip(s, 200)) }

func withUnit(v float64, unit string) string {
	if unit == "" {
		return fleetband.Num(v)
	}
	return fleetband.Num(v) + " " + unit
}

// bandText is a judgement's band in its unit: ">= 150 MB/s", "150..250 MB/s".
func bandText(j *curev1.FleetJudgement) string {
	switch {
	case j.BandLow != nil && j.BandHigh != nil:
		return fleetband.Num(j.GetBandLow()) + ".." + withUnit(j.GetBandHigh(), j.GetUnit())
	case j.BandLow != nil:
		return ">= " + withUnit(j.GetBandLow(), j.GetUnit())
	case j.BandHigh != nil:
		return "<= " + withUnit(j.GetBandHigh(), j.GetUnit())
	}
	return ""
}

// FleetRow is one judgement laid out for a table, with its plot when asked.
type FleetRow struct {
	Component, Check, Metric               string
	Value, Median, Nodes, Band, Percentile string
	Result, Class, Detail                  string
	Plot                                   template.HTML
}

// FleetRows lays out a run's fleet judgements (MARGINAL first); plot says
// which get a plot of their distribution with the node marked.
func FleetRows(js []*curev1.FleetJudgement, ds []*curev1.FleetDistribution, plot func(*curev1.FleetJudgement) bool) []FleetRow {
	dist := map[[2]string]*curev1.FleetDistribution{}
	for _, d := range ds {
		dist[[2]string{d.GetCheck(), d.GetMetric()}] = d
	}
	var rows, rest []FleetRow
	for _, j := range js {
		d := dist[[2]string{j.GetCheck(), j.GetMetric()}]
		r := FleetRow{Component: j.GetComponent(), Check: j.GetCheck(), Metric: j.GetMetric(), Detail: j.GetMessage(), Nodes: fmt.Sprint(d.GetNodes())}
		if j.GetUnit() != "" || j.GetValue() != 0 {
			r.Value = withUnit(j.GetValue(), j.GetUnit())
		}
		if d.GetSamples() > 0 {
			r.Median = withUnit(d.GetMedian(), d.GetUnit())
			r.Percentile = fleetband.Num(j.GetPercentile())
		}
		r.Band = bandText(j)
		switch {
		case j.GetMarginal():
			r.Result, r.Class = "MARGINAL", "bad"
		case j.GetApplied():
			r.Result, r.Class = "within band", "good"
		default:
			r.Result, r.Class, r.Detail = "not applied", "muted", j.GetNote()
		}
		if plot != nil && plot(j) && d != nil {
			r.Plot = FleetPlotSVG(d, j)
		}
		if j.GetMarginal() {
			rows = append(rows, r)
		} else {
			rest = append(rest, r)
		}
	}
	return append(rows, rest...)
}

// FleetPlot is one check's metric's distribution with the node marked.
type FleetPlot struct {
	Check, Metric, Summary string
	SVG                    template.HTML
}

// FleetPlots draws every distribution of a run's judgement, each with the
// band of its first judgement that applied one.
func FleetPlots(js []*curev1.FleetJudgement, ds []*curev1.FleetDistribution) []FleetPlot {
	var out []FleetPlot
	for _, d := range ds {
		var band *curev1.FleetJudgement
		for _, j := range js {
			if j.GetCheck() == d.GetCheck() && j.GetMetric() == d.GetMetric() && j.GetApplied() {
				band = j
				break
			}
		}
		s := fmt.Sprintf("%d nodes, %d values, median %s, MAD %s, p5 %s, p95 %s", d.GetNodes(), d.GetSamples(), withUnit(d.GetMedian(), d.GetUnit()),
			fleetband.Num(d.GetMad()), fleetband.Num(d.GetP5()), fleetband.Num(d.GetP95()))
		out = append(out, FleetPlot{Check: d.GetCheck(), Metric: d.GetMetric(), Summary: s, SVG: FleetPlotSVG(d, band)})
	}
	return out
}
