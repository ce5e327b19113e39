package diskimage

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// target is the device seam: a regular file in tests, a block device on
// a node. Only block devices get partition re-reads and cache drops.
type target interface {
	io.Writer
	io.Seeker
	Sync() error
	Close() error
	// RereadPartitions makes the kernel pick up the partition table just
	// written (BLKRRPART); a no-op for regular files.
	RereadPartitions() error
}

type fileTarget struct {
	*os.File
	block bool
}

// openTarget opens an existing regular file or block device for writing.
// It never creates the path: a missing /dev node must not turn into a
// regular file in devtmpfs that "succeeds". No O_TRUNC: block devices
// cannot be truncated and regular files are overwritten in place.
func openTarget(path string) (*fileTarget, error) {
	block, err := kind(path)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("open target for writing: %w", err)
	}
	return &fileTarget{File: f, block: block}, nil
}

// kind reports whether path is a block device, and rejects anything that
// is neither a block device nor a regular file.
func kind(path string) (block bool, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return false, fmt.Errorf("target: %w", err)
	}
	m := fi.Mode()
	switch {
	case m.IsRegular():
		return false, nil
	case m&os.ModeDevice != 0 && m&os.ModeCharDevice == 0:
		return true, nil
	}
	return false, fmt.Errorf("target %s: expected a block device or regular file, found mode %v", path, m)
}

func (t *fileTarget) RereadPartitions() error {
	if !t.block {
		return nil
	}
	// EBUSY means something still holds a partition open (a mount, a
	// stale udev probe elsewhere); give it a moment, then report.
	var err error
	for range 5 {
		if err = unix.IoctlSetInt(int(t.Fd()), unix.BLKRRPART, 0); err != unix.EBUSY {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("ioctl BLKRRPART: %w", err)
	}
	return nil
}

// dropCache discards the block device's page cache (BLKFLSBUF) so a
// read-back comes from the medium rather than from memory.
func dropCache(f *os.File) error {
	return unix.IoctlSetInt(int(f.Fd()), unix.BLKFLSBUF, 0)
}
