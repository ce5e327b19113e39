// Command cure-runner is the uinit of the CURE initramfs: it mounts what
// u-root's init did not, loads drivers for the devices present, brings the
// network up, takes inventory and then serves the coordinator's assignments
// until told to reboot. It is PID 1's child: it never exits on error (that
// would panic the kernel); it logs, waits and retries, and with cure.debug=1
// opens a shell on the console after a fatal error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/runner/attestation"
	"github.com/cure-oss/cure/runner/boot"
	"github.com/cure-oss/cure/runner/inventory"
	"github.com/cure-oss/cure/runner/optools"
	"github.com/cure-oss/cure/runner/phases"
	"github.com/cure-oss/cure/runner/pid1"
	"github.com/cure-oss/cure/runner/transport"
	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/bluefield"
	"github.com/cure-oss/cure/tools/buildinfo"
	"github.com/cure-oss/cure/tools/gpu/driver"
	"github.com/cure-oss/cure/tools/mstflint"
	"github.com/cure-oss/cure/tools/toolbundle"
	"github.com/cure-oss/cure/tools/version"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// linkedVersion is set at build time with -ldflags "-X main.linkedVersion=...".
var linkedVersion = ""

// alwaysModules have no modalias (filesystems, codepages) but the CIDATA
// seed partition needs them.
// nls_ascii: Debian builds FAT with iocharset=ascii by default; without it
// every vfat mount fails with EINVAL.
// efivarfs: the signed image reads its boot option (where its boot
// parameters come from) and the Secure Boot state from EFI variables.
var alwaysModules = []string{"vfat", "nls_cp437", "nls_iso8859_1", "nls_ascii", "efivarfs"}

type options struct {
	dryRun     bool
	root       string
	cmdline    string
	caFile     string
	modulesDir string
}

func main() {
	timeline := boot.NewTimeline()
	timeline.Mark(boot.StageRunnerStarted)
	var o options
	flag.BoolVar(&o.dryRun, "dry-run", false, "local testing: no mounts, no module loading, no network configuration, never write a disk, never reboot; exit on fatal errors")
	flag.StringVar(&o.root, "sysroot", "/", "filesystem root holding sys/, proc/ and dev/ (a fixture tree for local testing)")
	flag.StringVar(&o.cmdline, "cmdline", "", "kernel command line to use instead of <sysroot>/proc/cmdline")
	flag.StringVar(&o.caFile, "ca", transport.DefaultCAFile, "PEM file with the coordinator's CA")
	flag.StringVar(&o.modulesDir, "modules", "", "kernel modules directory (default /lib/modules/$(uname -r))")
	printVersion := version.Flag(flag.CommandLine, "cure-runner")
	flag.Parse()
	if printVersion(os.Stdout) {
		os.Exit(0)
	}

	console := openConsole(o.dryRun)
	r := newRunner(o, console, timeline)
	r.log = slog.New(slog.NewTextHandler(console, &slog.HandlerOptions{Level: &r.level}))
	slog.SetDefault(r.log)
	r.run(context.Background())
}

// openConsole writes to /dev/console, where QEMU's serial port and the
// e2e tests read; stderr when that is not possible or in a dry run.
func openConsole(dryRun bool) io.Writer {
	if dryRun {
		return os.Stderr
	}
	f, err := os.OpenFile("/dev/console", os.O_WRONLY|unix.O_NOCTTY, 0)
	if err != nil {
		return os.Stderr
	}
	return f
}

type runner struct {
	opt      options
	console  io.Writer
	log      *slog.Logger
	level    slog.LevelVar
	procRoot string
	cmd      boot.Cmdline
	timeline *boot.Timeline
	// helloGate closes once the first Hello is built (or the runner
	// inspects instead): the filesystem modules wait for it.
	helloGate  chan struct{}
	gateOnce   sync.Once
	allModules chan struct{} // closed once every module load has ended
}

// newRunner is a runner with its channels made.
func newRunner(o options, console io.Writer, timeline *boot.Timeline) *runner {
	return &runner{opt: o, console: console, procRoot: filepath.Join(o.root, "proc"), timeline: timeline,
		helloGate: make(chan struct{}), allModules: make(chan struct{})}
}

// openGate lets the filesystem modules load (once).
func (r *runner) openGate() {
	r.gateOnce.Do(func() {
		if r.helloGate != nil {
			close(r.helloGate)
		}
	})
}

// say prints one greppable line on the console (the e2e tests wait for them).
func (r *runner) say(format string, args ...any) {
	fmt.Fprintf(r.console, "CURE-RUNNER: "+format+" uptime=%s\n", append(args, r.uptime())...)
}

func (r *runner) uptime() string {
	u, err := transport.Uptime(r.procRoot)
	if err != nil {
		return "?"
	}
	return u.Round(time.Millisecond).String()
}

// fatal handles an error the runner cannot get past on its own: log it,
// open a debug shell when asked to, then wait before the caller retries.
func (r *runner) fatal(step string, err error) {
	r.log.Error("fatal: "+step, "err", err)
	r.say("fatal step=%s err=%q", step, err.Error())
	if r.opt.dryRun {
		os.Exit(1)
	}
	if r.cmd.Debug {
		r.debugShell()
	}
	time.Sleep(10 * time.Second)
}

// debugShell runs a u-root shell on the console; u-root's busybox cannot
// resolve bare command names, so only absolute paths are tried.
func (r *runner) debugShell() {
	for _, sh := range []string{"/bbin/gosh", "/bin/gosh", "/bin/sh"} {
		if _, err := os.Stat(sh); err != nil {
			continue
		}
		tty, err := os.OpenFile("/dev/console", os.O_RDWR, 0)
		if err != nil {
			r.log.Error("debug shell: opening console", "err", err)
			return
		}
		r.say("debug shell %s on console (exit to retry)", sh)
		c := exec.Command(sh)
		c.Stdin, c.Stdout, c.Stderr = tty, tty, tty
		c.SysProcAttr = &unix.SysProcAttr{Setsid: true, Setctty: true}
		if err := c.Run(); err != nil {
			r.log.Warn("debug shell ended", "shell", sh, "err", err)
		}
		tty.Close()
		return
	}
	r.log.Error("debug shell requested but none found", "tried", "/bbin/gosh /bin/gosh /bin/sh")
}

func (r *runner) run(ctx context.Context) {
	r.say("start version=%s", runnerVersion())
	if !r.opt.dryRun {
		if err := pid1.MountPseudoFS(); err != nil {
			r.log.Warn("mounting pseudo filesystems", "err", err)
		}
	}
	if !r.opt.dryRun {
		// The kernel's own stages (initramfs unpack, /init) are in its log.
		if st, err := boot.ReadKernelStages("/dev/kmsg"); err != nil {
			r.log.Warn("boot timeline: kernel stages unavailable", "err", err)
		} else {
			for _, s := range st {
				r.timeline.Add(s)
			}
		}
	}
	for {
		if err := r.readCmdline(); err != nil {
			r.fatal("cmdline", err)
			continue
		}
		break
	}
	if r.cmd.Debug {
		r.level.Set(slog.LevelDebug)
	}
	r.log.Info("kernel command line", "coordinator", r.cmd.Coordinator, "node", r.cmd.Node, "http", r.cmd.HTTP, "debug", r.cmd.Debug)

	netDrivers, modulesDone := r.startModules(ctx)
	<-netDrivers
	// pci.ids is parsed while the network comes up and the other drivers
	// load, so the inventory finds it parsed (after the NIC's drivers: on
	// a two-vCPU QEMU node it would otherwise slow them, the boot's
	// critical path).
	go inventory.Preload(r.opt.root, r.log)
	lease := r.network(ctx)
	r.timeline.Mark(boot.StageDHCPBound)

	if r.cmd.HTTPSBoot() {
		for {
			if err := r.httpsBootParams(ctx, lease); err != nil {
				r.fatal("https-boot", err)
				continue
			}
			break
		}
	}

	// After the HTTPS boot's parameters: cure.lldp= may be among them.
	neighbours := r.startLLDP(ctx)

	// The TLS handshake with the coordinator runs beside the inventory.
	var conn *grpc.ClientConn
	for {
		var err error
		if conn, err = transport.Dial(r.cmd.Coordinator, r.opt.caFile); err == nil {
			break
		}
		r.fatal("dial", err)
	}
	go r.markConnected(ctx, conn)

	<-modulesDone
	r.timeline.Mark(boot.StageModulesLoaded)
	inv, id := r.inventory(ctx, lease)
	neighbours.finish(r, inv)
	r.timeline.Mark(boot.StageInventoryDone)
	if r.cmd.Inspect() {
		// An enlisting machine: a report, no session, no phase (inspect.go).
		r.openGate()
		r.inspect(ctx, conn, inv)
		return
	}
	a, sess := r.newAgent(inv, id, conn)
	go sess.Run(ctx) // reconnects forever; one session per boot keeps seqs unique
	for {
		if err := a.Run(ctx); err != nil {
			r.fatal("agent", err)
			continue
		}
		r.fatal("reboot", errors.New("agent stopped for a reboot but the machine is still up"))
	}
}

// startModules loads the kernel modules in the background. The NIC's
// drivers load first (netDrivers closes): the network comes up while
// storage modules still load, and the inventory waits for the drivers of
// every device present (modulesDone). The filesystems, which only phases
// use, load after the Hello; no phase starts before they are in
// (gatedExecutor, on r.allModules).
func (r *runner) startModules(ctx context.Context) (netDrivers, modulesDone chan struct{}) {
	netDrivers, modulesDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(r.allModules)
		if r.opt.dryRun {
			close(netDrivers)
			close(modulesDone)
			return
		}
		r.loadModules(ctx, func() {
			r.timeline.Mark(boot.StageNetDriversLoaded)
			close(netDrivers)
		}, func() { close(modulesDone) })
	}()
	return netDrivers, modulesDone
}

func (r *runner) readCmdline() error {
	var c boot.Cmdline
	if r.opt.cmdline != "" {
		c = boot.ParseCmdline(r.opt.cmdline)
	} else {
		var err error
		if c, err = boot.ReadCmdline(r.procRoot); err != nil {
			return err
		}
	}
	r.cmd = c
	return c.Validate()
}

// modulesDir is --modules or /lib/modules/$(uname -r).
func (r *runner) modulesDir() (string, error) {
	if r.opt.modulesDir != "" {
		return r.opt.modulesDir, nil
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return filepath.Join("/lib/modules", unix.ByteSliceToString(u.Release[:])), nil
}

// markConnected starts the connection to the coordinator and marks the
// boot timeline's connected stage when it is ready (the session's Hello
// then goes out on it at once).
func (r *runner) markConnected(ctx context.Context, conn *grpc.ClientConn) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn.Connect()
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			return
		}
	}
	r.timeline.Mark(boot.StageConnected)
}

// loadModules loads the drivers of the devices present; onNetwork runs once
// the network devices' drivers are in, onDevices once every present
// device's are (the settle for late devices goes on after it).
func (r *runner) loadModules(ctx context.Context, onNetwork, onDevices func()) {
	dir, err := r.modulesDir()
	if err != nil {
		r.log.Error("kernel modules", "err", err)
		onNetwork()
		onDevices()
		return
	}
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	loaded, err := boot.LoadModulesForDevices(mctx, filepath.Join(r.opt.root, "sys"), dir, r.log,
		boot.WithAlwaysLoad(alwaysModules...), boot.WithAlwaysLoadAfter(r.helloGate),
		boot.WithNetworkFirst(onNetwork), boot.WithDevicesLoaded(onDevices))
	if err != nil {
		// A missing driver shows up later as a missing NIC or disk, with
		// its own error; carry on with what loaded.
		r.log.Warn("some kernel modules did not load", "err", err)
	}
	r.say("modules loaded count=%d", len(loaded))
}

// network retries until a lease is configured; without it nothing else works.
func (r *runner) network(ctx context.Context) *boot.Lease {
	if r.opt.dryRun {
		r.say("network up iface=(dry-run) ip=(host)")
		return &boot.Lease{}
	}
	for {
		nctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		lease, err := boot.ConfigureNetwork(nctx, r.log, boot.NetworkOptions{
			OnCarrier: func() { r.timeline.Mark(boot.StageLinkUp) },
		})
		cancel()
		if err == nil {
			r.say("network up iface=%s ip=%s", lease.Iface, lease.IP)
			return lease
		}
		r.fatal("network", err)
	}
}

func (r *runner) inventory(ctx context.Context, lease *boot.Lease) (*curev1.Inventory, *curev1.Identity) {
	ictx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	inv, id, err := inventory.Collect(ictx, inventory.Options{Root: r.opt.root, BootMAC: lease.MAC, NodeID: r.cmd.Node, Log: r.log})
	if err != nil {
		// Hello still goes out: the coordinator knows the node by token and MAC.
		r.log.Error("inventory incomplete", "err", err)
		if inv == nil {
			inv = &curev1.Inventory{}
		}
		if id == nil {
			id = &curev1.Identity{BootMac: lease.MAC, NodeId: r.cmd.Node}
		}
	}
	r.log.Info("inventory", "nvme", len(inv.GetNvme()), "nics", len(inv.GetNics()), "disks", len(inv.GetDisks()), "gpus", len(inv.GetGpus()),
		"memory_bytes", inv.GetMemoryBytes(), "cpus", inv.GetCpuCount(), "serial", id.GetSystemSerial())
	return inv, id
}

// newAgent wires the session (assignment source and event sink), the
// phase executor and the console hooks.
func (r *runner) newAgent(inv *curev1.Inventory, id *curev1.Identity, conn *grpc.ClientConn) (*agent.Agent, *transport.Session) {
	bootID, err := transport.BootID(r.procRoot)
	if err != nil {
		r.log.Warn("boot id unavailable", "err", err)
	}
	var a *agent.Agent
	var firstHello sync.Once
	sess := transport.NewSession(conn, func() *curev1.Hello {
		var up int64
		if u, err := transport.Uptime(r.procRoot); err == nil {
			up = u.Milliseconds()
		}
		// The session calls this once the connection is ready, just
		// before sending: the first call closes the boot timeline.
		// Only the boot's first Hello carries the timeline, so a reconnect
		// is not counted as another boot.
		var stages []*curev1.BootStage
		firstHello.Do(func() {
			r.timeline.Mark(boot.StageConnected) // unless markConnected saw it first
			r.timeline.Mark(boot.StageHelloSent)
			r.say("boot timeline %s", r.timeline)
			stages = r.timeline.Proto()
		})
		// The Hello is built: the filesystem modules may load now (the
		// attestation below and the coordinator's answer overlap them).
		r.openGate()
		// Every Hello carries a fresh attestation: the coordinator judges
		// the boot on the first Hello it receives, which need not be the
		// first one sent (a Hello lost with its connection).
		actx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		att := attestation.Attest(actx, attestation.Device(r.opt.root), curev1.NewRunnerServiceClient(conn), r.cmd.Token, bootID)
		if att.GetError() != "" {
			r.log.Warn("boot not attested", "err", att.GetError())
		}
		return &curev1.Hello{Token: r.cmd.Token, BootId: bootID, Identity: id, Inventory: inv,
			State: a.State(), RunnerVersion: runnerVersion(), UptimeMs: up, BootStages: stages, Attestation: att}
	}, transport.SessionOptions{Log: r.log})

	var rb agent.Rebooter = agent.SystemRebooter{}
	if r.opt.dryRun {
		rb = dryRebooter{}
	}
	pairs := agent.NewPairInbox()
	pcfg := r.phaseConfig(id)
	pcfg.Pairs = pairs
	ready := r.allModules
	if ready == nil { // no module loading behind this runner (tests)
		c := make(chan struct{})
		close(c)
		ready = c
	}
	a = agent.New(sess, gatedExecutor{Executor: phases.New(pcfg), ready: ready}, sess, rb, r.log)
	a.Pairs = pairs
	var once sync.Once
	a.OnDirective = func(d agent.Directive) {
		if d.Assignment != nil || d.Idle != nil {
			once.Do(func() { r.say("registered node=%s", r.cmd.Node) })
		}
	}
	a.OnPhaseEnd = func(phase string, out agent.PhaseOutcome, d time.Duration) {
		r.say("phase %s done status=%s duration=%s", phase, out.Status, d.Round(time.Millisecond))
	}
	return a, sess
}

// mstflint is the nic and dpu phases' mstflint: from PATH when the image
// has it, otherwise fetched from the pinned tool bundle at its first use
// (an image without a pin reports the adapters SKIP, mstflint absent).
func (r *runner) mstflint(root string) *mstflint.Tool {
	t := mstflint.New(root, r.log)
	od := &optools.OnDemand{Config: optools.Config{PinFile: optools.PinFile, BaseURL: r.cmd.HTTP, Dir: optools.Dir, Self: optools.Self}}
	if raw, err := os.ReadFile(optools.PinFile); err == nil {
		if od.Config.Pin, err = toolbundle.ParsePin(optools.PinFile, raw); err != nil {
			r.log.Warn("tool bundle pin unreadable: on-demand tools unavailable", "err", err)
		}
	}
	t.Runner, t.LookPath = od, od.LookPath
	return t
}

func (r *runner) phaseConfig(id *curev1.Identity) phases.Config {
	root := r.opt.root
	cfg := phases.Config{
		Log:          r.log,
		Version:      runnerVersion(),
		SystemSerial: id.GetSystemSerial(),
		Controllers: func() ([]*inventory.Controller, error) {
			return inventory.NVMeControllers(root, nil, false, r.log)
		},
		Disks:             func() ([]blockdev.Disk, error) { return inventory.Disks(root) },
		Images:            diskImages{},
		Seeds:             seedWriter{sysRoot: root, devRoot: filepath.Join(root, "dev"), tmpDir: "/tmp"},
		OpenNVMeFirmware:  phases.OpenNVMeFirmwareDevice,
		Wipe:              phases.RealDiskWiper(root),
		FixPartitionTable: phases.FixGPT,
		Storage:           r.storageSeams(root),
		Root:              root,
		MFT:               r.mstflint(root),
		Rshims:            func() ([]bluefield.Rshim, error) { return bluefield.OpenAll(filepath.Join(root, "dev")) },
		TmpDir:            "/tmp",
		Inventory:         phases.CollectInventory(root, inventory.Options{Log: r.log, NodeID: r.cmd.Node}),
		LinksUp: func(ctx context.Context, wait time.Duration) (int, error) {
			return inventory.LinksUp(ctx, root, wait)
		},
		// The driver bundle's modules (cure-build --driver-bundle) load on
		// purpose before GPU checks, never by modalias at boot.
		GPUDriver: driver.Seams{
			Load: func(name string) error {
				dir, err := r.modulesDir()
				if err != nil {
					return err
				}
				loaded, err := boot.LoadModule(dir, filepath.Join(root, "proc"), name, boot.KernelLoader{})
				r.log.Info("gpu driver modules loaded", "module", name, "loaded", loaded)
				return err
			},
			Start: driver.ExecStart,
		},
	}
	if r.opt.dryRun {
		cfg.Images = refuseImages{}
		cfg.OpenNVMeFirmware = nil
		cfg.Wipe = nil
		cfg.FixPartitionTable = nil
		cfg.Storage = phases.StorageSeams{}
		cfg.MFT = nil
		cfg.Rshims = nil
		cfg.LinksUp = nil
		cfg.GPUDriver = driver.Seams{}
	}
	return cfg
}

type dryRebooter struct{}

func (dryRebooter) Reboot() error {
	return fmt.Errorf("dry run: %w", agent.ErrNoReboot)
}

func runnerVersion() string { return buildinfo.Version(linkedVersion) }

// httpsBootParams fetches the per-boot parameters of a signed image booted
// over UEFI HTTP: from the boot server in the firmware's boot option, over
// TLS pinned to the image's CA, for the booting NIC. It also says on the
// console what the firmware enforced and what the TPM measured.
func (r *runner) httpsBootParams(ctx context.Context, lease *boot.Lease) error {
	if dir, err := r.modulesDir(); err == nil {
		if _, err := boot.LoadModule(dir, filepath.Join(r.opt.root, "proc"), "efivarfs", boot.KernelLoader{}); err != nil {
			r.log.Warn("efivarfs module", "err", err)
		}
	}
	if err := boot.MountEFIVars(boot.EFIVarsDir); err != nil {
		return err
	}
	hb, err := boot.ReadHTTPSBoot(boot.EFIVarsDir)
	if err != nil {
		return err
	}
	base, err := hb.BaseURL()
	if err != nil {
		return err
	}
	mac := lease.MAC
	if hb.MAC != nil {
		mac = hb.MAC.String()
	}
	r.say("https boot option=%s uri=%s mac=%s secureboot=%v", hb.Option, hb.URI, mac, hb.SecureBoot)
	if pcrs := boot.ReadPCRs(filepath.Join(r.opt.root, "sys"), 4, 7, 9, 11); pcrs != "" {
		r.say("tpm pcrs sha256 %s", pcrs)
	}
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	params, err := boot.FetchBootParams(fctx, base, mac, r.opt.caFile)
	if err != nil {
		return err
	}
	c := boot.ParseCmdline(strings.Join(append(sortedParams(r.cmd.Params), params), " "))
	if err := c.Validate(); err != nil {
		return fmt.Errorf("boot parameters from %s: %w", base, err)
	}
	c.Boot = "https"
	r.cmd = c
	r.log.Info("boot parameters over HTTPS", "server", base, "coordinator", c.Coordinator, "node", c.Node)
	return nil
}

// sortedParams is a parsed command line again, in a stable order.
func sortedParams(p map[string]string) []string {
	var out []string
	for k, v := range p {
		if v == "" {
			out = append(out, k)
		} else {
			out = append(out, k+"="+v)
		}
	}
	sort.Strings(out)
	return out
}

// gatedExecutor holds every phase until ready closes: the runner registers
// before the filesystem modules load, and phases (the seed partition's
// vfat, EFI variables) must find every driver in.
type gatedExecutor struct {
	agent.Executor
	ready <-chan struct{}
}

// Run implements agent.Executor.
func (g gatedExecutor) Run(ctx context.Context, phase string, a *curev1.Assignment, emit agent.Emitter) agent.PhaseOutcome {
	select {
	case <-g.ready:
	case <-ctx.Done():
		return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_FAILED, Message: "phase cancelled while the kernel modules were still loading: " + ctx.Err().Error()}
	}
	return g.Executor.Run(ctx, phase, a, emit)
}
