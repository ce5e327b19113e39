package render

import (
	"bytes"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

func soakProgress() *curev1.Progress {
	return &curev1.Progress{Suite: "burnin-72h", Stage: "load", ElapsedMs: (10 * time.Hour).Milliseconds(), PlannedMs: (72 * time.Hour).Milliseconds(),
		RemainingMs: (62 * time.Hour).Milliseconds(), Resumed: 1, Checks: []*curev1.CheckProgress{
			{Check: "smart-before", Stage: "before", State: "done", Worst: curev1.VerdictStatus_PASS, ElapsedMs: 900},
			{Check: "cpu-soak", Stage: "load", State: "running", ElapsedMs: (9 * time.Hour).Milliseconds(), PlannedMs: (36 * time.Hour).Milliseconds()},
			{Check: "mem-soak", Stage: "load", State: "done", Worst: curev1.VerdictStatus_FAIL, ElapsedMs: (2 * time.Hour).Milliseconds(), PlannedMs: (36 * time.Hour).Milliseconds()},
			{Check: "smart-after", Stage: "after", State: "pending"},
		}}
}

// TestSuiteProgressView: each check's share of its planned length, the
// ETA aged from the heartbeat, the deadline, and no ETA once the run ended.
func TestSuiteProgressView(t *testing.T) {
	heard := time.Unix(1_760_000_000, 0)
	now := heard.Add(time.Hour)
	deadline := heard.Add(63 * time.Hour).UnixMilli()
	v := SuiteProgress(soakProgress(), heard.UnixMilli(), deadline, true, now)
	if v.Done != 2 || v.Running != 1 || v.Total != 4 || v.ETA != "61h0m0s" || v.Heard != "1h0m0s" || v.Deadline != "2025-10-11 23:53 UTC" {
		t.Fatalf("view %+v", v)
	}
	byName := map[string]SuiteCheck{}
	for _, c := range v.Checks {
		byName[c.Check] = c
	}
	if c := byName["cpu-soak"]; c.Pct != 25 || c.State != "running" || c.Planned != "36h0m0s" {
		t.Errorf("cpu-soak %+v", c)
	}
	if c := byName["mem-soak"]; c.Pct != 100 || c.Worst != "FAIL" || c.Class != "bad" {
		t.Errorf("mem-soak %+v", c)
	}
	if c := byName["smart-after"]; c.Pct != 0 || c.Planned != "one shot" {
		t.Errorf("smart-after %+v", c)
	}
	for _, want := range []string{"suite burnin-72h · stage load · 2/4 checks done, 1 running · elapsed 10h0m0s of 72h0m0s planned", "eta 61h0m0s", "deadline 2025-10-11 23:53 UTC", "resumed after 1 node reset(s)"} {
		if !strings.Contains(v.Headline(), want) {
			t.Errorf("headline %q lacks %q", v.Headline(), want)
		}
	}
	if ended := SuiteProgress(soakProgress(), heard.UnixMilli(), deadline, false, now); ended.ETA != "" || ended.Deadline != "" {
		t.Errorf("an ended run shows eta %q deadline %q", ended.ETA, ended.Deadline)
	}
	if SuiteProgress(nil, 0, 0, true, now) != nil {
		t.Error("a view without a heartbeat")
	}
}

// TestProgressInWatchReportAndHTML: the live timeline prints a heartbeat
// with a bar per running check, the report a table of every check, the
// multi-node watch the suite's own ETA, the HTML report a section.
func TestProgressInWatchReportAndHTML(t *testing.T) {
	heard := time.Unix(1_760_000_000, 0)
	var b bytes.Buffer
	NewTimeline(&b).Print(&curev1.TimelineEntry{TimeUnixMs: heard.UnixMilli(), Phase: "validate", Kind: "progress", Source: "runner", Progress: soakProgress()})
	out := b.String()
	if !strings.Contains(out, "stage load · 2/4 checks done") || !strings.Contains(out, "cpu-soak") || !strings.Contains(out, "[#####...............]  25%") || strings.Contains(out, "smart-after") {
		t.Errorf("live heartbeat:\n%s", out)
	}

	rep := &curev1.RunReport{RunId: "r1", NodeId: "n1", Status: "running", StartedUnixMs: heard.Add(-10 * time.Hour).UnixMilli(),
		Phases:   []*curev1.PhaseRecord{{Name: "validate", Status: "running", StartedUnixMs: heard.Add(-10 * time.Hour).UnixMilli()}},
		Progress: soakProgress(), ProgressUnixMs: heard.UnixMilli(), DeadlineUnixMs: heard.Add(63 * time.Hour).UnixMilli()}
	b.Reset()
	PrintReport(&b, rep)
	for _, want := range []string{"CHECK", "mem-soak", "FAIL", "cpu-soak", "25%", "deadline"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}

	rows := Progress([]string{"n1"}, []*curev1.RunReport{rep}, nil, heard)
	if rows[0].Phase != "validate" || rows[0].Expected != 72*time.Hour {
		t.Errorf("watch row %+v: want the validate phase expected to last elapsed + the suite's 62h left", rows[0])
	}

	b.Reset()
	if err := writeHTML(&b, rep, nil, heard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`id="suite-checks"`, "cpu-soak", `style="width:25%"`, "eta 62h0m0s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
}
