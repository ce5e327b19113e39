package inventory

import (
	"context"
	"encoding/binary"
	"errors"
	"github.com/cure-oss/cure/runner/inventory/invtest"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/tools/nvme"
)

func write(t *testing.T, root, rel, content string) { invtest.Write(t, root, rel, content) }

func fixtureRoot(t *testing.T) string { return invtest.Root(t) }

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
	if nic.Driver != "virtio_net" || nic.PciAddress != "0000:00:03.0" || nic.SpeedMbps != 0 || !nic.LinkUp || nic.Addresses[0] != "10.0.2.15/24" ||
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

// Empty slots come through with size 0, named by their locator.
func TestDIMMSlots(t *testing.T) {
	r := fixtureRoot(t)
	invtest.SetDIMMs(t, r, []invtest.DIMM{{Locator: "A1", SizeMiB: 16384}, {Locator: "A2", SizeMiB: 16384}, {Locator: "B3"}})
	inv, _, err := Collect(context.Background(), Options{Root: r, Log: quiet(), NoIdentify: true,
		Links: func() ([]Link, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Dimms) != 3 {
		t.Fatalf("dimms = %v", inv.Dimms)
	}
	for i, want := range []struct {
		loc  string
		size uint64
	}{{"A1", 16 << 30}, {"A2", 16 << 30}, {"B3", 0}} {
		if d := inv.Dimms[i]; d.Locator != want.loc || d.SizeBytes != want.size || (want.size == 0) != (d.Serial == "") {
			t.Errorf("dimm %d = %v, want %s %d", i, d, want.loc, want.size)
		}
	}
	if inv.System.Serial != "SN-FIXTURE-1" {
		t.Errorf("rewritten tables lost the system: %v", inv.System)
	}
}

// Without pci.ids the PCI bus is still listed, by id.
func TestNoPCIIDs(t *testing.T) {
	r := fixtureRoot(t)
	if err := os.Remove(filepath.Join(r, "usr/share/misc/pci.ids")); err != nil {
		t.Fatal(err)
	}
	inv, _, err := Collect(context.Background(), Options{Root: r, Log: quiet(), NoIdentify: true,
		Links: func() ([]Link, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Gpus) != 1 || inv.Gpus[0].Name != "" || inv.Gpus[0].PciDeviceId != 0x2330 || len(inv.Nvswitches) != 1 {
		t.Errorf("gpus %v nvswitches %v", inv.Gpus, inv.Nvswitches)
	}
}
