package inventory

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// nvidiaVendor is NVIDIA's PCI vendor ID.
const nvidiaVendor = "0x10de"

// GPUs lists NVIDIA display-class PCI functions (class 0x03xxxx) from sysfs,
// indexed in PCI address order. Name is the PCI id only: UUID, serial and
// VBIOS need NVML, which needs cgo and the site's driver (a later issue).
func GPUs(root string) ([]*curev1.Gpu, error) {
	dir := filepath.Join(root, "sys/bus/pci/devices")
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing PCI devices in %s: %w", dir, err)
	}
	var addrs []string
	for _, e := range entries {
		vendor, err1 := readTrim(filepath.Join(dir, e.Name(), "vendor"))
		class, err2 := readTrim(filepath.Join(dir, e.Name(), "class"))
		if err1 != nil || err2 != nil {
			continue
		}
		if strings.EqualFold(vendor, nvidiaVendor) && strings.HasPrefix(strings.ToLower(class), "0x03") {
			addrs = append(addrs, e.Name())
		}
	}
	sort.Strings(addrs)
	out := make([]*curev1.Gpu, 0, len(addrs))
	for i, a := range addrs {
		device, _ := readTrim(filepath.Join(dir, a, "device"))
		out = append(out, &curev1.Gpu{
			Index:      uint32(i),
			Name:       fmt.Sprintf("NVIDIA [10de:%s]", strings.TrimPrefix(device, "0x")),
			PciAddress: a,
		})
	}
	return out, nil
}
