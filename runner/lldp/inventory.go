package lldp

import (
	curev1 "github.com/cure-oss/cure/api/curev1"
)

// Proto is n as the inventory carries it.
func (n Neighbour) Proto() *curev1.LLDPNeighbour {
	return &curev1.LLDPNeighbour{
		ChassisId: n.ChassisID, ChassisIdSubtype: n.ChassisIDSubtype,
		PortId: n.PortID, PortIdSubtype: n.PortIDSubtype,
		PortDescription: n.PortDescription, SystemName: n.SystemName,
		TtlS: uint32(n.TTL.Seconds()),
	}
}

// Apply records what a listen heard in inv: the window on the inventory,
// and on each port listened on its neighbour (or none). A port the
// inventory does not list (it read sysfs before the port appeared) is
// added by name.
func (r Result) Apply(inv *curev1.Inventory, window uint32) {
	if inv == nil {
		return
	}
	inv.LldpWindowMs = window
	byName := map[string]*curev1.NetInterface{}
	for _, n := range inv.GetNics() {
		byName[n.GetName()] = n
	}
	for _, p := range r.Listened {
		nic := byName[p]
		if nic == nil {
			nic = &curev1.NetInterface{Name: p, LinkUp: true}
			inv.Nics = append(inv.Nics, nic)
			byName[p] = nic
		}
		nic.LldpListened = true
		if nb, ok := r.Neighbours[p]; ok {
			nic.Lldp = nb.Proto()
		}
	}
}
