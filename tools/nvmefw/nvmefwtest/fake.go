// Package nvmefwtest provides a fake NVMe controller for firmware update
// tests: it implements nvme.Admin (Identify Controller, Get Log Page 03h,
// Firmware Image Download, Firmware Commit) and nvmefw.Resetter, and models
// firmware slots, the download buffer, commit actions and the statuses a
// real controller uses to ask for a reset.
package nvmefwtest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"

	"github.com/cure-oss/cure/tools/nvme"
)

// Image layout understood by the fake: "CUREFAKE" magic, the 8-byte
// revision, then payload. Anything else is an invalid image (SC 07h).
const imageMagic = "CUREFAKE"

// Image builds a size-byte (rounded up to 16 and to a dword multiple)
// image carrying revision rev.
func Image(rev string, size int) []byte {
	size = max(size, 16)
	size += (4 - size%4) % 4
	b := make([]byte, size)
	copy(b, imageMagic)
	copy(b[8:16], fmt.Sprintf("%-8s", rev))
	for i := 16; i < size; i++ {
		b[i] = byte(i * 7)
	}
	return b
}

// Reset kinds, for Controller.RequireReset.
const (
	NeedsConventionalReset = 0x0b
	NeedsSubsystemReset    = 0x10
	NeedsControllerReset   = 0x11
	NeedsMaxTimeViolation  = 0x12
)

// Controller is the fake. Configure the exported fields, then use it.
type Controller struct {
	mu sync.Mutex

	Model, Serial string
	NumSlots      int   // FRMW bits 3:1
	Slot1RO       bool  // FRMW bit 0
	ActivateNow   bool  // FRMW bit 4
	NoFirmwareCmd bool  // clear OACS bit 2
	FWUG          uint8 // Identify byte 319
	MDTS          uint8 // Identify byte 77

	Slots  [7]string // revisions per slot
	Active int       // running slot
	Next   int       // slot activated at next reset, 0 none

	// RequireReset, when non-zero, is the SC (SCT 1) a commit with action
	// 3 returns instead of activating: 0Bh, 10h, 11h or 12h.
	RequireReset uint8
	// Reject makes Firmware Download and Commit fail with Invalid Command
	// Opcode + DNR (status 0x4001), as QEMU 7.2 does.
	Reject bool
	// ResetFailures makes the next n commands after a reset fail with an
	// errno-like error, as the kernel does while re-initialising.
	ResetFailures int

	buf      map[uint32][]byte // dword offset -> data
	pending  int               // reset kind the staged activation waits for
	failLeft int
	// Calls records every command opcode with CDW10/CDW11.
	Calls []Call
	// Resets records the resets performed ("controller", "subsystem", "power").
	Resets []string
}

// Call is one recorded admin command.
type Call struct {
	Opcode       uint8
	CDW10, CDW11 uint32
	Len          int
}

var _ nvme.Admin = (*Controller)(nil)

func (c *Controller) status(sct, sc uint8, dnr bool, op uint8) error {
	v := uint32(sc) | uint32(sct)<<8
	if dnr {
		v |= 1 << 14
	}
	return nvme.ParseStatus(op, v)
}

// AdminCommand implements nvme.Admin.
func (c *Controller) AdminCommand(cmd *nvme.Command) (uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Calls = append(c.Calls, Call{Opcode: cmd.Opcode, CDW10: cmd.CDW10, CDW11: cmd.CDW11, Len: len(cmd.Data)})
	if c.failLeft > 0 {
		c.failLeft--
		return 0, fmt.Errorf("nvme admin opcode %#02x: ioctl: device or resource busy", cmd.Opcode)
	}
	switch cmd.Opcode {
	case nvme.OpIdentify:
		if cmd.CDW10&0xff != 1 {
			return 0, c.status(nvme.SCTGeneric, 0x02, true, cmd.Opcode)
		}
		copy(cmd.Data, c.identify())
		return 0, nil
	case nvme.OpGetLogPage:
		if cmd.CDW10&0xff != 0x03 {
			return 0, c.status(nvme.SCTCommandSpecific, 0x09, true, cmd.Opcode)
		}
		copy(cmd.Data, c.slotLog())
		return 0, nil
	case nvme.OpFirmwareDownload:
		if c.Reject {
			return 0, c.status(nvme.SCTGeneric, 0x01, true, cmd.Opcode)
		}
		return 0, c.download(cmd)
	case nvme.OpFirmwareCommit:
		if c.Reject {
			return 0, c.status(nvme.SCTGeneric, 0x01, true, cmd.Opcode)
		}
		return 0, c.commit(cmd)
	}
	return 0, c.status(nvme.SCTGeneric, 0x01, true, cmd.Opcode)
}

func (c *Controller) download(cmd *nvme.Command) error {
	numd := cmd.CDW10 + 1
	if int(numd)*4 != len(cmd.Data) {
		return c.status(nvme.SCTGeneric, 0x02, true, cmd.Opcode) // the ioctl would transfer the wrong length
	}
	if g := c.FWUG; g != 0 && g != 0xff {
		gd := uint32(g) * 1024 // granularity in dwords
		// Offsets must be aligned; only the last piece may be short, which
		// the fake cannot know yet, so it checks sizes at commit time.
		if cmd.CDW11%gd != 0 {
			return c.status(nvme.SCTGeneric, 0x02, true, cmd.Opcode)
		}
	}
	if c.buf == nil {
		c.buf = map[uint32][]byte{}
	}
	for off, b := range c.buf {
		end := off + uint32(len(b)/4)
		if cmd.CDW11 < end && off < cmd.CDW11+numd {
			return c.status(nvme.SCTCommandSpecific, 0x14, true, cmd.Opcode)
		}
	}
	c.buf[cmd.CDW11] = append([]byte(nil), cmd.Data...)
	return nil
}

// assemble joins the download buffer; it must be contiguous from 0.
func (c *Controller) assemble() ([]byte, bool) {
	var out []byte
	for {
		b, ok := c.buf[uint32(len(out)/4)]
		if !ok {
			break
		}
		out = append(out, b...)
	}
	total := 0
	for _, b := range c.buf {
		total += len(b)
	}
	if g := c.FWUG; g != 0 && g != 0xff {
		for off, b := range c.buf {
			if int(off)*4+len(b) != len(out) && len(b)%(int(g)*4096) != 0 {
				return nil, false // a short piece that is not the last
			}
		}
	}
	return out, total == len(out) && len(out) > 0
}

func (c *Controller) commit(cmd *nvme.Command) error {
	slot := int(cmd.CDW10 & 0x7)
	action := nvme.CommitAction(cmd.CDW10 >> 3 & 0x7)
	op := cmd.Opcode
	if slot > c.NumSlots {
		return c.status(nvme.SCTCommandSpecific, 0x06, true, op)
	}
	replaces := action == nvme.CommitReplace || action == nvme.CommitReplaceActivate ||
		(action == nvme.CommitReplaceActivateNow && len(c.buf) > 0)
	if replaces {
		if slot == 0 {
			slot = c.pickSlot()
			if slot == 0 {
				return c.status(nvme.SCTCommandSpecific, 0x06, true, op)
			}
		}
		if slot == 1 && c.Slot1RO {
			return c.status(nvme.SCTCommandSpecific, 0x06, true, op)
		}
		img, ok := c.assemble()
		c.buf = nil
		if !ok || len(img) < 16 || !bytes.Equal(img[:8], []byte(imageMagic)) {
			return c.status(nvme.SCTCommandSpecific, 0x07, true, op)
		}
		c.Slots[slot-1] = strings.TrimSpace(string(img[8:16]))
	} else if slot == 0 || c.Slots[slot-1] == "" {
		return c.status(nvme.SCTCommandSpecific, 0x07, true, op)
	}
	switch action {
	case nvme.CommitReplace:
		return nil
	case nvme.CommitReplaceActivate, nvme.CommitActivate:
		c.Next, c.pending = slot, NeedsControllerReset
		return nil
	case nvme.CommitReplaceActivateNow:
		if !c.ActivateNow {
			c.Next, c.pending = slot, NeedsControllerReset
			return c.status(nvme.SCTCommandSpecific, NeedsControllerReset, true, op)
		}
		switch c.RequireReset {
		case 0:
			c.Active, c.Next = slot, 0
			return nil
		case NeedsMaxTimeViolation:
			return c.status(nvme.SCTCommandSpecific, NeedsMaxTimeViolation, true, op)
		default:
			c.Next, c.pending = slot, int(c.RequireReset)
			return c.status(nvme.SCTCommandSpecific, c.RequireReset, true, op)
		}
	}
	return c.status(nvme.SCTGeneric, 0x02, true, op)
}

func (c *Controller) pickSlot() int {
	for i := 1; i <= c.NumSlots; i++ {
		if !(i == 1 && c.Slot1RO) && i != c.Active {
			return i
		}
	}
	return 0
}

// activate applies the staged slot if the reset kind satisfies it. A
// conventional reset (power) satisfies every kind; a subsystem reset
// satisfies controller and subsystem; a controller reset only itself.
func (c *Controller) activate(kind int) {
	c.buf = nil // a reset discards a partial download
	if c.Next == 0 {
		return
	}
	ok := kind == NeedsConventionalReset ||
		(kind == NeedsSubsystemReset && c.pending != NeedsConventionalReset) ||
		(kind == NeedsControllerReset && c.pending == NeedsControllerReset)
	if ok {
		c.Active, c.Next, c.pending = c.Next, 0, 0
	}
}

// ResetController implements nvmefw.Resetter.
func (c *Controller) ResetController() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Resets = append(c.Resets, "controller")
	c.activate(NeedsControllerReset)
	c.failLeft = c.ResetFailures
	return nil
}

// ResetSubsystem implements nvmefw.Resetter.
func (c *Controller) ResetSubsystem() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Resets = append(c.Resets, "subsystem")
	c.activate(NeedsSubsystemReset)
	c.failLeft = c.ResetFailures
	return nil
}

// PowerCycle models the conventional reset of a host reboot.
func (c *Controller) PowerCycle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Resets = append(c.Resets, "power")
	c.activate(NeedsConventionalReset)
}

// Running is the revision of the active slot.
func (c *Controller) Running() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running()
}

func (c *Controller) running() string {
	if c.Active < 1 || c.Active > 7 {
		return ""
	}
	return c.Slots[c.Active-1]
}

// identify builds Identify Controller at the NVMe 2.0 Figure 275 offsets.
func (c *Controller) identify() []byte {
	b := make([]byte, nvme.IdentifySize)
	le := binary.LittleEndian
	le.PutUint16(b[0:], 0x144d)
	copy(b[4:24], fmt.Sprintf("%-20s", c.Serial))
	copy(b[24:64], fmt.Sprintf("%-40s", c.Model))
	copy(b[64:72], fmt.Sprintf("%-8s", c.running()))
	b[77] = c.MDTS
	le.PutUint32(b[80:], 0x00020000)
	oacs := uint16(nvme.OACSFormat | nvme.OACSFirmware)
	if c.NoFirmwareCmd {
		oacs &^= nvme.OACSFirmware
	}
	le.PutUint16(b[256:], oacs)
	frmw := uint8(c.NumSlots&7) << 1
	if c.Slot1RO {
		frmw |= 1
	}
	if c.ActivateNow {
		frmw |= 1 << 4
	}
	b[260] = frmw
	b[319] = c.FWUG
	return b
}

// slotLog builds the Firmware Slot Information log (Figure 210).
func (c *Controller) slotLog() []byte {
	b := make([]byte, 512)
	b[0] = byte(c.Active&7) | byte(c.Next&7)<<4
	for i, s := range c.Slots {
		if s != "" {
			copy(b[8+8*i:16+8*i], fmt.Sprintf("%-8s", s))
		}
	}
	return b
}
