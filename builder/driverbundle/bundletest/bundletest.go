// Package bundletest makes synthetic GPU driver bundles for tests. The real
// NVIDIA driver is not redistributable and an out-of-tree .ko cannot be
// built without kernel headers; the builder reads only a module's .modinfo,
// so synthetic ELF modules (builder/kmod/kmodtest) with vermagic= and
// depends= stand in, next to stand-ins for GSP firmware, libnvidia-ml, a
// stub fabric manager and its config.
package bundletest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cure-oss/cure/builder/kmod/kmodtest"
)

// Version is the synthetic driver's version.
const Version = "570.86.15"

// Options vary the bundle.
type Options struct {
	// UVMVermagic, when set, is nvidia-uvm's vermagic instead of the others'.
	UVMVermagic string
	// NoSymlink leaves out lib/libnvidia-ml.so.1 (a tarball test adds it).
	NoSymlink bool
	// ELF, when set, is a host ELF program copied as bin/nvidia-smi, so
	// the builder's shared library check has something to check.
	ELF string
}

func write(t testing.TB, root, rel string, data []byte, mode os.FileMode) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
}

// Make writes a bundle whose modules carry vermagic and returns its dir.
func Make(t testing.TB, vermagic string, o Options) string {
	t.Helper()
	dir := t.TempDir()
	uvm := vermagic
	if o.UVMVermagic != "" {
		uvm = o.UVMVermagic
	}
	mod := func(file, name, vm, depends string, extra ...string) {
		info := append([]string{"version=" + Version, "license=Dual MIT/GPL", "depends=" + depends, "name=" + name, "vermagic=" + vm}, extra...)
		write(t, dir, "modules/"+file, kmodtest.FakeKO(info...), 0o644)
	}
	mod("nvidia.ko", "nvidia", vermagic, "", "alias=pci:v000010DEd*sv*sd*bc03sc02i00*")
	mod("nvidia-uvm.ko", "nvidia_uvm", uvm, "nvidia")
	mod("nvidia-modeset.ko", "nvidia_modeset", vermagic, "nvidia")
	// Needs the kernel's own DRM modules: the closure brings them.
	mod("nvidia-drm.ko", "nvidia_drm", vermagic, "nvidia-modeset,drm_kms_helper,drm")
	// GSP firmware: incompressible bytes, so sizes in the report are real.
	fw := make([]byte, 1<<20)
	x := uint32(2463534242)
	for i := range fw {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		fw[i] = byte(x)
	}
	write(t, dir, "firmware/nvidia/"+Version+"/gsp_ga10x.bin", fw, 0o644)
	write(t, dir, "lib/libnvidia-ml.so."+Version, []byte("not a real libnvidia-ml\n"), 0o755)
	if !o.NoSymlink {
		if err := os.Symlink("libnvidia-ml.so."+Version, filepath.Join(dir, "lib/libnvidia-ml.so.1")); err != nil {
			t.Fatal(err)
		}
	}
	write(t, dir, "bin/nv-fabricmanager", []byte("#!/bin/sh\n# stub: the real one forks its daemon and exits 0\nexit 0\n"), 0o755)
	write(t, dir, "share/nvidia/nvswitch/fabricmanager.cfg", []byte("LOG_LEVEL=4\nDAEMONIZE=1\nFABRIC_MODE=0\n"), 0o644)
	if o.ELF != "" {
		b, err := os.ReadFile(o.ELF)
		if err != nil {
			t.Fatal(err)
		}
		write(t, dir, "bin/nvidia-smi", b, 0o755)
	}
	return dir
}
