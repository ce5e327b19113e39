package nvmefw

import (
	"context"
	"errors"
	"fmt"

	"github.com/cure-oss/cure/tools/nvme"
)

// Command-specific Firmware Commit statuses (NVMe 2.0 Figure 191), as SC
// values with SCT 1; the ioctl reports them as 0x1xx.
const (
	scInvalidSlot         = 0x06
	scInvalidImage        = 0x07
	scNeedsConventional   = 0x0b
	scNeedsSubsystemReset = 0x10
	scNeedsControllerRst  = 0x11
	scNeedsMaxTimeViolate = 0x12
	scActivationProhibit  = 0x13
	scOverlappingRange    = 0x14
)

// Result is what Apply did and what is left to the caller.
type Result struct {
	After      After
	Slot       int               // slot the image went to (resolved when the plan said 0)
	Status     *nvme.StatusError // commit status that decided After, nil on plain success
	Downloaded int               // bytes transferred
	Notes      []string
}

// Progress is told the bytes transferred so far and the total.
type Progress func(done, total int)

// Apply executes p against a: Firmware Image Download in p.Chunk pieces,
// Firmware Commit, and a check that the slot now holds the target. It
// checks ctx between commands (each command has its own ioctl timeout).
// A commit status that means "committed, activates after a reset" is a
// success whose Result.After names the reset.
func Apply(ctx context.Context, a nvme.Admin, p *Plan, image []byte, progress Progress) (*Result, error) {
	r := &Result{After: p.After, Slot: p.Slot}
	if p.Noop || !p.Commit {
		return r, nil
	}
	if p.Download {
		if len(image) != p.ImageSize {
			return nil, fmt.Errorf("nvme firmware apply: plan was made for a %d-byte image, got %d bytes", p.ImageSize, len(image))
		}
		if err := download(ctx, a, image, p.Chunk, progress); err != nil {
			return nil, err
		}
		r.Downloaded = len(image)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("nvme firmware apply: before commit: %w", err)
	}
	if err := commit(a, p, r); err != nil {
		return nil, err
	}
	if err := checkStaged(a, p, r); err != nil {
		return nil, err
	}
	return r, nil
}

// download issues Firmware Image Download (opcode 11h): CDW10 NUMD is the
// zero-based dword count, CDW11 OFST the dword offset (Figures 192-193).
// It mirrors nvme.FirmwareDownload with a context and progress.
func download(ctx context.Context, a nvme.Admin, image []byte, chunk int, progress Progress) error {
	if chunk <= 0 || chunk%4 != 0 {
		return fmt.Errorf("nvme firmware download: chunk %d is not a positive multiple of 4", chunk)
	}
	for off := 0; off < len(image); off += chunk {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("nvme firmware download stopped at offset %d of %d: %w", off, len(image), err)
		}
		end := min(off+chunk, len(image))
		part := append([]byte(nil), image[off:end]...)
		_, err := a.AdminCommand(&nvme.Command{
			Opcode:    nvme.OpFirmwareDownload,
			CDW10:     uint32(len(part)/4 - 1),
			CDW11:     uint32(off / 4),
			Data:      part,
			TimeoutMs: 120_000,
		})
		if err != nil {
			var st *nvme.StatusError
			if errors.As(err, &st) && st.SCT == nvme.SCTCommandSpecific && st.SC == scOverlappingRange {
				return fmt.Errorf("nvme firmware download at offset %d of %d: controller reports overlapping range (a stale partial download?): %w", off, len(image), err)
			}
			return fmt.Errorf("nvme firmware download at offset %d of %d (%d-byte chunks): %w", off, len(image), chunk, err)
		}
		if progress != nil {
			progress(end, len(image))
		}
	}
	return nil
}

func commit(a nvme.Admin, p *Plan, r *Result) error {
	err := nvme.FirmwareCommit(a, p.Slot, p.Action)
	if err == nil {
		return nil
	}
	var st *nvme.StatusError
	if !errors.As(err, &st) || st.SCT != nvme.SCTCommandSpecific {
		return fmt.Errorf("nvme firmware commit: %w", err)
	}
	if resetStatus(st, r) {
		return nil
	}
	switch st.SC {
	case scNeedsMaxTimeViolate:
		// Activating now would exceed MTFA; the spec asks for the commit to
		// be re-issued and the image activated by a reset.
		r.Status = st
		r.Notes = append(r.Notes, "activation now would exceed MTFA: re-issued the commit with action 2 (activate at next reset)")
		err2 := nvme.FirmwareCommit(a, p.Slot, nvme.CommitActivate)
		if err2 == nil {
			r.After = AfterControllerReset
			return nil
		}
		var st2 *nvme.StatusError
		if errors.As(err2, &st2) && st2.SCT == nvme.SCTCommandSpecific && resetStatus(st2, r) {
			return nil
		}
		return fmt.Errorf("nvme firmware commit: re-issue with action 2 after MTFA violation: %w", err2)
	case scInvalidSlot:
		return fmt.Errorf("nvme firmware commit to slot %d: slot invalid or read-only: %w", p.Slot, err)
	case scInvalidImage:
		return fmt.Errorf("nvme firmware commit: controller rejected the image (wrong model, corrupt or unsigned?): %w", err)
	case scActivationProhibit:
		return fmt.Errorf("nvme firmware commit: activation prohibited by the controller (downgrade or security policy?): %w", err)
	}
	return fmt.Errorf("nvme firmware commit: %w", err)
}

// resetStatus maps the "committed, activation requires a reset" statuses
// (SCT 1, SC 0Bh/10h/11h) onto r; false for any other status.
func resetStatus(st *nvme.StatusError, r *Result) bool {
	switch st.SC {
	case scNeedsConventional:
		r.After = AfterConventionalReset
	case scNeedsSubsystemReset:
		r.After = AfterSubsystemReset
	case scNeedsControllerRst:
		r.After = AfterControllerReset
	default:
		return false
	}
	r.Status = st
	r.Notes = append(r.Notes, fmt.Sprintf("committed; controller says activation requires a %s (%s)", r.After, st.Name()))
	return true
}

// checkStaged reads the firmware slot log after the commit: the slot must
// now report the target revision (so a mislabelled image is caught before
// any reset), and for an immediate activation it must be running.
func checkStaged(a nvme.Admin, p *Plan, r *Result) error {
	log, err := nvme.GetFirmwareLog(a)
	if err != nil {
		return fmt.Errorf("nvme firmware: after commit: %w", err)
	}
	if r.Slot == 0 {
		// The controller chose: find the slot that now holds the target.
		for i, rev := range log.Slots {
			if rev == p.Target {
				r.Slot = i + 1
				break
			}
		}
		if r.Slot == 0 {
			return fmt.Errorf("nvme firmware: after commit to slot 0 no slot reports %q (slots %q)", p.Target, log.Slots)
		}
	}
	if got := log.Slots[r.Slot-1]; got != p.Target {
		return fmt.Errorf("nvme firmware: after commit slot %d reports revision %q, expected %q: the image does not carry the target revision", r.Slot, got, p.Target)
	}
	if r.After == AfterNothing && log.ActiveSlot != r.Slot {
		return fmt.Errorf("nvme firmware: commit action 3 succeeded but active slot is %d, expected %d", log.ActiveSlot, r.Slot)
	}
	return nil
}
