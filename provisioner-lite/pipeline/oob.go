package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/manifests/fwplan"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// oobFirmware is the bmc, bios and hgx phase: compare, and in provision
// mode push, follow the task, activate, and verify the running version.
func (e *Engine) oobFirmware(ctx context.Context, r *store.Run, component string) outcome {
	_, sku, err := e.cfg.Manifests.Load(r.Manifest)
	if err != nil {
		return failed("%v", err)
	}
	want := sku.FirmwareVia(component, manifests.ViaRedfish)
	if len(want) == 0 {
		return skipped("manifest pins no %s firmware", component)
	}
	inv, err := e.firmwareInventory(ctx, r)
	if err != nil {
		return failed("read FirmwareInventory: %v", err)
	}
	rows, deltas := planOOB(component, want, inv)
	var errs []string
	for _, row := range rows {
		e.verdict(ctx, r, row.component, "firmware", row.status, row.observed, row.expected, row.msg)
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
	if !modes.FlashesFirmware(modes.Mode(r.Mode)) {
		return ok("%d drifted, %d error (reported only): %s", len(drifted), len(errs), strings.Join(drifted, ", "))
	}
	if len(errs) > 0 {
		return failed("%s: %s", component, strings.Join(errs, "; "))
	}
	var done []string
	for _, d := range deltas {
		res := e.applyOOB(ctx, r, component, d)
		if res.status == curev1.PhaseStatus_PHASE_FAILED {
			return res
		}
		done = append(done, res.msg)
	}
	return ok("%s", strings.Join(done, "; "))
}

// applyOOB pushes one manifest entry's image to its drifted members,
// activates it and verifies. A submission whose answer was lost is never
// resubmitted blindly: the BMC's task list is searched first.
func (e *Engine) applyOOB(ctx context.Context, r *store.Run, component string, d oobDelta) outcome {
	fw := d.fw
	if fw.Artifact == nil {
		return failed("%s drifted but names no artifact", fw.Name)
	}
	if err := modes.CheckWrite(modes.Mode(r.Mode), component+" firmware update"); err != nil {
		return failed("%v", err)
	}
	var targets []string
	for _, t := range d.targets {
		targets = append(targets, t.ID)
	}
	imageURI := fw.Artifact.URL
	if imageURI == "" {
		imageURI = strings.TrimRight(e.bmcBaseURL(), "/") + "/artifacts/sha256/" + fw.Artifact.SHA256
	}
	casPath := filepath.Join(e.cfg.ArtifactDir, "sha256", fw.Artifact.SHA256)

	// A previous attempt (before a crash, a restart or a lost response)
	// may already have flashed: look before pushing again.
	if prev := r.Pipeline.Submission(fw.Name); prev != "" {
		done, pending, err := e.oobState(ctx, r, fw, targets)
		if err != nil {
			e.verdict(ctx, r, component, "firmware_update", curev1.VerdictStatus_ERROR, "", fwplan.Expected(&fw), fmt.Sprintf("%s: after an earlier submission (%s): %v", fw.Name, prev, err))
			return failed("%s: after an earlier submission (%s): %v", fw.Name, prev, err)
		}
		if done || pending {
			e.coordEvent(ctx, *r, component, runstate.EventInfo, "", fmt.Sprintf("%s: earlier submission (%s) already took effect (done=%t staged=%t); not flashing again", fw.Name, prev, done, pending), 0)
			return e.activateOOB(ctx, r, component, fw, targets, !done)
		}
	}
	e.firmwareChanged(ctx, r, fmt.Sprintf("%s firmware update %s", component, fw.Name))
	r.Pipeline.SetSubmission(fw.Name, "submitting "+time.Now().UTC().Format(time.RFC3339))
	e.save(ctx, r)
	var result *redfish.TaskResult
	err := e.withBMCFor(ctx, r, 4*e.cfg.Timeouts.BMCCall+e.cfg.Timeouts.BMCTask, func(ctx context.Context, b BMC) error {
		caps, err := b.UpdateService(ctx)
		if err != nil {
			return err
		}
		var job *redfish.Job
		switch {
		case caps.SimpleUpdateFetches(imageURI):
			// The BMC pulls from the artifact server: nothing streams
			// through the coordinator.
			job, err = b.SimpleUpdate(ctx, imageURI, targets, "")
		case caps.MultipartPushURI != "":
			f, ferr := os.Open(casPath)
			if ferr != nil {
				return fmt.Errorf("multipart push needs the image locally: %w", ferr)
			}
			defer f.Close()
			job, err = b.MultipartPush(ctx, f, fw.Artifact.Size, targets)
		default:
			return fmt.Errorf("BMC offers neither a SimpleUpdate that can fetch %s (TransferProtocols %v) nor MultipartHttpPushUri", imageURI, caps.TransferProtocols)
		}
		var ue *redfish.UnknownOutcomeError
		if errors.As(err, &ue) {
			e.coordEvent(ctx, *r, component, runstate.EventLog, "WARN", fmt.Sprintf("%s: update submission outcome unknown (%v); searching the BMC's tasks before any retry", fw.Name, err), 0)
			job, err = b.RecoverJob(ctx, ue)
			if err == nil && job == nil {
				return fmt.Errorf("submission was not taken by the BMC (no new task): safe to retry")
			}
		}
		if err != nil {
			return err
		}
		r.Pipeline.SetSubmission(fw.Name, "submitted task "+nonEmpty(job.TaskURI, job.MonitorURI))
		e.save(ctx, r)
		result, err = b.WaitTask(ctx, job, e.cfg.Timeouts.TaskPoll)
		return err
	})
	if err != nil {
		return failed("%s: %v", fw.Name, err)
	}
	e.coordEvent(ctx, *r, component, runstate.EventInfo, "", fmt.Sprintf("%s: update task %s (%s)", fw.Name, result.State, strings.Join(result.Messages, "; ")), 0)
	return e.activateOOB(ctx, r, component, fw, targets, true)
}

// firmwareInventory reads the BMC's FirmwareInventory.
func (e *Engine) firmwareInventory(ctx context.Context, r *store.Run) ([]redfish.FirmwareItem, error) {
	var inv []redfish.FirmwareItem
	err := e.withBMC(ctx, r, func(ctx context.Context, b BMC) error {
		var err error
		inv, err = b.FirmwareInventory(ctx)
		return err
	})
	return inv, err
}

// oobState reads the inventory: whether the targets run the desired
// version, or have it staged for the next activation (stagedState). An
// unreadable inventory is neither: the caller submits again.
func (e *Engine) oobState(ctx context.Context, r *store.Run, fw manifests.Firmware, targets []string) (done, pending bool, err error) {
	inv, err := e.firmwareInventory(ctx, r)
	if err != nil {
		return false, false, nil
	}
	return stagedState(&fw, verifyMembers(inv, fw, targets))
}

// activateOOB makes a staged image run (BMC reset, or a host reboot that
// comes back into CURE) and verifies every target's version.
func (e *Engine) activateOOB(ctx context.Context, r *store.Run, component string, fw manifests.Firmware, targets []string, needActivation bool) outcome {
	if needActivation {
		switch fw.Activation {
		case "bmc-reset":
			err := e.withBMCFor(ctx, r, 4*e.cfg.Timeouts.BMCCall+e.cfg.Timeouts.BMCReset, func(ctx context.Context, b BMC) error {
				// Recorded first: whoever drives the run next waits for the
				// BMC to return before talking to it (see withBMC).
				r.Pipeline.BMC.ResetAt = time.Now().UTC()
				e.save(ctx, r)
				if err := b.ResetManager(ctx, "GracefulRestart"); err != nil {
					return err
				}
				// The BMC's own budget: it is gone for minutes on real hardware.
				return b.WaitBMC(ctx, e.cfg.Timeouts.BMCReset)
			})
			if err != nil {
				return failed("%s: BMC reset to activate: %v", fw.Name, err)
			}
			r.Pipeline.BMC.ResetAt = time.Time{}
			r.Pipeline.BMC.Resets++
			e.save(ctx, r)
		case "host-reboot":
			if err := e.rebootIntoCURE(ctx, r, fw.Name+" activates on host reboot"); err != nil {
				return failed("%v", err)
			}
			if out := e.waitForNewCURE(ctx, r); out.status == curev1.PhaseStatus_PHASE_FAILED {
				return out
			}
		}
	}
	inv, err := e.firmwareInventory(ctx, r)
	if err != nil {
		return failed("%s: read back FirmwareInventory: %v", fw.Name, err)
	}
	rows, bad := confirmOOB(component, &fw, inv, targets)
	for _, row := range rows {
		e.verdict(ctx, r, row.component, "firmware_update", row.status, row.observed, row.expected, row.msg)
	}
	r.Pipeline.SetSubmission(fw.Name, "")
	e.save(ctx, r)
	if len(bad) > 0 {
		return failed("%s: %s", fw.Name, strings.Join(bad, "; "))
	}
	return ok("%s: %d updated to %s (%s)", fw.Name, len(rows), fw.Version, nonEmpty(fw.Activation, "no activation"))
}

// waitForNewCURE waits for a runner of this run that connected after the
// last reboot request.
func (e *Engine) waitForNewCURE(ctx context.Context, r *store.Run) outcome {
	since := r.Pipeline.BootRequestedAt
	deadline := time.Now().Add(e.cfg.Timeouts.WaitForCURE)
	for {
		changed := e.cfg.Hub.Changed(r.NodeID)
		if s := e.cfg.Hub.Current(r.NodeID); s != nil && s.RunID == r.ID && s.ConnectedAt.After(since) {
			return ok("back in CURE: boot_id=%s", s.BootID)
		}
		if time.Now().After(deadline) {
			return failed("node did not come back into CURE within %s after the reboot", e.cfg.Timeouts.WaitForCURE)
		}
		select {
		case <-ctx.Done():
			return failed("stopped")
		case <-changed:
		case <-time.After(time.Until(deadline)):
		}
	}
}

// biosSettings applies only the attributes that differ, through the
// @Redfish.Settings object (staged until the next boot), reboots back into
// CURE, and verifies every attribute.
func (e *Engine) biosSettings(ctx context.Context, r *store.Run) outcome {
	_, sku, err := e.cfg.Manifests.Load(r.Manifest)
	if err != nil {
		return failed("%v", err)
	}
	if sku.Spec.BIOS == nil || len(sku.Spec.BIOS.Settings) == 0 {
		return skipped("manifest sets no BIOS attributes")
	}
	desired := sku.Spec.BIOS.Settings
	var current map[string]any
	if err := e.withBMC(ctx, r, func(ctx context.Context, b BMC) error {
		current, err = b.BiosAttributes(ctx)
		return err
	}); err != nil {
		return failed("read BIOS attributes: %v", err)
	}
	changes, matches := redfish.PlanBios(current, desired)
	if len(changes) == 0 {
		e.verdict(ctx, r, "bios", "settings", curev1.VerdictStatus_MATCH, fmt.Sprintf("%d attributes", len(matches)), fmt.Sprintf("%d attributes", len(desired)), "all attributes match")
		return skipped("all %d BIOS attributes match", len(matches))
	}
	keys := sortedKeys(changes)
	var diff []string
	for _, k := range keys {
		diff = append(diff, fmt.Sprintf("%s=%v (is %v)", k, changes[k], current[k]))
	}
	if !modes.FlashesFirmware(modes.Mode(r.Mode)) {
		e.verdict(ctx, r, "bios", "settings", curev1.VerdictStatus_DRIFT, strings.Join(diff, ", "), "", "reported only")
		return ok("%d BIOS attributes drifted (reported only): %s", len(changes), strings.Join(diff, ", "))
	}
	e.firmwareChanged(ctx, r, fmt.Sprintf("%d BIOS attributes", len(changes)))
	if err := e.withBMC(ctx, r, func(ctx context.Context, b BMC) error { return b.SetBiosAttributes(ctx, changes) }); err != nil {
		return failed("stage BIOS attributes: %v", err)
	}
	if err := e.rebootIntoCURE(ctx, r, fmt.Sprintf("%d BIOS attributes apply on reset", len(changes))); err != nil {
		return failed("%v", err)
	}
	if out := e.waitForNewCURE(ctx, r); out.status == curev1.PhaseStatus_PHASE_FAILED {
		return out
	}
	if err := e.withBMC(ctx, r, func(ctx context.Context, b BMC) error {
		current, err = b.BiosAttributes(ctx)
		return err
	}); err != nil {
		return failed("read back BIOS attributes: %v", err)
	}
	if left, _ := redfish.PlanBios(current, desired); len(left) > 0 {
		var miss []string
		for _, k := range sortedKeys(left) {
			miss = append(miss, fmt.Sprintf("%s is %v, want %v", k, current[k], left[k]))
		}
		e.verdict(ctx, r, "bios", "settings", curev1.VerdictStatus_FAIL, strings.Join(miss, ", "), "", "attributes did not apply after the reboot")
		return failed("BIOS attributes not applied after reboot: %s", strings.Join(miss, "; "))
	}
	e.verdict(ctx, r, "bios", "settings", curev1.VerdictStatus_PASS, strings.Join(keys, ","), "", fmt.Sprintf("%d changed, %d already matched; verified after reboot", len(changes), len(matches)))
	return ok("%d BIOS attributes applied and verified: %s", len(changes), strings.Join(keys, ", "))
}

// firmwareChanged notes, before the change is made, that the pipeline is
// changing the node's firmware or its settings: the next attested boot
// re-records the firmware measurements (PCRs 0-3, 7) instead of flagging
// a drift.
func (e *Engine) firmwareChanged(ctx context.Context, r *store.Run, reason string) {
	if err := e.cfg.Store.FirmwareChanged(context.WithoutCancel(ctx), r.NodeID, r.ID, reason); err != nil {
		e.cfg.Log.Error("firmware change not noted: the next boot may flag its own measurements as drift", "err", err)
	}
}

func (e *Engine) bmcBaseURL() string {
	if e.cfg.BMCBaseURL != "" {
		return e.cfg.BMCBaseURL
	}
	return e.cfg.BaseURL
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
