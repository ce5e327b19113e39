// Package pci is the one walk of the PCI bus in sysfs
// (root/sys/bus/pci/devices) and the one parser of PCI ids written in hex
// ("0x15b3", "15B3"), whether they come from sysfs or from a manifest. It
// knows no vendors: callers filter by vendor and class.
package pci

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Function is one PCI function as sysfs lists it. Its attributes are read
// on demand, so a caller that filters on the vendor first never touches
// the other files of devices it does not care about.
type Function struct {
	Addr string // 0000:17:00.0
	Dir  string // root/sys/bus/pci/devices/<Addr>
}

// Functions lists root/sys/bus/pci/devices sorted by address. A tree
// without a PCI bus (a fixture, a container) has none: that is not an error.
func Functions(root string) ([]Function, error) {
	dir := filepath.Join(root, "sys/bus/pci/devices")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list PCI devices: %w", err)
	}
	out := make([]Function, 0, len(ents))
	for _, e := range ents {
		out = append(out, Function{Addr: e.Name(), Dir: filepath.Join(dir, e.Name())})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out, nil
}

// Vendor reads the vendor file.
func (f Function) Vendor() (uint16, error) {
	v, err := f.hex("vendor", 16)
	return uint16(v), err
}

// Device reads the device file (the device id).
func (f Function) Device() (uint16, error) {
	v, err := f.hex("device", 16)
	return uint16(v), err
}

// Class reads the class file: 0xCCSSPP (base class, subclass, prog-if).
func (f Function) Class() (uint32, error) {
	v, err := f.hex("class", 24)
	return uint32(v), err
}

// VirtualFunction says whether the function is an SR-IOV virtual function
// (it has a physfn link); those have no flash of their own.
func (f Function) VirtualFunction() bool {
	_, err := os.Lstat(filepath.Join(f.Dir, "physfn"))
	return err == nil
}

// ReadFile reads another attribute of the function (vpd, modalias, ...).
func (f Function) ReadFile(name string) ([]byte, error) {
	return os.ReadFile(filepath.Join(f.Dir, name))
}

func (f Function) hex(name string, bits int) (uint64, error) {
	p := filepath.Join(f.Dir, name)
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", p, err)
	}
	s := strings.TrimSpace(string(b))
	v, err := ParseHex(s, bits)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a hex number", p, s)
	}
	return v, nil
}

// ParseHex parses a hex number of at most bits bits, with or without a
// 0x prefix, in either case. Empty input, a sign, or anything else is an
// error.
func ParseHex(s string, bits int) (uint64, error) {
	t := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	if t == "" || t[0] == '+' || t[0] == '-' || strings.Contains(t, "_") {
		return 0, fmt.Errorf("%q is not a hex number", s)
	}
	v, err := strconv.ParseUint(t, 16, bits)
	if err != nil {
		return 0, fmt.Errorf("%q is not a hex number of at most %d bits", s, bits)
	}
	return v, nil
}

// ParseVendorID parses a 16-bit PCI vendor id ("0x15b3", "15B3").
func ParseVendorID(s string) (uint16, error) {
	v, err := ParseHex(s, 16)
	if err != nil {
		return 0, fmt.Errorf("expected a hex PCI vendor ID like 0x15b3, found %q", s)
	}
	return uint16(v), nil
}
