package render

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/natural"
	"github.com/cure-oss/cure/provisioner-lite/runstate"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// The page is one self-contained file (inline CSS, no scripts, no external
// assets) because it travels as an attachment to an RMA ticket and is opened
// by people and systems that must not need network access to read it.
//
//go:embed report.html.tmpl
var reportHTML string

var reportTmpl = template.Must(template.New("report").Parse(reportHTML))

// WriteHTML writes a self-contained HTML report of a run: header, verdict
// summary, per-component verdicts (failures first), phases and timeline.
// Metric entries of the timeline are left out; they stay in report --json.
func WriteHTML(w io.Writer, r *curev1.RunReport, timeline []*curev1.TimelineEntry) error {
	return writeHTML(w, r, timeline, time.Now())
}

// writeHTML takes the generation time as an argument so tests are
// deterministic.
func writeHTML(w io.Writer, r *curev1.RunReport, timeline []*curev1.TimelineEntry, generated time.Time) error {
	if r == nil {
		return fmt.Errorf("html report: no run report given")
	}
	if err := reportTmpl.Execute(w, buildPage(r, timeline, generated)); err != nil {
		return fmt.Errorf("html report for run %s: %w", r.GetRunId(), err)
	}
	return nil
}

// page is the template's view model: everything pre-formatted so the
// template only lays out strings.
type page struct {
	Title                  string
	Node, RunID, Mode      string
	Status, StatusClass    string
	Started, Ended, Took   string
	Reboots                uint32
	BootPath               string
	Generated              string
	Message                string
	Total                  int
	Counts                 []count
	Verdicts               []verdictRow
	Phases                 []phaseRow
	Timeline               []timelineRow
	TimelineOmittedMetrics int
	// VerdictsOmitted were left out of the report's answer (its size
	// bound); EventsNotStored were counted past the run's caps.
	VerdictsOmitted uint32
	EventsNotStored int64
	// Parts are the parts the failing verdicts name, with their identity
	// and evidence (RunReport.parts).
	Parts []partRow
	// Hardware is the inventory the node reported (InventorySections),
	// HardwareFrom where it came from; empty when none was reported.
	Hardware     []InventorySection
	HardwareFrom string
	// BMC is what the node's BMC showed over the run (nil: not read).
	BMC *bmcSection
	// Host is the telemetry sampled during the suite's stages (nil: none).
	Host *hostSection
	// Suite is the suite's latest heartbeat: each check's progress and
	// the ETA (nil: the run ran no suite, or its runner sent none).
	Suite *SuiteView
	// Fleet are the run's fleet band judgements, MARGINAL first, each of
	// those with its plot (the fleet and the node in it).
	Fleet []FleetRow
}

type count struct {
	Status, Class string
	N             int
}

type verdictRow struct {
	Component, Check, Status, Class, Observed, Expected, Message string
}

type partRow struct {
	Component, Kind, Status, Class, Identity, Checks string
	KernelLog, Evidence                              []string
}

type phaseRow struct {
	Name, Status, Class, Took, Message string
	Attempts                           uint32
}

type timelineRow struct {
	Offset, Source, Phase, Kind, Status, Class, Message string
}

func buildPage(r *curev1.RunReport, timeline []*curev1.TimelineEntry, generated time.Time) page {
	p := page{
		Node: r.GetNodeId(), RunID: r.GetRunId(),
		Mode:   strings.TrimPrefix(r.GetMode().String(), "MODE_"),
		Status: strings.ToUpper(RunLabel(RunStatusOf(r))), StatusClass: runClass(RunStatusOf(r)),
		Started: stamp(r.GetStartedUnixMs()), Ended: stamp(r.GetEndedUnixMs()),
		Reboots:         r.GetReboots(),
		BootPath:        BootPath(r.GetBootPath()),
		Generated:       generated.UTC().Format("2006-01-02 15:04:05 UTC"),
		Message:         r.GetMessage(),
		VerdictsOmitted: r.GetVerdictsOmitted(), EventsNotStored: r.GetEventsNotStored(),
	}
	p.Title = fmt.Sprintf("CURE %s report: %s (run %s)", strings.ToLower(p.Mode), p.Node, p.RunID)
	if p.Ended == "" {
		p.Ended = "—"
	}
	if r.GetStartedUnixMs() > 0 && r.GetEndedUnixMs() >= r.GetStartedUnixMs() {
		p.Took = span(r.GetEndedUnixMs() - r.GetStartedUnixMs())
	} else {
		p.Took = "—"
	}

	vs := append([]*curev1.Verdict(nil), r.GetVerdicts()...)
	sortVerdicts(vs)
	n := map[curev1.VerdictStatus]int{}
	for _, v := range vs {
		n[v.GetStatus()]++
		text, _ := curev1.SplitEvidence(v.GetMessage()) // the evidence is shown under its part
		p.Verdicts = append(p.Verdicts, verdictRow{
			Component: v.GetComponent(), Check: v.GetCheck(), Status: verdictName(v.GetStatus()),
			Class: verdictClass(v.GetStatus()), Observed: v.GetObserved(), Expected: v.GetExpected(), Message: text,
		})
	}
	p.Total = len(vs)
	for _, s := range summaryOrder {
		if n[s] > 0 {
			p.Counts = append(p.Counts, count{Status: verdictName(s), Class: verdictClass(s), N: n[s]})
		}
	}

	for _, ph := range r.GetPhases() {
		row := phaseRow{Name: ph.GetName(), Status: strings.ToUpper(runstate.PhaseName(phaseStatusOf(ph))), Class: phaseClass(phaseStatusOf(ph)),
			Attempts: ph.GetAttempts(), Message: ph.GetMessage(), Took: "—"}
		if ph.GetEndedUnixMs() > 0 && ph.GetEndedUnixMs() >= ph.GetStartedUnixMs() {
			row.Took = span(ph.GetEndedUnixMs() - ph.GetStartedUnixMs())
		}
		p.Phases = append(p.Phases, row)
	}

	p.BMC = buildBMC(r)
	p.Host = buildHost(r)
	p.Suite = SuiteProgress(r.GetProgress(), r.GetProgressUnixMs(), r.GetDeadlineUnixMs(), runstate.Active(RunStatusOf(r)), generated)
	for _, pt := range r.GetParts() {
		p.Parts = append(p.Parts, partRow{Component: pt.GetComponent(), Kind: pt.GetKind(), Status: verdictName(pt.GetStatus()),
			Class: verdictClass(pt.GetStatus()), Identity: PartIdentity(pt), Checks: strings.Join(pt.GetChecks(), ", "),
			KernelLog: pt.GetKernelLog(), Evidence: pt.GetEvidence()})
	}

	p.Fleet = FleetRows(r.GetFleetJudgements(), r.GetFleetDistributions(), (*curev1.FleetJudgement).GetMarginal)
	p.Hardware = InventorySections(r.GetInventory().GetInventory())
	p.HardwareFrom = InventoryHeading(r.GetInventory(), r.GetRunId())

	// Offsets are relative to the run start so they line up with the
	// header; a timeline fetched without a report start falls back to its
	// first entry.
	origin := r.GetStartedUnixMs()
	if origin == 0 && len(timeline) > 0 {
		origin = timeline[0].GetTimeUnixMs()
	}
	for _, e := range timeline {
		kind := runstate.EventKind(e.GetKind())
		if kind == runstate.EventMetric {
			p.TimelineOmittedMetrics++
			continue
		}
		if kind == runstate.EventProgress {
			continue // live only; the latest is the Suite section
		}
		msg := e.GetMessage()
		if msg == "" && e.GetVerdict() != nil {
			v := e.GetVerdict()
			msg = fmt.Sprintf("%s %s: %s", v.GetComponent(), v.GetCheck(), verdictName(v.GetStatus()))
		}
		if kind == runstate.EventPhaseEnd || kind == runstate.EventRunEnd {
			if d := e.GetDurationMs(); d > 0 {
				msg = strings.TrimSpace(fmt.Sprintf("(%s) %s", span(d), msg))
			}
		}
		p.Timeline = append(p.Timeline, timelineRow{
			Offset: offset(e.GetTimeUnixMs() - origin), Source: src(e.GetSource()), Phase: e.GetPhase(),
			Kind: e.GetKind(), Status: strings.ToUpper(e.GetStatus()), Class: entryClass(e), Message: msg,
		})
	}
	return p
}

// summaryOrder lists verdict statuses worst first, the order a technician
// reads the summary in.
var summaryOrder = []curev1.VerdictStatus{
	curev1.VerdictStatus_FAIL, curev1.VerdictStatus_ERROR, curev1.VerdictStatus_MARGINAL, curev1.VerdictStatus_DRIFT,
	curev1.VerdictStatus_PASS, curev1.VerdictStatus_MATCH, curev1.VerdictStatus_SKIP,
	curev1.VerdictStatus_VERDICT_STATUS_UNSPECIFIED,
}

// verdictRank puts what a technician must act on first: failures and
// errors, then drift (a verify/audit finding), then everything else.
func verdictRank(s curev1.VerdictStatus) int {
	switch s {
	case curev1.VerdictStatus_FAIL, curev1.VerdictStatus_ERROR:
		return 0
	case curev1.VerdictStatus_DRIFT, curev1.VerdictStatus_MARGINAL:
		return 1
	case curev1.VerdictStatus_PASS, curev1.VerdictStatus_MATCH, curev1.VerdictStatus_SKIP, curev1.VerdictStatus_VERDICT_STATUS_UNSPECIFIED:
		return 2
	default:
		return 2 // a status newer than this curectl
	}
}

func sortVerdicts(vs []*curev1.Verdict) {
	sort.SliceStable(vs, func(i, j int) bool {
		a, b := vs[i], vs[j]
		if ra, rb := verdictRank(a.GetStatus()), verdictRank(b.GetStatus()); ra != rb {
			return ra < rb
		}
		if c := natural.Compare(a.GetComponent(), b.GetComponent()); c != 0 {
			return c < 0
		}
		return natural.Compare(a.GetCheck(), b.GetCheck()) < 0
	})
}

func verdictName(s curev1.VerdictStatus) string {
	if s == curev1.VerdictStatus_VERDICT_STATUS_UNSPECIFIED {
		return "UNKNOWN"
	}
	return s.String()
}

// CSS classes: good, bad, warn, info, muted. They are fixed strings chosen
// here, never taken from the report.
func verdictClass(s curev1.VerdictStatus) string {
	switch s {
	case curev1.VerdictStatus_PASS, curev1.VerdictStatus_MATCH:
		return "good"
	case curev1.VerdictStatus_FAIL, curev1.VerdictStatus_ERROR, curev1.VerdictStatus_MARGINAL:
		return "bad"
	case curev1.VerdictStatus_DRIFT:
		return "warn"
	case curev1.VerdictStatus_SKIP, curev1.VerdictStatus_VERDICT_STATUS_UNSPECIFIED:
		return "muted"
	default:
		return "muted" // a status newer than this curectl
	}
}

func runClass(s curev1.RunStatus) string {
	switch s {
	case curev1.RunStatus_RUN_SUCCEEDED:
		return "good"
	case curev1.RunStatus_RUN_FAILED:
		return "bad"
	case curev1.RunStatus_RUN_ATTENTION:
		return "warn"
	case curev1.RunStatus_RUN_RUNNING, curev1.RunStatus_RUN_PENDING:
		return "info"
	case curev1.RunStatus_RUN_CANCELED, curev1.RunStatus_RUN_STATUS_UNSPECIFIED:
		return "muted"
	default:
		return "muted" // a status newer than this curectl
	}
}

func phaseClass(s curev1.PhaseStatus) string {
	switch s {
	case curev1.PhaseStatus_PHASE_OK:
		return "good"
	case curev1.PhaseStatus_PHASE_FAILED:
		return "bad"
	case curev1.PhaseStatus_PHASE_RUNNING:
		return "info"
	case curev1.PhaseStatus_PHASE_SKIPPED, curev1.PhaseStatus_PHASE_STATUS_UNSPECIFIED:
		return "muted"
	default:
		return "muted" // a status newer than this curectl
	}
}

func entryClass(e *curev1.TimelineEntry) string {
	switch runstate.EventKind(e.GetKind()) {
	case runstate.EventPhaseEnd:
		return phaseClass(entryPhaseStatus(e))
	case runstate.EventRunEnd:
		s, _ := runstate.ParseRun(e.GetStatus())
		return runClass(s)
	case runstate.EventVerdict:
		s, _ := runstate.ParseVerdict(e.GetStatus())
		return verdictClass(s)
	case runstate.EventLog:
		switch e.GetStatus() {
		case "ERROR":
			return "bad"
		case "WARN":
			return "warn"
		}
	case runstate.EventPhaseStart, runstate.EventMetric, runstate.EventInfo, runstate.EventHostReady, runstate.EventProgress:
	}
	return ""
}

func stamp(ms int64) string {
	if ms <= 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05 UTC")
}

// span formats a duration for a table cell: 850ms, 2.5s, 1m30s, 4h02m.
func span(ms int64) string {
	d := time.Duration(ms) * time.Millisecond
	switch {
	case d < time.Second:
		return d.String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}

// offset formats a timeline offset as +[h:]mm:ss.s (Clock with a sign);
// burn-ins run for hours.
func offset(ms int64) string {
	if ms < 0 {
		return "-" + Clock(ms)[1:]
	}
	return "+" + Clock(ms)
}
