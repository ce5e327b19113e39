package storage

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/checks"
)

// flaky returns different bytes on every read of one block: a device whose
// readback does not verify.
type flaky struct {
	*os.File
	at    int64
	reads int
}

func (f *flaky) ReadAt(b []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(b, off)
	if off == f.at {
		f.reads++
		b[0] ^= byte(f.reads)
	}
	return n, err
}

// corrupting drops one bit of every write at offset at.
type corrupting struct {
	*os.File
	at int64
}

func (f corrupting) WriteAt(b []byte, off int64) (int, error) {
	if off == f.at {
		b = append([]byte(nil), b...)
		b[5] ^= 1
	}
	return f.File.WriteAt(b, off)
}

func setup(t *testing.T) (string, func() ([]blockdev.Disk, error)) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "dev"), 0o755)
	disks := []blockdev.Disk{
		{Name: "nvme0n1", SizeBytes: 1 << 20, BootMedium: true},
		{Name: "nvme1n1", SizeBytes: 1 << 20},
		{Name: "nvme2n1", SizeBytes: 1 << 20, Holders: []string{"md127"}},
	}
	for i, d := range disks {
		b := make([]byte, d.SizeBytes)
		for j := range b {
			b[j] = byte(j*7 + i)
		}
		if err := os.WriteFile(filepath.Join(root, "dev", d.Name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root, func() ([]blockdev.Disk, error) { return disks, nil }
}

func plainOpen(path string, write bool) (File, error) {
	flag := os.O_RDONLY
	if write {
		flag = os.O_RDWR
	}
	return os.OpenFile(path, flag, 0)
}

func TestStorage(t *testing.T) {
	ctx := context.Background()

	t.Run("read and verify", func(t *testing.T) {
		root, disks := setup(t)
		var opened []string
		o := Options{Root: root, Disks: disks, Length: 512 << 10, BlockSize: 64 << 10, Verify: true,
			ReadMBps: checks.AtLeast(0.001),
			Select:   func(c string) bool { return c != "disk/nvme2n1" },
			Open: func(p string, w bool) (File, error) {
				if w {
					t.Errorf("opened %s for writing in a read-only check", p)
				}
				opened = append(opened, filepath.Base(p))
				f, err := plainOpen(p, false)
				if filepath.Base(p) == "nvme1n1" {
					return &flaky{File: f.(*os.File), at: 128 << 10}, err
				}
				return f, err
			}}
		vs, err := Check(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(opened, ",") != "nvme0n1,nvme1n1" || len(vs) != 2 {
			t.Fatalf("opened %v, verdicts %v", opened, vs)
		}
		if v := vs[0]; v.Component != "disk/nvme0n1" || v.Status != checks.Pass || !strings.Contains(v.Observed, "readMB=0.52 readbackMismatches=0") {
			t.Errorf("healthy disk: %s", v)
		}
		if v := vs[1]; v.Status != checks.Fail || !strings.Contains(v.Message, "readbackMismatches=1 outside readbackMismatches<=0") || !strings.Contains(v.Message, "first differing block at byte 131072") {
			t.Errorf("flaky disk: %s", v)
		}
	})

	t.Run("scratch write", func(t *testing.T) {
		root, disks := setup(t)
		before, _ := os.ReadFile(filepath.Join(root, "dev/nvme1n1"))
		o := Options{Root: root, Disks: disks, Length: 64 << 10, BlockSize: 16 << 10,
			Select: func(c string) bool { return false }, // the scratch disk is judged anyway
			Write:  &Scratch{Device: "nvme1n1", Offset: 256 << 10, Length: 128 << 10},
			Open:   plainOpen}
		vs, err := Check(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if len(vs) != 1 || vs[0].Component != "disk/nvme1n1" || vs[0].Status != checks.Pass || !strings.Contains(vs[0].Observed, "writeVerifyMismatches=0") {
			t.Fatalf("verdicts %v", vs)
		}
		after, _ := os.ReadFile(filepath.Join(root, "dev/nvme1n1"))
		if string(after[:256<<10]) != string(before[:256<<10]) || string(after[384<<10:]) != string(before[384<<10:]) {
			t.Error("bytes outside the scratch range changed")
		}
		if string(after[256<<10:384<<10]) == string(before[256<<10:384<<10]) {
			t.Error("scratch range was not written")
		}
		// A device that corrupts a write fails the readback.
		o.Open = func(p string, w bool) (File, error) {
			f, err := plainOpen(p, w)
			return corrupting{File: f.(*os.File), at: 272 << 10}, err
		}
		vs, err = Check(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		if vs[0].Status != checks.Fail || !strings.Contains(vs[0].Message, "scratch readback differs first in the block at byte 278528") {
			t.Errorf("corrupting disk: %s", vs[0])
		}
	})

	t.Run("refusals", func(t *testing.T) {
		root, disks := setup(t)
		for _, c := range []struct {
			s    Scratch
			want string
		}{
			{Scratch{Device: "nvme0n1", Length: 4096}, "boot medium"},
			{Scratch{Device: "nvme2n1", Length: 4096}, "in use by md127"},
			{Scratch{Device: "nvme*", Length: 4096}, "exactly one disk"},
			{Scratch{Device: "nvme9n1", Length: 4096}, `"nvme9n1" not found`},
			{Scratch{Device: "nvme1n1", Offset: 1 << 20, Length: 4096}, "ends past the disk"},
			{Scratch{Device: "nvme1n1", Offset: 100, Length: 4096}, "multiples of 4096"},
		} {
			s := c.s
			_, err := Check(ctx, Options{Root: root, Disks: disks, Write: &s, Open: func(p string, w bool) (File, error) {
				t.Errorf("%+v: opened %s despite the refusal", s, p)
				return plainOpen(p, w)
			}})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%+v: err = %v, want %q", s, err, c.want)
			}
		}
		// Boot-medium detection that fails refuses writes too.
		_, err := Check(ctx, Options{Root: root, Write: &Scratch{Device: "nvme1n1", Length: 4096}})
		if err == nil || !strings.Contains(err.Error(), "refusing") && !strings.Contains(err.Error(), "list block devices") {
			t.Errorf("no sysfs: err = %v", err)
		}
	})

	t.Run("real open refuses regular files", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "f")
		os.WriteFile(p, make([]byte, 4096), 0o644)
		if _, err := OpenDirect(p, false); err == nil {
			t.Error("OpenDirect accepted a regular file")
		}
	})
}
