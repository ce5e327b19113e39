// Package toolbundle builds CURE's tool bundle (`cure-build --tool-bundle
// SPEC`, `make toolbundle`): the programs a spec names (fio, stress-ng,
// iperf3), each checked to come from the pinned Debian package version,
// with the shared libraries their ELF interpreter resolves (`ld.so --list`,
// as the image's tools are resolved) and that interpreter, and the Go
// helpers built from this repository (cure-measure, static), packed as
// tools/toolbundle reads it: a zstd-compressed ustar archive, manifest.json
// first, then bin/ and lib/ in name order, every entry a regular file with
// mtime 0, owner 0:0 and fixed modes. The same host files give the same
// bytes.
package toolbundle

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	bundle "github.com/cure-oss/cure/tools/toolbundle"
	"github.com/klauspost/compress/zstd"
	"github.com/u-root/mkuimage/ldd"
	"gopkg.in/yaml.v3"
)

// Names of the outputs in the output directory.
const (
	ArchiveName = "toolbundle.tar.zst"
	ReportName  = "toolbundle.json"
)

// Spec is a bundle spec file (initramfs/toolbundle.yaml).
type Spec struct {
	File     string
	Tools    []SpecTool
	Programs []SpecProgram
}

// SpecProgram is a Go program of this repository built into the bundle.
type SpecProgram struct {
	Name    string `yaml:"name"`    // cure-measure
	Package string `yaml:"package"` // ./tools/checks/measure/cmd/cure-measure, from the module root
	Line    int    `yaml:"-"`
}

// SpecTool is one program to bundle.
type SpecTool struct {
	Name    string `yaml:"name"`    // how checks ask for it: fio
	Path    string `yaml:"path"`    // on the build host: /usr/bin/fio
	Package string `yaml:"package"` // the Debian package that owns Path
	Version string `yaml:"version"` // that package's version, pinned
	Line    int    `yaml:"-"`
}

// LoadSpec reads a spec strictly: unknown keys and missing values are
// errors naming the file and line.
func LoadSpec(file string) (*Spec, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tool bundle spec: %w", err)
	}
	var doc struct {
		Tools    []SpecTool    `yaml:"tools"`
		Programs []SpecProgram `yaml:"programs"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	var lines struct {
		Tools    []yaml.Node `yaml:"tools"`
		Programs []yaml.Node `yaml:"programs"`
	}
	if err := yaml.Unmarshal(b, &lines); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	s := &Spec{File: file}
	names := map[string]int{}
	var errs []string
	for i, t := range doc.Tools {
		t.Line = lines.Tools[i].Line
		for _, f := range []struct{ key, v string }{{"name", t.Name}, {"path", t.Path}, {"package", t.Package}, {"version", t.Version}} {
			if f.v == "" {
				errs = append(errs, fmt.Sprintf("%s:%d: tools[%d].%s: missing", file, t.Line, i, f.key))
			}
		}
		if t.Path != "" && !filepath.IsAbs(t.Path) {
			errs = append(errs, fmt.Sprintf("%s:%d: tools[%d].path: %q is not absolute", file, t.Line, i, t.Path))
		}
		if t.Name != "" && (strings.ContainsAny(t.Name, "/ ") || t.Name == "." || t.Name == "..") {
			errs = append(errs, fmt.Sprintf("%s:%d: tools[%d].name: %q is not a file name", file, t.Line, i, t.Name))
		}
		if first, dup := names[t.Name]; dup {
			errs = append(errs, fmt.Sprintf("%s:%d: tools[%d].name: %s already on line %d", file, t.Line, i, t.Name, first))
		}
		names[t.Name] = t.Line
		s.Tools = append(s.Tools, t)
	}
	for i, p := range doc.Programs {
		p.Line = lines.Programs[i].Line
		if p.Name == "" || strings.ContainsAny(p.Name, "/ ") || !strings.HasPrefix(p.Package, "./") {
			errs = append(errs, fmt.Sprintf("%s:%d: programs[%d]: want a name and a package path ./... from the module root", file, p.Line, i))
		}
		if first, dup := names[p.Name]; dup {
			errs = append(errs, fmt.Sprintf("%s:%d: programs[%d].name: %s already on line %d", file, p.Line, i, p.Name, first))
		}
		names[p.Name] = p.Line
		s.Programs = append(s.Programs, p)
	}
	if len(s.Tools) == 0 && len(errs) == 0 {
		errs = append(errs, file+": no tools")
	}
	if len(errs) > 0 {
		return nil, errors.New(strings.Join(errs, "\n"))
	}
	return s, nil
}

// Host is what resolving reads from the build host (seams for tests).
type Host struct {
	// Owner returns the Debian package owning path and its installed
	// version; nil means dpkg-query.
	Owner func(path string) (pkg, version string, err error)
	// Libraries returns a program's ELF interpreter ("" for a static
	// program) and the shared libraries it resolves to; nil means ldd.
	Libraries func(prog string) (interp string, libs []string, err error)
	// GoBuild builds the Go package pkg (./..., from the module root of
	// the spec) into out and returns the Go version; nil means `go build`
	// (static, -trimpath, no VCS stamp: the same tree gives the same bytes).
	GoBuild func(moduleRoot, pkg, out string) (goVersion string, err error)
	// TmpDir holds built programs until they are packed; "" : os.TempDir.
	TmpDir string
}

// Entry is one file of the plan.
type Entry struct {
	Path   string // in the bundle: bin/fio, lib/libc.so.6
	Source string // on the host, symlinks resolved
	Mode   uint32
	// Origin is what the manifest records as the source: Source, or the
	// Go package of a program built into a temporary directory.
	Origin string
}

// Plan is a resolved spec: the manifest's tools and the files to pack,
// sorted by bundle path.
type Plan struct {
	Loader  string
	Tools   []bundle.Tool
	Entries []Entry
	// Cleanup removes the built programs (nil when none were built).
	Cleanup func()
}

// modulePath names this repository's programs in the manifest.
const modulePath = "github.com/cure-oss/cure"

func moduleRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(b, []byte("module "+modulePath+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s above the spec", modulePath)
		}
		dir = parent
	}
}

func goBuild(root, pkg, out string) (string, error) {
	cmd := exec.Command("go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	v, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOVERSION: %w", err)
	}
	return strings.TrimSpace(string(v)), nil
}

// sameBuildOf: installed is the pinned version or a binary-only rebuild of
// it (Debian's binNMU suffix +bN: the same source, rebuilt against newer
// libraries). Essential packages such as e2fsprogs come with the machine,
// at whichever build its image had, while the mirror offers the latest.
// The manifest records the installed version.
func sameBuildOf(installed, pin string) bool {
	if installed == pin {
		return true
	}
	n, ok := strings.CutPrefix(installed, pin+"+b")
	if !ok || n == "" {
		return false
	}
	for _, c := range n {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Resolve checks every tool against its pinned package and resolves the
// libraries. A library name two different host files claim is an error:
// the bundle's lib/ is one flat directory, searched by soname.
func Resolve(s *Spec, h Host) (*Plan, error) {
	if h.Owner == nil {
		h.Owner = dpkgOwner
	}
	if h.Libraries == nil {
		h.Libraries = lddLibraries
	}
	p := &Plan{}
	bySource := map[string]string{} // bundle path -> host file
	addFrom := func(bp, src, origin string, mode uint32) error {
		real, err := filepath.EvalSymlinks(src)
		if err != nil {
			return err
		}
		if origin == "" {
			origin = real
		}
		if old, ok := bySource[bp]; ok {
			if old != real {
				return fmt.Errorf("%s would be both %s and %s", bp, old, real)
			}
			return nil
		}
		bySource[bp] = real
		p.Entries = append(p.Entries, Entry{Path: bp, Source: real, Mode: mode, Origin: origin})
		return nil
	}
	add := func(bp, src string, mode uint32) error { return addFrom(bp, src, "", mode) }
	for _, t := range s.Tools {
		where := fmt.Sprintf("%s:%d: tool %s", s.File, t.Line, t.Name)
		pkg, ver, err := h.Owner(t.Path)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w (install the Debian package %s=%s)", where, t.Path, err, t.Package, t.Version)
		}
		if pkg != t.Package || !sameBuildOf(ver, t.Version) {
			return nil, fmt.Errorf("%s: %s is from %s %s, the spec pins %s %s (install %s=%s, or update the pin and the recorded outputs)",
				where, t.Path, pkg, ver, t.Package, t.Version, t.Package, t.Version)
		}
		interp, libs, err := h.Libraries(t.Path)
		if err != nil {
			return nil, fmt.Errorf("%s: shared libraries of %s: %w", where, t.Path, err)
		}
		tool := bundle.Tool{Name: t.Name, Path: "bin/" + t.Name, Package: t.Package, Version: ver}
		if err := add(tool.Path, t.Path, 0o755); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if interp != "" {
			loader := "lib/" + path.Base(interp)
			if p.Loader != "" && p.Loader != loader {
				return nil, fmt.Errorf("%s: interpreter %s, other tools use %s: one bundle has one loader", where, interp, p.Loader)
			}
			p.Loader = loader
			if err := add(loader, interp, 0o755); err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			tool.Needs = append(tool.Needs, loader)
		}
		for _, l := range libs {
			bp := "lib/" + path.Base(l)
			if err := add(bp, l, 0o644); err != nil {
				return nil, fmt.Errorf("%s: %w", where, err)
			}
			tool.Needs = append(tool.Needs, bp)
		}
		sort.Strings(tool.Needs)
		p.Tools = append(p.Tools, tool)
	}
	if len(s.Programs) > 0 {
		if h.GoBuild == nil {
			h.GoBuild = goBuild
		}
		root, err := moduleRoot(filepath.Dir(s.File))
		if err != nil {
			return nil, fmt.Errorf("%s: programs: %w", s.File, err)
		}
		tmp, err := os.MkdirTemp(h.TmpDir, "toolbundle-programs-")
		if err != nil {
			return nil, err
		}
		p.Cleanup = func() { os.RemoveAll(tmp) }
		for _, prog := range s.Programs {
			out := filepath.Join(tmp, prog.Name)
			ver, err := h.GoBuild(root, prog.Package, out)
			if err != nil {
				p.Cleanup()
				return nil, fmt.Errorf("%s:%d: program %s: %w", s.File, prog.Line, prog.Name, err)
			}
			tool := bundle.Tool{Name: prog.Name, Path: "bin/" + prog.Name, Package: modulePath + strings.TrimPrefix(prog.Package, "."), Version: ver}
			if err := addFrom(tool.Path, out, tool.Package, 0o755); err != nil {
				p.Cleanup()
				return nil, fmt.Errorf("%s:%d: %w", s.File, prog.Line, err)
			}
			p.Tools = append(p.Tools, tool)
		}
	}
	sort.Slice(p.Tools, func(i, j int) bool { return p.Tools[i].Name < p.Tools[j].Name })
	sort.Slice(p.Entries, func(i, j int) bool { return p.Entries[i].Path < p.Entries[j].Path })
	return p, nil
}

func dpkgOwner(p string) (string, string, error) {
	out, err := exec.Command("dpkg-query", "-S", p).Output()
	if err != nil {
		return "", "", fmt.Errorf("dpkg-query -S %s: %w", p, err)
	}
	// "fio: /usr/bin/fio" (a diversion or several owners: first line).
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	pkg, _, ok := strings.Cut(line, ": ")
	if !ok {
		return "", "", fmt.Errorf("dpkg-query -S %s: unexpected answer %q", p, line)
	}
	pkg, _, _ = strings.Cut(pkg, ":") // libiperf0:amd64
	ver, err := exec.Command("dpkg-query", "-W", "-f=${Version}", pkg).Output()
	if err != nil {
		return "", "", fmt.Errorf("dpkg-query -W %s: %w", pkg, err)
	}
	return pkg, strings.TrimSpace(string(ver)), nil
}

func lddLibraries(prog string) (string, []string, error) {
	interp, err := ldd.GetInterp(prog)
	if err != nil {
		return "", nil, err
	}
	if interp == "" {
		return "", nil, nil
	}
	all, err := ldd.List(prog)
	if err != nil {
		return "", nil, err
	}
	var libs []string
	for _, l := range all {
		if l != interp {
			libs = append(libs, l)
		}
	}
	sort.Strings(libs)
	return interp, libs, nil
}

// Pack writes the bundle of p to w and returns its manifest. Files are
// read twice (hashed for the manifest, which comes first, then copied); a
// file that changed in between is an error.
func Pack(p *Plan, w io.Writer) (*bundle.Manifest, error) {
	m := &bundle.Manifest{Format: bundle.Format, Loader: p.Loader, Tools: p.Tools}
	for _, e := range p.Entries {
		size, sum, err := hashFile(e.Source)
		if err != nil {
			return nil, err
		}
		m.Files = append(m.Files, bundle.File{Path: e.Path, Size: size, Mode: e.Mode, SHA256: sum, Source: e.Source})
		if e.Origin != "" {
			m.Files[len(m.Files)-1].Source = e.Origin
		}
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	raw = append(raw, '\n')
	z, err := zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(z)
	hdr := func(name string, size int64, mode uint32) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeReg, Name: name, Size: size, Mode: int64(mode),
			ModTime: time.Unix(0, 0), Format: tar.FormatUSTAR}
	}
	if err := tw.WriteHeader(hdr(bundle.ManifestName, int64(len(raw)), 0o644)); err != nil {
		return nil, err
	}
	if _, err := tw.Write(raw); err != nil {
		return nil, err
	}
	for i, f := range m.Files {
		if err := tw.WriteHeader(hdr(f.Path, f.Size, f.Mode)); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		if err := copyFile(tw, f, p.Entries[i].Source); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := z.Close(); err != nil {
		return nil, err
	}
	return m, nil
}

func hashFile(p string) (int64, string, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", fmt.Errorf("%s: %w", p, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

func copyFile(w io.Writer, f bundle.File, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), in)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	if n != f.Size || hex.EncodeToString(h.Sum(nil)) != f.SHA256 {
		return fmt.Errorf("%s changed while the bundle was packed", src)
	}
	return nil
}

// Report is toolbundle.json: what was built, for `--tool-bundle` of the
// coordinator and for people.
type Report struct {
	Spec     string           `json:"spec"`
	File     string           `json:"file"`
	SHA256   string           `json:"sha256"`
	Size     int64            `json:"size"`
	Manifest *bundle.Manifest `json:"manifest"`
}

// Build resolves and packs s into outDir/toolbundle.tar.zst and writes
// outDir/toolbundle.json beside it.
func Build(s *Spec, h Host, outDir string) (*Report, error) {
	p, err := Resolve(s, h)
	if err != nil {
		return nil, err
	}
	if p.Cleanup != nil {
		defer p.Cleanup()
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(outDir, ".toolbundle-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	h256 := sha256.New()
	cw := &countWriter{w: io.MultiWriter(tmp, h256)}
	m, err := Pack(p, cw)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("%s: packing: %w", s.File, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(outDir, ArchiveName)); err != nil {
		return nil, err
	}
	r := &Report{Spec: s.File, File: ArchiveName, SHA256: hex.EncodeToString(h256.Sum(nil)), Size: cw.n, Manifest: m}
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(outDir, ReportName), append(raw, '\n'), 0o644); err != nil {
		return nil, err
	}
	return r, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// Listing is the bundle's contents, one line per file: size, sha256,
// mode, path, and the tools with their packages.
func Listing(r *Report) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d bytes sha256 %s\n", r.File, r.Size, r.SHA256)
	for _, t := range r.Manifest.Tools {
		fmt.Fprintf(&b, "tool %s: %s from %s %s, %d files\n", t.Name, t.Path, t.Package, t.Version, len(t.Needs)+1)
	}
	var total int64
	for _, f := range r.Manifest.Files {
		fmt.Fprintf(&b, "%10d %s %04o %s\n", f.Size, f.SHA256, f.Mode, f.Path)
		total += f.Size
	}
	fmt.Fprintf(&b, "%d files, %d bytes unpacked\n", len(r.Manifest.Files), total)
	return b.String()
}
