package render

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/natural"
)

// maxPlotLines is how many series one plot overlays; more of the same
// metric go to further plots.
const maxPlotLines = 8

// SeriesPlots groups series into plots, one per source, metric and unit
// (at most maxPlotLines lines each, in natural order of component), with
// times as offsets from origin (the run's start). Every report plotting
// sampled series (the BMC's, the host's) draws them with PlotSVG.
func SeriesPlots(series []*curev1.Series, origin int64) []Plot {
	type key struct{ source, metric, unit string }
	groups := map[key][]*curev1.Series{}
	var keys []key
	for _, s := range series {
		k := key{s.GetSource(), s.GetMetric(), s.GetUnit()}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], s)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.source != b.source {
			return a.source < b.source
		}
		if a.metric != b.metric {
			return a.metric < b.metric
		}
		return a.unit < b.unit
	})
	var out []Plot
	for _, k := range keys {
		ss := groups[k]
		sort.SliceStable(ss, func(i, j int) bool { return natural.Compare(ss[i].GetComponent(), ss[j].GetComponent()) < 0 })
		for start := 0; start < len(ss); start += maxPlotLines {
			end := min(start+maxPlotLines, len(ss))
			title := fmt.Sprintf("%s %s", k.source, k.metric)
			if len(ss) > maxPlotLines {
				title += fmt.Sprintf(" (%d–%d of %d)", start+1, end, len(ss))
			}
			p := Plot{Title: title, Unit: k.unit, Origin: origin}
			for _, s := range ss[start:end] {
				p.Lines = append(p.Lines, PlotLine{Label: s.GetComponent(), Times: s.GetTimeUnixMs(), Values: s.GetValues()})
			}
			out = append(out, p)
		}
	}
	return out
}

// bmcSection is the report page's view of what the BMC showed.
type bmcSection struct {
	From  string // when and over which window it was read
	Log   []bmcLogRow
	Parts []bmcPartRow
	Notes []string
	Plots []template.HTML
}

type bmcLogRow struct {
	Offset, Time, Severity, Class, Service, SensorType, Message, MessageID string
}

type bmcPartRow struct {
	Kind, ID, Location, Manufacturer, Model, PartNumber, Serial, Firmware, Health, Class string
}

func healthClass(h string) string {
	switch h {
	case "OK":
		return "good"
	case "Warning":
		return "warn"
	case "Critical":
		return "bad"
	}
	return "muted"
}

// bmcFrom says how the BMC evidence was read.
func bmcFrom(c *curev1.BmcCollection) string {
	if c == nil {
		return ""
	}
	s := fmt.Sprintf("Read from the BMC at %s over the run window %s – %s", stamp(c.GetCollectedUnixMs()), stamp(c.GetWindowStartUnixMs()), stamp(c.GetWindowEndUnixMs()))
	if len(c.GetLogServices()) > 0 {
		s += fmt.Sprintf("; logs %s, %d entries examined", strings.Join(c.GetLogServices(), ", "), c.GetLogEntriesRead())
	}
	if c.GetLogEntriesDropped() > 0 {
		s += fmt.Sprintf(", %d entries of the window beyond the bound not kept (the most severe and earliest are)", c.GetLogEntriesDropped())
	}
	return s + "."
}

func bmcNotes(c *curev1.BmcCollection) []string {
	var out []string
	for _, n := range c.GetNotes() {
		what := "could not be read"
		if n.GetUnsupported() {
			what = "not offered by the BMC"
		}
		out = append(out, fmt.Sprintf("%s %s: %s", strings.ReplaceAll(n.GetResource(), "_", " "), what, n.GetMessage()))
	}
	return out
}

func buildBMC(r *curev1.RunReport) *bmcSection {
	if r.GetBmcCollection() == nil && len(r.GetBmcSeries()) == 0 {
		return nil
	}
	s := &bmcSection{From: bmcFrom(r.GetBmcCollection()), Notes: bmcNotes(r.GetBmcCollection())}
	for _, l := range r.GetBmcLog() {
		s.Log = append(s.Log, bmcLogRow{Offset: offset(l.GetCreatedUnixMs() - r.GetStartedUnixMs()), Time: stamp(l.GetCreatedUnixMs()),
			Severity: l.GetSeverity(), Class: healthClass(l.GetSeverity()), Service: l.GetService(), SensorType: l.GetSensorType(),
			Message: l.GetMessage(), MessageID: l.GetMessageId()})
	}
	for _, group := range []struct {
		kind  string
		parts []*curev1.BmcPart
	}{{"PSU", r.GetBmcPowerSupplies()}, {"fan", r.GetBmcFans()}} {
		for _, p := range group.parts {
			s.Parts = append(s.Parts, bmcPartRow{Kind: group.kind, ID: p.GetId(), Location: p.GetLocation(), Manufacturer: p.GetManufacturer(),
				Model: p.GetModel(), PartNumber: p.GetPartNumber(), Serial: p.GetSerialNumber(), Firmware: p.GetFirmwareVersion(),
				Health: p.GetHealth(), Class: healthClass(p.GetHealth())})
		}
	}
	for _, p := range SeriesPlots(r.GetBmcSeries(), r.GetStartedUnixMs()) {
		s.Plots = append(s.Plots, PlotSVG(p))
	}
	return s
}

// printBMC writes the BMC's log entries of the run window, its PSUs and
// fans, and a summary of each sensor series.
func printBMC(w io.Writer, r *curev1.RunReport, clip func(string, int) string) {
	if r.GetBmcCollection() == nil && len(r.GetBmcSeries()) == 0 {
		return
	}
	fmt.Fprintf(w, "\nBMC  %s\n", bmcFrom(r.GetBmcCollection()))
	for _, n := range bmcNotes(r.GetBmcCollection()) {
		fmt.Fprintf(w, "  %s\n", clip(n, 160))
	}
	if log := r.GetBmcLog(); len(log) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "\nBMC LOG (RUN WINDOW)\tSEVERITY\tSENSOR\tMESSAGE\tMESSAGE ID")
		for _, l := range log {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", time.UnixMilli(l.GetCreatedUnixMs()).UTC().Format("2006-01-02 15:04:05"),
				l.GetSeverity(), clip(l.GetSensorType(), 28), clip(l.GetMessage(), 80), clip(l.GetMessageId(), 40))
		}
		tw.Flush()
	} else if r.GetBmcCollection() != nil {
		fmt.Fprintln(w, "\n  no BMC log entries in the run window")
	}
	if len(r.GetBmcPowerSupplies())+len(r.GetBmcFans()) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "\nPART\tID\tLOCATION\tMODEL\tPART NUMBER\tSERIAL\tFIRMWARE\tHEALTH")
		for _, group := range []struct {
			kind  string
			parts []*curev1.BmcPart
		}{{"psu", r.GetBmcPowerSupplies()}, {"fan", r.GetBmcFans()}} {
			for _, p := range group.parts {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", group.kind, clip(p.GetId(), 24), clip(p.GetLocation(), 24), clip(p.GetModel(), 24),
					clip(p.GetPartNumber(), 24), clip(p.GetSerialNumber(), 32), clip(p.GetFirmwareVersion(), 16), p.GetHealth())
			}
		}
		tw.Flush()
	}
	if series := r.GetBmcSeries(); len(series) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "\nBMC SENSOR\tMETRIC\tPOINTS\tMIN\tMAX\tLAST")
		for _, s := range series {
			lo, hi, last, n := seriesStats(s.GetValues())
			u := ""
			if s.GetUnit() != "" {
				u = " " + s.GetUnit()
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", clip(s.GetComponent(), 48), s.GetMetric(), n, shortNum(lo)+u, shortNum(hi)+u, shortNum(last)+u)
		}
		tw.Flush()
	}
}

// seriesStats is the lowest, highest and last finite value and their count.
func seriesStats(vs []float64) (lo, hi, last float64, n int) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		lo, hi, last = math.Min(lo, v), math.Max(hi, v), v
		n++
	}
	if n == 0 {
		return 0, 0, 0, 0
	}
	return lo, hi, last, n
}
