package render

import (
	"bytes"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// A hostile runner's text reaches curectl's terminal output without a
// single escape sequence: report tables, the live timeline, the audit log.
func TestScrubRemovesTerminalEscapes(t *testing.T) {
	osc := "\x1b]0;owned\x07"
	rep := &curev1.RunReport{
		RunId: "r1", NodeId: "node1", Status: "succeeded", Message: "done" + osc,
		Phases:   []*curev1.PhaseRecord{{Name: "os_install", Status: "ok", Message: "wrote\x1b[2K image"}},
		Verdicts: []*curev1.Verdict{{Component: "gpu/3" + osc, Check: "ecc", Status: curev1.VerdictStatus_FAIL, Observed: "\u009b31m12", Message: "PASS\u202e LIAF"}},
	}
	Scrub(rep)
	var out bytes.Buffer
	PrintReport(&out, rep)
	tl := NewTimeline(&out)
	e := &curev1.TimelineEntry{Kind: "log", Message: "hi" + osc + "\rback", Phase: "validate"}
	Scrub(e)
	tl.Print(e)
	a := &curev1.AuditEntry{Actor: "node1", Action: "event_other_run", Detail: "x" + osc, NodeIds: []string{"n\x1b1"}}
	Scrub(a)
	PrintAuditLog(&out, []*curev1.AuditEntry{a})
	for _, bad := range []string{"\x1b", "\x07", "\u009b", "\u202e", "\r"} {
		if strings.Contains(out.String(), bad) {
			t.Fatalf("output holds %q:\n%q", bad, out.String())
		}
	}
	if !strings.Contains(out.String(), "gpu/3") || !strings.Contains(out.String(), "event_other_run") {
		t.Fatalf("scrub lost the text itself:\n%s", out.String())
	}
}

func TestScrubMaps(t *testing.T) {
	ev := &curev1.Event{Body: &curev1.Event_Log{Log: &curev1.Log{Message: "m", Attrs: map[string]string{"k\x1b": "v\x1b]0;x\x07"}}}}
	Scrub(ev)
	for k, v := range ev.GetLog().GetAttrs() {
		if strings.ContainsAny(k+v, "\x1b\x07") {
			t.Fatalf("map entry %q=%q not scrubbed", k, v)
		}
	}
}
