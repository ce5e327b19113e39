package blockdev

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func put(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

type fixDisk struct {
	name    string
	devPath string // under sys/devices; /sys/block/<name> links to it
	sectors string
	model   string
	serial  string // device/serial
	vpd80   []byte // device/vpd_pg80, header included
	vpd83   []byte // device/vpd_pg83, header included
	parts   []string
	ro      bool
	rem     bool
}

// fakeSys builds a /sys tree shaped like the kernel's: /sys/block entries are
// symlinks into /sys/devices, partitions are subdirectories with a
// "partition" file.
func fakeSys(t *testing.T, disks []fixDisk) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "sys/block"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range disks {
		dir := filepath.Join(root, "sys/devices", d.devPath, "block", d.name)
		put(t, filepath.Join(dir, "size"), d.sectors+"\n")
		ro, rem := "0\n", "0\n"
		if d.ro {
			ro = "1\n"
		}
		if d.rem {
			rem = "1\n"
		}
		put(t, filepath.Join(dir, "ro"), ro)
		put(t, filepath.Join(dir, "removable"), rem)
		if d.model != "" {
			put(t, filepath.Join(dir, "device/model"), d.model+"          \n")
		}
		if d.serial != "" {
			put(t, filepath.Join(dir, "device/serial"), d.serial+"   \n")
		}
		if d.vpd80 != nil {
			put(t, filepath.Join(dir, "device/vpd_pg80"), string(d.vpd80))
		}
		if d.vpd83 != nil {
			put(t, filepath.Join(dir, "device/vpd_pg83"), string(d.vpd83))
		}
		for i, p := range d.parts {
			put(t, filepath.Join(dir, p, "partition"), strconv.Itoa(i+1)+"\n")
			put(t, filepath.Join(dir, p, "size"), "2048\n")
		}
		rel, err := filepath.Rel(filepath.Join(root, "sys/block"), dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(rel, filepath.Join(root, "sys/block", d.name)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const gib = 1 << 30

func standardSys(t *testing.T) string {
	return fakeSys(t, []fixDisk{
		{name: "nvme0n1", devPath: "pci0000:00/0000:00:04.0/nvme/nvme0", sectors: "2097152", model: "QEMU NVMe Ctrl", serial: "deadbeef", parts: []string{"nvme0n1p1", "nvme0n1p2"}},
		{name: "nvme1n1", devPath: "pci0000:00/0000:00:05.0/nvme/nvme1", sectors: "4194304", model: "QEMU NVMe Ctrl", serial: "cafe"},
		{name: "sda", devPath: "pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0", sectors: "8388608", model: "Samsung SSD 870", parts: []string{"sda1"},
			vpd80: vpdPage(0x80, []byte("S6PTNS0T123456A     "))},
		{name: "sdb", devPath: "pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0/host6/target6:0:0/6:0:0:0", sectors: "62521344", model: "Flash Disk", rem: true, parts: []string{"sdb1"}},
		{name: "sdc", devPath: "pci0000:00/0000:00:10.0/host7/port-7:0/end_device-7:0/target7:0:0/7:0:0:0", sectors: "20971520", model: "HUSMM1640ASS20"},
		{name: "vda", devPath: "pci0000:00/0000:00:06.0/virtio3", sectors: "1048576"},
		{name: "loop0", devPath: "virtual", sectors: "1000"},
		{name: "zram0", devPath: "virtual", sectors: "1000"},
		{name: "dm-0", devPath: "virtual", sectors: "1000"},
		{name: "sr0", devPath: "pci0000:00/0000:00:1f.2/ata2/host1/target1:0:0/1:0:0:0", sectors: "0", model: "QEMU DVD-ROM"},
		{name: "sdd", devPath: "pci0000:00/0000:00:14.0/usb2/2-2/host8/target8:0:0/8:0:0:0", sectors: "0", model: "Card Reader", rem: true},
		{name: "nvme2c2n1", devPath: "virtual", sectors: "1000"},
	})
}

func TestList(t *testing.T) {
	root := standardSys(t)
	// virtio_blk publishes its serial on the disk itself.
	put(t, filepath.Join(root, "sys/block/vda/serial"), "vd-serial\n")
	// sda1 holds an LVM physical volume.
	put(t, filepath.Join(root, "sys/block/sda/sda1/holders/dm-0"), "")

	disks, err := List(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range disks {
		names = append(names, d.Name)
	}
	if want := []string{"nvme0n1", "nvme1n1", "sda", "sdb", "sdc", "vda"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("names = %v, want %v", names, want)
	}
	want0 := Disk{Name: "nvme0n1", Path: "/dev/nvme0n1", SizeBytes: gib, Model: "QEMU NVMe Ctrl", Serial: "deadbeef",
		Transport: "nvme", Partitions: []string{"nvme0n1p1", "nvme0n1p2"}}
	if !reflect.DeepEqual(disks[0], want0) {
		t.Errorf("nvme0n1 = %+v\nwant %+v", disks[0], want0)
	}
	transports := map[string]string{}
	for _, d := range disks {
		transports[d.Name] = d.Transport
	}
	if want := map[string]string{"nvme0n1": "nvme", "nvme1n1": "nvme", "sda": "sata", "sdb": "usb", "sdc": "sas", "vda": "virtio"}; !reflect.DeepEqual(transports, want) {
		t.Errorf("transports = %v", transports)
	}
	if !disks[3].Removable || disks[2].Removable {
		t.Error("removable flags wrong")
	}
	if disks[2].Serial != "S6PTNS0T123456A" {
		t.Errorf("sda serial = %q, want the VPD page 0x80 serial", disks[2].Serial)
	}
	if disks[5].Serial != "vd-serial" {
		t.Errorf("vda serial = %q", disks[5].Serial)
	}
	if !reflect.DeepEqual(disks[2].Holders, []string{"dm-0"}) {
		t.Errorf("sda holders = %v", disks[2].Holders)
	}
}

func TestListBadSize(t *testing.T) {
	root := fakeSys(t, []fixDisk{{name: "sda", devPath: "x", sectors: "lots"}})
	_, err := List(root)
	if err == nil || !strings.Contains(err.Error(), "block device sda") || !strings.Contains(err.Error(), `found "lots"`) {
		t.Fatalf("err = %v", err)
	}
	if _, err := List(t.TempDir()); err == nil {
		t.Error("missing /sys/block accepted")
	}
}

func TestMarkBootMedium(t *testing.T) {
	disks, err := List(standardSys(t))
	if err != nil {
		t.Fatal(err)
	}
	disks[2].Holders = []string{"dm-0"} // sda carries dm-0
	mounts := filepath.Join(t.TempDir(), "mounts")
	put(t, mounts, `rootfs / rootfs rw 0 0
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
/dev/sdb1 /mnt/usb\040stick vfat rw 0 0
/dev/dm-0 /var xfs rw 0 0
tmpfs /tmp tmpfs rw 0 0
`)
	if err := MarkBootMedium(disks, mounts, "console=ttyS0 cure.bootdev=/dev/vda quiet"); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, d := range disks {
		got[d.Name] = d.BootMedium
	}
	want := map[string]bool{"nvme0n1": false, "nvme1n1": false, "sda": true, "sdb": true, "sdc": false, "vda": true}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("boot medium = %v, want %v", got, want)
	}

	// root= naming a partition marks its disk.
	disks, _ = List(standardSys(t))
	put(t, mounts, "proc /proc proc rw 0 0\n")
	if err := MarkBootMedium(disks, mounts, "root=/dev/nvme0n1p2 ro"); err != nil {
		t.Fatal(err)
	}
	if !disks[0].BootMedium || disks[1].BootMedium {
		t.Errorf("root=/dev/nvme0n1p2: nvme0n1=%v nvme1n1=%v", disks[0].BootMedium, disks[1].BootMedium)
	}
}

func TestMarkBootMediumRefusesWhatItCannotResolve(t *testing.T) {
	disks, _ := List(standardSys(t))
	mounts := filepath.Join(t.TempDir(), "mounts")
	put(t, mounts, "proc /proc proc rw 0 0\n")
	for _, cmdline := range []string{"root=UUID=0b9c-11aa", "root=PARTUUID=abc-01", "root=LABEL=root", "root=803"} {
		if err := MarkBootMedium(disks, mounts, cmdline); err == nil || !strings.Contains(err.Error(), "kernel parameter root=") {
			t.Errorf("%s: err = %v", cmdline, err)
		}
	}
	put(t, mounts, "/dev/mapper/vg-root / ext4 rw 0 0\n")
	if err := MarkBootMedium(disks, mounts, ""); err == nil || !strings.Contains(err.Error(), "mounts:1: /dev/mapper/vg-root") {
		t.Errorf("mapper err = %v", err)
	}
	if err := MarkBootMedium(disks, filepath.Join(t.TempDir(), "nope"), ""); err == nil {
		t.Error("unreadable mounts accepted")
	}
}

func TestSelect(t *testing.T) {
	disks, err := List(standardSys(t))
	if err != nil {
		t.Fatal(err)
	}
	disks[5].BootMedium = true // vda
	disks[4].ReadOnly = true   // sdc

	tests := []struct {
		sel     Selector
		want    string
		wantErr string
	}{
		{Selector{Serial: "cafe"}, "nvme1n1", ""},
		{Selector{Transport: "nvme", MinSize: 2 * gib}, "nvme1n1", ""},
		{Selector{Transport: "NVMe", MaxSize: gib}, "nvme0n1", ""},
		{Selector{Model: "Samsung*"}, "sda", ""},
		{Selector{Serial: "S6PTNS0T123456A"}, "sda", ""},
		{Selector{Name: "/dev/sdb"}, "sdb", ""},
		{Selector{Transport: "any", Model: "Flash*"}, "sdb", ""},
		{Selector{Transport: "nvme", Model: "QEMU*"}, "", "disk selector {transport=nvme model=\"QEMU*\"} is ambiguous: matches nvme0n1, nvme1n1"},
		{Selector{Transport: "nvme", Model: "X"}, "", `no disk matches selector {transport=nvme model="X"}; candidates: nvme0n1 (QEMU NVMe Ctrl, 1.0 GiB), nvme1n1 (QEMU NVMe Ctrl, 2.0 GiB), sda (Samsung SSD 870, 4.0 GiB), sdb (Flash Disk, 29.8 GiB)`},
		{Selector{Transport: "virtio"}, "", "no disk matches selector {transport=virtio}; excluded: vda (boot medium); candidates:"},
		{Selector{Name: "sdc"}, "", "excluded: sdc (read-only)"},
		{Selector{}, "", "disk selector is empty"},
		{Selector{Model: "[QEMU"}, "", `selector model glob "[QEMU"`},
		{Selector{MinSize: 2 * gib, MaxSize: gib}, "", "min size is larger than max size"},
	}
	for _, tc := range tests {
		got, err := Select(disks, tc.sel)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Select(%s) err = %v, want containing %q", tc.sel, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Select(%s): %v", tc.sel, err)
			continue
		}
		if got.Name != tc.want {
			t.Errorf("Select(%s) = %s, want %s", tc.sel, got.Name, tc.want)
		}
	}
}

func TestSelectNeverReturnsBootMedium(t *testing.T) {
	disks := []Disk{{Name: "nvme0n1", Transport: "nvme", SizeBytes: gib, BootMedium: true}}
	if d, err := Select(disks, Selector{Name: "nvme0n1"}); err == nil {
		t.Fatalf("selected boot medium %s", d.Name)
	}
}

func TestHumanSize(t *testing.T) {
	for in, want := range map[uint64]string{0: "0 B", 512: "512 B", 1536: "1.5 KiB", gib: "1.0 GiB", 3840 * gib: "3.8 TiB"} {
		if got := HumanSize(in); got != want {
			t.Errorf("HumanSize(%d) = %q, want %q", in, got, want)
		}
	}
}
