// Package memmap maps a physical address to the DIMM slot that holds it,
// from the firmware's SMBIOS tables: memory arrays (type 16), their
// devices (type 17: locator, serial), the address ranges of each array
// (type 19) and, where the firmware writes them, of each device (type 20,
// with interleaving). A machine check's address then names a slot.
package memmap

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/u-root/u-root/pkg/smbios"
)

// DIMM is a populated memory device.
type DIMM struct {
	Handle, Array      uint16
	Locator, Bank      string
	Serial, PartNumber string
	SizeBytes          uint64
}

// Range is an address range [Start, End] in bytes of an array (type 19)
// or a device (type 20).
type Range struct {
	Start, End uint64
	Handle     uint16 // the array's (type 19) or the device's (type 20)
	// Interleave position and data depth of a device range (type 20); a
	// depth above 1 means the range is spread over several devices.
	Position, Depth uint8
}

// Map is what the tables say.
type Map struct {
	DIMMs   []DIMM
	Arrays  []Range // type 19
	Devices []Range // type 20
}

// Read parses root/sys/firmware/dmi/tables.
func Read(root string) (*Map, error) {
	dir := filepath.Join(root, "sys/firmware/dmi/tables")
	entry, err := os.ReadFile(filepath.Join(dir, "smbios_entry_point"))
	if err != nil {
		return nil, fmt.Errorf("memory map: smbios entry point: %w", err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "DMI"))
	if err != nil {
		return nil, fmt.Errorf("memory map: smbios tables: %w", err)
	}
	info, err := smbios.ParseInfo(entry, data)
	if err != nil {
		return nil, fmt.Errorf("memory map: parsing smbios tables in %s: %w", dir, err)
	}
	return FromInfo(info)
}

// FromInfo builds the map from parsed tables. Ranges whose structure is
// too short are skipped; a device that does not parse is an error.
func FromInfo(info *smbios.Info) (*Map, error) {
	m := &Map{}
	mds, err := info.GetMemoryDevices()
	if err != nil {
		return nil, fmt.Errorf("memory map: smbios type 17: %w", err)
	}
	for _, md := range mds {
		size := md.GetSizeBytes()
		if size == 0 {
			continue
		}
		m.DIMMs = append(m.DIMMs, DIMM{Handle: md.Handle, Array: md.PhysicalMemoryArrayHandle, Locator: clean(md.DeviceLocator),
			Bank: clean(md.BankLocator), Serial: clean(md.SerialNumber), PartNumber: clean(md.PartNumber), SizeBytes: size})
	}
	for _, t := range info.GetTablesByType(smbios.TableType(19)) {
		if r, ok := addrRange(t, 0x0f); ok {
			r.Handle, _ = t.GetWordAt(0x0c)
			m.Arrays = append(m.Arrays, r)
		}
	}
	for _, t := range info.GetTablesByType(smbios.TableType(20)) {
		if r, ok := addrRange(t, 0x13); ok {
			r.Handle, _ = t.GetWordAt(0x0c)
			r.Position, _ = t.GetByteAt(0x11)
			r.Depth, _ = t.GetByteAt(0x12)
			m.Devices = append(m.Devices, r)
		}
	}
	return m, nil
}

// addrRange reads a type 19/20 range: starting and ending address in KiB
// at 04h and 08h, or, when the start is FFFFFFFFh, the extended addresses
// in bytes at ext and ext+8 (SMBIOS 2.7).
func addrRange(t *smbios.Table, ext int) (Range, bool) {
	start, err1 := t.GetDWordAt(0x04)
	end, err2 := t.GetDWordAt(0x08)
	if err1 != nil || err2 != nil {
		return Range{}, false
	}
	if start != 0xffffffff {
		if end < start {
			return Range{}, false
		}
		return Range{Start: uint64(start) << 10, End: uint64(end)<<10 | 0x3ff}, true
	}
	xs, err1 := t.GetQWordAt(ext)
	xe, err2 := t.GetQWordAt(ext + 8)
	if err1 != nil || err2 != nil || xe < xs {
		return Range{}, false
	}
	return Range{Start: xs, End: xe}, true
}

// Lookup returns the DIMMs that may hold addr and how the tables decided:
// one DIMM when the address maps to one, several when it is interleaved
// or the tables say no more than the array, none when no table covers it.
func (m *Map) Lookup(addr uint64) ([]DIMM, string) {
	if m == nil {
		return nil, "no memory map"
	}
	byHandle := map[uint16]DIMM{}
	for _, d := range m.DIMMs {
		byHandle[d.Handle] = d
	}
	var out []DIMM
	interleaved := false
	for _, r := range m.Devices {
		if addr >= r.Start && addr <= r.End {
			if d, ok := byHandle[r.Handle]; ok {
				out = append(out, d)
			}
			interleaved = interleaved || r.Depth > 1
		}
	}
	switch {
	case len(out) == 1 && !interleaved:
		return out, fmt.Sprintf("SMBIOS maps 0x%x to this device (type 20)", addr)
	case len(out) > 0:
		return out, fmt.Sprintf("SMBIOS maps 0x%x to %d interleaved devices (type 20)", addr, len(out))
	}
	for _, r := range m.Arrays {
		if addr < r.Start || addr > r.End {
			continue
		}
		var in []DIMM
		for _, d := range m.DIMMs {
			if d.Array == r.Handle {
				in = append(in, d)
			}
		}
		if len(in) == 1 {
			return in, fmt.Sprintf("0x%x is in a memory array (SMBIOS type 19) with one populated device", addr)
		}
		return in, fmt.Sprintf("0x%x is in a memory array (SMBIOS type 19) of %d populated devices; the tables do not say which", addr, len(in))
	}
	return nil, fmt.Sprintf("no SMBIOS memory range holds 0x%x", addr)
}

// clean drops firmware placeholders and makes the string valid UTF-8.
func clean(s string) string {
	s = strings.ToValidUTF8(strings.TrimSpace(s), "\uFFFD")
	switch strings.ToLower(s) {
	case "not specified", "to be filled by o.e.m.", "default string", "unknown", "not provided", "none":
		return ""
	}
	return s
}
