// Command cure-build builds a CURE initramfs from an image spec:
//
//	cure-build --spec initramfs/cure.yaml --kernel-root .cache/kernel/root \
//	    --ca out/pki/ca.pem --out out/image [--driver-bundle nvidia-570.tar.zst]
//
// With --baseline it instead builds the boot-time baseline image (a static
// init that prints its uptime and powers off) with the same kernel.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"

	"github.com/cure-oss/cure/builder"
	"github.com/cure-oss/cure/builder/spec"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cure-build:", err)
		os.Exit(1)
	}
}

func run() error {
	specFile := flag.String("spec", "initramfs/cure.yaml", "image spec (YAML)")
	kernelRoot := flag.String("kernel-root", ".cache/kernel/root", "extracted kernel package (boot/vmlinuz-*, lib/modules/*)")
	out := flag.String("out", "out/image", "output directory")
	ca := flag.String("ca", "", "site CA certificate to bake in at the spec's ca_path")
	uinit := flag.String("uinit", "", "override the spec's uinit import path")
	baseline := flag.Bool("baseline", false, "build the boot-time baseline image instead of the spec")
	cmdline := flag.String("baseline-cmdline", "console=ttyS0 panic=-1", "default kernel parameters of the baseline image")
	keep := flag.Bool("cpio", false, "also keep the uncompressed initramfs.cpio")
	bundle := flag.String("driver-bundle", "", "site GPU driver bundle, a directory or .tar[.gz|.zst|.xz] (modules/, firmware/, lib/, bin/, share/, etc/); its modules must match the kernel's vermagic")
	var tools toolList
	flag.Var(&tools, "tool", "extra host file for the image, HOSTPATH[:IMAGEPATH] (repeatable; ELF shared libraries come along)")
	flag.Parse()
	if flag.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	if *baseline {
		_, err := builder.BuildBaseline(ctx, builder.BaselineOptions{
			KernelRoot: *kernelRoot, OutDir: *out, Cmdline: *cmdline, KeepCPIO: *keep, Log: log,
		})
		return err
	}
	s, err := spec.Load(*specFile)
	if err != nil {
		return err
	}
	_, err = builder.Build(ctx, builder.Options{
		Spec: s, KernelRoot: *kernelRoot, OutDir: *out, CA: *ca, Uinit: *uinit, KeepCPIO: *keep, Tools: tools, Log: log,
		DriverBundle: *bundle,
	})
	return err
}

// toolList collects repeated --tool flags.
type toolList []string

func (l *toolList) String() string { return strings.Join(*l, ",") }

func (l *toolList) Set(v string) error {
	*l = append(*l, v)
	return nil
}
