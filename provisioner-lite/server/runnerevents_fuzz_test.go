package server

import (
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

var fuzzPhases = map[modes.PhaseName]bool{"nvme": true, "sed_revert": true, "os_install": true}

// FuzzRunnerEvent feeds any bytes a runner could send as an Event to the
// coordinator's event handling: whatever it accepts is attributed to the
// session (never the run the bytes name), carries only clean, bounded text,
// and a phase_end's stored payload parses back.
func FuzzRunnerEvent(f *testing.F) {
	for _, ev := range []*curev1.Event{
		{Seq: 1, RunId: "other-run", Phase: "nvme", Body: &curev1.Event_PhaseStart{PhaseStart: &curev1.PhaseStart{}}},
		{Seq: 2, Phase: "os_install", Body: &curev1.Event_PhaseEnd{PhaseEnd: &curev1.PhaseEnd{Status: curev1.PhaseStatus_PHASE_OK, Message: "ok\x1b]0;x\x07", RebootRequired: true, DurationMs: -5}}},
		{Seq: 3, Phase: "sed_revert", Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{Component: "disk/nvme0n1", Check: "wipe", Status: curev1.VerdictStatus_PASS, Observed: strings.Repeat("o", 5000)}}},
		{Seq: 4, Body: &curev1.Event_Log{Log: &curev1.Log{Level: "info", Message: "m", Attrs: map[string]string{"a": "b", "\u202e": "\x00"}}}},
		{Seq: 5, Body: &curev1.Event_Metric{Metric: &curev1.Metric{Name: "gpu_temp", Value: 71, Unit: "C", Labels: map[string]string{"gpu": "3"}}}},
		{Seq: 0, Body: &curev1.Event_PhaseStart{PhaseStart: &curev1.PhaseStart{}}},
		{Seq: 6, Phase: "bios", Body: &curev1.Event_PhaseStart{PhaseStart: &curev1.PhaseStart{}}},
		{Seq: 7, Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{Component: "disk/vdb", Check: "disk-read", Status: curev1.VerdictStatus_PASS,
			Measurements: []*curev1.Measurement{{Metric: "readMBps", Value: 41, Unit: "MB/s"}, {Metric: "lat", Value: -1, Unit: "us\x1b"}}}}},
	} {
		b, _ := proto.Marshal(ev)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var ev curev1.Event
		if proto.Unmarshal(b, &ev) != nil {
			return
		}
		e, v, err := runnerEvent("node1", "run1", "boot1", &ev, fuzzPhases)
		if err != nil {
			return
		}
		if e.RunID != "run1" || e.NodeID != "node1" || e.BootID != "boot1" || e.Source != "runner" {
			t.Fatalf("event attributed to %s/%s/%s/%s", e.NodeID, e.RunID, e.BootID, e.Source)
		}
		if e.Seq == 0 || (e.Phase != "" && !fuzzPhases[e.Phase]) {
			t.Fatalf("accepted seq %d phase %q", e.Seq, e.Phase)
		}
		for _, s := range []string{e.Message, e.Status, string(e.Kind)} {
			if !utf8.ValidString(s) || !textsafe.Safe(s) || len(s) > maxMessage+64 {
				t.Fatalf("unclean or unbounded text %q", s)
			}
		}
		if v != nil {
			if v.RunID != "run1" || v.Component == "" || v.Check == "" {
				t.Fatalf("verdict %+v", v)
			}
			for _, s := range []string{v.Component, v.Check, v.Observed, v.Expected, v.Message} {
				if !textsafe.Safe(s) || strings.ContainsAny(v.Component+v.Check, "\n\t") || len(s) > maxMessage+64 {
					t.Fatalf("unclean verdict field %q", s)
				}
			}
			if len(v.Measurements) > store.MaxVerdictMeasurements {
				t.Fatalf("%d measurements", len(v.Measurements))
			}
			for _, m := range v.Measurements {
				if !metricName(m.Metric) || !textsafe.Safe(m.Unit) || len(m.Unit) > maxUnit || math.IsNaN(m.Value) || math.IsInf(m.Value, 0) {
					t.Fatalf("measurement %+v", m)
				}
			}
		}
		if e.Kind == "phase_end" {
			var back curev1.Event
			if err := protojson.Unmarshal(e.Payload, &back); err != nil || back.GetPhaseEnd() == nil || back.GetPhaseEnd().GetDurationMs() < 0 {
				t.Fatalf("phase_end payload %q: %v", e.Payload, err)
			}
		} else if len(e.Payload) != 0 {
			t.Fatalf("%s kept a payload", e.Kind)
		}
	})
}

// FuzzRunnerProgress feeds any bytes a runner could send as a heartbeat:
// whatever is kept is attributed to the session, of a runner phase, its
// stored form parses back with clean, bounded text, no negative times, at
// most maxProgressChecks checks and no MARGINAL.
func FuzzRunnerProgress(f *testing.F) {
	for _, ev := range []*curev1.Event{
		{Seq: 1, Phase: "nvme", Body: &curev1.Event_Progress{Progress: &curev1.Progress{Suite: "soak", Stage: "load", ElapsedMs: 5, PlannedMs: 10, RemainingMs: 5,
			Checks: []*curev1.CheckProgress{{Check: "cpu", Stage: "load", State: "running", ElapsedMs: 1, PlannedMs: 10}, {Check: "smart", State: "done", Worst: curev1.VerdictStatus_FAIL}}}}},
		{Seq: 2, Phase: "os_install", RunId: "other", Body: &curev1.Event_Progress{Progress: &curev1.Progress{Suite: "\x1b]0;x\x07", ElapsedMs: -1,
			Checks: []*curev1.CheckProgress{{Check: "\u202e", State: "done", Worst: curev1.VerdictStatus_MARGINAL}}}}},
		{Seq: 3, Phase: "bios", Body: &curev1.Event_Progress{Progress: &curev1.Progress{}}},
		{Seq: 4, Phase: "nvme", Body: &curev1.Event_Progress{Progress: &curev1.Progress{Checks: []*curev1.CheckProgress{{State: "weird"}}}}},
	} {
		b, _ := proto.Marshal(ev)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var ev curev1.Event
		if proto.Unmarshal(b, &ev) != nil || ev.GetProgress() == nil {
			return
		}
		rec, err := runnerProgress("run1", "boot1", &ev, fuzzPhases)
		if err != nil {
			return
		}
		if rec.RunID != "run1" || rec.BootID != "boot1" || rec.Seq == 0 || !fuzzPhases[rec.Phase] {
			t.Fatalf("heartbeat kept as %+v", rec)
		}
		var p curev1.Progress
		if err := protojson.Unmarshal(rec.JSON, &p); err != nil {
			t.Fatalf("stored heartbeat %q: %v", rec.JSON, err)
		}
		if len(p.GetChecks()) > maxProgressChecks || p.GetElapsedMs() < 0 || p.GetPlannedMs() < 0 || p.GetRemainingMs() < 0 {
			t.Fatalf("unbounded heartbeat: %d checks, %d/%d/%d ms", len(p.GetChecks()), p.GetElapsedMs(), p.GetPlannedMs(), p.GetRemainingMs())
		}
		texts := []string{p.GetSuite(), p.GetStage()}
		for _, c := range p.GetChecks() {
			texts = append(texts, c.GetCheck(), c.GetStage(), c.GetState())
			if c.GetElapsedMs() < 0 || c.GetPlannedMs() < 0 || c.GetWorst() == curev1.VerdictStatus_MARGINAL {
				t.Fatalf("stored check %v", c)
			}
		}
		for _, s := range texts {
			if !utf8.ValidString(s) || !textsafe.Safe(s) || strings.ContainsAny(s, "\n\t") || len(s) > maxName+64 {
				t.Fatalf("unclean or unbounded text %q", s)
			}
		}
	})
}
