package opal

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Device is an open block (or sg) device that implements Ioctler and SGIO.
type Device struct {
	f    *os.File
	path string
}

var (
	_ Ioctler = (*Device)(nil)
	_ SGIO    = (*Device)(nil)
)

// OpenDevice opens a block device such as /dev/nvme0n1 or /dev/sda for
// sed-opal ioctls and SG_IO. It must be the whole disk: sed-opal acts on
// the drive, and a partition node would hide that.
func OpenDevice(path string) (*Device, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s for opal: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if fi.Mode()&os.ModeDevice == 0 {
		f.Close()
		return nil, fmt.Errorf("open %s for opal: expected a device node, found mode %v", path, fi.Mode())
	}
	return &Device{f: f, path: path}, nil
}

// Path is the device path.
func (d *Device) Path() string { return d.path }

// Close closes the device.
func (d *Device) Close() error { return d.f.Close() }

// Ioctl passes arg's backing array to the kernel.
func (d *Device) Ioctl(req uint32, arg []byte) (int, error) {
	var p unsafe.Pointer
	if len(arg) > 0 {
		p = unsafe.Pointer(&arg[0])
	}
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, d.f.Fd(), uintptr(req), uintptr(p))
	runtime.KeepAlive(arg)
	runtime.KeepAlive(d.f)
	if errno != 0 {
		return 0, errno
	}
	return int(int32(r)), nil
}

// SGIO submits cmd through the SG_IO ioctl.
func (d *Device) SGIO(cmd *SCSICommand) (*SCSIResult, error) {
	h, err := newSGIOHdr(cmd)
	if err != nil {
		return nil, err
	}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, d.f.Fd(), ioctlSGIO, uintptr(unsafe.Pointer(h)))
	runtime.KeepAlive(cmd)
	runtime.KeepAlive(d.f)
	if errno != 0 {
		return nil, fmt.Errorf("SG_IO on %s: %w", d.path, errno)
	}
	return h.result(cmd), nil
}
