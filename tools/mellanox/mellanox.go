// Package mellanox finds the Mellanox/NVIDIA (PCI vendor 0x15b3) network
// adapters whose firmware mstflint burns: PCI function 0 of each physical
// Ethernet or InfiniBand function, with its adapter family (from the
// device id) and its VPD name and part number. It reads sysfs through
// tools/pci and knows nothing of manifests.
package mellanox

import (
	"fmt"
	"strings"

	"github.com/cure-oss/cure/tools/pci"
	"github.com/cure-oss/cure/tools/pci/vpd"
)

// VendorID is the PCI vendor id of Mellanox (NVIDIA networking); every
// BlueField DPU carries it too.
const VendorID = 0x15b3

// NIC is one adapter: PCI function 0 of a physical function (mstflint
// burns per device, not per port, and virtual functions have no flash).
type NIC struct {
	PCI      string // 0000:17:00.0
	DeviceID uint16
	Class    uint32
	// Family is the adapter family from the PCI device id ("ConnectX-7"),
	// "" when the id is not in the table.
	Family string
	// PartNumber and Name come from the PCI VPD (PN keyword and the
	// identifier string) when the kernel exposes it.
	PartNumber, Name string
}

func (d NIC) String() string {
	s := fmt.Sprintf("%s %#04x", d.PCI, d.DeviceID)
	if d.Family != "" {
		s += " " + d.Family
	}
	if d.PartNumber != "" {
		s += " " + d.PartNumber
	}
	return s
}

// families maps PCI device ids (pci.ids) of physical functions to adapter
// families.
var families = map[uint16]string{
	0x1013: "ConnectX-4", 0x1015: "ConnectX-4 Lx", 0x1017: "ConnectX-5", 0x1019: "ConnectX-5 Ex",
	0x101b: "ConnectX-6", 0x101d: "ConnectX-6 Dx", 0x101f: "ConnectX-6 Lx", 0x1021: "ConnectX-7",
	0x1023: "ConnectX-8", 0xa2d2: "BlueField", 0xa2d6: "BlueField-2", 0xa2dc: "BlueField-3",
}

// FindNICs lists the Mellanox Ethernet (class 0x0200xx) and InfiniBand
// (0x0207xx) physical functions .0 under root/sys/bus/pci/devices, sorted
// by address. A device whose sysfs files cannot be read is an error:
// skipping it would hide an adapter the manifest pins.
func FindNICs(root string) ([]NIC, error) {
	fns, err := pci.Functions(root)
	if err != nil {
		return nil, err
	}
	var out []NIC
	for _, f := range fns {
		if !strings.HasSuffix(f.Addr, ".0") {
			continue
		}
		vendor, err := f.Vendor()
		if err != nil {
			return nil, err
		}
		if vendor != VendorID {
			continue
		}
		class, err := f.Class()
		if err != nil {
			return nil, err
		}
		if c := class >> 8; c != 0x0200 && c != 0x0207 {
			continue
		}
		if f.VirtualFunction() {
			continue
		}
		dev, err := f.Device()
		if err != nil {
			return nil, err
		}
		d := NIC{PCI: f.Addr, DeviceID: dev, Class: class, Family: families[dev]}
		// VPD is optional: old kernels and some firmware do not expose it.
		if b, err := f.ReadFile("vpd"); err == nil {
			v := vpd.Parse(b)
			d.Name, d.PartNumber = v.Name, v.PartNumber
		}
		out = append(out, d)
	}
	return out, nil
}
