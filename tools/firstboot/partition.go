package firstboot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// SeedLabel is the volume label cloud-init's NoCloud datasource looks for.
const SeedLabel = "CIDATA"

// FindSeedPartition returns the device path (under devRoot) of the one
// partition of disk whose FAT volume label is CIDATA (any case). disk is a
// name such as nvme0n1 (a /dev/ prefix is accepted); partitions are listed
// from sysRoot/sys/block/<disk>. Zero or several matches are errors: the
// seed must go to exactly the partition the host OS will read.
func FindSeedPartition(sysRoot, devRoot, disk string) (string, error) {
	disk = strings.TrimPrefix(disk, "/dev/")
	if disk == "" || strings.Contains(disk, "/") {
		return "", fmt.Errorf("find seed partition: disk %q: expected a block device name like nvme0n1", disk)
	}
	dir := filepath.Join(sysRoot, "sys/block", disk)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("find seed partition on %s: %w", disk, err)
	}
	type part struct {
		name string
		n    int
	}
	var parts []part
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), disk) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "partition"))
		if err != nil {
			continue // not a partition
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return "", fmt.Errorf("find seed partition: %s/%s/partition: expected a number, found %q", dir, e.Name(), b)
		}
		parts = append(parts, part{e.Name(), n})
	}
	if len(parts) == 0 {
		return "", fmt.Errorf("find seed partition: %s has no partitions (was the partition table re-read after writing the image?)", disk)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].n < parts[j].n })

	var found, seen []string
	for _, p := range parts {
		dev := filepath.Join(devRoot, p.name)
		label, err := readFATLabel(dev)
		switch {
		case err != nil:
			seen = append(seen, fmt.Sprintf("%s: %v", p.name, err))
		case strings.EqualFold(label, SeedLabel):
			found = append(found, dev)
		default:
			seen = append(seen, fmt.Sprintf("%s: FAT label %q", p.name, label))
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", fmt.Errorf("find seed partition: no partition of %s has FAT label %s (%s)", disk, SeedLabel, strings.Join(seen, "; "))
	}
	return "", fmt.Errorf("find seed partition: %s has several %s partitions: %s", disk, SeedLabel, strings.Join(found, ", "))
}

var errNotFAT = errors.New("not a FAT file system")

func readFATLabel(dev string) (string, error) {
	f, err := os.Open(dev)
	if err != nil {
		return "", err
	}
	defer f.Close()
	bs := make([]byte, 512)
	if _, err := io.ReadFull(f, bs); err != nil {
		return "", fmt.Errorf("read boot sector: %w", err)
	}
	return FATLabel(bs)
}

// FATLabel extracts the volume label from a FAT boot sector. The extended
// boot signature 0x29 (at 0x26 for FAT12/16, 0x42 for FAT32) says the
// label field is present: 11 bytes at 0x2B or 0x47, space padded. FAT32 is
// recognised by a zero 16-bit FAT size (BPB_FATSz16 at 0x16).
func FATLabel(bs []byte) (string, error) {
	if len(bs) < 512 {
		return "", fmt.Errorf("%w: boot sector is %d bytes", errNotFAT, len(bs))
	}
	if bs[510] != 0x55 || bs[511] != 0xAA {
		return "", fmt.Errorf("%w: no 55 AA boot signature", errNotFAT)
	}
	if bs[0] != 0xEB && bs[0] != 0xE9 {
		return "", fmt.Errorf("%w: jump instruction %#02x", errNotFAT, bs[0])
	}
	bps := binary.LittleEndian.Uint16(bs[0x0B:])
	spc := bs[0x0D]
	if (bps != 512 && bps != 1024 && bps != 2048 && bps != 4096) || spc == 0 || spc&(spc-1) != 0 {
		return "", fmt.Errorf("%w: bytes/sector %d, sectors/cluster %d", errNotFAT, bps, spc)
	}
	sigOff, labelOff := 0x26, 0x2B
	if binary.LittleEndian.Uint16(bs[0x16:]) == 0 {
		sigOff, labelOff = 0x42, 0x47
	}
	if bs[sigOff] != 0x29 {
		return "", fmt.Errorf("FAT without a volume label field (extended boot signature %#02x at %#x)", bs[sigOff], sigOff)
	}
	return strings.TrimRight(string(bs[labelOff:labelOff+11]), " \x00"), nil
}
