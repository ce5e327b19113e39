package phases

import (
	"context"
	"fmt"
	"path"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/runner/inventory"
	"github.com/cure-oss/cure/tools/pci"
)

// NVMeCheck is the plan for one (manifest entry, controller) pair, or for
// an entry that matched no controller (Controller nil).
type NVMeCheck struct {
	Entry      manifests.Firmware
	Controller *inventory.Controller
	Status     curev1.VerdictStatus // MATCH, DRIFT or ERROR
	Observed   string
	Message    string
}

// Component is the verdict component: nvme/<index>, or "nvme" when no
// controller matched.
func (c NVMeCheck) Component() string {
	if c.Controller == nil {
		return "nvme"
	}
	return fmt.Sprintf("nvme/%d", c.Controller.Index)
}

// PlanNVMe compares the running firmware of every controller with the
// manifest entries of component nvme. A controller is judged by the first
// entry that matches it; an entry that matches nothing is an ERROR check
// naming its selector. It is pure: no device access.
func PlanNVMe(entries []manifests.Firmware, ctrls []*inventory.Controller) []NVMeCheck {
	var out []NVMeCheck
	taken := map[int]bool{}
	for _, fw := range entries {
		n := 0
		for _, c := range ctrls {
			if taken[c.Index] {
				continue
			}
			ok, err := matchController(fw.Match, c)
			if err != nil {
				out = append(out, NVMeCheck{Entry: fw, Status: curev1.VerdictStatus_ERROR, Message: fmt.Sprintf("firmware entry %q: %v", fw.Name, err)})
				n = -1
				break
			}
			if !ok {
				continue
			}
			taken[c.Index] = true
			n++
			st, msg := gate(fw, c.Firmware())
			out = append(out, NVMeCheck{
				Entry: fw, Controller: c, Status: st, Observed: c.Firmware(),
				Message: fmt.Sprintf("%s model %q serial %q (from %s): %s", c.Info.Name, c.Model(), c.Serial(), c.Source(), msg),
			})
		}
		if n == 0 {
			out = append(out, NVMeCheck{Entry: fw, Status: curev1.VerdictStatus_ERROR,
				Message: fmt.Sprintf("firmware entry %q: no NVMe controller matches %s (controllers seen: %s)", fw.Name, selector(fw.Match), seen(ctrls))})
		}
	}
	return out
}

func selector(m manifests.Match) string {
	var p []string
	if m.Model != "" {
		p = append(p, fmt.Sprintf("model=%q", m.Model))
	}
	if m.VendorID != "" {
		p = append(p, fmt.Sprintf("vendorId=%q", m.VendorID))
	}
	if len(p) == 0 {
		return "{any}"
	}
	return "{" + strings.Join(p, " ") + "}"
}

func seen(ctrls []*inventory.Controller) string {
	if len(ctrls) == 0 {
		return "none"
	}
	var p []string
	for _, c := range ctrls {
		p = append(p, fmt.Sprintf("%s %q vid %#04x", c.Info.Name, c.Model(), c.VendorID()))
	}
	return strings.Join(p, ", ")
}

// matchController applies the model glob and vendor id of m.
func matchController(m manifests.Match, c *inventory.Controller) (bool, error) {
	if m.Model != "" {
		ok, err := path.Match(m.Model, strings.TrimSpace(c.Model()))
		if err != nil {
			return false, fmt.Errorf("match.model %q: %w", m.Model, err)
		}
		if !ok {
			return false, nil
		}
	}
	if m.VendorID != "" {
		v, err := pci.ParseVendorID(m.VendorID)
		if err != nil {
			return false, fmt.Errorf("match.vendorId: %w", err)
		}
		if v != c.VendorID() {
			return false, nil
		}
	}
	return true, nil
}

// gate decides MATCH, DRIFT or ERROR for a running version: ERROR when the
// manifest's gate cannot order the versions (an unparseable value under
// at-least, different families), never a silent DRIFT.
func gate(fw manifests.Firmware, running string) (curev1.VerdictStatus, string) {
	ok, err := fw.Satisfied(running)
	switch {
	case err != nil:
		return curev1.VerdictStatus_ERROR, err.Error()
	case ok && fw.Gate == manifests.GateAtLeast:
		return curev1.VerdictStatus_MATCH, fmt.Sprintf("running %s is at least %s", running, fw.Version)
	case ok:
		return curev1.VerdictStatus_MATCH, "running version equals desired"
	case fw.Gate == manifests.GateAtLeast:
		return curev1.VerdictStatus_DRIFT, fmt.Sprintf("running %s is older than %s", running, fw.Version)
	}
	return curev1.VerdictStatus_DRIFT, fmt.Sprintf("running %s, desired %s", running, fw.Version)
}

// GateVerdict is the verdict the runner gives a component running version
// running against fw (TestVersionFormsAgree holds it to the coordinator's).
func GateVerdict(fw manifests.Firmware, running string) (curev1.VerdictStatus, string) {
	return gate(fw, running)
}

func expected(fw manifests.Firmware) string {
	if fw.Gate == manifests.GateAtLeast {
		return ">= " + fw.Version
	}
	return fw.Version
}

// runNVMe reports a verdict per controller. In provision mode a DRIFT fails
// the phase (the in-band update is not built yet); in other modes DRIFT is
// only reported.
func (e *Executor) runNVMe(ctx context.Context, a *curev1.Assignment, emit agent.Emitter) agent.PhaseOutcome {
	sku, err := e.sku(a)
	if err != nil {
		return failed("nvme: %v", err)
	}
	entries := sku.FirmwareFor(manifests.ComponentNVMe)
	if len(entries) == 0 {
		return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_SKIPPED, Message: fmt.Sprintf("manifest %s declares no nvme firmware: nothing to check", sku.Metadata.Name)}
	}
	if e.cfg.Controllers == nil {
		return failed("nvme: runner has no NVMe controller source configured")
	}
	ctrls, err := e.cfg.Controllers()
	if err != nil {
		return failed("nvme: listing controllers: %v", err)
	}
	if err := ctx.Err(); err != nil {
		return failed("nvme: %v", err)
	}
	checks := PlanNVMe(entries, ctrls)
	js := make([]judged, 0, len(checks))
	for _, c := range checks {
		js = append(js, judged{&curev1.Verdict{Component: c.Component(), Check: "firmware", Status: c.Status,
			Observed: c.Observed, Expected: expected(c.Entry), Message: c.Message}, c.Entry.Version})
	}
	drift, errs, _ := tally(emit, js)
	provision := a.GetMode() == curev1.Mode_MODE_PROVISION
	if provision && len(errs) > 0 {
		return failed("nvme: %s", strings.Join(errs, "; "))
	}
	if provision && len(drift) > 0 {
		var ups []update
		for _, c := range checks {
			if c.Status == curev1.VerdictStatus_DRIFT {
				ups = append(ups, update{c.Component(), func() (*curev1.Verdict, bool) { return e.updateNVMe(ctx, a, c) }})
			}
		}
		return applyUpdates("nvme firmware update", "updated", ups, emit)
	}
	if len(drift) == 0 && len(errs) == 0 {
		// Idempotence: a component already at the target is skipped, and
		// the timeline says so.
		return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_SKIPPED, Message: fmt.Sprintf("all %d controller(s) match the manifest: nothing to update", len(checks))}
	}
	msg := fmt.Sprintf("%d controller(s) checked: %d drift, %d error", len(ctrls), len(drift), len(errs))
	if len(drift) > 0 {
		msg += " (" + strings.Join(drift, ", ") + "; reported only in " + a.GetMode().String() + ")"
	}
	return agent.PhaseOutcome{Status: curev1.PhaseStatus_PHASE_OK, Message: msg}
}
