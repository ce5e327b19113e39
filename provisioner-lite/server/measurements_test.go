package server

import (
	"math"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// TestVerdictMeasurementsFromRunner: a verdict's measurements are kept
// with clean names and units; a non-finite value or too many are refused
// with the verdict, naming it.
func TestVerdictMeasurementsFromRunner(t *testing.T) {
	ev := func(ms ...*curev1.Measurement) *curev1.Event {
		return &curev1.Event{Seq: 1, Phase: "validate", Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{
			Component: "disk/nvme0n1", Check: "disk-random", Status: curev1.VerdictStatus_PASS, Measurements: ms}}}
	}
	phases := map[string]bool{"validate": true}
	_, v, err := runnerEvent("n", "r", "b", ev(&curev1.Measurement{Metric: "randReadIOPS", Value: 182345, Unit: "IOPS"},
		&curev1.Measurement{Metric: "p99ReadLatencyUs\x1b[2J", Value: 2244.608, Unit: "us"}), phases)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Measurements) != 2 || v.Measurements[0].Metric != "randReadIOPS" || v.Measurements[0].Unit != "IOPS" ||
		v.Measurements[1].Value != 2244.608 || strings.ContainsRune(v.Measurements[1].Metric, 0x1b) {
		t.Errorf("measurements %+v", v.Measurements)
	}
	for name, e := range map[string]*curev1.Event{
		"NaN":      ev(&curev1.Measurement{Metric: "x", Value: math.NaN(), Unit: "IOPS"}),
		"infinite": ev(&curev1.Measurement{Metric: "x", Value: math.Inf(1)}),
		"nameless": ev(&curev1.Measurement{Value: 1}),
		"too many": ev(make([]*curev1.Measurement, maxMeasurements+1)...),
	} {
		if _, _, err := runnerEvent("n", "r", "b", e, phases); err == nil || !strings.Contains(err.Error(), "verdict disk/nvme0n1 disk-random") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
