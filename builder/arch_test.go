package builder

import (
	"bytes"
	"context"
	"debug/elf"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/builder/kmod/kmodtest"
	"github.com/cure-oss/cure/builder/spec"
	"github.com/u-root/mkuimage/cpio"
)

// fakeKernelRoot makes a kernel tree of arch: a vmlinuz with only that
// architecture's boot header, and nvme as its one module.
func fakeKernelRoot(t *testing.T, arch string) string {
	t.Helper()
	root := t.TempDir()
	kver := "6.1.0-9-" + arch
	img := make([]byte, 4096)
	switch arch {
	case "arm64":
		copy(img[56:], "ARM\x64")
	case "amd64":
		copy(img[0x202:], "HdrS")
	}
	mods := filepath.Join(root, "lib/modules", kver, "kernel/drivers/nvme/host")
	if err := os.MkdirAll(mods, 0o755); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(root, "boot"), 0o755)
	if err := os.WriteFile(filepath.Join(root, "boot", "vmlinuz-"+kver), img, 0o644); err != nil {
		t.Fatal(err)
	}
	ko := kmodtest.FakeKO("name=nvme", "alias=pci:v*d*sv*sd*bc01sc08i02*", "depends=", "vermagic="+kver+" SMP mod_unload")
	if err := os.WriteFile(filepath.Join(mods, "nvme.ko"), ko, 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestKernelArch(t *testing.T) {
	for _, arch := range []string{"arm64", "amd64"} {
		k, err := FindKernel(fakeKernelRoot(t, arch))
		if err != nil {
			t.Fatal(err)
		}
		f, _ := os.ReadFile(k.Vmlinuz)
		if got, err := KernelArch(bytes.NewReader(f)); err != nil || got != arch {
			t.Errorf("KernelArch(%s) = %q, %v", arch, got, err)
		}
	}
	if _, err := KernelArch(bytes.NewReader(make([]byte, 4096))); err == nil {
		t.Error("a header of zeros was given an architecture")
	}
	if _, err := KernelArch(bytes.NewReader([]byte("short"))); err == nil || !strings.Contains(err.Error(), "too short") {
		t.Errorf("short image: %v", err)
	}
	err := checkKernelArch(filepath.Join(fakeKernelRoot(t, "amd64"), "boot", "vmlinuz-6.1.0-9-amd64"), "arm64")
	if err == nil || !strings.Contains(err.Error(), "is an amd64 kernel, the image is for arm64") {
		t.Errorf("x86 kernel for an arm64 image: %v", err)
	}
}

// armSpec has an x86 host tool at the top level (the amd64 image's) that
// its arm64 entry drops, and an optional module arm64's kernel lacks.
const armSpec = `init: github.com/cure-oss/cure/runner/cmd/cure-init
init_standalone: true
uinit: github.com/cure-oss/cure/builder/testdata/placeholder-uinit
modules: [nvme, virtio_mmio]
tools: [/usr/bin/zstd]
tool_bundle_path: /etc/cure/toolbundle.json
cmdline: console=ttyS0
arch:
  arm64:
    cmdline: console=ttyAMA0
    tools: []
    tool_bundle_path: ""
    optional_modules: [virtio_mmio]
`

// TestBuildArm64 is make test's short proof of the arm64 image (the boot
// is make e2e-arm64's): cure-build --arch arm64 cross-compiles PID 1 and
// the busybox to aarch64 ELF, applies the spec's arm64 entry, names the
// optional module it left out, and refuses an x86 kernel or tool.
func TestBuildArm64(t *testing.T) {
	s, err := spec.Parse("arm.yaml", []byte(armSpec))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Build(context.Background(), Options{Spec: s, Arch: "arm64", KernelRoot: fakeKernelRoot(t, "amd64"), OutDir: t.TempDir()}); err == nil ||
		!strings.Contains(err.Error(), "is an amd64 kernel") {
		t.Fatalf("x86 kernel: %v", err)
	}
	if _, err := Build(context.Background(), Options{Spec: s, Arch: "arm64", KernelRoot: fakeKernelRoot(t, "arm64"), OutDir: t.TempDir(),
		Tools: []string{"/usr/bin/zstd"}}); err == nil || !strings.Contains(err.Error(), "is EM_X86_64 code, the image is for arm64") {
		t.Fatalf("x86 tool: %v", err)
	}
	noOpt, _ := spec.Parse("arm.yaml", []byte(strings.Replace(armSpec, "optional_modules: [virtio_mmio]", "optional_modules: []", 1)))
	if _, err := Build(context.Background(), Options{Spec: noOpt, Arch: "arm64", KernelRoot: fakeKernelRoot(t, "arm64"), OutDir: t.TempDir()}); err == nil ||
		!strings.Contains(err.Error(), "modules (arm64 kernel 6.1.0-9-arm64)") || !strings.Contains(err.Error(), "virtio_mmio") {
		t.Fatalf("a required module arm64 lacks: %v", err)
	}

	out := t.TempDir()
	r, err := Build(context.Background(), Options{Spec: s, Arch: "arm64", KernelRoot: fakeKernelRoot(t, "arm64"), OutDir: out, KeepCPIO: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Arch != "arm64" || r.Cmdline != "console=ttyAMA0" || len(r.Tools) != 0 || strings.Join(r.MissingModules, ",") != "virtio_mmio" {
		t.Errorf("report: arch %q cmdline %q tools %v missing_modules %v", r.Arch, r.Cmdline, r.Tools, r.MissingModules)
	}
	if len(r.Omitted) != 2 || !strings.HasPrefix(r.Omitted[0], "cure-nvml: ") || !strings.HasPrefix(r.Omitted[1], "tool bundle pin: ") {
		t.Errorf("report omitted = %q", r.Omitted)
	}
	archive, err := os.ReadFile(filepath.Join(out, CPIOName))
	if err != nil {
		t.Fatal(err)
	}
	machines := map[string]elf.Machine{}
	err = cpio.ForEachRecord(cpio.Newc.Reader(bytes.NewReader(archive)), func(rec cpio.Record) error {
		if rec.Mode&cpio.S_IFMT != cpio.S_IFREG {
			return nil
		}
		if f, err := elf.NewFile(rec.ReaderAt); err == nil && f.Type == elf.ET_EXEC {
			machines[rec.Name] = f.Machine
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"init", "bbin/bb"} {
		if machines[p] != elf.EM_AARCH64 {
			t.Errorf("/%s is %v, want EM_AARCH64", p, machines[p])
		}
	}
	if len(machines) != 2 {
		t.Errorf("executables in the image: %v, want init and bbin/bb", machines)
	}
}
