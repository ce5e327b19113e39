package diskimage

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// target is the device seam: a regular file in tests, a block device on
// a node. Offsets are absolute; nothing depends on a file position.
type target interface {
	WriteAt(p []byte, off int64) (int, error)
	// ZeroRange makes [off, off+n) read back as zeros without sending
	// the zeros: BLKZEROOUT on a block device (Write Zeroes, unmapping
	// where the device guarantees zeroes), a punched hole in a file.
	ZeroRange(off, n int64) error
	// Extend grows a regular file to size when skipped or punched zeros
	// at its end left it shorter; a no-op for block devices.
	Extend(size int64) error
	Sync() error
	Close() error
	// RereadPartitions makes the kernel pick up the partition table just
	// written (BLKRRPART); a no-op for regular files.
	RereadPartitions() error
}

type fileTarget struct {
	path  string
	f     *os.File // O_DIRECT when direct
	plain *os.File // buffered, for writes O_DIRECT cannot take; opened on demand
	block bool
	// direct reports that f bypasses the page cache; align is the
	// alignment O_DIRECT needs for offsets, lengths and buffers.
	direct bool
	align  int64
}

// openTarget opens an existing regular file or block device for writing,
// with O_DIRECT when wantDirect and the filesystem or device accepts it.
// It never creates the path: a missing /dev node must not turn into a
// regular file in devtmpfs that "succeeds". No O_TRUNC: block devices
// cannot be truncated and regular files are overwritten in place.
func openTarget(path string, wantDirect bool) (*fileTarget, error) {
	block, err := kind(path)
	if err != nil {
		return nil, err
	}
	t := &fileTarget{path: path, block: block, align: 4096}
	if wantDirect {
		// tmpfs and some filesystems refuse O_DIRECT with EINVAL: fall back
		// to the page cache rather than fail.
		if f, err := os.OpenFile(path, os.O_WRONLY|unix.O_DIRECT, 0); err == nil {
			t.f, t.direct = f, true
		}
	}
	if t.f == nil {
		if t.f, err = os.OpenFile(path, os.O_WRONLY, 0); err != nil {
			return nil, fmt.Errorf("open target for writing: %w", err)
		}
	}
	if block {
		if ss, err := unix.IoctlGetInt(int(t.f.Fd()), unix.BLKSSZGET); err == nil && ss > 0 {
			t.align = max(int64(ss), 512)
		}
	}
	return t, nil
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

func (t *fileTarget) aligned(p []byte, off int64) bool {
	return off%t.align == 0 && int64(len(p))%t.align == 0 &&
		len(p) > 0 && int64(uintptr(unsafe.Pointer(&p[0])))%t.align == 0
}

func (t *fileTarget) WriteAt(p []byte, off int64) (int, error) {
	if !t.direct || t.aligned(p, off) {
		return t.f.WriteAt(p, off)
	}
	// An aligned start with a ragged end (the image's last block): the
	// aligned part still goes direct.
	if head := int64(len(p)) / t.align * t.align; head > 0 && t.aligned(p[:head], off) {
		n, err := t.f.WriteAt(p[:head], off)
		if err != nil {
			return n, err
		}
		m, err := t.WriteAt(p[head:], off+head)
		return n + m, err
	}
	// The image's unaligned tail goes through the page cache; Sync
	// flushes it.
	if t.plain == nil {
		f, err := os.OpenFile(t.path, os.O_WRONLY, 0)
		if err != nil {
			return 0, fmt.Errorf("open %s without O_DIRECT for an unaligned write: %w", t.path, err)
		}
		t.plain = f
	}
	return t.plain.WriteAt(p, off)
}

func (t *fileTarget) ZeroRange(off, n int64) error {
	if n <= 0 {
		return nil
	}
	var err error
	if t.block {
		r := [2]uint64{uint64(off), uint64(n)}
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, t.f.Fd(), unix.BLKZEROOUT, uintptr(unsafe.Pointer(&r[0]))); e != 0 {
			err = fmt.Errorf("ioctl BLKZEROOUT [%d, +%d): %w", off, n, e)
		}
	} else if e := unix.Fallocate(int(t.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n); e != nil {
		err = fmt.Errorf("fallocate PUNCH_HOLE [%d, +%d): %w", off, n, e)
	}
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOTTY) && !errors.Is(err, unix.EINVAL) {
		return err
	}
	// No offload here: write the zeros.
	z := alignedBuf(int(min(n, 1<<20)), int(t.align))
	for done := int64(0); done < n; {
		k := min(int64(len(z)), n-done)
		if _, werr := t.WriteAt(z[:k], off+done); werr != nil {
			return fmt.Errorf("write zeros at %d (no zero offload: %v): %w", off+done, err, werr)
		}
		done += k
	}
	return nil
}

func (t *fileTarget) Extend(size int64) error {
	if t.block {
		return nil
	}
	fi, err := t.f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() < size {
		return t.f.Truncate(size)
	}
	return nil
}

func (t *fileTarget) Sync() error {
	if t.plain != nil {
		if err := t.plain.Sync(); err != nil {
			return err
		}
	}
	return t.f.Sync()
}

func (t *fileTarget) Close() error {
	var err error
	if t.plain != nil {
		err = t.plain.Close()
	}
	return errors.Join(err, t.f.Close())
}

func (t *fileTarget) RereadPartitions() error {
	if !t.block {
		return nil
	}
	// EBUSY means something still holds a partition open (a mount, a
	// stale udev probe elsewhere); give it a moment, then report.
	var err error
	for range 5 {
		if err = unix.IoctlSetInt(int(t.f.Fd()), unix.BLKRRPART, 0); err != unix.EBUSY {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err == unix.EINVAL {
		// The device cannot carry partitions (a loop device without
		// partscan): nothing for the kernel to re-read.
		slog.Warn("device does not support partitions; BLKRRPART skipped", "target", t.path)
		return nil
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

// alignedBuf returns n bytes starting on an align boundary, as O_DIRECT
// requires of user buffers.
func alignedBuf(n, align int) []byte {
	b := make([]byte, n+align)
	off := 0
	if r := int(uintptr(unsafe.Pointer(&b[0]))) % align; r != 0 {
		off = align - r
	}
	return b[off : off+n : off+n]
}

// hugePage is the transparent huge page size on x86-64 and arm64 (4 KiB
// base pages).
const hugePage = 2 << 20

// hugeBuf returns n bytes aligned to hugePage and, where the kernel has
// transparent huge pages in madvise mode, backed by them. The stages'
// buffers are touched at memory speed and pinned for every O_DIRECT
// write: with 4 KiB pages that is 1024 page pins and as many TLB entries
// per 4 MiB block (about 5 % of an incompressible install's CPU here),
// with huge pages two. It stays ordinary Go memory, so no buffer can
// outlive its last user; the advice is best effort.
func hugeBuf(n int) []byte {
	b := alignedBuf(n, hugePage)
	if n >= hugePage {
		unix.Madvise(b[:n/hugePage*hugePage], unix.MADV_HUGEPAGE)
	}
	return b
}
