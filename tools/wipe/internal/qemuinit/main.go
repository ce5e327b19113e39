//go:build linux

// Command qemuinit is the /init of TestWipeQEMUFormat's throwaway
// initramfs: it loads the NVMe driver, runs the real wipe path against
// QEMU's emulated controller (probe, plan, marker, Format NVM, verify),
// prints the outcome on the console and powers off. It exists only for
// that test and must never be put in a CURE image.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/nvme"
	"github.com/cure-oss/cure/tools/opal"
	"github.com/cure-oss/cure/tools/wipe"
)

// serial is the serial the test gives QEMU's NVMe device.
const serial = "CUREWIPE0001"

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stdout, nil)))
	if err := run(); err != nil {
		fmt.Printf("CURE-WIPE-FAIL %v\n", err)
	} else {
		fmt.Println("CURE-WIPE-DONE ok")
	}
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		fmt.Printf("poweroff: %v\n", err)
	}
	select {}
}

func run() error {
	for _, m := range []struct{ src, dst, fs string }{
		{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"},
	} {
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(m.src, m.dst, m.fs, 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount %s: %w", m.dst, err)
		}
	}
	if err := loadModules("/modules.order"); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat("/sys/block/nvme0n1"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no /sys/block/nvme0n1 after 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}

	if err := wipe.Guard(modes.Wipe); err != nil {
		return err
	}
	if err := wipe.Guard(modes.Audit); err != nil {
		fmt.Printf("CURE-WIPE step=guard-audit err=%v\n", err)
	}
	disks, err := blockdev.List("/")
	if err != nil {
		return err
	}
	cmdline, _ := os.ReadFile("/proc/cmdline")
	if err := blockdev.MarkBootMedium(disks, "/proc/self/mounts", string(cmdline)); err != nil {
		return err
	}
	targets, err := wipe.SelectTargets(disks, blockdev.Selector{Transport: "nvme", Serial: serial})
	if err != nil {
		return err
	}
	disk := targets[0]
	dev, err := wipe.Open(disk, "/")
	if err != nil {
		return err
	}
	defer dev.Close()

	tgt, err := wipe.Probe(disk, &dev.Handles, dev.NVMe, wipe.Names(targets))
	if err != nil {
		return err
	}
	fmt.Printf("CURE-WIPE step=identify oacs=%#x sanicap=%#x fna=%#x nsid=%d lbads=%d\n",
		tgt.NVMe.OACS, tgt.NVMe.SANICAP, tgt.NVMe.FNA, tgt.NVMe.NSID, dev.Namespace.LBAFormat().LBADS)
	fmt.Printf("CURE-WIPE step=opal-discovery notcg=%t err=%v\n", errors.Is(tgt.OpalErr, opal.ErrNoTCG), tgt.OpalErr)
	if _, err := opal.GetStatus(dev.Opal); err != nil {
		fmt.Printf("CURE-WIPE step=opal-ioctl notcg=%t err=%v\n", errors.Is(err, opal.ErrNoTCG), err)
	}
	// QEMU does not implement Sanitize whatever SANICAP says; show the
	// controller's own answer. Harmless here: it is rejected, and the
	// disk is about to be formatted anyway.
	err = nvme.Sanitize(dev.Admin, nvme.SanitizeBlockErase, false)
	fmt.Printf("CURE-WIPE step=sanitize err=%v\n", err)

	if _, err := wipe.PlanWipe(tgt, wipe.Policy{Method: wipe.PolicyCryptoErase}); err != nil {
		fmt.Printf("CURE-WIPE step=plan-crypto-erase err=%v\n", err)
	}
	plan, err := wipe.PlanWipe(tgt, wipe.Policy{Method: wipe.PolicyFormat})
	if err != nil {
		return err
	}
	fmt.Printf("CURE-WIPE step=plan method=%s reason=%q\n", plan.Method, plan.Reason)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := wipe.Execute(ctx, plan, dev.Handles, wipe.Credentials{}, wipe.Options{Samples: 16})
	if res != nil {
		j, _ := json.Marshal(res)
		fmt.Printf("CURE-WIPE-RESULT %s\n", j)
	}
	return err
}

// loadModules loads each .ko named in order (paths, one per line).
func loadModules(order string) error {
	f, err := os.Open(order)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p := strings.TrimSpace(sc.Text())
		if p == "" {
			continue
		}
		m, err := os.Open(p)
		if err != nil {
			return err
		}
		err = unix.FinitModule(int(m.Fd()), "", 0)
		m.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("load %s: %w", p, err)
		}
	}
	return sc.Err()
}
