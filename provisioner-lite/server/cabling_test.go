package server_test

import (
	"context"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// TestHelloCablingJudged: the coordinator judges a boot's LLDP facts
// against the node's cabling map on its first Hello and keeps a verdict
// per mapped port with the run; a node without a map gets none.
func TestHelloCablingJudged(t *testing.T) {
	h := newHostile(t)
	ctx := context.Background()
	n, err := h.st.GetNode(ctx, nodeA.id)
	if err != nil {
		t.Fatal(err)
	}
	n.Cabling = map[string]store.Cable{"eth0": {Switch: "leaf-r12-a", Port: "Ethernet13"}, "eth1": {Switch: "leaf-r12-b", Port: "Ethernet13"}}
	if err := h.st.UpsertNode(ctx, n); err != nil {
		t.Fatal(err)
	}
	inv := &curev1.Inventory{LldpWindowMs: 1200, Nics: []*curev1.NetInterface{
		{Name: "eth0", LldpListened: true, Lldp: &curev1.LLDPNeighbour{SystemName: "leaf-r12-a", PortId: "Ethernet12"}},
		{Name: "eth1", LldpListened: true},
	}}
	for _, node := range []testNode{nodeA, nodeB} {
		s, cancel := h.session(helloOpts{token: h.fetchToken(node.mac), boot: "b1", node: node, inv: inv})
		if err := send(s, logEvent(1, "", "hello")); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	rep, err := server.BuildReport(ctx, h.st, h.run(nodeA.run))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*curev1.Verdict{}
	for _, v := range rep.GetVerdicts() {
		if v.GetCheck() == "cabling" {
			got[v.GetComponent()] = v
		}
	}
	if v := got["nic/eth0"]; v.GetStatus() != curev1.VerdictStatus_FAIL || v.GetExpected() != "leaf-r12-a port Ethernet13" || v.GetObserved() != "leaf-r12-a port Ethernet12" {
		t.Errorf("nic/eth0: %v", v)
	}
	if v := got["nic/eth1"]; v.GetStatus() != curev1.VerdictStatus_FAIL || v.GetObserved() != "none seen" {
		t.Errorf("nic/eth1: %v", v)
	}
	repB, err := server.BuildReport(ctx, h.st, h.run(nodeB.run))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range repB.GetVerdicts() {
		if v.GetCheck() == "cabling" {
			t.Errorf("node B has no cabling map, yet: %v", v)
		}
	}
}
