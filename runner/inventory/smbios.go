package inventory

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/u-root/u-root/pkg/smbios"
)

// readSMBIOS parses the firmware's SMBIOS tables as the kernel exports them
// (sys/firmware/dmi/tables under root) with u-root's smbios package.
// smbios.FromSysfs reads only the real /sys; the two files are read here so
// a fixture root works the same way.
func readSMBIOS(root string) (*smbios.Info, error) {
	dir := filepath.Join(root, "sys/firmware/dmi/tables")
	entry, err := os.ReadFile(filepath.Join(dir, "smbios_entry_point"))
	if err != nil {
		return nil, fmt.Errorf("smbios entry point: %w", err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "DMI"))
	if err != nil {
		return nil, fmt.Errorf("smbios tables: %w", err)
	}
	info, err := smbios.ParseInfo(entry, data)
	if err != nil {
		return nil, fmt.Errorf("parsing smbios tables in %s: %w", dir, err)
	}
	return info, nil
}

// clean makes an SMBIOS string fit to show and compare: firmware pads and
// fills strings with placeholders, and need not write UTF-8.
func clean(s string) string {
	s = strings.ToValidUTF8(strings.TrimSpace(s), "\uFFFD")
	switch strings.ToLower(s) {
	case "not specified", "to be filled by o.e.m.", "default string", "unknown", "not provided", "none":
		return ""
	}
	return s
}

// systemFromSMBIOS fills identity from type 1 (system) and type 0 (BIOS).
func systemFromSMBIOS(info *smbios.Info) (*curev1.SystemInfo, error) {
	s := &curev1.SystemInfo{}
	si, err := info.GetSystemInfo()
	if err != nil {
		return nil, fmt.Errorf("smbios type 1: %w", err)
	}
	s.Vendor, s.Product, s.Serial, s.Sku = clean(si.Manufacturer), clean(si.ProductName), clean(si.SerialNumber), clean(si.SKUNumber)
	if u := si.UUID.String(); u != "Not Settable" && u != "Not Present" {
		s.Uuid = strings.ToLower(u)
	}
	if bi, err := info.GetBIOSInfo(); err == nil {
		s.BiosVendor, s.BiosVersion, s.BiosDate = clean(bi.Vendor), clean(bi.Version), clean(bi.ReleaseDate)
	}
	return s, nil
}

// dimmsFromSMBIOS lists every memory device (type 17), empty slots
// included with size 0, so a missing DIMM is named by its slot.
func dimmsFromSMBIOS(info *smbios.Info) ([]*curev1.Dimm, error) {
	mds, err := info.GetMemoryDevices()
	if err != nil {
		return nil, fmt.Errorf("smbios type 17: %w", err)
	}
	out := make([]*curev1.Dimm, 0, len(mds))
	for _, md := range mds {
		d := &curev1.Dimm{Locator: clean(md.DeviceLocator), Bank: clean(md.BankLocator), SizeBytes: md.GetSizeBytes()}
		if d.SizeBytes > 0 {
			d.Type = clean(md.Type.String())
			d.SpeedMts = uint32(md.Speed)
			d.Manufacturer, d.Serial, d.PartNumber = clean(md.Manufacturer), clean(md.SerialNumber), clean(md.PartNumber)
		}
		out = append(out, d)
	}
	return out, nil
}
