package fiocheck

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/storage"
)

const diskBytes = 16 << 20

// setup makes three "disks" (regular files fio can run against) under
// root/dev: nvme0n1 the boot medium, nvme1n1 and nvme2n1 data disks.
func setup(t *testing.T) (Options, map[string][]byte) {
	t.Helper()
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("fio is not installed (scripts/install-deps.sh installs it)")
	}
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "dev"), 0o755)
	disks := []blockdev.Disk{
		{Name: "nvme0n1", SizeBytes: diskBytes, BootMedium: true},
		{Name: "nvme1n1", SizeBytes: diskBytes},
		{Name: "nvme2n1", SizeBytes: diskBytes},
	}
	content := map[string][]byte{}
	for i, d := range disks {
		b := bytes.Repeat([]byte{byte('a' + i)}, diskBytes)
		if err := os.WriteFile(filepath.Join(root, "dev", d.Name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		content[d.Name] = b
	}
	o := Options{Root: root, Disks: func() ([]blockdev.Disk, error) { return disks, nil }, Tools: checks.HostTools,
		Runtime: time.Second, IODepth: 4, Buffered: !directIO(root)}
	return o, content
}

// directIO: tmpfs has no O_DIRECT; a test directory there runs buffered.
func directIO(dir string) bool {
	f, err := os.OpenFile(filepath.Join(dir, "dev", "nvme1n1"), os.O_RDONLY|0o40000 /* O_DIRECT */, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

func byComp(vs []checks.Verdict) map[string]checks.Verdict {
	m := map[string]checks.Verdict{}
	for _, v := range vs {
		m[v.Component] = v
	}
	return m
}

func measurement(v checks.Verdict, metric string) (checks.Measurement, bool) {
	for _, m := range v.Measurements {
		if m.Metric == metric {
			return m, true
		}
	}
	return checks.Measurement{}, false
}

// TestRandomReadPerDisk runs the real fio over two data disks at once:
// each gets a PASS with IOPS and latency percentiles in their units, the
// boot medium is not touched, and no disk changes.
func TestRandomReadPerDisk(t *testing.T) {
	o, content := setup(t)
	o.ReadIOPS, o.ReadP99Us = checks.AtLeast(1), checks.AtMost(1e7)
	vs, err := Check(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	got := byComp(vs)
	if len(vs) != 3 || got["disk/nvme0n1"].Status != checks.Skip || !strings.Contains(got["disk/nvme0n1"].Message, "boot medium") {
		t.Fatalf("verdicts %v", vs)
	}
	for _, d := range []string{"disk/nvme1n1", "disk/nvme2n1"} {
		v := got[d]
		if v.Status != checks.Pass {
			t.Errorf("%s: %v", d, v)
		}
		iops, ok := measurement(v, "randReadIOPS")
		if !ok || iops.Unit != "IOPS" || iops.Value <= 0 {
			t.Errorf("%s: randReadIOPS %+v (measurements %v)", d, iops, v.Measurements)
		}
		for _, m := range []string{"p99ReadLatencyUs", "p50ReadLatencyUs", "p99.9ReadLatencyUs"} {
			if lat, ok := measurement(v, m); !ok || lat.Unit != "us" || lat.Value <= 0 {
				t.Errorf("%s: %s %+v", d, m, lat)
			}
		}
		if mb, ok := measurement(v, "randReadMBps"); !ok || mb.Unit != "MB/s" || mb.Value <= 0 {
			t.Errorf("%s: randReadMBps %+v", d, mb)
		}
		if !strings.Contains(v.Expected, "randReadIOPS>=1") || !strings.Contains(v.Expected, "p99ReadLatencyUs<=10000000") {
			t.Errorf("%s: expected %q", d, v.Expected)
		}
	}
	for name, want := range content {
		if b, _ := os.ReadFile(filepath.Join(o.Root, "dev", name)); !bytes.Equal(b, want) {
			t.Errorf("%s changed under a read-only check", name)
		}
	}

	o.ReadIOPS = checks.AtLeast(1e12)
	vs, err = Check(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if v := byComp(vs)["disk/nvme1n1"]; v.Status != checks.Fail || !strings.Contains(v.Message, "outside randReadIOPS>=1000000000000") {
		t.Errorf("under the IOPS bar: %v", v)
	}
}

// TestScratchWrite writes only inside the scratch range of the one disk
// the suite names.
func TestScratchWrite(t *testing.T) {
	o, content := setup(t)
	const off, n = 4 << 20, 2 << 20
	o.Write = &storage.Scratch{Device: "nvme2n1", Offset: off, Length: n}
	o.WriteIOPS = checks.AtLeast(1)
	vs, err := Check(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	v := byComp(vs)["disk/nvme2n1"]
	if v.Status != checks.Pass {
		t.Fatalf("scratch disk: %v", v)
	}
	for _, m := range []string{"randReadIOPS", "randWriteIOPS", "p99WriteLatencyUs"} {
		if _, ok := measurement(v, m); !ok {
			t.Errorf("no %s in %v", m, v.Measurements)
		}
	}
	if _, ok := measurement(byComp(vs)["disk/nvme1n1"], "randWriteIOPS"); ok {
		t.Error("a disk without a scratch range was written")
	}
	b, _ := os.ReadFile(filepath.Join(o.Root, "dev", "nvme2n1"))
	want := content["nvme2n1"]
	if !bytes.Equal(b[:off], want[:off]) || !bytes.Equal(b[off+n:], want[off+n:]) {
		t.Error("bytes outside the scratch range changed")
	}
	if bytes.Equal(b[off:off+n], want[off:off+n]) {
		t.Error("the scratch range was not written")
	}
	if b, _ := os.ReadFile(filepath.Join(o.Root, "dev", "nvme1n1")); !bytes.Equal(b, content["nvme1n1"]) {
		t.Error("nvme1n1 changed")
	}

	o.Write = &storage.Scratch{Device: "nvme0n1", Offset: 0, Length: n}
	if _, err := Check(context.Background(), o); err == nil || !strings.Contains(err.Error(), "boot medium") {
		t.Errorf("scratch on the boot medium: %v", err)
	}
}

// TestJobError: a disk fio cannot open gets an ERROR naming fio's errno;
// the others are still measured.
func TestJobError(t *testing.T) {
	o, _ := setup(t)
	os.Remove(filepath.Join(o.Root, "dev", "nvme1n1"))
	vs, err := Check(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	got := byComp(vs)
	if v := got["disk/nvme1n1"]; v.Status != checks.Error || !strings.Contains(v.Message, "errno") {
		t.Errorf("missing disk: %v", v)
	}
	if v := got["disk/nvme2n1"]; v.Status != checks.Pass {
		t.Errorf("nvme2n1: %v", v)
	}
	o.Tools = nil
	if _, err := Check(context.Background(), o); err == nil {
		t.Error("ran without a way to run fio")
	}
}
