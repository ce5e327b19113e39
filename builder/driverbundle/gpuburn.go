package driverbundle

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/cure-oss/cure/tools/gpu/driver"
)

// GPUBurnBuild is what BuildGPUBurn needs: the site supplies gpu-burn's
// source and the CUDA toolkit its driver bundle's driver supports; nothing
// is fetched.
type GPUBurnBuild struct {
	// Source is gpu-burn's source tarball (github.com/wilicc/gpu-burn, a
	// tag's or commit's archive: .tar.gz, .tgz, .tar.zst, .tar.xz, .tar)
	// from a release with the -c option (2022 or later).
	Source string
	// Version is the tag or commit Source is, recorded in gpu-tools.yaml.
	Version string
	// CUDA is the CUDA toolkit's root: bin/nvcc, include/, lib64/ (the
	// CUDA runtime and cuBLAS that gpu_burn links are copied from there).
	CUDA string
	// Compute is the compute capability compare.ptx is compiled for
	// ("90": H100/H200; the driver JIT-compiles PTX for newer GPUs).
	Compute string
	// Bundle is the driver bundle directory gpu-burn is installed into.
	Bundle string
	// Make is the make program; "" is make on PATH.
	Make string
	// TmpDir is where the source is unpacked; "" is os.TempDir().
	TmpDir string
	Log    *slog.Logger
}

// Bundle paths of what BuildGPUBurn installs; the image has them at
// /usr/bin/gpu_burn and /usr/share/gpu-burn/compare.ptx.
const (
	GPUBurnProgram = "bin/gpu_burn"
	GPUBurnKernel  = "share/gpu-burn/" + driver.GPUBurnKernel
)

// gpuBurnPlan is a checked GPUBurnBuild: what make is run with and where
// its output goes.
type gpuBurnPlan struct {
	make    string
	nvcc    string
	args    []string // make's arguments after -C SRC
	env     []string
	libDirs []string // where the CUDA libraries gpu_burn needs are
	source  string   // gpu-tools.yaml's source line
}

var computeRE = regexp.MustCompile(`^[1-9][0-9]?\.?[0-9]a?$`)

// planGPUBurn checks the inputs and says how gpu-burn will be built.
func planGPUBurn(o GPUBurnBuild) (gpuBurnPlan, error) {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if st, err := os.Stat(o.Source); err != nil || !st.Mode().IsRegular() {
		bad("source %q: expected gpu-burn's source tarball, a regular file (%v)", o.Source, err)
	}
	if strings.TrimSpace(o.Version) == "" {
		bad("version: missing (the gpu-burn tag or commit the source is)")
	}
	if !computeRE.MatchString(o.Compute) {
		bad("compute %q: expected a CUDA compute capability such as 90 or 9.0 (H100/H200)", o.Compute)
	}
	if st, err := os.Stat(o.Bundle); err != nil || !st.IsDir() {
		bad("bundle %q: expected the driver bundle's directory (%v)", o.Bundle, err)
	}
	p := gpuBurnPlan{make: o.Make, nvcc: filepath.Join(o.CUDA, "bin", "nvcc")}
	if st, err := os.Stat(p.nvcc); o.CUDA == "" || err != nil || st.Mode()&0o111 == 0 {
		bad("cuda %q: expected a CUDA toolkit with an executable bin/nvcc (%v)", o.CUDA, err)
	}
	if p.make == "" {
		m, err := exec.LookPath("make")
		if err != nil {
			bad("make: not found on PATH (%v)", err)
		}
		p.make = m
	}
	if len(errs) > 0 {
		return gpuBurnPlan{}, fmt.Errorf("gpu-burn build: %s", strings.Join(errs, "; "))
	}
	cuda, _ := filepath.Abs(o.CUDA)
	p.nvcc = filepath.Join(cuda, "bin", "nvcc")
	// gpu-burn's Makefile: CUDAPATH, NVCC and COMPUTE are its variables;
	// gpu_burn is its program target.
	p.args = []string{"CUDAPATH=" + cuda, "NVCC=" + p.nvcc, "COMPUTE=" + o.Compute, "gpu_burn"}
	p.env = append(os.Environ(), "PATH="+filepath.Join(cuda, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	p.libDirs = []string{filepath.Join(cuda, "lib64"), filepath.Join(cuda, "targets", "x86_64-linux", "lib")}
	sum, err := fileSHA256(o.Source)
	if err != nil {
		return gpuBurnPlan{}, fmt.Errorf("gpu-burn build: source: %w", err)
	}
	p.source = fmt.Sprintf("github.com/wilicc/gpu-burn %s (%s, sha256 %s), built by cure-build --build-gpu-burn with CUDA %s, compute_%s",
		o.Version, filepath.Base(o.Source), sum, cudaVersion(cuda), strings.ReplaceAll(o.Compute, ".", ""))
	return p, nil
}

// cudaVersion reads the toolkit's version.json ({"cuda": {"version"}}),
// else names the directory.
func cudaVersion(root string) string {
	var v struct {
		CUDA struct {
			Version string `json:"version"`
		} `json:"cuda"`
	}
	if data, err := os.ReadFile(filepath.Join(root, "version.json")); err == nil && json.Unmarshal(data, &v) == nil && v.CUDA.Version != "" {
		return v.CUDA.Version
	}
	return "at " + root
}

// BuildGPUBurn builds gpu-burn from o.Source with o.CUDA's nvcc (gpu-burn's
// own Makefile: make CUDAPATH=... NVCC=... COMPUTE=... gpu_burn), installs
// gpu_burn as bin/gpu_burn, its compare kernel as share/gpu-burn/compare.ptx
// and the CUDA libraries it needs from the toolkit into lib/, and writes
// the gpu-burn entry of the bundle's gpu-tools.yaml with every file pinned
// by sha256 (other entries are kept). Open then refuses the bundle if any
// of those files changes.
func BuildGPUBurn(ctx context.Context, o GPUBurnBuild) (driver.Tool, error) {
	p, err := planGPUBurn(o)
	if err != nil {
		return driver.Tool{}, err
	}
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	tmp, err := os.MkdirTemp(o.TmpDir, "cure-gpu-burn-")
	if err != nil {
		return driver.Tool{}, err
	}
	defer os.RemoveAll(tmp)
	if err := extract(o.Source, tmp); err != nil {
		return driver.Tool{}, fmt.Errorf("gpu-burn source %s: %w", o.Source, err)
	}
	src, err := sourceDir(tmp)
	if err != nil {
		return driver.Tool{}, fmt.Errorf("gpu-burn source %s: %w", o.Source, err)
	}
	args := append([]string{"-C", src}, p.args...)
	log.Info("gpu-burn: building", "make", p.make, "args", args)
	cmd := exec.CommandContext(ctx, p.make, args...)
	cmd.Env = p.env
	if out, err := cmd.CombinedOutput(); err != nil {
		return driver.Tool{}, fmt.Errorf("gpu-burn build: %s %s: %w: %s", p.make, strings.Join(args, " "), err, clipOut(out))
	}
	entry, err := installGPUBurn(src, o, p)
	if err != nil {
		return driver.Tool{}, fmt.Errorf("gpu-burn build: %w", err)
	}
	if err := writeToolEntry(filepath.Join(o.Bundle, ToolsFile), entry); err != nil {
		return driver.Tool{}, fmt.Errorf("gpu-burn build: %w", err)
	}
	tool := driver.Tool{Name: entry.Name, Version: entry.Version, Source: entry.Source, Programs: map[string]string{}}
	for _, rel := range append([]string{GPUBurnProgram}, entry.Files...) {
		dst, _ := bundlePath(rel)
		tool.Files = append(tool.Files, driver.ToolFile{Path: "/" + dst, SHA256: entry.SHA256[rel]})
		if rel == GPUBurnProgram {
			tool.Programs["gpu_burn"] = "/" + dst
		}
	}
	log.Info("gpu-burn: installed and pinned", "bundle", o.Bundle, "gpu_burn", entry.SHA256[GPUBurnProgram], "files", len(entry.Files))
	return tool, nil
}

// installGPUBurn copies what make built in src, and the CUDA libraries
// gpu_burn needs, into the bundle, and returns their gpu-tools.yaml entry
// with every file pinned.
func installGPUBurn(src string, o GPUBurnBuild, p gpuBurnPlan) (toolEntry, error) {
	entry := toolEntry{Name: driver.ToolGPUBurn, Version: o.Version, Source: p.source,
		Programs: map[string]string{"gpu_burn": GPUBurnProgram}, Files: []string{GPUBurnKernel}, SHA256: map[string]string{}}
	var err error
	if entry.SHA256[GPUBurnProgram], err = installFile(filepath.Join(src, "gpu_burn"), filepath.Join(o.Bundle, GPUBurnProgram), 0o755); err != nil {
		return entry, fmt.Errorf("make left no usable gpu_burn: %w", err)
	}
	if entry.SHA256[GPUBurnKernel], err = installFile(filepath.Join(src, driver.GPUBurnKernel), filepath.Join(o.Bundle, GPUBurnKernel), 0o644); err != nil {
		return entry, fmt.Errorf("make left no usable %s: %w", driver.GPUBurnKernel, err)
	}
	libs, err := cudaLibraries(filepath.Join(src, "gpu_burn"), p.libDirs)
	if err != nil {
		return entry, err
	}
	for _, l := range libs {
		rel, dst := "lib/"+l.name, filepath.Join(o.Bundle, "lib", l.name)
		if err := installLibrary(l.path, dst); err != nil {
			return entry, err
		}
		if entry.SHA256[rel], err = fileSHA256(dst); err != nil {
			return entry, err
		}
		entry.Files = append(entry.Files, rel)
	}
	return entry, nil
}

// sourceDir finds gpu-burn's Makefile: at the top of the archive or in its
// one top-level directory (GitHub's archives: gpu-burn-<tag>/).
func sourceDir(dir string) (string, error) {
	cands := []string{dir}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) == 1 && ents[0].IsDir() {
		cands = append(cands, filepath.Join(dir, ents[0].Name()))
	}
	for _, d := range cands {
		_, errMk := os.Stat(filepath.Join(d, "Makefile"))
		_, errCu := os.Stat(filepath.Join(d, "compare.cu"))
		if errMk == nil && errCu == nil {
			return d, nil
		}
	}
	return "", errors.New("no Makefile and compare.cu at its top or in its one top-level directory: not gpu-burn's source")
}

// installFile copies a regular file (not a symlink) to dst with mode and
// returns its sha256.
func installFile(from, dst string, mode os.FileMode) (string, error) {
	st, err := os.Lstat(from)
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() || st.Size() == 0 {
		return "", fmt.Errorf("%s: expected a non-empty regular file, found %s of %d bytes", from, st.Mode().Type(), st.Size())
	}
	data, err := os.ReadFile(from)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	tmp := dst + ".cure-tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// installLibrary copies a CUDA library (its real file, under the name the
// program asks for) into the bundle's lib/, unless the same bytes are
// there; different bytes under that name are refused rather than replaced.
func installLibrary(from, dst string) error {
	want, err := fileSHA256(from)
	if err != nil {
		return err
	}
	if st, err := os.Lstat(dst); err == nil {
		have, herr := fileSHA256(dst)
		if st.Mode().IsRegular() && herr == nil && have == want {
			return nil
		}
		return fmt.Errorf("%s is already in the bundle with other bytes than the toolkit's %s: gpu_burn and the bundle's other tools must use one CUDA", dst, from)
	}
	_, err = installFile(from, dst, 0o644)
	return err
}

type cudaLib struct{ name, path string }

// cudaLibraries lists the shared libraries prog needs, directly or through
// another, that the CUDA toolkit's lib dirs have (libcudart, libcublas,
// libcublasLt); the driver's own libcuda.so.1 is not among them. A prog
// that is not ELF needs none.
func cudaLibraries(prog string, dirs []string) ([]cudaLib, error) {
	var out []cudaLib
	seen := map[string]bool{}
	queue := []string{prog}
	for len(queue) > 0 {
		f := queue[0]
		queue = queue[1:]
		ef, err := elf.Open(f)
		if err != nil {
			if f == prog {
				return nil, nil
			}
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		needed, err := ef.ImportedLibraries()
		ef.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: reading its dynamic section: %w", f, err)
		}
		for _, n := range needed {
			if seen[n] || path.Base(n) != n {
				continue
			}
			seen[n] = true
			for _, d := range dirs {
				p, err := filepath.EvalSymlinks(filepath.Join(d, n))
				if err != nil {
					continue
				}
				out = append(out, cudaLib{name: n, path: p})
				queue = append(queue, p)
				break
			}
		}
	}
	slices.SortFunc(out, func(a, b cudaLib) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// writeToolEntry puts e into the ToolsFile at p, replacing an entry of the
// same name and keeping the others (and their comments).
func writeToolEntry(p string, e toolEntry) error {
	data, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	var root yaml.Node
	if len(bytes.TrimSpace(data)) > 0 {
		if err := yaml.Unmarshal(data, &root); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	if root.Kind == 0 {
		root = yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{{Kind: yaml.MappingNode, Tag: "!!map"}}}
	}
	top := root.Content[0]
	if root.Kind != yaml.DocumentNode || top.Kind != yaml.MappingNode {
		return fmt.Errorf("%s: expected a mapping with tools:", p)
	}
	var tools *yaml.Node
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value == "tools" {
			tools = top.Content[i+1]
		}
	}
	if tools == nil {
		tools = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		top.Content = append(top.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "tools"}, tools)
	}
	if tools.Kind != yaml.SequenceNode {
		return fmt.Errorf("%s: tools: expected a list", p)
	}
	tools.Content = slices.DeleteFunc(tools.Content, func(n *yaml.Node) bool {
		var t struct {
			Name string `yaml:"name"`
		}
		return n.Decode(&t) == nil && t.Name == e.Name
	})
	var n yaml.Node
	if err := n.Encode(e); err != nil {
		return err
	}
	tools.Content = append(tools.Content, &n)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	tmp := p + ".cure-tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// clipOut is the last 2 KiB of a build's output, for its error.
func clipOut(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 2048 {
		s = "..." + s[len(s)-2048:]
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
