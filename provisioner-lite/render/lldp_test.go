package render

import (
	"bytes"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// TestReportShowsLLDPNeighbours: the text and HTML reports show each
// listened port's neighbour (switch, chassis, switch port) or "none seen",
// in their own table rather than as a cell of the NIC table.
func TestReportShowsLLDPNeighbours(t *testing.T) {
	r, tl := sampleReport()
	r.Inventory = sampleInventory()
	inv := r.Inventory.Inventory
	inv.LldpWindowMs = 1200
	inv.Nics[0].LldpListened = true
	inv.Nics[0].Lldp = &curev1.LLDPNeighbour{SystemName: "leaf-r12-a", ChassisId: "0c:42:a1:00:00:01", PortId: "Ethernet12", PortDescription: "to gpu-1"}
	inv.Nics[1].LldpListened = true

	var b bytes.Buffer
	PrintReport(&b, r)
	out := b.String()
	for _, want := range []string{"lldp neighbours (2 ports, listened 1.2s)", "leaf-r12-a", "0c:42:a1:00:00:01", "Ethernet12", "to gpu-1", "none seen"} {
		if !strings.Contains(out, want) {
			t.Errorf("text report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "system name=") || strings.Contains(out, "LLDP LISTENED") {
		t.Errorf("the NIC table shows the neighbour as a cell:\n%s", out)
	}
	b.Reset()
	if err := writeHTML(&b, r, tl, time.UnixMilli(t0)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"lldp neighbours (2 ports, listened 1.2s)", "leaf-r12-a", "Ethernet12", "none seen"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("HTML report lacks %q", want)
		}
	}
	// No port listened on: no table.
	for _, s := range InventorySections(sampleInventory().GetInventory()) {
		if strings.HasPrefix(s.Title, "lldp neighbours") {
			t.Errorf("a table of neighbours without any: %+v", s)
		}
	}
}

// TestPrintNodeShowsCabling: nodes show lists the node's cabling map.
func TestPrintNodeShowsCabling(t *testing.T) {
	var b bytes.Buffer
	PrintNode(&b, &curev1.NodeDetail{NodeId: "gpu-1", Cabling: map[string]*curev1.PlannedCable{
		"enp2s0": {ChassisId: "0c:42:a1:00:00:02", Port: "swp7"},
		"enp1s0": {SwitchName: "leaf-r12-a", Port: "Ethernet12"},
	}})
	if want := "  cabling enp1s0 -> leaf-r12-a port Ethernet12, enp2s0 -> chassis 0c:42:a1:00:00:02 port swp7\n"; !strings.Contains(b.String(), want) {
		t.Errorf("nodes show:\n%s\nlacks %q", b.String(), want)
	}
	b.Reset()
	PrintNode(&b, &curev1.NodeDetail{NodeId: "gpu-2"})
	if strings.Contains(b.String(), "cabling") {
		t.Errorf("a node without a map shows one:\n%s", b.String())
	}
}
