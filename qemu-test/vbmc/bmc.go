// Package vbmc is a Redfish virtual BMC for one node: it serves the DMTF
// public-rackmount1 mockup with live power, boot-override, session and ETag
// state on top, and drives a Machine (QEMU, or a fake in tests) the way a
// real BMC drives its host. Out of band it keeps a firmware inventory that
// UpdateService changes through Tasks (SimpleUpdate really downloads the
// image; the package format is in firmware.go), BMC firmware that activates
// on a Manager reset (the BMC away meanwhile), BIOS/HGX firmware and BIOS
// settings staged until the next host boot, and fault knobs
// (AcceptThenTimeout, CutTCP, FailNextTask, SetSlowReturn).
package vbmc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Config describes one virtual BMC and the node behind it.
type Config struct {
	Name     string // node name, for logs
	Username string // default "admin"
	Password string // default "password"
	// SystemID replaces the mockup's system Id in every URL (default: the
	// mockup's own, 437XR1138R2).
	SystemID     string
	Serial       string
	UUID         string
	MAC          string // first NIC, reported in EthernetInterfaces
	Manufacturer string // default "CURE" (matches the QEMU SMBIOS)
	Model        string // default "QEMU-GPU-Node"

	// Vendor shapes.
	NoBootMode bool // no BootSourceOverrideMode at all (PATCHing it is a 400)
	// BootModes are the BootSourceOverrideMode allowable values, the first
	// the mode at power-up (default ["Legacy"]: QEMU boots SeaBIOS). A
	// machine implementing ModeSetter boots each time in the mode set
	// (QEMUMachine: SeaBIOS for Legacy, OVMF for UEFI).
	BootModes []string
	// UefiHTTP offers the UefiHttp boot target and the HttpBootUri
	// property (Redfish ComputerSystem 1.9+): the machine (an HTTPBooter)
	// loads that URI over UEFI HTTP boot.
	UefiHTTP       bool
	NoContinuous   bool // Lenovo-style: Enabled allows only Disabled and Once
	RequireIfMatch bool // PATCH without If-Match is refused with 428
	// ResetTypes narrows the advertised ResetType allowable values; default:
	// the mockup's values this BMC implements.
	ResetTypes []string

	// Vendor quirks the profiles (profiles.go) switch on; each mirrors a
	// published capture.
	NestedAllowableValues bool   // TransferProtocol@Redfish.AllowableValues as [["HTTP"]]
	RunTogetherResets     bool   // ResetType values "GracefulShutdown"+"GracefulRestart" as one string
	NoBiosSettings        bool   // Bios without @Redfish.Settings: PATCH the Bios resource itself
	InventoryIDs          string // member Ids: "" (spec Ids), "versioned" (Dell), "positions" ("1", "2", ...)

	// MaxSessions refuses logins beyond this many open sessions (503
	// SessionLimitExceeded), as real BMCs do; 0: no limit.
	MaxSessions int

	// Out-of-band firmware (see firmware.go for the package format).
	Firmware          []FirmwareSpec // default DefaultFirmware()
	TransferProtocols []string       // SimpleUpdate allowable values, subset of HTTP, HTTPS, SCP (default HTTP, HTTPS)
	NoMultipart       bool           // no MultipartHttpPushUri
	TaskDuration      time.Duration  // an update task runs this long (default 2s)
	TaskShape         TaskShape      // how an accepted update answers (default: task monitor)
	// TaskGoneAfterCompletion: completed tasks and their monitors 404 at
	// once, as on BMCs that purge them.
	TaskGoneAfterCompletion bool
	FetchTimeout            time.Duration // SimpleUpdate image download (default 60s)
	FetchClient             *http.Client  // for image downloads (default: plain, no proxy)
	// ResetDuration is how long #Manager.Reset keeps the BMC away (default 3s).
	ResetDuration time.Duration
	// ResetRefuse: during a BMC reset connections are refused (needs
	// Listen) rather than answered with 503.
	ResetRefuse bool

	// Health and telemetry (sensors.go, eventlog.go).
	SensorAPI string // SensorAPIBoth (default), SensorAPILegacy or SensorAPISensors
	// NoExpand: the service root advertises no $expand and the BMC ignores
	// it (members are links only, as on BMCs without ExpandQuery).
	NoExpand bool
	// ThermalTau is how fast temperatures and fans follow the load (the
	// thermal mass; default 15s).
	ThermalTau time.Duration
	EventLog   LogShape // the live event log (default: the mockup's Log1, SEL)

	Logger *slog.Logger
	Now    func() time.Time
}

// BootRecord is one boot of the machine, as the BMC chose it.
type BootRecord struct {
	Time     time.Time
	Device   BootDevice // "Pxe" or "Hdd"
	Override string     // BootSourceOverrideEnabled that chose it: Once, Continuous, Disabled
	Reason   string     // what caused the boot: power-on, ForceRestart, guest-reset...
	Mode     string     `json:",omitempty"` // BootSourceOverrideMode in force (firmware the machine booted)
}

// ModeSetter is a Machine whose firmware the BMC chooses per boot: the BMC
// calls SetBootMode with the BootSourceOverrideMode in force before every
// Start. An error (a mode the machine cannot boot) fails the power-on.
type ModeSetter interface {
	SetBootMode(mode string) error
}

// OverrideChange is one accepted Boot PATCH.
type OverrideChange struct {
	Time    time.Time
	Target  string
	Enabled string
	Mode    string `json:",omitempty"`
}

// Power states as Redfish spells them.
const (
	PowerOn  = "On"
	PowerOff = "Off"
)

// Boot override state values.
const (
	enabledDisabled   = "Disabled"
	enabledOnce       = "Once"
	enabledContinuous = "Continuous"
)

// implementedResets are the ResetType values this BMC really performs.
var implementedResets = []string{"On", "ForceOn", "ForceOff", "GracefulShutdown",
	"GracefulRestart", "ForceRestart", "PowerCycle", "PushPowerButton"}

// BMC is one virtual BMC. Create with New, serve Handler, Close when done.
type BMC struct {
	cfg  Config
	m    Machine
	log  *slog.Logger
	tree map[string]resource
	sys  map[string]any // mockup system body, the static part

	// op serialises power operations (held across Machine calls); mu guards
	// the state below and is never held across a Machine call.
	op chan struct{}
	mu sync.Mutex

	power   string
	bootSeq uint64 // successful Machine.Start calls, to match events
	target  string
	enabled string
	mode    string
	// httpBootURI is Boot.HttpBootUri (Config.UefiHTTP).
	httpBootURI string
	gen         uint64 // bumps on every change of the system resource (ETag)
	lastReset   time.Time
	history     []BootRecord
	overrides   []OverrideChange
	sessions    map[string]*session // by token

	// Out-of-band state, guarded by mu.
	fw            []*fwState
	fetcher       *http.Client
	tasks         []*task
	taskSeq       int
	resetting     bool
	bmcResets     int
	reach         func(up bool)
	biosCur       map[string]any
	biosPending   map[string]any
	biosGen       uint64
	settingsGen   uint64
	biosApplied   int
	acceptTimeout time.Duration
	// acceptTimeoutUpdate: like acceptTimeout, for the next UpdateService POST only.
	acceptTimeoutUpdate time.Duration
	cutTCP              bool
	failTask            *string
	slowReturn          time.Duration

	// Sensors, parts and the event log, guarded by mu.
	sens     sensorState
	events   []LogEntry
	eventSeq int

	failAuth atomic.Bool
	hangNext atomic.Bool
	fail503  atomic.Int64
	latency  atomic.Int64

	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// New builds a BMC for m. The machine is assumed off. New fails only if the
// embedded mockup is unusable.
func New(cfg Config, m Machine) (*BMC, error) {
	cfg.applyDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("vbmc %s: %w", cfg.Name, err)
	}
	tree, err := loadTree(cfg.SystemID, cfg.MAC)
	if err != nil {
		return nil, fmt.Errorf("vbmc %s: %w", cfg.Name, err)
	}
	if err := shapeTree(tree, cfg); err != nil {
		return nil, fmt.Errorf("vbmc %s: %w", cfg.Name, err)
	}
	sys, err := mockupSystem(tree, cfg.SystemID)
	if err != nil {
		return nil, fmt.Errorf("vbmc %s: %w", cfg.Name, err)
	}
	b := &BMC{
		cfg:      cfg,
		m:        m,
		log:      cfg.Logger.With("bmc", cfg.Name),
		tree:     tree,
		sys:      sys,
		op:       make(chan struct{}, 1),
		power:    PowerOff,
		target:   "None",
		enabled:  enabledDisabled,
		sessions: make(map[string]*session),
		done:     make(chan struct{}),
		gen:      1,
	}
	if !cfg.NoBootMode {
		b.mode = b.allowedModes()[0] // QEMU boots SeaBIOS unless configured with OVMF
	}
	serialBase := cfg.Serial
	if serialBase == "" {
		serialBase = cfg.SystemID
	}
	b.sens.psus, b.sens.fans = newParts(serialBase)
	for _, f := range cfg.Firmware {
		if f.SoftwareID == "" {
			f.SoftwareID = softwareID(f.ID)
		}
		if f.Name == "" {
			f.Name = f.ID + " firmware"
		}
		b.fw = append(b.fw, &fwState{spec: f, active: f.Version, pos: len(b.fw) + 1})
	}
	b.fetcher = cfg.FetchClient
	if b.fetcher == nil {
		b.fetcher = &http.Client{Transport: &http.Transport{Proxy: nil}}
	}
	if err := b.loadBios(); err != nil {
		return nil, fmt.Errorf("vbmc %s: %w", cfg.Name, err)
	}
	b.wg.Add(1)
	go b.watch()
	return b, nil
}

// applyDefaults fills the fields left zero.
func (cfg *Config) applyDefaults() {
	if cfg.Username == "" {
		cfg.Username = "admin"
	}
	if cfg.Password == "" {
		cfg.Password = "password"
	}
	if cfg.SystemID == "" {
		cfg.SystemID = mockupSystemID
	}
	if cfg.Manufacturer == "" {
		cfg.Manufacturer = "CURE"
	}
	if cfg.Model == "" {
		cfg.Model = "QEMU-GPU-Node"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Firmware == nil {
		cfg.Firmware = DefaultFirmware()
	}
	if cfg.TaskDuration <= 0 {
		cfg.TaskDuration = 2 * time.Second
	}
	if cfg.FetchTimeout <= 0 {
		cfg.FetchTimeout = 60 * time.Second
	}
	if cfg.ResetDuration <= 0 {
		cfg.ResetDuration = 3 * time.Second
	}
	if cfg.ThermalTau <= 0 {
		cfg.ThermalTau = 15 * time.Second
	}
	cfg.EventLog = cfg.EventLog.withDefaults()
}

// validate refuses a configuration this BMC cannot serve: a firmware list,
// protocol, boot mode, reset type, sensor API or event log shape it does
// not implement.
func (cfg *Config) validate() error {
	if err := validateFirmware(cfg.Firmware); err != nil {
		return err
	}
	for _, p := range cfg.TransferProtocols {
		if !slices.Contains(implementedProtocols, p) && p != "SCP" { // SCP: advertised only (a vendor shape); fetching fails the task
			return fmt.Errorf("TransferProtocols: %q is not implemented (have %v)", p, implementedProtocols)
		}
	}
	for _, m := range cfg.BootModes {
		if m != "Legacy" && m != "UEFI" {
			return fmt.Errorf("BootModes: %q: want Legacy or UEFI", m)
		}
	}
	for _, rt := range cfg.ResetTypes {
		if !slices.Contains(implementedResets, rt) {
			return fmt.Errorf("ResetTypes: %q is not implemented (have %v)", rt, implementedResets)
		}
	}
	switch cfg.SensorAPI {
	case SensorAPIBoth, SensorAPILegacy, SensorAPISensors:
	default:
		return fmt.Errorf("SensorAPI %q: want %q, %q or %q", cfg.SensorAPI, SensorAPIBoth, SensorAPILegacy, SensorAPISensors)
	}
	return cfg.EventLog.validate()
}

// Close stops the event loop, releases hung requests and powers the machine
// off (force).
func (b *BMC) Close(ctx context.Context) error {
	var err error
	b.closeOnce.Do(func() {
		close(b.done)
		b.wg.Wait()
		if b.m.Running() {
			err = b.m.Stop(ctx, true)
		}
		b.mu.Lock()
		b.power = PowerOff
		b.mu.Unlock()
	})
	return err
}

// PowerState is "On" or "Off".
func (b *BMC) PowerState() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.power
}

// History lists every boot so far, oldest first.
func (b *BMC) History() []BootRecord {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.history)
}

// Overrides lists every accepted boot override PATCH, oldest first.
func (b *BMC) Overrides() []OverrideChange {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.overrides)
}

// BootOverride returns the current BootSourceOverrideTarget and Enabled.
func (b *BMC) BootOverride() (target, enabled string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.target, b.enabled
}

// SessionCount is the number of open Redfish sessions.
func (b *BMC) SessionCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.sessions)
}

// ExpireSessions drops every session, as a BMC reset does: clients holding a
// token get 401 on their next call.
func (b *BMC) ExpireSessions() {
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.sessions)
}

// SetFailAuth makes every login and every Basic-auth request fail with 401.
func (b *BMC) SetFailAuth(fail bool) { b.failAuth.Store(fail) }

// HangNextRequest makes the next Redfish request hang until the client gives
// up (or the BMC closes): a BMC that accepted the connection and went silent.
func (b *BMC) HangNextRequest() { b.hangNext.Store(true) }

// SetLatency delays every Redfish request by d.
func (b *BMC) SetLatency(d time.Duration) { b.latency.Store(int64(d)) }

// ETag is the current ETag of the system resource.
func (b *BMC) ETag() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.etagLocked()
}

func (b *BMC) etagLocked() string { return fmt.Sprintf(`"sys-%d"`, b.gen) }

// allowedEnabled lists BootSourceOverrideEnabled values for this vendor shape.
func (b *BMC) allowedEnabled() []string {
	if b.cfg.NoContinuous {
		return []string{enabledDisabled, enabledOnce}
	}
	return []string{enabledDisabled, enabledOnce, enabledContinuous}
}

// allowedTargets are the targets the machine can really boot (plus None).
func (b *BMC) allowedTargets() []string {
	if b.cfg.UefiHTTP {
		return []string{"None", string(BootPxe), string(BootHdd), string(BootUefiHttp)}
	}
	return []string{"None", string(BootPxe), string(BootHdd)}
}

// HTTPBootURI is the current Boot.HttpBootUri.
func (b *BMC) HTTPBootURI() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.httpBootURI
}

func (b *BMC) allowedModes() []string {
	if b.cfg.NoBootMode {
		return nil
	}
	if len(b.cfg.BootModes) > 0 {
		return slices.Clone(b.cfg.BootModes)
	}
	return []string{"Legacy"}
}

// BootMode is the current BootSourceOverrideMode ("" with NoBootMode).
func (b *BMC) BootMode() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mode
}

// allowedResets is the mockup's ResetType list narrowed to what is
// implemented (or to Config.ResetTypes).
// servedResets is allowedResets as the vendor writes it: with
// RunTogetherResets, GracefulShutdown and GracefulRestart as one string.
func (b *BMC) servedResets() []string {
	out := b.allowedResets()
	if !b.cfg.RunTogetherResets {
		return out
	}
	i, j := slices.Index(out, "GracefulShutdown"), slices.Index(out, "GracefulRestart")
	if i < 0 || j < 0 {
		return out
	}
	out[i] = "GracefulShutdownGracefulRestart"
	return slices.Delete(out, j, j+1)
}

func (b *BMC) allowedResets() []string {
	if len(b.cfg.ResetTypes) > 0 {
		return slices.Clone(b.cfg.ResetTypes)
	}
	var out []string
	if acts, ok := b.sys["Actions"].(map[string]any); ok {
		if r, ok := acts["#ComputerSystem.Reset"].(map[string]any); ok {
			if vals, ok := r["ResetType@Redfish.AllowableValues"].([]any); ok {
				for _, v := range vals {
					if s, ok := v.(string); ok && slices.Contains(implementedResets, s) {
						out = append(out, s)
					}
				}
			}
		}
	}
	return out
}

// acquire takes the power-operation lock, giving up with ctx.
func (b *BMC) acquire(ctx context.Context) error {
	select {
	case b.op <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("another power operation is in progress: %w", ctx.Err())
	case <-b.done:
		return errors.New("bmc is closing")
	}
}

func (b *BMC) release() { <-b.op }

// nextBootLocked picks the device for the next boot and consumes a Once
// override, as a real BMC does at boot time. It returns what to restore if
// the boot fails to start.
func (b *BMC) nextBootLocked() (dev BootDevice, override string, restore func()) {
	restore = func() {}
	if b.enabled != enabledDisabled && (b.target == string(BootPxe) || b.target == string(BootHdd) || b.target == string(BootUefiHttp)) {
		dev, override = BootDevice(b.target), b.enabled
		if b.enabled == enabledOnce {
			b.enabled = enabledDisabled
			b.gen++
			restore = func() { b.enabled = enabledOnce; b.gen++ }
		}
		return dev, override, restore
	}
	// Disabled: the default boot order, disk first.
	return BootHdd, enabledDisabled, restore
}

// bootLocked starts the machine; the caller holds op.
func (b *BMC) boot(ctx context.Context, reason string) error {
	b.mu.Lock()
	dev, override, restore := b.nextBootLocked()
	mode, uri := b.mode, b.httpBootURI
	b.mu.Unlock()
	err := error(nil)
	if ms, ok := b.m.(ModeSetter); ok && mode != "" {
		err = ms.SetBootMode(mode)
	}
	if err == nil && dev == BootUefiHttp {
		if hb, ok := b.m.(HTTPBooter); ok {
			err = hb.SetHTTPBootURI(uri)
		} else {
			err = fmt.Errorf("the machine cannot boot over UEFI HTTP")
		}
	}
	if err == nil {
		err = b.m.Start(ctx, dev)
	}
	if err != nil {
		b.mu.Lock()
		restore()
		b.power = PowerOff
		b.gen++
		b.mu.Unlock()
		return fmt.Errorf("boot %s in mode %q (%s): %w", dev, mode, reason, err)
	}
	now := b.cfg.Now()
	b.mu.Lock()
	// The host came up: staged BIOS/HGX firmware and BIOS settings take
	// effect at this POST.
	b.activateLocked(KindBIOS, KindHGX)
	b.applyBiosLocked()
	b.bootSeq++
	b.power = PowerOn
	b.lastReset = now
	b.gen++
	b.history = append(b.history, BootRecord{Time: now, Device: dev, Override: override, Reason: reason, Mode: mode})
	b.logLocked(Event{Created: now, Severity: "OK", Message: fmt.Sprintf("The host powered on (%s).", reason), MessageID: MsgHostPoweredOn,
		MessageArgs: []string{reason}, SensorType: "System ACPI Power State", EntryCode: "S0/G0: working"})
	b.mu.Unlock()
	b.log.Info("boot", "device", dev, "override", override, "mode", mode, "reason", reason)
	return nil
}

func (b *BMC) setOff() {
	b.mu.Lock()
	if b.power != PowerOff {
		b.power = PowerOff
		b.gen++
		b.logLocked(Event{Severity: "OK", Message: "The host powered off.", MessageID: MsgHostPoweredOff,
			SensorType: "System ACPI Power State", EntryCode: "S5/G2: soft-off"})
	}
	b.mu.Unlock()
}

func (b *BMC) stop(ctx context.Context, force bool) error {
	if err := b.m.Stop(ctx, force); err != nil {
		return fmt.Errorf("power off (force=%v): %w", force, err)
	}
	b.setOff()
	return nil
}

// errBadReset marks a ResetType the BMC refuses (400, not 500).
var errBadReset = errors.New("reset type not allowed")

// reset performs a ComputerSystem.Reset. Graceful operations return once
// started and finish in the background, as on a real BMC.
func (b *BMC) reset(ctx context.Context, resetType string) error {
	if !slices.Contains(b.allowedResets(), resetType) {
		return fmt.Errorf("%w: %q (allowable: %v)", errBadReset, resetType, b.allowedResets())
	}
	if resetType == "PushPowerButton" {
		if b.PowerState() == PowerOn {
			resetType = "GracefulShutdown"
		} else {
			resetType = "On"
		}
	}
	if err := b.acquire(ctx); err != nil {
		return err
	}
	b.log.Info("reset", "type", resetType, "power", b.PowerState())
	b.mu.Lock()
	b.logLocked(Event{Severity: "OK", Message: fmt.Sprintf("Reset of the host requested (ResetType %s).", resetType), MessageID: MsgHostReset,
		MessageArgs: []string{resetType}, SensorType: "System Event", EntryCode: "Assert"})
	b.mu.Unlock()
	switch resetType {
	case "GracefulShutdown", "GracefulRestart":
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer b.release()
			// Detached from the request: the shutdown outlives it.
			bg, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			if err := b.stop(bg, false); err != nil {
				b.log.Error("graceful power off failed", "err", err)
				return
			}
			if resetType == "GracefulRestart" {
				if err := b.boot(bg, resetType); err != nil {
					b.log.Error("restart failed", "err", err)
				}
			}
		}()
		return nil
	}
	defer b.release()
	switch resetType {
	case "On", "ForceOn":
		if b.PowerState() == PowerOn {
			return nil
		}
		return b.boot(ctx, resetType)
	case "ForceOff":
		return b.stop(ctx, true)
	case "ForceRestart", "PowerCycle":
		if err := b.stop(ctx, true); err != nil {
			return err
		}
		return b.boot(ctx, resetType)
	}
	return fmt.Errorf("%w: %q is not implemented", errBadReset, resetType)
}

// watch reacts to what the guest does, like a BMC watching its host.
func (b *BMC) watch() {
	defer b.wg.Done()
	for {
		select {
		case <-b.done:
			return
		case ev := <-b.m.Events():
			b.handle(ev)
		}
	}
}

func (b *BMC) handle(ev MachineEvent) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := b.acquire(ctx); err != nil {
		b.log.Error("machine event dropped", "event", ev.Kind, "err", err)
		return
	}
	defer b.release()
	b.mu.Lock()
	current := ev.Boot == b.bootSeq
	b.mu.Unlock()
	if !current {
		b.log.Info("stale machine event ignored", "event", ev.Kind, "boot", ev.Boot)
		return
	}
	b.log.Info("machine event", "event", ev.Kind, "reason", ev.Reason, "err", ev.Err)
	switch ev.Kind {
	case GuestReset:
		b.setOff()
		if err := b.boot(ctx, ev.Reason); err != nil {
			b.log.Error("reboot after guest reset failed", "err", err)
		}
	case GuestPoweroff:
		b.setOff()
	case Exited:
		b.setOff()
		if ev.Err != nil {
			b.log.Error("machine exited", "err", ev.Err)
			b.mu.Lock()
			b.logLocked(Event{Severity: "Critical", Message: fmt.Sprintf("The host stopped unexpectedly: %v.", ev.Err), MessageID: "VBMC.1.0.HostStopped",
				SensorType: "System Event", EntryCode: "Assert"})
			b.mu.Unlock()
		}
	}
}
