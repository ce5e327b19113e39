package render

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
)

// SuiteView is a suite's latest heartbeat laid out for the terminal, the
// HTML report and the dashboard: where the suite is, each check's
// progress, and when it should end.
type SuiteView struct {
	Suite, Stage     string
	Elapsed, Planned string
	// ETA is what is left, as the runner estimated it at its heartbeat
	// and aged since ("" once the run ended); Ends is when, in UTC.
	ETA, Ends string
	// Deadline is when the coordinator gives up on the phase ("" : none).
	Deadline string
	// Heard is how long ago the heartbeat arrived.
	Heard                string
	Resumed              uint32
	Done, Running, Total int
	Checks               []SuiteCheck
}

// SuiteCheck is one check of a SuiteView.
type SuiteCheck struct {
	Check, Stage, State string
	Worst, Class        string // worst verdict once done, and its class (ok, bad, warn)
	Elapsed, Planned    string
	Pct                 int // of its planned length (one-shot checks: 0, or 100 once done)
}

// SuiteProgress lays out a heartbeat heard at heardMs; deadlineMs is the
// phase's deadline (0: none); active says the run still runs (an ended
// run shows no ETA). nil when there is no heartbeat.
func SuiteProgress(p *curev1.Progress, heardMs, deadlineMs int64, active bool, now time.Time) *SuiteView {
	if p == nil {
		return nil
	}
	ms := func(x int64) time.Duration { return time.Duration(x) * time.Millisecond }
	v := &SuiteView{Suite: p.GetSuite(), Stage: p.GetStage(), Elapsed: roundDur(ms(p.GetElapsedMs())), Planned: roundDur(ms(p.GetPlannedMs())),
		Resumed: p.GetResumed(), Total: len(p.GetChecks())}
	if heardMs > 0 {
		heard := time.UnixMilli(heardMs)
		v.Heard = roundDur(max(now.Sub(heard), 0))
		if active {
			left := max(ms(p.GetRemainingMs())-now.Sub(heard), 0)
			v.ETA, v.Ends = roundDur(left), now.Add(left).UTC().Format("2006-01-02 15:04 UTC")
		}
	}
	if deadlineMs > 0 && active {
		v.Deadline = time.UnixMilli(deadlineMs).UTC().Format("2006-01-02 15:04 UTC")
	}
	for _, c := range p.GetChecks() {
		sc := SuiteCheck{Check: c.GetCheck(), Stage: c.GetStage(), State: c.GetState(), Elapsed: roundDur(ms(c.GetElapsedMs())), Planned: "one shot"}
		if c.GetPlannedMs() > 0 {
			sc.Planned = roundDur(ms(c.GetPlannedMs()))
			sc.Pct = int(min(100, 100*c.GetElapsedMs()/c.GetPlannedMs()))
		}
		switch c.GetState() {
		case "done":
			v.Done++
			sc.Pct = 100
			sc.Worst, sc.Class = verdictName(c.GetWorst()), verdictClass(c.GetWorst())
		case "running":
			v.Running++
		}
		v.Checks = append(v.Checks, sc)
	}
	return v
}

func roundDur(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// Headline is the view in one line.
func (v *SuiteView) Headline() string {
	line := "suite " + v.Suite
	if v.Stage != "" {
		line += " · stage " + v.Stage
	}
	line += fmt.Sprintf(" · %d/%d checks done, %d running · elapsed %s of %s planned", v.Done, v.Total, v.Running, v.Elapsed, v.Planned)
	if v.ETA != "" {
		line += fmt.Sprintf(" · eta %s (%s)", v.ETA, v.Ends)
	}
	if v.Deadline != "" {
		line += " · deadline " + v.Deadline
	}
	if v.Resumed > 0 {
		line += fmt.Sprintf(" · resumed after %d node reset(s)", v.Resumed)
	}
	return line
}

// PrintSuiteProgress writes the headline and a table of the checks with
// a bar each.
func PrintSuiteProgress(w io.Writer, v *SuiteView) {
	if v == nil {
		return
	}
	fmt.Fprintf(w, "\n%s\n", textsafe.Line(v.Headline()))
	if v.Heard != "" {
		fmt.Fprintf(w, "  (last heartbeat %s ago)\n", v.Heard)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tSTAGE\tSTATE\tPROGRESS\tELAPSED\tPLANNED\tWORST")
	for _, c := range v.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s %3d%%\t%s\t%s\t%s\n", clip(c.Check, 40), clip(c.Stage, 24), c.State, Bar(time.Duration(c.Pct), 100, 10), c.Pct,
			c.Elapsed, c.Planned, c.Worst)
	}
	tw.Flush()
}

// progressLines is a live heartbeat in the timeline: the headline, then
// each running check with its bar.
func progressLines(p *curev1.Progress, heardMs, deadlineMs int64) []string {
	v := SuiteProgress(p, heardMs, deadlineMs, true, time.UnixMilli(heardMs))
	lines := []string{v.Headline()}
	for _, c := range v.Checks {
		if c.State == "running" {
			lines = append(lines, fmt.Sprintf("    %-24s %s %3d%%  %s of %s", c.Check, Bar(time.Duration(c.Pct), 100, 20), c.Pct, c.Elapsed, c.Planned))
		}
	}
	return lines
}
