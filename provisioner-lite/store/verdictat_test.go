package store

import (
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// A verdict keeps when its finding happened and its stage, through the
// runner's events and PutVerdict alike.
func TestVerdictAtAndStage(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	if err := s.CreateRun(ctx, Run{ID: "r1", NodeID: "n1", Status: curev1.RunStatus_RUN_RUNNING}); err != nil {
		t.Fatal(err)
	}
	sent := time.Date(2026, 11, 26, 10, 5, 0, 0, time.UTC)
	at := sent.Add(-4 * time.Minute)
	v := &Verdict{RunID: "r1", Component: "gpu/3", Check: "telemetry:soak", Status: curev1.VerdictStatus_FAIL, Message: "hot", Time: sent, At: at, Stage: "soak"}
	if _, err := s.AppendRunnerEvent(ctx, Event{RunID: "r1", NodeID: "n1", BootID: "b", Seq: 1, Time: sent, Kind: "verdict"}, v, DefaultEventLimits); err != nil {
		t.Fatal(err)
	}
	if err := s.PutVerdict(ctx, Verdict{RunID: "r1", Component: "cpu/0", Check: "cpu", Status: curev1.VerdictStatus_PASS, Time: sent}); err != nil {
		t.Fatal(err)
	}
	vs, err := s.Verdicts(ctx, "r1")
	if err != nil || len(vs) != 2 {
		t.Fatalf("verdicts %+v, %v", vs, err)
	}
	if cpu := vs[0]; !cpu.At.IsZero() || cpu.Stage != "" {
		t.Errorf("cpu/0: at %s stage %q, want none", cpu.At, cpu.Stage)
	}
	if g := vs[1]; !g.At.Equal(at) || g.Stage != "soak" || !g.Time.Equal(sent) {
		t.Errorf("gpu/3: at %s stage %q time %s", g.At, g.Stage, g.Time)
	}
}
