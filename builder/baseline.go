package builder

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/u-root/mkuimage/cpio"
)

// BaselineInitPkg is the trivial init of the boot-time baseline image.
const BaselineInitPkg = "github.com/cure-oss/cure/initramfs/cmd/baseline-init"

// BaselineOptions for BuildBaseline.
type BaselineOptions struct {
	KernelRoot string
	OutDir     string
	// Cmdline defaults written into the report and iPXE template.
	Cmdline  string
	KeepCPIO bool
	// Arch is the target architecture (amd64 when empty), as Options.Arch.
	Arch string
	Log  *slog.Logger
}

// BuildBaseline builds an initramfs whose /init is a static Go program that
// prints CURE-BASELINE-INIT uptime=<s> and powers off, with the same kernel
// as the real image, so boot-time measurements have a floor to compare to.
// Outputs have the same names as Build's.
func BuildBaseline(ctx context.Context, o BaselineOptions) (*Report, error) {
	start := time.Now()
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	if o.Arch == "" {
		o.Arch = "amd64"
	}
	k, err := FindKernel(o.KernelRoot)
	if err != nil {
		return nil, err
	}
	if err := checkKernelArch(k.Vmlinuz, o.Arch); err != nil {
		return nil, fmt.Errorf("--kernel-root %s: %w", o.KernelRoot, err)
	}
	tmp, err := os.MkdirTemp("", "cure-baseline-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	initBin, err := buildStatic(ctx, BaselineInitPkg, filepath.Join(tmp, "init"), o.Arch)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w := cpio.Newc.Writer(&buf)
	recs := []cpio.Record{
		cpio.Directory("dev", 0o755),
		cpio.CharDev("dev/console", 0o600, 5, 1),
		fileRecord("init", initBin, 0o755),
		cpio.Directory("proc", 0o555),
	}
	for _, r := range recs {
		if err := w.WriteRecord(cpio.MakeReproducible(r)); err != nil {
			return nil, err
		}
	}
	if err := cpio.WriteTrailer(w); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.OutDir, 0o755); err != nil {
		return nil, err
	}
	r := &Report{Kind: "baseline", Arch: o.Arch, KernelVersion: k.Version, Init: BaselineInitPkg, Cmdline: o.Cmdline}
	if err := finish(o.OutDir, buf.Bytes(), k.Vmlinuz, o.KeepCPIO, r, func(string) {}); err != nil {
		return nil, err
	}
	r.Totals.BuildSeconds = time.Since(start).Seconds()
	if err := writeReport(o.OutDir, r); err != nil {
		return nil, err
	}
	log.Info("baseline image built", "out", o.OutDir, "cpio_bytes", r.Totals.UncompressedBytes)
	return r, nil
}

// goTool prefers the go next to the running toolchain's GOROOT.
func goTool() string {
	if gr := os.Getenv("GOROOT"); gr != "" {
		if p := filepath.Join(gr, "bin", "go"); fileExists(p) {
			return p
		}
	}
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// buildStatic builds the Go command pkg of this module on its own (cgo
// off, no paths, build id or VCS stamp: the same tree gives the same
// bytes) into out and returns the binary.
func buildStatic(ctx context.Context, pkg, out, arch string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool(), "build", "-trimpath", "-buildvcs=false",
		"-ldflags=-s -w -buildid=", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("building %s: %w: %s", pkg, err, stderr.String())
	}
	return os.ReadFile(out)
}
