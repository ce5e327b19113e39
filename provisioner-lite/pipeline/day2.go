package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// The day-2 side of the phase executors: service mode returns a deployed
// node to the OS a provision installed, and a suite ends by its policy
// (spec.end). Neither writes a disk: the installed OS is verified by the
// callback token it already holds (its provision's, whose digest the
// store kept as the node's installed OS, docs/SECURITY.md).

// suiteMode says whether r runs a ValidationSuite (diagnostic, burn-in).
func suiteMode(r *store.Run) bool {
	m := r.Mode
	return m == modes.Diagnostic || m == modes.Burnin
}

// suiteEnd is the end policy of a suite run's suite.
func (d *day2Ctl) suiteEnd(r *store.Run) (string, error) {
	_, doc, err := d.cfg.Manifests.LoadDocument(r.Manifest)
	if err != nil {
		return "", err
	}
	if doc.Suite == nil {
		return "", fmt.Errorf("mode %s needs a ValidationSuite; %s is a %s", r.Mode, r.Manifest, doc.Kind)
	}
	return doc.Suite.Spec.EndPolicy(), nil
}

// endSkip is the outcome of an end phase a suite's policy does not take,
// or nil when the phase runs (not a suite run, or its policy is want).
func (d *day2Ctl) endSkip(r *store.Run, want string) *outcome {
	if !suiteMode(r) {
		return nil
	}
	end, err := d.suiteEnd(r)
	if err != nil {
		out := failedFinal(operatorFix, "%v", err)
		return &out
	}
	if end == want {
		return nil
	}
	out := skipped("suite %s ends with %s (spec.end)", r.Manifest, end)
	return &out
}

// setBootDiskAtEnd is set_boot_order_disk: provision's and service's, and
// a suite's that ends in the host OS.
func (d *day2Ctl) setBootDiskAtEnd(ctx context.Context, r *store.Run, phase modes.PhaseName) outcome {
	if out := d.endSkip(r, manifests.EndHostOS); out != nil {
		return *out
	}
	return d.power.setBootDisk(ctx, r, phase)
}

// powerOffByPolicy is power_off: wipe's, and a suite's that ends powered off.
func (d *day2Ctl) powerOffByPolicy(ctx context.Context, r *store.Run, phase modes.PhaseName) outcome {
	if out := d.endSkip(r, manifests.EndPowerOff); out != nil {
		return *out
	}
	return d.power.powerOffAtEnd(ctx, r, phase)
}

// waitForHostOSPhase is wait_for_host_os. A provision waits for the token
// its os_install wrote; any other mode for the token of the OS on record
// (the node's provision's), added to the run's host tokens. A suite run
// on a node with no OS on record boots it from disk without waiting.
func (d *day2Ctl) waitForHostOSPhase(ctx context.Context, r *store.Run, _ modes.PhaseName) outcome {
	if out := d.endSkip(r, manifests.EndHostOS); out != nil {
		return *out
	}
	if r.Mode != modes.Provision {
		os, err := d.cfg.Store.InstalledOS(ctx, r.NodeID)
		switch {
		case errors.Is(err, store.ErrNotFound) && suiteMode(r):
			if _, err := d.host.rebootOutOfCURE(ctx, r); err != nil {
				return failed("%v", err)
			}
			return ok("booted from disk; no installed OS on record to call back (the node was not provisioned by this coordinator since its disk was last written)")
		case errors.Is(err, store.ErrNotFound):
			return failedFinal(operatorFix, "%v: mode %s returns a node to the OS a provision installed", err, r.Mode)
		case err != nil:
			return failed("%v", err)
		}
		if !slices.Contains(r.Pipeline.HostTokens, os.TokenHash) {
			r.Pipeline.AddHostToken(os.TokenHash)
			d.save(ctx, r)
		}
	}
	return d.host.waitForHostOS(ctx, r)
}

// servicePreflight refuses a service run on a node with no installed OS on
// record: service never writes the disk, so it can only return the node to
// an OS whose callback token the coordinator knows.
func (d *day2Ctl) servicePreflight(ctx context.Context, r *store.Run) (outcome, bool) {
	if r.Mode != modes.Service {
		return outcome{}, false
	}
	os, err := d.cfg.Store.InstalledOS(ctx, r.NodeID)
	if errors.Is(err, store.ErrNotFound) {
		return failedFinal(operatorFix, "%v: service returns a node to the OS a provision by this coordinator installed (and which called back); provision it first", err), true
	}
	if err != nil {
		return failed("%v", err), true
	}
	d.coordEvent(ctx, *r, modes.Preflight, runstate.EventInfo, "", fmt.Sprintf("installed OS on record: provisioned by run %s at %s", os.RunID, os.InstalledAt.Format("2006-01-02 15:04:05Z07:00")), 0)
	return outcome{}, false
}

// forgetInstalledOS drops the node's installed OS before an assignment
// that writes or erases its disk (os_install, or sed_revert in a mode that
// wipes): its callback token will not be on the disk any more.
func (d *day2Ctl) forgetInstalledOS(ctx context.Context, r *store.Run, phases []modes.PhaseName) error {
	m := r.Mode
	if !slices.Contains(phases, modes.OSInstall) && !(slices.Contains(phases, modes.SEDRevert) && modes.CheckWipe(m) == nil) {
		return nil
	}
	return d.cfg.Store.ForgetInstalledOS(ctx, r.NodeID)
}

// recordInstalledOS keeps the digest of the token a provision's installed
// OS called back with: the OS holds it, so a later service run (or a suite
// ending in the host OS) can verify that OS's callback without writing
// its disk.
func (d *day2Ctl) recordInstalledOS(ctx context.Context, r store.Run, digest string) {
	if r.Mode != modes.Provision {
		return
	}
	if err := d.cfg.Store.SetInstalledOS(ctx, store.InstalledOS{NodeID: r.NodeID, TokenHash: digest, RunID: r.ID}); err != nil {
		d.cfg.Log.Error("record installed OS", "run", r.ID, "node", r.NodeID, "err", err)
	}
}
