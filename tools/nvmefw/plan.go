// Package nvmefw updates NVMe controller firmware in-band: it plans which
// slot and commit action to use from Identify Controller and the Firmware
// Slot Information log (pure), applies the plan with Firmware Image
// Download and Firmware Commit over tools/nvme's Admin seam, tells the
// caller which reset the commit asks for, and verifies the running revision.
//
// References are to the NVMe Base Specification 2.0: Figure 275 (Identify
// Controller: OACS, FRMW, FWUG, MDTS), Figures 189-191 (Firmware Commit) and
// Figure 210 (Firmware Slot Information log).
package nvmefw

import (
	"fmt"
	"strings"

	"github.com/cure-oss/cure/tools/nvme"
)

// After is what the caller must do once the commit completed for the new
// image to become the running one.
type After int

const (
	AfterNothing           After = iota // activated already (commit action 3)
	AfterControllerReset                // NVME_IOCTL_RESET on /dev/nvmeX
	AfterSubsystemReset                 // NVME_IOCTL_SUBSYS_RESET, or a reboot
	AfterConventionalReset              // PCIe conventional reset: reboot the host
)

func (a After) String() string {
	switch a {
	case AfterNothing:
		return "nothing"
	case AfterControllerReset:
		return "controller reset"
	case AfterSubsystemReset:
		return "NVM subsystem reset"
	case AfterConventionalReset:
		return "conventional reset (host reboot)"
	}
	return fmt.Sprintf("After(%d)", int(a))
}

// Plan is the delta for one controller, as data. Apply executes it.
type Plan struct {
	Current string // running revision (Identify FR)
	Target  string // revision the image carries
	// Noop: the controller already runs Target.
	Noop bool
	// Download: transfer the image (false when a slot already holds Target).
	Download bool
	// Commit: issue Firmware Commit (false when Target is already staged
	// for the next reset and only the reset is missing).
	Commit bool
	Slot   int // 1..7, or 0 to let the controller choose
	Action nvme.CommitAction
	Chunk  int // bytes per Firmware Image Download command
	// ImageSize is the size the plan was made for; Apply refuses another.
	ImageSize int
	// After is what a successful commit leaves to do; Apply may learn
	// otherwise from the commit status.
	After   After
	Reasons []string
}

func (p *Plan) String() string {
	switch {
	case p.Noop:
		return fmt.Sprintf("running %s is the target: nothing to do", p.Current)
	case !p.Commit:
		return fmt.Sprintf("%s -> %s: slot %d already staged; needs %s", p.Current, p.Target, p.Slot, p.After)
	case !p.Download:
		return fmt.Sprintf("%s -> %s: activate slot %d (commit action %d), then %s", p.Current, p.Target, p.Slot, p.Action, p.After)
	}
	return fmt.Sprintf("%s -> %s: download %d bytes in %d-byte chunks, commit slot %d action %d, then %s",
		p.Current, p.Target, p.ImageSize, p.Chunk, p.Slot, p.Action, p.After)
}

// Options tune planning.
type Options struct {
	// MaxChunk caps one Firmware Image Download transfer (default 128 KiB:
	// the kernel refuses passthrough buffers beyond the queue's
	// max_hw_sectors, which is rarely below that).
	MaxChunk int
	// AllowUndeclared plans an update even when Identify says the
	// controller cannot take one (OACS bit 2 clear, or no writable slot),
	// committing to slot 0 (the controller chooses). The controller's own
	// completion status then decides, and is what the caller reports.
	AllowUndeclared bool
}

const defaultMaxChunk = 128 << 10

// UnsupportedError says Identify Controller rules out an in-band update.
type UnsupportedError struct {
	Reasons []string
}

func (e *UnsupportedError) Error() string {
	return "controller does not support in-band firmware update: " + strings.Join(e.Reasons, "; ")
}

// PlanUpdate decides how to bring the controller from its running revision
// to target with an image of imageSize bytes. It issues no command.
func PlanUpdate(c *nvme.Controller, log *nvme.FirmwareLog, target string, imageSize int, o Options) (*Plan, error) {
	target = strings.TrimSpace(target)
	if target == "" {
		return nil, fmt.Errorf("plan nvme firmware: target revision is empty")
	}
	if len(target) > 8 {
		// FR is 8 ASCII bytes; a longer target can never match.
		return nil, fmt.Errorf("plan nvme firmware: target revision %q is longer than the 8-byte Identify FR field", target)
	}
	p := &Plan{Current: c.FR, Target: target, ImageSize: imageSize}
	if c.FR == target {
		p.Noop = true
		p.Reasons = append(p.Reasons, fmt.Sprintf("Identify FR %q equals target", c.FR))
		return p, nil
	}
	slots := c.FirmwareSlots()
	if slots == 0 {
		// FRMW 3:1 is 1..7 by definition; 0 is a broken controller.
		return nil, fmt.Errorf("plan nvme firmware: Identify FRMW %#02x reports 0 firmware slots (expected 1..7)", c.FRMW)
	}
	if log.ActiveSlot < 1 || log.ActiveSlot > slots {
		return nil, fmt.Errorf("plan nvme firmware: firmware slot log names active slot %d, controller has slots 1..%d", log.ActiveSlot, slots)
	}

	// Target already staged for the next reset (an earlier commit whose
	// reset never came): only the reset is missing.
	if n := log.NextSlot; n >= 1 && n <= slots && log.Slots[n-1] == target {
		p.Slot, p.After = n, AfterControllerReset
		p.Reasons = append(p.Reasons, fmt.Sprintf("slot %d holds %s and is marked for activation at the next reset", n, target))
		return p, nil
	}
	p.Commit = true
	// Target present in an inactive slot: activate it, no download.
	for i := 1; i <= slots; i++ {
		if i != log.ActiveSlot && log.Slots[i-1] == target {
			p.Slot = i
			p.Action, p.After = activation(c, false)
			p.Reasons = append(p.Reasons, fmt.Sprintf("slot %d already holds %s: activate it without downloading", i, target))
			return p, nil
		}
	}

	p.Download = true
	if imageSize <= 0 || imageSize%4 != 0 {
		return nil, fmt.Errorf("plan nvme firmware: image size %d bytes is not a positive multiple of 4 (Firmware Image Download counts dwords)", imageSize)
	}
	var unsupported []string
	if c.OACS&nvme.OACSFirmware == 0 {
		unsupported = append(unsupported, fmt.Sprintf("Identify OACS %#04x has bit 2 (Firmware Commit / Image Download) clear", c.OACS))
	}
	slot, why := chooseSlot(c, log)
	if slot == 0 {
		unsupported = append(unsupported, why)
	}
	if len(unsupported) > 0 {
		if !o.AllowUndeclared {
			return nil, &UnsupportedError{Reasons: unsupported}
		}
		p.Reasons = append(p.Reasons, "attempting anyway (AllowUndeclared): "+strings.Join(unsupported, "; "))
		why = "slot 0: the controller chooses"
	}
	p.Slot = slot
	p.Reasons = append(p.Reasons, why)
	p.Action, p.After = activation(c, true)
	chunk, why, err := chunkSize(c, o.MaxChunk)
	if err != nil {
		return nil, fmt.Errorf("plan nvme firmware: %w", err)
	}
	p.Chunk = chunk
	p.Reasons = append(p.Reasons, why)
	return p, nil
}

// activation picks the commit action: 3 (activate now) when FRMW bit 4 says
// the controller can activate without a reset, else 1 (replace, activate at
// next reset) or, with nothing downloaded, 2 (activate slot at next reset).
func activation(c *nvme.Controller, download bool) (nvme.CommitAction, After) {
	if c.FirmwareActivateWithoutReset() {
		return nvme.CommitReplaceActivateNow, AfterNothing
	}
	if download {
		return nvme.CommitReplaceActivate, AfterControllerReset
	}
	return nvme.CommitActivate, AfterControllerReset
}

// chooseSlot returns the slot to download into: an empty writable slot
// first, then an inactive one (keeping the running image as a fallback),
// and only then the active slot. 0 means there is no writable slot.
func chooseSlot(c *nvme.Controller, log *nvme.FirmwareLog) (int, string) {
	n := c.FirmwareSlots()
	first := 1
	if c.FirmwareSlot1ReadOnly() {
		first = 2
	}
	if first > n {
		return 0, fmt.Sprintf("Identify FRMW %#02x: %d slot(s) and slot 1 is read-only, so no slot is writable", c.FRMW, n)
	}
	for i := first; i <= n; i++ {
		if i != log.ActiveSlot && log.Slots[i-1] == "" {
			return i, fmt.Sprintf("slot %d: empty and writable (slots 1..%d, active %d)", i, n, log.ActiveSlot)
		}
	}
	for i := first; i <= n; i++ {
		if i != log.ActiveSlot {
			return i, fmt.Sprintf("slot %d: writable, not running (replaces %q; running slot %d kept)", i, log.Slots[i-1], log.ActiveSlot)
		}
	}
	return log.ActiveSlot, fmt.Sprintf("slot %d: the only writable slot is the running one; replaced in place", log.ActiveSlot)
}

// chunkSize derives the transfer size from FWUG (byte 319: 4 KiB units,
// 0 = not reported, 0xFF = no restriction) and MDTS (2^MDTS minimum pages,
// assumed 4 KiB; 0 = no limit).
func chunkSize(c *nvme.Controller, maxChunk int) (int, string, error) {
	if maxChunk <= 0 {
		maxChunk = defaultMaxChunk
	}
	limit := maxChunk
	if c.MDTS != 0 && c.MDTS < 20 {
		limit = min(limit, (1<<c.MDTS)*4096)
	}
	switch c.FWUG {
	case 0:
		// Granularity not reported: 4 KiB pieces, as nvme-cli does, are
		// what controllers without FWUG accept.
		return 4096, "FWUG 0 (not reported): 4 KiB transfers", nil
	case 0xff:
		chunk := limit - limit%4
		return chunk, fmt.Sprintf("FWUG 0xFF (no restriction): %d-byte transfers", chunk), nil
	}
	gran := int(c.FWUG) * 4096
	if gran > limit {
		return 0, "", fmt.Errorf("FWUG requires %d-byte aligned transfers but MDTS %d / MaxChunk %d allow at most %d bytes per command", gran, c.MDTS, maxChunk, limit)
	}
	chunk := limit - limit%gran
	return chunk, fmt.Sprintf("FWUG %d (%d KiB granularity): %d-byte transfers", c.FWUG, gran/1024, chunk), nil
}
