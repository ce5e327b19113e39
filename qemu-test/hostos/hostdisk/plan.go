// Package hostdisk assembles the QEMU tests' host OS disk: a raw image with
// an MBR (syslinux boot code), a FAT boot partition holding syslinux, the
// kernel and the initramfs, and an empty FAT partition labelled CIDATA for
// the NoCloud seed the runner writes after install. With an EFI stub the
// boot partition is also the EFI System Partition (MBR type 0xEF, still
// active for the BIOS path) and holds \EFI\BOOT\BOOTX64.EFI, a unified
// kernel image (systemd-boot's linuxx64.efi.stub with the kernel, the
// initramfs and the command line as PE sections): UEFI firmware boots it
// with no boot loader and no configuration, and its command line is the
// one syslinux passes, so both paths boot the same OS the same way.
// No loop devices or mounts: filesystems are made in image files with
// mkfs.vfat, filled with mtools and syslinux, then placed at their offsets.
// Volume IDs, timestamps and the MBR disk id are fixed, so the same inputs
// give the same bytes.
package hostdisk

import (
	"encoding/binary"
	"fmt"
	"os"
	"strings"
)

const (
	sectorSize = 512
	mib        = 1 << 20
	// firstLBA aligns partition 1 at 1 MiB, as fdisk does.
	firstLBA = 2048
	// fatLBAType is the MBR type of a FAT16 filesystem addressed by LBA.
	fatLBAType = 0x0e
	// espType is the MBR type of an EFI System Partition.
	espType = 0xef
)

// File goes into a partition's root directory.
type File struct {
	Src  string // host path
	Name string // 8.3-safe lower-case name in the FAT root
}

// Partition is one planned MBR partition and its FAT filesystem.
type Partition struct {
	Number      int
	StartSector uint32
	Sectors     uint32
	Type        byte
	Bootable    bool
	Label       string // FAT volume label (<= 11 chars, upper case)
	VolumeID    uint32
	// SectorsPerCluster is passed to mkfs.vfat -s (0: its default). FAT16
	// needs at least 4085 clusters, so small partitions need small clusters.
	SectorsPerCluster int
	Syslinux          bool // install syslinux into this filesystem
	Files             []File
	// Content are generated files (syslinux.cfg), name -> bytes.
	Content map[string][]byte
	// UKI, when set, is built (objcopy) and placed at UKIPath.
	UKI *UKI
}

// UKIPath is where UEFI firmware looks on removable or unregistered media.
const UKIPath = "EFI/BOOT/BOOTX64.EFI"

// UKI is a unified kernel image: the EFI stub with the kernel, initramfs,
// command line and os-release added as PE sections at fixed addresses.
type UKI struct {
	Stub    string // linuxx64.efi.stub
	Kernel  string
	Initrd  string
	Cmdline string
	OSRel   string
}

// UKI section addresses (relative to the stub's ImageBase 0): the layout
// systemd documents for objcopy-built images. The stub must end below
// ukiOSRelVMA and the kernel must fit below ukiInitrdVMA.
const (
	ukiOSRelVMA   = 0x20000
	ukiCmdlineVMA = 0x30000
	ukiLinuxVMA   = 0x2000000
	ukiInitrdVMA  = 0x3000000
	// MaxUKIKernel is the largest kernel the layout holds.
	MaxUKIKernel = ukiInitrdVMA - ukiLinuxVMA
)

// ObjcopyArgs is the objcopy command line that builds the UKI at out.
func (u UKI) ObjcopyArgs(osrel, cmdline, out string) []string {
	sec := func(name, file string, vma int) []string {
		return []string{"--add-section", name + "=" + file, "--change-section-vma", fmt.Sprintf("%s=%#x", name, vma)}
	}
	var a []string
	a = append(a, sec(".osrel", osrel, ukiOSRelVMA)...)
	a = append(a, sec(".cmdline", cmdline, ukiCmdlineVMA)...)
	a = append(a, sec(".linux", u.Kernel, ukiLinuxVMA)...)
	a = append(a, sec(".initrd", u.Initrd, ukiInitrdVMA)...)
	return append(a, u.Stub, out)
}

// Offset is the partition's byte offset in the disk image.
func (p Partition) Offset() int64 { return int64(p.StartSector) * sectorSize }

// Size is the partition's size in bytes.
func (p Partition) Size() int64 { return int64(p.Sectors) * sectorSize }

// Plan is the whole disk, computed before anything is written.
type Plan struct {
	SizeBytes  int64
	DiskID     uint32
	Partitions []Partition
}

// Options describe the host disk to plan.
type Options struct {
	Kernel    string // host path of vmlinuz
	Initrd    string // host path of the initramfs (any format the kernel unpacks)
	Append    string // kernel parameters
	SizeMiB   int    // whole disk, default 64
	CIDataMiB int    // CIDATA partition, default 8
	// EFIStub, when set (systemd-boot-efi's linuxx64.efi.stub), makes the
	// boot partition an EFI System Partition with a unified kernel image.
	EFIStub string
	// FileSizes reports host file sizes (os.Stat in production).
	FileSizes func(path string) (int64, error)
}

// Fixed identifiers: reproducible images and easy to spot in hexdumps.
const (
	DiskID       = 0xC0DE0001
	bootVolumeID = 0xC0DE0B01
	dataVolumeID = 0xC0DE0C1D
	BootLabel    = "CUREHOST"
	CIDataLabel  = "CIDATA"
)

// NewPlan lays out the disk. It refuses layouts that cannot hold the files.
func NewPlan(o Options) (Plan, error) {
	if o.SizeMiB == 0 {
		o.SizeMiB = 64
	}
	if o.CIDataMiB == 0 {
		o.CIDataMiB = 8
	}
	if o.Kernel == "" || o.Initrd == "" {
		return Plan{}, fmt.Errorf("host disk: kernel and initrd are required")
	}
	if strings.ContainsAny(o.Append, "\n") {
		return Plan{}, fmt.Errorf("host disk: kernel parameters must be one line, got %q", o.Append)
	}
	total := uint32(int64(o.SizeMiB) * mib / sectorSize)
	data := uint32(int64(o.CIDataMiB) * mib / sectorSize)
	if o.CIDataMiB < 2 || total <= firstLBA+data {
		return Plan{}, fmt.Errorf("host disk: %d MiB disk cannot hold a %d MiB CIDATA partition and a boot partition", o.SizeMiB, o.CIDataMiB)
	}
	boot := total - firstLBA - data
	files := []File{{Src: o.Kernel, Name: "vmlinuz"}, {Src: o.Initrd, Name: "initrd.img"}}
	var need int64
	for _, f := range files {
		sz, err := o.FileSizes(f.Src)
		if err != nil {
			return Plan{}, fmt.Errorf("host disk: %w", err)
		}
		need += sz
		if o.EFIStub != "" {
			// The unified kernel image carries its own copy of both.
			if f.Name == "vmlinuz" && sz > MaxUKIKernel {
				return Plan{}, fmt.Errorf("host disk: kernel %s is %d bytes: the unified kernel image layout holds at most %d", f.Src, sz, MaxUKIKernel)
			}
			need += sz
		}
	}
	var uki *UKI
	partType := byte(fatLBAType)
	if o.EFIStub != "" {
		sz, err := o.FileSizes(o.EFIStub)
		if err != nil {
			return Plan{}, fmt.Errorf("host disk: EFI stub: %w", err)
		}
		need += sz
		uki = &UKI{Stub: o.EFIStub, Kernel: o.Kernel, Initrd: o.Initrd, Cmdline: o.Append,
			OSRel: "NAME=\"CURE test host OS\"\nID=cure-hostos\n"}
		partType = espType
	}
	// FAT tables, root directory and syslinux (~130 KiB) take a few hundred KiB.
	if avail := int64(boot)*sectorSize - 2*mib; need > avail {
		return Plan{}, fmt.Errorf("host disk: kernel+initrd need %d bytes, boot partition has about %d; raise the disk size", need, avail)
	}
	cfg := fmt.Sprintf("DEFAULT linux\nPROMPT 0\nTIMEOUT 0\nLABEL linux\n  KERNEL vmlinuz\n  APPEND initrd=initrd.img %s\n", o.Append)
	return Plan{
		SizeBytes: int64(total) * sectorSize,
		DiskID:    DiskID,
		Partitions: []Partition{
			{Number: 1, StartSector: firstLBA, Sectors: boot, Type: partType, Bootable: true,
				Label: BootLabel, VolumeID: bootVolumeID, Syslinux: true, Files: files,
				Content: map[string][]byte{"syslinux.cfg": []byte(cfg)}, UKI: uki},
			{Number: 2, StartSector: firstLBA + boot, Sectors: data, Type: fatLBAType,
				Label: CIDataLabel, VolumeID: dataVolumeID, SectorsPerCluster: 1},
		},
	}, nil
}

// MBR returns the 512-byte master boot record for p with bootCode (at most
// 440 bytes, syslinux's mbr.bin) in front of the partition table.
func (p Plan) MBR(bootCode []byte) ([]byte, error) {
	if len(bootCode) > 440 {
		return nil, fmt.Errorf("MBR boot code is %d bytes, at most 440 fit", len(bootCode))
	}
	if len(p.Partitions) > 4 {
		return nil, fmt.Errorf("MBR holds 4 primary partitions, plan has %d", len(p.Partitions))
	}
	m := make([]byte, sectorSize)
	copy(m, bootCode)
	binary.LittleEndian.PutUint32(m[440:], p.DiskID)
	for i, part := range p.Partitions {
		e := m[446+16*i : 446+16*(i+1)]
		if part.Bootable {
			e[0] = 0x80
		}
		copy(e[1:4], chs(part.StartSector))
		e[4] = part.Type
		copy(e[5:8], chs(part.StartSector+part.Sectors-1))
		binary.LittleEndian.PutUint32(e[8:], part.StartSector)
		binary.LittleEndian.PutUint32(e[12:], part.Sectors)
	}
	m[510], m[511] = 0x55, 0xAA
	return m, nil
}

// chs encodes an LBA in the legacy 255-head, 63-sector geometry, saturating
// at cylinder 1023 as fdisk does.
func chs(lba uint32) []byte {
	const heads, sectors = 255, 63
	c := lba / (heads * sectors)
	h := (lba / sectors) % heads
	s := lba%sectors + 1
	if c > 1023 {
		c, h, s = 1023, 254, 63
	}
	return []byte{byte(h), byte(s) | byte((c>>2)&0xc0), byte(c)}
}

// StatSize is Options.FileSizes for real files.
func StatSize(path string) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	if !st.Mode().IsRegular() {
		return 0, fmt.Errorf("%s: expected a regular file", path)
	}
	return st.Size(), nil
}
