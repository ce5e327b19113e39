package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
)

func measuredVerdict(seq uint64, component string, v float64) *curev1.Event {
	return &curev1.Event{Seq: seq, Phase: string(modes.SEDRevert), TimeUnixMs: time.Now().UnixMilli(), Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{
		Component: component, Check: "gpu-bandwidth", Status: curev1.VerdictStatus_PASS, Message: "measured",
		Measurements: []*curev1.Measurement{{Metric: "h2dGBps", Value: v, Unit: "GB/s"}}}}}
}

// TestMeasurementsOutsideInventoryRefused: a runner session's verdicts
// measure only parts of the node's inventory as the coordinator stored it
// from its Hello: gpu/7 of 8 GPUs is kept; gpu/31 (and a pair naming it)
// is stored without its measurements, the verdict says why and a security
// event names it. A session whose Hello stored no inventory has no GPU to
// measure; a component of a kind no inventory describes (a pair link) is
// not refused.
func TestMeasurementsOutsideInventoryRefused(t *testing.T) {
	h := newHostile(t)
	ctx := context.Background()
	inv := &curev1.Inventory{}
	for i := range 8 {
		inv.Gpus = append(inv.Gpus, &curev1.Gpu{Index: uint32(i)})
	}
	s, cancel := h.session(helloOpts{token: h.fetchToken(nodeA.mac), boot: "a1", node: nodeA, inv: inv})
	defer cancel()
	for i, comp := range []string{"gpu/7", "gpu/31", "gpu/0-31"} {
		if err := send(s, measuredVerdict(uint64(i+1), comp, 50)); err != nil {
			t.Fatalf("%s: %v (a refused measurement is not a refused event)", comp, err)
		}
	}
	ms, err := h.st.RunMeasurements(ctx, nodeA.run)
	if err != nil || len(ms) != 1 || ms[0].Component != "gpu/7" {
		t.Fatalf("measurements stored %+v %v, want gpu/7's only", ms, err)
	}
	vs, _ := h.st.Verdicts(ctx, nodeA.run)
	refused := 0
	for _, v := range vs {
		if strings.Contains(v.Message, "measurements refused, never fleet samples") && strings.Contains(v.Message, `lists no gpu "31" (it lists 8 gpu)`) {
			refused++
		}
	}
	if len(vs) != 3 || refused != 2 {
		t.Errorf("verdicts %+v: want 3, 2 saying their measurements were refused", vs)
	}
	sec := h.security("measurement_component_refused")
	if len(sec) == 0 || !strings.Contains(sec[0].Detail, "gpu/31") || sec[0].Actor != nodeA.id {
		t.Errorf("security events %+v", sec)
	}

	// Node B's Hello carries no inventory: no GPU of its to measure.
	sb, cancelB := h.session(helloOpts{token: h.fetchToken(nodeB.mac), boot: "b1", node: nodeB})
	defer cancelB()
	for i, comp := range []string{"gpu/0", "pair/node9"} {
		if err := send(sb, measuredVerdict(uint64(i+1), comp, 50)); err != nil {
			t.Fatalf("%s: %v", comp, err)
		}
	}
	ms, _ = h.st.RunMeasurements(ctx, nodeB.run)
	if got := fmt.Sprint(len(ms)); got != "1" || ms[0].Component != "pair/node9" {
		t.Errorf("node B measurements %+v, want pair/node9's only", ms)
	}
}
