// Package pool is a deployed node's place in the day-2 loop: in service
// (the scheduler's), draining (the scheduler moves jobs away), drained (the
// scheduler said so: CURE may reboot it), revalidating (a suite runs),
// ready (it passed) and rma (it did not). This file is the pure part: the
// states, which move starts from which, which runs a state admits and how a
// revalidation run is judged; pool.go carries the moves out against the
// store and announces them.
//
// Draining is the scheduler's job: CURE records the request, announces it
// (a signed node.pool webhook) and waits for an explicit "drained" through
// the API before anything may reboot the node.
package pool

import (
	"fmt"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/admission"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
)

// State is a node's pool state as stored; None is not in the pool.
type State string

const (
	None         State = ""
	InService    State = "in_service"
	Draining     State = "draining"
	Drained      State = "drained"
	Revalidating State = "revalidating"
	Ready        State = "ready"
	RMA          State = "rma"
	// Accepting: provisioned on a SKU with spec.admission, its acceptance
	// (the join gate: package admission) under way; not the scheduler's.
	Accepting State = "accepting"
	// Quarantined: an admission requirement failed or could not be
	// judged, or its firmware measurements drifted; kept out of service
	// until the reasons are cleared.
	Quarantined State = "quarantined"
)

// States lists every state a node in the pool can be in (None aside), in
// the loop's order: the metrics gauge has one series each.
func States() []State {
	return []State{Accepting, Quarantined, InService, Draining, Drained, Revalidating, Ready, RMA}
}

// Proto is the wire value of s.
func (s State) Proto() curev1.PoolState {
	switch s {
	case InService:
		return curev1.PoolState_POOL_IN_SERVICE
	case Draining:
		return curev1.PoolState_POOL_DRAINING
	case Drained:
		return curev1.PoolState_POOL_DRAINED
	case Revalidating:
		return curev1.PoolState_POOL_REVALIDATING
	case Ready:
		return curev1.PoolState_POOL_READY
	case RMA:
		return curev1.PoolState_POOL_RMA
	case Accepting:
		return curev1.PoolState_POOL_ACCEPTING
	case Quarantined:
		return curev1.PoolState_POOL_QUARANTINED
	case None:
	}
	return curev1.PoolState_POOL_STATE_UNSPECIFIED
}

// Show is the state as curectl and the dashboard print it.
func (s State) Show() string {
	if s == None {
		return "-"
	}
	return string(s)
}

// Action is a move an operator or the scheduler asks for.
type Action string

const (
	Drain      Action = "drain"
	MarkDrain  Action = "drained"
	Revalidate Action = "revalidate"
	Return     Action = "return"
)

// move is where an action goes and the states it may start from.
type move struct {
	from []State
	to   State
	// hint is what to do instead when the node is in another state.
	hint string
}

var moves = map[Action]move{
	Drain:     {from: []State{InService}, to: Draining, hint: "only a node in service drains"},
	MarkDrain: {from: []State{Draining}, to: Drained, hint: "drain it first (curectl nodes drain)"},
	// Revalidation reboots the node: never one the scheduler may still
	// run jobs on. An RMA'd node is revalidated again after its repair.
	Revalidate: {from: []State{Drained, Ready, RMA}, to: Revalidating,
		hint: "drain it and wait for the scheduler's drained first (curectl nodes drain, curectl nodes drained)"},
	// Return ends a drain the scheduler no longer needs, hands back a
	// node that passed (or was serviced while drained), and adopts a
	// node deployed before the pool existed (None; on a SKU with
	// spec.admission only when the node meets it: Pool.Ask). An RMA'd
	// node passes a revalidation first; an accepting or quarantined one
	// passes its admission (Pool.Reconsider).
	Return: {from: []State{None, Draining, Drained, Ready}, to: InService,
		hint: "an rma node is revalidated (or provisioned) before it returns; an accepting or quarantined one enters service only through its admission (curectl nodes admission)"},
}

// Move is where action takes a node and the states it may start from.
func Move(a Action) (from []State, to State, err error) {
	m, ok := moves[a]
	if !ok {
		return nil, None, fmt.Errorf("unknown pool action %q", a)
	}
	return m.from, m.to, nil
}

// Refusal explains why action cannot start from state cur.
func Refusal(a Action, cur State) string {
	m := moves[a]
	names := make([]string, len(m.from))
	for i, s := range m.from {
		names[i] = s.Show()
	}
	return fmt.Sprintf("%s refused: node is %s, %s needs %s; %s", a, cur.Show(), a, strings.Join(names, " or "), m.hint)
}

// Admit says whether a run of mode may start on a node in state cur. A
// node the scheduler may be using (in service, draining) or one under
// revalidation takes no run that reboots it and leaves it to the
// scheduler afterwards; provision and wipe end the tenancy outright (the
// node leaves the pool when they start, see Pool.RunStarted) and stay
// allowed: they are the operator's explicit, audited calls.
func Admit(cur State, mode modes.Mode) error {
	if mode == modes.Provision || mode == modes.Wipe {
		if cur == Revalidating {
			return fmt.Errorf("node is revalidating: cancel its revalidation run first")
		}
		return nil
	}
	switch cur {
	case InService, Draining:
		return fmt.Errorf("mode %s refused: node is %s (the scheduler may run jobs on it); drain it and wait for drained first (curectl nodes drain, curectl nodes drained)", mode, cur)
	case Revalidating:
		return fmt.Errorf("mode %s refused: node is revalidating", mode)
	case None, Drained, Ready, RMA, Accepting, Quarantined:
		// Out of the scheduler's hands: any mode may run.
	}
	return nil
}

// Outcome is how a revalidation run leaves the node.
type Outcome struct {
	To     State
	Reason string
}

// Verdict is the part of a stored verdict Judge reads.
type Verdict struct {
	Component, Check string
	Status           curev1.VerdictStatus
	Message          string
}

// Judge decides where a revalidation run leaves its node: ready (or in
// service when autoReturn) when it succeeded with no FAIL, ERROR or
// MARGINAL verdict; drained when an operator canceled it (nothing was
// proven either way, the node is still out of service); rma otherwise,
// naming the verdicts or the run's failure.
func Judge(runID string, status curev1.RunStatus, message string, verdicts []Verdict, autoReturn bool) Outcome {
	var bad []string
	for _, v := range verdicts {
		if admission.FailsGate(v.Status) {
			bad = append(bad, fmt.Sprintf("%s %s %s", v.Component, v.Check, runstate.VerdictName(v.Status)))
		}
	}
	switch {
	case status == curev1.RunStatus_RUN_CANCELED:
		return Outcome{To: Drained, Reason: fmt.Sprintf("revalidation run %s canceled: %s", runID, message)}
	case status == curev1.RunStatus_RUN_SUCCEEDED && len(bad) == 0:
		to := Ready
		if autoReturn {
			to = InService
		}
		return Outcome{To: to, Reason: fmt.Sprintf("revalidation run %s passed (%d verdicts)", runID, len(verdicts))}
	case len(bad) > 0:
		return Outcome{To: RMA, Reason: fmt.Sprintf("revalidation run %s %s: %s", runID, runstate.RunName(status), admission.Summary(bad, 8))}
	}
	return Outcome{To: RMA, Reason: fmt.Sprintf("revalidation run %s %s: %s", runID, runstate.RunName(status), message)}
}
