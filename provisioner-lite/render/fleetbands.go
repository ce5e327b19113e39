package render

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/fleetband"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
)

// stripWidth is the terminal strip plot's width in cells.
const stripWidth = 48

// PrintFleetBands writes each fleet distribution (n, median, MAD, p5, p50,
// p95) and, under it, a strip: the fleet's histogram between its extremes
// and the asked-for node's components marked (▲) with their value and
// percentile.
func PrintFleetBands(w io.Writer, r *curev1.FleetBandsResponse) {
	ds := r.GetDistributions()
	if len(ds) == 0 {
		fmt.Fprintf(w, "no passing measurements in the last %s\n", fleetWindow(r.GetWindowMs()))
		return
	}
	fmt.Fprintf(w, "fleet results of the last %s: one vote per node (the median of its components in its latest passing acceptance run)\n", fleetWindow(r.GetWindowMs()))
	for _, d := range ds {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "\nSKU\tCHECK\tMETRIC\tUNIT\tNODES\tVALUES\tMEDIAN\tMAD\tP5\tP50\tP95\t")
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t\n", clip(d.GetSku(), 30), clip(d.GetCheck(), 30), clip(d.GetMetric(), 30), clip(d.GetUnit(), 10),
			d.GetNodes(), d.GetSamples(), fleetband.Num(d.GetMedian()), fleetband.Num(d.GetMad()), fleetband.Num(d.GetP5()), fleetband.Num(d.GetP50()), fleetband.Num(d.GetP95()))
		tw.Flush()
		for _, line := range FleetStrip(d, stripWidth) {
			fmt.Fprintln(w, "  "+line)
		}
	}
	if r.GetTruncated() {
		fmt.Fprintln(w, "(more SKU/check/metric matched: narrow with --sku, --check or --metric)")
	}
}

// FleetStrip draws d in width cells: the histogram of the fleet's values
// between the range's ends, then a line with ▲ under each marked component
// and what it is.
func FleetStrip(d *curev1.FleetDistribution, width int) []string {
	vals, marks := d.GetValues(), d.GetMarks()
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vals {
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	for _, m := range marks {
		lo, hi = math.Min(lo, m.GetValue()), math.Max(hi, m.GetValue())
	}
	if math.IsInf(lo, 0) {
		return nil
	}
	if hi == lo {
		hi = lo + 1
	}
	cell := func(v float64) int { return min(max(int((v-lo)/(hi-lo)*float64(width)), 0), width-1) }
	counts := make([]int, width)
	peak := 0
	for _, v := range vals {
		i := cell(v)
		counts[i]++
		peak = max(peak, counts[i])
	}
	levels := []rune(" ▁▂▃▄▅▆▇█")
	hist := make([]rune, width)
	for i, c := range counts {
		switch {
		case c == 0:
			hist[i] = '·'
		default:
			hist[i] = levels[1+(c*(len(levels)-2)+peak-1)/peak]
		}
	}
	if len(vals) > 0 {
		hist[cell(d.GetMedian())] = '┃'
	}
	left, right := fleetband.Num(lo), fleetband.Num(hi)
	legend := "(┃ median " + withUnit(d.GetMedian(), d.GetUnit()) + ")"
	if len(vals) == 0 {
		legend = "(no fleet results in the window)" // no median to draw or print
	}
	out := []string{fmt.Sprintf("%*s ▕%s▏ %s   %s", len(left), left, string(hist), right, legend)}
	if len(marks) == 0 {
		return out
	}
	under := []rune(strings.Repeat(" ", width))
	var names []string
	for _, m := range marks {
		under[cell(m.GetValue())] = '▲'
		s := fmt.Sprintf("%s %s", textsafe.Line(m.GetComponent()), withUnit(m.GetValue(), d.GetUnit()))
		if d.GetSamples() > 0 {
			s += ", percentile " + fleetband.Num(m.GetPercentile())
		}
		if !m.GetPassed() {
			s += " (its verdict did not pass)"
		}
		names = append(names, s)
	}
	node := textsafe.Line(marks[0].GetNodeId())
	out = append(out, fmt.Sprintf("%*s  %s   ▲ %s: %s", len(left), "", string(under), node, clip(strings.Join(names, "; "), 200)))
	return out
}

// PrintFleetJudgements writes a run's fleet judgements: MARGINAL first,
// then those within their band, then those not applied with why (too few
// nodes: only the absolute thresholds applied).
func PrintFleetJudgements(w io.Writer, r *curev1.RunReport) {
	rows := FleetRows(r.GetFleetJudgements(), r.GetFleetDistributions(), nil)
	if len(rows) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nFLEET BAND\tCHECK\tMETRIC\tVALUE\tFLEET MEDIAN\tNODES\tBAND\tPERCENTILE\tRESULT\tDETAIL")
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", clip(row.Component, 40), clip(row.Check, 30), clip(row.Metric, 30), row.Value,
			row.Median, row.Nodes, row.Band, row.Percentile, row.Result, clip(row.Detail, 90))
	}
	tw.Flush()
	for _, d := range r.GetFleetDistributions() {
		if len(d.GetMarks()) == 0 {
			continue
		}
		fmt.Fprintf(w, "  %s %s on SKU %s (last %s):\n", clip(d.GetCheck(), 30), clip(d.GetMetric(), 30), clip(d.GetSku(), 30), fleetWindow(d.GetWindowMs()))
		for _, line := range FleetStrip(d, stripWidth) {
			fmt.Fprintln(w, "  "+line)
		}
	}
}

// fleetWindow formats a window for a heading ("24h0m0s" reads as "24h").
func fleetWindow(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	if d%time.Hour == 0 {
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return d.String()
}
