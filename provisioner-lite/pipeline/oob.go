package pipeline

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// oobFirmware is the bmc, bios and hgx phase: compare, and in provision
// mode push, follow the task, activate, and verify the running version.
func (o *oobCtl) oobFirmware(ctx context.Context, r *store.Run, component string) outcome {
	_, sku, err := o.cfg.Manifests.Load(r.Manifest)
	if err != nil {
		return failed("%v", err)
	}
	want := sku.FirmwareVia(component, manifests.ViaRedfish)
	if len(want) == 0 {
		return skipped("manifest pins no %s firmware", component)
	}
	inv, err := o.firmwareInventory(ctx, r)
	if err != nil {
		return failed("read FirmwareInventory: %v", err)
	}
	rows, deltas := planOOB(component, want, inv)
	var errs []string
	for _, row := range rows {
		o.verdict(ctx, r, row.component, "firmware", row.status, row.observed, row.expected, row.msg)
		if row.status == curev1.VerdictStatus_ERROR {
			errs = append(errs, row.msg)
		}
	}
	if len(deltas) == 0 && len(errs) == 0 {
		return skipped("all %d %s components match", len(rows), component)
	}
	var drifted []string
	for _, d := range deltas {
		for _, t := range d.targets {
			drifted = append(drifted, fmt.Sprintf("%s %s -> %s", t.ID, t.Version, d.fw.Version))
		}
	}
	if !modes.FlashesFirmware(r.Mode) {
		return ok("%d drifted, %d error (reported only): %s", len(drifted), len(errs), strings.Join(drifted, ", "))
	}
	if len(errs) > 0 {
		return failed("%s: %s", component, strings.Join(errs, "; "))
	}
	var done []string
	for _, d := range deltas {
		res := o.applyOOB(ctx, r, component, d)
		if res.status == curev1.PhaseStatus_PHASE_FAILED {
			return res
		}
		done = append(done, res.msg)
	}
	return ok("%s", strings.Join(done, "; "))
}

// firmwareInventory reads the BMC's FirmwareInventory.
func (o *oobCtl) firmwareInventory(ctx context.Context, r *store.Run) ([]redfish.FirmwareItem, error) {
	var inv []redfish.FirmwareItem
	err := o.power.withBMC(ctx, r, func(ctx context.Context, b BMC) error {
		var err error
		inv, err = b.FirmwareInventory(ctx)
		return err
	})
	return inv, err
}

// waitForNewCURE waits for a runner of this run that connected after the
// last recorded reboot request, until that request's time plus the CURE
// budget: both from the run's status, so a coordinator that restarts mid-
// wait holds the same deadline and does not reboot again.
func (o *oobCtl) waitForNewCURE(ctx context.Context, r *store.Run) outcome {
	since := r.Pipeline.BootRequestedAt
	deadline := since.Add(o.cfg.Timeouts.WaitForCURE)
	for {
		q := o.watch(r.NodeID)
		if s := o.cfg.Hub.Current(r.NodeID); s != nil && s.RunID == r.ID && s.ConnectedAt.After(since) {
			return ok("back in CURE: boot_id=%s", s.BootID)
		}
		if !time.Now().Before(deadline) {
			return failed("node did not come back into CURE within %s after the reboot requested at %s", o.cfg.Timeouts.WaitForCURE, since.Format(time.RFC3339))
		}
		if err := q.until(ctx, deadline); err != nil {
			return failed("%v", err)
		}
	}
}

// firmwareChanged notes, before the change is made, that the pipeline is
// changing the node's firmware or its settings: the next attested boot
// re-records the firmware measurements (PCRs 0-3, 7) instead of flagging
// a drift.
func (o *oobCtl) firmwareChanged(ctx context.Context, r *store.Run, reason string) {
	if err := o.cfg.Store.FirmwareChanged(context.WithoutCancel(ctx), r.NodeID, r.ID, reason); err != nil {
		o.cfg.Log.Error("firmware change not noted: the next boot may flag its own measurements as drift", "err", err)
	}
}

func (o *oobCtl) bmcBaseURL() string {
	if o.cfg.BMCBaseURL != "" {
		return o.cfg.BMCBaseURL
	}
	return o.cfg.BaseURL
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
