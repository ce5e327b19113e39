// Package pcitest builds sysfs fixture roots with PCI functions, for tests
// of code that walks /sys/bus/pci/devices through tools/pci.
package pcitest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Devices returns a new sysfs root holding the given PCI functions:
// address -> {vendor, class}, as sysfs writes them ("0x10de", "0x030200").
func Devices(t testing.TB, devs map[string][2]string) string {
	t.Helper()
	root := t.TempDir()
	for addr, vc := range devs {
		d := filepath.Join(root, "sys/bus/pci/devices", addr)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, v := range map[string]string{"vendor": vc[0], "class": vc[1]} {
			if err := os.WriteFile(filepath.Join(d, name), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

// Function is a PCI function for Tree: where it sits and what sysfs says
// of it. Attrs are written as given (vendor, class, current_link_speed...).
type Function struct {
	Addr     string
	Upstream string // the bridge above it; "" for a root-bus function
	Attrs    map[string]string
}

// Tree returns a new sysfs root in which each function has its real
// directory under sys/devices/pci<domain>:<bus>/ nested below its upstream
// bridge, as the kernel lays them out, and sys/bus/pci/devices/<addr> is a
// symlink to it. Upstream bridges must be listed before what sits below them.
func Tree(t testing.TB, fns []Function) string {
	t.Helper()
	root := t.TempDir()
	real := map[string]string{}
	for _, f := range fns {
		parent := filepath.Join(root, "sys/devices", "pci"+f.Addr[:7])
		if f.Upstream != "" {
			p, ok := real[f.Upstream]
			if !ok {
				t.Fatalf("pcitest: %s sits below %s, which is not listed before it", f.Addr, f.Upstream)
			}
			parent = p
		}
		dir := filepath.Join(parent, f.Addr)
		real[f.Addr] = dir
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, v := range f.Attrs {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		link := filepath.Join(root, "sys/bus/pci/devices", f.Addr)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(dir, link); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// LinkAttrs are the four link attributes as sysfs writes them: speeds as
// "16.0 GT/s PCIe", widths as lane counts.
func LinkAttrs(speed, width, maxSpeed, maxWidth string) map[string]string {
	return map[string]string{"current_link_speed": speed, "current_link_width": width,
		"max_link_speed": maxSpeed, "max_link_width": maxWidth}
}

// Adapter is a PCI function as an adapter's sysfs directory holds it, for
// AddAdapter.
type Adapter struct {
	Addr           string // 0000:17:00.0
	Vendor, Device uint16
	Class          uint32
	VPD            []byte // the vpd file; nil: none
	PhysFn         string // the physical function of a virtual one; "": not a VF
}

// AddAdapter writes one function under root/sys/bus/pci/devices, as a
// directory (not a link, unlike Tree): vendor, device, class, vpd, physfn.
func AddAdapter(t testing.TB, root string, a Adapter) {
	t.Helper()
	d := filepath.Join(root, "sys/bus/pci/devices", a.Addr)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"vendor": fmt.Appendf(nil, "0x%04x\n", a.Vendor), "device": fmt.Appendf(nil, "0x%04x\n", a.Device), "class": fmt.Appendf(nil, "0x%06x\n", a.Class),
	}
	if a.VPD != nil {
		files["vpd"] = a.VPD
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(d, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if a.PhysFn != "" {
		if err := os.Symlink("../"+a.PhysFn, filepath.Join(d, "physfn")); err != nil {
			t.Fatal(err)
		}
	}
}
