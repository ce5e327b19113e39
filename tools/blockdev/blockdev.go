// Package blockdev lists disks from a sysfs root, marks the ones the
// running system depends on, and picks an install target by selector,
// refusing whenever the choice is not exactly one safe disk.
package blockdev

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Disk is one whole block device.
type Disk struct {
	Name       string // nvme0n1, sda, vda
	Path       string // /dev/nvme0n1
	SizeBytes  uint64
	Model      string
	Serial     string
	Transport  string // nvme, virtio, sata, sas, usb, scsi, mmc, unknown
	Removable  bool
	ReadOnly   bool
	BootMedium bool     // backs a mounted filesystem or named on the cmdline: never a target
	Partitions []string // nvme0n1p1, ... in partition-number order
	// Holders are the stacked devices (dm-0, md127) built on the disk or
	// its partitions, from the holders/ directories.
	Holders []string
}

// skipped names virtual or non-disk block devices. md and dm devices are
// stacked on real disks, which are what a selector must name.
var skipped = regexp.MustCompile(`^(loop|ram|zram|dm-|sr|md|nbd|fd|mtdblock)|^nvme[0-9]+c[0-9]+n[0-9]+$|^mmcblk[0-9]+(boot[0-9]+|rpmb)$`)

// List enumerates sysRoot/sys/block ("/" in production), sorted by name.
func List(sysRoot string) ([]Disk, error) {
	blockDir := filepath.Join(sysRoot, "sys/block")
	entries, err := os.ReadDir(blockDir)
	if err != nil {
		return nil, fmt.Errorf("list block devices: %w", err)
	}
	var out []Disk
	for _, e := range entries {
		name := e.Name()
		if skipped.MatchString(name) {
			continue
		}
		d, err := readDisk(blockDir, name)
		if err != nil {
			return nil, fmt.Errorf("block device %s: %w", name, err)
		}
		if d.SizeBytes == 0 {
			continue // empty card reader or detached medium: nothing to select
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func readDisk(blockDir, name string) (Disk, error) {
	dir := filepath.Join(blockDir, name)
	d := Disk{Name: name, Path: "/dev/" + name}

	sectors, err := readUint(filepath.Join(dir, "size"))
	if err != nil {
		return d, err
	}
	// sysfs "size" is always in 512-byte units, whatever the logical block size.
	d.SizeBytes = sectors * 512
	if v, err := readUint(filepath.Join(dir, "removable")); err == nil {
		d.Removable = v != 0
	} else if !errors.Is(err, fs.ErrNotExist) {
		return d, err
	}
	if v, err := readUint(filepath.Join(dir, "ro")); err == nil {
		d.ReadOnly = v != 0
	} else if !errors.Is(err, fs.ErrNotExist) {
		return d, err
	}
	d.Model = firstOf(filepath.Join(dir, "device/model"))
	// NVMe: device/ is the controller (or, under native multipath, the
	// subsystem); both carry serial. virtio_blk exposes serial on the disk.
	d.Serial = firstOf(filepath.Join(dir, "device/serial"), filepath.Join(dir, "serial"))
	if d.Serial == "" && strings.HasPrefix(name, "sd") {
		// SCSI disks (SATA via libata, SAS, virtio-scsi, USB) have no
		// device/serial; the kernel publishes their VPD pages instead.
		if d.Serial, err = scsiSerial(filepath.Join(dir, "device")); err != nil {
			return d, err
		}
	}
	d.Transport = transport(blockDir, name)

	entries, err := os.ReadDir(dir)
	if err != nil {
		return d, err
	}
	type part struct {
		name string
		n    uint64
	}
	var parts []part
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), name) {
			continue
		}
		n, err := readUint(filepath.Join(dir, e.Name(), "partition"))
		if err != nil {
			continue // not a partition directory
		}
		parts = append(parts, part{e.Name(), n})
		d.Holders = append(d.Holders, holders(filepath.Join(dir, e.Name()))...)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].n < parts[j].n })
	for _, p := range parts {
		d.Partitions = append(d.Partitions, p.name)
	}
	d.Holders = append(d.Holders, holders(dir)...)
	sort.Strings(d.Holders)
	return d, nil
}

// transport classifies by name, then for SCSI disks by the sysfs device
// path the /sys/block entry links to (…/ata1/…, …/usb2/…, …/end_device-…).
func transport(blockDir, name string) string {
	switch {
	case strings.HasPrefix(name, "nvme"):
		return "nvme"
	case strings.HasPrefix(name, "vd"):
		return "virtio"
	case strings.HasPrefix(name, "mmcblk"):
		return "mmc"
	case !strings.HasPrefix(name, "sd"):
		return "unknown"
	}
	link, err := os.Readlink(filepath.Join(blockDir, name))
	if err != nil {
		return "scsi"
	}
	switch {
	case strings.Contains(link, "/usb"):
		return "usb"
	case strings.Contains(link, "/ata"):
		return "sata"
	case strings.Contains(link, "/end_device-") || strings.Contains(link, "/sas_"):
		return "sas"
	}
	return "scsi"
}

func holders(dir string) []string {
	entries, err := os.ReadDir(filepath.Join(dir, "holders"))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: expected an unsigned integer, found %q", path, s)
	}
	return v, nil
}

// firstOf returns the first readable non-empty file's trimmed content.
// model and serial are the device's bytes (ATA IDENTIFY, NVMe Identify,
// SCSI INQUIRY) as the kernel copied them: anything that is not UTF-8
// becomes U+FFFD, as protobuf strings require.
func firstOf(paths ...string) string {
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			if s := strings.TrimSpace(string(b)); s != "" {
				return strings.ToValidUTF8(s, "\uFFFD")
			}
		}
	}
	return ""
}
