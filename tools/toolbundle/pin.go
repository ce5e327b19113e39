package toolbundle

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// PinFormat names the layout of a pin.
const PinFormat = "cure-toolbundle-pin/1"

// Pin is what an image knows about the tool bundle it was built with
// (cure-build writes it from the built bundle's toolbundle.json, at the
// spec's tool_bundle_path): the archive's sha256 and size, which a fetch
// must match before anything reads the archive, and what the bundle
// offers, so the debug shell can list it without the network. Trust is
// rooted in the image, not in what the coordinator serves.
type Pin struct {
	Format string `json:"format"`
	SHA256 string `json:"sha256"`
	Size   int64  `json:"size"`
	// Loader is the bundle's dynamic loader (lib/ld-linux-x86-64.so.2).
	Loader string    `json:"loader,omitempty"`
	Tools  []PinTool `json:"tools"`
}

// PinTool is one program of the pinned bundle.
type PinTool struct {
	Name    string `json:"name"`
	Package string `json:"package"`
	Version string `json:"version"`
	// Files and Bytes are what unpacking it writes (the program, its
	// libraries and the loader).
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
}

// NewPin describes the bundle whose archive has sha256 and size, and whose
// manifest is m.
func NewPin(sha256 string, size int64, m *Manifest) (*Pin, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	sizes := map[string]int64{}
	for _, f := range m.Files {
		sizes[f.Path] = f.Size
	}
	p := &Pin{Format: PinFormat, SHA256: strings.ToLower(sha256), Size: size, Loader: m.Loader}
	for _, t := range m.Tools {
		pt := PinTool{Name: t.Name, Package: t.Package, Version: t.Version, Files: 1 + len(t.Needs), Bytes: sizes[t.Path]}
		for _, n := range t.Needs {
			pt.Bytes += sizes[n]
		}
		p.Tools = append(p.Tools, pt)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// ParsePin reads and validates a pin; name (its path) is in the errors.
func ParsePin(name string, b []byte) (*Pin, error) {
	var p Pin
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("tool bundle pin %s: %w", name, err)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("tool bundle pin %s: %w", name, err)
	}
	return &p, nil
}

// Validate checks the format, the digest (64 hex digits), the size and
// the tools' names (file names, each once).
func (p *Pin) Validate() error {
	if p.Format != PinFormat {
		return fmt.Errorf("format %q, want %q", p.Format, PinFormat)
	}
	if _, err := hex.DecodeString(p.SHA256); err != nil || len(p.SHA256) != 64 {
		return fmt.Errorf("sha256 %q is not 64 hex digits", p.SHA256)
	}
	if p.Size <= 0 || p.Size > MaxArchive {
		return fmt.Errorf("size %d outside 1..%d bytes", p.Size, MaxArchive)
	}
	if p.Loader != "" {
		if err := checkPath(p.Loader); err != nil {
			return fmt.Errorf("loader: %w", err)
		}
	}
	if len(p.Tools) == 0 {
		return errors.New("no tools")
	}
	seen := map[string]bool{}
	for i, t := range p.Tools {
		if err := checkPath("bin/" + t.Name); err != nil || seen[t.Name] {
			return fmt.Errorf("tools[%d]: name %q is not a file name or is listed twice", i, t.Name)
		}
		seen[t.Name] = true
	}
	return nil
}

// Tool returns the named tool.
func (p *Pin) Tool(name string) (PinTool, bool) {
	for _, t := range p.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return PinTool{}, false
}

// Names lists the tools in the pin's order (cure-build's: sorted).
func (p *Pin) Names() []string {
	var out []string
	for _, t := range p.Tools {
		out = append(out, t.Name)
	}
	return out
}
