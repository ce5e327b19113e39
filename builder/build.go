// Package builder builds CURE initramfs images with u-root's mkuimage: one
// busybox of Go commands (init, uinit, debug tools), kernel modules with a
// generated modules.dep/modules.alias, external tools with their shared
// libraries, and site files. It writes vmlinuz, initramfs.cpio.{zst,gz}, an
// iPXE script template and report.json. Same inputs give the same bytes.
package builder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/cure-oss/cure/builder/driverbundle"
	"github.com/cure-oss/cure/builder/kmod"
	"github.com/cure-oss/cure/builder/spec"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/u-root/gobusybox/src/pkg/golang"
	"github.com/u-root/mkuimage/cpio"
	"github.com/u-root/mkuimage/uimage"
	"github.com/u-root/uio/llog"
)

// Options for Build.
type Options struct {
	Spec *spec.Spec
	// KernelRoot is an extracted kernel package: boot/vmlinuz-<kver> and
	// lib/modules/<kver>.
	KernelRoot string
	// OutDir receives the artifacts; created if missing.
	OutDir string
	// CA is the host path of the site CA certificate. Required exactly when
	// the spec has ca_path.
	CA string
	// Uinit overrides the spec's uinit import path.
	Uinit string
	// KeepCPIO also writes the uncompressed initramfs.cpio.
	KeepCPIO bool
	// Tools are extra host files added after the spec's tools, each
	// "HOSTPATH" or "HOSTPATH:IMAGEPATH" (build outputs such as cure-nvml,
	// site-supplied libraries). ELF files bring their shared libraries.
	Tools []string
	// DriverBundle is a site's GPU driver bundle, a directory or tarball
	// (builder/driverbundle): its modules must match the kernel's vermagic.
	DriverBundle string
	// ToolBundlePin is the built tool bundle's toolbundle.json (or its
	// directory): its sha256, size and tools go to the spec's
	// tool_bundle_path. Required exactly when the spec has one.
	ToolBundlePin string
	// Arch is the target architecture (a GOARCH name: amd64, arm64); empty
	// is amd64. The Go programs are cross-compiled for it, the spec's arch
	// entry applies, and the kernel must be of that architecture.
	Arch string
	Log  *slog.Logger
	// Step, when set, is told each of Steps as it starts (cure-build's
	// progress bar: the busybox build and zstd -22 take minutes).
	Step func(name string)
}

// Steps are the long steps of Build, in order, as Options.Step names them.
var Steps = []string{StepModules, StepBusybox, StepZstd, StepGzip, StepLZ4}

// The long steps of Build.
const (
	StepModules = "kernel modules"
	StepBusybox = "busybox"
	StepZstd    = "zstd -22"
	StepGzip    = "gzip"
	StepLZ4     = "lz4"
)

func (o Options) step(name string) {
	if o.Step != nil {
		o.Step(name)
	}
}

// Build builds the image described by o.Spec into o.OutDir.
func Build(ctx context.Context, o Options) (*Report, error) {
	start := time.Now()
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	s := o.Spec
	if s == nil {
		return nil, errors.New("build: no image spec given")
	}
	if o.Arch == "" {
		o.Arch = "amd64"
	}
	s, err := s.ForArch(o.Arch)
	if err != nil {
		return nil, err
	}
	o.Spec = s
	uinit := s.Uinit.Value
	if o.Uinit != "" {
		uinit = o.Uinit
	}
	if err := checkSiteInputs(s, o); err != nil {
		return nil, err
	}
	o.step(StepModules)
	rm, err := resolveModules(s, o)
	if err != nil {
		return nil, err
	}
	if rm.bundle != nil {
		defer rm.bundle.Close()
	}
	log.Info("kernel modules resolved", "kernel", rm.k.Version, "requested", len(s.Modules), "closure", len(rm.mods), "builtin", rm.builtin)

	base := uimage.DefaultRamfs()
	r := &Report{
		Spec:           s.File,
		Kind:           "image",
		Arch:           o.Arch,
		MissingModules: rm.missing,
		KernelVersion:  rm.k.Version,
		Init:           s.Init.Value,
		InitStandalone: s.InitStandalone.Value == "true",
		Uinit:          uinit,
		Cmdline:        s.Cmdline.Value,
		BuiltinModules: rm.builtin,
	}
	if err := addBaseRecords(base, s, o, rm, r); err != nil {
		return nil, err
	}
	if r.Tools, err = imageTools(s, o.Tools); err != nil {
		return nil, err
	}
	if err := checkToolArch(r.Tools, o.Arch); err != nil {
		return nil, err
	}
	r.Omitted = archOmissions(s, o.Arch, r.Tools)

	tmp, err := os.MkdirTemp("", "cure-build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	o.step(StepBusybox)
	archive, err := buildArchive(ctx, log, s, base, tmp, uinit, r.Tools, o.Arch)
	if err != nil {
		return nil, err
	}
	if rm.bundle != nil {
		if err := checkBundleLibraries(rm.bundle, archive); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, err
	}
	for _, m := range rm.mods {
		r.Modules = append(r.Modules, m.Name)
	}
	if err := finish(o.OutDir, archive, rm.k.Vmlinuz, o.KeepCPIO, r, o.step); err != nil {
		return nil, err
	}
	r.Totals.BuildSeconds = time.Since(start).Seconds()
	if err := writeReport(o.OutDir, r); err != nil {
		return nil, err
	}
	log.Info("image built", "out", o.OutDir, "files", r.Totals.Files,
		"cpio_bytes", r.Totals.UncompressedBytes, "zst_bytes", r.Totals.ZstBytes,
		"gz_bytes", r.Totals.GzBytes, "lz4_bytes", r.Totals.LZ4Bytes, "seconds", fmt.Sprintf("%.1f", r.Totals.BuildSeconds))
	return r, nil
}

// checkSiteInputs refuses a site input (CA, tool bundle pin) given without
// the spec path it goes to, and a spec path whose input is missing.
func checkSiteInputs(s *spec.Spec, o Options) error {
	switch {
	case s.CAPath.Value != "" && o.CA == "":
		return fmt.Errorf("%s:%d: ca_path %s needs the site CA: pass --ca", s.File, s.CAPath.Line, s.CAPath.Value)
	case s.CAPath.Value == "" && o.CA != "":
		return fmt.Errorf("%s: --ca %s given but the spec has no ca_path saying where it goes", s.File, o.CA)
	case s.ToolBundlePath.Value != "" && o.ToolBundlePin == "":
		return fmt.Errorf("%s:%d: tool_bundle_path %s needs the built tool bundle: make toolbundle, then pass --pin-tool-bundle out/toolbundle/toolbundle.json",
			s.File, s.ToolBundlePath.Line, s.ToolBundlePath.Value)
	case s.ToolBundlePath.Value == "" && o.ToolBundlePin != "":
		return fmt.Errorf("%s: --pin-tool-bundle %s given but the spec has no tool_bundle_path saying where it goes", s.File, o.ToolBundlePin)
	}
	return nil
}

// resolvedModules is the kernel and the module closure an image carries.
type resolvedModules struct {
	k       Kernel
	ix      *kmod.Index
	bundle  *driverbundle.Bundle // nil without --driver-bundle; the caller closes it
	mods    []*kmod.Module
	builtin []string
	// missing are the arch's optional modules its kernel lacks.
	missing []string
}

// resolveModules finds the kernel, opens the driver bundle if any, and
// resolves the closure of the spec's modules and the bundle's.
func resolveModules(s *spec.Spec, o Options) (*resolvedModules, error) {
	k, err := FindKernel(o.KernelRoot)
	if err != nil {
		return nil, err
	}
	if err := checkKernelArch(k.Vmlinuz, o.Arch); err != nil {
		return nil, fmt.Errorf("--kernel-root %s: %w", o.KernelRoot, err)
	}
	ix, err := kmod.Scan(k.ModulesDir)
	if err != nil {
		return nil, err
	}
	rm := &resolvedModules{k: k, ix: ix}
	want, missing := presentModules(s, o.Arch, ix)
	rm.missing = missing
	if o.DriverBundle != "" {
		if rm.bundle, err = openBundle(o.DriverBundle, k, ix); err != nil {
			return nil, err
		}
		for _, m := range rm.bundle.Modules {
			want = append(want, m.Name)
		}
	}
	rm.mods, rm.builtin, err = ix.Closure(want)
	if err != nil {
		if rm.bundle != nil {
			rm.bundle.Close()
			return nil, fmt.Errorf("%s / --driver-bundle %s: modules: %w", s.File, o.DriverBundle, err)
		}
		// A module this architecture lacks is required unless the spec's
		// arch.<arch>.optional_modules names it.
		return nil, fmt.Errorf("%s: modules (%s kernel %s): %w", s.File, o.Arch, k.Version, err)
	}
	return rm, nil
}

// addBaseRecords writes into base everything the image carries besides the
// busybox and tools: modules, spec files, pci.ids, the site CA, the tool
// bundle pin and the driver bundle. It fills r's CA, ToolBundle and
// DriverBundle.
func addBaseRecords(base *cpio.Archive, s *spec.Spec, o Options, rm *resolvedModules, r *Report) error {
	recs, err := moduleRecords(rm.ix, rm.k.Version, rm.mods, s.CompressModules.Value == "zstd")
	if err != nil {
		return err
	}
	for _, f := range s.ResolvedFiles() {
		rec, err := hostFileRecord(f.Src, f.Dst)
		if err != nil {
			return fmt.Errorf("%s: files: %w", s.File, err)
		}
		recs = append(recs, rec)
	}
	if p := s.PCIIDs; p != nil {
		data, err := readPCIIDs(p.Src.Value, spec.Values(p.Vendors))
		if err != nil {
			return fmt.Errorf("%s:%d: pci_ids: %w", s.File, p.Src.Line, err)
		}
		recs = append(recs, fileRecord(spec.PCIIDsPath, data, 0o644))
	}
	if o.CA != "" {
		rec, ca, err := siteCARecord(o.CA, s.CAPath.Value)
		if err != nil {
			return err
		}
		recs, r.CA = append(recs, rec), ca
	}
	if o.ToolBundlePin != "" {
		rec, pr, err := toolBundlePinRecord(o.ToolBundlePin, s.ToolBundlePath.Value)
		if err != nil {
			return err
		}
		recs, r.ToolBundle = append(recs, rec), pr
	}
	if rm.bundle != nil {
		br, brecs, err := bundleRecords(rm.bundle, rm.mods)
		if err != nil {
			return err
		}
		r.DriverBundle = br
		recs = append(recs, brecs...)
	}
	return writeRecords(base, recs)
}

// siteCARecord reads the site CA at hostPath into a record at imagePath,
// and describes it for the report.
func siteCARecord(hostPath, imagePath string) (cpio.Record, *pki.ImageCA, error) {
	rec, err := hostFileRecord(hostPath, path.Clean(imagePath)[1:])
	if err != nil {
		return cpio.Record{}, nil, fmt.Errorf("--ca: %w", err)
	}
	rec.Mode = cpio.S_IFREG | 0o644
	// The report names the CA so the coordinator can refuse an image
	// that trusts another one (pki.CheckImageCA).
	pemBytes, err := os.ReadFile(hostPath)
	if err != nil {
		return cpio.Record{}, nil, fmt.Errorf("--ca: %w", err)
	}
	ca, err := pki.DescribeCA(hostPath, pemBytes)
	if err != nil {
		return cpio.Record{}, nil, fmt.Errorf("--ca: %w", err)
	}
	ca.Path = path.Clean(imagePath)
	return rec, &ca, nil
}

// toolBundlePinRecord pins the built tool bundle at pinFile into a record
// at imagePath, and describes the pin for the report.
func toolBundlePinRecord(pinFile, imagePath string) (cpio.Record, *ToolBundleReport, error) {
	pin, err := PinToolBundle(pinFile)
	if err != nil {
		return cpio.Record{}, nil, err
	}
	data, err := pinRecord(pin)
	if err != nil {
		return cpio.Record{}, nil, err
	}
	dst := path.Clean(imagePath)
	return fileRecord(dst[1:], data, 0o644), &ToolBundleReport{Path: dst, SHA256: pin.SHA256, Size: pin.Size, Tools: pin.Names()}, nil
}

// writeRecords adds recs to base, refusing an image path given twice; a
// record base already holds identically is skipped.
func writeRecords(base *cpio.Archive, recs []cpio.Record) error {
	for _, r := range recs {
		if base.Contains(r) {
			continue
		}
		if _, dup := base.Get(r.Name); dup {
			return fmt.Errorf("image path /%s is provided twice (files, ca_path, tool_bundle_path or modules)", r.Name)
		}
		if err := base.WriteRecord(r); err != nil {
			return err
		}
	}
	return nil
}

// imageTools lists the mkuimage file arguments: the spec's tools, then the
// extra ones given as /HOSTPATH or HOSTPATH:IMAGEPATH.
func imageTools(s *spec.Spec, extra []string) ([]string, error) {
	var tools []string
	for _, t := range s.Tools {
		if _, err := os.Stat(t.Value); err != nil {
			return nil, fmt.Errorf("%s:%d: tools: %w", s.File, t.Line, err)
		}
		tools = append(tools, t.Value)
	}
	for _, t := range extra {
		src, dst, hasDst := strings.Cut(t, ":")
		if src == "" || (hasDst && dst == "") || (!hasDst && !filepath.IsAbs(src)) {
			return nil, fmt.Errorf("tool %q: want /HOSTPATH or HOSTPATH:IMAGEPATH", t)
		}
		// The file itself, not a link to it: a driver library is usually
		// libnvidia-ml.so.1 -> libnvidia-ml.so.<version>, and the archive
		// would otherwise hold a dangling link.
		real, err := filepath.EvalSymlinks(src)
		if err != nil {
			return nil, fmt.Errorf("tool %q: %w", t, err)
		}
		if !hasDst {
			dst = src
		}
		tools = append(tools, real+":"+strings.TrimPrefix(dst, "/"))
	}
	return tools, nil
}

// buildArchive builds the busybox over base with mkuimage in tmp and
// returns the uncompressed cpio archive.
func buildArchive(ctx context.Context, log *slog.Logger, s *spec.Spec, base *cpio.Archive, tmp, uinit string, tools []string, arch string) ([]byte, error) {
	cpioPath := filepath.Join(tmp, CPIOName)
	standalone := s.InitStandalone.Value == "true"
	cmds, err := busyboxCommands(ctx, s, base, tmp, uinit, arch)
	if err != nil {
		return nil, err
	}
	mods := []uimage.Modifier{
		// gobusybox runs the go tool with only $GOROOT/bin on PATH: no C
		// toolchain, so cgo must be off explicitly.
		uimage.WithEnv(golang.DisableCGO(), golang.WithGOOS("linux"), golang.WithGOARCH(arch), golang.WithBuildTag(spec.Values(s.BuildTags)...)),
		uimage.WithTempDir(tmp),
		uimage.WithBaseArchive(base),
		uimage.WithBusyboxCommands(cmds...),
		uimage.WithFiles(tools...),
		uimage.WithCPIOOutput(cpioPath),
	}
	if !standalone {
		mods = append(mods, uimage.WithInit(path.Base(s.Init.Value)))
	}
	if uinit != "" {
		mods = append(mods, uimage.WithUinit(path.Base(uinit), spec.Values(s.UinitArgs)...))
	}
	if s.Shell.Value != "" {
		mods = append(mods, uimage.WithShell(path.Base(s.Shell.Value)))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	log.Info("building busybox", "commands", len(cmds), "uinit", uinit, "tools", tools)
	ul := llog.New(slog.LevelWarn, func(format string, v ...any) {
		log.Warn("mkuimage: " + fmt.Sprintf(format, v...))
	})
	if err := uimage.Create(ul, mods...); err != nil {
		return nil, fmt.Errorf("building initramfs from %s: %w", s.File, err)
	}
	return os.ReadFile(cpioPath)
}

// busyboxCommands lists the busybox's commands without duplicates: init
// (unless it is built standalone, then written into base as /init), uinit,
// then the spec's commands.
func busyboxCommands(ctx context.Context, s *spec.Spec, base *cpio.Archive, tmp, uinit, arch string) ([]string, error) {
	var cmds []string
	seen := map[string]bool{}
	if s.InitStandalone.Value == "true" {
		initBin, err := buildStatic(ctx, s.Init.Value, filepath.Join(tmp, "init"), arch)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: init: %w", s.File, s.Init.Line, err)
		}
		if _, dup := base.Get("init"); dup {
			return nil, fmt.Errorf("image path /init is provided twice (init_standalone and files)")
		}
		if err := base.WriteRecord(fileRecord("init", initBin, 0o755)); err != nil {
			return nil, err
		}
	} else {
		cmds, seen[s.Init.Value] = append(cmds, s.Init.Value), true
	}
	for _, c := range append([]string{uinit}, spec.Values(s.Commands)...) {
		if c != "" && !seen[c] {
			seen[c] = true
			cmds = append(cmds, c)
		}
	}
	return cmds, nil
}
