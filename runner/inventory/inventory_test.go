package inventory

import (
	"context"
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
	write(t, r, "proc/meminfo", "MemTotal:        4025524 kB\nMemFree:  100 kB\n")
	write(t, r, "proc/cpuinfo", "processor\t: 0\nmodel name\t: QEMU Virtual CPU version 2.5+\n\nprocessor\t: 1\nmodel name\t: QEMU Virtual CPU version 2.5+\n")
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
	symlink(t, "../../../bus/pci/drivers/virtio-pci", filepath.Join(pci, "driver"))
	symlink(t, pci, filepath.Join(r, "sys/class/net/ens3/device"))
	write(t, r, "sys/class/net/ens3/speed", "-1\n")
	os.MkdirAll(filepath.Join(r, "sys/class/net/br0"), 0o755)

	gpu := "sys/bus/pci/devices/0000:1b:00.0/"
	write(t, r, gpu+"vendor", "0x10de\n")
	write(t, r, gpu+"class", "0x030200\n")
	write(t, r, gpu+"device", "0x2330\n")
	write(t, r, "sys/bus/pci/devices/0000:1c:00.0/vendor", "0x10de\n") // NVIDIA bridge/audio: not a GPU
	write(t, r, "sys/bus/pci/devices/0000:1c:00.0/class", "0x040300\n")
	write(t, r, "sys/bus/pci/devices/0000:00:04.0/vendor", "0x1b36\n")
	write(t, r, "sys/bus/pci/devices/0000:00:04.0/class", "0x010802\n")
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
	s := inv.System
	if s.Vendor != "QEMU" || s.Serial != "SN-NODE-1" || s.Uuid != "5d7e1c3a-0000-4000-8000-000000000001" || s.BiosVersion != "1.16.2-debian" {
		t.Errorf("system = %v", s)
	}
	if inv.MemoryBytes != 4025524*1024 || inv.CpuCount != 2 || inv.CpuModel != "QEMU Virtual CPU version 2.5+" || inv.Kernel != "6.1.0-27-amd64" {
		t.Errorf("mem/cpu/kernel = %d %d %q %q", inv.MemoryBytes, inv.CpuCount, inv.CpuModel, inv.Kernel)
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
	if nic.Driver != "virtio-pci" || nic.PciAddress != "0000:00:03.0" || nic.SpeedMbps != 0 || !nic.LinkUp || nic.Addresses[0] != "10.0.2.15/24" {
		t.Errorf("nic = %v", nic)
	}
	if len(inv.Disks) != 1 || inv.Disks[0].Name != "nvme0n1" || inv.Disks[0].SizeBytes != 1<<30 || inv.Disks[0].BootMedium {
		t.Errorf("disks = %v", inv.Disks)
	}
	if len(inv.Gpus) != 1 || inv.Gpus[0].PciAddress != "0000:1b:00.0" || inv.Gpus[0].Name != "NVIDIA [10de:2330]" {
		t.Errorf("gpus = %v", inv.Gpus)
	}
	if id.BootMac != "52:54:00:12:34:56" || id.SystemSerial != "SN-NODE-1" || id.NodeId != "n1" || len(id.Macs) != 1 {
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
	r := t.TempDir()
	write(t, r, "m", "MemTotal: lots\n")
	if _, err := memTotal(filepath.Join(r, "m")); err == nil || !strings.Contains(err.Error(), "m:1") {
		t.Errorf("bad meminfo: %v", err)
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
