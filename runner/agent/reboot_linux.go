package agent

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// SystemRebooter syncs filesystems and restarts the machine.
type SystemRebooter struct{}

// Reboot implements Rebooter.
func (SystemRebooter) Reboot() error {
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART); err != nil {
		return fmt.Errorf("reboot(LINUX_REBOOT_CMD_RESTART): %w", err)
	}
	return nil
}
