package nvmefw

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Resetter performs the resets a commit can ask for.
type Resetter interface {
	// ResetController resets the controller (CC.EN 1 -> 0 -> 1), a
	// Controller Level Reset.
	ResetController() error
	// ResetSubsystem writes NSSR ("NVMe"); controllers without NSSRS
	// support fail it and the caller falls back to a reboot.
	ResetSubsystem() error
}

// linux/nvme_ioctl.h: NVME_IOCTL_RESET _IO('N', 0x44) and
// NVME_IOCTL_SUBSYS_RESET _IO('N', 0x45): no direction, no size.
const (
	ioctlReset       = 'N'<<8 | 0x44
	ioctlSubsysReset = 'N'<<8 | 0x45
)

// DeviceResetter resets the controller behind a /dev/nvmeN character device.
type DeviceResetter struct{ Path string }

var _ Resetter = DeviceResetter{}

func (d DeviceResetter) ResetController() error { return d.ioctl(ioctlReset, "NVME_IOCTL_RESET") }
func (d DeviceResetter) ResetSubsystem() error {
	return d.ioctl(ioctlSubsysReset, "NVME_IOCTL_SUBSYS_RESET")
}

func (d DeviceResetter) ioctl(req uintptr, name string) error {
	f, err := os.OpenFile(d.Path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	defer f.Close()
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), req, 0); errno != 0 {
		return fmt.Errorf("%s on %s: %w", name, d.Path, errno)
	}
	return nil
}
