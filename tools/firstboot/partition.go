package firstboot

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/cure-oss/cure/tools/fat"
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
		label, err := fat.ReadLabel(dev)
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
