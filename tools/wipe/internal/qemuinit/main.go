//go:build linux

// Command qemuinit is the /init of TestWipeQEMUFormat's throwaway
// initramfs: it loads the NVMe driver, runs the real wipe path against
// QEMU's emulated controller (probe, plan, marker, Format NVM, verify),
// prints the outcome on the console and powers off. With cure.wipetest=sata
// on the kernel command line (TestWipeQEMUSATA) it probes QEMU's AHCI disk
// through ATA PASS-THROUGH instead and prints IDENTIFY and the plan. It
// exists only for those tests and must never be put in a CURE image.
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
	"github.com/cure-oss/cure/tools/ata"
	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/nvme"
	"github.com/cure-oss/cure/tools/opal"
	"github.com/cure-oss/cure/tools/wipe"
)

// serial is the serial the test gives QEMU's NVMe device, sataSerial the
// one TestWipeQEMUSATA gives its AHCI disk.
const (
	serial     = "CUREWIPE0001"
	sataSerial = "CUREWIPESATA1"
)

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
	cmdline, _ := os.ReadFile("/proc/cmdline")
	if strings.Contains(string(cmdline), "cure.wipetest=sata") {
		return runSATA(string(cmdline))
	}
	if err := waitForBlock("nvme0n1"); err != nil {
		return err
	}

	if err := modes.CheckWipe(modes.Wipe); err != nil {
		return err
	}
	if err := modes.CheckWipe(modes.Audit); err != nil {
		fmt.Printf("CURE-WIPE step=guard-audit err=%v\n", err)
	}
	dev, tgt, err := openTarget(string(cmdline), blockdev.Selector{Transport: "nvme", Serial: serial})
	if err != nil {
		return err
	}
	defer dev.Close()
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
	res, err := wipe.Execute(ctx, plan, dev.Handles, wipe.Credentials{}, wipe.Options{Samples: 16, AllowDestructive: true})
	if res != nil {
		j, _ := json.Marshal(res)
		fmt.Printf("CURE-WIPE-RESULT %s\n", j)
	}
	return err
}

// runSATA probes the AHCI disk the way a wipe would and prints what the
// drive reported through ATA PASS-THROUGH (16) and what the planner made
// of it. Nothing is written.
func runSATA(cmdline string) error {
	if err := waitForBlock("sda"); err != nil {
		return err
	}
	// By the serial blockdev reads from the SCSI VPD page 0x80 libata
	// builds from IDENTIFY (an sd disk has no device/serial).
	dev, tgt, err := openTarget(cmdline, blockdev.Selector{Transport: "sata", Serial: sataSerial})
	if err != nil {
		return err
	}
	defer dev.Close()
	disk := tgt.Disk
	fmt.Printf("CURE-WIPE step=blockdev name=%s transport=%s serial=%q model=%q\n", disk.Name, disk.Transport, disk.Serial, disk.Model)
	if tgt.ATA == nil {
		return fmt.Errorf("IDENTIFY DEVICE through ATA PASS-THROUGH failed: %v", tgt.ATAErr)
	}
	id := tgt.ATA
	fmt.Printf("CURE-WIPE step=ata-identify transport=%s model=%q serial=%q sectors=%d word82=%#04x word128=%#04x state=%q normal=%q enhanced=%q\n",
		disk.Transport, id.Model, id.Serial, id.Sectors, id.Word82, id.Word128, id.Security.State(), id.NormalErase, id.EnhancedErase)
	fmt.Printf("CURE-WIPE step=opal-discovery notcg=%t err=%v\n", errors.Is(tgt.OpalErr, opal.ErrNoTCG), tgt.OpalErr)
	plan, err := wipe.PlanWipe(tgt, wipe.Policy{Method: wipe.PolicyFormat, AllowWeakerFallback: true})
	if err != nil {
		fmt.Printf("CURE-WIPE step=plan-sata err=%v\n", err)
		// Show how libata reports a command the drive rejects: QEMU has no
		// Security feature set, so SET PASSWORD is aborted and changes
		// nothing (only ever sent when IDENTIFY said "not supported").
		if !id.Security.Supported {
			err := ata.SetPassword(dev.ATA, ata.User, ata.Password{})
			fmt.Printf("CURE-WIPE step=ata-abort aborted=%t err=%v\n", ata.AsError(err) != nil && ata.AsError(err).Aborted(), err)
		}
		return nil
	}
	fmt.Printf("CURE-WIPE step=plan-sata method=%s reason=%q\n", plan.Method, plan.Reason)
	return nil
}

// waitForBlock waits up to 30 s for the driver to register /sys/block/name.
func waitForBlock(name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat("/sys/block/" + name); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no /sys/block/%s after 30 s", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// openTarget picks the disk sel names the way a wipe picks (boot medium
// marked; SelectTargets refuses a disk without a serial), then opens and
// probes it. The caller closes the device.
func openTarget(cmdline string, sel blockdev.Selector) (*wipe.Device, wipe.Target, error) {
	disks, err := blockdev.List("/")
	if err != nil {
		return nil, wipe.Target{}, err
	}
	if err := blockdev.MarkBootMedium(disks, "/proc/self/mounts", cmdline); err != nil {
		return nil, wipe.Target{}, err
	}
	targets, err := wipe.SelectTargets(disks, sel)
	if err != nil {
		return nil, wipe.Target{}, err
	}
	disk := targets[0]
	dev, err := wipe.Open(disk, "/")
	if err != nil {
		return nil, wipe.Target{}, err
	}
	tgt, err := wipe.Probe(disk, &dev.Handles, dev.NVMe, wipe.Names(targets))
	if err != nil {
		dev.Close()
		return nil, wipe.Target{}, err
	}
	return dev, tgt, nil
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
