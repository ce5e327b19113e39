// Package admission decides whether a node may enter service under its
// SKU's spec.admission (the join gate: docs/VALIDATION.md, "Admission").
// Evaluate is pure: the evidence a node has shown (its provision and
// acceptance runs, their boot paths, attestations, verdicts and fleet
// judgement, a measurement hold, a change after the acceptance run) in,
// each requirement met, pending or failed out. Gather reads that evidence
// from the store; the pool acts on the decision.
//
// Doubt fails the gate: evidence that cannot be read is an error (the node
// is kept out and judged again), never a pass.
package admission

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
)

// State is how a node stands with one requirement.
type State string

const (
	Met     State = "met"
	Pending State = "pending" // not shown yet: the node waits in accepting
	Failed  State = "failed"  // shown not to hold: the node is quarantined
	Error   State = "error"   // could not be judged: quarantined, judged again
)

// Decision is what the pool does with the node.
type Decision string

const (
	Admit  Decision = "admit"  // every requirement met: in service
	Wait   Decision = "wait"   // some pending, none failed: stays accepting
	Refuse Decision = "refuse" // some failed or could not be judged: quarantined
)

// Requirement names, in the order they are listed.
const (
	ReqProvisioned  = "provisioned"
	ReqBootPath     = "boot_path"
	ReqAttestation  = "attestation"
	ReqMeasurements = "measurements"
	ReqAcceptance   = "acceptance"
	ReqFleetBand    = "fleet_band"
)

// Requirement is one requirement as the node stands with it.
type Requirement struct {
	Name     string
	State    State
	Detail   string
	RunID    string
	Evidence string
}

// Result is every requirement and the decision they make.
type Result struct {
	Requirements []Requirement
	Decision     Decision
}

// Reasons is the failed (or, for Wait, pending) requirements on one line.
func (r Result) Reasons() string {
	var out []string
	for _, q := range r.Requirements {
		if q.State == Failed || q.State == Error || r.Decision == Wait && q.State == Pending {
			line := fmt.Sprintf("%s %s: %s", q.Name, q.State, q.Detail)
			if q.State == Failed && q.Evidence != "" {
				line += ": " + q.Evidence
			}
			out = append(out, line)
		}
	}
	return strings.Join(out, "; ")
}

// Run is the part of a stored run the decision reads.
type Run struct {
	ID, Manifest       string
	Mode               modes.Mode
	Status             curev1.RunStatus
	StartedAt, EndedAt time.Time
	Message            string
	// BootPath is the path of the run's latest boot into CURE
	// (runstate.BootPath*; "" when none was recorded).
	BootPath string
}

// Verdict is the part of a stored verdict the decision reads.
type Verdict struct {
	Component, Check string
	Status           curev1.VerdictStatus
}

// Attestation is one boot's attestation outcome (store.Attest*).
type Attestation struct {
	BootID, Status, Detail, EKSHA256 string
}

// Fleet is the acceptance run's fleet judgement.
type Fleet struct {
	// Bands is false when the suite names no fleet band at all.
	Bands bool
	// Judged is false when no judgement is stored for the run.
	Judged bool
	// NotApplied says why some band was not applied (too few nodes);
	// "" when every band was.
	NotApplied string
}

// Evidence is everything Evaluate reads. Errs holds, by requirement name,
// what could not be read for it.
type Evidence struct {
	Now       time.Time
	Provision *Run // the latest provision run, nil when none
	// Acceptance is the latest run of the acceptance suite that started
	// after the provision ended; nil when none.
	Acceptance   *Run
	Verdicts     []Verdict     // the acceptance run's
	Attestations []Attestation // the acceptance run's boots
	// Hold is a measurement drift keeping the node out ("" when none).
	Hold, HoldRun string
	// ChangedAfter names a firmware or hardware change after the
	// acceptance run started ("" when none).
	ChangedAfter string
	Fleet        Fleet
	Errs         map[string]error
}

// FailsGate says whether a verdict of status s fails a suite run
// whatever the run's status says (an acceptance run here, a revalidation
// in package pool): a check failed, could not run or judge, or lies
// outside its SKU's fleet band.
func FailsGate(s curev1.VerdictStatus) bool {
	return s == curev1.VerdictStatus_FAIL || s == curev1.VerdictStatus_ERROR || s == curev1.VerdictStatus_MARGINAL
}

// Evaluate judges ev against p (non-nil).
func Evaluate(p *manifests.Admission, ev Evidence) Result {
	reqs := []Requirement{
		provisioned(ev),
		bootPath(p, ev),
	}
	if p.Attestation == manifests.AdmitAttested {
		reqs = append(reqs, attested(ev))
	}
	reqs = append(reqs, measurements(ev), acceptance(p, ev), fleetBand(p, ev))
	for i, q := range reqs {
		if err := ev.Errs[q.Name]; err != nil {
			reqs[i].State, reqs[i].Detail = Error, fmt.Sprintf("could not be judged: %v", err)
		}
	}
	return Result{Requirements: reqs, Decision: decide(reqs)}
}

func decide(reqs []Requirement) Decision {
	d := Admit
	for _, q := range reqs {
		switch q.State {
		case Failed, Error:
			return Refuse
		case Pending:
			d = Wait
		case Met:
		}
	}
	return d
}

func provisioned(ev Evidence) Requirement {
	q := Requirement{Name: ReqProvisioned}
	switch r := ev.Provision; {
	case r == nil:
		q.State, q.Detail = Pending, "no provision run on record"
	case r.Status == curev1.RunStatus_RUN_SUCCEEDED:
		q.State, q.RunID, q.Detail = Met, r.ID, "provision run succeeded "+r.EndedAt.UTC().Format(time.RFC3339)
	case r.Status == curev1.RunStatus_RUN_RUNNING || r.Status == curev1.RunStatus_RUN_PENDING:
		q.State, q.RunID, q.Detail = Pending, r.ID, "provision run under way"
	default:
		q.State, q.RunID, q.Detail = Failed, r.ID, fmt.Sprintf("latest provision run %s: %s", runstate.RunName(r.Status), r.Message)
	}
	return q
}

// bootPath: the provision's and the acceptance run's boots into CURE came
// by the path the policy names (any known path where it accepts PXE).
func bootPath(p *manifests.Admission, ev Evidence) Requirement {
	q := Requirement{Name: ReqBootPath}
	want := []string{runstate.BootPathHTTPS}
	if p.Boot == manifests.BootPXE {
		want = append(want, runstate.BootPathPXE)
	}
	var seen []string
	for _, r := range []*Run{ev.Provision, ev.Acceptance} {
		if r == nil || r.Status == curev1.RunStatus_RUN_PENDING {
			q.State, q.Detail = Pending, "waiting for the provision and acceptance runs' boots"
			return q
		}
		q.RunID = r.ID
		seen = append(seen, fmt.Sprintf("%s run %s: %s", r.Mode, r.ID, cmp.Or(r.BootPath, "none recorded")))
		if !slices.Contains(want, r.BootPath) {
			if r.BootPath == "" && isActive(r) {
				q.State, q.Detail = Pending, fmt.Sprintf("%s run %s has not booted CURE yet", r.Mode, r.ID)
				return q
			}
			q.State = Failed
			q.Detail = fmt.Sprintf("boot path must be %s; %s run %s booted by %s", strings.Join(want, " or "), r.Mode, r.ID, cmp.Or(r.BootPath, "no recorded path (no boot token was served by the coordinator's boot server)"))
			q.Evidence = strings.Join(seen, "; ")
			return q
		}
	}
	q.State, q.Detail, q.Evidence = Met, "booted by "+strings.Join(want, " or "), strings.Join(seen, "; ")
	return q
}

func attested(ev Evidence) Requirement {
	q := Requirement{Name: ReqAttestation}
	r := ev.Acceptance
	if r == nil || isActive(r) && len(ev.Attestations) == 0 {
		q.State, q.Detail = Pending, "waiting for the acceptance run's attested boot"
		return q
	}
	q.RunID = r.ID
	if len(ev.Attestations) == 0 {
		q.State, q.Detail = Failed, fmt.Sprintf("acceptance run %s has no attested boot on record", r.ID)
		return q
	}
	for _, a := range ev.Attestations {
		if a.Status != "passed" {
			q.State, q.Detail = Failed, fmt.Sprintf("boot %s attestation %s: %s", a.BootID, a.Status, a.Detail)
			q.Evidence = "boot " + a.BootID
			return q
		}
		q.Evidence = "EK sha256 " + a.EKSHA256
	}
	q.State, q.Detail = Met, fmt.Sprintf("%d boot(s) of run %s attested", len(ev.Attestations), r.ID)
	return q
}

func measurements(ev Evidence) Requirement {
	q := Requirement{Name: ReqMeasurements}
	if ev.Hold != "" {
		q.State, q.RunID, q.Detail = Failed, ev.HoldRun, "measurement hold: "+ev.Hold+" (curectl nodes accept-measurements, or reflash)"
		return q
	}
	q.State, q.Detail = Met, "no firmware measurement drift on hold"
	return q
}

func acceptance(p *manifests.Admission, ev Evidence) Requirement {
	acc := p.Acceptance
	q := Requirement{Name: ReqAcceptance}
	r := ev.Acceptance
	if r == nil {
		q.State, q.Detail = Pending, fmt.Sprintf("no %s run of suite %s since the provision", acc.Mode, acc.Suite)
		return q
	}
	q.RunID = r.ID
	if isActive(r) {
		q.State, q.Detail = Pending, fmt.Sprintf("%s run %s of suite %s under way", r.Mode, r.ID, acc.Suite)
		return q
	}
	var bad []string
	passed := 0
	for _, v := range ev.Verdicts {
		if FailsGate(v.Status) {
			bad = append(bad, fmt.Sprintf("%s %s %s", v.Component, v.Check, runstate.VerdictName(v.Status)))
		}
		if v.Status == curev1.VerdictStatus_PASS || v.Status == curev1.VerdictStatus_MATCH {
			passed++
		}
	}
	switch {
	case len(bad) > 0:
		q.State, q.Detail, q.Evidence = Failed, fmt.Sprintf("suite %s run %s %s", acc.Suite, r.ID, runstate.RunName(r.Status)), Summary(bad, 8)
	case r.Status != curev1.RunStatus_RUN_SUCCEEDED:
		q.State, q.Detail = Failed, fmt.Sprintf("suite %s run %s %s: %s", acc.Suite, r.ID, runstate.RunName(r.Status), r.Message)
	case passed == 0:
		// Every check optional and skipped, or none reported: nothing shown.
		q.State, q.Detail = Failed, fmt.Sprintf("suite %s run %s succeeded with no passing verdict (%d verdicts): it proved nothing", acc.Suite, r.ID, len(ev.Verdicts))
	case ev.ChangedAfter != "":
		q.State, q.Detail = Pending, fmt.Sprintf("suite %s run %s passed, but %s: it runs again", acc.Suite, r.ID, ev.ChangedAfter)
	case ev.Now.Sub(r.EndedAt) > time.Duration(acc.MaxAge):
		q.State, q.Detail = Pending, fmt.Sprintf("suite %s run %s passed %s, older than %s: it runs again", acc.Suite, r.ID, r.EndedAt.UTC().Format(time.RFC3339), time.Duration(acc.MaxAge))
	default:
		q.State, q.Detail, q.Evidence = Met, fmt.Sprintf("suite %s passed %s", acc.Suite, r.EndedAt.UTC().Format(time.RFC3339)), fmt.Sprintf("%d verdicts, %d passing, none FAIL, ERROR or MARGINAL", len(ev.Verdicts), passed)
	}
	return q
}

func fleetBand(p *manifests.Admission, ev Evidence) Requirement {
	q := Requirement{Name: ReqFleetBand}
	r := ev.Acceptance
	if r == nil || isActive(r) {
		q.State, q.Detail = Pending, "waiting for the acceptance run"
		return q
	}
	q.RunID = r.ID
	required := p.FleetBand == manifests.FleetBandRequired
	switch f := ev.Fleet; {
	case !f.Bands && required:
		q.State, q.Detail = Failed, fmt.Sprintf("the SKU requires a fleet band but suite %s names none (set fleetBand: ifAvailable, or give the suite bands)", p.Acceptance.Suite)
	case !f.Bands:
		q.State, q.Detail = Met, "suite names no fleet band (absolute bars only)"
	case !f.Judged:
		q.State, q.Detail = Error, fmt.Sprintf("run %s has no fleet judgement on record", r.ID)
	case f.NotApplied != "" && required:
		q.State, q.Detail = Pending, f.NotApplied+": the node waits until the band has its nodes and is judged again"
	case f.NotApplied != "":
		q.State, q.Detail = Met, f.NotApplied+" (admitted on its absolute bars; judged again when the band fills)"
	default:
		q.State, q.Detail = Met, "within the SKU's fleet band"
	}
	return q
}

func isActive(r *Run) bool {
	return r.Status == curev1.RunStatus_RUN_RUNNING || r.Status == curev1.RunStatus_RUN_PENDING
}

// Summary joins the first n of items and counts the rest (a reason
// stays one readable line however many verdicts failed).
func Summary(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, "; ")
	}
	return fmt.Sprintf("%s; and %d more", strings.Join(items[:n], "; "), len(items)-n)
}
