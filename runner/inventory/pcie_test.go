package inventory

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/cure-oss/cure/runner/inventory/invtest"
)

// TestPCIeLinks: every function with link attributes is listed, negotiated
// against capable, with the port above it and what that port can do.
func TestPCIeLinks(t *testing.T) {
	r := fixtureRoot(t)
	port := filepath.Join(r, "sys/devices/pci0000:00/0000:00:01.0")
	drive := filepath.Join(port, "0000:01:00.0")
	for dir, v := range map[string][4]string{
		port:  {"2.5 GT/s PCIe", "1", "2.5 GT/s PCIe", "1"},
		drive: {"2.5 GT/s PCIe", "1", "16.0 GT/s PCIe", "4"},
		filepath.Join(r, "sys/bus/pci/devices/0000:1b:00.0"): {"32.0 GT/s PCIe", "16", "32.0 GT/s PCIe", "16"},
	} {
		for i, name := range []string{"current_link_speed", "current_link_width", "max_link_speed", "max_link_width"} {
			invtest.Write(t, "/", filepath.Join(dir, name), v[i]+"\n")
		}
	}
	invtest.Write(t, "/", filepath.Join(port, "class"), "0x060400\n")
	invtest.Write(t, "/", filepath.Join(drive, "vendor"), "0x144d\n")
	invtest.Write(t, "/", filepath.Join(drive, "class"), "0x010802\n")
	invtest.Write(t, "/", filepath.Join(drive, "modalias"), "pci:v0000144Dd0000A80Asv0000144Dsd0000A801bc01sc08i02\n")
	invtest.Symlink(t, port, filepath.Join(r, "sys/bus/pci/devices/0000:00:01.0"))
	invtest.Symlink(t, drive, filepath.Join(r, "sys/bus/pci/devices/0000:01:00.0"))

	inv, _, err := Collect(context.Background(), Options{Root: r, Log: quiet(), NoIdentify: true,
		Links: func() ([]Link, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, l := range inv.PcieLinks {
		got[l.Address] = fmtLink(l.SpeedGts, l.Width) + " of " + fmtLink(l.MaxSpeedGts, l.MaxWidth) + " port " + l.Port + " " + fmtLink(l.PortMaxSpeedGts, l.PortMaxWidth)
	}
	want := map[string]string{
		"0000:00:01.0": "2.5x1 of 2.5x1 port  0x0",
		"0000:01:00.0": "2.5x1 of 16x4 port 0000:00:01.0 2.5x1",
		"0000:1b:00.0": "32x16 of 32x16 port  0x0",
	}
	if len(got) != len(want) {
		t.Errorf("links %v, want %v", got, want)
	}
	for a, w := range want {
		if got[a] != w {
			t.Errorf("%s: %q, want %q", a, got[a], w)
		}
	}
	for _, l := range inv.PcieLinks {
		if l.Address == "0000:01:00.0" && (l.VendorId != 0x144d || l.Class != 0x010802) {
			t.Errorf("drive ids %x %x", l.VendorId, l.Class)
		}
	}
}

func fmtLink(s float64, w uint32) string { return trimFloat(s) + "x" + itoa(w) }

func trimFloat(f float64) string { return fmtG(f) }

func fmtG(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func itoa(w uint32) string { return strconv.Itoa(int(w)) }
