// Command cure-build builds a CURE initramfs from an image spec:
//
//	cure-build --spec initramfs/cure.yaml --kernel-root .cache/kernel/root \
//	    --state-dir state --out out/image [--driver-bundle nvidia-570.tar.zst]
//
// --state-dir is the coordinator's state dir (`provisioner-lite init`): the
// image trusts its CA (pki/ca.pem) and report.json records that CA's
// fingerprint, which the coordinator checks at start. --ca names a CA file
// instead. --driver-bundle adds a site's NVIDIA driver bundle; its modules
// must match the kernel's vermagic. --pin-tool-bundle out/toolbundle/toolbundle.json
// (make toolbundle) bakes the tool bundle's sha256, size and tools in at the
// spec's tool_bundle_path, for cure-tools in the debug shell.
//
// With --baseline it instead builds the boot-time baseline image (a static
// init that prints its uptime and powers off) with the same kernel.
//
// With --build-gpu-burn SRC it instead builds gpu-burn into a driver bundle
// directory, the bundle's build step for its GPU load (no network: the site
// supplies gpu-burn's source tarball and the CUDA toolkit its driver
// supports; builder/driverbundle.BuildGPUBurn, docs/VALIDATION.md):
//
//	cure-build --build-gpu-burn gpu-burn-1.2.tar.gz --gpu-burn-version v1.2 \
//	    --cuda /usr/local/cuda-12.8 --cuda-compute 90 --into nvidia-bundle/
//
// It runs gpu-burn's Makefile with the toolkit's nvcc, installs bin/gpu_burn,
// share/gpu-burn/compare.ptx and the CUDA libraries gpu_burn links into the
// bundle, and pins each by sha256 in its gpu-tools.yaml; --driver-bundle
// then refuses the bundle if any of them changes.
//
// With --tool-bundle SPEC it instead packs the tool bundle (fio, stress-ng,
// iperf3 with their libraries; builder/toolbundle) into --out as
// toolbundle.tar.zst and toolbundle.json, and lists its contents.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/cure-oss/cure/builder"
	"github.com/cure-oss/cure/builder/driverbundle"
	"github.com/cure-oss/cure/builder/spec"
	"github.com/cure-oss/cure/builder/toolbundle"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/tools/version"
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
	ca := flag.String("ca", "", "site CA certificate to bake in at the spec's ca_path (or --state-dir)")
	stateDir := flag.String("state-dir", "", "the coordinator's state dir (provisioner-lite init): bake its CA, STATE/pki/ca.pem")
	uinit := flag.String("uinit", "", "override the spec's uinit import path")
	baseline := flag.Bool("baseline", false, "build the boot-time baseline image instead of the spec")
	cmdline := flag.String("baseline-cmdline", "console=ttyS0 panic=-1", "default kernel parameters of the baseline image")
	keep := flag.Bool("cpio", false, "also keep the uncompressed initramfs.cpio")
	bundle := flag.String("driver-bundle", "", "site GPU driver bundle, a directory or .tar[.gz|.zst|.xz] (modules/, firmware/, lib/, bin/, share/, etc/); its modules must match the kernel's vermagic")
	toolBundle := flag.String("tool-bundle", "", "pack the tool bundle this spec names (initramfs/toolbundle.yaml) into --out instead of building an image")
	pinBundle := flag.String("pin-tool-bundle", "", "the built tool bundle's toolbundle.json (make toolbundle: out/toolbundle/toolbundle.json) whose sha256, size and tools the image pins at the spec's tool_bundle_path")
	ukiFlag := flag.String("uki", "auto", "also build the signed unified kernel image cure.efi: on, off, or auto (on when the Secure Boot key is found)")
	sbKey := flag.String("secureboot-key", "", "the site's Secure Boot signing key (PEM, RSA; default: STATE/pki/secureboot-key.pem)")
	sbCert := flag.String("secureboot-cert", "", "its certificate, enrolled in the nodes' db (default: STATE/pki/secureboot.pem)")
	gpuBurn := flag.String("build-gpu-burn", "", "build gpu-burn from this source tarball into the driver bundle directory --into instead of building an image")
	gpuBurnVersion := flag.String("gpu-burn-version", "", "with --build-gpu-burn: the gpu-burn tag or commit the tarball is")
	cuda := flag.String("cuda", "", "with --build-gpu-burn: the CUDA toolkit root (bin/nvcc, include/, lib64/) the bundle's driver supports")
	compute := flag.String("cuda-compute", "90", "with --build-gpu-burn: the compute capability of gpu-burn's compare kernel (90: H100/H200)")
	into := flag.String("into", "", "with --build-gpu-burn: the driver bundle directory")
	arch := flag.String("arch", "amd64", "target architecture: amd64 or arm64 (the Go programs are cross-compiled; --kernel-root must hold that architecture's kernel)")
	var tools toolList
	flag.Var(&tools, "tool", "extra host file for the image, HOSTPATH[:IMAGEPATH] (repeatable; ELF shared libraries come along)")
	printVersion := version.Flag(flag.CommandLine, "cure-build")
	flag.Parse()
	if printVersion(os.Stdout) {
		os.Exit(0)
	}
	if flag.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	caFile, err := caFromFlags(*ca, *stateDir)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	if *gpuBurn != "" {
		tool, err := driverbundle.BuildGPUBurn(ctx, driverbundle.GPUBurnBuild{Source: *gpuBurn, Version: *gpuBurnVersion,
			CUDA: *cuda, Compute: *compute, Bundle: *into, Log: log})
		if err != nil {
			return err
		}
		for _, f := range tool.Files {
			fmt.Printf("%s  %s\n", f.SHA256, f.Path)
		}
		return nil
	}
	if *toolBundle != "" {
		s, err := toolbundle.LoadSpec(*toolBundle)
		if err != nil {
			return err
		}
		r, err := toolbundle.Build(s, toolbundle.Host{}, *out)
		if err != nil {
			return err
		}
		fmt.Print(toolbundle.Listing(r))
		return nil
	}
	if *baseline {
		_, err := builder.BuildBaseline(ctx, builder.BaselineOptions{
			KernelRoot: *kernelRoot, OutDir: *out, Cmdline: *cmdline, KeepCPIO: *keep, Log: log, Arch: *arch,
		})
		return err
	}
	s, err := spec.Load(*specFile)
	if err != nil {
		return err
	}
	key, cert, build, err := ukiFromFlags(*ukiFlag, *sbKey, *sbCert, *stateDir)
	if err != nil {
		return err
	}
	if build, err = ukiForArch(*arch, *ukiFlag, build); err != nil {
		return err
	}
	step, doneBar := stepBar(os.Stderr)
	defer doneBar()
	if _, err = builder.Build(ctx, builder.Options{
		Spec: s, KernelRoot: *kernelRoot, OutDir: *out, CA: caFile, Uinit: *uinit, KeepCPIO: *keep, Tools: tools, Log: log,
		DriverBundle: *bundle, ToolBundlePin: *pinBundle, Step: step, Arch: *arch,
	}); err != nil {
		return err
	}
	if !build {
		return nil
	}
	_, err = builder.BuildUKI(ctx, *out, builder.UKIOptions{Key: key, Cert: cert, Log: log})
	return err
}

// ukiFromFlags decides whether to build the signed image and with which key.
func ukiFromFlags(mode, key, cert, stateDir string) (string, string, bool, error) {
	if (key == "") != (cert == "") {
		return "", "", false, errors.New("--secureboot-key and --secureboot-cert go together")
	}
	if key == "" && stateDir != "" {
		key, cert = filepath.Join(stateDir, "pki", pki.SecureBootKeyFile), filepath.Join(stateDir, "pki", pki.SecureBootCertFile)
	}
	found := key != ""
	if found {
		_, err1 := os.Stat(key)
		_, err2 := os.Stat(cert)
		found = err1 == nil && err2 == nil
	}
	switch mode {
	case "off":
		return "", "", false, nil
	case "auto":
		return key, cert, found, nil
	case "on":
		if !found {
			return "", "", false, fmt.Errorf("--uki on: no Secure Boot key and certificate (%q, %q): run `provisioner-lite pki --state-dir STATE` or pass --secureboot-key and --secureboot-cert", key, cert)
		}
		return key, cert, true, nil
	}
	return "", "", false, fmt.Errorf("--uki %q: want on, off or auto", mode)
}

// ukiForArch keeps the signed image to amd64: cure.efi is built on
// systemd-boot's x86-64 EFI stub. An arm64 node boots the arm64 kernel,
// itself an EFI application, with the initramfs (docs/ARM.md).
func ukiForArch(arch, mode string, build bool) (bool, error) {
	if arch == "amd64" || !build {
		return build, nil
	}
	if mode == "on" {
		return false, fmt.Errorf("--uki on --arch %s: the signed image is built for amd64 only", arch)
	}
	return false, nil
}

// caFromFlags is the CA file to bake in: --ca, or the state dir's.
func caFromFlags(ca, stateDir string) (string, error) {
	switch {
	case ca != "" && stateDir != "":
		return "", errors.New("--ca and --state-dir both given: give one (the state dir's CA is STATE/pki/ca.pem)")
	case stateDir == "":
		return ca, nil
	}
	p := filepath.Join(stateDir, "pki", pki.CACertFile)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("--state-dir %s: no CA (%v): create the state dir first with `provisioner-lite init --state-dir %s`", stateDir, err, stateDir)
	}
	return p, nil
}

// toolList collects repeated --tool flags.
type toolList []string

func (l *toolList) String() string { return strings.Join(*l, ",") }

func (l *toolList) Set(v string) error {
	*l = append(*l, v)
	return nil
}
