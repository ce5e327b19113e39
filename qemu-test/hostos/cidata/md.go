package cidata

import (
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/cure-oss/cure/tools/mdraid"
)

// MDMember is a whole disk carrying an md superblock.
type MDMember struct {
	Disk string
	SB   *mdraid.Superblock
}

// MDMembers lists the whole disks of <sysRoot>/block that carry an md
// version-1 superblock, by slot. The host OS has no md driver: it boots
// from a member (metadata 1.0 leaves the data at the start of each), and
// says what the array is.
func MDMembers(sysRoot, devRoot string) []MDMember {
	disks, err := os.ReadDir(filepath.Join(sysRoot, "block"))
	if err != nil {
		return nil
	}
	var out []MDMember
	for _, d := range disks {
		if !strings.HasPrefix(d.Name(), "nvme") && !strings.HasPrefix(d.Name(), "vd") && !strings.HasPrefix(d.Name(), "sd") {
			continue
		}
		if sb, err := mdraid.Examine(filepath.Join(devRoot, d.Name())); err == nil {
			out = append(out, MDMember{Disk: d.Name(), SB: sb})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SB.Role() < out[j].SB.Role() })
	return out
}

// OtherMembers is a FindByLabelExcept skip: the partitions of every member
// but the first (the lowest slot), which hold the same bytes.
func OtherMembers(ms []MDMember) func(name string) bool {
	return func(name string) bool {
		for _, m := range ms[min(1, len(ms)):] {
			// The kernel names nvme0n1's partitions nvme0n1p1, sdb's sdb1.
			sep := ""
			if digits(m.Disk[len(m.Disk)-1:]) {
				sep = "p"
			}
			rest, ok := strings.CutPrefix(name, m.Disk)
			if ok && (rest == "" || strings.HasPrefix(rest, sep) && digits(rest[len(sep):])) {
				return true
			}
		}
		return false
	}
}

func digits(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}
