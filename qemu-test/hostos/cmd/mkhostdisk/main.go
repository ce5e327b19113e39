// Command mkhostdisk assembles the QEMU tests' host OS disk image from a
// kernel and an initramfs (cure-build --spec qemu-test/hostos/hostos.yaml):
//
//	mkhostdisk --kernel out/hostos/vmlinuz --initrd out/hostos/initramfs.cpio.zst --out out/hostdisk
//
// It writes disk.raw, disk.raw.zst, disk.raw.gz and disk.json.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/cure-oss/cure/qemu-test/hostos/hostdisk"
	"github.com/cure-oss/cure/tools/version"
)

func main() {
	kernel := flag.String("kernel", "out/hostos/vmlinuz", "kernel image")
	initrd := flag.String("initrd", "out/hostos/initramfs.cpio.zst", "initramfs")
	out := flag.String("out", "out/hostdisk", "output directory")
	appendArgs := flag.String("append", "console=ttyS0 panic=-1", "kernel parameters")
	size := flag.Int("size-mib", 64, "disk size in MiB")
	cidata := flag.Int("cidata-mib", 8, "CIDATA partition size in MiB")
	stub := flag.String("efi-stub", "/usr/lib/systemd/boot/efi/linuxx64.efi.stub", "EFI stub (systemd-boot-efi) for the UEFI boot path (\\EFI\\BOOT\\BOOTX64.EFI); empty: BIOS only")
	printVersion := version.Flag(flag.CommandLine, "mkhostdisk")
	flag.Parse()
	if printVersion(os.Stdout) {
		os.Exit(0)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*kernel, *initrd, *out, *appendArgs, *stub, *size, *cidata, log); err != nil {
		fmt.Fprintln(os.Stderr, "mkhostdisk:", err)
		os.Exit(1)
	}
}

func run(kernel, initrd, out, appendArgs, stub string, size, cidata int, log *slog.Logger) error {
	plan, err := hostdisk.NewPlan(hostdisk.Options{
		Kernel: kernel, Initrd: initrd, Append: appendArgs, SizeMiB: size, CIDataMiB: cidata, EFIStub: stub,
		FileSizes: hostdisk.StatSize,
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	man, err := hostdisk.Assemble(ctx, plan, out, hostdisk.ExecRunner, log)
	if err != nil {
		return err
	}
	for _, f := range man.Files {
		log.Info("wrote", "file", f.Name, "size", f.Size, "sha256", f.SHA256)
	}
	return nil
}
