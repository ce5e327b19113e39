package opal

import (
	"os"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cure-oss/cure/tools/sgio"
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
	f, err := sgio.OpenDevice(path, "opal")
	if err != nil {
		return nil, err
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

// SGIO submits cmd through the SG_IO ioctl. Direction values are the
// SG_DXFER_* ones sgio uses.
func (d *Device) SGIO(cmd *SCSICommand) (*SCSIResult, error) {
	r, err := sgio.Do(d.f, &sgio.Request{
		CDB:     cmd.CDB,
		Dir:     sgio.Direction(cmd.Dir),
		Data:    cmd.Data,
		Sense:   cmd.Sense,
		Timeout: time.Duration(cmd.TimeoutMs) * time.Millisecond,
	})
	if err != nil {
		return nil, err
	}
	return &SCSIResult{Status: r.Status, HostStatus: r.HostStatus, DriverStatus: r.DriverStatus, Resid: r.Resid, Sense: r.Sense}, nil
}
