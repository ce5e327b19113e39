package fleet

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/qemu-test/hostos/phonehome"
	"github.com/cure-oss/cure/qemu-test/vbmc"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/runner/transport"
	"github.com/cure-oss/cure/tools/retry"
	"google.golang.org/grpc"
)

// Node is one simulated server: a virtual BMC in front of a machine whose
// "firmware" PXE-boots over HTTP, whose CURE is the real runner transport and
// agent with simulated phases, and whose installed OS calls back.
type Node struct {
	index               int
	ID, MAC, Serial, IP string
	Faults              Faults
	BMC                 *vbmc.BMC

	sim *Sim
	log *slog.Logger
	m   *machine

	// Hardware as the node's inventory reports it.
	nicFW, nvmeFW string

	mu         sync.Mutex
	firstBoot  *curev1.FirstBoot // from the last os_install: the installed OS calls back with it
	flashes    map[string]int    // component -> flashes written
	boots      int
	cureBoots  int
	streamCuts int
	conns      map[net.Conn]struct{}
	used       map[string]bool // transient faults already injected
}

// Faults are what a node suffers. Transient faults must not cost a healthy
// node its first pass; hardware faults must fail its run naming the part.
type Faults struct {
	StreamCut    bool // the runner's TCP connection is cut mid-phase
	RunnerKilled bool // the node resets by itself mid-phase (CURE dies)
	BMC503       bool // the BMC sheds a burst of requests with 503
	DownloadCut  bool // the OS image download breaks midway once
	SlowBMCReset bool // the BMC takes long to come back after its firmware reset
	// UpdateTimeout: the BMC accepts the SimpleUpdate but its answer never
	// arrives (the coordinator must find the task rather than flash twice).
	UpdateTimeout bool
	// Hardware.
	NICUnflashable  bool // NIC on wrong firmware whose flash fails
	NVMeMediaErrors bool // the target NVMe fails the install's read-back
	GPUMissing      bool // one GPU absent (seen by a diagnostic's gpu check)
}

// Hardware reports whether the node has a hardware fault.
func (f Faults) Hardware() bool { return f.NICUnflashable || f.NVMeMediaErrors || f.GPUMissing }

// FaultedComponent is the component a hardware fault must be named by.
func (f Faults) FaultedComponent() string {
	switch {
	case f.NICUnflashable:
		return nicComponent
	case f.NVMeMediaErrors:
		return "nvme/1"
	case f.GPUMissing:
		return "gpu/5"
	}
	return ""
}

const nicComponent = "nic/0000:17:00.0"

// missingGPU is the index of the GPU a GPUMissing node lacks.
const missingGPU = 5

// Flashes returns how many times each component was flashed.
func (n *Node) Flashes() map[string]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]int{}
	for k, v := range n.flashes {
		out[k] = v
	}
	return out
}

// AllFlashes adds the BMC's out-of-band flashes to the in-band ones.
func (n *Node) AllFlashes() map[string]int {
	f := n.Flashes()
	for _, id := range []string{"BMC", "BIOS"} {
		if k := n.BMC.Flashes(id); k > 0 {
			f[strings.ToLower(id)] = k
		}
	}
	return f
}

// Boots returns the machine's boots and how many of them ran CURE.
func (n *Node) Boots() (all, cure int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.boots, n.cureBoots
}

// once reports whether the named transient fault is still to be injected.
func (n *Node) once(what string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.used[what] {
		return false
	}
	n.used[what] = true
	return true
}

// machine is the vbmc.Machine of a simulated node.
type machine struct {
	n      *Node
	mu     sync.Mutex
	seq    uint64
	run    bool
	cancel context.CancelFunc
	events chan vbmc.MachineEvent
}

func (m *machine) Start(_ context.Context, dev vbmc.BootDevice) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.run {
		return errors.New("machine already running")
	}
	m.seq++
	m.run = true
	ctx, cancel := context.WithCancel(m.n.sim.ctx)
	m.cancel = cancel
	go m.n.boot(ctx, dev, m.seq)
	return nil
}

func (m *machine) Stop(_ context.Context, _ bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.run {
		m.cancel()
		m.run = false
	}
	return nil
}

func (m *machine) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.run
}

func (m *machine) Events() <-chan vbmc.MachineEvent { return m.events }

// guestReset is the guest rebooting itself: the boot ends and the BMC boots
// the next device, as a real host's reset does.
func (m *machine) guestReset(boot uint64, why string) {
	m.mu.Lock()
	if !m.run || m.seq != boot {
		m.mu.Unlock()
		return
	}
	m.cancel()
	m.run = false
	m.mu.Unlock()
	m.events <- vbmc.MachineEvent{Kind: vbmc.GuestReset, Boot: boot, Reason: why}
}

// boot plays one boot of the machine until it is stopped or resets.
func (n *Node) boot(ctx context.Context, dev vbmc.BootDevice, seq uint64) {
	n.mu.Lock()
	n.boots++
	n.mu.Unlock()
	if dev == vbmc.BootPxe {
		cmd, err := n.pxe(ctx)
		if err == nil && cmd != nil {
			n.mu.Lock()
			n.cureBoots++
			n.mu.Unlock()
			n.runCURE(ctx, seq, cmd)
			return
		}
		if err != nil && ctx.Err() == nil {
			n.log.Warn("PXE boot failed; falling through to the disk", "err", err)
		}
	}
	n.installedOS(ctx)
}

// cmdline is what the sim reads from the iPXE script's kernel line.
type cmdline struct {
	coordinator, token, node string
}

var (
	kernelRE = regexp.MustCompile(`(?m)^kernel (\S+) (.*)$`)
	initrdRE = regexp.MustCompile(`(?m)^initrd (\S+)$`)
)

// pxe fetches the per-MAC iPXE script and, when it says boot, the kernel
// and initrd, as iPXE would. nil, nil means the script said exit (boot the disk).
func (n *Node) pxe(ctx context.Context) (*cmdline, error) {
	var script []byte
	var err error
	for _, base := range n.sim.httpBases(n) {
		if script, err = n.get(ctx, base+"/ipxe/"+n.MAC, nil); err == nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	km := kernelRE.FindStringSubmatch(string(script))
	im := initrdRE.FindStringSubmatch(string(script))
	if km == nil || im == nil {
		return nil, nil // exit script
	}
	for _, u := range []string{km[1], im[1]} {
		if _, err := n.get(ctx, u, io.Discard); err != nil {
			return nil, fmt.Errorf("fetch %s: %w", u, err)
		}
	}
	c := &cmdline{}
	for _, f := range strings.Fields(km[2]) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "cure.coordinator":
			c.coordinator = v
		case "cure.token":
			c.token = v
		case "cure.node":
			c.node = v
		}
	}
	if c.coordinator == "" || c.token == "" {
		return nil, fmt.Errorf("iPXE script without cure.coordinator or cure.token: %q", km[2])
	}
	return c, nil
}

// get fetches u from the node's own address; with w it streams the body
// there, otherwise returns it (small bodies only). Five tries, as iPXE's
// and the runner's fetches make, 404 final.
func (n *Node) get(ctx context.Context, u string, w io.Writer) ([]byte, error) {
	var body []byte
	err := retry.Policy{Base: 200 * time.Millisecond, Max: time.Second, Jitter: retry.None, Attempts: 5}.Do(ctx, func(ctx context.Context, _ int) error {
		var err error
		body, err = n.getOnce(ctx, u, w)
		return err
	})
	return body, err
}

// getOnce is one try of get; a 404 is Permanent.
func (n *Node) getOnce(ctx context.Context, u string, w io.Writer) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, retry.Permanent(err)
	}
	resp, err := n.sim.clientFor(n).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		err := fmt.Errorf("GET %s: %s: %s", u, resp.Status, strings.TrimSpace(string(b)))
		if resp.StatusCode == http.StatusNotFound {
			return nil, retry.Permanent(err)
		}
		return nil, err
	}
	if w != nil {
		_, err = io.Copy(w, resp.Body)
		return nil, err
	}
	return io.ReadAll(io.LimitReader(resp.Body, 1<<20))
}

// runCURE is the runner's life in one boot: dial, Hello, serve the agent
// until the coordinator reboots the node (or the boot is stopped).
func (n *Node) runCURE(ctx context.Context, seq uint64, c *cmdline) {
	dialer := grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(n.IP)}, Timeout: 10 * time.Second}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return n.track(conn), nil
	})
	conn, err := transport.Dial(c.coordinator, n.sim.caFile, dialer)
	if err != nil {
		n.log.Error("dial coordinator", "err", err)
		<-ctx.Done()
		return
	}
	defer conn.Close()
	bootID := randomID()
	var a *agent.Agent
	sess := transport.NewSession(conn, func() *curev1.Hello {
		return &curev1.Hello{Token: c.token, BootId: bootID, SessionSecret: "", Identity: n.identity(), Inventory: n.inventory(),
			State: a.State(), RunnerVersion: "fleet-sim"}
	}, transport.SessionOptions{Log: n.log, BackoffBase: 200 * time.Millisecond, BackoffMax: 3 * time.Second, ConnectTimeout: 10 * time.Second,
		OnAck: n.sim.stats.ack})
	reboot := rebooter{n: n, boot: seq, ctx: ctx}
	a = agent.New(sess, &executor{n: n, boot: seq}, sess, reboot, n.log)
	go sess.Run(ctx)
	_ = a.Run(ctx)
	<-ctx.Done()
}

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (n *Node) identity() *curev1.Identity {
	return &curev1.Identity{BootMac: n.MAC, SystemSerial: n.Serial, NodeId: n.ID}
}

func (n *Node) inventory() *curev1.Inventory {
	n.mu.Lock()
	defer n.mu.Unlock()
	inv := &curev1.Inventory{CpuCount: 2 * 56, MemoryBytes: 2 << 40,
		Nics: []*curev1.NetInterface{{Name: "ens17f0", Mac: n.MAC, PciAddress: "0000:17:00.0", Driver: "mlx5_core", Firmware: n.nicFW, LinkUp: true, SpeedMbps: 400000}},
		Nvme: []*curev1.NvmeController{
			{Name: "nvme0", Model: simNVMeModel, Serial: n.Serial + "-NVME0", Firmware: n.nvmeFW, Namespaces: []string{"nvme0n1"}},
			{Name: "nvme1", Model: simNVMeModel, Serial: n.Serial + "-NVME1", Firmware: n.nvmeFW, Namespaces: []string{"nvme1n1"}},
		},
		Disks: []*curev1.BlockDevice{
			{Name: "nvme0n1", Transport: "nvme", Model: simNVMeModel, Serial: n.Serial + "-NVME0", SizeBytes: 3840 << 30},
			{Name: "nvme1n1", Transport: "nvme", Model: simNVMeModel, Serial: n.Serial + "-NVME1", SizeBytes: 3840 << 30},
		},
	}
	for i := range 8 {
		if i == missingGPU && n.Faults.GPUMissing {
			continue
		}
		inv.Gpus = append(inv.Gpus, &curev1.Gpu{Index: uint32(i), Name: "NVIDIA H100 80GB HBM3", PciAddress: fmt.Sprintf("0000:%02x:00.0", 0x18+i)})
	}
	return inv
}

// track remembers the node's runner connections so a stream cut can sever them.
func (n *Node) track(c net.Conn) net.Conn {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conns == nil {
		n.conns = map[net.Conn]struct{}{}
	}
	n.conns[c] = struct{}{}
	return &trackedConn{Conn: c, n: n}
}

type trackedConn struct {
	net.Conn
	n    *Node
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.n.mu.Lock()
		delete(c.n.conns, c.Conn)
		c.n.mu.Unlock()
	})
	return c.Conn.Close()
}

// cutStreams severs every runner connection of the node (a switch port flap).
func (n *Node) cutStreams() {
	n.mu.Lock()
	conns := make([]net.Conn, 0, len(n.conns))
	for c := range n.conns {
		conns = append(conns, c)
	}
	n.streamCuts++
	n.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

type rebooter struct {
	n    *Node
	boot uint64
	ctx  context.Context
}

// Reboot resets the machine; like the real one it does not return while the
// machine is up, only once this boot is over.
func (r rebooter) Reboot() error {
	r.n.m.guestReset(r.boot, "runner reboot")
	<-r.ctx.Done()
	return r.ctx.Err()
}

// installedOS is a disk boot: the installed OS (if any) calls back once.
func (n *Node) installedOS(ctx context.Context) {
	n.mu.Lock()
	fb := n.firstBoot
	n.mu.Unlock()
	if fb == nil || fb.GetCallbackUrl() == "" {
		<-ctx.Done() // no OS: the machine sits at its firmware's prompt
		return
	}
	if err := retry.Sleep(ctx, n.sim.scaled(n.sim.cfg.Durations.OSBoot)); err != nil {
		return
	}
	parsed, err := url.Parse(fb.GetCallbackUrl())
	if err != nil {
		n.log.Warn("installed OS: bad callback URL", "err", err)
		<-ctx.Done()
		return
	}
	q := parsed.Query()
	q.Set("token", fb.GetCallbackToken())
	parsed.RawQuery = q.Encode()
	// The callback URL names the instance that installed the node; in a
	// fleet of instances it is a VIP in front of them. The sim models the
	// VIP: when that instance is gone, the same path on another.
	candidates := []string{parsed.String()}
	for _, base := range n.sim.httpBases(n) {
		alt := *parsed
		if b, err := url.Parse(base); err == nil && b.Host != parsed.Host {
			alt.Host = b.Host
			candidates = append(candidates, alt.String())
		}
	}
	report := phonehome.Report{InstanceID: fb.GetInstanceId(), Hostname: fb.GetHostname(), BootID: randomID(), Uptime: 30 * time.Second}
	for round := 0; round < 4 && ctx.Err() == nil; round++ {
		for _, u := range candidates {
			err = phonehome.Post(ctx, u, report, phonehome.Options{Tries: 5, MinBackoff: 500 * time.Millisecond, MaxBackoff: 3 * time.Second, Client: n.sim.clientFor(n)}, n.log)
			if err == nil {
				<-ctx.Done()
				return
			}
		}
	}
	if ctx.Err() == nil {
		n.log.Warn("installed OS: callback failed", "err", err)
	}
	<-ctx.Done()
}

const simNVMeModel = "SIM NVMe 3.84TB"

// executor plays the in-band phases with scaled durations and the verdicts
// the real phases emit.
type executor struct {
	n    *Node
	boot uint64
}

func (x *executor) Run(ctx context.Context, phase string, a *curev1.Assignment, emit agent.Emitter) agent.PhaseOutcome {
	switch phase {
	case "nic", "nvme":
		return x.flashInBand(ctx, phase, a, emit)
	case "dpu":
		return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_SKIPPED, Message: "no DPU"}
	case "sed_revert":
		if !x.midPhase(ctx, phase) {
			return phaseFailed("interrupted")
		}
		for i := range 2 {
			emit.Verdict(&curev1.Verdict{Component: fmt.Sprintf("nvme/%d", i), Check: "erase", Status: curev1.VerdictStatus_PASS, Message: "format: user data erased"})
		}
		return phaseOK("2 disks erased", false)
	case "os_install":
		return x.install(ctx, a, emit)
	case "validate":
		return x.validateGPUs(ctx, a, emit)
	}
	return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_SKIPPED, Message: "phase not simulated: " + phase}
}

func phaseOK(msg string, reboot bool) agent.PhaseOutcome {
	return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_OK, Message: msg, RebootRequired: reboot}
}

func phaseFailed(msg string) agent.PhaseOutcome {
	return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_FAILED, Message: msg}
}

// inBandVersion is the version the assignment's manifest wants for an
// in-band component ("" when it names none or does not parse).
func inBandVersion(a *curev1.Assignment, component string) string {
	sku, _ := manifests.ParseSKU(a.GetManifestName(), a.GetManifestYaml())
	if sku == nil {
		return ""
	}
	for _, f := range sku.Spec.Firmware {
		if f.Component == component && f.Via == "in-band" {
			return f.Version
		}
	}
	return ""
}

// midPhase waits half a flash, then strikes the node's transient faults,
// once per node; false when the phase is interrupted.
func (x *executor) midPhase(ctx context.Context, phase string) bool {
	n, sim := x.n, x.n.sim
	d := sim.scaled(sim.cfg.Durations.Flash) / 2
	if err := retry.Sleep(ctx, d); err != nil {
		return false
	}
	if n.Faults.StreamCut && phase == "nvme" && n.once("streamcut") {
		n.cutStreams()
	}
	if n.Faults.RunnerKilled && phase == "sed_revert" && n.once("killed") {
		n.log.Info("fault: node resets by itself mid-phase", "phase", phase)
		n.m.guestReset(x.boot, "fault: reset mid-phase")
		return false
	}
	return true
}

// flashInBand plays the nic or nvme phase: match, drift (outside
// provision), or a flash that an unflashable NIC fails.
func (x *executor) flashInBand(ctx context.Context, phase string, a *curev1.Assignment, emit agent.Emitter) agent.PhaseOutcome {
	n, sim := x.n, x.n.sim
	component, cur := nicComponent, &n.nicFW
	if phase == "nvme" {
		component, cur = "nvme/0", &n.nvmeFW
	}
	desired := inBandVersion(a, phase)
	n.mu.Lock()
	have := *cur
	n.mu.Unlock()
	if desired == "" {
		return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_SKIPPED, Message: "no " + phase + " firmware in the manifest"}
	}
	if have == desired {
		emit.Verdict(&curev1.Verdict{Component: component, Check: "firmware", Status: curev1.VerdictStatus_MATCH, Observed: have, Expected: desired})
		return phaseOK("1 matched", false)
	}
	if a.GetMode() != curev1.Mode_MODE_PROVISION {
		emit.Verdict(&curev1.Verdict{Component: component, Check: "firmware", Status: curev1.VerdictStatus_DRIFT, Observed: have, Expected: desired})
		return phaseOK("1 drifted (not flashed in this mode)", false)
	}
	if !x.midPhase(ctx, phase) {
		return phaseFailed("interrupted")
	}
	if phase == "nic" && n.Faults.NICUnflashable {
		emit.Verdict(&curev1.Verdict{Component: component, Check: "firmware", Status: curev1.VerdictStatus_FAIL, Observed: have, Expected: desired,
			Message: "flash failed: image rejected by the device (PSID mismatch)"})
		return phaseFailed("flash of " + component + " failed")
	}
	if err := retry.Sleep(ctx, sim.scaled(sim.cfg.Durations.Flash)/2); err != nil {
		return phaseFailed("interrupted")
	}
	n.mu.Lock()
	*cur = desired
	n.flashes[component]++
	n.mu.Unlock()
	sim.stats.flash()
	emit.Metric("flash_seconds", sim.scaled(sim.cfg.Durations.Flash).Seconds(), "s", map[string]string{"component": component})
	emit.Verdict(&curev1.Verdict{Component: component, Check: "firmware", Status: curev1.VerdictStatus_PASS, Observed: desired, Expected: desired, Message: "UPDATED"})
	// A NIC's new firmware activates at the next reboot.
	return phaseOK("updated "+component, phase == "nic")
}

// validateGPUs plays the validate phase: eight GPUs present, less the
// missing one of a GPU-missing node. Like the real runner's suite it sends
// heartbeats (Progress) at once and every period the assignment asks for:
// the coordinator counts a validate runner silent for its reconnect budget
// as lost, whatever its stream, so a simulated suite without them lost its
// runner on every look past that budget until the run's disconnect budget
// ran out, before naming the part.
func (x *executor) validateGPUs(ctx context.Context, a *curev1.Assignment, emit agent.Emitter) agent.PhaseOutcome {
	n, sim := x.n, x.n.sim
	if err := sleepBeating(ctx, sim.scaled(sim.cfg.Durations.Validate), agent.HeartbeatPeriod(a.GetHeartbeatMs()), emit); err != nil {
		return phaseFailed("interrupted")
	}
	failed := 0
	for i := range 8 {
		v := &curev1.Verdict{Component: fmt.Sprintf("gpu/%d", i), Check: "presence", Status: curev1.VerdictStatus_PASS, Observed: "present", Expected: "present"}
		if i == missingGPU && n.Faults.GPUMissing {
			v.Status, v.Observed, v.Message = curev1.VerdictStatus_FAIL, "absent", "GPU not enumerated on the PCIe bus"
			failed++
		} else {
			emit.Metric("gpu_temperature", 41+float64(i), "C", map[string]string{"gpu": fmt.Sprint(i)})
		}
		emit.Verdict(v)
	}
	if failed > 0 {
		return phaseFailed(fmt.Sprintf("%d gpu checks failed", failed))
	}
	return phaseOK("8 gpus pass", false)
}

// sleepBeating waits d (the simulated suite's checks), sending a heartbeat
// at once and every period meanwhile; an error when ctx ends first.
func sleepBeating(ctx context.Context, d, period time.Duration, emit agent.Emitter) error {
	start := time.Now()
	beat := func() {
		elapsed := time.Since(start)
		emit.Progress(&curev1.Progress{Suite: suiteName, Stage: "gpus", ElapsedMs: elapsed.Milliseconds(), PlannedMs: d.Milliseconds(),
			RemainingMs: max(d-elapsed, 0).Milliseconds()})
	}
	beat()
	done := time.NewTimer(d)
	defer done.Stop()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done.C:
			return nil
		case <-t.C:
			beat()
		}
	}
}

// install downloads the OS image for real (throttled), verifies it and
// "writes" it; the first boot seed goes to the node's installed OS.
func (x *executor) install(ctx context.Context, a *curev1.Assignment, emit agent.Emitter) agent.PhaseOutcome {
	n, sim := x.n, x.n.sim
	fail := func(msg string) agent.PhaseOutcome {
		return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_FAILED, Message: msg}
	}
	sku, err := manifests.ParseSKU(a.GetManifestName(), a.GetManifestYaml())
	if err != nil || sku.Spec.OS == nil {
		return fail(fmt.Sprintf("manifest: %v", err))
	}
	img := sku.Spec.OS.Image
	u := strings.TrimSuffix(a.GetArtifactBaseUrl(), "/") + "/sha256/" + img.SHA256
	h := sha256.New()
	var got int64
	start := time.Now()
	for attempt := 0; got < img.Size; attempt++ {
		if attempt > 3 {
			return fail(fmt.Sprintf("download of %s failed after %d attempts at %d of %d bytes", u, attempt, got, img.Size))
		}
		cut := int64(-1)
		if n.Faults.DownloadCut && n.once("download") {
			cut = img.Size / 2
		}
		err := x.download(ctx, u, got, cut, func(p []byte) {
			h.Write(p)
			got += int64(len(p))
		})
		if ctx.Err() != nil {
			return fail("interrupted")
		}
		if err != nil {
			emit.Log("WARN", "download interrupted; resuming", map[string]string{"at": fmt.Sprint(got), "err": err.Error()})
		}
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != img.SHA256 {
		return fail("image sha256 " + sum + " does not match the manifest")
	}
	el := time.Since(start)
	emit.Metric("install_throughput", float64(img.Size)/el.Seconds()/1e6, "MB/s", nil)
	if err := retry.Sleep(ctx, sim.scaled(sim.cfg.Durations.Write)); err != nil {
		return fail("interrupted")
	}
	if n.Faults.NVMeMediaErrors {
		emit.Verdict(&curev1.Verdict{Component: "nvme/1", Check: "install", Status: curev1.VerdictStatus_FAIL,
			Message: "read-back: unrecovered read error at LBA 81920 (media error); image not verified"})
		return fail("read-back of nvme/1 failed: media errors")
	}
	emit.Verdict(&curev1.Verdict{Component: "nvme/1", Check: "install", Status: curev1.VerdictStatus_PASS, Observed: "sha256:" + img.SHA256[:12], Message: "written and read back"})
	n.mu.Lock()
	n.firstBoot = a.GetFirstBoot()
	n.mu.Unlock()
	return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_OK, Message: fmt.Sprintf("%d bytes installed", img.Size)}
}

// download reads u from offset with a Range request at the simulated NIC
// rate, stopping (as a cut link would) after cut bytes when cut >= 0.
func (x *executor) download(ctx context.Context, u string, offset, cut int64, sink func([]byte)) error {
	n, sim := x.n, x.n.sim
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	if offset > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", offset))
	}
	resp, err := sim.clientFor(n).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if offset > 0 && resp.StatusCode != http.StatusPartialContent {
		return fmt.Errorf("range request: %s", resp.Status)
	}
	if offset == 0 && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET: %s", resp.Status)
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	buf := make([]byte, 64<<10)
	var read int64
	rate := sim.cfg.DownloadBytesPerSec
	t0 := time.Now()
	for {
		k, err := br.Read(buf)
		if k > 0 {
			sink(buf[:k])
			read += int64(k)
			if cut >= 0 && offset+read >= cut {
				return errors.New("connection reset (injected)")
			}
			if rate > 0 {
				if ahead := time.Duration(float64(read)/float64(rate)*float64(time.Second)) - time.Since(t0); ahead > 0 {
					if err := retry.Sleep(ctx, ahead); err != nil {
						return err
					}
				}
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
