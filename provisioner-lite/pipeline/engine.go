// Package pipeline runs each node's phase machine: one goroutine per active
// run, every step recorded in the store before and after it happens, so a
// coordinator restart resumes each run from the phase it reached.
package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/bootgate"
	"github.com/cure-oss/cure/provisioner-lite/catalog"
	"github.com/cure-oss/cure/provisioner-lite/metrics"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// BMC is the slice of the Redfish driver the pipeline uses.
type BMC interface {
	PowerState(ctx context.Context) (string, error)
	PowerOn(ctx context.Context) error
	PowerOff(ctx context.Context, force bool) error
	Reset(ctx context.Context, resetType string) error
	SetBootOverride(ctx context.Context, target redfish.BootTarget, once bool) error
	FirmwareInventory(ctx context.Context) ([]redfish.FirmwareItem, error)
	UpdateService(ctx context.Context) (*redfish.UpdateCapabilities, error)
	SimpleUpdate(ctx context.Context, imageURI string, targets []string, protocol string) (*redfish.Job, error)
	MultipartPush(ctx context.Context, r io.Reader, size int64, targets []string) (*redfish.Job, error)
	RecoverJob(ctx context.Context, ue *redfish.UnknownOutcomeError) (*redfish.Job, error)
	KnownTasks(ctx context.Context) ([]string, bool)
	WaitTask(ctx context.Context, job *redfish.Job, poll time.Duration) (*redfish.TaskResult, error)
	ResetManager(ctx context.Context, resetType string) error
	WaitBMC(ctx context.Context, budget time.Duration) error
	BiosAttributes(ctx context.Context) (map[string]any, error)
	SetBiosAttributes(ctx context.Context, attrs map[string]any) error
	Close(ctx context.Context) error
}

// Timeouts bound every wait of the pipeline.
type Timeouts struct {
	BMCCall      time.Duration // one Redfish call
	WaitForCURE  time.Duration // PXE boot to runner registered
	RunnerPhase  time.Duration // one in-band phase other than validate (whose deadline is its suite's planned duration plus grace)
	Reconnect    time.Duration // runner gone before it counts as a disconnect
	ShutdownWait time.Duration // runner asked to reboot, before a BMC reset
	HostOS       time.Duration // reboot to the installed OS calling back
	BMCReset     time.Duration // BMC reset until it answers again
	BMCTask      time.Duration // a firmware update task, submission to its end
	TaskPoll     time.Duration // Redfish task polling period
	// BMCPoll is the BMC sensor polling period of a validate phase whose
	// suite sets no stage bmcInterval (default manifests.DefaultBMCInterval).
	BMCPoll time.Duration
	// RetryBase is the first delay before a failed phase is tried again;
	// it doubles per attempt up to RetryMax, with full jitter, so a rack
	// whose switch flapped does not retry in lockstep.
	RetryBase, RetryMax time.Duration
}

// Budgets bound retries. Phase failures and disconnects are counted apart so
// a flaky link does not use up the retries meant for real failures.
type Budgets struct {
	PhaseAttempts int // attempts per phase
	Disconnects   int // per run
}

// Config wires the engine.
type Config struct {
	Store      *store.Store
	Hub        *sessions.Hub
	Log        *slog.Logger
	ConnectBMC func(ctx context.Context, n store.Node) (BMC, error)
	Manifests  *catalog.Catalog
	// ArtifactDir is the content-addressed store the boot server serves.
	ArtifactDir string
	// BaseURL is the HTTP server as nodes reach it (artifacts, callbacks).
	BaseURL string
	// BMCBaseURL is the HTTP server as BMCs reach it (their management
	// network); empty means BaseURL.
	BMCBaseURL string
	// RunnerAddr is the gRPC endpoint as nodes reach it (host:port).
	RunnerAddr string
	Timeouts   Timeouts
	Budgets    Budgets
	// Audit records security events (refused callbacks, token floods).
	Audit *audit.Recorder
	// TokensPerWindow bounds the boot tokens one boot window may mint (an
	// iPXE that fails to fetch the kernel retries the script), and
	// TokensPerNode those of one node in TokenPeriod, across windows.
	TokensPerWindow int
	TokensPerNode   int
	TokenPeriod     time.Duration
	// ClaimSettle is how long after the coordinator opened a boot window
	// (armed PXE, powered the node) a boot that has not passed
	// attestation waits before it is given an assignment (PSIDs, host
	// token): the real node asks for its boot identity within its
	// power-on time, so a second claimant shows up before anything
	// leaks (docs/SECURITY.md). Default 2m; set it above the slowest
	// server's power-on-to-iPXE time.
	ClaimSettle time.Duration
	// BootIPUnbound (--bind-boot-ip=false): a boot's address is not its
	// identity, so a request from a second address is no second claimant
	// and the race for a boot identity is not defended.
	BootIPUnbound bool
	// Enlist answers network boots of MACs in no node's inventory
	// (--enlist, provisioner-lite/enlist); nil: they are refused.
	Enlist func(ctx context.Context, mac, peer string) (bootgate.Decision, error)
	// MaxRuns bounds the runs this instance drives at once; Start beyond it
	// fails with a CapacityError at once instead of queueing (another
	// instance, or a later retry, takes the node).
	MaxRuns int
	// NetBoot is the boot override that brings a node into CURE:
	// redfish.BootPxe (default) or redfish.BootUefiHttp (the driver falls
	// back to Pxe on BMCs that do not offer it).
	NetBoot redfish.BootTarget
	// Metrics, if set, hears of runs, phases, retries and Redfish calls.
	Metrics *metrics.Metrics
	// Notify, if set, is told of every run that ends (webhooks). It must
	// not block: it runs on the run's goroutine.
	Notify func(RunNotice)
	// OnFleetRejudged, if set, hears of a finished run judged again
	// against its SKU's fleet band once the band had its minimum of nodes
	// (a day-0 batch's first nodes, or a judgement that had failed):
	// marginal says it lies outside the band, reason says why. It is
	// called once per rejudge, by the coordinator instance whose write won
	// (fleet.go), and must not block long.
	OnFleetRejudged func(ctx context.Context, nodeID, runID string, marginal bool, reason string)
	// FleetSweep, if positive, is how often the engine judges again every
	// pending fleet judgement (SweepFleet): a judgement that failed, or a
	// day-0 run whose band filled without a later judgement of its SKU.
	// The loop ends with the engine's context (Wait waits for it).
	FleetSweep time.Duration
	// ToolBundle, if set, is served from ArtifactDir to the suites that
	// run its programs.
	ToolBundle *ToolBundle
	// FetchArtifact, if set, fetches an artifact missing from ArtifactDir
	// (from a peer instance or a mirror, verified) before the preflight
	// judges the store: any instance can run any node's provision.
	FetchArtifact func(ctx context.Context, sha256hex string) error
}

// RunNotice is a run as it ended, with its node's SKU.
type RunNotice struct {
	Run store.Run
	SKU string
}

func (c *Config) defaults() {
	if c.NetBoot == "" {
		c.NetBoot = redfish.BootPxe
	}
	d := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	d(&c.Timeouts.BMCCall, 30*time.Second)
	d(&c.Timeouts.WaitForCURE, 10*time.Minute)
	d(&c.Timeouts.RunnerPhase, 30*time.Minute)
	d(&c.Timeouts.Reconnect, 3*time.Minute)
	d(&c.Timeouts.ShutdownWait, 90*time.Second)
	d(&c.Timeouts.HostOS, 15*time.Minute)
	d(&c.Timeouts.BMCReset, 10*time.Minute)
	d(&c.Timeouts.BMCTask, time.Hour)
	d(&c.Timeouts.TaskPoll, 2*time.Second)
	d(&c.Timeouts.BMCPoll, time.Duration(manifests.DefaultBMCInterval))
	d(&c.Timeouts.RetryBase, 2*time.Second)
	d(&c.Timeouts.RetryMax, time.Minute)
	d(&c.ClaimSettle, DefaultClaimSettle)
	if c.Budgets.PhaseAttempts == 0 {
		c.Budgets.PhaseAttempts = 3
	}
	if c.Budgets.Disconnects == 0 {
		c.Budgets.Disconnects = 5
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	if c.Audit == nil {
		c.Audit = audit.New(c.Store, c.Log, 0)
	}
	if c.TokensPerWindow == 0 {
		c.TokensPerWindow = 6
	}
	if c.TokensPerNode == 0 {
		c.TokensPerNode = 12
	}
	if c.TokenPeriod == 0 {
		c.TokenPeriod = 10 * time.Minute
	}
	if c.MaxRuns == 0 {
		c.MaxRuns = DefaultMaxRuns
	}
}

// DefaultClaimSettle is Config.ClaimSettle's default: above most servers'
// power-on-to-iPXE time (memory training of a large node takes a minute
// or more).
const DefaultClaimSettle = 2 * time.Minute

// DefaultMaxRuns is the per-instance run limit when none is configured: the
// fleet benchmark's 5,000 nodes fit one instance.
const DefaultMaxRuns = 5000

// Engine owns the running pipelines: it starts, resumes, cancels and
// waits for runs, and hands the rest to its controllers (core), each of
// which owns one area of the pipeline's state.
type Engine struct {
	*core
	nodeStarts sync.Map // node id -> struct{}: a Start of that node is under way
}

// core is what the controllers share: the configuration, the runs this
// instance drives, and the controllers themselves, so that each reaches the
// others through its embedded *core.
type core struct {
	cfg Config

	mu      sync.Mutex
	running map[string]context.CancelFunc // run id -> cancel
	// starting counts Start calls that reserved a slot and have not launched
	// yet, so concurrent Starts cannot overshoot MaxRuns.
	starting int
	wg       sync.WaitGroup
	ctx      context.Context
	// stops holds runs being stopped from outside their goroutine (identity
	// contested, operator cancel): run id -> how the run ends, applied when
	// the run's goroutine has exited so no late save of it can overwrite it.
	stops map[string]stopRequest
	// interrupted holds runs whose pipeline stopped with the engine (not
	// because the run ended): ReleaseAll hands their leases back.
	interrupted map[string]bool
	// skus caches the node SKU of each run driven (a metrics label).
	skus sync.Map
	// sched wakes every wait's requeue at its time (schedule.go).
	sched *scheduler

	driver *driverCtl     // a run's phase loop and its phase records (drive.go)
	batch  *batchCtl      // in-band phases driven through the runner (batch.go, reconcile.go, pairs.go)
	checks *checkCtl      // preflight: node, BMC and artifacts (coordphases.go)
	power  *powerCtl      // power and boot order over the BMC (coordphases.go)
	oob    *oobCtl        // out-of-band firmware and BIOS settings (oob.go)
	host   *hostCtl       // waits for CURE and for the installed OS, host reboots (coordphases.go)
	day2   *day2Ctl       // a day-2 run's end and the installed OS (day2.go)
	fleet  *fleetCtl      // fleet bands and their rejudging (fleet.go, fleetrejudge.go)
	leases *leaseCtl      // run leases shared with other instances (lease.go)
	bmc    *bmcCtl        // BMC health, telemetry and evidence (bmchealth.go, bmcgate.go)
	audits *auditCtl      // direct audits over Redfish (direct.go)
	boot   *bootgate.Gate // the boot gate: boot windows, tokens, host callbacks, unknown MACs
}

// The controllers: each owns one area of the pipeline (core lists them).
type (
	driverCtl struct{ *core }
	batchCtl  struct{ *core }
	checkCtl  struct{ *core }
	powerCtl  struct{ *core }
	oobCtl    struct{ *core }
	hostCtl   struct{ *core }
	day2Ctl   struct{ *core }
	fleetCtl  struct{ *core }
	leaseCtl  struct{ *core }
	auditCtl  struct{ *core }
	bmcCtl    struct {
		*core
		// pollers holds the BMC sensor poller of each run in its validate
		// phase: run id -> *bmcPoller.
		pollers sync.Map
	}
)

// New returns an engine; call Resume to pick up runs from the store.
func New(ctx context.Context, cfg Config) *Engine {
	cfg.defaults()
	c := &core{cfg: cfg, running: map[string]context.CancelFunc{}, ctx: ctx, stops: map[string]stopRequest{}, interrupted: map[string]bool{},
		sched: newScheduler()}
	// Not in wg: it holds no run, and ends with ctx (every wait it wakes
	// ends with ctx first).
	go c.sched.run(ctx)
	c.driver, c.batch, c.checks, c.power = &driverCtl{c}, &batchCtl{c}, &checkCtl{c}, &powerCtl{c}
	c.oob, c.host, c.day2, c.fleet = &oobCtl{c}, &hostCtl{c}, &day2Ctl{c}, &fleetCtl{c}
	c.leases, c.bmc, c.audits = &leaseCtl{c}, &bmcCtl{core: c}, &auditCtl{c}
	c.boot = bootgate.New(bootgate.Config{Store: cfg.Store, Hub: cfg.Hub, Audit: cfg.Audit, BaseURL: cfg.BaseURL, RunnerAddr: cfg.RunnerAddr,
		WaitForCURE: cfg.Timeouts.WaitForCURE, HostOS: cfg.Timeouts.HostOS, ClaimSettle: cfg.ClaimSettle,
		TokensPerWindow: cfg.TokensPerWindow, TokensPerNode: cfg.TokensPerNode, TokenPeriod: cfg.TokenPeriod, BootIPUnbound: cfg.BootIPUnbound,
		Event: c.coordEvent, HostAccepted: c.day2.recordInstalledOS, Enlist: cfg.Enlist,
		Stop: func(runID string, status curev1.RunStatus, msg string) {
			c.requestStop(runID, stopRequest{status: status, msg: msg})
		}})
	if cfg.FleetSweep > 0 {
		c.wg.Add(1)
		go c.fleet.sweepFleetLoop()
	}
	return &Engine{core: c}
}

// Errors of Start, so callers can tell the operator why a node did not start.
var (
	// ErrBusy: the node already has an active run.
	ErrBusy = errors.New("node already has an active run")
	// ErrInvalid: the request cannot start on this node (no manifest, bad mode...).
	ErrInvalid = errors.New("invalid request")
	// ErrCapacity is wrapped by CapacityError.
	ErrCapacity = errors.New("coordinator at capacity")
)

// CapacityError says this instance drives MaxRuns runs already.
type CapacityError struct {
	Active, Max int
	// RetryAfter is a hint: runs take minutes, so retrying sooner only adds load.
	RetryAfter time.Duration
}

func (c *CapacityError) Error() string {
	return fmt.Sprintf("coordinator at capacity: %d of %d runs active; retry after %s or use another instance", c.Active, c.Max, c.RetryAfter)
}

func (c *CapacityError) Unwrap() error { return ErrCapacity }

// capacityRetryAfter is the hint given with a CapacityError.
const capacityRetryAfter = 30 * time.Second

// reserve takes a run slot for a Start; release gives it back once the run
// launched (it then counts in running) or failed to start.
func (c *core) reserve() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.running) + c.starting; n >= c.cfg.MaxRuns {
		return &CapacityError{Active: n, Max: c.cfg.MaxRuns, RetryAfter: capacityRetryAfter}
	}
	c.starting++
	return nil
}

func (c *core) release() {
	c.mu.Lock()
	c.starting--
	c.mu.Unlock()
}

// Active is the number of runs this instance drives now.
func (e *Engine) Active() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.running)
}

// Driving says whether this instance's goroutine for runID is still
// running: a run reads as ended once its status is saved, and finishing it
// (events, metrics, webhooks) completes before Driving turns false.
func (e *Engine) Driving(runID string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.running[runID]
	return ok
}

// Start creates a run for a node and starts its pipeline. With resume, the
// node's latest unfinished run continues from the phase it reached instead.
func (e *Engine) Start(ctx context.Context, nodeID string, mode modes.Mode, manifest string, resume bool) (string, error) {
	// One Start per node at a time in this instance, so two concurrent
	// requests cannot both find the node idle.
	if _, dup := e.nodeStarts.LoadOrStore(nodeID, struct{}{}); dup {
		return "", fmt.Errorf("node %s: another start of this node is in progress: %w", nodeID, ErrBusy)
	}
	defer e.nodeStarts.Delete(nodeID)
	n, err := e.cfg.Store.GetNode(ctx, nodeID)
	if err != nil {
		return "", fmt.Errorf("node %s: %w", nodeID, err)
	}
	last, lastErr := e.cfg.Store.LatestRun(ctx, nodeID)
	if lastErr == nil && runstate.Active(last.Status) {
		return "", fmt.Errorf("node %s: run %s is %s: %w", nodeID, last.ID, runstate.RunName(last.Status), ErrBusy)
	}
	// A busy node is reported as busy, not as capacity: the slot is taken
	// only for a run that could start.
	if err := e.reserve(); err != nil {
		return "", fmt.Errorf("node %s: %w", nodeID, err)
	}
	defer e.release()
	if err := lastErr; err == nil {
		if resume {
			if last.Status == curev1.RunStatus_RUN_SUCCEEDED {
				return "", fmt.Errorf("node %s: latest run %s succeeded; nothing to resume: %w", nodeID, last.ID, ErrInvalid)
			}
			last.Status = curev1.RunStatus_RUN_RUNNING
			last.ResumeCount++
			last.PhaseFailures = 0
			last.Disconnects = 0
			last.EndedAt = time.Time{}
			last.Message = fmt.Sprintf("resumed by operator from %s", last.Phase)
			// The run's end revoked its runner's session: a runner still
			// idling in CURE cannot come back, so the next in-band phase
			// boots a fresh CURE instead of waiting for it.
			last.Pipeline.FreshCURE = "resumed"
			if err := e.cfg.Store.UpdateRun(ctx, last); err != nil {
				return "", err
			}
			e.coordEvent(ctx, last, last.Phase, runstate.EventInfo, "", last.Message, 0)
			e.launch(last.ID)
			return last.ID, nil
		}
	} else if resume {
		return "", fmt.Errorf("node %s: no run to resume (%w): %w", nodeID, err, ErrInvalid)
	}
	if manifest == "" && (mode == modes.Diagnostic || mode == modes.Burnin) {
		return "", fmt.Errorf("node %s: mode %s needs a validation suite (--manifest), not the node's SKU: %w", nodeID, mode, ErrInvalid)
	}
	if manifest == "" {
		manifest = n.SKU
	}
	if manifest == "" {
		return "", fmt.Errorf("node %s has no sku and no manifest was given: %w", nodeID, ErrInvalid)
	}
	if _, err := modes.For(mode); err != nil {
		return "", fmt.Errorf("node %s: %w: %w", nodeID, err, ErrInvalid)
	}
	r := store.Run{
		ID: newRunID(nodeID), NodeID: nodeID, Mode: mode, Manifest: manifest,
		Status: curev1.RunStatus_RUN_RUNNING, StartedAt: time.Now().UTC(),
	}
	if err := e.cfg.Store.CreateRun(ctx, r); errors.Is(err, store.ErrActiveRun) {
		// Another instance (or request) started the node meanwhile.
		return "", fmt.Errorf("node %s: %w: %w", nodeID, err, ErrBusy)
	} else if err != nil {
		return "", err
	}
	e.coordEvent(ctx, r, "", runstate.EventInfo, "", fmt.Sprintf("run created: mode=%s manifest=%s", mode, manifest), 0)
	e.launch(r.ID)
	return r.ID, nil
}

// Resume restarts the pipeline of every active run in the store.
func (e *Engine) Resume(ctx context.Context) (int, error) {
	runs, err := e.cfg.Store.ActiveRuns(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range runs {
		// Runs another live instance holds stay with it.
		if ok, err := e.cfg.Store.ClaimRun(ctx, r.ID); err != nil {
			return n, err
		} else if !ok {
			continue
		}
		n++
		e.cfg.Log.Info("resuming run after coordinator start", "run", r.ID, "node", r.NodeID, "phase", r.Phase)
		e.coordEvent(ctx, r, r.Phase, runstate.EventInfo, "", "coordinator restarted; resuming from "+nonEmpty(r.Phase, "start"), 0)
		e.launch(r.ID)
	}
	return n, nil
}

// Wait blocks until every pipeline goroutine returned.
func (e *Engine) Wait() { e.wg.Wait() }

func (c *core) launch(runID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.running[runID]; ok {
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	c.running[runID] = cancel
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() {
			c.mu.Lock()
			delete(c.running, runID)
			if c.ctx.Err() != nil {
				c.interrupted[runID] = true
			}
			stop, stopped := c.stops[runID]
			delete(c.stops, runID)
			c.mu.Unlock()
			cancel()
			if stopped {
				c.stopRun(runID, stop)
			}
			c.skus.Delete(runID)
		}()
		c.driver.drive(ctx, runID)
	}()
}

func newRunID(nodeID string) string {
	return fmt.Sprintf("%s-%s-%s", nodeID, time.Now().UTC().Format("20060102T150405"), randHex(3))
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// NewToken returns a 256-bit random token.
func NewToken() string { return bootgate.NewToken() }

// nonEmpty is s as a string (a phase name or any string), or def when s
// is empty.
func nonEmpty[S ~string](s S, def string) string {
	if s == "" {
		return def
	}
	return string(s)
}

// coordEvent records a coordinator-side timeline entry.
func (c *core) coordEvent(ctx context.Context, r store.Run, phase modes.PhaseName, kind runstate.EventKind, status, msg string, dur time.Duration) {
	c.coordEventAt(ctx, r, time.Now(), phase, kind, status, msg, dur)
}

// coordEventAt is coordEvent for something that happened at t (a moment the
// coordinator learnt of only afterwards).
func (c *core) coordEventAt(ctx context.Context, r store.Run, t time.Time, phase modes.PhaseName, kind runstate.EventKind, status, msg string, dur time.Duration) {
	_, _, err := c.cfg.Store.AppendEvent(ctx, store.Event{
		RunID: r.ID, NodeID: r.NodeID, Source: runstate.SourceCoordinator, Time: t.UTC(),
		Phase: phase, Kind: kind, Status: status, Message: msg, DurationMs: dur.Milliseconds(),
	})
	if err != nil {
		c.cfg.Log.Error("store event", "run", r.ID, "err", err)
	}
}

// coordNote records a coordinator note: session chatter a runner can
// provoke by reconnecting (store.Event.Note: capped per run, pruned with the
// runner's logs), not the run's essential timeline.
func (c *core) coordNote(ctx context.Context, r store.Run, phase modes.PhaseName, msg string) {
	_, _, err := c.cfg.Store.AppendEvent(ctx, store.Event{
		RunID: r.ID, NodeID: r.NodeID, Source: runstate.SourceCoordinator, Time: time.Now().UTC(),
		Phase: phase, Kind: runstate.EventInfo, Message: msg, Note: true,
	})
	if err != nil {
		c.cfg.Log.Error("store note", "run", r.ID, "err", err)
	}
}

// skuOf is the SKU of the run's node, read once per run.
func (c *core) skuOf(ctx context.Context, r *store.Run) string {
	if v, ok := c.skus.Load(r.ID); ok {
		return v.(string)
	}
	sku := ""
	if n, err := c.cfg.Store.GetNode(context.WithoutCancel(ctx), r.NodeID); err == nil {
		sku = n.SKU
	}
	c.skus.Store(r.ID, sku)
	return sku
}
