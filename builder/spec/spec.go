// Package spec parses image specs: the YAML files under initramfs/ that say
// what goes into a CURE (or host OS) initramfs. Parsing is strict (unknown
// fields are errors) and every error names file:line.
package spec

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Str is a scalar with the position it was read from, so that checks made
// after decoding can still point at the line.
type Str struct {
	Value string
	Line  int
}

// UnmarshalYAML records the node position.
func (s *Str) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: expected a string, found %s", n.Line, kindName(n.Kind))
	}
	s.Value, s.Line = n.Value, n.Line
	return nil
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return "a scalar"
}

// Spec is one image spec.
type Spec struct {
	// File is the path the spec was loaded from; relative paths in Files
	// are resolved against its directory.
	File string `yaml:"-"`

	// Init is the import path of the init command (u-root's init, or
	// CURE's own with InitStandalone).
	Init Str `yaml:"init"`
	// InitStandalone ("true") builds Init as its own static binary at
	// /init instead of a busybox command: PID 1 then starts without paying
	// the busybox's package initialisation, and it starts the uinit itself
	// (/bbin/<uinit>).
	InitStandalone Str `yaml:"init_standalone"`
	// Uinit is the import path of the command u-root's init starts.
	Uinit Str `yaml:"uinit"`
	// UinitArgs are baked into /etc/uinit.flags.
	UinitArgs []Str `yaml:"uinit_args"`
	// Shell is the import path of the debug shell (optional; must also be
	// listed in Commands or be the uinit).
	Shell Str `yaml:"shell"`
	// Commands are extra Go commands (import paths) built into the busybox.
	Commands []Str `yaml:"commands"`
	// BuildTags are Go build tags for the busybox (e.g. grpcnotrace, which
	// drops gRPC's x/net/trace and with it text/template, whose reflection
	// keeps the linker from dropping unused methods).
	BuildTags []Str `yaml:"build_tags"`
	// Modules are kernel module names; their dependency closure is added.
	Modules []Str `yaml:"modules"`
	// CompressModules ("zstd") stores each module as <name>.ko.zst: the
	// kernel unpacks a few MB instead of every driver's full size at every
	// boot, and the loader decompresses only the modules it loads.
	CompressModules Str `yaml:"compress_modules"`
	// Tools are host ELF binaries copied with their shared libraries.
	Tools []Str `yaml:"tools"`
	// Files are "src:dst" pairs; src relative to the spec's directory.
	Files []Str `yaml:"files"`
	// CAPath is where the site CA (cure-build --ca) is placed in the image.
	// When set, --ca is mandatory; when empty, --ca is refused.
	CAPath Str `yaml:"ca_path"`
	// ToolBundlePath is where the image carries the pin of the tool
	// bundle it was built with (cure-build --pin-tool-bundle: the bundle's
	// sha256, size and tools), which cure-tools checks a fetched bundle
	// against. When set, --pin-tool-bundle is mandatory; when empty, refused.
	ToolBundlePath Str `yaml:"tool_bundle_path"`
	// Cmdline are default kernel parameters for the boot script.
	Cmdline Str `yaml:"cmdline"`
	// PCIIDs puts a PCI id database at /usr/share/misc/pci.ids (the
	// inventory names devices with it), trimmed to the listed vendors.
	PCIIDs *PCIIDs `yaml:"pci_ids"`
	// Arch holds what differs per target architecture (cure-build --arch):
	// the spec's top level is the amd64 image, and an entry here replaces
	// the fields it sets for that architecture.
	Arch map[string]*ArchSpec `yaml:"arch"`
}

// Arches are the architectures cure-build builds for (GOARCH names).
var Arches = []string{"amd64", "arm64"}

// ArchSpec is one architecture's part of a spec.
type ArchSpec struct {
	// Cmdline replaces the spec's cmdline (the serial console is ttyAMA0
	// on Arm's PL011, ttyS0 on x86).
	Cmdline *Str `yaml:"cmdline"`
	// Tools, when present (even empty), replaces the spec's tools: those
	// are host binaries, of the build host's architecture.
	Tools *[]Str `yaml:"tools"`
	// ToolBundlePath, when present, replaces the spec's tool_bundle_path;
	// empty pins no tool bundle (the bundle's tools are x86-64 builds).
	ToolBundlePath *Str `yaml:"tool_bundle_path"`
	// OptionalModules are spec modules this architecture's kernel may
	// lack: one missing is left out and named in report.json
	// (missing_modules). Any other missing module fails the build.
	OptionalModules []Str `yaml:"optional_modules"`
}

// ForArch returns the spec as it applies to arch, with arch's overrides
// in place; amd64 without an arch entry is the spec itself.
func (s *Spec) ForArch(arch string) (*Spec, error) {
	if !knownArch(arch) {
		return nil, fmt.Errorf("%s: architecture %q: want one of %s", s.File, arch, strings.Join(Arches, ", "))
	}
	a := s.Arch[arch]
	if a == nil {
		return s, nil
	}
	c := *s
	if a.Cmdline != nil {
		c.Cmdline = *a.Cmdline
	}
	if a.Tools != nil {
		c.Tools = *a.Tools
	}
	if a.ToolBundlePath != nil {
		c.ToolBundlePath = *a.ToolBundlePath
	}
	return &c, nil
}

// OptionalModules are arch's optional module names (nil for none).
func (s *Spec) OptionalModules(arch string) []Str {
	if a := s.Arch[arch]; a != nil {
		return a.OptionalModules
	}
	return nil
}

func knownArch(a string) bool {
	for _, k := range Arches {
		if k == a {
			return true
		}
	}
	return false
}

// PCIIDsPath is where the image carries pci.ids.
const PCIIDsPath = "usr/share/misc/pci.ids"

// PCIIDs is the pci_ids section of a spec.
type PCIIDs struct {
	// Src is a host pci.ids (Debian's pci.ids package: /usr/share/misc/pci.ids).
	Src Str `yaml:"src"`
	// Vendors are PCI vendor ids (4 lowercase hex digits) whose devices
	// keep their names; the others are listed by id only. Empty keeps
	// every vendor. Subsystem names are always dropped (nothing reads them).
	Vendors []Str `yaml:"vendors"`
}

// File pairs a host source with an archive destination (no leading slash).
type File struct {
	Src, Dst string
}

var (
	importPathRE = regexp.MustCompile(`^[a-zA-Z0-9._~-]+(/[a-zA-Z0-9._~-]+)+$`)
	moduleRE     = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)
	buildTagRE   = regexp.MustCompile(`^[a-zA-Z0-9_.]+$`)
	vendorRE     = regexp.MustCompile(`^[0-9a-f]{4}$`)
)

// Load reads and validates a spec file.
func Load(file string) (*Spec, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading image spec: %w", err)
	}
	return Parse(file, data)
}

// Parse decodes and validates spec bytes; file is used in messages and to
// resolve relative paths.
func Parse(file string, data []byte) (*Spec, error) {
	var s Spec
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return nil, yamlError(file, err)
	}
	s.File = file
	if err := s.validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

var yamlLineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// yamlError rewrites yaml.v3's "line N: msg" errors as "file:N: msg".
func yamlError(file string, err error) error {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	var errs []error
	for _, m := range msgs {
		if sm := yamlLineRE.FindStringSubmatch(m); sm != nil {
			errs = append(errs, fmt.Errorf("%s:%s: %s", file, sm[1], sm[2]))
		} else {
			errs = append(errs, fmt.Errorf("%s: %s", file, strings.TrimPrefix(m, "yaml: ")))
		}
	}
	return errors.Join(errs...)
}

func (s *Spec) errAt(line int, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s", s.File, line, fmt.Sprintf(format, args...))
}

func (s *Spec) validate() error {
	var errs []error
	if s.Init.Value == "" {
		errs = append(errs, fmt.Errorf("%s: init: required (e.g. github.com/u-root/u-root/cmds/core/init)", s.File))
	}
	for _, f := range []struct {
		name string
		v    Str
	}{{"init", s.Init}, {"uinit", s.Uinit}, {"shell", s.Shell}} {
		if f.v.Value != "" && !importPathRE.MatchString(f.v.Value) {
			errs = append(errs, s.errAt(f.v.Line, "%s: %q is not a Go import path", f.name, f.v.Value))
		}
	}
	switch s.CompressModules.Value {
	case "", "none", "zstd":
	default:
		errs = append(errs, s.errAt(s.CompressModules.Line, "compress_modules: %q: want zstd or none", s.CompressModules.Value))
	}
	switch s.InitStandalone.Value {
	case "", "true", "false":
	default:
		errs = append(errs, s.errAt(s.InitStandalone.Line, "init_standalone: %q: want true or false", s.InitStandalone.Value))
	}
	seen := map[string]int{}
	for i, c := range s.Commands {
		if !importPathRE.MatchString(c.Value) {
			errs = append(errs, s.errAt(c.Line, "commands[%d]: %q is not a Go import path", i, c.Value))
		}
		if prev, dup := seen[c.Value]; dup {
			errs = append(errs, s.errAt(c.Line, "commands[%d]: %q already listed at line %d", i, c.Value, prev))
		}
		seen[c.Value] = c.Line
	}
	tags := map[string]int{}
	for i, t := range s.BuildTags {
		if !buildTagRE.MatchString(t.Value) {
			errs = append(errs, s.errAt(t.Line, "build_tags[%d]: %q is not a Go build tag", i, t.Value))
		}
		if prev, dup := tags[t.Value]; dup {
			errs = append(errs, s.errAt(t.Line, "build_tags[%d]: %q already listed at line %d", i, t.Value, prev))
		}
		tags[t.Value] = t.Line
	}
	if s.Shell.Value != "" && s.Shell.Value != s.Uinit.Value {
		if _, ok := seen[s.Shell.Value]; !ok {
			errs = append(errs, s.errAt(s.Shell.Line, "shell: %q must also be listed under commands", s.Shell.Value))
		}
	}
	mods := map[string]int{}
	for i, m := range s.Modules {
		if !moduleRE.MatchString(m.Value) {
			errs = append(errs, s.errAt(m.Line, "modules[%d]: %q is not a kernel module name", i, m.Value))
		}
		name := strings.ReplaceAll(m.Value, "-", "_")
		if prev, dup := mods[name]; dup {
			errs = append(errs, s.errAt(m.Line, "modules[%d]: %q already listed at line %d", i, m.Value, prev))
		}
		mods[name] = m.Line
	}
	for i, t := range s.Tools {
		if !filepath.IsAbs(t.Value) {
			errs = append(errs, s.errAt(t.Line, "tools[%d]: %q must be an absolute host path", i, t.Value))
		}
	}
	for i, f := range s.Files {
		if _, err := s.parseFile(f); err != nil {
			errs = append(errs, s.errAt(f.Line, "files[%d]: %v", i, err))
		}
	}
	if p := s.PCIIDs; p != nil {
		if !filepath.IsAbs(p.Src.Value) {
			errs = append(errs, s.errAt(p.Src.Line, "pci_ids.src: %q must be an absolute host path", p.Src.Value))
		}
		seenV := map[string]int{}
		for i, v := range p.Vendors {
			if !vendorRE.MatchString(v.Value) {
				errs = append(errs, s.errAt(v.Line, "pci_ids.vendors[%d]: %q is not a PCI vendor id (4 lowercase hex digits, e.g. 10de)", i, v.Value))
			} else if prev, dup := seenV[v.Value]; dup {
				errs = append(errs, s.errAt(v.Line, "pci_ids.vendors[%d]: %q already listed at line %d", i, v.Value, prev))
			}
			seenV[v.Value] = v.Line
		}
	}
	if s.CAPath.Value != "" && !path.IsAbs(s.CAPath.Value) {
		errs = append(errs, s.errAt(s.CAPath.Line, "ca_path: %q must be an absolute path in the image", s.CAPath.Value))
	}
	if s.ToolBundlePath.Value != "" && !path.IsAbs(s.ToolBundlePath.Value) {
		errs = append(errs, s.errAt(s.ToolBundlePath.Line, "tool_bundle_path: %q must be an absolute path in the image", s.ToolBundlePath.Value))
	}
	errs = append(errs, s.validateArch(mods)...)
	return errors.Join(errs...)
}

// validateArch checks the arch section: known architectures, tools as
// absolute paths, optional modules that the spec lists.
func (s *Spec) validateArch(mods map[string]int) []error {
	var errs []error
	names := make([]string, 0, len(s.Arch))
	for name := range s.Arch {
		names = append(names, name)
	}
	sort.Strings(names) // errors in a stable order
	for _, name := range names {
		a := s.Arch[name]
		if !knownArch(name) {
			errs = append(errs, fmt.Errorf("%s: arch: %q is not an architecture cure-build knows (%s)", s.File, name, strings.Join(Arches, ", ")))
			continue
		}
		if a == nil {
			continue
		}
		if a.Tools != nil {
			for i, t := range *a.Tools {
				if !filepath.IsAbs(t.Value) {
					errs = append(errs, s.errAt(t.Line, "arch.%s.tools[%d]: %q must be an absolute host path", name, i, t.Value))
				}
			}
		}
		if p := a.ToolBundlePath; p != nil && p.Value != "" && !path.IsAbs(p.Value) {
			errs = append(errs, s.errAt(p.Line, "arch.%s.tool_bundle_path: %q must be an absolute path in the image", name, p.Value))
		}
		for i, m := range a.OptionalModules {
			if _, ok := mods[strings.ReplaceAll(m.Value, "-", "_")]; !ok {
				errs = append(errs, s.errAt(m.Line, "arch.%s.optional_modules[%d]: %q is not one of the spec's modules", name, i, m.Value))
			}
		}
	}
	return errs
}

func (s *Spec) parseFile(f Str) (File, error) {
	src, dst, ok := strings.Cut(f.Value, ":")
	if !ok || src == "" || dst == "" {
		return File{}, fmt.Errorf("%q: expected \"src:dst\"", f.Value)
	}
	if !path.IsAbs(dst) {
		return File{}, fmt.Errorf("%q: destination %q must be absolute", f.Value, dst)
	}
	clean := path.Clean(dst)
	if clean == "/" {
		return File{}, fmt.Errorf("%q: destination is the root directory", f.Value)
	}
	if !filepath.IsAbs(src) {
		src = filepath.Join(filepath.Dir(s.File), src)
	}
	return File{Src: src, Dst: strings.TrimPrefix(clean, "/")}, nil
}

// ResolvedFiles returns Files with sources resolved against the spec's
// directory and destinations relative to the archive root.
func (s *Spec) ResolvedFiles() []File {
	var out []File
	for _, f := range s.Files {
		rf, err := s.parseFile(f)
		if err == nil { // validated in Parse
			out = append(out, rf)
		}
	}
	return out
}

// Values flattens a []Str.
func Values(in []Str) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = s.Value
	}
	return out
}
