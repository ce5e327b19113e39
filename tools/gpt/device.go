package gpt

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"
)

// FixDevice relocates the backup GPT of path (a block device or an image
// file) to its end and, when grow > 0 (or GrowLast), grows that partition
// to the end.
// It returns the plan it applied (Noop when nothing was needed). On a
// block device it uses the logical sector size (BLKSSZGET), syncs and asks
// the kernel to re-read the table (BLKRRPART).
func FixDevice(path string, grow int) (*Plan, error) {
	return changeDevice(path, grow, "")
}

// AddPartitionDevice adds a Linux data partition named name over the free
// space after the last partition of path's GPT (PlanAdd), moving the
// backup GPT to the end first if needed, and returns its number.
func AddPartitionDevice(path, name string) (int, error) {
	p, err := changeDevice(path, 0, name)
	if err != nil {
		return 0, err
	}
	return p.Add.Number, nil
}

func changeDevice(path string, grow int, add string) (*Plan, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("gpt: open %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("gpt: stat %s: %w", path, err)
	}
	block := fi.Mode()&os.ModeDevice != 0 && fi.Mode()&os.ModeCharDevice == 0
	if !block && !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("gpt: %s: expected a block device or regular file, found mode %v", path, fi.Mode())
	}
	size, err := f.Seek(0, io.SeekEnd) // works for block devices, unlike Stat
	if err != nil {
		return nil, fmt.Errorf("gpt: size of %s: %w", path, err)
	}
	ss := 512
	if block {
		if ss, err = unix.IoctlGetInt(int(f.Fd()), unix.BLKSSZGET); err != nil {
			return nil, fmt.Errorf("gpt: %s: ioctl BLKSSZGET: %w", path, err)
		}
	}
	t, err := Read(f, ss, size)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	p, err := PlanFix(t, size, grow, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if add != "" {
		if err := PlanAdd(t, p, add); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if p.Noop() {
		return p, nil
	}
	if err := Apply(f, f, t, p); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("gpt: fsync %s: %w", path, err)
	}
	if block {
		if err := unix.IoctlSetInt(int(f.Fd()), unix.BLKRRPART, 0); err != nil {
			return nil, fmt.Errorf("gpt: %s: ioctl BLKRRPART after rewriting the table: %w", path, err)
		}
	}
	slog.Info("gpt fixed", "device", path, "change", p.String())
	return p, nil
}
