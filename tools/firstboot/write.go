package firstboot

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"
)

// Mounter is the mount seam: the kernel on a node, a directory in tests.
type Mounter interface {
	Mount(dev, dir, fstype string) error
	Unmount(dir string) error
}

// SyscallMounter mounts with mount(2) and umount(2).
type SyscallMounter struct{}

// Mount mounts dev on dir without exec, suid or device nodes: the seed
// partition holds data only.
func (SyscallMounter) Mount(dev, dir, fstype string) error {
	if err := unix.Mount(dev, dir, fstype, unix.MS_NOEXEC|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, ""); err != nil {
		return fmt.Errorf("mount %s (%s) on %s: %w", dev, fstype, dir, err)
	}
	return nil
}

// Unmount unmounts dir.
func (SyscallMounter) Unmount(dir string) error {
	if err := unix.Unmount(dir, 0); err != nil {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	return nil
}

// WriteSeed renders s, mounts part (vfat) on a fresh directory under
// tmpDir, writes and fsyncs meta-data, user-data and network-config, and
// unmounts. The seed is rendered before anything is mounted, so bad input
// never touches the partition.
func WriteSeed(part string, s Seed, m Mounter, tmpDir string) (err error) {
	files, err := s.Files()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(tmpDir, "cidata-")
	if err != nil {
		return fmt.Errorf("write seed to %s: mount point: %w", part, err)
	}
	defer func() {
		if rerr := os.Remove(dir); rerr != nil && err == nil {
			err = fmt.Errorf("write seed to %s: remove mount point: %w", part, rerr)
		}
	}()
	if err := m.Mount(part, dir, "vfat"); err != nil {
		return fmt.Errorf("write seed to %s: %w", part, err)
	}
	defer func() {
		if uerr := m.Unmount(dir); uerr != nil {
			err = errors.Join(err, fmt.Errorf("write seed to %s: %w", part, uerr))
		}
	}()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := writeSynced(filepath.Join(dir, n), files[n]); err != nil {
			return fmt.Errorf("write seed to %s: %w", part, err)
		}
	}
	// Make the directory entries durable too before the unmount.
	if d, err := os.Open(dir); err == nil {
		serr := d.Sync()
		d.Close()
		if serr != nil {
			return fmt.Errorf("write seed to %s: fsync directory: %w", part, serr)
		}
	}
	slog.Info("cloud-init seed written", "partition", part, "instance_id", s.InstanceID, "hostname", s.Hostname, "files", names)
	return nil
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return f.Close()
}
