package hardware

import (
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/checks"
)

const pcieSKU = `apiVersion: cure.dev/v1
kind: SKU
metadata: {name: hgx-links}
spec:
  hardware:
    gpus: {count: 2, pcie: {gen: 5, width: 16}}
    nvswitches: {count: 1, pcie: {gen: 4}}
    nics:
      - {model: "*ConnectX-7*", pcie: {gen: 5, width: 16}}
    nvme:
      - {model: "SAMSUNG*", pcie: {gen: 4, width: 4}}
`

func linksNode() *curev1.Inventory {
	inv := &curev1.Inventory{
		Gpus:       []*curev1.Gpu{{PciAddress: "0000:1b:00.0"}, {PciAddress: "0000:43:00.0"}},
		Nvswitches: []*curev1.PciDevice{{Address: "0000:05:00.0"}},
		Nics: []*curev1.NetInterface{
			{Name: "eno1", PciAddress: "0000:02:00.0", Model: "Ethernet Controller X710"},
			{Name: "ens1f0", PciAddress: "0000:29:00.0", Model: "MT2910 Family [ConnectX-7]"},
		},
		Nvme: []*curev1.NvmeController{{Name: "nvme0", Model: "SAMSUNG MZWLO7T6HBLA", PciAddress: "0000:01:00.0"}},
	}
	link := func(addr string, s float64, w uint32, ms float64, mw uint32, port string, ps float64, pw uint32) *curev1.PcieLink {
		return &curev1.PcieLink{Address: addr, SpeedGts: s, Width: w, MaxSpeedGts: ms, MaxWidth: mw, Port: port, PortMaxSpeedGts: ps, PortMaxWidth: pw}
	}
	inv.PcieLinks = []*curev1.PcieLink{
		link("0000:1b:00.0", 32, 16, 32, 16, "0000:1a:00.0", 32, 16),
		link("0000:43:00.0", 32, 16, 32, 16, "0000:42:00.0", 32, 16),
		link("0000:05:00.0", 16, 2, 16, 2, "", 0, 0),
		link("0000:02:00.0", 8, 8, 8, 8, "", 0, 0), // the X710 is no group's: never judged
		link("0000:29:00.0", 32, 16, 32, 16, "0000:28:00.0", 32, 16),
		link("0000:01:00.0", 16, 4, 16, 4, "0000:00:01.0", 16, 4),
	}
	return inv
}

func pcieHardware(t *testing.T) *manifests.Hardware {
	t.Helper()
	s, err := manifests.ParseSKU("hgx-links.yaml", []byte(pcieSKU))
	if err != nil {
		t.Fatal(err)
	}
	return s.Spec.Hardware
}

// TestPCIeLinks: a device that negotiated below the SKU's gen or width is
// named with its negotiated link, what it is capable of and what its port
// offers; a device without link information cannot be judged (ERROR).
func TestPCIeLinks(t *testing.T) {
	h := pcieHardware(t)
	if f := failures(Compare(linksNode(), h)); len(f) != 0 {
		t.Fatalf("every link as declared: failures %q", f)
	}
	inv := linksNode()
	byAddr := map[string]*curev1.PcieLink{}
	for _, l := range inv.PcieLinks {
		byAddr[l.Address] = l
	}
	// A drive that trained at gen1 x1 in a slot that can do gen4 x4: the
	// drive or its cable. A GPU at x8 behind a port capable of x8 only: the
	// slot (bifurcation). A NIC without link attributes.
	byAddr["0000:01:00.0"].SpeedGts, byAddr["0000:01:00.0"].Width = 2.5, 1
	byAddr["0000:43:00.0"].Width, byAddr["0000:43:00.0"].PortMaxWidth = 8, 8
	byAddr["0000:05:00.0"].SpeedGts = 8
	inv.PcieLinks = inv.PcieLinks[:4] // 0000:29:00.0 (the ConnectX-7) and the drive...
	inv.PcieLinks = append(inv.PcieLinks, byAddr["0000:01:00.0"])
	vs := Compare(inv, h)
	got := failures(vs)
	want := []string{
		"gpu/1 FAIL 0000:43:00.0 link 32 GT/s x8, capable 32 GT/s x16, port 0000:42:00.0 capable 32 GT/s x8; SKU wants gen5 x16",
		"nvswitch/0 FAIL 0000:05:00.0 link 8 GT/s x2, capable 16 GT/s x2; SKU wants gen4",
		"nic/1 ERROR 0000:29:00.0 has no PCIe link in sysfs; SKU wants gen5 x16",
		"nvme/0 FAIL 0000:01:00.0 link 2.5 GT/s x1, capable 16 GT/s x4, port 0000:00:01.0 capable 16 GT/s x4; SKU wants gen4 x4",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("failures:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, v := range vs {
		if v.Component == "nvme/0" && (v.Observed != "2.5 GT/s x1" || v.Expected != "gen4 x4" || v.Status != checks.Fail) {
			t.Errorf("nvme/0 verdict %+v", v)
		}
	}
	// A faster or wider link than declared is fine: the SKU states a floor.
	inv = linksNode()
	for _, l := range inv.PcieLinks {
		if l.Address == "0000:05:00.0" {
			l.SpeedGts, l.MaxSpeedGts = 32, 32
		}
	}
	if f := failures(Compare(inv, h)); len(f) != 0 {
		t.Errorf("faster than declared: %q", f)
	}
}
