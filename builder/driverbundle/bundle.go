// Package driverbundle reads a site's GPU driver bundle — a directory or a
// tarball (.tar, .tar.gz/.tgz, .tar.zst, .tar.xz) — for cure-build
// --driver-bundle, checks its kernel modules against the image's kernel,
// and says where each of its files goes in the image.
//
// A bundle is laid out by kind (the NVIDIA driver is not redistributable,
// so a site assembles it from its driver release):
//
//	modules/   nvidia.ko, nvidia-uvm.ko, nvidia-modeset.ko, ... (open kernel
//	           modules built for the image's kernel)  -> /lib/modules/<kver>/extra/nvidia/
//	firmware/  nvidia/<version>/gsp_*.bin             -> /lib/firmware/
//	lib/       libnvidia-ml.so.*, DCGM's libraries     -> /usr/lib/x86_64-linux-gnu/
//	bin/       nvidia-smi, nv-fabricmanager, dcgmi, nv-hostengine -> /usr/bin/
//	share/     nvidia/nvswitch/fabricmanager.cfg, topologies -> /usr/share/
//	libexec/   datacenter-gpu-manager-4/nvvs and its plugins -> /usr/libexec/
//	etc/       anything the tools read from /etc      -> /etc/
//	gpu-tools.yaml  the site's GPU test tools in the bundle (DCGM,
//	           nvbandwidth, nccl-tests, gpu-burn): name, version, source,
//	           programs, sha256 pins (ToolsFile; docs/VALIDATION.md);
//	           BuildGPUBurn (cure-build --build-gpu-burn) builds gpu-burn
//	           into a bundle directory and writes its entry
//
// Anything else at the top is refused, as are paths leaving the bundle.
package driverbundle

import (
	"archive/tar"
	"compress/gzip"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/cure-oss/cure/builder/kmod"
	"github.com/cure-oss/cure/tools/gpu/driver"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// layout maps a bundle's top-level directories (other than modules/) to
// image directories.
var layout = map[string]string{
	"firmware": "lib/firmware",
	"lib":      "usr/lib/x86_64-linux-gnu",
	"bin":      "usr/bin",
	"share":    "usr/share",
	"libexec":  "usr/libexec",
	"etc":      "etc",
}

// ModulesSubdir is where bundle modules go under lib/modules/<kver>.
const ModulesSubdir = "extra/nvidia"

// Image paths the runner's tools/gpu/driver uses.
const (
	fabricManager       = "usr/bin/nv-fabricmanager"
	fabricManagerConfig = "usr/share/nvidia/nvswitch/fabricmanager.cfg"
)

// File is one non-module file of the bundle.
type File struct {
	Src  string // host path
	Dst  string // image path, no leading slash
	Link string // symlink target, when the entry is a symlink
	Exec bool
	Size int64
}

// Bundle is an opened driver bundle.
type Bundle struct {
	Source  string
	Modules []*kmod.Module // Path under lib/modules/<kver>, Src the host file
	Files   []File
	Version string
	// Bytes is the size of every file and module (what the image grows by,
	// uncompressed).
	Bytes int64
	// Tools are the GPU test tools gpu-tools.yaml declares, pinned.
	Tools []driver.Tool
	dir   string
	tmp   string // extraction dir to remove, for tarballs
}

// Close removes a tarball's extraction.
func (b *Bundle) Close() error {
	if b.tmp != "" {
		return os.RemoveAll(b.tmp)
	}
	return nil
}

// Open reads the bundle at src (a directory or a tarball, extracted under
// tmpDir; "" means os.TempDir()).
func Open(src, tmpDir string) (*Bundle, error) {
	st, err := os.Stat(src)
	if err != nil {
		return nil, fmt.Errorf("driver bundle: %w", err)
	}
	b := &Bundle{Source: src, dir: src}
	if !st.IsDir() {
		if b.tmp, err = os.MkdirTemp(tmpDir, "cure-driver-bundle-"); err != nil {
			return nil, err
		}
		b.dir = b.tmp
		if err := extract(src, b.tmp); err != nil {
			b.Close()
			return nil, fmt.Errorf("driver bundle %s: %w", src, err)
		}
	}
	if err := b.scan(); err != nil {
		b.Close()
		return nil, fmt.Errorf("driver bundle %s: %w", src, err)
	}
	return b, nil
}

func (b *Bundle) scan() error {
	err := filepath.WalkDir(b.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(b.dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == ToolsFile {
			return nil // read after the walk, when every file is known
		}
		top, rest, _ := strings.Cut(rel, "/")
		dst, known := layout[top]
		if top != "modules" && !known {
			return fmt.Errorf("%s: unknown top-level entry (want modules/, firmware/, lib/, bin/, share/, libexec/, etc/, %s)", rel, ToolsFile)
		}
		if rest == "" {
			if !d.IsDir() {
				return fmt.Errorf("%s: must be a directory", rel)
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if top == "modules" {
			return b.addModule(p, rel, rest, info)
		}
		f := File{Src: p, Dst: path.Join(dst, rest)}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			// A link stays inside its directory tree: libnvidia-ml.so.1 ->
			// libnvidia-ml.so.570.86.15.
			if path.IsAbs(t) || strings.HasPrefix(path.Clean(path.Join(path.Dir(rest), t)), "..") {
				return fmt.Errorf("%s: symlink to %q leaves %s/", rel, t, top)
			}
			f.Link = t
		case info.Mode().IsRegular():
			f.Exec, f.Size = info.Mode()&0o111 != 0, info.Size()
			b.Bytes += info.Size()
		default:
			return fmt.Errorf("%s: %s is neither a file, a directory nor a symlink", rel, info.Mode().Type())
		}
		b.Files = append(b.Files, f)
		return nil
	})
	if err != nil {
		return err
	}
	if len(b.Modules) == 0 {
		return errors.New("no kernel modules under modules/")
	}
	sort.Slice(b.Modules, func(i, j int) bool { return b.Modules[i].Name < b.Modules[j].Name })
	sort.Slice(b.Files, func(i, j int) bool { return b.Files[i].Dst < b.Files[j].Dst })
	for _, m := range b.Modules {
		if m.Name == "nvidia" || b.Version == "" {
			b.Version = m.Version
		}
	}
	return b.readTools()
}

func (b *Bundle) addModule(p, rel, rest string, info fs.FileInfo) error {
	name, ok := kmod.NameFromPath(rest)
	if !ok || !info.Mode().IsRegular() {
		return fmt.Errorf("%s: modules/ holds kernel modules only (.ko, .ko.xz, .ko.zst, .ko.gz)", rel)
	}
	mi, err := kmod.ReadModinfoFile(p)
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	m := kmod.ParseModinfo(name, path.Join(ModulesSubdir, rest), mi)
	m.Src = p
	for _, o := range b.Modules {
		if o.Name == m.Name {
			return fmt.Errorf("%s: module %s is also %s", rel, m.Name, o.Src)
		}
	}
	b.Modules = append(b.Modules, m)
	b.Bytes += info.Size()
	return nil
}

// CheckVermagic refuses the bundle unless every module was built for the
// image's kernel: its vermagic must equal want (the kernel tree's own, e.g.
// "6.1.0-56-amd64 SMP preempt mod_unload modversions"). Every mismatch is
// named.
func (b *Bundle) CheckVermagic(kver, want string) error {
	var errs []error
	for _, m := range b.Modules {
		switch {
		case m.Vermagic == "":
			errs = append(errs, fmt.Errorf("module %s (%s): no vermagic in its modinfo", m.Name, m.Src))
		case m.Vermagic != want:
			errs = append(errs, fmt.Errorf("module %s (%s): vermagic %q, but the image's kernel %s wants %q: rebuild the driver's modules against this kernel",
				m.Name, m.Src, m.Vermagic, kver, want))
		}
	}
	return errors.Join(errs...)
}

// Manifest describes the bundle for the runner; order is the modules'
// load order (dependencies first).
func (b *Bundle) Manifest(order []string) driver.Manifest {
	m := driver.Manifest{Version: b.Version, Modules: order, Bytes: b.Bytes, Tools: b.Tools}
	for _, f := range b.Files {
		switch f.Dst {
		case fabricManager:
			m.FabricManager = "/" + fabricManager
		case fabricManagerConfig:
			m.FabricManagerArgs = []string{"-c", "/" + fabricManagerConfig}
		}
	}
	if m.FabricManager == "" {
		m.FabricManagerArgs = nil
	}
	return m
}

// libDirs are where the dynamic loader finds libraries in the image.
var libDirs = []string{"lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib64", "usr/lib", "lib"}

// MissingLibraries lists, for every ELF program and library of the bundle,
// the shared libraries it needs (DT_NEEDED) that the image lacks. present
// holds the image's paths (no leading slash).
func (b *Bundle) MissingLibraries(present map[string]bool) []string {
	var out []string
	for _, f := range b.Files {
		if f.Link != "" || f.Size == 0 {
			continue
		}
		ef, err := elf.Open(f.Src)
		if err != nil {
			continue // scripts, firmware, configs
		}
		needed, err := ef.ImportedLibraries()
		dirs := slices.Clone(libDirs)
		// DCGM's nvvs plugins find their CUDA libraries beside them
		// (RUNPATH $ORIGIN): where the program is, not where ld.so looks.
		for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
			rps, _ := ef.DynString(tag)
			for _, rp := range rps {
				for _, d := range strings.Split(rp, ":") {
					if rest, ok := strings.CutPrefix(d, "$ORIGIN"); ok {
						dirs = append(dirs, path.Clean(path.Dir(f.Dst)+"/"+rest))
					} else if path.IsAbs(d) {
						dirs = append(dirs, strings.TrimPrefix(path.Clean(d), "/"))
					}
				}
			}
		}
		ef.Close()
		if err != nil {
			out = append(out, fmt.Sprintf("%s: reading its dynamic section: %v", f.Dst, err))
			continue
		}
		for _, lib := range needed {
			found := false
			for _, d := range dirs {
				if present[path.Join(d, lib)] {
					found = true
					break
				}
			}
			if !found {
				out = append(out, fmt.Sprintf("/%s needs %s", f.Dst, lib))
			}
		}
	}
	return out
}

// extract unpacks a tarball into dir, refusing entries that would land
// outside it, hard links and device files.
func extract(src, dir string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	var r io.Reader = f
	switch {
	case strings.HasSuffix(src, ".tar.gz"), strings.HasSuffix(src, ".tgz"):
		gz, err := gzip.NewReader(f)
		if err != nil {
			return err
		}
		r = gz
	case strings.HasSuffix(src, ".tar.zst"):
		z, err := zstd.NewReader(f)
		if err != nil {
			return err
		}
		defer z.Close()
		r = z
	case strings.HasSuffix(src, ".tar.xz"):
		x, err := xz.NewReader(f)
		if err != nil {
			return err
		}
		r = x
	case strings.HasSuffix(src, ".tar"):
	default:
		return errors.New("not a directory and not a .tar, .tar.gz, .tgz, .tar.zst or .tar.xz")
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if name == "." {
			continue
		}
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return fmt.Errorf("%s: path leaves the bundle", h.Name)
		}
		dst := filepath.Join(dir, filepath.FromSlash(name))
		// Nothing is written through a symlink an earlier entry made.
		if err := noLinkedParent(dir, name); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
		switch h.Typeflag {
		case tar.TypeXGlobalHeader:
			// Metadata for the archive (GitHub's archives carry the commit
			// in one): no file.
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			w, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fs.FileMode(h.Mode)&0o755|0o600)
			if err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
			_, err = io.Copy(w, tr)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
		case tar.TypeSymlink:
			if t := h.Linkname; path.IsAbs(t) || strings.HasPrefix(path.Clean(path.Join(path.Dir(name), t)), "..") {
				return fmt.Errorf("%s: symlink to %q leaves the bundle", h.Name, t)
			}
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, dst); err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
		default:
			return fmt.Errorf("%s: tar entry type %q not allowed in a driver bundle (files, directories and symlinks only)", h.Name, h.Typeflag)
		}
	}
}

// noLinkedParent refuses a path one of whose parent directories under dir
// is a symlink.
func noLinkedParent(dir, name string) error {
	p := dir
	parts := strings.Split(name, "/")
	for _, c := range parts[:len(parts)-1] {
		p = filepath.Join(p, c)
		st, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("parent %s is a symlink", c)
		}
	}
	return nil
}
