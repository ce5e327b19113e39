package pool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/admission"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
)

// Policies reads what admission needs from the manifests: a SKU's
// spec.admission (nil: the SKU has none) and the suites it names.
type Policies interface {
	Admission(sku string) (*manifests.Admission, error)
	Suite(name string) (*manifests.ValidationSuite, error)
}

// Admission is a node's standing with its SKU's admission policy.
type Admission struct {
	NodeID, SKU string
	// Policy is nil when the SKU has no spec.admission.
	Policy *manifests.Admission
	Result admission.Result
	Pool   store.NodePool
}

// policy is the admission policy of node's SKU (nil: none). A SKU that
// does not load cannot say "no policy": that is an error.
func (p *Pool) policy(ctx context.Context, nodeID string) (store.Node, *manifests.Admission, error) {
	n, err := p.cfg.Store.GetNode(ctx, nodeID)
	if err != nil {
		return n, nil, err
	}
	if p.cfg.Policies == nil || n.SKU == "" {
		return n, nil, nil
	}
	pol, err := p.cfg.Policies.Admission(n.SKU)
	if err != nil {
		return n, nil, fmt.Errorf("admission policy of SKU %s: %w", n.SKU, err)
	}
	return n, pol, nil
}

// Standing evaluates node's admission as it stands now, changing nothing
// (curectl nodes admission).
func (p *Pool) Standing(ctx context.Context, nodeID string) (Admission, error) {
	n, pol, err := p.policy(ctx, nodeID)
	if err != nil {
		return Admission{NodeID: nodeID, SKU: n.SKU}, err
	}
	out := Admission{NodeID: nodeID, SKU: n.SKU, Policy: pol}
	if out.Pool, err = p.cfg.Store.NodePool(ctx, nodeID); err != nil && !errors.Is(err, store.ErrNotFound) {
		return out, err
	}
	if pol == nil {
		return out, nil
	}
	ev, err := admission.Gather(ctx, p.sources(), nodeID, pol, time.Now())
	if err != nil {
		return out, err
	}
	out.Result = admission.Evaluate(pol, ev)
	return out, nil
}

func (p *Pool) sources() admission.Sources {
	return admission.Sources{Store: p.cfg.Store, Suite: p.cfg.Policies.Suite}
}

// provisioned is where a provision that succeeded leaves its node: in
// service on a SKU without spec.admission; accepting (its acceptance run
// started) on one with it; quarantined when the policy cannot be read.
func (p *Pool) provisioned(ctx context.Context, r store.Run) error {
	_, pol, err := p.policy(ctx, r.NodeID)
	if err != nil {
		return p.Quarantine(ctx, r.NodeID, r.ID, "admission could not be judged: "+err.Error())
	}
	if pol == nil {
		return p.set(ctx, store.NodePool{NodeID: r.NodeID, State: string(InService), Actor: Coordinator, RunID: r.ID,
			Reason: "provisioned by run " + r.ID})
	}
	next := store.NodePool{NodeID: r.NodeID, State: string(Accepting), Actor: Coordinator, RunID: r.ID,
		Reason: fmt.Sprintf("provisioned by run %s; acceptance suite %s (%s) to pass before service", r.ID, pol.Acceptance.Suite, pol.Acceptance.Mode)}
	if err := p.set(ctx, next); err != nil {
		return err
	}
	return p.reconsider(ctx, r.NodeID, Coordinator, "provision run "+r.ID+" succeeded")
}

// Quarantine keeps node out of service, from whatever state it is in,
// with the reason (an admission requirement failed, a measurement drift,
// a fleet band that found it MARGINAL). Reconsider may release it.
func (p *Pool) Quarantine(ctx context.Context, nodeID, runID, reason string) error {
	return p.set(context.WithoutCancel(ctx), store.NodePool{NodeID: nodeID, State: string(Quarantined), Actor: Coordinator, RunID: runID,
		Reason: textsafe.BoundedLine(reason, maxReason)})
}

// Reconsider judges an accepting or quarantined node's admission again
// (its acceptance run ended, its measurements were accepted, its fleet
// band filled): in service when every requirement is met, quarantined
// when one failed or could not be judged, accepting otherwise (its
// acceptance run started when one is due). Other states are left alone.
//
// On a SKU without spec.admission (a node quarantined for a measurement
// drift or a MARGINAL band) nothing is judged: the node stays quarantined
// while a measurement hold stands, and otherwise leaves the pool, to be
// returned by an operator (curectl nodes return) or provisioned.
func (p *Pool) Reconsider(ctx context.Context, nodeID, actor, why string) error {
	return p.reconsider(context.WithoutCancel(ctx), nodeID, actor, why)
}

func (p *Pool) reconsider(ctx context.Context, nodeID, actor, why string) error {
	return p.judge(ctx, nodeID, actor, why, false)
}

// judge is Reconsider; periodic (the pool's reconcile) leaves the nodes of
// SKUs without spec.admission alone: only an event releases them.
func (p *Pool) judge(ctx context.Context, nodeID, actor, why string, periodic bool) error {
	cur, err := p.cfg.Store.NodePool(ctx, nodeID)
	if err != nil {
		return err
	}
	from := State(cur.State)
	if from != Accepting && from != Quarantined {
		return nil
	}
	st, err := p.Standing(ctx, nodeID)
	if err != nil {
		return p.Quarantine(ctx, nodeID, cur.RunID, "admission could not be judged: "+err.Error())
	}
	next := store.NodePool{NodeID: nodeID, Actor: actor, RunID: cur.RunID}
	if st.Policy == nil {
		if periodic {
			return nil
		}
		if err := p.unpoliced(ctx, &next, from, why); err != nil {
			return err
		}
		return p.moveJudged(ctx, next)
	}
	switch st.Result.Decision {
	case admission.Admit:
		next.State, next.Reason = string(InService), fmt.Sprintf("admitted (%s): every requirement of SKU %s's admission met", why, st.SKU)
		if acc := requirement(st.Result, admission.ReqAcceptance); acc.RunID != "" {
			next.RunID = acc.RunID
		}
	case admission.Refuse:
		next.State, next.Reason = string(Quarantined), "admission refused: "+st.Result.Reasons()
	case admission.Wait:
		fallthrough
	default:
		next.State, next.Reason = string(Accepting), "waiting: "+st.Result.Reasons()
		if runID, started, err := p.startAcceptance(ctx, nodeID, st); err != nil {
			next.Reason = "acceptance run not started (retried): " + err.Error() + "; " + next.Reason
		} else if started {
			next.RunID = runID
			next.Reason = fmt.Sprintf("acceptance run %s of suite %s started; %s", runID, st.Policy.Acceptance.Suite, next.Reason)
		}
	}
	return p.moveJudged(ctx, next)
}

// unpoliced is where an accepting or quarantined node of a SKU without
// spec.admission goes: quarantined while a measurement hold stands; in
// service from accepting (its SKU's policy was removed); out of the pool
// from quarantined.
func (p *Pool) unpoliced(ctx context.Context, next *store.NodePool, from State, why string) error {
	rec, err := p.cfg.Store.GetFirmwareRecord(ctx, next.NodeID)
	switch {
	case err != nil && !errors.Is(err, store.ErrNotFound):
		next.State, next.Reason = string(Quarantined), "measurement hold could not be read: "+err.Error()
	case err == nil && rec.Hold.RunID != "":
		next.State, next.Reason = string(Quarantined), fmt.Sprintf("measurement hold of run %s: %s (curectl nodes accept-measurements, or reflash)", rec.Hold.RunID, rec.Hold.Detail)
	case from == Accepting:
		next.State, next.Reason = string(InService), fmt.Sprintf("admitted (%s): its SKU no longer has spec.admission", why)
	default:
		next.State, next.Reason = string(None), fmt.Sprintf("released from quarantine (%s): out of the pool until returned (curectl nodes return) or provisioned", why)
	}
	return nil
}

// moveJudged stores a judged node's move from accepting or quarantined
// and announces a change of state.
func (p *Pool) moveJudged(ctx context.Context, next store.NodePool) error {
	next.Reason = textsafe.BoundedLine(next.Reason, maxReason)
	prev, err := p.cfg.Store.SetNodePool(ctx, next, string(Accepting), string(Quarantined))
	var pc *store.PoolConflict
	if errors.As(err, &pc) {
		return nil // moved meanwhile (an operator, another instance)
	}
	if err != nil {
		return err
	}
	if prev.State != next.State {
		p.announce(ctx, prev, next)
	}
	return nil
}

// startAcceptance starts the node's acceptance run when the decision is
// waiting for one (none yet since the provision, or the last is too old or
// followed by a change) and none is active; started reports whether it did.
func (p *Pool) startAcceptance(ctx context.Context, nodeID string, st Admission) (runID string, started bool, err error) {
	if requirement(st.Result, admission.ReqProvisioned).State != admission.Met {
		return "", false, nil
	}
	acc := requirement(st.Result, admission.ReqAcceptance)
	if acc.State != admission.Pending {
		return "", false, nil
	}
	if r, err := p.cfg.Store.LatestRun(ctx, nodeID); err == nil && (r.Status == curev1.RunStatus_RUN_RUNNING || r.Status == curev1.RunStatus_RUN_PENDING) {
		return "", false, nil // its acceptance run, or another the operator started: judged when it ends
	}
	runID, err = p.cfg.Starter.Start(ctx, nodeID, modes.Mode(st.Policy.Acceptance.Mode), st.Policy.Acceptance.Suite, false)
	if err != nil {
		return "", false, err
	}
	return runID, true, nil
}

func requirement(r admission.Result, name string) admission.Requirement {
	i := slices.IndexFunc(r.Requirements, func(q admission.Requirement) bool { return q.Name == name })
	if i < 0 {
		return admission.Requirement{Name: name}
	}
	return r.Requirements[i]
}

// reconcileAdmission judges every accepting and quarantined node again
// (a band filled, an error cleared, an acceptance pass grew too old, a
// start that failed): Reconcile calls it.
func (p *Pool) reconcileAdmission(ctx context.Context, all map[string]store.NodePool) {
	for id, cur := range all {
		if s := State(cur.State); s != Accepting && s != Quarantined {
			continue
		}
		if err := p.judge(ctx, id, Coordinator, "periodic admission check", true); err != nil {
			p.cfg.Log.Error("pool: admission", "node", id, "err", err)
		}
	}
}

// admitReturn refuses to adopt a node outside the pool into service on a
// SKU with spec.admission unless the node meets it.
func (p *Pool) admitReturn(ctx context.Context, nodeID string) error {
	cur, err := p.cfg.Store.NodePool(ctx, nodeID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if State(cur.State) != None {
		return nil
	}
	st, err := p.Standing(ctx, nodeID)
	if err != nil {
		return fmt.Errorf("node %s: return refused: admission could not be judged: %v: %w", nodeID, err, ErrRefused)
	}
	if st.Policy != nil && st.Result.Decision != admission.Admit {
		return fmt.Errorf("node %s: return refused: SKU %s requires admission (%s): %w", nodeID, st.SKU, st.Result.Reasons(), ErrRefused)
	}
	return nil
}

// FleetRejudged hears of a finished run judged again when its SKU's band
// filled (pipeline.Config.OnFleetRejudged): a node found MARGINAL by the
// run that put it where it is (its acceptance, or the run that returned
// it) leaves accepting or service, quarantined with the reason; a node
// within the band has its admission judged again.
func (p *Pool) FleetRejudged(ctx context.Context, nodeID, runID string, marginal bool, reason string) {
	ctx = context.WithoutCancel(ctx)
	cur, err := p.cfg.Store.NodePool(ctx, nodeID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		p.cfg.Log.Error("pool: fleet rejudged", "node", nodeID, "run", runID, "err", err)
		return
	}
	s := State(cur.State)
	if marginal && (s == Accepting || (s == InService || s == Ready) && cur.RunID == runID) {
		err = p.Quarantine(ctx, nodeID, runID, "judged again when its SKU's fleet band filled: "+reason)
	} else if !marginal {
		err = p.reconsider(ctx, nodeID, Coordinator, "fleet band judged run "+runID+" again")
	}
	if err != nil {
		p.cfg.Log.Error("pool: fleet rejudged", "node", nodeID, "run", runID, "err", err)
	}
}
