package cabling

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/runner/lldp"
	"github.com/cure-oss/cure/runner/lldp/lldptest"
	"github.com/cure-oss/cure/tools/testenv"
)

func heard(sys, chassis, port, desc string) *curev1.LLDPNeighbour {
	return &curev1.LLDPNeighbour{SystemName: sys, ChassisId: chassis, PortId: port, PortDescription: desc}
}

func TestJudgeTable(t *testing.T) {
	inv := &curev1.Inventory{LldpWindowMs: 35000, Nics: []*curev1.NetInterface{
		{Name: "enp1s0", LldpListened: true, Lldp: heard("leaf-r12-a.dc1", "0c:42:a1:00:00:01", "Ethernet12", "")},
		{Name: "enp2s0", LldpListened: true, Lldp: heard("leaf-r12-b", "0c:42:a1:00:00:02", "Ethernet3", "")},
		{Name: "enp3s0", LldpListened: true},
		{Name: "enp4s0"},
		{Name: "enp5s0", LldpListened: true, Lldp: heard("", "0C:42:A1:00:00:05", "00:11:22:33:44:55", "swp7")},
		{Name: "enp6s0", LldpListened: true, Lldp: heard("leaf-r12-a", "0c:42:a1:00:00:01", "Ethernet7", "")}, // not in the map
	}}
	plan := map[string]store.Cable{
		"enp1s0": {Switch: "LEAF-R12-A", Port: "ethernet12"},                              // match (domain, any case)
		"enp2s0": {Switch: "leaf-r12-b", Port: "Ethernet4"},                               // mismatch: port
		"enp3s0": {Switch: "leaf-r12-c", Port: "Ethernet1"},                               // listened, none heard
		"enp4s0": {Switch: "leaf-r12-c", Port: "Ethernet2"},                               // no link
		"enp5s0": {Chassis: "0c:42:a1:00:00:05", Port: "swp7"},                            // chassis + description
		"enp9s0": {Switch: "leaf-r12-d", Port: "Ethernet9"},                               // no such port
		"enp7s0": {Switch: "leaf-r12-a", Chassis: "0c:42:a1:00:00:99", Port: "Ethernet1"}, // (absent: none seen)
	}
	want := map[string]struct {
		status          curev1.VerdictStatus
		observed, inMsg string
	}{
		"nic/enp1s0": {curev1.VerdictStatus_PASS, "leaf-r12-a.dc1 (chassis 0c:42:a1:00:00:01) port Ethernet12", "cabled as planned"},
		"nic/enp2s0": {curev1.VerdictStatus_FAIL, "leaf-r12-b (chassis 0c:42:a1:00:00:02) port Ethernet3", "port enp2s0: expected leaf-r12-b port Ethernet4, seen leaf-r12-b (chassis 0c:42:a1:00:00:02) port Ethernet3"},
		"nic/enp3s0": {curev1.VerdictStatus_FAIL, NoneSeen, "port enp3s0: none seen within 35s (the cabling map expects leaf-r12-c port Ethernet1)"},
		"nic/enp4s0": {curev1.VerdictStatus_FAIL, NoneSeen, "none seen: no link"},
		"nic/enp5s0": {curev1.VerdictStatus_PASS, "chassis 0C:42:A1:00:00:05 port 00:11:22:33:44:55 (swp7)", ""},
		"nic/enp9s0": {curev1.VerdictStatus_FAIL, NoneSeen, "no such port"},
		"nic/enp7s0": {curev1.VerdictStatus_FAIL, NoneSeen, "none seen"},
	}
	vs := Judge(plan, inv)
	if len(vs) != len(want) {
		t.Fatalf("%d verdicts, want %d (one per mapped port, none for enp6s0): %v", len(vs), len(want), vs)
	}
	for i, v := range vs {
		if i > 0 && vs[i-1].GetComponent() >= v.GetComponent() {
			t.Errorf("verdicts not in port order: %s after %s", v.GetComponent(), vs[i-1].GetComponent())
		}
		w, ok := want[v.GetComponent()]
		if !ok || v.GetCheck() != Check || v.GetStatus() != w.status || v.GetObserved() != w.observed || !strings.Contains(v.GetMessage(), w.inMsg) {
			t.Errorf("%s %s %s observed %q: %q\nwant %s observed %q, message with %q", v.GetComponent(), v.GetCheck(), v.GetStatus(), v.GetObserved(), v.GetMessage(), w.status, w.observed, w.inMsg)
		}
	}

	// No map: no verdict, whatever the ports heard.
	if vs := Judge(nil, inv); vs != nil {
		t.Errorf("no map: %v, want no verdict", vs)
	}
	// A runner that did not listen: ERROR, not a cabling fault.
	vs = Judge(plan, &curev1.Inventory{Nics: []*curev1.NetInterface{{Name: "enp1s0"}}})
	if len(vs) != len(plan) || vs[0].GetStatus() != curev1.VerdictStatus_ERROR || !strings.Contains(vs[0].GetMessage(), "did not listen") {
		t.Errorf("not listened: %v", vs)
	}
	// A switch's hostile strings are bounded, one line.
	evil := &curev1.Inventory{LldpWindowMs: 1, Nics: []*curev1.NetInterface{{Name: "enp1s0", LldpListened: true,
		Lldp: heard(strings.Repeat("x", 5000)+"\n", "c", "p", "")}}}
	if v := Judge(map[string]store.Cable{"enp1s0": {Switch: "a", Port: "p"}}, evil)[0]; len(v.GetObserved()) > 512 || strings.Contains(v.GetObserved(), "\n") {
		t.Errorf("observed not bounded: %d bytes", len(v.GetObserved()))
	}
}

// TestCablingMismatchFails: a Go sender in a network namespace announces
// switch leaf-r12-a port Ethernet12 at the node's port; the runner's real
// listener (AF_PACKET, runner/lldp) hears it into the inventory, and the
// coordinator's judge, whose cabling map says Ethernet13, fails the port
// naming the expected and the seen neighbour. The same map with the right
// port passes.
func TestCablingMismatchFails(t *testing.T) {
	testenv.RequireRoot(t, "the test builds a network namespace and opens AF_PACKET sockets")
	site := lldptest.NewSite(t)
	site.Announce(t, lldptest.Switch{ChassisMAC: net.HardwareAddr{0x0c, 0x42, 0xa1, 0, 0, 1}, Port: "Ethernet12", SystemName: "leaf-r12-a"}, 100*time.Millisecond)
	res := lldp.Listen(context.Background(), lldp.Options{Window: 5 * time.Second,
		Ports: func() ([]string, error) { return []string{site.NodePort}, nil },
		Open: func(p string) (c lldp.Conn, err error) {
			err = site.In(func() error { c, err = lldp.OpenPacket(p); return err })
			return c, err
		}})
	inv := &curev1.Inventory{Nics: []*curev1.NetInterface{{Name: site.NodePort, LinkUp: true}}}
	res.Apply(inv, uint32(res.Waited.Milliseconds()))

	vs := Judge(map[string]store.Cable{site.NodePort: {Switch: "leaf-r12-a", Port: "Ethernet13"}}, inv)
	if len(vs) != 1 {
		t.Fatalf("verdicts %v, want one", vs)
	}
	v := vs[0]
	wantMsg := "port eth0: expected leaf-r12-a port Ethernet13, seen leaf-r12-a (chassis 0c:42:a1:00:00:01) port Ethernet12"
	if v.GetComponent() != "nic/"+site.NodePort || v.GetStatus() != curev1.VerdictStatus_FAIL || v.GetMessage() != wantMsg {
		t.Errorf("verdict %s %s: %q\nwant nic/%s FAIL: %q", v.GetComponent(), v.GetStatus(), v.GetMessage(), site.NodePort, wantMsg)
	}
	if vs := Judge(map[string]store.Cable{site.NodePort: {Switch: "leaf-r12-a", Port: "Ethernet12"}}, inv); vs[0].GetStatus() != curev1.VerdictStatus_PASS {
		t.Errorf("the right map: %v", vs[0])
	}
	// A mapped port that hears nothing fails with "none seen".
	vs = Judge(map[string]store.Cable{site.NodePort: {Switch: "leaf-r12-a", Port: "Ethernet12"}, "eth1": {Switch: "leaf-r12-b", Port: "Ethernet12"}}, inv)
	if vs[1].GetComponent() != "nic/eth1" || vs[1].GetStatus() != curev1.VerdictStatus_FAIL || vs[1].GetObserved() != NoneSeen {
		t.Errorf("unheard port: %v", vs[1])
	}
}
