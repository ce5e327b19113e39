// Package kmod indexes a kernel module tree (lib/modules/<kver>) from each
// module's .modinfo ELF section, resolves dependency closures and writes the
// modules.dep and modules.alias files that u-root's kmodule and the runner's
// modalias matcher read. Debian's extracted kernel packages ship without
// modules.dep, and there is no depmod in the build environment we can rely on.
package kmod

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// Module is one loadable kernel module found in the tree.
type Module struct {
	// Name is the canonical module name (dashes folded to underscores).
	Name string
	// Path is relative to the module directory, e.g. kernel/drivers/nvme/host/nvme.ko.
	Path string
	// Depends are the canonical names from modinfo depends=.
	Depends []string
	// Aliases are the modinfo alias= patterns (e.g. pci:v00008086d...).
	Aliases []string
	// Src is the host file when the module is not under the index's Dir
	// (a driver bundle's); such modules get no modules.alias lines: they
	// are loaded on purpose, not by device.
	Src string
	// Vermagic and Version are modinfo's vermagic= and version=.
	Vermagic, Version string
}

// HostPath is where the module's file is on the build host.
func (ix *Index) HostPath(m *Module) string {
	if m.Src != "" {
		return m.Src
	}
	return filepath.Join(ix.Dir, m.Path)
}

// Add puts a module from outside the tree (m.Src set) into the index;
// a name the tree already has is refused, naming both files.
func (ix *Index) Add(m *Module) error {
	if prev, dup := ix.Modules[m.Name]; dup {
		return fmt.Errorf("module %s (%s) would shadow the kernel's %s", m.Name, m.Src, prev.Path)
	}
	if ix.Builtin[m.Name] {
		return fmt.Errorf("module %s (%s) is built into the kernel", m.Name, m.Src)
	}
	ix.Modules[m.Name] = m
	return nil
}

// ParseModinfo builds a Module from modinfo key=value strings; name is
// the fallback when modinfo has no name=.
func ParseModinfo(name, path string, info []string) *Module {
	m := &Module{Name: name, Path: path}
	for _, kv := range info {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "name":
			// Newer kernels record the name explicitly; trust it over the file name.
			if v != "" {
				m.Name = CanonicalName(v)
			}
		case "depends":
			for _, dep := range strings.Split(v, ",") {
				if dep = strings.TrimSpace(dep); dep != "" {
					m.Depends = append(m.Depends, CanonicalName(dep))
				}
			}
		case "alias":
			m.Aliases = append(m.Aliases, v)
		case "vermagic":
			m.Vermagic = strings.TrimSpace(v)
		case "version":
			m.Version = v
		}
	}
	return m
}

// NameFromPath turns kernel/fs/fat/vfat.ko.xz into vfat; ok is false for
// a file that is not a kernel module.
func NameFromPath(p string) (string, bool) { return nameFromPath(p) }

// Vermagic is the vermagic the tree's kernel wants of a module: that of
// the tree's first module by name (every module of one build carries the
// same).
func (ix *Index) Vermagic() (string, error) {
	var names []string
	for n, m := range ix.Modules {
		if m.Src == "" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		info, err := ReadModinfoFile(ix.HostPath(ix.Modules[n]))
		if err != nil {
			return "", err
		}
		if m := ParseModinfo(n, "", info); m.Vermagic != "" {
			return m.Vermagic, nil
		}
	}
	return "", fmt.Errorf("no module in %s carries a vermagic", ix.Dir)
}

// Index is a scanned module directory.
type Index struct {
	// Dir is the module directory that was scanned.
	Dir     string
	Modules map[string]*Module
	// Builtin holds canonical names of modules compiled into the kernel
	// (from modules.builtin), which need no file.
	Builtin map[string]bool
}

// CanonicalName folds dashes to underscores, as the kernel does.
func CanonicalName(s string) string { return strings.ReplaceAll(s, "-", "_") }

// nameFromPath turns kernel/fs/fat/vfat.ko.xz into vfat.
func nameFromPath(p string) (string, bool) {
	base := filepath.Base(p)
	for _, ext := range []string{".ko", ".ko.xz", ".ko.zst", ".ko.gz"} {
		if strings.HasSuffix(base, ext) {
			return CanonicalName(strings.TrimSuffix(base, ext)), true
		}
	}
	return "", false
}

// Scan walks dir for .ko, .ko.xz, .ko.zst and .ko.gz files and reads their
// modinfo. modules.builtin is read when present.
func Scan(dir string) (*Index, error) {
	ix := &Index{Dir: dir, Modules: map[string]*Module{}, Builtin: map[string]bool{}}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		name, ok := nameFromPath(p)
		if !ok {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := ReadModinfoFile(p)
		if err != nil {
			return err
		}
		m := ParseModinfo(name, filepath.ToSlash(rel), info)
		if prev, dup := ix.Modules[m.Name]; dup {
			return fmt.Errorf("module %q found twice: %s and %s", m.Name, prev.Path, m.Path)
		}
		ix.Modules[m.Name] = m
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scanning kernel modules in %s: %w", dir, err)
	}
	if len(ix.Modules) == 0 {
		return nil, fmt.Errorf("scanning kernel modules in %s: expected .ko files, found none", dir)
	}
	if err := ix.readBuiltin(); err != nil {
		return nil, err
	}
	return ix, nil
}

func (ix *Index) readBuiltin() error {
	p := filepath.Join(ix.Dir, "modules.builtin")
	f, err := os.Open(p)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading builtin module list: %w", err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if name, ok := nameFromPath(strings.TrimSpace(s.Text())); ok {
			ix.Builtin[name] = true
		}
	}
	if err := s.Err(); err != nil {
		return fmt.Errorf("reading %s: %w", p, err)
	}
	return nil
}

// ReadModinfoFile reads the NUL-separated key=value strings of a module's
// .modinfo section, decompressing .xz/.zst/.gz modules first.
func ReadModinfoFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ra io.ReaderAt = f
	var dec io.Reader
	switch {
	case strings.HasSuffix(path, ".xz"):
		dec, err = xz.NewReader(f)
	case strings.HasSuffix(path, ".zst"):
		var z *zstd.Decoder
		z, err = zstd.NewReader(f, zstd.WithDecoderConcurrency(1))
		if err == nil {
			defer z.Close()
			dec = z
		}
	case strings.HasSuffix(path, ".gz"):
		dec, err = gzip.NewReader(f)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: opening compressed module: %w", path, err)
	}
	if dec != nil {
		b, err := io.ReadAll(dec)
		if err != nil {
			return nil, fmt.Errorf("%s: decompressing module: %w", path, err)
		}
		ra = bytes.NewReader(b)
	}
	info, err := ReadModinfo(ra)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return info, nil
}

// ReadModinfo reads the .modinfo section of an ELF relocatable module.
func ReadModinfo(r io.ReaderAt) ([]string, error) {
	ef, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("expected an ELF kernel module: %w", err)
	}
	defer ef.Close()
	sec := ef.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("ELF file has no .modinfo section")
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("reading .modinfo: %w", err)
	}
	var out []string
	for _, s := range bytes.Split(data, []byte{0}) {
		if len(s) > 0 {
			out = append(out, string(s))
		}
	}
	return out, nil
}

// Closure returns the modules named plus everything they depend on, in load
// order (dependencies before dependents; ties broken by name so the result is
// deterministic). Builtin names are reported separately; unknown names are an
// error listing all of them.
func (ix *Index) Closure(names []string) (mods []*Module, builtin []string, err error) {
	state := map[string]int{} // 0 unvisited, 1 in progress, 2 done
	var missing []string
	var visit func(name string, chain []string) error
	visit = func(name string, chain []string) error {
		name = CanonicalName(name)
		switch state[name] {
		case 1:
			return fmt.Errorf("module dependency cycle: %s -> %s", strings.Join(chain, " -> "), name)
		case 2:
			return nil
		}
		m, ok := ix.Modules[name]
		if !ok {
			state[name] = 2
			if ix.Builtin[name] {
				builtin = append(builtin, name)
				return nil
			}
			if len(chain) > 0 {
				missing = append(missing, fmt.Sprintf("%s (needed by %s)", name, chain[len(chain)-1]))
			} else {
				missing = append(missing, name)
			}
			return nil
		}
		state[name] = 1
		deps := append([]string(nil), m.Depends...)
		sort.Strings(deps)
		for _, d := range deps {
			if err := visit(d, append(chain, name)); err != nil {
				return err
			}
		}
		state[name] = 2
		mods = append(mods, m)
		return nil
	}
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	for _, n := range sorted {
		if err := visit(n, nil); err != nil {
			return nil, nil, err
		}
	}
	if len(missing) > 0 {
		return nil, nil, fmt.Errorf("kernel modules not found in %s (neither a .ko nor listed in modules.builtin): %s", ix.Dir, strings.Join(missing, ", "))
	}
	sort.Strings(builtin)
	return mods, builtin, nil
}

// WriteDep writes modules.dep for mods in depmod's format: every module's
// full transitive dependency list, dependents before their dependencies (so
// a loader walks it back to front). A module with no dependencies is written
// as "path:" with no trailing space, which u-root's kmodule parser requires.
// Dependencies that are not in mods (builtin) are omitted.
func (ix *Index) WriteDep(w io.Writer, mods []*Module) error {
	return ix.WriteDepSuffix(w, mods, "")
}

// WriteDepSuffix is WriteDep for an image whose uncompressed (.ko) module
// files are named with suffix appended (".zst": compressed by the builder);
// modules the kernel package ships compressed keep their names.
func (ix *Index) WriteDepSuffix(w io.Writer, mods []*Module, suffix string) error {
	name := func(p string) string {
		if strings.HasSuffix(p, ".ko") {
			return p + suffix
		}
		return p
	}
	in := map[string]bool{}
	for _, m := range mods {
		in[m.Name] = true
	}
	bw := bufio.NewWriter(w)
	for _, m := range sortedByPath(mods) {
		deps := ix.transitive(m, in)
		fmt.Fprintf(bw, "%s:", name(m.Path))
		for _, d := range deps {
			fmt.Fprintf(bw, " %s", name(ix.Modules[d].Path))
		}
		bw.WriteString("\n")
	}
	return bw.Flush()
}

// transitive lists m's dependencies (restricted to in) ordered so each module
// comes before the modules it depends on.
func (ix *Index) transitive(m *Module, in map[string]bool) []string {
	var post []string
	seen := map[string]bool{}
	var visit func(name string)
	visit = func(name string) {
		if seen[name] || !in[name] {
			return
		}
		seen[name] = true
		dm := ix.Modules[name]
		deps := append([]string(nil), dm.Depends...)
		sort.Strings(deps)
		for _, d := range deps {
			visit(d)
		}
		post = append(post, name)
	}
	deps := append([]string(nil), m.Depends...)
	sort.Strings(deps)
	for _, d := range deps {
		visit(d)
	}
	// post is dependencies-first; depmod order is the reverse.
	for i, j := 0, len(post)-1; i < j; i, j = i+1, j-1 {
		post[i], post[j] = post[j], post[i]
	}
	return post
}

// WriteAlias writes modules.alias ("alias <pattern> <module>") for mods,
// sorted by module then pattern.
func WriteAlias(w io.Writer, mods []*Module) error {
	bw := bufio.NewWriter(w)
	bw.WriteString("# Aliases extracted from modules themselves.\n")
	byName := append([]*Module(nil), mods...)
	sort.Slice(byName, func(i, j int) bool { return byName[i].Name < byName[j].Name })
	for _, m := range byName {
		if m.Src != "" {
			continue // a driver bundle's: loaded on purpose (tools/gpu/driver)
		}
		aliases := append([]string(nil), m.Aliases...)
		sort.Strings(aliases)
		for _, a := range aliases {
			fmt.Fprintf(bw, "alias %s %s\n", a, m.Name)
		}
	}
	return bw.Flush()
}

func sortedByPath(mods []*Module) []*Module {
	out := append([]*Module(nil), mods...)
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}
