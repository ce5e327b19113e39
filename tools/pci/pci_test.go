package pci

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func write(t *testing.T, root, rel, s string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFunctions(t *testing.T) {
	root := t.TempDir()
	d := "sys/bus/pci/devices/"
	write(t, root, d+"0000:17:00.0/vendor", "0x15b3\n")
	write(t, root, d+"0000:17:00.0/device", "0x1021\n")
	write(t, root, d+"0000:17:00.0/class", "0x020000\n")
	write(t, root, d+"0000:17:01.0/vendor", "0x15b3\n")
	if err := os.Symlink("../0000:17:00.0", filepath.Join(root, d+"0000:17:01.0/physfn")); err != nil {
		t.Fatal(err)
	}
	write(t, root, d+"0000:00:03.0/vendor", "zz\n")
	write(t, root, d+"0000:00:03.0/class", "0x1000000\n") // 25 bits
	fs, err := Functions(root)
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, f := range fs {
		addrs = append(addrs, f.Addr)
	}
	if got := strings.Join(addrs, " "); got != "0000:00:03.0 0000:17:00.0 0000:17:01.0" {
		t.Fatalf("addresses %s, want sorted", got)
	}
	bad, nic, vf := fs[0], fs[1], fs[2]
	if v, err := nic.Vendor(); err != nil || v != 0x15b3 {
		t.Errorf("Vendor = %#x, %v", v, err)
	}
	if v, err := nic.Device(); err != nil || v != 0x1021 {
		t.Errorf("Device = %#x, %v", v, err)
	}
	if v, err := nic.Class(); err != nil || v != 0x020000 {
		t.Errorf("Class = %#x, %v", v, err)
	}
	if nic.VirtualFunction() || !vf.VirtualFunction() {
		t.Errorf("VirtualFunction: pf %v, vf %v", nic.VirtualFunction(), vf.VirtualFunction())
	}
	if _, err := bad.Vendor(); err == nil || !strings.Contains(err.Error(), `0000:00:03.0/vendor: "zz" is not a hex number`) {
		t.Errorf("bad vendor: %v", err)
	}
	if _, err := bad.Class(); err == nil || !strings.Contains(err.Error(), "0000:00:03.0/class") {
		t.Errorf("25-bit class: %v", err)
	}
	if _, err := vf.Device(); err == nil || !strings.Contains(err.Error(), "0000:17:01.0/device") {
		t.Errorf("missing device file: %v", err)
	}
	if fs, err := Functions(t.TempDir()); err != nil || fs != nil {
		t.Errorf("no bus: %v %v", fs, err)
	}
}

func TestParseVendorID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint16
		ok   bool
	}{
		{"0x15b3", 0x15b3, true}, {"0X15B3", 0x15b3, true}, {"15b3", 0x15b3, true}, {"0x1B36", 0x1b36, true}, {"ffff", 0xffff, true},
		{"", 0, false}, {"0x", 0, false}, {"0x10000", 0, false}, {"+15b3", 0, false}, {"-1", 0, false},
		{"0x15_b3", 0, false}, {"mellanox", 0, false}, {" 0x15b3", 0, false}, {"0x0x15b3", 0, false},
	} {
		got, err := ParseVendorID(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseVendorID(%q) = %#x, %v; want %#x ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "expected a hex PCI vendor ID") {
			t.Errorf("ParseVendorID(%q): error %v", tc.in, err)
		}
	}
}

// FuzzParseHex: ids come from sysfs and manifests; whatever parses must
// fit the width and print back to the same number.
func FuzzParseHex(f *testing.F) {
	for _, s := range []string{"0x15b3", "15B3", "", "0x", "0x10000", "-1", "0x_1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseHex(s, 16)
		if err != nil {
			return
		}
		if v > 0xffff {
			t.Fatalf("%q -> %#x exceeds 16 bits", s, v)
		}
		back, err := ParseHex(strings.ToLower(strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")), 16)
		if err != nil || back != v {
			t.Fatalf("%q -> %#x, reparse %#x %v", s, v, back, err)
		}
	})
}
