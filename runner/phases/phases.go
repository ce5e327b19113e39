// Package phases holds the runner's in-band phase executors (nvme, nic and dpu
// firmware, os_install). Each executor compares first (plan, as data) and acts
// only on a delta; devices are reached through the small interfaces in
// Config so tests use fakes and cure-runner wires the real tools.
package phases

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/runner/inventory"
	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/bluefield"
	"github.com/cure-oss/cure/tools/buildinfo"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/siteprog"
	"github.com/cure-oss/cure/tools/checks/suite"
	"github.com/cure-oss/cure/tools/diskimage"
	"github.com/cure-oss/cure/tools/gpu/driver"
	"github.com/cure-oss/cure/tools/mstflint"
	"github.com/cure-oss/cure/tools/telemetry"
)

// UnknownPhase marks the message of a phase this runner has no executor
// for: the phase fails (an ERROR verdict and PHASE_FAILED), never skips, so
// an image older than its coordinator cannot pass phases it never ran.
const UnknownPhase = "unknown to runner"

// ImageWriter streams an image to a disk and reads it back (tools/diskimage).
type ImageWriter interface {
	Write(ctx context.Context, o diskimage.Options) (*diskimage.Result, error)
	Verify(ctx context.Context, target string, d diskimage.Digest) error
}

// Seed is the first-boot configuration written next to the installed OS.
type Seed struct {
	InstanceID, Hostname, CallbackURL, CallbackToken, ExtraUserData string
}

// SeedWriter finds the CIDATA partition of a disk and writes the NoCloud
// seed into it (tools/firstboot).
type SeedWriter interface {
	FindSeedPartition(disk string) (string, error)
	WriteSeed(part string, s Seed) error
}

// Config is what the executors need from the node.
type Config struct {
	Log *slog.Logger
	// Controllers lists NVMe controllers with Identify data (inventory.NVMeControllers).
	Controllers func() ([]*inventory.Controller, error)
	// Disks lists disks with the boot medium marked; an error from boot
	// medium detection must be returned, never swallowed (inventory.Disks).
	Disks  func() ([]blockdev.Disk, error)
	Images ImageWriter
	Seeds  SeedWriter
	// OpenNVMeFirmware opens a controller for an in-band firmware update
	// (OpenNVMeFirmwareDevice); nil refuses updates.
	OpenNVMeFirmware NVMeFirmwareDevice
	// FixPartitionTable runs after the image's read-back (FixGPT); nil
	// leaves the written partition table as it is.
	FixPartitionTable func(path string, growRoot bool) (string, error)
	// Storage builds spec.os.storage (md arrays, extra filesystems); a nil
	// Storage.Run refuses a SKU that has one.
	Storage StorageSeams
	// Root is where sys/, proc/ and dev/ are ("/" on a node; a fixture in tests).
	Root string
	// Pairs holds the coordinator's node-pair schedules and judgements
	// (the agent's PairInbox); nil makes node-pair checks ERROR.
	Pairs *agent.PairInbox
	// SuiteEnv adjusts the validation environment (tests inject fakes).
	SuiteEnv func(suite.Env) suite.Env
	// TelemetryGPU samples GPUs during a stage's telemetry; nil means
	// cure-nvml -sample (gpucheck.Telemetry) over Root.
	TelemetryGPU telemetry.GPUSource
	// Wipe erases one disk (RealDiskWiper); nil refuses sed_revert.
	Wipe DiskWiper
	// HTTP downloads images; nil means a client with connect/header timeouts.
	HTTP *http.Client
	// SystemSerial fills {{.Serial}} in the manifest's hostname template.
	SystemSerial string
	// ProgressEvery is the minimum gap between progress metrics (default 2s).
	ProgressEvery time.Duration
	// SeedWait bounds the wait for the CIDATA partition to appear after the
	// kernel re-read the partition table (default 15s).
	SeedWait time.Duration
	// MFT runs mstflint/mstfwreset for the nic phase and the DPU's NIC
	// query (mstflint.New); nil skips the nic phase.
	MFT *mstflint.Tool
	// Rshims lists the BlueField rshim devices (bluefield.OpenAll); nil skips the
	// dpu phase.
	Rshims func() ([]bluefield.Rshim, error)
	// TmpDir receives downloaded NIC images and DPU bundles (tmpfs in CURE;
	// default os.TempDir()).
	TmpDir string
	// Inventory collects the node's inventory for the hardware phase;
	// nil means CollectInventory(Root, ...) over sysfs, SMBIOS and netlink.
	Inventory func(context.Context) (*curev1.Inventory, error)
	// LinksUp brings the node's NIC ports up and waits up to wait for
	// carrier (inventory.LinksUp), returning how many it brought up; nil
	// reads the links as they are.
	LinksUp  func(ctx context.Context, wait time.Duration) (int, error)
	LinkWait time.Duration
	// GPUDriver loads the image's driver bundle modules and starts the
	// fabric manager before GPU checks (tools/gpu/driver); a zero value
	// leaves the driver as it is.
	GPUDriver driver.Seams
	// DPUTimeout bounds one DPU bundle install until "DPU is ready"
	// (default 45 min); DPUPoll is how often the rshim log is read (default 5s).
	DPUTimeout, DPUPoll time.Duration
	// MCEPoll is the kernel's machine-check poll interval during a
	// validation run (default 5s; negative leaves the kernel's own).
	MCEPoll time.Duration
	// Site runs the suite's site checks: its sandbox and bounds (HTTP and
	// Log are this Config's); the zero value is the node's defaults.
	Site siteprog.Runner
	// Version is this runner's (image's) build version, named when the
	// coordinator asks for a phase it does not know (default: the build
	// info's, tools/buildinfo).
	Version string
	now     func() time.Time
}

// Executor dispatches phases by name; it implements agent.Executor.
type Executor struct {
	cfg Config
	// zeroed holds the disks (by zeroedKey) that sed_revert erased in this
	// boot and sampled as all zeros: os_install may skip zero blocks on
	// them. Lost with a reboot, which only costs speed.
	mu     sync.Mutex
	zeroed map[string]bool
	// hwFailures are the hardware phase's mismatches in this boot; the
	// validate phase of a diagnostic run fails on them after its suite.
	hwFailures []checks.Verdict
	// inv is this boot's inventory as the hardware phase read it: what
	// names a failing component's device in the kernel log.
	inv *curev1.Inventory
	// gpuUp: the GPU driver bundle was brought up in this boot.
	gpuMu sync.Mutex
	gpuUp bool
}

func zeroedKey(d blockdev.Disk) string { return d.Path + "|" + d.Serial }

func (e *Executor) setZeroed(d blockdev.Disk, zeroed bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.zeroed == nil {
		e.zeroed = map[string]bool{}
	}
	e.zeroed[zeroedKey(d)] = zeroed
}

func (e *Executor) isZeroed(d blockdev.Disk) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.zeroed[zeroedKey(d)]
}

// New returns an executor over cfg.
func New(cfg Config) *Executor {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.ProgressEvery == 0 {
		cfg.ProgressEvery = 2 * time.Second
	}
	if cfg.SeedWait == 0 {
		cfg.SeedWait = 15 * time.Second
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	if cfg.Root == "" {
		cfg.Root = "/"
	}
	if cfg.Version == "" {
		cfg.Version = buildinfo.Version("")
	}
	if cfg.HTTP == nil {
		cfg.HTTP = DefaultHTTPClient()
	}
	if cfg.Inventory == nil {
		cfg.Inventory = CollectInventory(cfg.Root, inventory.Options{Log: cfg.Log})
	}
	if cfg.LinkWait == 0 {
		cfg.LinkWait = defaultLinkWait
	}
	if cfg.MCEPoll == 0 {
		cfg.MCEPoll = defaultMCEPoll
	}
	if cfg.DPUTimeout == 0 {
		cfg.DPUTimeout = 45 * time.Minute
	}
	return &Executor{cfg: cfg}
}

// DefaultHTTPClient bounds connecting and waiting for headers but not the
// body: a multi-GiB image may take long; diskimage's stall timeout catches a
// silent peer.
func DefaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = 30 * time.Second
	t.TLSHandshakeTimeout = 10 * time.Second
	t.Proxy = nil // CURE talks to the coordinator's artifact server directly
	return &http.Client{Transport: t}
}

// executors maps each runner-owned phase (the modes constants) to its
// executor. TestEveryPhaseHasExecutor checks every mode's plan against it.
var executors = map[modes.PhaseName]func(*Executor, context.Context, *curev1.Assignment, agent.Emitter) agent.PhaseOutcome{
	modes.Hardware:  (*Executor).runHardware,
	modes.NIC:       (*Executor).runNIC,
	modes.DPU:       (*Executor).runDPU,
	modes.NVMe:      (*Executor).runNVMe,
	modes.SEDRevert: (*Executor).runSEDRevert,
	modes.OSInstall: (*Executor).runOSInstall,
	modes.Validate:  (*Executor).runValidate,
}

// Has reports whether this runner has an executor for phase.
func Has(phase modes.PhaseName) bool {
	_, ok := executors[phase]
	return ok
}

// Run implements agent.Executor. The phase comes off the wire: the
// table's lookup is its check, an unknown one fails by name.
func (e *Executor) Run(ctx context.Context, phase string, a *curev1.Assignment, emit agent.Emitter) agent.PhaseOutcome {
	if run, ok := executors[modes.PhaseName(phase)]; ok {
		return run(e, ctx, a, emit)
	}
	return e.unknownPhase(phase, a, emit)
}

// unknownPhase fails a phase this runner has no executor for, naming both
// builds: the coordinator knows a phase the image does not, so the image is
// older (or other) than its coordinator and must be rebuilt. One ERROR
// verdict says so in the run's report as well as in the phase's message.
func (e *Executor) unknownPhase(phase string, a *curev1.Assignment, emit agent.Emitter) agent.PhaseOutcome {
	coord := a.GetCoordinatorVersion()
	if coord == "" {
		coord = "(a version that does not send its own)"
	}
	msg := fmt.Sprintf("phase %q %s cure-runner %s; coordinator %s asked for it: rebuild the image", phase, UnknownPhase, e.cfg.Version, coord)
	e.cfg.Log.Error("unknown phase", "phase", phase, "runner", e.cfg.Version, "coordinator", coord)
	emit.Verdict(&curev1.Verdict{Component: "runner", Check: phase, Status: curev1.VerdictStatus_ERROR,
		Observed: "cure-runner " + e.cfg.Version, Expected: "a runner that runs phase " + phase, Message: msg})
	return failed("%s", msg)
}

func (e *Executor) sku(a *curev1.Assignment) (*manifests.SKU, error) {
	name := a.GetManifestName()
	if name == "" {
		name = "assignment manifest"
	}
	if len(a.GetManifestYaml()) == 0 {
		return nil, fmt.Errorf("run %s: assignment carries no manifest (%s)", a.GetRunId(), name)
	}
	sku, err := manifests.ParseSKU(name, a.GetManifestYaml())
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", a.GetRunId(), err)
	}
	return sku, nil
}

func failed(format string, args ...any) agent.PhaseOutcome {
	return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_FAILED, Message: fmt.Sprintf(format, args...)}
}
