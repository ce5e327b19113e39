package render

import (
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

func TestProgressAndRender(t *testing.T) {
	now := time.Date(2026, 11, 24, 22, 0, 0, 0, time.UTC)
	ms := func(d time.Duration) int64 { return now.Add(-d).UnixMilli() }
	reports := []*curev1.RunReport{
		// n1 finished validate in 40m and is in os_install (expected 4m by --expect).
		{RunId: "r1", NodeId: "n1", Status: "running", Phases: []*curev1.PhaseRecord{
			{Name: "preflight", Status: "ok", StartedUnixMs: ms(3 * time.Hour), EndedUnixMs: ms(170 * time.Minute)},
			{Name: "validate", Status: "ok", StartedUnixMs: ms(170 * time.Minute), EndedUnixMs: ms(130 * time.Minute)},
			{Name: "os_install", Status: "running", StartedUnixMs: ms(5 * time.Minute)},
		}},
		// n2 is 30m into validate; the median of finished validates (40m, 60m, 90m) is 60m.
		{RunId: "r2", NodeId: "n2", Status: "running", Phases: []*curev1.PhaseRecord{
			{Name: "preflight", Status: "ok", StartedUnixMs: ms(2 * time.Hour), EndedUnixMs: ms(119 * time.Minute)},
			{Name: "validate", Status: "running", StartedUnixMs: ms(30 * time.Minute)},
		}},
		{RunId: "r3", NodeId: "n3", Status: "failed", Message: "validate: gpu-burn: 3 ECC errors", Phases: []*curev1.PhaseRecord{
			{Name: "validate", Status: "failed", StartedUnixMs: ms(4 * time.Hour), EndedUnixMs: ms(3 * time.Hour)},
		}},
		{RunId: "r4", NodeId: "n4", Status: "succeeded", Phases: []*curev1.PhaseRecord{
			{Name: "validate", Status: "ok", StartedUnixMs: ms(5 * time.Hour), EndedUnixMs: ms(4 * time.Hour)},
			{Name: "os_install", Status: "ok", StartedUnixMs: ms(4 * time.Hour), EndedUnixMs: ms(230 * time.Minute)},
		}},
		{RunId: "r6", NodeId: "n6", Status: "succeeded", Phases: []*curev1.PhaseRecord{
			{Name: "validate", Status: "ok", StartedUnixMs: ms(5 * time.Hour), EndedUnixMs: ms(210 * time.Minute)},
		}},
		nil,
	}
	nodes := []string{"n1", "n2", "n3", "n4", "n6", "n5"}
	rows := Progress(nodes, reports, map[string]time.Duration{"os_install": 4 * time.Minute}, now)
	want := []NodeProgress{
		{Node: "n1", RunID: "r1", Status: curev1.RunStatus_RUN_RUNNING, Phase: "os_install", Elapsed: 5 * time.Minute, Expected: 4 * time.Minute, Done: 2, Total: 3},
		{Node: "n2", RunID: "r2", Status: curev1.RunStatus_RUN_RUNNING, Phase: "validate", Elapsed: 30 * time.Minute, Expected: 60 * time.Minute, Done: 1, Total: 2},
		{Node: "n3", RunID: "r3", Status: curev1.RunStatus_RUN_FAILED, Done: 1, Total: 1, Message: "validate: gpu-burn: 3 ECC errors"},
		{Node: "n4", RunID: "r4", Status: curev1.RunStatus_RUN_SUCCEEDED, Done: 2, Total: 2},
		{Node: "n6", RunID: "r6", Status: curev1.RunStatus_RUN_SUCCEEDED, Done: 1, Total: 1},
		{Node: "n5", Status: curev1.RunStatus_RUN_STATUS_UNSPECIFIED},
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d = %+v\nwant     %+v", i, rows[i], want[i])
		}
	}
	lines := RenderProgress(rows, 10)
	wantLines := []string{
		"n1    running    2/3 os_install     5m0s  [##########] 100%  overdue 1m0s",
		"n2    running    1/2 validate       30m0s  [#####.....]  50%  eta 30m0s",
		"n3    failed     1/1  validate: gpu-burn: 3 ECC errors",
		"n4    succeeded  2/2",
		"n6    succeeded  1/1",
		"n5    none",
		"6 nodes: failed 1, running 2, succeeded 2, none 1",
	}
	if strings.Join(lines, "\n") != strings.Join(wantLines, "\n") {
		t.Errorf("rendered:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(wantLines, "\n"))
	}
}

func TestBarAndETA(t *testing.T) {
	for _, tc := range []struct {
		el, exp  time.Duration
		bar, eta string
	}{
		{0, time.Hour, "[....]", "eta 1h0m0s"},
		{15 * time.Minute, time.Hour, "[#...]", "eta 45m0s"},
		{59 * time.Minute, time.Hour, "[###.]", "eta 1m0s"},
		{time.Hour, time.Hour, "[####]", "overdue 0s"},
		{2 * time.Hour, time.Hour, "[####]", "overdue 1h0m0s"},
		{time.Hour, 0, "", ""},
	} {
		if b := Bar(tc.el, tc.exp, 4); b != tc.bar {
			t.Errorf("Bar(%v, %v) = %q, want %q", tc.el, tc.exp, b, tc.bar)
		}
		if e := ETA(tc.el, tc.exp); e != tc.eta {
			t.Errorf("ETA(%v, %v) = %q, want %q", tc.el, tc.exp, e, tc.eta)
		}
	}
}
