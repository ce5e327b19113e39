package phases

import (
	"context"
	"fmt"
	"strings"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/manifests/fwplan"
	"github.com/cure-oss/cure/runner/agent"
	"github.com/cure-oss/cure/runner/inventory"
	"github.com/cure-oss/cure/tools/pci"
)

// nvmeKind is the NVMe controllers' firmware: one verdict per controller
// the manifest's nvme entries select, updated through the admin queue
// (nvmeupdate.go). Controllers no entry selects are not reported.
type nvmeKind struct{ e *Executor }

func (nvmeKind) Kind() string                         { return manifests.ComponentNVMe }
func (nvmeKind) Label(c *inventory.Controller) string { return fmt.Sprintf("nvme/%d", c.Index) }
func (nvmeKind) Broken(*inventory.Controller) string  { return "" }
func (nvmeKind) Unmatched(*inventory.Controller) (fwplan.Judgement, bool) {
	return fwplan.Judgement{}, false
}

func (nvmeKind) words() fwWords {
	return fwWords{devices: "controller(s)", action: "update", kind: "nvme firmware update", done: "updated"}
}

func (nvmeKind) Match(m manifests.Match, c *inventory.Controller) (bool, string, error) {
	ok, err := matchController(m, c)
	return ok, "", err
}

func (nvmeKind) Judge(fw *manifests.Firmware, c *inventory.Controller) fwplan.Judgement {
	j := fwplan.Gate(fw, c.Firmware())
	j.Message = fmt.Sprintf("%s model %q serial %q (from %s): %s", c.Info.Name, c.Model(), c.Serial(), c.Source(), j.Message)
	return j
}

func (nvmeKind) NoMatch(fw *manifests.Firmware, ctrls []*inventory.Controller) string {
	var seen []string
	for _, c := range ctrls {
		seen = append(seen, fmt.Sprintf("%s %q vid %#04x", c.Info.Name, c.Model(), c.VendorID()))
	}
	return fmt.Sprintf("firmware entry %q: no NVMe controller matches %s (controllers seen: %s)", fw.Name, fw.Match, orNone(seen, "none"))
}

func (nvmeKind) entries(sku *manifests.SKU) ([]manifests.Firmware, string) {
	return sku.FirmwareFor(manifests.ComponentNVMe), fmt.Sprintf("manifest %s declares no nvme firmware: nothing to check", sku.Metadata.Name)
}

func (k nvmeKind) observe(context.Context, []manifests.Firmware, agent.Emitter) ([]*inventory.Controller, *agent.PhaseOutcome) {
	if k.e.cfg.Controllers == nil {
		out := failed("nvme: runner has no NVMe controller source configured")
		return nil, &out
	}
	ctrls, err := k.e.cfg.Controllers()
	if err != nil {
		out := failed("nvme: listing controllers: %v", err)
		return nil, &out
	}
	return ctrls, nil
}

func (k nvmeKind) update(ctx context.Context, a *curev1.Assignment, c fwplan.Check[*inventory.Controller], _ agent.Emitter) (*curev1.Verdict, bool) {
	return k.e.updateNVMe(ctx, a, c)
}

// runNVMe reports a verdict per controller and, in provision and service modes,
// updates drifted ones; in other modes DRIFT is only reported.
func (e *Executor) runNVMe(ctx context.Context, a *curev1.Assignment, emit agent.Emitter) agent.PhaseOutcome {
	return runFirmware(ctx, e, nvmeKind{e}, a, emit)
}

// matchController applies the model glob and vendor id of m.
func matchController(m manifests.Match, c *inventory.Controller) (bool, error) {
	if ok, err := matchModel(m.Model, strings.TrimSpace(c.Model())); !ok || err != nil {
		return false, err
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
