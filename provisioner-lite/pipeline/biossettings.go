package pipeline

import (
	"context"
	"fmt"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// biosStep is what a BIOS settings apply does next.
type biosStep int

const (
	biosCompare biosStep = iota // read and compare the attributes (and stage what differs)
	biosReboot                  // staged: request the reboot that applies them
	biosAwait                   // the reboot was requested: wait for CURE, then verify
	biosUnknown                 // a stage this coordinator does not know: refuse, never guess
)

// decideBIOS is the BIOS settings phase's next step from the run's
// stored apply record: a coordinator that stops after staging reboots
// without writing again; one that stops after the reboot request waits for
// it instead of rebooting again (the pending values are not in the current
// attributes until the reboot, so comparing again would stage twice).
func decideBIOS(a store.BIOSApply, bootRequestedAt time.Time) biosStep {
	switch a.Stage {
	case store.BIOSStaged:
		return biosReboot
	case store.BIOSRebooted:
		if bootRequestedAt.Before(a.At) {
			return biosReboot // recorded, then stopped before the reboot was
		}
		return biosAwait
	case "":
		return biosCompare
	}
	return biosUnknown
}

// biosSettings applies only the attributes that differ, through the
// @Redfish.Settings object (staged until the next boot), reboots back into
// CURE, and verifies every attribute; each step recorded in the run's
// status before the next.
func (o *oobCtl) biosSettings(ctx context.Context, r *store.Run) outcome {
	_, sku, err := o.cfg.Manifests.Load(r.Manifest)
	if err != nil {
		return failed("%v", err)
	}
	if sku.Spec.BIOS == nil || len(sku.Spec.BIOS.Settings) == 0 {
		return skipped("manifest sets no BIOS attributes")
	}
	desired := sku.Spec.BIOS.Settings
	switch decideBIOS(r.Pipeline.BMC.BIOS, r.Pipeline.BootRequestedAt) {
	case biosCompare:
		out, staged := o.stageBIOS(ctx, r, desired)
		if !staged {
			return out
		}
		fallthrough
	case biosReboot:
		a := r.Pipeline.BMC.BIOS
		a.Stage, a.At = store.BIOSRebooted, time.Now().UTC()
		r.Pipeline.BMC.BIOS = a
		o.save(ctx, r)
		if err := o.power.rebootIntoCURE(ctx, r, fmt.Sprintf("%d BIOS attributes apply on reset", len(a.Changes))); err != nil {
			return failed("%v", err)
		}
	case biosAwait:
	case biosUnknown:
		return failed("BIOS settings apply recorded in stage %q, unknown to this coordinator: not acted on (an operator looks)", r.Pipeline.BMC.BIOS.Stage)
	}
	if out := o.waitForNewCURE(ctx, r); out.status == curev1.PhaseStatus_PHASE_FAILED {
		return out
	}
	return o.verifyBIOS(ctx, r, desired)
}

// stageBIOS compares the attributes and writes those that differ to the
// pending settings; staged says a reboot must apply them (otherwise out
// is the phase's end).
func (o *oobCtl) stageBIOS(ctx context.Context, r *store.Run, desired map[string]any) (out outcome, staged bool) {
	current, err := o.biosAttributes(ctx, r)
	if err != nil {
		return failed("read BIOS attributes: %v", err), false
	}
	changes, matches := redfish.PlanBios(current, desired)
	if len(changes) == 0 {
		o.verdict(ctx, r, "bios", "settings", curev1.VerdictStatus_MATCH, fmt.Sprintf("%d attributes", len(matches)), fmt.Sprintf("%d attributes", len(desired)), "all attributes match")
		return skipped("all %d BIOS attributes match", len(matches)), false
	}
	var diff []string
	for _, k := range sortedKeys(changes) {
		diff = append(diff, fmt.Sprintf("%s=%v (is %v)", k, changes[k], current[k]))
	}
	if !modes.FlashesFirmware(r.Mode) {
		o.verdict(ctx, r, "bios", "settings", curev1.VerdictStatus_DRIFT, strings.Join(diff, ", "), "", "reported only")
		return ok("%d BIOS attributes drifted (reported only): %s", len(changes), strings.Join(diff, ", ")), false
	}
	if err := modes.CheckWrite(r.Mode, "BIOS settings"); err != nil {
		return failed("%v", err), false
	}
	o.firmwareChanged(ctx, r, fmt.Sprintf("%d BIOS attributes", len(changes)))
	if err := o.power.withBMC(ctx, r, func(ctx context.Context, b BMC) error { return b.SetBiosAttributes(ctx, changes) }); err != nil {
		return failed("stage BIOS attributes: %v", err), false
	}
	r.Pipeline.BMC.BIOS = store.BIOSApply{Stage: store.BIOSStaged, At: time.Now().UTC(), Changes: changes, Matched: len(matches)}
	o.save(ctx, r)
	return outcome{}, true
}

// verifyBIOS reads the attributes back after the reboot; the apply record
// is done with either way.
func (o *oobCtl) verifyBIOS(ctx context.Context, r *store.Run, desired map[string]any) outcome {
	a := r.Pipeline.BMC.BIOS
	current, err := o.biosAttributes(ctx, r)
	if err != nil {
		return failed("read back BIOS attributes: %v", err)
	}
	r.Pipeline.BMC.BIOS = store.BIOSApply{}
	o.save(ctx, r)
	if left, _ := redfish.PlanBios(current, desired); len(left) > 0 {
		var miss []string
		for _, k := range sortedKeys(left) {
			miss = append(miss, fmt.Sprintf("%s is %v, want %v", k, current[k], left[k]))
		}
		o.verdict(ctx, r, "bios", "settings", curev1.VerdictStatus_FAIL, strings.Join(miss, ", "), "", "attributes did not apply after the reboot")
		return failed("BIOS attributes not applied after reboot: %s", strings.Join(miss, "; "))
	}
	keys := sortedKeys(a.Changes)
	o.verdict(ctx, r, "bios", "settings", curev1.VerdictStatus_PASS, strings.Join(keys, ","), "", fmt.Sprintf("%d changed, %d already matched; verified after reboot", len(a.Changes), a.Matched))
	return ok("%d BIOS attributes applied and verified: %s", len(a.Changes), strings.Join(keys, ", "))
}

// biosAttributes reads the BIOS's current attributes.
func (o *oobCtl) biosAttributes(ctx context.Context, r *store.Run) (map[string]any, error) {
	var current map[string]any
	err := o.power.withBMC(ctx, r, func(ctx context.Context, b BMC) error {
		var err error
		current, err = b.BiosAttributes(ctx)
		return err
	})
	return current, err
}
