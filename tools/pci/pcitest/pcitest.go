// Package pcitest builds sysfs fixture roots with PCI functions, for tests
// of code that walks /sys/bus/pci/devices through tools/pci.
package pcitest

import (
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
