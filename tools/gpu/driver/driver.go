// Package driver brings a site's NVIDIA driver up inside CURE before the
// GPU checks: it loads the kernel modules the image builder added from the
// driver bundle (cure-build --driver-bundle), in dependency order, and
// starts the fabric manager on NVSwitch systems (HGX), which an HGX GPU
// needs before CUDA work or NVML's NVLink state make sense.
//
// The builder writes Manifest to ManifestPath; the runner reads it. Plan is
// pure (what to do given what is loaded and present); Ensure applies it
// through seams (module loader, process starter) so tests use fakes and
// the node uses u-root's kmodule and os/exec.
package driver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/cure-oss/cure/tools/pci"
)

// ManifestPath is where the image carries the bundle's manifest, relative
// to the root.
const ManifestPath = "etc/cure/gpu-driver.json"

// Manifest describes the driver bundle baked into the image.
type Manifest struct {
	// Version is the bundle's driver version (modinfo version= of nvidia.ko).
	Version string `json:"version"`
	// Modules are the bundle's module names, dependencies first.
	Modules []string `json:"modules"`
	// FabricManager is the image path of nv-fabricmanager, if the bundle
	// has one; FabricManagerArgs its arguments (the config file).
	FabricManager     string   `json:"fabric_manager,omitempty"`
	FabricManagerArgs []string `json:"fabric_manager_args,omitempty"`
	// Bytes is the bundle's size in the image (uncompressed).
	Bytes int64 `json:"bytes"`
	// Tools are the site's GPU test tools the bundle carries (DCGM,
	// nvbandwidth, nccl-tests, gpu-burn), as its gpu-tools.yaml declares
	// them.
	Tools []Tool `json:"tools,omitempty"`
}

// Site GPU tools a driver bundle may carry, and the programs each must
// name (Tool.Programs keys); docs/VALIDATION.md says how a site builds
// them.
const (
	ToolDCGM        = "dcgm"        // nv-hostengine, dcgmi; nvvs where it is not at DCGM's default
	ToolNVBandwidth = "nvbandwidth" // nvbandwidth
	ToolNCCLTests   = "nccl-tests"  // all_reduce_perf
	// ToolGPUBurn is gpu-burn (github.com/wilicc/gpu-burn), built from
	// source against the bundle's CUDA by cure-build --build-gpu-burn;
	// its compare kernel (GPUBurnKernel) is one of its files.
	ToolGPUBurn = "gpu-burn" // gpu_burn
)

// GPUBurnKernel is the file name of gpu-burn's compare kernel, which
// gpu_burn loads at run time (-c FILE; compare.ptx in its working
// directory otherwise).
const GPUBurnKernel = "compare.ptx"

// PinnedTools are the tools whose every program and file gpu-tools.yaml
// must pin by sha256: those a CURE build step makes, whose bytes nobody
// else vouches for.
var PinnedTools = []string{ToolGPUBurn}

// ToolPrograms are the programs each tool must have; optional ones are
// not listed.
var ToolPrograms = map[string][]string{
	ToolDCGM:        {"nv-hostengine", "dcgmi"},
	ToolNVBandwidth: {"nvbandwidth"},
	ToolNCCLTests:   {"all_reduce_perf"},
	ToolGPUBurn:     {"gpu_burn"},
}

// ToolOptional are the programs a tool may name besides its required ones.
var ToolOptional = map[string][]string{
	ToolDCGM: {"nvvs"},
}

// Tool is one site GPU tool in the image.
type Tool struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Source says where the site took it from (package and release, or
	// repository, tag and the CUDA it was built with).
	Source string `json:"source,omitempty"`
	// Programs are image paths by program name.
	Programs map[string]string `json:"programs"`
	// Files pin the tool's files as the builder found them.
	Files []ToolFile `json:"files"`
}

// ToolFile is one pinned file of a tool.
type ToolFile struct {
	Path   string `json:"path"` // image path
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// File returns the pinned file of t whose base name is base.
func (t Tool) File(base string) (ToolFile, bool) {
	for _, f := range t.Files {
		if filepath.Base(f.Path) == base {
			return f, true
		}
	}
	return ToolFile{}, false
}

// Tool returns the named tool, if the image has it.
func (m *Manifest) Tool(name string) (Tool, bool) {
	if m == nil {
		return Tool{}, false
	}
	for _, t := range m.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

// ReadManifest reads root/ManifestPath; fs.ErrNotExist when the image has
// no driver bundle.
func ReadManifest(root string) (*Manifest, error) {
	p := filepath.Join(root, ManifestPath)
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if len(m.Modules) == 0 {
		return nil, fmt.Errorf("%s: no modules", p)
	}
	return &m, nil
}

// Action is one step of bringing the driver up.
type Action struct {
	Kind string // "load" or "start"
	// Module for "load"; Path and Args for "start".
	Module string
	Path   string
	Args   []string
	Reason string
}

func (a Action) String() string {
	if a.Kind == "load" {
		return "load " + a.Module + " (" + a.Reason + ")"
	}
	return "start " + strings.Join(append([]string{a.Path}, a.Args...), " ") + " (" + a.Reason + ")"
}

// State is what the node has now.
type State struct {
	Loaded     map[string]bool // /proc/modules
	NVSwitches int             // NVIDIA class 0x0680 functions on the PCI bus
	GPUs       int             // NVIDIA display-class functions
	FMRunning  bool
}

// Plan returns the actions that bring m up on a node in state s. A node
// with no NVIDIA GPU needs nothing. An NVSwitch system whose bundle has no
// fabric manager is an error: its GPUs would report healthy-looking
// numbers while NVLink stays down.
func Plan(m *Manifest, s State) ([]Action, error) {
	if m == nil || s.GPUs == 0 {
		return nil, nil
	}
	var out []Action
	for _, mod := range m.Modules {
		if !s.Loaded[canonical(mod)] {
			out = append(out, Action{Kind: "load", Module: mod, Reason: fmt.Sprintf("driver %s", m.Version)})
		}
	}
	if s.NVSwitches > 0 && !s.FMRunning {
		if m.FabricManager == "" {
			return nil, fmt.Errorf("%d NVSwitches on the bus but driver bundle %s has no fabric manager (bin/nv-fabricmanager)", s.NVSwitches, m.Version)
		}
		out = append(out, Action{Kind: "start", Path: m.FabricManager, Args: m.FabricManagerArgs,
			Reason: fmt.Sprintf("%d NVSwitches", s.NVSwitches)})
	}
	return out, nil
}

func canonical(s string) string { return strings.ReplaceAll(s, "-", "_") }

// Seams are how actions reach the node.
type Seams struct {
	// Load loads a module and its dependencies (kmodule.Probe on a node).
	Load func(name string) error
	// Start runs a program to completion: nv-fabricmanager forks its
	// daemon and exits 0 once it is up.
	Start func(ctx context.Context, path string, args ...string) error
}

// Apply runs actions in order and stops at the first failure, naming it.
func Apply(ctx context.Context, actions []Action, s Seams) error {
	for _, a := range actions {
		if err := ctx.Err(); err != nil {
			return err
		}
		var err error
		switch a.Kind {
		case "load":
			err = s.Load(a.Module)
		case "start":
			err = s.Start(ctx, a.Path, a.Args...)
		default:
			err = fmt.Errorf("unknown action")
		}
		if err != nil {
			return fmt.Errorf("gpu driver: %s: %w", a, err)
		}
	}
	return nil
}

// ReadState reads loaded modules (root/proc/modules), NVIDIA GPUs and
// NVSwitches (root/sys/bus/pci/devices) and whether the fabric manager runs
// (a process whose comm is nv-fabricmanager in root/proc).
func ReadState(root string) (State, error) {
	s := State{Loaded: map[string]bool{}}
	f, err := os.Open(filepath.Join(root, "proc/modules"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return s, err
	}
	if f != nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if name, _, ok := strings.Cut(sc.Text(), " "); ok {
				s.Loaded[canonical(name)] = true
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return s, err
		}
	}
	fns, err := pci.Functions(root)
	if err != nil {
		return s, err
	}
	for _, f := range fns {
		// A device whose files cannot be read is not counted: it is going
		// away, or it is not a GPU the driver can bring up.
		v, verr := f.Vendor()
		c, cerr := f.Class()
		if verr != nil || cerr != nil || v != 0x10de {
			continue
		}
		switch {
		case c>>16 == 0x03:
			s.GPUs++
		case c>>8 == 0x0680:
			s.NVSwitches++
		}
	}
	procs, _ := os.ReadDir(filepath.Join(root, "proc"))
	for _, p := range procs {
		if comm, err := os.ReadFile(filepath.Join(root, "proc", p.Name(), "comm")); err == nil &&
			strings.TrimSpace(string(comm)) == "nv-fabricmanager" {
			s.FMRunning = true
		}
	}
	return s, nil
}

// Ensure brings the image's driver up on the node at root: nothing when
// the image has no bundle (fs.ErrNotExist from ReadManifest is not an
// error here) or the node has no NVIDIA GPU. It returns what it did.
func Ensure(ctx context.Context, root string, s Seams) ([]Action, error) {
	m, err := ReadManifest(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	st, err := ReadState(root)
	if err != nil {
		return nil, fmt.Errorf("gpu driver: reading node state: %w", err)
	}
	actions, err := Plan(m, st)
	if err != nil {
		return nil, err
	}
	return actions, Apply(ctx, actions, s)
}

// ExecStart is Seams.Start on a node: run the program and wait for it (the
// fabric manager daemonizes and exits), its output kept for the error.
func ExecStart(ctx context.Context, path string, args ...string) error {
	out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
