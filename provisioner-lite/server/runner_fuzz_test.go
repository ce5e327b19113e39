package server

import (
	"math"
	"strings"
	"testing"
	"unicode/utf8"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

var fuzzPhases = map[string]bool{"nvme": true, "sed_revert": true, "os_install": true}

// FuzzRunnerEvent feeds any bytes a runner could send as an Event to the
// coordinator's event handling: whatever it accepts is attributed to the
// session (never the run the bytes name), carries only clean, bounded text,
// and a phase_end's stored payload parses back.
func FuzzRunnerEvent(f *testing.F) {
	for _, ev := range []*curev1.Event{
		{Seq: 1, RunId: "other-run", Phase: "nvme", Body: &curev1.Event_PhaseStart{PhaseStart: &curev1.PhaseStart{}}},
		{Seq: 2, Phase: "os_install", Body: &curev1.Event_PhaseEnd{PhaseEnd: &curev1.PhaseEnd{Status: curev1.PhaseStatus_PHASE_OK, Message: "ok\x1b]0;x\x07", RebootRequired: true, DurationMs: -5}}},
		{Seq: 3, Phase: "sed_revert", Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{Component: "disk/nvme0n1", Check: "wipe", Status: curev1.VerdictStatus_PASS, Observed: strings.Repeat("o", 5000)}}},
		{Seq: 7, Phase: "nvme", Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{Component: "disk/nvme0n1", Check: "disk-random", Status: curev1.VerdictStatus_PASS,
			Measurements: []*curev1.Measurement{{Metric: "randReadIOPS", Value: 182345, Unit: "IOPS"}, {Metric: "p99ReadLatencyUs\x1b[2J", Value: 2244.6, Unit: "us\u202e"}}}}},
		{Seq: 4, Body: &curev1.Event_Log{Log: &curev1.Log{Level: "info", Message: "m", Attrs: map[string]string{"a": "b", "\u202e": "\x00"}}}},
		{Seq: 5, Body: &curev1.Event_Metric{Metric: &curev1.Metric{Name: "gpu_temp", Value: 71, Unit: "C", Labels: map[string]string{"gpu": "3"}}}},
		{Seq: 0, Body: &curev1.Event_PhaseStart{PhaseStart: &curev1.PhaseStart{}}},
		{Seq: 6, Phase: "bios", Body: &curev1.Event_PhaseStart{PhaseStart: &curev1.PhaseStart{}}},
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
		for _, s := range []string{e.Message, e.Status, e.Kind} {
			if !utf8.ValidString(s) || !textsafe.Safe(s) || len(s) > maxMessage+64 {
				t.Fatalf("unclean or unbounded text %q", s)
			}
		}
		if v != nil {
			if v.RunID != "run1" || v.Component == "" || v.Check == "" {
				t.Fatalf("verdict %+v", v)
			}
			if len(v.Measurements) > maxMeasurements {
				t.Fatalf("%d measurements kept", len(v.Measurements))
			}
			for _, m := range v.Measurements {
				if m.Metric == "" || !textsafe.Safe(m.Metric+m.Unit) || len(m.Metric) > maxName+64 || len(m.Unit) > 96 || math.IsNaN(m.Value) || math.IsInf(m.Value, 0) {
					t.Fatalf("measurement %+v", m)
				}
			}
			for _, s := range []string{v.Component, v.Check, v.Observed, v.Expected, v.Message} {
				if !textsafe.Safe(s) || strings.ContainsAny(v.Component+v.Check, "\n\t") || len(s) > maxMessage+64 {
					t.Fatalf("unclean verdict field %q", s)
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
