package render

import (
	"fmt"
	"html/template"
	"io"
	"text/tabwriter"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// hostSection is the report page's view of the telemetry the runner
// sampled during the suite's stages.
type hostSection struct {
	Plots []template.HTML
	// Bound says what the report cut from its series (BMC's and host's).
	Bound string
}

func buildHost(r *curev1.RunReport) *hostSection {
	if len(r.GetHostSeries()) == 0 && r.GetSeriesBound() == nil {
		return nil
	}
	s := &hostSection{Bound: r.GetSeriesBound().GetNote()}
	for _, p := range SeriesPlots(r.GetHostSeries(), r.GetStartedUnixMs()) {
		s.Plots = append(s.Plots, PlotSVG(p))
	}
	return s
}

// printHost writes a summary of each host series and what the report cut.
func printHost(w io.Writer, r *curev1.RunReport, clip func(string, int) string) {
	if series := r.GetHostSeries(); len(series) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "\nHOST TELEMETRY\tSOURCE\tMETRIC\tPOINTS\tMIN\tMAX\tLAST")
		for _, s := range series {
			lo, hi, last, n := seriesStats(s.GetValues())
			u := ""
			if s.GetUnit() != "" {
				u = " " + s.GetUnit()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", clip(s.GetComponent(), 48), s.GetSource(), s.GetMetric(), n, shortNum(lo)+u, shortNum(hi)+u, shortNum(last)+u)
		}
		tw.Flush()
	}
	if b := r.GetSeriesBound(); b != nil {
		fmt.Fprintf(w, "(%s)\n", clip(b.GetNote(), 240))
	}
}
