// Package cidata finds and reads the cloud-init NoCloud seed of the host OS:
// the vfat partition labelled CIDATA (found by reading FAT boot sectors of
// the block devices listed in sysfs), its meta-data and user-data.
package cidata

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cure-oss/cure/tools/fat"
	"golang.org/x/sys/unix"
)

// ErrNotFound means no block device carries the label (yet: NVMe probes
// asynchronously, so callers poll).
var ErrNotFound = errors.New("no FAT filesystem with that label")

// Candidates lists block device names (sda, sda1, nvme0n1p2...) from
// <sysRoot>/block: whole disks and their partitions, sorted.
func Candidates(sysRoot string) ([]string, error) {
	disks, err := os.ReadDir(filepath.Join(sysRoot, "block"))
	if err != nil {
		return nil, fmt.Errorf("listing block devices: %w", err)
	}
	var out []string
	for _, d := range disks {
		out = append(out, d.Name())
		entries, err := os.ReadDir(filepath.Join(sysRoot, "block", d.Name()))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if _, err := os.Stat(filepath.Join(sysRoot, "block", d.Name(), e.Name(), "partition")); err == nil {
				out = append(out, e.Name())
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// FindByLabel returns the device path (<devRoot>/<name>) of the one FAT
// filesystem labelled label (case-insensitive, as FAT labels are). Several
// matches are an error: which seed to trust would be a guess.
func FindByLabel(sysRoot, devRoot, label string) (string, error) {
	return FindByLabelExcept(sysRoot, devRoot, label, nil)
}

// FindByLabelExcept is FindByLabel ignoring the devices skip names: the
// partitions of the other members of an md RAID1 whose members each read
// as the whole disk (metadata 1.0), so each holds the same seed.
func FindByLabelExcept(sysRoot, devRoot, label string, skip func(name string) bool) (string, error) {
	names, err := Candidates(sysRoot)
	if err != nil {
		return "", err
	}
	var found []string
	for _, n := range names {
		if skip != nil && skip(n) {
			continue
		}
		p := filepath.Join(devRoot, n)
		l, err := fat.ReadLabel(p)
		if err != nil {
			continue // no node yet, unreadable or not FAT: not ours
		}
		if strings.EqualFold(l, label) {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("%w %q among %d block devices in %s", ErrNotFound, label, len(names), sysRoot)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("FAT label %q is ambiguous: found on %s", label, strings.Join(found, ", "))
}

// MountReadOnly mounts the vfat filesystem on dev at dir, read-only: the
// host OS only reads its seed.
func MountReadOnly(dev, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := unix.Mount(dev, dir, "vfat", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting %s (vfat) read-only on %s: %w", dev, dir, err)
	}
	return nil
}

// trimBOM drops a UTF-8 byte order mark some editors write.
func trimBOM(b []byte) []byte { return bytes.TrimPrefix(b, []byte("\xef\xbb\xbf")) }
