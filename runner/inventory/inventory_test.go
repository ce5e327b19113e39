package inventory

import (
	"context"
	"fmt"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/tools/nvme"
)

func write(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(link), 0o755)
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// fixtureRoot is a QEMU-like node: one NVMe controller, one virtio NIC,
// an NVIDIA GPU and a bridge, in a fake root.
func fixtureRoot(t *testing.T) string {
	r := t.TempDir()
	for f, v := range map[string]string{
		"sys_vendor": "QEMU", "product_name": "Standard PC (Q35 + ICH9, 2009)",
		"product_serial": "SN-NODE-1", "product_uuid": "5D7E1C3A-0000-4000-8000-000000000001", "bios_version": "1.16.2-debian",
	} {
		write(t, r, "sys/class/dmi/id/"+f, v+"\n")
	}
	write(t, r, "proc/meminfo", "MemTotal:        4025524 kB\nMemFree:  100 kB\nHugetlb:               0 kB\nHugepagesize:       2048 kB\n")
	write(t, r, "proc/cpuinfo", "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: QEMU Virtual CPU version 2.5+\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\nmodel name\t: QEMU Virtual CPU version 2.5+\n")
	// Two threads of one core on socket 0, one NUMA node; 32 online memory
	// blocks of 128 MiB (4 GiB installed).
	for i := range 2 {
		c := fmt.Sprintf("sys/devices/system/cpu/cpu%d/", i)
		write(t, r, c+"online", "1\n")
		write(t, r, c+"topology/physical_package_id", "0\n")
		write(t, r, c+"topology/core_id", "0\n")
		symlink(t, filepath.Join(r, c), filepath.Join(r, fmt.Sprintf("sys/devices/system/node/node0/cpu%d", i)))
	}
	write(t, r, "sys/devices/system/node/node0/meminfo", "Node 0 MemTotal:       4025524 kB\n")
	write(t, r, "sys/devices/system/node/node0/distance", "10\n")
	os.MkdirAll(filepath.Join(r, "sys/devices/system/node/node0/hugepages"), 0o755)
	write(t, r, "sys/devices/system/memory/block_size_bytes", "8000000\n")
	for i := range 32 {
		write(t, r, fmt.Sprintf("sys/devices/system/memory/memory%d/state", i), "online\n")
	}
	copyFile(t, "testdata/pci.ids", filepath.Join(r, "usr/share/misc/pci.ids"))
	copyFile(t, "testdata/qemu-smbios/smbios_entry_point", filepath.Join(r, "sys/firmware/dmi/tables/smbios_entry_point"))
	copyFile(t, "testdata/qemu-smbios/DMI", filepath.Join(r, "sys/firmware/dmi/tables/DMI"))
	write(t, r, "proc/sys/kernel/osrelease", "6.1.0-27-amd64\n")
	write(t, r, "proc/cmdline", "console=ttyS0 cure.node=n1\n")
	write(t, r, "proc/self/mounts", "rootfs / rootfs rw 0 0\nproc /proc proc rw 0 0\n")

	c := "sys/class/nvme/nvme0/"
	write(t, r, c+"model", "QEMU NVMe Ctrl                          \n")
	write(t, r, c+"serial", "deadbeef            \n")
	write(t, r, c+"firmware_rev", "7.2.22  \n")
	write(t, r, c+"address", "0000:00:04.0\n")
	write(t, r, c+"device/vendor", "0x1b36\n")
	os.MkdirAll(filepath.Join(r, c, "nvme0n1"), 0o755)
	write(t, r, "sys/block/nvme0n1/size", "2097152\n")
	write(t, r, "sys/block/nvme0n1/ro", "0\n")
	write(t, r, "sys/block/nvme0n1/removable", "0\n")

	pci := filepath.Join(r, "sys/devices/pci0000:00/0000:00:03.0")
	os.MkdirAll(filepath.Join(pci, "virtio0"), 0o755)
	write(t, r, "sys/devices/pci0000:00/0000:00:03.0/modalias", "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00\n")
	symlink(t, pci, filepath.Join(r, "sys/bus/pci/devices/0000:00:03.0"))
	symlink(t, "../../../bus/pci/drivers/virtio-pci", filepath.Join(pci, "driver"))
	symlink(t, pci, filepath.Join(r, "sys/class/net/ens3/device"))
	write(t, r, "sys/class/net/ens3/speed", "-1\n")
	os.MkdirAll(filepath.Join(r, "sys/class/net/br0"), 0o755)

	gpu := "sys/bus/pci/devices/0000:1b:00.0/"
	write(t, r, gpu+"vendor", "0x10de\n")
	write(t, r, gpu+"class", "0x030200\n")
	write(t, r, gpu+"device", "0x2330\n")
	write(t, r, gpu+"modalias", "pci:v000010DEd00002330sv000010DEsd000016C1bc03sc02i00\n")
	write(t, r, "sys/bus/pci/devices/0000:1c:00.0/vendor", "0x10de\n") // NVIDIA audio: not a GPU
	write(t, r, "sys/bus/pci/devices/0000:1c:00.0/class", "0x040300\n")
	write(t, r, "sys/bus/pci/devices/0000:1c:00.0/modalias", "pci:v000010DEd000022BAsv000010DEsd00000000bc04sc03i00\n")
	write(t, r, "sys/bus/pci/devices/0000:05:00.0/modalias", "pci:v000010DEd00001AF1sv000010DEsd00000000bc06sc80i00\n") // NVSwitch
	write(t, r, "sys/bus/pci/devices/0000:00:04.0/vendor", "0x1b36\n")
	write(t, r, "sys/bus/pci/devices/0000:00:04.0/class", "0x010802\n")
	write(t, r, "sys/bus/pci/devices/0000:00:04.0/modalias", "pci:v00001B36d00000010sv00001AF4sd00001100bc01sc08i02\n")
	return r
}

// fakeNVMe answers Identify Controller with the given fields, like the
// kernel ioctl would fill the 4 KiB buffer.
type fakeNVMe struct {
	vid           uint16
	sn, mn, fr    string
	err           error
	closed, calls int
}

func (f *fakeNVMe) AdminCommand(cmd *nvme.Command) (uint32, error) {
	f.calls++
	if f.err != nil {
		return 0, f.err
	}
	b := cmd.Data
	if len(b) < nvme.IdentifySize {
		return 0, errors.New("short buffer")
	}
	binary.LittleEndian.PutUint16(b[0:], f.vid)
	copy(b[4:24], pad(f.sn, 20))
	copy(b[24:64], pad(f.mn, 40))
	copy(b[64:72], pad(f.fr, 8))
	return 0, nil
}
func (f *fakeNVMe) Close() error { f.closed++; return nil }

func pad(s string, n int) string { return s + strings.Repeat(" ", n-len(s)) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func copyFile(t *testing.T, src, dst string) {
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

func TestCollect(t *testing.T) {
	r := fixtureRoot(t)
	dev := &fakeNVMe{vid: 0x1b36, sn: "deadbeef", mn: "QEMU NVMe Ctrl", fr: "7.2.22"}
	var opened string
	inv, id, err := Collect(context.Background(), Options{
		Root: r, BootMAC: "52:54:00:12:34:56", NodeID: "n1", Log: quiet(),
		Links: func() ([]Link, error) {
			return []Link{{Name: "ens3", MAC: "52:54:00:12:34:56", Up: true, Addrs: []string{"10.0.2.15/24"}}, {Name: "br0", MAC: "aa:bb:cc:dd:ee:ff"}}, nil
		},
		OpenNVMe: func(p string) (AdminCloser, error) { opened = p; return dev, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	// Identity and DIMMs from the SMBIOS tables QEMU wrote (testdata/qemu-smbios).
	s := inv.System
	if s.Vendor != "CURE" || s.Product != "QEMU-GPU-Node" || s.Serial != "SN-FIXTURE-1" || s.Uuid != "5d7e1c3a-0000-4000-8000-000000000001" ||
		s.Sku != "HGX-TEST" || s.BiosVendor != "CURE-BIOS" || s.BiosVersion != "2.4.4" || s.BiosDate != "03/01/2025" {
		t.Errorf("system = %v", s)
	}
	if len(inv.Dimms) != 1 {
		t.Fatalf("dimms = %v", inv.Dimms)
	}
	if d := inv.Dimms[0]; d.Locator != "DIMM 0" || d.Bank != "BANK" || d.SizeBytes != 2<<30 || d.Manufacturer != "Samsung" ||
		d.Serial != "S0001" || d.PartNumber != "M321R8GA0BB0-CQKZJ" || d.SpeedMts != 4800 || d.Type != "RAM" {
		t.Errorf("dimm = %v", d)
	}
	if inv.MemoryBytes != 4025524*1024 || inv.MemoryPhysicalBytes != 4<<30 || inv.CpuCount != 2 || inv.CpuModel != "QEMU Virtual CPU version 2.5+" || inv.Kernel != "6.1.0-27-amd64" {
		t.Errorf("mem/cpu/kernel = %d %d %d %q %q", inv.MemoryBytes, inv.MemoryPhysicalBytes, inv.CpuCount, inv.CpuModel, inv.Kernel)
	}
	if len(inv.Processors) != 1 || inv.Processors[0].Cores != 1 || inv.Processors[0].Threads != 2 || inv.Processors[0].Vendor != "GenuineIntel" {
		t.Errorf("processors = %v", inv.Processors)
	}
	if len(inv.NumaNodes) != 1 || inv.NumaNodes[0].Cores != 1 {
		t.Errorf("numa = %v", inv.NumaNodes)
	}
	if opened != filepath.Join(r, "dev/nvme0") || dev.closed != 1 {
		t.Errorf("identify opened %q (closed %d times)", opened, dev.closed)
	}
	if len(inv.Nvme) != 1 {
		t.Fatalf("nvme = %v", inv.Nvme)
	}
	n := inv.Nvme[0]
	if n.Name != "nvme0" || n.Model != "QEMU NVMe Ctrl" || n.Serial != "deadbeef" || n.Firmware != "7.2.22" || n.VendorId != 0x1b36 || n.PciAddress != "0000:00:04.0" || len(n.Namespaces) != 1 {
		t.Errorf("nvme[0] = %v", n)
	}
	if len(inv.Nics) != 1 {
		t.Fatalf("nics = %v (bridge must be left out)", inv.Nics)
	}
	nic := inv.Nics[0]
	if nic.Driver != "virtio-pci" || nic.PciAddress != "0000:00:03.0" || nic.SpeedMbps != 0 || !nic.LinkUp || nic.Addresses[0] != "10.0.2.15/24" ||
		nic.Model != "Virtio network device" || nic.PciVendorId != 0x1af4 || nic.PciDeviceId != 0x1000 {
		t.Errorf("nic = %v", nic)
	}
	if len(inv.Disks) != 1 || inv.Disks[0].Name != "nvme0n1" || inv.Disks[0].SizeBytes != 1<<30 || inv.Disks[0].BootMedium {
		t.Errorf("disks = %v", inv.Disks)
	}
	if len(inv.Gpus) != 1 || inv.Gpus[0].PciAddress != "0000:1b:00.0" || inv.Gpus[0].Name != "GH100[H100 SXM5 80GB]" || inv.Gpus[0].PciDeviceId != 0x2330 {
		t.Errorf("gpus = %v", inv.Gpus)
	}
	if len(inv.Nvswitches) != 1 || inv.Nvswitches[0].Address != "0000:05:00.0" || inv.Nvswitches[0].Name != "GA100 [A100 NVSwitch]" || inv.Nvswitches[0].Class != 0x068000 {
		t.Errorf("nvswitches = %v", inv.Nvswitches)
	}
	if id.BootMac != "52:54:00:12:34:56" || id.SystemSerial != "SN-FIXTURE-1" || id.NodeId != "n1" || len(id.Macs) != 1 {
		t.Errorf("identity = %v", id)
	}
}

func TestIdentifyFailureFallsBackToSysfs(t *testing.T) {
	r := fixtureRoot(t)
	dev := &fakeNVMe{err: &nvme.StatusError{SCT: 0, SC: 1, DNR: true}}
	ctrls, err := NVMeControllers(r, func(string) (AdminCloser, error) { return dev, nil }, false, quiet())
	if err != nil {
		t.Fatal(err)
	}
	c := ctrls[0]
	if c.Identify != nil || c.IdentifyErr == nil || c.Source() != "sysfs" {
		t.Fatalf("controller = %+v", c)
	}
	if c.Model() != "QEMU NVMe Ctrl" || c.Firmware() != "7.2.22" || c.VendorID() != 0x1b36 {
		t.Errorf("sysfs fallback values = %q %q %#x", c.Model(), c.Firmware(), c.VendorID())
	}
	if dev.closed != 1 {
		t.Errorf("device closed %d times after failed identify", dev.closed)
	}
	// Open failing (no /dev node) is also a fallback, not a failure.
	ctrls, err = NVMeControllers(r, func(p string) (AdminCloser, error) { return nil, os.ErrNotExist }, false, quiet())
	if err != nil || ctrls[0].IdentifyErr == nil || ctrls[0].Firmware() != "7.2.22" {
		t.Errorf("open failure: %v %+v", err, ctrls)
	}
}

func TestCollectErrors(t *testing.T) {
	if _, _, err := Collect(context.Background(), Options{Root: filepath.Join(t.TempDir(), "nope"), Log: quiet()}); err == nil || !strings.Contains(err.Error(), "sysfs") {
		t.Errorf("missing root: %v", err)
	}
}

func TestBootMediumMarked(t *testing.T) {
	r := fixtureRoot(t)
	write(t, r, "proc/self/mounts", "/dev/nvme0n1 /mnt ext4 rw 0 0\n")
	disks, err := Disks(r)
	if err != nil {
		t.Fatal(err)
	}
	if !disks[0].BootMedium {
		t.Errorf("mounted disk not marked as boot medium: %+v", disks[0])
	}
}
