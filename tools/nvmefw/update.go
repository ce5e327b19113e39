package nvmefw

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cure-oss/cure/tools/nvme"
)

// Report is the outcome of Update for one controller.
type Report struct {
	Plan   *Plan
	Result *Result   // nil when the plan was a no-op
	Final  *Observed // read back after activation; nil when a reboot is pending
	// RebootRequired: committed, but only a host reboot activates the
	// image; re-running Update after the reboot verifies (and is a no-op).
	RebootRequired bool
}

// UpdateOptions configure Update.
type UpdateOptions struct {
	Plan     Options
	Progress Progress
	// ResetWait bounds waiting for the controller to answer after a reset
	// (default 60 s).
	ResetWait time.Duration
	// Poll is the retry interval while the controller re-initialises
	// (default 500 ms).
	Poll time.Duration
	Log  *slog.Logger
}

// Update plans, applies, performs the reset the commit asks for (controller
// or subsystem; a conventional reset is left to the caller as
// RebootRequired) and verifies the running revision. a and r address the
// same controller.
func Update(ctx context.Context, a nvme.Admin, r Resetter, target string, image []byte, o UpdateOptions) (*Report, error) {
	lg := o.Log
	if lg == nil {
		lg = slog.Default()
	}
	if o.ResetWait == 0 {
		o.ResetWait = 60 * time.Second
	}
	c, log, err := Read(a)
	if err != nil {
		return nil, fmt.Errorf("nvme firmware update: read state: %w", err)
	}
	p, err := PlanUpdate(c, log, target, len(image), o.Plan)
	if err != nil {
		return nil, err
	}
	rep := &Report{Plan: p}
	lg.Info("nvme firmware plan", "model", c.MN, "serial", c.SN, "plan", p.String())
	if p.Noop {
		return rep, nil
	}
	res, err := Apply(ctx, a, p, image, o.Progress)
	if err != nil {
		return rep, err
	}
	rep.Result = res
	lg.Info("nvme firmware committed", "slot", res.Slot, "after", res.After.String(), "notes", res.Notes)
	switch res.After {
	case AfterNothing:
	case AfterControllerReset:
		if err := r.ResetController(); err != nil {
			return rep, fmt.Errorf("nvme firmware update: activate slot %d: %w", res.Slot, err)
		}
	case AfterSubsystemReset:
		if err := r.ResetSubsystem(); err != nil {
			// Not every controller implements NSSR; a reboot includes one.
			lg.Warn("nvme subsystem reset failed; a reboot activates the image", "err", err)
			rep.RebootRequired = true
			return rep, nil
		}
	case AfterConventionalReset:
		rep.RebootRequired = true
		return rep, nil
	}
	vctx, cancel := context.WithTimeout(ctx, o.ResetWait)
	defer cancel()
	fin, err := Verify(vctx, a, p.Target, res.Slot, o.Poll)
	rep.Final = fin
	if err != nil {
		return rep, err
	}
	return rep, nil
}
