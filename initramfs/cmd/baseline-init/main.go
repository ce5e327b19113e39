//go:build linux

// Command baseline-init is the /init of the boot-time baseline image: no
// u-root, no modules, nothing but a static Go binary that reports when the
// kernel handed over and powers off. The e2e harness compares
// QEMU-start→this line against QEMU-start→runner registered.
package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

func main() {
	// /proc may not exist in the archive; mkdir errors are harmless then.
	_ = os.Mkdir("/proc", 0o555)
	msg := "CURE-BASELINE-INIT uptime=unknown\n"
	if err := syscall.Mount("proc", "/proc", "proc", 0, ""); err == nil {
		if b, err := os.ReadFile("/proc/uptime"); err == nil {
			if f := strings.Fields(string(b)); len(f) > 0 {
				msg = fmt.Sprintf("CURE-BASELINE-INIT uptime=%s\n", f[0])
			}
		}
	}
	if c, err := os.OpenFile("/dev/console", os.O_WRONLY, 0); err == nil {
		c.WriteString(msg)
		c.Close()
	} else {
		os.Stdout.WriteString(msg)
	}
	syscall.Sync()
	// PID 1 must not exit (that panics the kernel); power off instead.
	if err := syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		fmt.Fprintf(os.Stderr, "CURE-BASELINE-INIT poweroff failed: %v\n", err)
	}
	for {
		time.Sleep(time.Hour)
	}
}
