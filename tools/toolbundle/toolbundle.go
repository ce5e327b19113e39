// Package toolbundle is the node side of CURE's tool bundle: the reference
// tools that do not fit the image (fio, stress-ng, iperf3 from Debian, with
// their shared libraries and their own dynamic loader) and cure-measure, the
// static helper that drives them, packed by cure-build (builder/toolbundle)
// as a zstd-compressed ustar archive whose first entry is manifest.json.
// The coordinator serves it as a content-addressed artifact; the runner
// fetches it through tools/artifact (size and sha256 checked before
// anything is read from it: Fetch) and takes the helper out of it
// (ExtractProgram); the helper unpacks the programs a check needs into
// tmpfs (Unpack) and runs them through the bundle's loader, so they use the
// bundle's libraries, never the image's.
//
// The reader accepts only what cure-build writes: regular files named in
// the manifest, at the size it states, under bin/ and lib/.
package toolbundle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// ErrNoTool is wrapped by the errors for a program the bundle does not
// hold: a check that drives it tested nothing (tools/checks ErrToolMissing).
var ErrNoTool = errors.New("tool missing")

// Format names this layout in the manifest.
const Format = "cure-toolbundle/1"

// ManifestName is the archive's first entry.
const ManifestName = "manifest.json"

// Manifest says what the bundle holds.
type Manifest struct {
	Format string `json:"format"`
	// Loader is the dynamic loader (lib/ld-linux-x86-64.so.2) the tools
	// are started through; empty when every tool is static.
	Loader string `json:"loader,omitempty"`
	Tools  []Tool `json:"tools"`
	Files  []File `json:"files"`
}

// Tool is one program of the bundle.
type Tool struct {
	Name string `json:"name"` // fio
	Path string `json:"path"` // bin/fio
	// Package and Version are the Debian package it came from, pinned by
	// the bundle spec and checked against dpkg when the bundle was built.
	Package string `json:"package"`
	Version string `json:"version"`
	// Needs are the bundle files it loads (lib/..., the loader included).
	Needs []string `json:"needs"`
}

// File is one archive entry after the manifest.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	Mode   uint32 `json:"mode"` // permission bits
	SHA256 string `json:"sha256"`
	// Source is the build host's path it was copied from.
	Source string `json:"source,omitempty"`
}

// ParseManifest reads and validates a manifest.
func ParseManifest(b []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("tool bundle manifest: %w", err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Validate checks the manifest's own consistency: the format, clean
// relative paths under bin/ or lib/, no duplicate, every tool's files
// listed.
func (m *Manifest) Validate() error {
	if m.Format != Format {
		return fmt.Errorf("tool bundle manifest: format %q, want %q", m.Format, Format)
	}
	files := map[string]bool{}
	for i, f := range m.Files {
		if err := checkPath(f.Path); err != nil {
			return fmt.Errorf("tool bundle manifest: files[%d]: %w", i, err)
		}
		if files[f.Path] {
			return fmt.Errorf("tool bundle manifest: files[%d]: %s listed twice", i, f.Path)
		}
		if f.Size < 0 || f.Mode&^0o777 != 0 {
			return fmt.Errorf("tool bundle manifest: files[%d] (%s): size %d or mode %o out of range", i, f.Path, f.Size, f.Mode)
		}
		files[f.Path] = true
	}
	if m.Loader != "" && !files[m.Loader] {
		return fmt.Errorf("tool bundle manifest: loader %s is not among the files", m.Loader)
	}
	if len(m.Tools) == 0 {
		return errors.New("tool bundle manifest: no tools")
	}
	names := map[string]bool{}
	for i, t := range m.Tools {
		if t.Name == "" || names[t.Name] {
			return fmt.Errorf("tool bundle manifest: tools[%d]: name %q empty or listed twice", i, t.Name)
		}
		names[t.Name] = true
		for _, p := range append([]string{t.Path}, t.Needs...) {
			if !files[p] {
				return fmt.Errorf("tool bundle manifest: tool %s: %s is not among the files", t.Name, p)
			}
		}
	}
	return nil
}

func checkPath(p string) error {
	dir, base := path.Split(p)
	if p == "" || path.Clean(p) != p || (dir != "bin/" && dir != "lib/") || base == "" || base == "." || base == ".." {
		return fmt.Errorf("path %q is not bin/NAME or lib/NAME", p)
	}
	return nil
}

// Tool returns the named tool.
func (m *Manifest) Tool(name string) (Tool, bool) {
	for _, t := range m.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

// Names lists the tools, sorted.
func (m *Manifest) Names() []string {
	var out []string
	for _, t := range m.Tools {
		out = append(out, t.Name)
	}
	slices.Sort(out)
	return out
}

// needed is the set of files the named tools need; an unknown name is an
// error naming what the bundle has.
func (m *Manifest) needed(tools []string) (map[string]bool, error) {
	want := map[string]bool{}
	for _, name := range tools {
		t, ok := m.Tool(name)
		if !ok {
			return nil, fmt.Errorf("%w: tool bundle has no %s (it has %s)", ErrNoTool, name, strings.Join(m.Names(), ", "))
		}
		want[t.Path] = true
		for _, n := range t.Needs {
			want[n] = true
		}
	}
	return want, nil
}

// Bundle is a bundle unpacked on the node.
type Bundle struct {
	Dir      string
	Manifest *Manifest
	// Unpacked are the tools whose files are in Dir.
	Unpacked []string
}

// Command prepares tool with args, started through the bundle's loader
// with the bundle's lib/ as its only library path.
func (b *Bundle) Command(ctx context.Context, tool string, args ...string) (*exec.Cmd, error) {
	t, ok := b.Manifest.Tool(tool)
	if !ok || !slices.Contains(b.Unpacked, tool) {
		return nil, fmt.Errorf("%w: tool bundle: %s was not unpacked (unpacked: %s)", ErrNoTool, tool, strings.Join(b.Unpacked, ", "))
	}
	prog := filepath.Join(b.Dir, t.Path)
	if b.Manifest.Static(t) {
		return exec.CommandContext(ctx, prog, args...), nil
	}
	argv := append([]string{"--library-path", filepath.Join(b.Dir, "lib"), prog}, args...)
	return exec.CommandContext(ctx, filepath.Join(b.Dir, b.Manifest.Loader), argv...), nil
}

// Static reports whether t runs without the loader (a Go helper).
func (m *Manifest) Static(t Tool) bool { return m.Loader == "" || !slices.Contains(t.Needs, m.Loader) }
