package render

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Plot is a line plot of sampled series over time, as PlotSVG draws it.
type Plot struct {
	Title string
	Unit  string // the y axis's unit
	// Origin is the time the x axis counts from (the run's start), unix ms;
	// zero: the first point's time.
	Origin int64
	Lines  []PlotLine
	// Width and Height in CSS pixels (defaults 640 × 200).
	Width, Height int
}

// PlotLine is one series of a Plot.
type PlotLine struct {
	Label  string
	Times  []int64 // unix ms, ascending
	Values []float64
}

// plotColors are the lines' colours, in order (distinct in print, and for
// the common colour-vision deficiencies).
var plotColors = []string{"#0969da", "#cf222e", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#1b7c83", "#6e7781"}

// PlotSVG draws p as a self-contained inline SVG (no script, no external
// reference): the lines, the y range with its unit, the x range as offsets
// from Origin, and a legend. Points that are not finite numbers are
// skipped. All text is escaped: labels come from BMCs and nodes. It is a
// pure function of p, for every report that plots series.
func PlotSVG(p Plot) template.HTML {
	w, h := p.Width, p.Height
	if w <= 0 {
		w = 640
	}
	if h <= 0 {
		h = 200
	}
	const left, right, top, bottom = 56, 12, 22, 34
	legendH := 14 * ((len(p.Lines) + 1) / 2)
	pw, ph := float64(w-left-right), float64(h-top-bottom)

	// Ranges over every finite point.
	tmin, tmax := int64(math.MaxInt64), int64(math.MinInt64)
	vmin, vmax := math.Inf(1), math.Inf(-1)
	points := 0
	for _, l := range p.Lines {
		for i, v := range l.Values {
			if i >= len(l.Times) || math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			t := l.Times[i]
			tmin, tmax = min(tmin, t), max(tmax, t)
			vmin, vmax = math.Min(vmin, v), math.Max(vmax, v)
			points++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" class="plot" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s">`,
		w, h+legendH, w, h+legendH, html.EscapeString(p.Title))
	fmt.Fprintf(&b, `<title>%s</title>`, html.EscapeString(p.Title))
	fmt.Fprintf(&b, `<text x="%d" y="14" font-size="12" font-weight="600">%s</text>`, left, html.EscapeString(p.Title))
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%s" height="%s" fill="none" stroke="#d0d7de"/>`, left, top, num(pw), num(ph))
	if points == 0 {
		fmt.Fprintf(&b, `<text x="%s" y="%s" font-size="11" fill="#6e7781" text-anchor="middle">no samples</text></svg>`, num(left+pw/2), num(top+ph/2))
		return template.HTML(b.String())
	}
	if vmin == vmax { // a flat line sits mid-plot
		vmin, vmax = vmin-1, vmax+1
	}
	origin := p.Origin
	if origin == 0 {
		origin = tmin
	}
	span := float64(tmax - tmin)
	x := func(t int64) float64 {
		if span == 0 {
			return left + pw/2
		}
		return left + pw*float64(t-tmin)/span
	}
	y := func(v float64) float64 { return top + ph*(vmax-v)/(vmax-vmin) }

	// Axes: y range with the unit, x range as offsets from the origin.
	unit := ""
	if p.Unit != "" {
		unit = " " + p.Unit
	}
	for _, tick := range []float64{vmax, (vmin + vmax) / 2, vmin} {
		fmt.Fprintf(&b, `<line x1="%d" x2="%s" y1="%s" y2="%s" stroke="#eaeef2"/>`, left, num(left+pw), num(y(tick)), num(y(tick)))
		fmt.Fprintf(&b, `<text x="%d" y="%s" font-size="10" fill="#6e7781" text-anchor="end">%s</text>`, left-4, num(y(tick)+3), html.EscapeString(shortNum(tick)+unit))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10" fill="#6e7781">%s</text>`, left, h-bottom+14, html.EscapeString(offset(tmin-origin)))
	fmt.Fprintf(&b, `<text x="%s" y="%d" font-size="10" fill="#6e7781" text-anchor="end">%s</text>`, num(left+pw), h-bottom+14, html.EscapeString(offset(tmax-origin)))

	for i, l := range p.Lines {
		color := plotColors[i%len(plotColors)]
		var ts []int64
		var pts []string
		for j, v := range l.Values {
			if j >= len(l.Times) || math.IsNaN(v) || math.IsInf(v, 0) {
				continue
			}
			ts = append(ts, l.Times[j])
			pts = append(pts, num(x(l.Times[j]))+","+num(y(v)))
		}
		for _, seg := range segments(ts) {
			switch seg[1] - seg[0] {
			case 1:
				xy := strings.Split(pts[seg[0]], ",")
				fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="2.5" fill="%s"/>`, xy[0], xy[1], color)
			default:
				fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, color, strings.Join(pts[seg[0]:seg[1]], " "))
			}
		}
		// Legend: two columns under the plot.
		lx, ly := left+(i%2)*int(pw/2), h+14*(i/2)
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="3" fill="%s"/>`, lx, ly-4, color)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="10">%s</text>`, lx+14, ly, html.EscapeString(l.Label))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// gapFactor: a step between two points longer than this many times the
// line's median step is a gap in the sampling (a stage that sampled
// nothing), drawn as a break rather than a straight line across it.
const gapFactor = 5

// segments splits ascending times into runs [from, to) without a gap.
func segments(ts []int64) [][2]int {
	if len(ts) == 0 {
		return nil
	}
	steps := make([]int64, 0, len(ts))
	for i := 1; i < len(ts); i++ {
		steps = append(steps, ts[i]-ts[i-1])
	}
	slices.Sort(steps)
	var median int64
	if len(steps) > 0 {
		median = steps[len(steps)/2]
	}
	var out [][2]int
	from := 0
	for i := 1; i < len(ts); i++ {
		if median > 0 && ts[i]-ts[i-1] > gapFactor*median {
			out = append(out, [2]int{from, i})
			from = i
		}
	}
	return append(out, [2]int{from, len(ts)})
}

// num formats a coordinate.
func num(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

// shortNum formats a value for an axis or a table: whole numbers plainly,
// others with up to four significant digits.
func shortNum(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e9 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}
