package qemutest

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/qemu-test/harness"
	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/mdraid"
)

// TestSoftwareRAIDInstall provisions a node with two NVMe drives into an
// md RAID1 (spec.os.storage.raid, metadata 1.0): the runner fetches mdadm
// from the tool bundle, creates the array, writes the image to /dev/md127
// and reads it back, checks both members' superblocks; the node then
// boots the installed OS from the first member (its firmware sees a plain
// disk), which finds both members' superblocks, reads its seed and calls
// back. Afterwards both drive files are checked from outside: one array,
// slots 0 and 1, the same image bytes on each (make test; `make e2e-raid`
// runs it alone). Without a boot: runner/phases TestOSInstallRAID1,
// TestPlanStorage; tools/mdraid TestMdadmExamine.
func TestSoftwareRAIDInstall(t *testing.T) {
	t.Parallel() // its own environment: see startEnv
	began := time.Now()
	env := startEnv(t, harness.Options{ExtraNVMe: 2, ToolBundle: true, EditManifest: func(s *manifests.SKU) {
		serial := "CURE-QEMU-0001"
		s.Spec.OS.TargetDisk = manifests.DiskSelector{}
		s.Spec.OS.Storage = &manifests.Storage{
			RAID: &manifests.RAID{Level: manifests.RAID1, Members: []manifests.DiskSelector{{Serial: serial}, {Serial: serial + "-2"}}},
			Filesystems: []manifests.Filesystem{{Type: manifests.FSXFS, Label: "scratch", Mount: "/scratch",
				Disk: &manifests.DiskSelector{Serial: serial + "-3"}}},
		}
		if s.Spec.Hardware != nil {
			for i := range s.Spec.Hardware.NVMe {
				s.Spec.Hardware.NVMe[i].Count = 3
			}
		}
	}})
	n := env.Nodes[0]
	rep := provisionAndWait(t, env, n.ID, false)
	if rep.GetStatus() != "succeeded" {
		t.Fatalf("run %s ended %s: %s", rep.GetRunId(), rep.GetStatus(), rep.GetMessage())
	}
	got := phaseStatuses(t, openStore(t, env), rep.GetRunId())
	for _, p := range []modes.PhaseName{modes.Hardware, modes.SEDRevert, modes.OSInstall, modes.SetBootDisk, modes.WaitForHostOS} {
		if got[p] != "ok" {
			t.Errorf("phase %s = %q, want ok", p, got[p])
		}
	}
	v := verdict(rep, "md/cure-os", "os_install")
	if v == nil || v.GetStatus() != curev1.VerdictStatus_PASS || !strings.Contains(v.GetObserved(), "raid1 /dev/md127 (metadata 1.0") ||
		!strings.Contains(v.GetObserved(), "nvme0n1 slot 0") || !strings.Contains(v.GetObserved(), "nvme1n1 slot 1") {
		t.Errorf("md verdict = %v, want raid1 PASS over nvme0n1 slot 0 and nvme1n1 slot 1", v)
	}
	// Both members erased and verified zero: created --assume-clean, and
	// the image's zero blocks skipped on the array.
	if v := verdict(rep, "disk/md127", "os_install"); v == nil || v.GetStatus() != curev1.VerdictStatus_PASS || !strings.Contains(v.GetObserved(), "skipped on the erased disk") {
		t.Errorf("install verdict on the array = %v, want PASS with zero blocks skipped", v)
	}
	// The first member is the image with the seed, as a one-disk install's
	// disk is (the firmware booted it); the second holds the same bytes.
	checkDisk(t, env, n)

	// The third drive got its xfs filesystem (mkfs.xfs from the tool
	// bundle), and the seed mounts it by label.
	if v := verdict(rep, "filesystem/scratch", "os_install"); v == nil || v.GetStatus() != curev1.VerdictStatus_PASS || v.GetObserved() != "xfs LABEL=scratch on /dev/nvme2n1" {
		t.Errorf("filesystem verdict = %v, want PASS xfs LABEL=scratch on /dev/nvme2n1", v)
	}
	if typ, label, err := blockdev.FSLabelOf(n.ExtraDisks[1]); err != nil || typ != "xfs" || label != "scratch" {
		t.Errorf("third drive from outside: %q %q %v, want xfs scratch", typ, label, err)
	}
	img, err := os.ReadFile(env.HostOS.RawPath)
	if err != nil {
		t.Fatal(err)
	}
	start, _ := cidataRange(t, img)
	ud, err := exec.Command("mtype", "-i", fmt.Sprintf("%s@@%d", n.Disk, start), "::user-data").CombinedOutput()
	if err != nil || !strings.Contains(string(ud), `["LABEL=scratch", "/scratch", "xfs", "defaults,nofail", "0", "0"]`) {
		t.Errorf("user-data lacks the scratch mount (%v):\n%s", err, ud)
	}

	// The host OS saw both members of one array.
	console, err := os.ReadFile(n.Console)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`CURE-HOSTOS: .*msg="md member" disk=(nvme\dn1) array=([0-9a-f:]+) .*slot=(\d)`)
	seen := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(string(console), -1) {
		seen[m[1]] = m[2] + " slot " + m[3]
	}
	if len(seen) != 2 || seen["nvme0n1"] == "" || seen["nvme1n1"] == "" ||
		strings.Fields(seen["nvme0n1"])[0] != strings.Fields(seen["nvme1n1"])[0] {
		t.Errorf("host OS reported md members %v, want nvme0n1 and nvme1n1 of one array", seen)
	}

	// From outside: both drive files are members of one array and hold
	// the same image bytes.
	paths := []string{n.Disk, n.ExtraDisks[0]}
	var sbs []*mdraid.Superblock
	for _, p := range paths {
		sb, err := mdraid.Examine(p)
		if err != nil {
			t.Fatal(err)
		}
		sbs = append(sbs, sb)
	}
	uuid, err := mdraid.CheckMembers("raid1", paths, sbs)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.Stat(env.HostOS.RawPath)
	if err != nil {
		t.Fatal(err)
	}
	a, b := readPrefix(t, paths[0], raw.Size()), readPrefix(t, paths[1], raw.Size())
	if !bytes.Equal(a, b) || bytes.Count(a, []byte{0}) == len(a) {
		t.Errorf("the members' first %d bytes differ (or are all zero)", raw.Size())
	}
	t.Logf("TestSoftwareRAIDInstall: array %s on %v in %s", uuid, paths, time.Since(began).Round(time.Second))
}

func readPrefix(t *testing.T, p string, n int64) []byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := io.ReadFull(f, b); err != nil {
		t.Fatal(err)
	}
	return b
}
