package cidata

import (
	"testing"

	"github.com/cure-oss/cure/tools/mdraid"
)

func TestOtherMembers(t *testing.T) {
	ms := []MDMember{{Disk: "nvme0n1", SB: &mdraid.Superblock{}}, {Disk: "nvme1n1", SB: &mdraid.Superblock{}}, {Disk: "sdb", SB: &mdraid.Superblock{}}}
	skip := OtherMembers(ms)
	for name, want := range map[string]bool{
		"nvme0n1": false, "nvme0n1p3": false, "nvme1n1": true, "nvme1n1p3": true, "nvme1n10": false,
		"sdb": true, "sdb2": true, "sdba": false, "sda1": false,
	} {
		if got := skip(name); got != want {
			t.Errorf("skip(%s) = %v, want %v", name, got, want)
		}
	}
	if OtherMembers(nil)("nvme0n1") {
		t.Error("no members: skipped a device")
	}
}
