package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/qemu-test/vbmc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

// A run that ended with its node in CURE (here a failed phase; a
// diagnostic leaves it so by default): its runner, dialling back with its
// token and session secret, is told its run ended, with no security event;
// and the operator sends the node to its installed OS through the operator
// API, refused while a run is active.
func TestEndedRunLeftInCURE(t *testing.T) {
	f := newFixture(t, nil)
	f.phaseStatus = func(p modes.PhaseName, _ int) curev1.PhaseStatus {
		if p == modes.Hardware {
			return curev1.PhaseStatus_PHASE_FAILED
		}
		return curev1.PhaseStatus_PHASE_OK
	}
	ctx := context.Background()
	op := &server.OperatorService{Store: f.st, OSBooter: f.eng}
	runID, err := f.eng.Start(ctx, "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.BootInstalledOS(ctx, &curev1.BootInstalledOSRequest{NodeId: "node1"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("boot-os during the run: %v, want FailedPrecondition", err)
	}
	if r := f.waitRun(runID); r.Status != curev1.RunStatus_RUN_FAILED {
		t.Fatalf("run ended %s: %s", r.Status, r.Message)
	}
	f.mu.Lock()
	hello := f.hellos[len(f.hellos)-1]
	f.mu.Unlock()
	stream, err := f.client.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&curev1.RunnerMessage{Msg: &curev1.RunnerMessage_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	var ended *curev1.RunEnded
	for _, d := range status.Convert(err).Details() {
		if re, ok := d.(*curev1.RunEnded); ok {
			ended = re
		}
	}
	if status.Code(err) != codes.FailedPrecondition || ended.GetRunId() != runID || ended.GetStatus() != "failed" {
		t.Fatalf("the ended run's runner dialling back: %v (detail %v), want FailedPrecondition with RunEnded", err, ended)
	}
	sec, err := f.st.AuditLog(ctx, store.AuditFilter{Kind: store.AuditSecurity, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range sec {
		t.Errorf("security event for the coordinator's own ended runner: %s %s: %s", a.Action, a.Result, a.Detail)
	}
	resp, err := op.BootInstalledOS(ctx, &curev1.BootInstalledOSRequest{NodeId: "node1"})
	if err != nil {
		t.Fatal(err)
	}
	hist, ovr := f.bmc.History(), f.bmc.Overrides()
	if last := hist[len(hist)-1]; last.Device != vbmc.BootHdd || last.Reason != "ForceRestart" || ovr[len(ovr)-1].Target != "Hdd" {
		t.Errorf("after boot-os (%s): last boot %+v, last override %+v", resp.GetMessage(), last, ovr[len(ovr)-1])
	}
	if _, err := op.BootInstalledOS(ctx, &curev1.BootInstalledOSRequest{NodeId: "nodeX"}); status.Code(err) != codes.NotFound {
		t.Errorf("boot-os of an unknown node: %v", err)
	}
}

// A node's MAC mistyped in the inventory: its run powers it on and waits
// for CURE while the node PXE-boots as a stranger. The operator fixes the
// MAC with an import (AddNodes, replace): the wait wakes at once, re-arms
// PXE and resets the node, which boots CURE, long before --wait-cure. A
// network boot the proxy DHCP judged from its older copy of the inventory
// is not shown as blaming the corrected MAC.
func TestMACFixReArmsWaitingRun(t *testing.T) {
	const waitCURE = 30 * time.Second
	f := newMistypedFixture(t, waitCURE)
	ctx := context.Background()
	runID, err := f.eng.Start(ctx, "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if r, err := f.st.GetRun(ctx, runID); err == nil && r.Phase == modes.WaitForCURE && len(r.Pipeline.CUREMACs) > 0 && f.pxeBoots() > 0 {
			break
		}
		if i > 500 {
			t.Fatal("the run never waited for CURE after a network boot")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The stranger's iPXE request follows its network boot; on a loaded
	// machine it may come well after, but within the run's wait.
	waitUntil(t, waitCURE*2/3, "the stranger's network boot shown on the waiting run's timeline", func() bool {
		return len(f.notes(runID, "its inventory MACs ("+wrongMAC+") are wrong")) > 0
	})
	f.setMACs(mac)
	// The proxy DHCP's copy of the inventory still misses the MAC.
	f.engine().UnknownMAC(ctx, mac, "proxy DHCP", nodeAddr)
	fixed := time.Now()
	n, err := f.st.GetNode(ctx, "node1")
	if err != nil {
		t.Fatal(err)
	}
	op := &server.OperatorService{Store: f.st}
	spec := &curev1.NodeSpec{Id: "node1", Sku: "qemu-nvme", Serial: "S1", Macs: []string{mac},
		Bmc:   &curev1.BMCSpec{Url: n.BMCURL, Username: "admin", Password: "password", Insecure: true},
		Psids: map[string]string{"DISK-WIPE": strings.Repeat("W", 32), "DISK-KEEP": strings.Repeat("K", 32), "DISK-BOOT": strings.Repeat("B", 32)}}
	if resp, err := op.AddNodes(ctx, &curev1.AddNodesRequest{Nodes: []*curev1.NodeSpec{spec}, Replace: true}); err != nil || len(resp.GetUpdated()) != 1 {
		t.Fatalf("nodes import: %v %v", resp, err)
	}
	r := f.waitRun(runID)
	if r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("run ended %s: %s", r.Status, r.Message)
	}
	reg := f.notes(runID, "runner registered")
	if len(reg) == 0 || reg[0].Time.Sub(fixed) > waitCURE/3 {
		t.Errorf("runner registered %v after the fix (events %d), want well within --wait-cure %s", reg, len(reg), waitCURE)
	}
	if evs := f.notes(runID, "re-armed PXE once and reset the host: the node's MACs changed in the inventory"); len(evs) != 1 {
		t.Errorf("%d re-arms for the MAC fix, want one", len(evs))
	}
	if warns := f.notes(runID, "its inventory MACs ("+mac+") are wrong"); len(warns) != 0 {
		t.Errorf("a warning blames the corrected MAC: %s", warns[0].Message)
	}
	if p := f.phases(runID)[modes.WaitForCURE]; p.Attempts != 1 {
		t.Errorf("wait_for_cure took %d attempts, want the one the fix re-armed", p.Attempts)
	}
}
