package pci_test

import (
	"errors"
	"maps"
	"testing"

	"github.com/cure-oss/cure/tools/pci"
	"github.com/cure-oss/cure/tools/pci/pcitest"
)

func attrs(base, link map[string]string) map[string]string {
	out := maps.Clone(base)
	maps.Copy(out, link)
	return out
}

// The layout QEMU 7.2 gave an NVMe drive behind a pcie-root-port set to
// x-speed=2_5,x-width=1, beside one behind a default root port (recorded
// from a Debian 6.1 guest's sysfs).
func qemuTree(t *testing.T) string {
	nvme := map[string]string{"vendor": "0x1b36", "device": "0x0010", "class": "0x010802"}
	port := map[string]string{"vendor": "0x1b36", "device": "0x000c", "class": "0x060400"}
	return pcitest.Tree(t, []pcitest.Function{
		{Addr: "0000:00:00.0", Attrs: map[string]string{"vendor": "0x8086", "class": "0x060000"}},
		{Addr: "0000:00:01.0", Attrs: attrs(port, pcitest.LinkAttrs("2.5 GT/s PCIe", "1", "2.5 GT/s PCIe", "1"))},
		{Addr: "0000:00:02.0", Attrs: attrs(port, pcitest.LinkAttrs("2.5 GT/s PCIe", "1", "16.0 GT/s PCIe", "32"))},
		{Addr: "0000:01:00.0", Upstream: "0000:00:01.0", Attrs: attrs(nvme, pcitest.LinkAttrs("2.5 GT/s PCIe", "1", "2.5 GT/s PCIe", "1"))},
		{Addr: "0000:02:00.0", Upstream: "0000:00:02.0", Attrs: attrs(nvme, pcitest.LinkAttrs("2.5 GT/s PCIe", "1", "2.5 GT/s PCIe", "1"))},
		{Addr: "0000:00:1f.2", Attrs: map[string]string{"vendor": "0x8086", "class": "0x010601",
			"current_link_speed": "Unknown", "max_link_speed": "Unknown", "current_link_width": "0", "max_link_width": "0"}},
	})
}

func TestLink(t *testing.T) {
	root := qemuTree(t)
	for _, tc := range []struct {
		addr, up string
		want     pci.Link
		err      error
	}{
		{"0000:00:00.0", "", pci.Link{}, pci.ErrNoLink},
		{"0000:00:01.0", "", pci.Link{SpeedGTs: 2.5, Width: 1, MaxSpeedGTs: 2.5, MaxWidth: 1}, nil},
		{"0000:00:02.0", "", pci.Link{SpeedGTs: 2.5, Width: 1, MaxSpeedGTs: 16, MaxWidth: 32}, nil},
		{"0000:01:00.0", "0000:00:01.0", pci.Link{SpeedGTs: 2.5, Width: 1, MaxSpeedGTs: 2.5, MaxWidth: 1}, nil},
		{"0000:02:00.0", "0000:00:02.0", pci.Link{SpeedGTs: 2.5, Width: 1, MaxSpeedGTs: 2.5, MaxWidth: 1}, nil},
		{"0000:00:1f.2", "", pci.Link{}, pci.ErrNoLink},
	} {
		f := pci.ByAddr(root, tc.addr)
		l, err := f.Link()
		if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
			t.Errorf("%s: err %v, want %v", tc.addr, err, tc.err)
		}
		if l != tc.want {
			t.Errorf("%s: link %+v, want %+v", tc.addr, l, tc.want)
		}
		if up := f.Upstream(); up != tc.up {
			t.Errorf("%s: upstream %q, want %q", tc.addr, up, tc.up)
		}
	}
	port, _ := pci.ByAddr(root, "0000:00:02.0").Link()
	if !port.Degraded() || port.String() != "2.5 GT/s x1 (capable 16 GT/s x32)" {
		t.Errorf("default root port: degraded %t, %q", port.Degraded(), port)
	}
	nvme, _ := pci.ByAddr(root, "0000:01:00.0").Link()
	if nvme.Degraded() || nvme.String() != "2.5 GT/s x1" {
		t.Errorf("nvme: degraded %t, %q", nvme.Degraded(), nvme)
	}
}

func TestLinkUnreadable(t *testing.T) {
	root := pcitest.Tree(t, []pcitest.Function{{Addr: "0000:3b:00.0",
		Attrs: pcitest.LinkAttrs("16.0 GT/s PCIe", "wide", "16.0 GT/s PCIe", "16")}})
	if _, err := pci.ByAddr(root, "0000:3b:00.0").Link(); err == nil || errors.Is(err, pci.ErrNoLink) {
		t.Fatalf("a garbled width: err %v, want a parse error naming the file", err)
	}
}

func TestParseLinkSpeed(t *testing.T) {
	for in, want := range map[string]float64{
		"2.5 GT/s PCIe": 2.5, "5.0 GT/s PCIe": 5, "8.0 GT/s PCIe": 8, "16.0 GT/s PCIe": 16,
		"32.0 GT/s PCIe": 32, "64.0 GT/s PCIe": 64, "8 GT/s": 8, "2.5 GT/s": 2.5, "Unknown": 0,
	} {
		got, err := pci.ParseLinkSpeed(in)
		if err != nil || got != want {
			t.Errorf("ParseLinkSpeed(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"66 MHz PCI-X", "fast", "-8 GT/s", "NaN GT/s", "1e3 GT/s", "16 GT/s PCIe extra", "0x10 GT/s"} {
		if v, err := pci.ParseLinkSpeed(in); err == nil {
			t.Errorf("ParseLinkSpeed(%q) = %v, want an error", in, v)
		}
	}
	for g := 1; g <= 6; g++ {
		if pci.Gen(pci.GenSpeed(g)) != g {
			t.Errorf("gen %d does not round-trip", g)
		}
	}
	if pci.Gen(3.3) != 0 || pci.GenSpeed(7) != 0 {
		t.Error("a rate or generation outside the spec must map to 0")
	}
}

// FuzzParseLink: link attributes come from the device's config space
// through sysfs; whatever parses is a rate and a width in range.
func FuzzParseLink(f *testing.F) {
	for _, s := range []string{"16.0 GT/s PCIe", "8 GT/s", "Unknown", "16", "x8", "", "2.5 GT/s PCIe\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := pci.ParseLinkSpeed(s); err == nil && (v < 0 || v > 1024 || v != v) {
			t.Fatalf("ParseLinkSpeed(%q) = %v", s, v)
		}
		if w, err := pci.ParseLinkWidth(s); err == nil && (w < 0 || w > 32) {
			t.Fatalf("ParseLinkWidth(%q) = %d", s, w)
		}
	})
}
