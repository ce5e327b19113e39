// Package render renders run timelines and reports for a terminal: the
// live view an engineer watches during a run and the verdict table at its end.
package render

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
)

// Timeline prints timeline entries relative to the first one.
type Timeline struct {
	w     io.Writer
	start int64
}

// NewTimeline returns a printer writing to w.
func NewTimeline(w io.Writer) *Timeline { return &Timeline{w: w} }

// Print writes one entry as one line; metrics and debug logs are dropped to
// keep the live view readable (they stay in the store and in report --json).
func (t *Timeline) Print(e *curev1.TimelineEntry) {
	if t.start == 0 {
		t.start = e.GetTimeUnixMs()
	}
	stamp := Clock(e.GetTimeUnixMs() - t.start)
	phase := e.GetPhase()
	if phase == "" {
		phase = "-"
	}
	var line string
	switch runstate.EventKind(e.GetKind()) {
	case runstate.EventPhaseStart:
		line = fmt.Sprintf("▶ %-20s started", phase)
	case runstate.EventPhaseEnd:
		line = fmt.Sprintf("%s %-20s %-8s %8s  %s", mark(entryPhaseStatus(e)), phase, strings.ToUpper(e.GetStatus()),
			(time.Duration(e.GetDurationMs()) * time.Millisecond).Round(100*time.Millisecond), e.GetMessage())
	case runstate.EventVerdict:
		line = fmt.Sprintf("  %-20s verdict  %-6s %s", phase, e.GetStatus(), e.GetMessage())
	case runstate.EventRunEnd:
		line = fmt.Sprintf("■ run %s after %s: %s", strings.ToUpper(e.GetStatus()),
			(time.Duration(e.GetDurationMs()) * time.Millisecond).Round(time.Second), e.GetMessage())
	case runstate.EventMetric:
		return
	case runstate.EventProgress:
		if e.GetProgress() == nil {
			return
		}
		lines := progressLines(e.GetProgress(), e.GetTimeUnixMs(), e.GetDeadlineUnixMs())
		fmt.Fprintf(t.w, "%s [%s] ⋯ %-18s %s\n", stamp, src(e.GetSource()), phase, textsafe.Line(lines[0]))
		for _, l := range lines[1:] {
			fmt.Fprintf(t.w, "%s\n", textsafe.Line(l))
		}
		return
	case runstate.EventLog:
		if e.GetStatus() == "DEBUG" {
			return
		}
		line = fmt.Sprintf("  %-20s %s", phase, e.GetMessage())
	case runstate.EventInfo, runstate.EventHostReady:
		line = fmt.Sprintf("  %-20s %s", phase, e.GetMessage())
	default: // a kind newer than this curectl
		line = fmt.Sprintf("  %-20s %s", phase, e.GetMessage())
	}
	fmt.Fprintf(t.w, "%s [%s] %s\n", stamp, src(e.GetSource()), textsafe.Line(line))
}

// Clock formats an offset in milliseconds as [-][h:]mm:ss.s. The offset is
// rounded to the tenth of a second as a whole before it is split, so 59.95 s
// reads 01:00.0 (formatting the seconds alone with %04.1f printed 00:60.0).
func Clock(ms int64) string {
	sign := ""
	u := uint64(ms)
	if ms < 0 {
		sign, u = "-", uint64(-(ms+1))+1 // no overflow at math.MinInt64
	}
	tenths := u/100 + (u%100+50)/100
	h, m, s, f := tenths/36_000, tenths/600%60, tenths/10%60, tenths%10
	if h > 0 {
		return fmt.Sprintf("%s%d:%02d:%02d.%d", sign, h, m, s, f)
	}
	return fmt.Sprintf("%s%02d:%02d.%d", sign, m, s, f)
}

func src(s string) string {
	switch runstate.EventSource(s) {
	case runstate.SourceRunner:
		return "node"
	case runstate.SourceCoordinator:
		return "coord"
	case runstate.SourceHostOS:
	}
	return s
}

func mark(status curev1.PhaseStatus) string {
	switch status {
	case curev1.PhaseStatus_PHASE_OK:
		return "✔"
	case curev1.PhaseStatus_PHASE_SKIPPED:
		return "↷"
	case curev1.PhaseStatus_PHASE_FAILED:
		return "✘"
	case curev1.PhaseStatus_PHASE_RUNNING, curev1.PhaseStatus_PHASE_STATUS_UNSPECIFIED:
		return "•"
	default:
		return "•" // a status newer than this curectl
	}
}

// BootPath is a report's boot_path for a reader: how the node last booted
// into CURE in the run (uefi-https or pxe), "none" when it did not.
func BootPath(p string) string {
	if p == "" {
		return "none"
	}
	return textsafe.Line(p)
}

// PrintReport writes the phase table and the per-component verdict table,
// long cells clipped to keep the tables readable on a terminal.
func PrintReport(w io.Writer, r *curev1.RunReport) { printReport(w, r, clip) }

// PrintReportWide is PrintReport with every cell whole (-o wide): a
// verdict's detail is often the part an RMA ticket needs.
func PrintReportWide(w io.Writer, r *curev1.RunReport) {
	printReport(w, r, func(s string, _ int) string { return textsafe.Line(s) })
}

func printReport(w io.Writer, r *curev1.RunReport, clip func(string, int) string) {
	dur := ""
	if r.GetEndedUnixMs() > 0 {
		dur = (time.Duration(r.GetEndedUnixMs()-r.GetStartedUnixMs()) * time.Millisecond).Round(time.Second).String()
	}
	fmt.Fprintf(w, "\nrun %s  node %s  mode %s  status %s  %s  reboots %d  boot path %s\n", r.GetRunId(), r.GetNodeId(),
		strings.TrimPrefix(r.GetMode().String(), "MODE_"), strings.ToUpper(RunLabel(RunStatusOf(r))), dur, r.GetReboots(), BootPath(r.GetBootPath()))
	if r.GetMessage() != "" {
		fmt.Fprintf(w, "  %s\n", textsafe.Line(r.GetMessage()))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nPHASE\tSTATUS\tTRIES\tDURATION\tDETAIL")
	for _, p := range r.GetPhases() {
		d := ""
		if p.GetEndedUnixMs() > 0 {
			d = (time.Duration(p.GetEndedUnixMs()-p.GetStartedUnixMs()) * time.Millisecond).Round(100 * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", p.GetName(), strings.ToUpper(runstate.PhaseName(phaseStatusOf(p))), p.GetAttempts(), d, clip(p.GetMessage(), 90))
	}
	tw.Flush()
	PrintSuiteProgress(w, SuiteProgress(r.GetProgress(), r.GetProgressUnixMs(), r.GetDeadlineUnixMs(), runstate.Active(RunStatusOf(r)), time.Now()))
	PrintBuckets(w, r.GetBuckets())
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nCOMPONENT\tCHECK\tVERDICT\tOBSERVED\tEXPECTED\tDETAIL")
	for _, v := range r.GetVerdicts() {
		text, _ := curev1.SplitEvidence(v.GetMessage()) // the evidence is under PARTS
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", clip(v.GetComponent(), 40), clip(v.GetCheck(), 40), v.GetStatus(), clip(v.GetObserved(), 40), clip(v.GetExpected(), 40), clip(text, 60))
	}
	tw.Flush()
	if n := r.GetVerdictsOmitted(); n > 0 {
		fmt.Fprintf(w, "(%d more verdicts left out to keep the answer within the API's limit; failures, errors and drift are shown first)\n", n)
	}
	if n := r.GetEventsNotStored(); n > 0 {
		fmt.Fprintf(w, "(%d events past the run's caps were counted, not stored)\n", n)
	}
	PrintFleetJudgements(w, r)
	printBMC(w, r, clip)
	printHost(w, r, clip)
	printParts(w, r.GetParts(), clip)
	PrintInventory(w, r.GetInventory(), r.GetRunId())
}

// printParts writes the parts the failing verdicts name, each with what
// identifies it and the evidence lines under it: what an RMA ticket needs.
func printParts(w io.Writer, parts []*curev1.RmaPart, clip func(string, int) string) {
	if len(parts) == 0 {
		return
	}
	fmt.Fprintln(w, "\nPARTS NAMED BY FAILING VERDICTS")
	for _, p := range parts {
		fmt.Fprintf(w, "%s  %s  %s\n", clip(p.GetComponent(), 40), verdictName(p.GetStatus()), clip(PartIdentity(p), 160))
		fmt.Fprintf(w, "  checks: %s\n", clip(strings.Join(p.GetChecks(), ", "), 160))
		if len(p.GetKernelLog()) > 0 {
			fmt.Fprintln(w, "  kernel log:")
			for _, l := range p.GetKernelLog() {
				fmt.Fprintf(w, "    %s\n", clip(l, 200))
			}
		}
		for _, l := range p.GetEvidence() {
			fmt.Fprintf(w, "  %s\n", clip(l, 200))
		}
	}
}

// PartIdentity is a part's identity in one line: "QEMU NVMe Ctrl, serial
// X, firmware 7.2.22, PCI 0000:01:00.0, link 2.5 GT/s x1 of 16 GT/s x4".
func PartIdentity(p *curev1.RmaPart) string {
	var s []string
	add := func(label, v string) {
		if v != "" {
			s = append(s, strings.TrimSpace(label+" "+v))
		}
	}
	add("", p.GetModel())
	add("serial", p.GetSerial())
	add("uuid", p.GetUuid())
	add("part", p.GetPartNumber())
	add("firmware", p.GetFirmware())
	add("", p.GetLocation())
	add("link", p.GetLink())
	if len(s) == 0 {
		return "(no identity in the inventory)"
	}
	return strings.Join(s, ", ")
}

// PrintBuckets writes a run's time buckets (sub-buckets indented) with
// their share of the wall time.
func PrintBuckets(w io.Writer, buckets []*curev1.TimeBucket) {
	if len(buckets) == 0 {
		return
	}
	var total int64
	for _, b := range buckets {
		total += b.GetDurationMs()
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nTIME BUCKET\tDURATION\tSHARE\tREBOOTS\t")
	var row func(b *curev1.TimeBucket, indent string)
	row = func(b *curev1.TimeBucket, indent string) {
		share := ""
		if total > 0 {
			share = fmt.Sprintf("%.1f%%", 100*float64(b.GetDurationMs())/float64(total))
		}
		reboots := ""
		if b.GetReboots() > 0 {
			reboots = fmt.Sprint(b.GetReboots())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", indent+clip(b.GetName(), 40), msDur(b.GetDurationMs()), share, reboots)
		for _, s := range b.GetSub() {
			row(s, indent+"  ")
		}
	}
	for _, b := range buckets {
		row(b, "")
	}
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", "total", msDur(total), "", "")
	tw.Flush()
}

// PrintBucketSummary writes the fleet's p50/p90 per time bucket, per SKU.
func PrintBucketSummary(w io.Writer, s *curev1.TimeBucketSummary) {
	fmt.Fprintf(w, "%d runs", s.GetRuns())
	if s.GetTruncated() {
		fmt.Fprint(w, " (more matched: raise --max-runs or narrow the selector)")
	}
	fmt.Fprintln(w)
	for _, k := range s.GetSkus() {
		name := k.GetSku()
		if name == "" {
			name = "all SKUs"
		}
		fmt.Fprintf(w, "\n%s: %d runs, wall p50 %s p90 %s\n", clip(name, 60), k.GetRuns(), msDur(k.GetWall().GetP50Ms()), msDur(k.GetWall().GetP90Ms()))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME BUCKET\tRUNS\tP50\tP90\t")
		for _, b := range k.GetBuckets() {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t\n", clip(b.GetName(), 50), b.GetRuns(), msDur(b.GetP50Ms()), msDur(b.GetP90Ms()))
		}
		tw.Flush()
	}
}

func msDur(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.String()
}

// PrintNodes writes the node list.
func PrintNodes(w io.Writer, nodes []*curev1.NodeInfo) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSKU\tSTATE\tPOOL\tLAST RUN\tSTATUS\tBMC\tMACS")
	for _, n := range nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.GetNodeId(), n.GetSku(), n.GetState(), PoolName(n.GetPoolState()), n.GetLastRunId(), n.GetLastRunStatus(),
			n.GetBmcEndpoint(), strings.Join(n.GetMacs(), ","))
	}
	tw.Flush()
}

// PoolName is a pool state as the coordinator stores it (in_service,
// draining, ...), "-" for a node not in the pool.
func PoolName(s curev1.PoolState) string {
	if s == curev1.PoolState_POOL_STATE_UNSPECIFIED {
		return "-"
	}
	return strings.ToLower(strings.TrimPrefix(s.String(), "POOL_"))
}

// PrintPool writes nodes' pool states, then the nodes refused and why.
func PrintPool(w io.Writer, resp *curev1.PoolResponse) {
	for _, p := range resp.GetNodes() {
		fmt.Fprintf(w, "node %s: %s", p.GetNodeId(), PoolName(p.GetState()))
		if p.GetRunId() != "" {
			fmt.Fprintf(w, " (run %s)", p.GetRunId())
		}
		fmt.Fprintf(w, ": %s\n", textsafe.Line(p.GetReason()))
	}
	PrintRefusals(w, resp.GetRefused())
}

// clip makes s one line of at most n runes (the table cells).
func clip(s string, n int) string {
	s = textsafe.Line(s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// PrintAuditLog writes audit entries, newest first as the coordinator sends them.
func PrintAuditLog(w io.Writer, entries []*curev1.AuditEntry) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME	KIND	WHO	ROLE	PEER	ACTION	NODES	RUN	RESULT	DETAIL")
	for _, a := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", time.UnixMilli(a.GetTimeUnixMs()).UTC().Format(time.RFC3339),
			a.GetKind(), clip(a.GetActor(), 40), a.GetRole(), clip(a.GetPeer(), 40), clip(a.GetAction(), 50),
			clip(strings.Join(a.GetNodeIds(), ","), 40), clip(a.GetRunId(), 50), clip(a.GetResult(), 20), clip(a.GetDetail(), 120))
	}
	tw.Flush()
}

// PrintAuditLogWide is PrintAuditLog without clipping the cells (-o wide).
func PrintAuditLogWide(w io.Writer, entries []*curev1.AuditEntry) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME	KIND	WHO	ROLE	PEER	ACTION	NODES	RUN	RESULT	DETAIL")
	for _, a := range entries {
		cells := []string{time.UnixMilli(a.GetTimeUnixMs()).UTC().Format(time.RFC3339), a.GetKind(), a.GetActor(), a.GetRole(), a.GetPeer(),
			a.GetAction(), strings.Join(a.GetNodeIds(), ","), a.GetRunId(), a.GetResult(), a.GetDetail()}
		for i, c := range cells {
			cells[i] = textsafe.Line(c)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	tw.Flush()
}
