package builder

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/builder/driverbundle/bundletest"
	"github.com/cure-oss/cure/builder/kmod"
	"github.com/cure-oss/cure/builder/spec"
	"github.com/cure-oss/cure/tools/gpu/driver"
	"github.com/u-root/mkuimage/cpio"
)

func kernelVermagic(t *testing.T, root string) (Kernel, string) {
	t.Helper()
	k, err := FindKernel(root)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := kmod.Scan(k.ModulesDir)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := ix.Vermagic()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(vm, k.Version+" ") {
		t.Fatalf("kernel %s has vermagic %q", k.Version, vm)
	}
	return k, vm
}

func overlaySpec(t *testing.T) *spec.Spec {
	t.Helper()
	s, err := spec.Parse(filepath.Join(t.TempDir(), "t.yaml"), []byte(`init: github.com/u-root/u-root/cmds/core/init
uinit: github.com/cure-oss/cure/builder/testdata/placeholder-uinit
modules: [nvme]
tools: [/usr/sbin/nvme]
`))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDriverOverlayBuild: a bundle built for the image's kernel lands in the
// archive (modules with their kernel dependencies, firmware, libraries,
// programs, the runner's manifest) with its size in report.json; a module
// built for another kernel is refused, named, before anything is built.
func TestDriverOverlayBuild(t *testing.T) {
	root := kernelRoot(t)
	k, vm := kernelVermagic(t, root)

	t.Run("wrong vermagic refused naming the module", func(t *testing.T) {
		other := strings.Replace(vm, k.Version, "6.1.0-99-amd64", 1)
		b := bundletest.Make(t, vm+" ", bundletest.Options{UVMVermagic: other})
		out := t.TempDir()
		_, err := Build(context.Background(), Options{Spec: overlaySpec(t), KernelRoot: root, OutDir: out, DriverBundle: b})
		if err == nil || !strings.Contains(err.Error(), "module nvidia_uvm") || !strings.Contains(err.Error(), "6.1.0-99-amd64") ||
			strings.Contains(err.Error(), "module nvidia_drm") {
			t.Fatalf("err = %v", err)
		}
		if ents, _ := os.ReadDir(out); len(ents) != 0 {
			t.Errorf("refused build wrote %v", ents)
		}
	})

	t.Run("matching bundle lands in the archive", func(t *testing.T) {
		if testing.Short() {
			t.Skip("a full image build; skipped with -short")
		}
		// bin/nvidia-smi is a real ELF (nvme-cli's) whose libraries the
		// spec's nvme tool brings: the library check passes on real data.
		b := bundletest.Make(t, vm, bundletest.Options{ELF: "/usr/sbin/nvme"})
		out := t.TempDir()
		r, err := Build(context.Background(), Options{Spec: overlaySpec(t), KernelRoot: root, OutDir: out, DriverBundle: b, KeepCPIO: true})
		if err != nil {
			t.Fatal(err)
		}
		d := r.DriverBundle
		if d == nil || d.Version != bundletest.Version || !d.FabricManager || d.Files != 10 || d.Bytes < 1<<20 ||
			strings.Join(d.Modules, ",") != "nvidia,nvidia_modeset,nvidia_drm,nvidia_uvm" {
			t.Fatalf("report driver_bundle = %+v", d)
		}
		var onDisk Report
		raw, _ := os.ReadFile(filepath.Join(out, ReportName))
		if err := json.Unmarshal(raw, &onDisk); err != nil || onDisk.DriverBundle == nil || onDisk.DriverBundle.Bytes != d.Bytes {
			t.Errorf("report.json driver_bundle = %+v (%v)", onDisk.DriverBundle, err)
		}
		files := map[string]cpio.Record{}
		arch, err := os.ReadFile(filepath.Join(out, CPIOName))
		if err != nil {
			t.Fatal(err)
		}
		if err := cpio.ForEachRecord(cpio.Newc.Reader(bytes.NewReader(arch)), func(rec cpio.Record) error {
			files[rec.Name] = rec
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		content := func(name string) string {
			rec, ok := files[name]
			if !ok {
				t.Errorf("archive lacks %s", name)
				return ""
			}
			b, _ := io.ReadAll(io.NewSectionReader(rec.ReaderAt, 0, int64(rec.FileSize)))
			return string(b)
		}
		mods := "lib/modules/" + k.Version + "/"
		for _, p := range []string{mods + "extra/nvidia/nvidia.ko", mods + "extra/nvidia/nvidia-drm.ko", mods + "kernel/drivers/gpu/drm/drm.ko",
			"lib/firmware/nvidia/570.86.15/gsp_ga10x.bin", "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.86.15",
			"usr/bin/nv-fabricmanager", "usr/bin/nvidia-smi", "usr/share/nvidia/nvswitch/fabricmanager.cfg"} {
			content(p)
		}
		if l := files["usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"]; l.Mode&cpio.S_IFMT != cpio.S_IFLNK {
			t.Errorf("libnvidia-ml.so.1 is not a symlink: %o", l.Mode)
		}
		if files["usr/bin/nv-fabricmanager"].Mode&0o111 == 0 {
			t.Error("fabric manager not executable")
		}
		var m driver.Manifest
		if err := json.Unmarshal([]byte(content(driver.ManifestPath)), &m); err != nil || strings.Join(m.Modules, ",") != strings.Join(d.Modules, ",") ||
			m.FabricManager != "/usr/bin/nv-fabricmanager" || m.Bytes != d.Bytes {
			t.Errorf("manifest %+v (%v)", m, err)
		}
		dep := content(mods + "modules.dep")
		if !strings.Contains(dep, "extra/nvidia/nvidia-drm.ko: extra/nvidia/nvidia-modeset.ko") || !strings.Contains(dep, "kernel/drivers/gpu/drm/drm.ko") {
			t.Errorf("modules.dep lacks the bundle's dependencies:\n%s", dep)
		}
		if alias := content(mods + "modules.alias"); strings.Contains(alias, " nvidia") {
			t.Errorf("bundle modules must not load by alias:\n%s", alias)
		}
	})
}
