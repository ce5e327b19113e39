package inventory

import (
	"errors"
	"fmt"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/tools/pci"
)

// pcieLinks lists the link of every PCI function that has one, with the
// capability of the port above it: a drive that trained at x1 behind a
// root port capable of x1 is a slot (BIOS bifurcation, riser) problem, one
// behind an x16 port a device or cable problem. ids come from the ghw list, else sysfs.
func pcieLinks(root string, devs []pciDevice) ([]*curev1.PcieLink, error) {
	fns, err := pci.Functions(root)
	if err != nil {
		return nil, err
	}
	ids := map[string]pciDevice{}
	for _, d := range devs {
		ids[d.Address] = d
	}
	links := map[string]pci.Link{}
	var errs []error
	var out []*curev1.PcieLink
	for _, f := range fns {
		l, err := f.Link()
		if errors.Is(err, pci.ErrNoLink) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		links[f.Addr] = l
		d, ok := ids[f.Addr]
		if !ok {
			// pciDevices leaves out functions whose vendor it cannot
			// read; read what there is.
			v, _ := f.Vendor()
			dv, _ := f.Device()
			c, _ := f.Class()
			d = pciDevice{Vendor: uint32(v), Device: uint32(dv), Class: c}
		}
		out = append(out, &curev1.PcieLink{Address: f.Addr, VendorId: d.Vendor, DeviceId: d.Device, Class: d.Class,
			SpeedGts: l.SpeedGTs, Width: uint32(l.Width), MaxSpeedGts: l.MaxSpeedGTs, MaxWidth: uint32(l.MaxWidth),
			Port: f.Upstream()})
	}
	for _, l := range out {
		if p, ok := links[l.Port]; ok {
			l.PortMaxSpeedGts, l.PortMaxWidth = p.MaxSpeedGTs, uint32(p.MaxWidth)
		}
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("pcie links: %w", errors.Join(errs...))
	}
	return out, nil
}
