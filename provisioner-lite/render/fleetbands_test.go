package render

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

func f64(x float64) *float64 { return &x }

func fleetDist() *curev1.FleetDistribution {
	return &curev1.FleetDistribution{Sku: "qemu-nvme", Check: "disk-read", Metric: "readMBps", Unit: "MB/s", Nodes: 3, Samples: 3,
		Median: 200, Mad: 5.93, Spread: 5.93, P5: 196.4, P50: 200, P95: 205.4, Min: 196, Max: 206, Values: []float64{196, 200, 206},
		WindowMs: (24 * time.Hour).Milliseconds(),
		Marks:    []*curev1.FleetNodeMark{{NodeId: "node4", Component: "disk/nvme0n1", Value: 41, Percentile: 0, Passed: false}}}
}

func marginalJudgement() *curev1.FleetJudgement {
	return &curev1.FleetJudgement{Component: "disk/nvme0n1", Check: "disk-read", Metric: "readMBps", Unit: "MB/s", Value: 41, Percentile: 0,
		Applied: true, Marginal: true, BandLow: f64(182.2), Below: 3, MinNodes: 3,
		Message: "readMBps=41 MB/s, fleet median 200 MB/s (n=3), band >= 182 MB/s (3.0 MAD), percentile 0"}
}

// wellFormed parses s as XML to its end.
func wellFormed(t *testing.T, s string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(s))
	for {
		if _, err := d.Token(); errors.Is(err, io.EOF) {
			return
		} else if err != nil {
			t.Fatalf("not well-formed SVG: %v\n%s", err, s)
		}
	}
}

// TestFleetPlotSVG: the plot is well-formed SVG showing the fleet's values,
// the median with n, the band and the node's component marked with its
// value and percentile; no script, no style attribute or element, no event
// handler (the dashboard's CSP allows none), labels escaped.
func TestFleetPlotSVG(t *testing.T) {
	svg := string(FleetPlotSVG(fleetDist(), marginalJudgement()))
	wellFormed(t, svg)
	for _, want := range []string{
		`<svg xmlns="http://www.w3.org/2000/svg" class="fleet-plot"`,
		`class="median"`, `median 200 MB/s (n=3)`,
		`class="node-mark"`, `disk/nvme0n1 41 MB/s (percentile 0)`,
		`class="band"`, `band &gt;= 182 MB/s`,
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("plot lacks %q:\n%s", want, svg)
		}
	}
	if n := strings.Count(svg, `class="value"`); n != 3 {
		t.Errorf("%d value ticks, want one per fleet value (3)", n)
	}
	lower := strings.ToLower(svg)
	for _, bad := range []string{"<script", "style=", "<style", " onload", " onclick", "javascript:", "<foreignobject"} {
		if strings.Contains(lower, bad) {
			t.Errorf("plot contains %q", bad)
		}
	}
	// A peer's component name is text, never markup.
	d := fleetDist()
	d.Marks[0].Component = `disk/<script>alert(1)</script>`
	evil := string(FleetPlotSVG(d, nil))
	wellFormed(t, evil)
	if strings.Contains(evil, "<script") || !strings.Contains(evil, "&lt;script&gt;") {
		t.Errorf("component name not escaped:\n%s", evil)
	}
	// No fleet at all: still a plot, saying so, with the node marked.
	empty := string(FleetPlotSVG(&curev1.FleetDistribution{Check: "disk-read", Metric: "readMBps", Unit: "MB/s",
		Marks: []*curev1.FleetNodeMark{{Component: "disk/nvme0n1", Value: 41}}}, nil))
	wellFormed(t, empty)
	if !strings.Contains(empty, "no fleet results in the window") || !strings.Contains(empty, `class="node-mark"`) || strings.Contains(empty, `class="median"`) {
		t.Errorf("empty fleet plot:\n%s", empty)
	}
}

// TestPrintFleetBands: the table of each distribution and the strip with
// the node's component marked.
func TestPrintFleetBands(t *testing.T) {
	var b bytes.Buffer
	PrintFleetBands(&b, &curev1.FleetBandsResponse{WindowMs: (720 * time.Hour).Milliseconds(), Distributions: []*curev1.FleetDistribution{fleetDist()}})
	out := b.String()
	for _, want := range []string{
		"fleet results of the last 720h: one vote per node (the median of its components in its latest passing acceptance run)",
		"SKU        CHECK      METRIC    UNIT  NODES  VALUES  MEDIAN  MAD   P5   P50  P95",
		"qemu-nvme  disk-read  readMBps  MB/s  3      3       200     5.93  196  200  205",
		"(┃ median 200 MB/s)",
		"▲ node4: disk/nvme0n1 41 MB/s, percentile 0 (its verdict did not pass)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// No fleet at all (too few nodes): the node's mark, no median.
	alone := FleetStrip(&curev1.FleetDistribution{Check: "disk-read", Metric: "readMBps", Unit: "MB/s",
		Marks: []*curev1.FleetNodeMark{{NodeId: "node1", Component: "disk/nvme0n1", Value: 41}}}, 20)
	if len(alone) != 2 || !strings.Contains(alone[0], "(no fleet results in the window)") || strings.Contains(alone[0], "median") || !strings.Contains(alone[1], "▲ node1: disk/nvme0n1 41 MB/s") {
		t.Errorf("strip of a node without a fleet: %q", alone)
	}
	lines := FleetStrip(fleetDist(), 20)
	if len(lines) != 2 {
		t.Fatalf("strip %q", lines)
	}
	// The node (41) is the range's low end, the fleet at its high end.
	hist := strings.TrimSpace(lines[0])
	if !strings.HasPrefix(hist, "41 ▕") || !strings.Contains(hist, "▏ 206") {
		t.Errorf("strip %q", lines[0])
	}
	if i := strings.IndexRune(lines[1], '▲'); i < 0 || i > len("41 ▕")+2 {
		t.Errorf("node mark not at the left end: %q", lines[1])
	}
	var none bytes.Buffer
	PrintFleetBands(&none, &curev1.FleetBandsResponse{WindowMs: (24 * time.Hour).Milliseconds()})
	if none.String() != "no passing measurements in the last 24h\n" {
		t.Errorf("empty answer: %q", none.String())
	}
}

// TestReportShowsFleetJudgements: the text report lists the fleet
// judgements, MARGINAL first, and says why a band was not applied; the
// HTML report shows the plot for the MARGINAL one only.
func TestReportShowsFleetJudgements(t *testing.T) {
	rep := &curev1.RunReport{RunId: "r4", NodeId: "node4", Mode: curev1.Mode_MODE_DIAGNOSTIC, Status: "failed",
		Verdicts: []*curev1.Verdict{{Component: "disk/nvme0n1", Check: "disk-read", Status: curev1.VerdictStatus_MARGINAL, Message: marginalJudgement().GetMessage()}},
		FleetJudgements: []*curev1.FleetJudgement{
			{Component: "disk/nvme1n1", Check: "disk-read", Metric: "writeMBps", Unit: "MB/s", Value: 90, Note: "fleet band not applied: 2 of 3 nodes"},
			marginalJudgement(),
		},
		FleetDistributions: []*curev1.FleetDistribution{fleetDist(), {Sku: "qemu-nvme", Check: "disk-read", Metric: "writeMBps", Unit: "MB/s", Nodes: 2, Samples: 2, Median: 95}}}
	var b bytes.Buffer
	PrintReport(&b, rep)
	out := b.String()
	iMarginal, iNot := strings.Index(out, "MARGINAL     readMBps=41 MB/s, fleet median 200"), strings.Index(out, "not applied  fleet band not applied")
	if iMarginal < 0 || iNot < 0 || iMarginal > iNot {
		t.Errorf("fleet section (MARGINAL first, then not applied):\n%s", out)
	}
	for _, want := range []string{"FLEET BAND", "disk/nvme0n1  disk-read  readMBps   41 MB/s  200 MB/s      3      >= 182 MB/s  0", "fleet band not applied: 2 of 3 nodes", "disk-read readMBps on SKU qemu-nvme (last 24h):"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	var h bytes.Buffer
	if err := writeHTML(&h, rep, nil, time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	page := h.String()
	if n := strings.Count(page, `class="fleet-plot"`); n != 1 {
		t.Errorf("%d fleet plots in the HTML report, want 1 (the MARGINAL one)", n)
	}
	for _, want := range []string{`<table id="fleet">`, `<span class="badge bad">MARGINAL</span>`, "fleet band not applied: 2 of 3 nodes", `median 200 MB/s (n=3)`} {
		if !strings.Contains(page, want) {
			t.Errorf("HTML report lacks %q", want)
		}
	}
	if strings.Contains(strings.ToLower(page), "<script") {
		t.Error("HTML report has a script")
	}
}
