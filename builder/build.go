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
	Log           *slog.Logger
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
	uinit := s.Uinit.Value
	if o.Uinit != "" {
		uinit = o.Uinit
	}
	switch {
	case s.CAPath.Value != "" && o.CA == "":
		return nil, fmt.Errorf("%s:%d: ca_path %s needs the site CA: pass --ca", s.File, s.CAPath.Line, s.CAPath.Value)
	case s.CAPath.Value == "" && o.CA != "":
		return nil, fmt.Errorf("%s: --ca %s given but the spec has no ca_path saying where it goes", s.File, o.CA)
	case s.ToolBundlePath.Value != "" && o.ToolBundlePin == "":
		return nil, fmt.Errorf("%s:%d: tool_bundle_path %s needs the built tool bundle: make toolbundle, then pass --pin-tool-bundle out/toolbundle/toolbundle.json",
			s.File, s.ToolBundlePath.Line, s.ToolBundlePath.Value)
	case s.ToolBundlePath.Value == "" && o.ToolBundlePin != "":
		return nil, fmt.Errorf("%s: --pin-tool-bundle %s given but the spec has no tool_bundle_path saying where it goes", s.File, o.ToolBundlePin)
	}

	k, err := FindKernel(o.KernelRoot)
	if err != nil {
		return nil, err
	}
	ix, err := kmod.Scan(k.ModulesDir)
	if err != nil {
		return nil, err
	}
	want := spec.Values(s.Modules)
	var bundle *driverbundle.Bundle
	if o.DriverBundle != "" {
		if bundle, err = openBundle(o.DriverBundle, k, ix); err != nil {
			return nil, err
		}
		defer bundle.Close()
		for _, m := range bundle.Modules {
			want = append(want, m.Name)
		}
	}
	mods, builtin, err := ix.Closure(want)
	if err != nil {
		if bundle != nil {
			return nil, fmt.Errorf("%s / --driver-bundle %s: modules: %w", s.File, o.DriverBundle, err)
		}
		return nil, fmt.Errorf("%s: modules: %w", s.File, err)
	}
	log.Info("kernel modules resolved", "kernel", k.Version, "requested", len(s.Modules), "closure", len(mods), "builtin", builtin)

	base := uimage.DefaultRamfs()
	recs, err := moduleRecords(ix, k.Version, mods, s.CompressModules.Value == "zstd")
	if err != nil {
		return nil, err
	}
	for _, f := range s.ResolvedFiles() {
		r, err := hostFileRecord(f.Src, f.Dst)
		if err != nil {
			return nil, fmt.Errorf("%s: files: %w", s.File, err)
		}
		recs = append(recs, r)
	}
	var caInfo *pki.ImageCA
	if p := s.PCIIDs; p != nil {
		data, err := readPCIIDs(p.Src.Value, spec.Values(p.Vendors))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: pci_ids: %w", s.File, p.Src.Line, err)
		}
		recs = append(recs, fileRecord(spec.PCIIDsPath, data, 0o644))
	}
	if o.CA != "" {
		r, err := hostFileRecord(o.CA, path.Clean(s.CAPath.Value)[1:])
		if err != nil {
			return nil, fmt.Errorf("--ca: %w", err)
		}
		r.Mode = cpio.S_IFREG | 0o644
		recs = append(recs, r)
		// The report names the CA so the coordinator can refuse an image
		// that trusts another one (pki.CheckImageCA).
		pemBytes, err := os.ReadFile(o.CA)
		if err != nil {
			return nil, fmt.Errorf("--ca: %w", err)
		}
		ca, err := pki.DescribeCA(o.CA, pemBytes)
		if err != nil {
			return nil, fmt.Errorf("--ca: %w", err)
		}
		ca.Path = path.Clean(s.CAPath.Value)
		caInfo = &ca
	}
	var pinReport *ToolBundleReport
	if o.ToolBundlePin != "" {
		pin, err := PinToolBundle(o.ToolBundlePin)
		if err != nil {
			return nil, err
		}
		data, err := pinRecord(pin)
		if err != nil {
			return nil, err
		}
		dst := path.Clean(s.ToolBundlePath.Value)
		recs = append(recs, fileRecord(dst[1:], data, 0o644))
		pinReport = &ToolBundleReport{Path: dst, SHA256: pin.SHA256, Size: pin.Size, Tools: pin.Names()}
	}
	var bundleReport *DriverBundleReport
	if bundle != nil {
		br, brecs, err := bundleRecords(bundle, mods)
		if err != nil {
			return nil, err
		}
		bundleReport = br
		recs = append(recs, brecs...)
	}
	for _, r := range recs {
		if base.Contains(r) {
			continue
		}
		if _, dup := base.Get(r.Name); dup {
			return nil, fmt.Errorf("image path /%s is provided twice (files, ca_path, tool_bundle_path or modules)", r.Name)
		}
		if err := base.WriteRecord(r); err != nil {
			return nil, err
		}
	}

	var tools []string
	for _, t := range s.Tools {
		if _, err := os.Stat(t.Value); err != nil {
			return nil, fmt.Errorf("%s:%d: tools: %w", s.File, t.Line, err)
		}
		tools = append(tools, t.Value)
	}
	for _, t := range o.Tools {
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

	tmp, err := os.MkdirTemp("", "cure-build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	cpioPath := filepath.Join(tmp, CPIOName)

	standalone := s.InitStandalone.Value == "true"
	var cmds []string
	seen := map[string]bool{}
	if standalone {
		initBin, err := buildStatic(ctx, s.Init.Value, filepath.Join(tmp, "init"))
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
	mods2 := []uimage.Modifier{
		// gobusybox runs the go tool with only $GOROOT/bin on PATH: no C
		// toolchain, so cgo must be off explicitly.
		uimage.WithEnv(golang.DisableCGO(), golang.WithBuildTag(spec.Values(s.BuildTags)...)),
		uimage.WithTempDir(tmp),
		uimage.WithBaseArchive(base),
		uimage.WithBusyboxCommands(cmds...),
		uimage.WithFiles(tools...),
		uimage.WithCPIOOutput(cpioPath),
	}
	if !standalone {
		mods2 = append(mods2, uimage.WithInit(path.Base(s.Init.Value)))
	}
	if uinit != "" {
		mods2 = append(mods2, uimage.WithUinit(path.Base(uinit), spec.Values(s.UinitArgs)...))
	}
	if s.Shell.Value != "" {
		mods2 = append(mods2, uimage.WithShell(path.Base(s.Shell.Value)))
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	log.Info("building busybox", "commands", len(cmds), "uinit", uinit, "tools", tools)
	ul := llog.New(slog.LevelWarn, func(format string, v ...any) {
		log.Warn("mkuimage: " + fmt.Sprintf(format, v...))
	})
	if err := uimage.Create(ul, mods2...); err != nil {
		return nil, fmt.Errorf("building initramfs from %s: %w", s.File, err)
	}
	archive, err := os.ReadFile(cpioPath)
	if err != nil {
		return nil, err
	}
	if bundle != nil {
		if err := checkBundleLibraries(bundle, archive); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, err
	}
	r := &Report{
		Spec:           s.File,
		Kind:           "image",
		KernelVersion:  k.Version,
		Init:           s.Init.Value,
		InitStandalone: standalone,
		Uinit:          uinit,
		Cmdline:        s.Cmdline.Value,
		BuiltinModules: builtin,
		Tools:          tools,
		CA:             caInfo,
		DriverBundle:   bundleReport,
		ToolBundle:     pinReport,
	}
	for _, m := range mods {
		r.Modules = append(r.Modules, m.Name)
	}
	if err := finish(o.OutDir, archive, k.Vmlinuz, o.KeepCPIO, r); err != nil {
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
