package driverbundle

import (
	"archive/tar"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cure-oss/cure/builder/driverbundle/bundletest"
	"github.com/klauspost/compress/zstd"
)

const vermagic = "6.1.0-56-amd64 SMP preempt mod_unload modversions "

func TestOpenDirectory(t *testing.T) {
	dir := bundletest.Make(t, vermagic, bundletest.Options{})
	b, err := Open(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var names []string
	for _, m := range b.Modules {
		names = append(names, m.Name)
		if !strings.HasPrefix(m.Path, "extra/nvidia/") || m.Src == "" {
			t.Errorf("module %+v", m)
		}
	}
	if strings.Join(names, ",") != "nvidia,nvidia_drm,nvidia_modeset,nvidia_uvm" || b.Version != "570.86.15" {
		t.Errorf("modules %v version %q", names, b.Version)
	}
	dsts := map[string]File{}
	var total int64
	for _, f := range b.Files {
		dsts[f.Dst] = f
		total += f.Size
	}
	for _, m := range b.Modules {
		st, _ := os.Stat(m.Src)
		total += st.Size()
	}
	if b.Bytes != total || total < 1<<20 {
		t.Errorf("bytes %d, files and modules add up to %d", b.Bytes, total)
	}
	for _, want := range []string{"lib/firmware/nvidia/570.86.15/gsp_ga10x.bin", "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.86.15",
		"usr/bin/nv-fabricmanager", "usr/share/nvidia/nvswitch/fabricmanager.cfg"} {
		if _, ok := dsts[want]; !ok {
			t.Errorf("no %s in %v", want, dsts)
		}
	}
	if l := dsts["usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"]; l.Link != "libnvidia-ml.so.570.86.15" {
		t.Errorf("library link %+v", l)
	}
	if !dsts["usr/bin/nv-fabricmanager"].Exec || dsts["usr/share/nvidia/nvswitch/fabricmanager.cfg"].Exec {
		t.Error("exec bits not kept")
	}
	m := b.Manifest([]string{"nvidia", "nvidia_uvm"})
	if m.FabricManager != "/usr/bin/nv-fabricmanager" || strings.Join(m.FabricManagerArgs, " ") != "-c /usr/share/nvidia/nvswitch/fabricmanager.cfg" || m.Bytes != b.Bytes {
		t.Errorf("manifest %+v", m)
	}
	if err := b.CheckVermagic("6.1.0-56-amd64", strings.TrimSpace(vermagic)); err != nil {
		t.Errorf("matching vermagic refused: %v", err)
	}
}

func TestVermagicMismatchNamesModule(t *testing.T) {
	dir := bundletest.Make(t, vermagic, bundletest.Options{UVMVermagic: "6.1.0-99-amd64 SMP preempt mod_unload modversions "})
	b, err := Open(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	err = b.CheckVermagic("6.1.0-56-amd64", strings.TrimSpace(vermagic))
	if err == nil || !strings.Contains(err.Error(), "module nvidia_uvm") || !strings.Contains(err.Error(), `"6.1.0-99-amd64 SMP preempt mod_unload modversions"`) ||
		strings.Contains(err.Error(), "module nvidia ") {
		t.Fatalf("err = %v", err)
	}
}

// tarball writes dir as a .tar.zst, plus extra raw entries.
func tarball(t *testing.T, dir string, extra ...*tar.Header) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "bundle.tar.zst")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	z, _ := zstd.NewWriter(f)
	tw := tar.NewWriter(z)
	if dir != "" {
		if err := tw.AddFS(os.DirFS(dir)); err != nil {
			// AddFS refuses symlinks; write them by hand.
			t.Logf("AddFS: %v", err)
		}
	}
	for _, h := range extra {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(make([]byte, h.Size))
		}
	}
	tw.Close()
	z.Close()
	f.Close()
	return out
}

func TestOpenTarball(t *testing.T) {
	dir := bundletest.Make(t, vermagic, bundletest.Options{NoSymlink: true})
	tmp := t.TempDir()
	b, err := Open(tarball(t, dir, &tar.Header{Name: "lib/libnvidia-ml.so.1", Typeflag: tar.TypeSymlink, Linkname: "libnvidia-ml.so.570.86.15"}), tmp)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Modules) != 4 || b.Version != "570.86.15" || len(b.Files) != 5 {
		t.Errorf("modules %d version %q files %+v", len(b.Modules), b.Version, b.Files)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("extraction left behind: %v", ents)
	}
}

func TestBadBundles(t *testing.T) {
	reg := func(name string) *tar.Header {
		return &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: 4}
	}
	ko := bundletest.Make(t, vermagic, bundletest.Options{NoSymlink: true})
	for _, tc := range []struct {
		name  string
		dir   string
		extra []*tar.Header
		want  string
	}{
		{"escape", "", []*tar.Header{reg("../../etc/passwd")}, "path leaves the bundle"},
		{"absolute link", ko, []*tar.Header{{Name: "lib/libc.so.6", Typeflag: tar.TypeSymlink, Linkname: "/lib/x86_64-linux-gnu/libc.so.6"}}, "leaves the bundle"},
		{"write through a link", "", []*tar.Header{{Name: "lib/d", Typeflag: tar.TypeSymlink, Linkname: "."}, reg("lib/d/x")}, "parent d is a symlink"},
		{"hard link", ko, []*tar.Header{{Name: "bin/x", Typeflag: tar.TypeLink, Linkname: "bin/nv-fabricmanager"}}, "not allowed in a driver bundle"},
		{"unknown top", ko, []*tar.Header{reg("docs/README")}, "docs: unknown top-level entry"},
		{"not a module", ko, []*tar.Header{reg("modules/nvidia.txt")}, "modules/ holds kernel modules only"},
		{"no modules", "", []*tar.Header{reg("bin/nvidia-smi")}, "no kernel modules under modules/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(tarball(t, tc.dir, tc.extra...), t.TempDir())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := Open(filepath.Join(t.TempDir(), "bundle.zip"), ""); err == nil {
		t.Error("missing bundle accepted")
	}
}

func TestMissingLibraries(t *testing.T) {
	dir := bundletest.Make(t, vermagic, bundletest.Options{ELF: "/usr/sbin/nvme"})
	b, err := Open(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	miss := b.MissingLibraries(map[string]bool{"lib/x86_64-linux-gnu/libc.so.6": true})
	if len(miss) == 0 || !strings.HasPrefix(miss[0], "/usr/bin/nvidia-smi needs lib") {
		t.Errorf("missing %v", miss)
	}
	for _, m := range miss {
		if strings.Contains(m, "libc.so.6") {
			t.Errorf("present library reported missing: %s", m)
		}
	}
}
