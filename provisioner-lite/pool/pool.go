package pool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/metrics"
	"github.com/cure-oss/cure/provisioner-lite/notify"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
)

// ErrRefused wraps every move a node's state does not allow; the message
// says what the node is and what to do first.
var ErrRefused = errors.New("pool move refused")

// Coordinator is the actor of the moves CURE makes itself.
const Coordinator = "coordinator"

// Starter starts runs (the pipeline engine).
type Starter interface {
	Start(ctx context.Context, nodeID string, mode modes.Mode, manifest string, resume bool) (string, error)
}

// Change is one move of a node, as announced (webhooks).
type Change struct {
	NodeID, SKU string
	From, To    State
	Reason      string
	Actor       string
	RunID       string
	At          time.Time
}

// Payload is the node.pool webhook announcing c.
func (c Change) Payload() notify.Payload {
	return notify.Payload{Event: notify.EventNodePool, NodeID: c.NodeID, SKU: c.SKU, RunID: c.RunID,
		PoolState: string(c.To), PoolFrom: string(c.From), Reason: c.Reason, Actor: c.Actor, Since: c.At}
}

// Config wires a Pool.
type Config struct {
	Store   *store.Store
	Starter Starter
	// Announce hears every move (the node.pool webhook). It must not block.
	Announce func(Change)
	// CheckSuite, if set, refuses a revalidation whose suite does not load
	// before the node is moved (a typo is the operator's, not the node's).
	CheckSuite func(name string) error
	Metrics    *metrics.Metrics
	Log        *slog.Logger
	// Policies reads SKUs' admission policies (nil: no SKU has one, every
	// provisioned node goes in service at once).
	Policies Policies
	// StartGrace is how long a node may be revalidating without its run
	// recorded before Reconcile calls the start lost (default 2 min).
	StartGrace time.Duration
}

// Pool carries the moves out: each is one compare-and-set in the store
// (two coordinators, or an operator and the scheduler, cannot both move a
// node from the same state), then announced.
type Pool struct {
	cfg Config
	// dirty says a move happened since the gauge was last set.
	dirty atomic.Bool
}

// New returns a Pool.
func New(cfg Config) *Pool {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.StartGrace <= 0 {
		cfg.StartGrace = 2 * time.Minute
	}
	return &Pool{cfg: cfg}
}

// maxReason bounds a caller's reason as stored and announced.
const maxReason = 512

// Ask applies drain, drained or return to a node and returns its new state.
func (p *Pool) Ask(ctx context.Context, nodeID string, a Action, actor, reason string) (store.NodePool, error) {
	if a == Revalidate {
		return store.NodePool{}, fmt.Errorf("node %s: revalidate needs a suite: use Revalidate", nodeID)
	}
	from, to, err := Move(a)
	if err != nil {
		return store.NodePool{}, err
	}
	if a == Return {
		if err := p.admitReturn(ctx, nodeID); err != nil {
			return store.NodePool{}, err
		}
	}
	next := store.NodePool{NodeID: nodeID, State: string(to), Actor: actor, Reason: textsafe.BoundedLine(reason, maxReason)}
	if next.Reason == "" {
		next.Reason = string(a) + " by " + actor
	}
	return p.move(ctx, a, next, from)
}

// RevalidateRequest is a revalidation as asked.
type RevalidateRequest struct {
	Suite      string
	Mode       modes.Mode // Diagnostic or Burnin
	AutoReturn bool
	Actor      string
	Reason     string
}

// Revalidate moves a drained (ready, rma) node to revalidating and starts
// its suite run. A start that fails puts the node back as it was.
func (p *Pool) Revalidate(ctx context.Context, nodeID string, req RevalidateRequest) (store.NodePool, error) {
	if req.Mode != modes.Diagnostic && req.Mode != modes.Burnin {
		return store.NodePool{}, fmt.Errorf("node %s: revalidation mode %q: want diagnostic or burnin: %w", nodeID, req.Mode, ErrRefused)
	}
	if req.Suite == "" {
		return store.NodePool{}, fmt.Errorf("node %s: revalidation needs a suite: %w", nodeID, ErrRefused)
	}
	if p.cfg.CheckSuite != nil {
		if err := p.cfg.CheckSuite(req.Suite); err != nil {
			return store.NodePool{}, fmt.Errorf("node %s: %v: %w", nodeID, err, ErrRefused)
		}
	}
	// A node busy with another run would only flap revalidating and back
	// (announced twice) when the engine refuses the start.
	if r, err := p.cfg.Store.LatestRun(ctx, nodeID); err == nil && (r.Status == curev1.RunStatus_RUN_RUNNING || r.Status == curev1.RunStatus_RUN_PENDING) {
		return store.NodePool{}, fmt.Errorf("node %s: run %s (%s) is active: let it end or cancel it first: %w", nodeID, r.ID, r.Mode, ErrRefused)
	}
	from, to, _ := Move(Revalidate)
	reason := textsafe.BoundedLine(req.Reason, maxReason)
	if reason == "" {
		reason = fmt.Sprintf("%s suite %s by %s", req.Mode, req.Suite, req.Actor)
	}
	next := store.NodePool{NodeID: nodeID, State: string(to), Actor: req.Actor, Reason: reason, AutoReturn: req.AutoReturn}
	prev, err := p.cfg.Store.SetNodePool(ctx, next, states(from)...)
	if err != nil {
		return store.NodePool{}, p.refusal(nodeID, Revalidate, err)
	}
	p.announce(ctx, prev, next)
	runID, err := p.cfg.Starter.Start(ctx, nodeID, req.Mode, req.Suite, false)
	if err != nil {
		back := prev
		back.Since, back.Actor = time.Time{}, Coordinator
		back.Reason = textsafe.BoundedLine("revalidation run not started: "+err.Error(), maxReason)
		if _, berr := p.cfg.Store.SetNodePool(context.WithoutCancel(ctx), back, string(Revalidating)); berr == nil {
			p.announce(ctx, next, back)
		} else {
			p.cfg.Log.Error("pool: revalidation did not start and the node could not be put back", "node", nodeID, "err", berr)
		}
		return store.NodePool{}, fmt.Errorf("node %s: revalidation run not started: %w", nodeID, err)
	}
	if _, err := p.cfg.Store.SetNodePoolRun(context.WithoutCancel(ctx), nodeID, string(Revalidating), runID); err != nil {
		// The run is matched by its start time instead (RunEnded).
		p.cfg.Log.Error("pool: record revalidation run", "node", nodeID, "run", runID, "err", err)
	}
	return p.cfg.Store.NodePool(ctx, nodeID)
}

// Admit refuses a run of mode on a node whose pool state does not allow
// it (Admit in state.go).
func (p *Pool) Admit(ctx context.Context, nodeID string, mode modes.Mode) error {
	cur, err := p.cfg.Store.NodePool(ctx, nodeID)
	if err != nil {
		return err
	}
	if err := Admit(State(cur.State), mode); err != nil {
		return fmt.Errorf("node %s: %v: %w", nodeID, err, ErrRefused)
	}
	return nil
}

// RunStarted hears of a run an operator started: a provision or a wipe
// ends the node's tenancy, so the node leaves the pool (announced: the
// scheduler must stop using it) until a provision succeeds.
func (p *Pool) RunStarted(ctx context.Context, nodeID, runID string, mode modes.Mode) {
	if mode != modes.Provision && mode != modes.Wipe {
		return
	}
	next := store.NodePool{NodeID: nodeID, Actor: Coordinator, RunID: runID,
		Reason: fmt.Sprintf("%s run %s started: the node leaves the pool", mode, runID)}
	prev, err := p.cfg.Store.SetNodePool(ctx, next, states(States())...)
	var pc *store.PoolConflict
	if errors.As(err, &pc) {
		return // not in the pool
	}
	if err != nil {
		p.cfg.Log.Error("pool: node leaving for a run", "node", nodeID, "run", runID, "err", err)
		return
	}
	p.announce(ctx, prev, next)
}

// RunEnded hears of every run that ends (pipeline.Config.Notify): a
// provision that succeeded puts its node in service (accepting, on a SKU
// with spec.admission: the node's admission decides), a wipe that
// succeeded takes it out of the pool, and the end of a node's
// revalidation run decides where it goes (Judge). It must not block long:
// it runs on the run's goroutine (a few store reads and one write).
func (p *Pool) RunEnded(ctx context.Context, r store.Run) {
	ctx = context.WithoutCancel(ctx)
	var err error
	switch r.Mode {
	case modes.Provision:
		if r.Status == curev1.RunStatus_RUN_SUCCEEDED {
			err = p.provisioned(ctx, r)
		}
	case modes.Wipe:
		if r.Status == curev1.RunStatus_RUN_SUCCEEDED {
			err = p.set(ctx, store.NodePool{NodeID: r.NodeID, Actor: Coordinator, RunID: r.ID, Reason: "wiped by run " + r.ID})
		}
	case modes.Diagnostic, modes.Burnin:
		if err = p.revalidationEnded(ctx, r); err == nil {
			err = p.reconsider(ctx, r.NodeID, Coordinator, fmt.Sprintf("%s run %s ended", r.Mode, r.ID))
		}
	case modes.Audit, modes.Verify, modes.Service, modes.Inspect:
		// Read-only or disk-keeping runs leave the pool state as it is
		// (inspect is no run's mode).
	}
	if err != nil {
		p.cfg.Log.Error("pool: run ended", "node", r.NodeID, "run", r.ID, "err", err)
	}
}

// revalidationEnded judges r if it is its node's revalidation run.
func (p *Pool) revalidationEnded(ctx context.Context, r store.Run) error {
	cur, err := p.cfg.Store.NodePool(ctx, r.NodeID)
	if err != nil || !isRevalidationRun(cur, r) {
		return err
	}
	stored, err := p.cfg.Store.Verdicts(ctx, r.ID)
	if err != nil {
		return err
	}
	vs := make([]Verdict, len(stored))
	for i, v := range stored {
		vs[i] = Verdict{Component: v.Component, Check: v.Check, Status: v.Status, Message: v.Message}
	}
	out := Judge(r.ID, r.Status, r.Message, vs, cur.AutoReturn)
	next := store.NodePool{NodeID: r.NodeID, State: string(out.To), Actor: Coordinator, RunID: r.ID,
		Reason: textsafe.BoundedLine(out.Reason, maxReason), AutoReturn: cur.AutoReturn}
	prev, err := p.cfg.Store.SetNodePool(ctx, next, string(Revalidating))
	var pc *store.PoolConflict
	if errors.As(err, &pc) {
		return nil // judged already (Reconcile, another instance)
	}
	if err != nil {
		return err
	}
	p.announce(ctx, prev, next)
	return nil
}

// isRevalidationRun: the run recorded for a revalidating node, or (its id
// not recorded yet: the run ended before Revalidate could) a suite run
// that started after the node began revalidating.
func isRevalidationRun(cur store.NodePool, r store.Run) bool {
	if State(cur.State) != Revalidating {
		return false
	}
	if cur.RunID != "" {
		return cur.RunID == r.ID
	}
	m := r.Mode
	return (m == modes.Diagnostic || m == modes.Burnin) && !r.StartedAt.Before(cur.Since)
}

// Reconcile finishes what a coordinator that stopped at the wrong moment
// left: a revalidating node whose run ended unjudged is judged, and one
// whose run never started (past StartGrace, no active run) goes back to
// drained. It also refreshes the gauge. The coordinator calls it at start
// and periodically (Run).
func (p *Pool) Reconcile(ctx context.Context) error {
	all, err := p.cfg.Store.NodePools(ctx)
	if err != nil {
		return err
	}
	p.reconcileAdmission(ctx, all)
	for _, cur := range all {
		if State(cur.State) != Revalidating {
			continue
		}
		r, err := p.cfg.Store.LatestRun(ctx, cur.NodeID)
		switch {
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return err
		case err == nil && (r.Status == curev1.RunStatus_RUN_RUNNING || r.Status == curev1.RunStatus_RUN_PENDING):
			continue
		case err == nil && isRevalidationRun(cur, r):
			if err := p.revalidationEnded(ctx, r); err != nil {
				return err
			}
		case time.Since(cur.Since) > p.cfg.StartGrace:
			next := store.NodePool{NodeID: cur.NodeID, State: string(Drained), Actor: Coordinator,
				Reason: "revalidation run never started (coordinator stopped before it did)"}
			if prev, err := p.cfg.Store.SetNodePool(ctx, next, string(Revalidating)); err == nil {
				p.announce(ctx, prev, next)
			}
		}
	}
	p.refreshGauge(ctx)
	return nil
}

// Run reconciles every interval until ctx ends, and sets the gauge at
// most once a second after moves (a drain of thousands of nodes counts
// the pool once a second, not once a node).
func (p *Pool) Run(ctx context.Context, every time.Duration) {
	reconcile := time.NewTicker(every)
	defer reconcile.Stop()
	gauge := time.NewTicker(time.Second)
	defer gauge.Stop()
	p.reconcileLogged(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-gauge.C:
			if p.dirty.Swap(false) {
				p.refreshGauge(ctx)
			}
		case <-reconcile.C:
			p.reconcileLogged(ctx)
		}
	}
}

func (p *Pool) reconcileLogged(ctx context.Context) {
	if err := p.Reconcile(ctx); err != nil && ctx.Err() == nil {
		p.cfg.Log.Error("pool: reconcile", "err", err)
	}
}

// move applies an operator's move from the states it allows.
func (p *Pool) move(ctx context.Context, a Action, next store.NodePool, from []State) (store.NodePool, error) {
	prev, err := p.cfg.Store.SetNodePool(ctx, next, states(from)...)
	if err != nil {
		return store.NodePool{}, p.refusal(next.NodeID, a, err)
	}
	p.announce(ctx, prev, next)
	return p.cfg.Store.NodePool(ctx, next.NodeID)
}

// set moves a node unconditionally, announcing a change of state.
func (p *Pool) set(ctx context.Context, next store.NodePool) error {
	prev, err := p.cfg.Store.SetNodePool(ctx, next)
	if err != nil {
		return err
	}
	if prev.State != next.State {
		p.announce(ctx, prev, next)
	}
	return nil
}

func (p *Pool) refusal(nodeID string, a Action, err error) error {
	var pc *store.PoolConflict
	if errors.As(err, &pc) {
		return fmt.Errorf("node %s: %s: %w", nodeID, Refusal(a, State(pc.State)), ErrRefused)
	}
	return err
}

func (p *Pool) announce(ctx context.Context, prev, next store.NodePool) {
	p.dirty.Store(true)
	if State(next.State) == Accepting && (State(prev.State) == None || State(prev.State) == Accepting) {
		// A node entering its acceptance is not the scheduler's business:
		// it hears of the node when it is admitted (or quarantined).
		p.cfg.Log.Info("pool", "node", next.NodeID, "from", State(prev.State).Show(), "to", Accepting.Show(), "reason", next.Reason, "run", next.RunID)
		return
	}
	c := Change{NodeID: next.NodeID, From: State(prev.State), To: State(next.State), Reason: next.Reason, Actor: next.Actor,
		RunID: next.RunID, At: next.Since}
	if c.At.IsZero() {
		c.At = time.Now()
	}
	if n, err := p.cfg.Store.GetNode(context.WithoutCancel(ctx), next.NodeID); err == nil {
		c.SKU = n.SKU
	}
	p.cfg.Log.Info("pool", "node", c.NodeID, "from", c.From.Show(), "to", c.To.Show(), "actor", c.Actor, "reason", c.Reason, "run", c.RunID)
	if p.cfg.Announce != nil {
		p.cfg.Announce(c)
	}
	p.dirty.Store(true)
}

// refreshGauge sets cure_pool_nodes from the store (every instance's
// moves, not only this one's).
func (p *Pool) refreshGauge(ctx context.Context) {
	if p.cfg.Metrics == nil {
		return
	}
	stored, err := p.cfg.Store.PoolCounts(context.WithoutCancel(ctx))
	if err != nil {
		p.cfg.Log.Error("pool: gauge", "err", err)
		return
	}
	counts := map[string]int{}
	for _, s := range States() {
		counts[string(s)] = stored[string(s)]
	}
	p.cfg.Metrics.PoolNodes(counts)
}

func states(ss []State) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return slices.Clip(out)
}
