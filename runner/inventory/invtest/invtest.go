// Package invtest builds fixture roots for inventory tests: a fake sysfs and
// procfs of a QEMU-like node with the SMBIOS tables QEMU wrote
// (testdata/qemu-smbios) and a pci.ids excerpt, which tests then change
// (add devices, empty DIMM slots, NIC speeds) to model other nodes.
package invtest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/u-root/u-root/pkg/smbios"
)

func dir() string {
	_, f, _, _ := runtime.Caller(0)
	return filepath.Dir(f)
}

// CopyFile copies a host file into the fixture.
func CopyFile(t testing.TB, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func Write(t testing.TB, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func Symlink(t testing.TB, target, link string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(link), 0o755)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// Root is a QEMU-like node: one NVMe controller, one virtio NIC,
// an NVIDIA GPU and a bridge, in a fake root.
func Root(t testing.TB) string {
	r := t.TempDir()
	for f, v := range map[string]string{
		"sys_vendor": "QEMU", "product_name": "Standard PC (Q35 + ICH9, 2009)",
		"product_serial": "SN-NODE-1", "product_uuid": "5D7E1C3A-0000-4000-8000-000000000001", "bios_version": "1.16.2-debian",
	} {
		Write(t, r, "sys/class/dmi/id/"+f, v+"\n")
	}
	Write(t, r, "proc/meminfo", "MemTotal:        4025524 kB\nMemFree:  100 kB\nHugetlb:               0 kB\nHugepagesize:       2048 kB\n")
	Write(t, r, "proc/cpuinfo", "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: QEMU Virtual CPU version 2.5+\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\nmodel name\t: QEMU Virtual CPU version 2.5+\n")
	// Two threads of one core on socket 0, one NUMA node; 32 online memory
	// blocks of 128 MiB (4 GiB installed).
	for i := range 2 {
		c := fmt.Sprintf("sys/devices/system/cpu/cpu%d/", i)
		Write(t, r, c+"online", "1\n")
		Write(t, r, c+"topology/physical_package_id", "0\n")
		Write(t, r, c+"topology/core_id", "0\n")
		Symlink(t, filepath.Join(r, c), filepath.Join(r, fmt.Sprintf("sys/devices/system/node/node0/cpu%d", i)))
	}
	Write(t, r, "sys/devices/system/node/node0/meminfo", "Node 0 MemTotal:       4025524 kB\n")
	Write(t, r, "sys/devices/system/node/node0/distance", "10\n")
	os.MkdirAll(filepath.Join(r, "sys/devices/system/node/node0/hugepages"), 0o755)
	Write(t, r, "sys/devices/system/memory/block_size_bytes", "8000000\n")
	for i := range 32 {
		Write(t, r, fmt.Sprintf("sys/devices/system/memory/memory%d/state", i), "online\n")
	}
	CopyFile(t, filepath.Join(dir(), "testdata", "pci.ids"), filepath.Join(r, "usr/share/misc/pci.ids"))
	CopyFile(t, filepath.Join(dir(), "testdata", "qemu-smbios", "smbios_entry_point"), filepath.Join(r, "sys/firmware/dmi/tables/smbios_entry_point"))
	CopyFile(t, filepath.Join(dir(), "testdata", "qemu-smbios", "DMI"), filepath.Join(r, "sys/firmware/dmi/tables/DMI"))
	Write(t, r, "proc/sys/kernel/osrelease", "6.1.0-27-amd64\n")
	Write(t, r, "proc/cmdline", "console=ttyS0 cure.node=n1\n")
	Write(t, r, "proc/self/mounts", "rootfs / rootfs rw 0 0\nproc /proc proc rw 0 0\n")

	c := "sys/class/nvme/nvme0/"
	Write(t, r, c+"model", "QEMU NVMe Ctrl                          \n")
	Write(t, r, c+"serial", "deadbeef            \n")
	Write(t, r, c+"firmware_rev", "7.2.22  \n")
	Write(t, r, c+"address", "0000:00:04.0\n")
	Write(t, r, c+"device/vendor", "0x1b36\n")
	os.MkdirAll(filepath.Join(r, c, "nvme0n1"), 0o755)
	Write(t, r, "sys/block/nvme0n1/size", "2097152\n")
	Write(t, r, "sys/block/nvme0n1/ro", "0\n")
	Write(t, r, "sys/block/nvme0n1/removable", "0\n")

	pci := filepath.Join(r, "sys/devices/pci0000:00/0000:00:03.0")
	os.MkdirAll(filepath.Join(pci, "virtio0"), 0o755)
	Write(t, r, "sys/devices/pci0000:00/0000:00:03.0/vendor", "0x1af4\n")
	Write(t, r, "sys/devices/pci0000:00/0000:00:03.0/device", "0x1000\n")
	Write(t, r, "sys/devices/pci0000:00/0000:00:03.0/class", "0x020000\n")
	Write(t, r, "sys/devices/pci0000:00/0000:00:03.0/modalias", "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00\n")
	Symlink(t, pci, filepath.Join(r, "sys/bus/pci/devices/0000:00:03.0"))
	Symlink(t, "../../../bus/pci/drivers/virtio-pci", filepath.Join(pci, "driver"))
	// As in QEMU: the netdev's device is the virtio device, a child of
	// the PCI function, with its own driver.
	Symlink(t, "../../../../bus/virtio/drivers/virtio_net", filepath.Join(pci, "virtio0", "driver"))
	Symlink(t, filepath.Join(pci, "virtio0"), filepath.Join(r, "sys/class/net/ens3/device"))
	Write(t, r, "sys/class/net/ens3/speed", "-1\n")
	os.MkdirAll(filepath.Join(r, "sys/class/net/br0"), 0o755)

	gpu := "sys/bus/pci/devices/0000:1b:00.0/"
	Write(t, r, gpu+"vendor", "0x10de\n")
	Write(t, r, gpu+"class", "0x030200\n")
	Write(t, r, gpu+"device", "0x2330\n")
	Write(t, r, gpu+"modalias", "pci:v000010DEd00002330sv000010DEsd000016C1bc03sc02i00\n")
	Write(t, r, "sys/bus/pci/devices/0000:1c:00.0/vendor", "0x10de\n") // NVIDIA audio: not a GPU
	Write(t, r, "sys/bus/pci/devices/0000:1c:00.0/device", "0x22ba\n")
	Write(t, r, "sys/bus/pci/devices/0000:1c:00.0/class", "0x040300\n")
	Write(t, r, "sys/bus/pci/devices/0000:1c:00.0/modalias", "pci:v000010DEd000022BAsv000010DEsd00000000bc04sc03i00\n")
	nvs := "sys/bus/pci/devices/0000:05:00.0/" // NVSwitch
	Write(t, r, nvs+"vendor", "0x10de\n")
	Write(t, r, nvs+"device", "0x1af1\n")
	Write(t, r, nvs+"class", "0x068000\n")
	Write(t, r, nvs+"modalias", "pci:v000010DEd00001AF1sv000010DEsd00000000bc06sc80i00\n")
	Write(t, r, "sys/bus/pci/devices/0000:00:04.0/vendor", "0x1b36\n")
	Write(t, r, "sys/bus/pci/devices/0000:00:04.0/device", "0x0010\n")
	Write(t, r, "sys/bus/pci/devices/0000:00:04.0/class", "0x010802\n")
	Write(t, r, "sys/bus/pci/devices/0000:00:04.0/modalias", "pci:v00001B36d00000010sv00001AF4sd00001100bc01sc08i02\n")
	return r
}

// DIMM is one memory device slot; SizeMiB 0 is an empty slot.
type DIMM struct {
	Locator string
	SizeMiB uint16
}

// SetDIMMs rewrites the fixture's SMBIOS tables so that its memory devices
// are dimms: each is the recorded QEMU type 17 structure with its Device
// Locator string and Size word replaced, under a fresh handle; the entry
// point's structure count, table length and checksums follow.
func SetDIMMs(t testing.TB, root string, dimms []DIMM) {
	t.Helper()
	tables := filepath.Join(root, "sys/firmware/dmi/tables")
	data, err := os.ReadFile(filepath.Join(tables, "DMI"))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	var tmpl []byte
	for len(data) > 0 {
		n := structLen(t, data)
		s := data[:n]
		if s[0] == 17 {
			if tmpl == nil {
				tmpl = s
			}
		} else {
			out = append(out, s)
		}
		data = data[n:]
	}
	if tmpl == nil {
		t.Fatal("fixture tables have no type 17 structure")
	}
	end := out[len(out)-1] // type 127 stays last
	out = out[:len(out)-1]
	for i, d := range dimms {
		out = append(out, dimmStruct(t, tmpl, uint16(0x1100+i), d))
	}
	out = append(out, end)
	blob := bytes.Join(out, nil)
	entry, err := os.ReadFile(filepath.Join(tables, "smbios_entry_point"))
	if err != nil {
		t.Fatal(err)
	}
	var e smbios.Entry32
	if err := e.UnmarshalBinary(entry); err != nil {
		t.Fatalf("fixture entry point: %v", err)
	}
	e.NumberOfStructs, e.StructTableLength = uint16(len(out)), uint16(len(blob))
	eb, err := e.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	Write(t, root, "sys/firmware/dmi/tables/DMI", string(blob))
	Write(t, root, "sys/firmware/dmi/tables/smbios_entry_point", string(eb))
}

// structLen is the length of the first SMBIOS structure in b: the
// formatted area, then strings up to a double NUL.
func structLen(t testing.TB, b []byte) int {
	if len(b) < 4 || int(b[1]) > len(b) {
		t.Fatalf("truncated SMBIOS structure")
	}
	i := int(b[1])
	end := bytes.Index(b[i:], []byte{0, 0})
	if end < 0 {
		t.Fatalf("SMBIOS structure type %d has no string terminator", b[0])
	}
	return i + end + 2
}

func dimmStruct(t testing.TB, tmpl []byte, handle uint16, d DIMM) []byte {
	flen := int(tmpl[1])
	formatted := append([]byte(nil), tmpl[:flen]...)
	strs := bytes.Split(bytes.TrimSuffix(tmpl[flen:], []byte{0, 0}), []byte{0})
	loc := int(formatted[0x10]) // Device Locator string number
	if loc < 1 || loc > len(strs) {
		t.Fatalf("template DIMM locator string %d of %d", loc, len(strs))
	}
	strs[loc-1] = []byte(d.Locator)
	binary.LittleEndian.PutUint16(formatted[2:], handle)
	binary.LittleEndian.PutUint16(formatted[0x0c:], d.SizeMiB) // MiB, bit 15 clear
	if d.SizeMiB >= 0x7fff {
		t.Fatalf("DIMM %s: %d MiB needs the extended size field", d.Locator, d.SizeMiB)
	}
	out := append(formatted, bytes.Join(strs, []byte{0})...)
	return append(out, 0, 0)
}
