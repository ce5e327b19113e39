package storage

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// OpenDirect opens a block device with O_DIRECT so reads measure the
// device, not the page cache. It refuses anything but a block device: a
// typo must not create or truncate a regular file.
func OpenDirect(path string, write bool) (File, error) {
	flags := os.O_RDONLY
	if write {
		flags = os.O_RDWR
	}
	f, err := os.OpenFile(path, flags|unix.O_DIRECT, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if fi.Mode()&os.ModeDevice == 0 || fi.Mode()&os.ModeCharDevice != 0 {
		f.Close()
		return nil, fmt.Errorf("open %s: %w (mode %v)", path, errNotBlock, fi.Mode())
	}
	return f, nil
}
