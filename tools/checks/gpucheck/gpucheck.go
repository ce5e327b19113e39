// Package gpucheck builds the validation suite's gpu checks (suite.Env.GPU):
// a manifests.Check of type gpu becomes a checks.Func that runs cure-nvml
// (tools/gpu/cmd/cure-nvml), the cgo helper that talks to NVML, so this
// package and the runner that calls it stay cgo-free.
package gpucheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/gpu"
	"github.com/cure-oss/cure/tools/gpu/driver"
	"github.com/cure-oss/cure/tools/kmsg"
	"github.com/cure-oss/cure/tools/pci"
)

// DefaultNVMLHelper is where the CURE image carries cure-nvml
// (tools/gpu/cmd/cure-nvml, built with cgo by `make image`).
const DefaultNVMLHelper = "/usr/bin/cure-nvml"

// gpuMargin is added to a GPU check's own run time for the helper's NVML
// start-up, the before/after reads and gpu-burn's start-up and grace.
const gpuMargin = 5 * time.Minute

// Exec runs the NVML helper. code is the exit status; err is set only
// when the program could not run or was stopped (ctx ended), never for a
// non-zero exit.
type Exec func(ctx context.Context, name string, args ...string) (stdout, stderr []byte, code int, err error)

// Checks builds the validation suite's gpu checks (suite.Env.GPU): each
// runs cure-nvml, which talks to NVML (cgo, the driver's libnvidia-ml.so.1)
// so the runner itself stays cgo-free.
type Checks struct {
	// Helper is the cure-nvml path; default DefaultNVMLHelper.
	Helper string
	// Root holds sys/ ("/" on a node): NVIDIA GPUs are found on the PCI bus
	// there, to tell "no GPU here" from "NVML missing".
	Root string
	// TmpDir receives the expectation file; default os.TempDir().
	TmpDir string
	// Exec runs the helper; nil means the real process.
	Exec Exec
	Log  *slog.Logger
	// Prepare brings the GPU driver up (modules, fabric manager) before the
	// helper runs; nil assumes it is up.
	Prepare func(context.Context) error
	// Topology is what the run's SKU declares of its GPUs and NVSwitches;
	// nil when the run has none. A suite's own params override it.
	Topology *Topology
	// KernelLog reads the boot's kernel log, where the driver reports
	// NVSwitch errors (SXid); nil reads Root/dev/kmsg.
	KernelLog func() ([]kmsg.Record, error)
}

// Topology is the GPU topology a SKU declares (spec.hardware.gpus and
// spec.hardware.nvswitches).
type Topology struct {
	GPUs       int
	Addresses  []string
	NVLinks    int
	Fabric     bool
	NVSwitches int
}

// TopologyOf reads a SKU's hardware section; nil when it declares no GPUs.
func TopologyOf(h *manifests.Hardware) *Topology {
	if h == nil || h.GPUs == nil {
		return nil
	}
	t := &Topology{GPUs: h.GPUs.Count, Addresses: h.GPUs.Addresses, NVLinks: h.GPUs.NVLinks, Fabric: h.GPUs.Fabric}
	if h.NVSwitches != nil {
		t.NVSwitches = h.NVSwitches.Count
	}
	return t
}

// apply fills what the suite left unset from the SKU: the GPU count and
// addresses, the NVLinks per GPU, NVSwitch links and fabric registration.
func (t *Topology) apply(e *gpu.Expect) {
	if t == nil {
		return
	}
	if e.Count == 0 && len(e.BusIDs) == 0 {
		e.Count, e.BusIDs = t.GPUs, slices.Clone(t.Addresses)
		if len(e.BusIDs) > 0 && e.Count != len(e.BusIDs) {
			e.Count = 0 // the SKU's own lint refuses this; do not make it worse
		}
	}
	if e.NVLinks == 0 {
		e.NVLinks = t.NVLinks
	}
	e.NVSwitch = e.NVSwitch || t.NVSwitches > 0
	e.Fabric = e.Fabric || t.Fabric
}

// gpuPlan is one gpu check as data: what the helper is told and how long
// it may take.
type gpuPlan struct {
	Expect  gpu.Expect
	Args    []string // helper flags after -expect FILE
	Timeout time.Duration
	// RequireGPU: the check names a GPU count or addresses, so a node with
	// no NVIDIA GPU on the bus fails it rather than skipping it.
	RequireGPU bool
	// Type is the check's type; a bandwidth check's node-wide verdicts go
	// on a component named after it, which appliesTo never filters.
	Type string
	// Tools are the site GPU programs the check runs (dcgm, nvbandwidth,
	// nccl-tests), found through the driver bundle's manifest.
	Tools []string
	// Load is the GPU load the check runs for LoadFor: LoadAuto,
	// LoadDCGM or LoadGPUBurn; "" for none. Which program backs LoadAuto
	// is decided on the node, from the image's driver manifest (chooseLoad).
	Load    string
	LoadFor time.Duration
	// LoadTest is the DCGM test a DCGM load runs (targeted_stress,
	// targeted_power); BurnPath the gpu_burn a gpu-burn load runs where
	// the suite names one.
	LoadTest string
	BurnPath string
}

// GPU loads a gpu check may ask for (params.load).
const (
	LoadAuto    = "auto"     // DCGM's targeted stress where the image has DCGM, gpu-burn otherwise
	LoadDCGM    = "dcgm"     // DCGM's targeted stress or power (params.loadTest)
	LoadGPUBurn = "gpu-burn" // gpu-burn, built into the driver bundle
)

// dcgmLoadMargin covers DCGM's own start-up around a timed load test.
const dcgmLoadMargin = 10 * time.Minute

// Build implements suite.Env.GPU: it validates c (unknown params and
// thresholds are errors naming the check) and returns the check's Func.
func (g Checks) Build(c manifests.Check) (checks.Func, error) {
	var p gpuPlan
	var err error
	switch c.Type {
	case manifests.CheckGPUBandwidth, manifests.CheckNCCLAllReduce:
		p, err = planBandwidth(c)
	default:
		p, err = planGPU(c)
	}
	if err != nil {
		return nil, err
	}
	p.Type = c.Type
	return func(ctx context.Context) ([]checks.Verdict, error) { return g.run(ctx, c.Name, p) }, nil
}

// planGPU maps a manifests.Check of type gpu onto gpu.Expect and helper
// flags. Field names are gpu.Expect's JSON names where one exists.
func planGPU(c manifests.Check) (gpuPlan, error) {
	var p gpuPlan
	var errs []string
	bad := func(field, format string, args ...any) {
		errs = append(errs, field+": "+fmt.Sprintf(format, args...))
	}
	e := &p.Expect
	var r gpuRun
	for _, k := range sortedKeys(c.Params) {
		v, f := c.Params[k], "params."+k
		if !expectParam(e, k, v, f, bad) && !r.param(k, v, f, bad) {
			bad(f, "unknown parameter for a gpu check (want count, busIDs, model, pciDeviceID, failOnRemapPending, criticalXids, failClocksReasons, pcieGen, pcieWidth, nvlinks, nvswitch, fabric, powerLimitW, load, loadTest, gpuBurn, gpuBurnPath, dcgmLevel, dcgmTimeout)")
		}
	}
	for _, k := range sortedKeys(c.Thresholds) {
		expectThreshold(e, k, c.Thresholds[k], "thresholds."+k, bad)
	}
	if err := e.Validate(); err != nil {
		errs = append(errs, err.Error())
	}
	if c.Interval > 0 {
		p.Args = append(p.Args, "-interval", time.Duration(c.Interval).String())
	}
	r.plan(&p, time.Duration(c.Duration), bad)
	p.RequireGPU = e.Count > 0 || len(e.BusIDs) > 0
	if len(errs) > 0 {
		return gpuPlan{}, fmt.Errorf("gpu check %q: %s", c.Name, strings.Join(errs, "; "))
	}
	return p, nil
}

// expectParam reads a gpu check's param k into what the helper holds each
// GPU to; false: k is not one of those.
func expectParam(e *gpu.Expect, k string, v any, f string, bad badFunc) bool {
	switch k {
	case "count":
		e.Count = int(paramInt(v, f, bad))
	case "busIDs":
		e.BusIDs = paramStrs(v, f, bad)
	case "model":
		e.Model = paramStr(v, f, bad)
	case "pciDeviceID":
		e.PCIDeviceID = uint32(paramHex(v, f, bad))
	case "failOnRemapPending":
		e.FailOnRemapPending = paramBool(v, f, bad)
	case "criticalXids":
		list, ok := v.([]any)
		if !ok {
			bad(f, "expected a list of Xid numbers, found %T %v", v, v)
			break
		}
		for i, x := range list {
			if n := paramInt(x, fmt.Sprintf("%s[%d]", f, i), bad); n > 0 {
				e.CriticalXids = append(e.CriticalXids, uint64(n))
			}
		}
	case "failClocksReasons":
		for i, name := range paramStrs(v, f, bad) {
			bit, ok := reasonBit(name)
			if !ok {
				bad(fmt.Sprintf("%s[%d]", f, i), "%q is not a clocks event reason (want one of %s)", name, strings.Join(gpu.ReasonNames(^uint64(0)>>55), ", "))
			}
			e.FailClocksReasons |= bit
		}
	case "pcieGen":
		e.PCIeGen = int(paramInt(v, f, bad))
	case "pcieWidth":
		e.PCIeWidth = int(paramInt(v, f, bad))
	case "nvlinks":
		e.NVLinks = int(paramInt(v, f, bad))
	case "powerLimitW":
		e.PowerLimitW = int(paramInt(v, f, bad))
	case "nvswitch":
		e.NVSwitch = paramBool(v, f, bad)
	case "fabric":
		e.Fabric = paramBool(v, f, bad)
	default:
		return false
	}
	return true
}

// expectThreshold reads a gpu check's threshold k into gpu.Expect.
func expectThreshold(e *gpu.Expect, k string, t manifests.Threshold, f string, bad badFunc) {
	switch k {
	case "components":
		// A bar on how many gpu/<n> verdicts matched: checks.Run judges it.
	case "uncorrectedECC":
		e.MaxUncorrectedECC = uint64(thresholdInt(t, f, false, true, bad))
	case "retiredPages":
		e.MaxRetiredPages = int(thresholdInt(t, f, false, false, bad))
	case "pcieReplays":
		e.MaxPCIeReplayDelta = uint64(thresholdInt(t, f, false, false, bad))
	case "temperatureC":
		e.MaxTemperatureC = int(thresholdInt(t, f, false, false, bad))
	case "tempMarginC":
		e.TempMarginC = int(thresholdInt(t, f, true, true, bad))
	case "loadPowerW":
		e.MinLoadPowerW = int(thresholdInt(t, f, true, false, bad))
	case "memoryTemperatureC":
		e.MaxMemoryTemperatureC = int(thresholdInt(t, f, false, false, bad))
	default:
		bad(f, "unknown metric for a gpu check (want components, uncorrectedECC, retiredPages, pcieReplays, temperatureC, tempMarginC, loadPowerW, memoryTemperatureC)")
	}
}

// gpuRun is what a gpu check runs besides sampling: a GPU load and a DCGM
// diagnostic.
type gpuRun struct {
	burn                     bool
	burnPath, load, loadTest string
	dcgmLevel                int64
	dcgmTimeout              time.Duration
}

// param reads a gpu check's param k into r; false: k is not a run param.
func (r *gpuRun) param(k string, v any, f string, bad badFunc) bool {
	switch k {
	case "gpuBurn":
		r.burn = paramBool(v, f, bad)
	case "gpuBurnPath":
		r.burnPath = paramStr(v, f, bad)
	case "load":
		if r.load = paramStr(v, f, bad); !slices.Contains([]string{LoadAuto, LoadDCGM, LoadGPUBurn}, r.load) {
			bad(f, "%q: want auto (DCGM where the image has it, gpu-burn otherwise), dcgm or gpu-burn", r.load)
		}
	case "loadTest":
		if r.loadTest = paramStr(v, f, bad); !slices.Contains(gpu.DCGMLoadTests, r.loadTest) {
			bad(f, "%q: want %s", r.loadTest, strings.Join(gpu.DCGMLoadTests, " or "))
		}
	case "dcgmLevel":
		if r.dcgmLevel = paramInt(v, f, bad); r.dcgmLevel < 0 || r.dcgmLevel > 4 {
			bad(f, "%d is not a dcgmi diag run level (1-4, 0 = none)", r.dcgmLevel)
		}
	case "dcgmTimeout":
		s, _ := v.(string)
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			bad(f, "expected a positive Go duration such as 90m, found %v", v)
		}
		r.dcgmTimeout = d
	default:
		return false
	}
	return true
}

// plan puts the load and the DCGM diagnostic for dur into p's helper
// flags, timeout and tools.
func (r gpuRun) plan(p *gpuPlan, dur time.Duration, bad badFunc) {
	load := r.load
	if r.burn && load != "" && load != LoadGPUBurn {
		bad("params.gpuBurn", "set with load: %s (gpuBurn: true is load: gpu-burn)", load)
	} else if r.burn {
		load = LoadGPUBurn
	}
	planLoad(p, load, r.loadTest, r.burnPath, dur, bad)
	if load == "" && r.dcgmLevel == 0 && dur > 0 {
		p.Args = append(p.Args, "-duration", dur.String())
	}
	p.Timeout += dur + gpuMargin
	if r.dcgmLevel > 0 {
		dcgmTimeout := r.dcgmTimeout
		if dcgmTimeout == 0 {
			dcgmTimeout = 2 * time.Hour // cure-nvml's default: -r 4 takes over an hour
		}
		p.Args = append(p.Args, "-dcgm-level", strconv.FormatInt(r.dcgmLevel, 10), "-dcgm-timeout", dcgmTimeout.String())
		p.Timeout += dcgmTimeout
		p.Tools = append(p.Tools, driver.ToolDCGM)
	} else if r.dcgmTimeout > 0 {
		bad("params.dcgmTimeout", "set without dcgmLevel")
	}
}

// planLoad records a gpu check's GPU load (params.load, loadTest,
// gpuBurnPath) for dur; which program backs it is chosen on the node
// (chooseLoad).
func planLoad(p *gpuPlan, load, loadTest, burnPath string, dur time.Duration, bad badFunc) {
	switch {
	case load != "" && dur <= 0:
		bad("params.load", "needs the check's duration (how long the GPU load runs)")
	case load != "":
		p.Load, p.LoadFor, p.BurnPath, p.LoadTest = load, dur, burnPath, loadTest
		if loadTest == "" {
			p.LoadTest = gpu.DCGMLoadTests[0]
		}
		if load != LoadGPUBurn {
			p.Timeout += dcgmLoadMargin
		}
	}
	if burnPath != "" && load != LoadGPUBurn && load != LoadAuto {
		bad("params.gpuBurnPath", "set without a gpu-burn load (load: gpu-burn or auto)")
	}
	if loadTest != "" && load != LoadDCGM && load != LoadAuto {
		bad("params.loadTest", "set without a DCGM load (load: dcgm or auto)")
	}
}

// defaultTestcases are the nvbandwidth copy-engine testcases a
// gpu-bandwidth check runs unless it names its own: host to GPU and back
// per GPU, GPU to GPU per pair, one direction and both.
var defaultTestcases = []string{"host_to_device_memcpy_ce", "device_to_host_memcpy_ce",
	"device_to_device_memcpy_write_ce", "device_to_device_bidirectional_memcpy_write_ce"}

// planBandwidth maps a gpu-bandwidth (nvbandwidth) or nccl-allreduce
// (nccl-tests) check onto a bandwidth run of the helper: params pick what
// runs, thresholds are {min: GB/s} bars on the metrics it measures.
func planBandwidth(c manifests.Check) (gpuPlan, error) {
	var p gpuPlan
	var errs []string
	bad := func(field, format string, args ...any) {
		errs = append(errs, field+": "+fmt.Sprintf(format, args...))
	}
	b := &gpu.Bandwidth{Min: map[string]float64{}}
	limit := time.Hour
	nccl := c.Type == manifests.CheckNCCLAllReduce
	var metrics []string
	if nccl {
		b.NCCLAllReduce = true
		metrics = []string{gpu.MetricAllReduceBusBW, gpu.MetricAllReduceAvgBusBW}
		p.Tools = []string{driver.ToolNCCLTests}
	} else {
		b.NVBandwidth = defaultTestcases
		p.Tools = []string{driver.ToolNVBandwidth}
	}
	for _, k := range sortedKeys(c.Params) {
		v, f := c.Params[k], "params."+k
		switch {
		case k == "timeout":
			s, _ := v.(string)
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				bad(f, "expected a positive Go duration such as 45m, found %v", v)
				continue
			}
			limit = d
		case k == "testcases" && !nccl:
			b.NVBandwidth = paramStrs(v, f, bad)
		case k == "pairs" && nccl:
			b.NCCLPairs = paramBool(v, f, bad)
		case (k == "minBytes" || k == "maxBytes") && nccl:
			n := paramBytes(v, f, bad)
			if k == "minBytes" {
				b.NCCLMinBytes = n
			} else {
				b.NCCLMaxBytes = n
			}
		case nccl:
			bad(f, "unknown parameter for an nccl-allreduce check (want pairs, minBytes, maxBytes, timeout)")
		default:
			bad(f, "unknown parameter for a gpu-bandwidth check (want testcases, timeout)")
		}
	}
	if b.NCCLPairs {
		metrics = append(metrics, gpu.MetricAllReducePairBusBW)
	}
	for _, tc := range b.NVBandwidth {
		if m, ok := gpu.NVBandwidthMetrics[tc]; ok {
			metrics = append(metrics, m.Metric())
		}
	}
	for _, k := range sortedKeys(c.Thresholds) {
		t, f := c.Thresholds[k], "thresholds."+k
		switch {
		case k == "components":
		case slices.Contains(metrics, k):
			if t.Min == nil || t.Max != nil || t.Equals != nil || *t.Min <= 0 {
				bad(f, "expected {min: <GB/s>} only, a positive bandwidth")
				continue
			}
			b.Min[k] = *t.Min
		default:
			bad(f, "not a metric this check measures (it measures %s)", strings.Join(metrics, ", "))
		}
	}
	p.Expect.Bandwidth = b
	if err := p.Expect.Validate(); err != nil {
		errs = append(errs, err.Error())
	}
	if c.Interval > 0 {
		p.Args = append(p.Args, "-interval", time.Duration(c.Interval).String())
	}
	p.Args = append(p.Args, "-bandwidth-timeout", limit.String())
	p.Timeout = limit + gpuMargin
	if len(errs) > 0 {
		return gpuPlan{}, fmt.Errorf("%s check %q: %s", c.Type, c.Name, strings.Join(errs, "; "))
	}
	return p, nil
}

// paramBytes reads a byte count written as an integer or a size ("8GiB").
func paramBytes(v any, f string, bad badFunc) int64 {
	if s, ok := v.(string); ok {
		n, err := manifests.ParseByteSize(s)
		if err != nil || n <= 0 {
			bad(f, "%q is not a size such as 8MiB", s)
		}
		return int64(n)
	}
	n := paramInt(v, f, bad)
	if n <= 0 {
		bad(f, "%d is not a positive size", n)
	}
	return n
}

// toolArgs are the helper flags that point it at the site's GPU tools the
// image's driver manifest lists; without a manifest entry the helper
// looks the programs up on PATH and says what is missing.
func toolArgs(m *driver.Manifest, tools []string) (args, versions []string) {
	flags := map[string]map[string]string{
		driver.ToolDCGM:        {"nv-hostengine": "-nv-hostengine", "dcgmi": "-dcgmi"},
		driver.ToolNVBandwidth: {"nvbandwidth": "-nvbandwidth"},
		driver.ToolNCCLTests:   {"all_reduce_perf": "-all-reduce-perf"},
		driver.ToolGPUBurn:     {"gpu_burn": "-gpu-burn"},
	}
	for _, name := range tools {
		t, ok := m.Tool(name)
		if !ok {
			continue
		}
		versions = append(versions, t.Name+" "+t.Version)
		for _, prog := range sortedKeys(flags[name]) {
			if path := t.Programs[prog]; path != "" {
				args = append(args, flags[name][prog], path)
			}
		}
		if nvvs := t.Programs["nvvs"]; nvvs != "" && name == driver.ToolDCGM {
			args = append(args, "-nvvs-dir", filepath.Dir(nvvs))
		}
		if k, ok := t.File(driver.GPUBurnKernel); ok && name == driver.ToolGPUBurn {
			args = append(args, "-gpu-burn-kernel", k.Path)
		}
	}
	return args, versions
}

// noHelper is the verdict of a check on an image without cure-nvml: a
// SKIP, but an ERROR for a check with a GPU load (a burn-in: untested GPUs
// are no finding to skip).
func noHelper(helper string, p gpuPlan, gpus int) checks.Verdict {
	if p.Load != "" {
		return checks.Verdict{Component: "gpu", Status: checks.Error, Expected: p.Load + " GPU load for " + p.LoadFor.String(),
			Message: fmt.Sprintf("cure-nvml not in this image (%s): the %s GPU load cannot run on the %d NVIDIA GPU(s) on the bus; build the image with the NVML helper (make image, CURE_NVIDIA_LIB or a driver bundle; docs/VALIDATION.md)",
				helper, p.Load, gpus)}
	}
	return checks.Verdict{Component: "gpu", Status: checks.Skip,
		Message: fmt.Sprintf("cure-nvml not in this image (%s): %d NVIDIA GPU(s) on the bus are not checked", helper, gpus)}
}

// toolFlags adds to p.Args the flags of p's load as chosen for this image
// and of the site tools the check runs, and returns the load and the
// tools' versions.
func (g Checks) toolFlags(dm *driver.Manifest, p *gpuPlan) (load string, versions []string) {
	load, largs, ltool := chooseLoad(dm, *p)
	tools := slices.Clone(p.Tools)
	if ltool != "" && !slices.Contains(tools, ltool) {
		tools = append(tools, ltool)
	}
	targs, versions := toolArgs(dm, tools)
	p.Args = append(append(slices.Clone(p.Args), largs...), targs...)
	if g.TmpDir != "" && slices.Contains(tools, driver.ToolDCGM) {
		p.Args = append(p.Args, "-work-dir", g.TmpDir)
	}
	return load, versions
}

// chooseLoad decides which program backs p's GPU load on this image and
// returns the helper flags for it and the site tool it uses: auto takes
// DCGM's targeted stress where the image's driver manifest lists DCGM,
// else gpu-burn (the manifest's, or one on the helper's PATH). A program
// the image lacks is the helper's ERROR, naming it; a load that then
// reports nothing is this check's (loadVerdict).
func chooseLoad(m *driver.Manifest, p gpuPlan) (load string, args []string, tool string) {
	load = p.Load
	if load == LoadAuto {
		load = LoadGPUBurn
		if _, ok := m.Tool(driver.ToolDCGM); ok {
			load = LoadDCGM
		}
	}
	switch load {
	case LoadDCGM:
		return load, []string{"-dcgm-load", p.LoadTest, "-dcgm-load-for", p.LoadFor.String()}, driver.ToolDCGM
	case LoadGPUBurn:
		args = []string{"-burn", p.LoadFor.String()}
		if p.BurnPath != "" {
			// The suite's own gpu_burn: the manifest's would override it.
			return load, append(args, "-gpu-burn", p.BurnPath), ""
		}
		return load, args, driver.ToolGPUBurn
	}
	return "", nil, ""
}

// loadVerdict is an ERROR on "gpu" when the check asked for a GPU load
// and the helper's verdicts carry none of it: GPUs that were never loaded
// must not pass a burn-in on their idle readings.
func loadVerdict(load string, p gpuPlan, vs []gpu.Verdict) (gpu.Verdict, bool) {
	if load == "" {
		return gpu.Verdict{}, false
	}
	for _, v := range vs {
		switch {
		case load == LoadGPUBurn && v.Check == gpu.CheckGPUBurn,
			load == LoadDCGM && (v.Check == gpu.DCGMCheck(p.LoadTest) || v.Check == gpu.CheckDCGMDiag):
			return gpu.Verdict{}, false
		}
	}
	return gpu.Verdict{Component: "gpu", Check: "gpu_load", Status: gpu.Error, Expected: load + " for " + p.LoadFor.String(),
		Message: fmt.Sprintf("the check asked for a %s %s GPU load and the NVML helper reported nothing of it: the GPUs' readings are not under load", p.LoadFor, load)}, true
}

// fabricManagerVerdict: on an NVSwitch board the fabric manager must run
// and every NVSwitch the SKU declares must be on the bus, or the GPUs'
// NVLinks never come up.
func fabricManagerVerdict(st driver.State, want int) gpu.Verdict {
	v := gpu.Verdict{Component: "gpu", Check: gpu.CheckFabricMgr, Expected: fmt.Sprintf("%d NVSwitches, nv-fabricmanager running", want),
		Observed: fmt.Sprintf("%d NVSwitches, nv-fabricmanager ", st.NVSwitches)}
	if st.FMRunning {
		v.Observed += "running"
	} else {
		v.Observed += "not running"
	}
	var bad []string
	if st.NVSwitches != want {
		bad = append(bad, fmt.Sprintf("the SKU declares %d NVSwitches, the PCI bus has %d", want, st.NVSwitches))
	}
	if !st.FMRunning {
		bad = append(bad, "nv-fabricmanager is not running: the GPUs' NVLinks stay down without it")
	}
	v.Status = gpu.Pass
	if len(bad) > 0 {
		v.Status, v.Message = gpu.Fail, strings.Join(bad, "; ")
	}
	return v
}

// run executes one planned check on the node. A bandwidth check's
// node-wide verdicts go on a component named after the check type, which
// its appliesTo never filters out.
func (g Checks) run(ctx context.Context, name string, p gpuPlan) ([]checks.Verdict, error) {
	vs, err := g.runHelper(ctx, name, p)
	for i := range vs {
		if vs[i].Component == "gpu" && p.Type != "" && p.Type != manifests.CheckGPU {
			vs[i].Component = p.Type
		}
	}
	return vs, err
}

func (g Checks) runHelper(ctx context.Context, name string, p gpuPlan) ([]checks.Verdict, error) {
	g = g.withDefaults()
	gpus, err := NVIDIAGPUs(g.Root)
	if err != nil {
		return nil, err
	}
	if len(gpus) == 0 {
		return g.noGPUs(p), nil
	}
	if g.Prepare != nil {
		if err := g.Prepare(ctx); err != nil {
			return []checks.Verdict{{Component: "gpu", Status: checks.Error, Expected: "driver loaded",
				Message: fmt.Sprintf("%d NVIDIA GPU(s) on the bus, but the driver did not come up: %v", len(gpus), err)}}, nil
		}
	}
	if _, err := os.Stat(g.Helper); errors.Is(err, fs.ErrNotExist) {
		return []checks.Verdict{noHelper(g.Helper, p, len(gpus))}, nil
	}
	g.Topology.apply(&p.Expect)
	var pre []gpu.Verdict
	if g.Topology != nil && g.Topology.NVSwitches > 0 {
		st, err := driver.ReadState(g.Root)
		if err != nil {
			return nil, fmt.Errorf("gpu check %s: reading the driver's state: %w", name, err)
		}
		pre = append(pre, fabricManagerVerdict(st, g.Topology.NVSwitches))
	}
	dm, err := driver.ReadManifest(g.Root)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("gpu check %s: %w", name, err)
	}
	load, versions := g.toolFlags(dm, &p)
	if load != "" {
		g.Log.Info("gpu check: GPU load", "check", name, "load", load, "for", p.LoadFor, "asked", p.Load)
	}
	expect, err := g.writeExpect(p.Expect)
	if err != nil {
		return nil, err
	}
	defer os.Remove(expect)

	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	args := append([]string{"-expect", expect}, p.Args...)
	g.Log.Info("gpu check: running NVML helper", "check", name, "helper", g.Helper, "args", args, "gpus", len(gpus), "timeout", p.Timeout)
	stdout, stderr, code, err := g.Exec(ctx, g.Helper, args...)
	if err != nil {
		return nil, fmt.Errorf("%s (limit %s): %w; stderr: %s", g.Helper, p.Timeout, err, tail(stderr))
	}
	switch code {
	case 0, 1, 3:
	case 2:
		return []checks.Verdict{{Component: "gpu", Status: checks.Error,
			Message: fmt.Sprintf("%s refused its input (exit 2): %s", g.Helper, tail(stderr))}}, nil
	default:
		return nil, fmt.Errorf("%s exited %d (want 0, 1 or 3); stderr: %s", g.Helper, code, tail(stderr))
	}
	var rep helperReport
	if err := json.Unmarshal(stdout, &rep); err != nil || rep.Verdicts == nil {
		if code == 3 {
			// The cgo-less build of the helper prints no document.
			return []checks.Verdict{{Component: "gpu", Status: checks.Error,
				Message: fmt.Sprintf("NVML unavailable with %d NVIDIA GPU(s) on the bus: %s", len(gpus), tail(stderr))}}, nil
		}
		return nil, fmt.Errorf("%s exit %d: expected a JSON document {driver, verdicts} on stdout, found %q: %v", g.Helper, code, tail(stdout), err)
	}
	all := append(pre, rep.Verdicts...)
	if lv, ok := loadVerdict(load, p, rep.Verdicts); ok {
		all = append(all, lv)
	}
	if sx, ok := g.sxid(p); ok {
		all = append(all, sx)
	}
	return g.helperVerdicts(all, rep, versions, code, len(gpus)), nil
}

// helperReport is the NVML helper's document on stdout.
type helperReport struct {
	Driver   string         `json:"driver"`
	Verdicts []gpu.Verdict  `json:"verdicts"`
	Devices  []gpu.Identity `json:"devices"`
}

// withDefaults fills the zero fields: the real root, helper, exec and log.
func (g Checks) withDefaults() Checks {
	if g.Root == "" {
		g.Root = "/"
	}
	if g.Helper == "" {
		g.Helper = DefaultNVMLHelper
	}
	if g.Exec == nil {
		g.Exec = osExec
	}
	if g.Log == nil {
		g.Log = slog.Default()
	}
	return g
}

// noGPUs is the verdict on a node with no NVIDIA GPU on the bus: a FAIL
// where the check or the SKU names GPUs, else a SKIP.
func (g Checks) noGPUs(p gpuPlan) []checks.Verdict {
	if p.RequireGPU || (g.Topology != nil && g.Topology.GPUs > 0) {
		g.Topology.apply(&p.Expect)
		want := len(p.Expect.BusIDs)
		if p.Expect.Count > 0 {
			want = p.Expect.Count
		}
		return []checks.Verdict{{Component: "gpu", Status: checks.Fail, Observed: "0", Expected: fmt.Sprintf("%d GPUs", want),
			Message: "no NVIDIA GPU on this node's PCI bus (vendor 0x10de, class 0x03): every GPU is off the bus, or this suite is for another SKU"}}
	}
	return []checks.Verdict{{Component: "gpu", Status: checks.Skip, Message: "no NVIDIA GPU on this node (no PCI device with vendor 0x10de, class 0x03)"}}
}

// writeExpect writes the helper's expectations to a temporary file, whose
// path it returns (the caller removes it).
func (g Checks) writeExpect(e gpu.Expect) (string, error) {
	data, err := json.Marshal(e)
	if err != nil {
		return "", fmt.Errorf("encoding gpu expectations: %w", err)
	}
	f, err := os.CreateTemp(g.TmpDir, "cure-gpu-expect-*.json")
	if err != nil {
		return "", fmt.Errorf("writing gpu expectations for %s: %w", g.Helper, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", fmt.Errorf("writing %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("writing %s: %w", f.Name(), err)
	}
	return f.Name(), nil
}

// helperVerdicts folds the helper's verdicts (and those added to them)
// per GPU, with the devices' identities and the site tools' versions; a
// helper without NVML (exit 3) says so on each, and one that exited 1
// without reporting a failure is an ERROR.
func (g Checks) helperVerdicts(all []gpu.Verdict, rep helperReport, versions []string, code, gpus int) []checks.Verdict {
	vs := foldVerdicts(all, rep.Driver)
	withIdentity(vs, rep.Devices)
	for i := range vs {
		if vs[i].Component == "gpu" && len(versions) > 0 {
			vs[i].Message = strings.TrimPrefix(vs[i].Message+"; site tools: "+strings.Join(versions, ", "), "; ")
		}
	}
	if code == 3 {
		for i := range vs {
			vs[i].Message = fmt.Sprintf("%d NVIDIA GPU(s) on the bus but NVML is unavailable: %s", gpus, vs[i].Message)
		}
	}
	if w := checks.Worst(vs); code == 1 && w != checks.Fail && w != checks.Error {
		msg := fmt.Sprintf("%s exited 1 (a failure) but reported none", g.Helper)
		i := slices.IndexFunc(vs, func(v checks.Verdict) bool { return v.Component == "gpu" })
		if i < 0 {
			vs, i = append(vs, checks.Verdict{Component: "gpu"}), len(vs)
		}
		vs[i].Status, vs[i].Message = checks.Error, strings.TrimPrefix(msg+"; "+vs[i].Message, "; ")
		vs[i].Message = strings.TrimSuffix(vs[i].Message, "; ")
	}
	return vs
}

// sxid judges the NVSwitch errors (SXid) in the boot's kernel log, on a
// board the SKU gives NVSwitches or where the log has any; ok is false
// when there is nothing to say (no NVSwitch expected, no SXid, no log).
func (g Checks) sxid(p gpuPlan) (gpu.Verdict, bool) {
	read := g.KernelLog
	if read == nil {
		read = func() ([]kmsg.Record, error) { return kmsg.Read(filepath.Join(g.Root, "dev/kmsg")) }
	}
	expect := p.Expect.NVSwitch || (g.Topology != nil && g.Topology.NVSwitches > 0)
	recs, err := read()
	if err != nil {
		if expect {
			return gpu.Verdict{Component: "gpu", Check: gpu.CheckSXid, Status: gpu.Error, Expected: "no fatal SXid",
				Message: "the kernel log, where the driver reports NVSwitch errors, is unreadable: " + err.Error()}, true
		}
		return gpu.Verdict{}, false
	}
	var msgs []string
	for _, r := range recs {
		msgs = append(msgs, r.Message)
	}
	v := gpu.SXidVerdict(msgs)
	return v, expect || v.Message != ""
}

// foldVerdicts turns the helper's (component, sub-check) verdicts into one
// verdict per component, as checks.Run keeps one per component and check:
// the worst status, the non-passing sub-checks spelt out, the passing ones
// named. The system-level component "gpu" carries the driver version.
func foldVerdicts(in []gpu.Verdict, driver string) []checks.Verdict {
	byComp := map[string][]gpu.Verdict{}
	var order []string
	for _, v := range in {
		if _, ok := byComp[v.Component]; !ok {
			order = append(order, v.Component)
		}
		byComp[v.Component] = append(byComp[v.Component], v)
	}
	out := make([]checks.Verdict, 0, len(order))
	for _, comp := range order {
		subs := byComp[comp]
		worst := checks.Pass
		for _, v := range subs {
			if s := checkStatus(v.Status); s.Worse(worst) {
				worst = s
			}
		}
		var msgs, obs, exp, passed []string
		var meas []checks.Measurement
		for _, v := range subs {
			for _, m := range v.Measurements {
				meas = append(meas, checks.Measurement{Metric: m.Metric, Value: m.Value, Unit: m.Unit})
			}
			st := checkStatus(v.Status)
			if st == checks.Pass {
				passed = append(passed, v.Check)
			} else {
				m := fmt.Sprintf("%s %s", v.Check, v.Status)
				if v.Observed != "" || v.Expected != "" {
					m += fmt.Sprintf(" (observed %s, expected %s)", v.Observed, v.Expected)
				}
				if v.Message != "" {
					m += ": " + v.Message
				}
				msgs = append(msgs, m)
			}
			if st == worst && worst != checks.Pass && (v.Observed != "" || v.Expected != "") {
				obs = append(obs, v.Check+": "+v.Observed)
				exp = append(exp, v.Check+": "+v.Expected)
			}
		}
		if len(passed) > 0 {
			msgs = append(msgs, "passed: "+strings.Join(passed, ", "))
		}
		if comp == "gpu" && driver != "" {
			msgs = append(msgs, "driver "+driver)
		}
		out = append(out, checks.Verdict{Component: comp, Status: worst, Observed: strings.Join(obs, "; "),
			Expected: strings.Join(exp, "; "), Message: strings.Join(msgs, "; "), Measurements: meas})
	}
	return out
}

// withIdentity puts each GPU's NVML identity (serial, UUID, VBIOS, board
// part number, HBM peak) into its verdict as an identity evidence block:
// what the report names the part by.
func withIdentity(vs []checks.Verdict, ids []gpu.Identity) {
	by := map[string]gpu.Identity{}
	for _, id := range ids {
		by[id.Component] = id
	}
	for i := range vs {
		if id, ok := by[vs[i].Component]; ok {
			vs[i].Message = curev1.AppendEvidence(vs[i].Message, curev1.EvidenceIdentity, id.Lines())
		}
	}
}

func checkStatus(s gpu.Status) checks.Status {
	switch s {
	case gpu.Pass:
		return checks.Pass
	case gpu.Fail:
		return checks.Fail
	case gpu.Skip:
		return checks.Skip
	case gpu.Error:
	}
	return checks.Error // ERROR, or a status this runner does not know
}

// NVIDIAGPUs lists the PCI addresses of NVIDIA display controllers (vendor
// 0x10de, base class 0x03: VGA 0x0300 and 3D 0x0302) under
// root/sys/bus/pci/devices. NVSwitches (bridge class 0x0680) are not GPUs.
// A tree without a PCI bus has none.
func NVIDIAGPUs(root string) ([]string, error) {
	fns, err := pci.Functions(root)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range fns {
		vendor, verr := f.Vendor()
		class, cerr := f.Class()
		if verr != nil || cerr != nil {
			continue // a device going away while we look
		}
		if vendor == nvidiaVendor && class>>16 == 0x03 {
			out = append(out, f.Addr)
		}
	}
	return out, nil
}

// nvidiaVendor is NVIDIA's PCI vendor id.
const nvidiaVendor = 0x10de

// osExec runs the helper; on cancellation it sends SIGTERM first so the
// helper stops gpu-burn and shuts NVML down, then kills it 30 s later.
func osExec(ctx context.Context, name string, args ...string) ([]byte, []byte, int, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return o.Bytes(), e.Bytes(), -1, ctx.Err()
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		return o.Bytes(), e.Bytes(), ee.ExitCode(), nil
	}
	if err != nil {
		return o.Bytes(), e.Bytes(), -1, err
	}
	return o.Bytes(), e.Bytes(), 0, nil
}

// tail is the last 512 bytes of a program's output, for messages. The cut
// can split a character and the output need not be UTF-8: messages go
// into protobuf strings, so what is not UTF-8 becomes U+FFFD.
func tail(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 512 {
		s = "..." + s[len(s)-512:]
	}
	if s == "" {
		return "(empty)"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func reasonBit(name string) (uint64, bool) {
	for i := range 64 {
		if n := gpu.ReasonNames(1 << i); len(n) == 1 && n[0] == name && !strings.HasPrefix(name, "unknown_") {
			return 1 << i, true
		}
	}
	return 0, false
}

type badFunc func(field, format string, args ...any)

func paramInt(v any, f string, bad badFunc) int64 {
	if n, ok := v.(int64); ok {
		return n
	}
	if n, ok := v.(int); ok {
		return int64(n)
	}
	bad(f, "expected an integer, found %T %v", v, v)
	return 0
}

// paramHex reads an id written as an integer or a hex string ("0x233010DE").
func paramHex(v any, f string, bad badFunc) uint64 {
	if s, ok := v.(string); ok {
		n, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(s), "0x"), 16, 32)
		if err != nil {
			bad(f, "%q is not a 32-bit hex id such as 0x233010DE", s)
		}
		return n
	}
	n := paramInt(v, f, bad)
	if n < 0 || n > math.MaxUint32 {
		bad(f, "%d is not a 32-bit id", n)
		return 0
	}
	return uint64(n)
}

func paramStr(v any, f string, bad badFunc) string {
	s, ok := v.(string)
	if !ok {
		bad(f, "expected a string, found %T %v", v, v)
	}
	return s
}

func paramBool(v any, f string, bad badFunc) bool {
	b, ok := v.(bool)
	if !ok {
		bad(f, "expected true or false, found %T %v", v, v)
	}
	return b
}

func paramStrs(v any, f string, bad badFunc) []string {
	list, ok := v.([]any)
	if !ok {
		bad(f, "expected a list of strings, found %T %v", v, v)
		return nil
	}
	var out []string
	for i, x := range list {
		s, ok := x.(string)
		if !ok {
			bad(fmt.Sprintf("%s[%d]", f, i), "expected a string, found %T %v", x, x)
			continue
		}
		out = append(out, s)
	}
	return out
}

// thresholdInt reads a one-sided integer bar: {min: n} when wantMin, else
// {max: n}. gpu.Expect takes 0 as "use the default" for most bars, so 0 is
// refused unless zeroOK (the field's zero is a real bar).
func thresholdInt(t manifests.Threshold, f string, wantMin, zeroOK bool, bad badFunc) int64 {
	side, want, other := "max", t.Max, t.Min
	if wantMin {
		side, want, other = "min", t.Min, t.Max
	}
	if want == nil || other != nil || t.Equals != nil {
		bad(f, "expected {%s: <integer>} only", side)
		return 0
	}
	v := *want
	if v != math.Trunc(v) || v < 0 || v > math.MaxInt32 {
		bad(f, "%s %v: expected a non-negative integer", side, v)
		return 0
	}
	if v == 0 && !zeroOK {
		bad(f, "%s 0 is not supported (0 selects the helper's default bar)", side)
	}
	return int64(v)
}
