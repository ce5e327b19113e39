package render

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
)

// NodeProgress is one line of `curectl watch NODE1 NODE2 ...`: where a
// node's latest run is and how far through its current phase.
type NodeProgress struct {
	Node, RunID, Phase string
	Status             curev1.RunStatus // unspecified: the node has no run
	// Elapsed in the current phase; Expected is its expected length (0:
	// unknown), from --expect or from the nodes that already finished it.
	Elapsed, Expected time.Duration
	Done, Total       int // phases finished and planned so far
	Message           string
}

// Progress turns the nodes' latest reports into progress lines. A node
// without a run has a nil report. expect gives phases' expected lengths;
// a phase not in it is expected to take the median of the watched runs
// that already finished it.
func Progress(nodes []string, reports []*curev1.RunReport, expect map[string]time.Duration, now time.Time) []NodeProgress {
	learned := map[string][]time.Duration{}
	for _, r := range reports {
		for _, p := range r.GetPhases() {
			if phaseStatusOf(p) == curev1.PhaseStatus_PHASE_OK && p.GetEndedUnixMs() > p.GetStartedUnixMs() && p.GetStartedUnixMs() > 0 {
				learned[p.GetName()] = append(learned[p.GetName()], time.Duration(p.GetEndedUnixMs()-p.GetStartedUnixMs())*time.Millisecond)
			}
		}
	}
	out := make([]NodeProgress, len(nodes))
	for i, n := range nodes {
		np := NodeProgress{Node: n}
		r := reports[i]
		if r == nil {
			out[i] = np
			continue
		}
		np.RunID, np.Status, np.Message, np.Total = r.GetRunId(), RunStatusOf(r), r.GetMessage(), len(r.GetPhases())
		for _, p := range r.GetPhases() {
			switch {
			case p.GetEndedUnixMs() > 0:
				np.Done++
			case p.GetStartedUnixMs() > 0 && np.Phase == "":
				np.Phase = p.GetName()
				np.Elapsed = max(0, now.Sub(time.UnixMilli(p.GetStartedUnixMs())))
			}
		}
		if pr := r.GetProgress(); np.Phase != "" && pr != nil && r.GetProgressUnixMs() > 0 && np.Phase == string(modes.Validate) {
			// A suite says itself what is left: its planned stages, not
			// other nodes' history, set the bar and the ETA.
			left := max(time.Duration(pr.GetRemainingMs())*time.Millisecond-now.Sub(time.UnixMilli(r.GetProgressUnixMs())), 0)
			np.Expected = np.Elapsed + left
		} else if np.Phase != "" {
			if d, ok := expect[np.Phase]; ok {
				np.Expected = d
			} else if ds := learned[np.Phase]; len(ds) > 0 {
				slices.Sort(ds)
				np.Expected = ds[len(ds)/2]
			}
		}
		out[i] = np
	}
	return out
}

// Bar is a progress bar of width cells for elapsed out of expected; past
// the expected length it stays full (the ETA then says "overdue").
func Bar(elapsed, expected time.Duration, width int) string {
	if expected <= 0 || width <= 0 {
		return ""
	}
	filled := min(width, int(int64(width)*int64(elapsed)/int64(expected)))
	return "[" + strings.Repeat("#", filled) + strings.Repeat(".", width-filled) + "]"
}

// ETA is what is left of the expected length, "overdue" past it and ""
// when nothing is expected.
func ETA(elapsed, expected time.Duration) string {
	switch {
	case expected <= 0:
		return ""
	case elapsed >= expected:
		return "overdue " + (elapsed - expected).Round(time.Second).String()
	}
	return "eta " + (expected - elapsed).Round(time.Second).String()
}

// RenderProgress writes one line per node, aligned, and a count line.
func RenderProgress(rows []NodeProgress, barWidth int) []string {
	w := 4
	for _, r := range rows {
		w = max(w, len(textsafe.Line(r.Node)))
	}
	lines := make([]string, 0, len(rows)+1)
	count := map[curev1.RunStatus]int{}
	for _, r := range rows {
		count[r.Status]++
		line := fmt.Sprintf("%-*s  %-9s", w, textsafe.Line(r.Node), RunLabel(r.Status))
		switch {
		case r.Phase != "":
			line += fmt.Sprintf("  %d/%d %-14s %s", r.Done, r.Total, textsafe.Line(r.Phase), r.Elapsed.Round(time.Second))
			if b := Bar(r.Elapsed, r.Expected, barWidth); b != "" {
				pct := min(100, int(100*int64(r.Elapsed)/int64(r.Expected)))
				line += fmt.Sprintf("  %s %3d%%  %s", b, pct, ETA(r.Elapsed, r.Expected))
			}
		case r.RunID != "":
			line += fmt.Sprintf("  %d/%d", r.Done, r.Total)
			if r.Message != "" && r.Status != curev1.RunStatus_RUN_SUCCEEDED {
				line += "  " + clip(r.Message, 80)
			}
		}
		lines = append(lines, strings.TrimRight(line, " "))
	}
	var parts []string
	for _, k := range runOrder {
		if count[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", RunLabel(k), count[k]))
			delete(count, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(count)) {
		parts = append(parts, fmt.Sprintf("%s %d", RunLabel(k), count[k]))
	}
	lines = append(lines, fmt.Sprintf("%d nodes: %s", len(rows), strings.Join(parts, ", ")))
	return lines
}
