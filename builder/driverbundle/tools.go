package driverbundle

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
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

	"gopkg.in/yaml.v3"

	"github.com/cure-oss/cure/tools/gpu/driver"
)

// ToolsFile declares the site's GPU test tools a bundle carries:
//
//	tools:
//	  - name: dcgm                  # dcgm, nvbandwidth, nccl-tests or gpu-burn
//	    version: "4.6.0"
//	    source: "datacenter-gpu-manager-4-core/-cuda12 1:4.6.0-1, NVIDIA CUDA repository (ubuntu2404)"
//	    programs:                   # program -> bundle path
//	      nv-hostengine: bin/nv-hostengine
//	      dcgmi: bin/dcgmi
//	    files: [lib/libdcgm.so.4]   # more files to pin (optional)
//	    sha256:                     # expected sha256 by bundle path (optional;
//	      bin/dcgmi: 3b1f...        # every file of gpu-burn, which BuildGPUBurn writes)
//
// The builder checks each program and file is a regular file of the
// bundle whose sha256 matches its pin, if any, records its sha256 and size
// in the image's driver manifest and report, and the runner finds the
// programs there.
const ToolsFile = "gpu-tools.yaml"

type toolsDoc struct {
	Tools []toolEntry `yaml:"tools"`
}

// toolEntry is one tool of ToolsFile. SHA256 pins files by their bundle
// path (as programs and files name them): a pinned file whose bytes differ
// is refused. A tool CURE builds (driver.PinnedTools: gpu-burn, written by
// BuildGPUBurn) must pin every program and file.
type toolEntry struct {
	Name     string            `yaml:"name"`
	Version  string            `yaml:"version"`
	Source   string            `yaml:"source"`
	Programs map[string]string `yaml:"programs"`
	Files    []string          `yaml:"files,omitempty"`
	SHA256   map[string]string `yaml:"sha256,omitempty"`
}

// readTools reads ToolsFile when the bundle has one: errors name the file
// and the tool.
func (b *Bundle) readTools() error {
	p := filepath.Join(b.dir, ToolsFile)
	st, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: must be a regular file", ToolsFile)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	var doc toolsDoc
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: %w", ToolsFile, err)
	}
	files := map[string]File{}
	for _, f := range b.Files {
		files[f.Dst] = f
	}
	var errs []string
	seen := map[string]bool{}
	for i, t := range doc.Tools {
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Sprintf("%s: tools[%d]: %s", ToolsFile, i, fmt.Sprintf(format, args...)))
		}
		if seen[t.Name] {
			bad("%s declared twice", t.Name)
			continue
		}
		if tool, ok := readTool(t, files, bad); ok {
			seen[t.Name] = true
			b.Tools = append(b.Tools, tool)
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "\n"))
	}
	return nil
}

// readTool checks one declared tool against the bundle's files and pins
// them; ok is false when the tool is not one CURE knows.
func readTool(t toolEntry, files map[string]File, bad func(string, ...any)) (driver.Tool, bool) {
	req, known := driver.ToolPrograms[t.Name]
	switch {
	case !known:
		bad("name %q: want %s", t.Name, strings.Join(sortedKeys(driver.ToolPrograms), ", "))
		return driver.Tool{}, false
	case strings.TrimSpace(t.Version) == "":
		bad("%s: version: missing (the release the site pins, e.g. 4.6.0)", t.Name)
	case strings.TrimSpace(t.Source) == "":
		bad("%s: source: missing (where the files came from: package and release, or repository, tag and CUDA)", t.Name)
	}
	tool := driver.Tool{Name: t.Name, Version: t.Version, Source: t.Source, Programs: map[string]string{}}
	for _, prog := range req {
		if t.Programs[prog] == "" {
			bad("%s: programs.%s: missing", t.Name, prog)
		}
	}
	mustPin := slices.Contains(driver.PinnedTools, t.Name)
	pinned := map[string]bool{}
	pin := func(what, rel string) (string, bool) {
		dst, ok := bundlePath(rel)
		f, found := files[dst]
		switch {
		case !ok:
			bad("%s: %s: %q is not a bundle path (bin/..., lib/..., libexec/..., share/...)", t.Name, what, rel)
			return "", false
		case !found:
			bad("%s: %s: %s is not in the bundle", t.Name, what, rel)
			return "", false
		case f.Link != "":
			bad("%s: %s: %s is a symlink: name the file it points to", t.Name, what, rel)
			return "", false
		}
		sum, err := fileSHA256(f.Src)
		if err != nil {
			bad("%s: %s: %v", t.Name, what, err)
			return "", false
		}
		want, has := t.SHA256[rel]
		pinned[rel] = true
		switch {
		case has && !strings.EqualFold(want, sum):
			bad("%s: %s: %s has sha256 %s, but %s pins %s: the file changed since it was built and pinned (rebuild it, e.g. cure-build --build-gpu-burn, or correct the pin)",
				t.Name, what, rel, sum, ToolsFile, want)
			return "", false
		case !has && mustPin:
			bad("%s: %s: %s has no sha256 pin (sha256.%s): %s is built by cure-build --build-gpu-burn, which pins every file it writes",
				t.Name, what, rel, rel, t.Name)
			return "", false
		}
		tool.Files = append(tool.Files, driver.ToolFile{Path: "/" + dst, Size: f.Size, SHA256: sum})
		return "/" + dst, true
	}
	for _, prog := range sortedKeys(t.Programs) {
		if !slices.Contains(req, prog) && !slices.Contains(driver.ToolOptional[t.Name], prog) {
			bad("%s: programs.%s: not a program of %s (want %s)", t.Name, prog, t.Name,
				strings.Join(append(slices.Clone(req), driver.ToolOptional[t.Name]...), ", "))
			continue
		}
		if dst, ok := pin("programs."+prog, t.Programs[prog]); ok {
			if !files[strings.TrimPrefix(dst, "/")].Exec {
				bad("%s: programs.%s: %s is not executable", t.Name, prog, t.Programs[prog])
			}
			tool.Programs[prog] = dst
		}
	}
	for j, rel := range t.Files {
		pin(fmt.Sprintf("files[%d]", j), rel)
	}
	for _, rel := range sortedKeys(t.SHA256) {
		if !pinned[rel] {
			bad("%s: sha256.%s: pins a path that is neither among its programs nor its files", t.Name, rel)
		}
	}
	hasKernel := slices.ContainsFunc(t.Files, func(rel string) bool { return path.Base(rel) == driver.GPUBurnKernel })
	if t.Name == driver.ToolGPUBurn && !hasKernel {
		bad("%s: files: no %s: gpu_burn loads its compare kernel at run time (cure-build --build-gpu-burn installs it as share/gpu-burn/%s)",
			t.Name, driver.GPUBurnKernel, driver.GPUBurnKernel)
	}
	return tool, true
}

// bundlePath maps a bundle-relative path to its image path.
func bundlePath(rel string) (string, bool) {
	rel = path.Clean(rel)
	top, rest, ok := strings.Cut(rel, "/")
	dst, known := layout[top]
	if !ok || !known || rest == "" || strings.HasPrefix(rest, "../") || rest == ".." {
		return "", false
	}
	return path.Join(dst, rest), true
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
