package pipeline_test

import (
	"context"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/qemu-test/vbmc"
)

// wrongMAC is a MAC the scripted node does not have: with it in the
// inventory, the node PXE-boots as a stranger and gets no CURE.
const wrongMAC = "52:54:00:c0:de:99"

// newMistypedFixture is the fixture with the node's MAC mistyped in the
// inventory and a short wait for CURE.
func newMistypedFixture(t *testing.T, waitCURE time.Duration) *fixture {
	t.Helper()
	f := newFixtureCfg(t, nil, nil, func(c *pipeline.Config) { c.Timeouts.WaitForCURE = waitCURE })
	f.setMACs(wrongMAC)
	return f
}

// setMACs replaces the node's MACs, as curectl nodes import does.
func (f *fixture) setMACs(macs ...string) {
	f.t.Helper()
	ctx := context.Background()
	n, err := f.st.GetNode(ctx, "node1")
	if err != nil {
		f.t.Fatal(err)
	}
	n.MACs = macs
	if _, _, err := f.st.PutNodes(ctx, []store.Node{n}, true); err != nil {
		f.t.Fatal(err)
	}
}

// pxeBoots counts the machine's network boots.
func (f *fixture) pxeBoots() int {
	n := 0
	for _, b := range f.m.Boots() {
		if b == vbmc.BootPxe {
			n++
		}
	}
	return n
}

// A run that failed waiting for CURE (the node's MAC mistyped), its MAC
// fixed and the run resumed by the operator: the resumed wait boots CURE
// once, and the runner that registers for it is the run's CURE session,
// adopted by the next batch instead of booted a second time (the reboot's
// time was booked to the coordinator).
func TestResumeAdoptsRegisteredCURE(t *testing.T) {
	f := newMistypedFixture(t, 1500*time.Millisecond)
	ctx := context.Background()
	runID, err := f.eng.Start(ctx, "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.waitRun(runID); r.Status != curev1.RunStatus_RUN_FAILED || r.Phase != modes.WaitForCURE {
		t.Fatalf("run ended %s in %s: %s; want failed waiting for CURE", r.Status, r.Phase, r.Message)
	}
	f.setMACs(mac)
	boots, history := f.pxeBoots(), len(f.bmc.History())
	if _, err := f.eng.Start(ctx, "node1", modes.Provision, "", true); err != nil {
		t.Fatal(err)
	}
	r := f.waitRun(runID)
	if r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("resumed run ended %s: %s", r.Status, r.Message)
	}
	if n := f.pxeBoots() - boots; n != 1 {
		t.Errorf("%d network boots after the resume, want one CURE boot (history %v)", n, f.bmc.History())
	}
	if evs := f.notes(runID, "its earlier CURE session ended with the run"); len(evs) != 0 {
		t.Errorf("the resumed run booted CURE a second time: %s", evs[0].Message)
	}
	if got := len(f.bmc.History()) - history; got != 2 {
		t.Errorf("%d boots after the resume %v, want CURE and the installed OS", got, f.bmc.History())
	}
}
