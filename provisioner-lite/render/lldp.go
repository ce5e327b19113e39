package render

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// inOwnSection are the NIC fields the neighbours table shows instead of
// the NIC table (a nested message would read as one long cell there).
var inOwnSection = map[protoreflect.FullName]bool{
	"cure.v1.NetInterface.lldp":          true,
	"cure.v1.NetInterface.lldp_listened": true,
}

// neighbourSection is each port's LLDP neighbour, one row per port the
// runner listened on: the switch's name, chassis and port, or "none seen"
// within the window. Facts: the cabling verdicts judge them.
func neighbourSection(inv *curev1.Inventory) (InventorySection, bool) {
	s := InventorySection{Columns: []string{"port", "switch", "chassis", "switch port", "port description"}}
	for _, n := range inv.GetNics() {
		if !n.GetLldpListened() && n.GetLldp() == nil {
			continue
		}
		nb := n.GetLldp()
		if nb == nil {
			s.Rows = append(s.Rows, []string{textsafe.Line(n.GetName()), "none seen", "", "", ""})
			continue
		}
		s.Rows = append(s.Rows, []string{textsafe.Line(n.GetName()), textsafe.Line(nb.GetSystemName()), textsafe.Line(nb.GetChassisId()),
			textsafe.Line(nb.GetPortId()), textsafe.Line(nb.GetPortDescription())})
	}
	if len(s.Rows) == 0 {
		return s, false
	}
	window := time.Duration(inv.GetLldpWindowMs()) * time.Millisecond
	s.Title = fmt.Sprintf("lldp neighbours (%d ports, listened %s)", len(s.Rows), window.Round(time.Millisecond))
	return s, true
}

// printCabling writes a node's cabling map: port -> switch and port.
func printCabling(w io.Writer, m map[string]*curev1.PlannedCable) {
	if len(m) == 0 {
		return
	}
	parts := make([]string, 0, len(m))
	for _, port := range slices.Sorted(maps.Keys(m)) {
		c := m[port]
		sw := c.GetSwitchName()
		switch {
		case sw == "":
			sw = "chassis " + c.GetChassisId()
		case c.GetChassisId() != "":
			sw += " (chassis " + c.GetChassisId() + ")"
		}
		parts = append(parts, port+" -> "+sw+" port "+c.GetPort())
	}
	fmt.Fprintf(w, "  cabling %s\n", textsafe.Line(strings.Join(parts, ", ")))
}
