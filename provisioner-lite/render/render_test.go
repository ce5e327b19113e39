package render

import (
	"bytes"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

func TestTimelineAndReport(t *testing.T) {
	var b bytes.Buffer
	tl := NewTimeline(&b)
	tl.Print(&curev1.TimelineEntry{TimeUnixMs: 1000, Phase: "nvme", Kind: "phase_start", Source: "runner"})
	tl.Print(&curev1.TimelineEntry{TimeUnixMs: 1500, Phase: "nvme", Kind: "metric", Message: "x=1"})
	tl.Print(&curev1.TimelineEntry{TimeUnixMs: 63500, Phase: "nvme", Kind: "phase_end", Status: "skipped", DurationMs: 2500, Message: "all match", Source: "runner"})
	out := b.String()
	if strings.Contains(out, "x=1") {
		t.Error("metric printed in the live view")
	}
	if !strings.Contains(out, "01:02.5 [node] ↷ nvme") || !strings.Contains(out, "SKIPPED") || !strings.Contains(out, "2.5s") {
		t.Errorf("phase_end line wrong:\n%s", out)
	}
	b.Reset()
	PrintReport(&b, &curev1.RunReport{
		RunId: "r1", NodeId: "n1", Mode: curev1.Mode_MODE_PROVISION, Status: "succeeded", StartedUnixMs: 0, EndedUnixMs: 90_000, Reboots: 2, BootPath: "uefi-https",
		Phases:   []*curev1.PhaseRecord{{Name: "nvme", Status: "skipped", Attempts: 1, StartedUnixMs: 1, EndedUnixMs: 1001}},
		Verdicts: []*curev1.Verdict{{Component: "nvme/0", Check: "firmware", Status: curev1.VerdictStatus_MATCH, Observed: "7.2.22", Expected: "7.2.22"}},
	})
	out = b.String()
	for _, want := range []string{"status SUCCEEDED", "1m30s", "reboots 2  boot path uefi-https", "nvme/0", "MATCH", "7.2.22", "SKIPPED"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// -o wide keeps every cell whole; the default table clips long ones.
func TestPrintReportWide(t *testing.T) {
	long := "GPU 3 failed DCGM diagnostic level 3: " + strings.Repeat("memory bandwidth below 80% of spec on HBM stack ", 4) + "END"
	rep := &curev1.RunReport{RunId: "r1", NodeId: "n1", Status: "failed",
		Verdicts: []*curev1.Verdict{{Component: "gpu/3", Check: "dcgm", Status: curev1.VerdictStatus_FAIL, Message: long}}}
	var narrow, wide strings.Builder
	PrintReport(&narrow, rep)
	PrintReportWide(&wide, rep)
	if strings.Contains(narrow.String(), "END") || !strings.Contains(narrow.String(), "…") {
		t.Errorf("table does not clip a %d-character detail:\n%s", len(long), narrow.String())
	}
	if !strings.Contains(wide.String(), long) {
		t.Errorf("wide report lacks the whole detail:\n%s", wide.String())
	}
}

// A report the coordinator cut to its size bound says what it left out, in
// the terminal and in the HTML report.
func TestReportSaysWhatWasLeftOut(t *testing.T) {
	rep := &curev1.RunReport{RunId: "r1", NodeId: "n1", Status: "failed", VerdictsOmitted: 391, EventsNotStored: 4212,
		Verdicts: []*curev1.Verdict{{Component: "gpu/3", Check: "dcgm", Status: curev1.VerdictStatus_FAIL}}}
	var text, html bytes.Buffer
	PrintReport(&text, rep)
	if err := WriteHTML(&html, rep, nil); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{text.String(), html.String()} {
		if !strings.Contains(out, "391 more verdicts") || !strings.Contains(out, "4212 events past the run's caps") {
			t.Errorf("report does not say what was left out:\n%s", out)
		}
	}
	var full bytes.Buffer
	PrintReport(&full, &curev1.RunReport{RunId: "r1", Status: "succeeded"})
	if strings.Contains(full.String(), "left out") || strings.Contains(full.String(), "not stored") {
		t.Errorf("a whole report claims something was left out:\n%s", full.String())
	}
}

// TestReportShowsOptionalReason: a check the suite marks optional that
// tested nothing is a SKIP whose detail starts with "optional: <reason>",
// in the terminal report (clipped or not) and the HTML one; one that is
// not optional is an ERROR saying it tested nothing.
func TestReportShowsOptionalReason(t *testing.T) {
	rep := &curev1.RunReport{RunId: "r1", NodeId: "n1", Mode: curev1.Mode_MODE_DIAGNOSTIC, Status: "failed",
		Verdicts: []*curev1.Verdict{
			{Component: "infiniband", Check: "ib-ports", Status: curev1.VerdictStatus_SKIP,
				Message: `optional: QEMU nodes have no InfiniBand: no component matched appliesTo "ib/*/*"`},
			{Component: "gpu", Check: "gpu-health", Status: curev1.VerdictStatus_ERROR,
				Message: "tested nothing (mark the check optional: {reason: ...} in the suite where that is expected): no NVIDIA GPU on this node"},
		}}
	var narrow, wide, html bytes.Buffer
	PrintReport(&narrow, rep)
	PrintReportWide(&wide, rep)
	if err := WriteHTML(&html, rep, nil); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"report": narrow.String(), "wide": wide.String(), "html": html.String()} {
		if !strings.Contains(out, "optional: QEMU nodes have no InfiniBand") || !strings.Contains(out, "tested nothing") {
			t.Errorf("%s does not show the optional reason and the check that tested nothing:\n%s", name, out)
		}
	}
}
