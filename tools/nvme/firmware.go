package nvme

import "fmt"

// logFirmwareSlot is the Firmware Slot Information log identifier.
const logFirmwareSlot = 0x03

// nsidAll addresses the controller as a whole in log and feature commands.
const nsidAll = 0xffffffff

// FirmwareLog is the Firmware Slot Information log page (LID 03h,
// NVMe 2.0 Figure 210).
type FirmwareLog struct {
	ActiveSlot int       // AFI bits 2:0: slot running now (1..7)
	NextSlot   int       // AFI bits 6:4: slot activated at next reset, 0 if none
	Slots      [7]string // FRS1..FRS7; empty when the slot is empty
}

// Active is the revision of the running slot.
func (l *FirmwareLog) Active() string {
	if l.ActiveSlot < 1 || l.ActiveSlot > len(l.Slots) {
		return ""
	}
	return l.Slots[l.ActiveSlot-1]
}

// ParseFirmwareLog decodes the 512-byte Firmware Slot Information log.
func ParseFirmwareLog(b []byte) (*FirmwareLog, error) {
	if len(b) < 64 {
		return nil, fmt.Errorf("firmware slot log: expected at least 64 bytes, got %d", len(b))
	}
	l := &FirmwareLog{ActiveSlot: int(b[0] & 0x7), NextSlot: int(b[0]>>4) & 0x7}
	for i := range l.Slots {
		l.Slots[i] = asciiField(b[8+8*i : 16+8*i])
	}
	return l, nil
}

// GetFirmwareLog reads the Firmware Slot Information log.
func GetFirmwareLog(a Admin) (*FirmwareLog, error) {
	buf := make([]byte, 512)
	numd := uint32(len(buf)/4 - 1) // zero-based dword count
	_, err := a.AdminCommand(&Command{
		Opcode:    OpGetLogPage,
		NSID:      nsidAll,
		CDW10:     logFirmwareSlot | (numd&0xffff)<<16,
		CDW11:     numd >> 16,
		Data:      buf,
		TimeoutMs: defaultTimeoutMs,
	})
	if err != nil {
		return nil, fmt.Errorf("get log page firmware slot information: %w", err)
	}
	return ParseFirmwareLog(buf)
}

// CommitAction is the Firmware Commit CA field (NVMe 2.0 Figure 190).
type CommitAction uint8

const (
	CommitReplace            CommitAction = 0 // download to slot, do not activate
	CommitReplaceActivate    CommitAction = 1 // download to slot, activate at next reset
	CommitActivate           CommitAction = 2 // activate the slot's image at next reset
	CommitReplaceActivateNow CommitAction = 3 // activate immediately, no reset
)

// FirmwareDownload transfers image in chunk-byte pieces with Firmware Image
// Download. chunk must be a positive multiple of 4 (the command counts
// dwords); callers derive it from FWUG when the controller reports one.
func FirmwareDownload(a Admin, image []byte, chunk int) error {
	if len(image) == 0 || len(image)%4 != 0 {
		return fmt.Errorf("firmware download: image length %d is not a positive multiple of 4 bytes", len(image))
	}
	if chunk <= 0 || chunk%4 != 0 {
		return fmt.Errorf("firmware download: chunk size %d is not a positive multiple of 4 bytes", chunk)
	}
	for off := 0; off < len(image); off += chunk {
		end := min(off+chunk, len(image))
		// Copy so the kernel sees a buffer whose length matches NUMD exactly.
		part := append([]byte(nil), image[off:end]...)
		_, err := a.AdminCommand(&Command{
			Opcode:    OpFirmwareDownload,
			CDW10:     uint32(len(part)/4 - 1),
			CDW11:     uint32(off / 4),
			Data:      part,
			TimeoutMs: 120_000,
		})
		if err != nil {
			return fmt.Errorf("firmware download at offset %d of %d: %w", off, len(image), err)
		}
	}
	return nil
}

// FirmwareCommit commits the downloaded image to slot (1..7, or 0 to let
// the controller choose) with action. A *StatusError for which
// NeedsReset is true means the commit succeeded but activation waits for
// the reset it names.
func FirmwareCommit(a Admin, slot int, action CommitAction) error {
	if slot < 0 || slot > 7 {
		return fmt.Errorf("firmware commit: slot %d out of range 0..7", slot)
	}
	if action > 7 {
		return fmt.Errorf("firmware commit: commit action %d out of range 0..7", action)
	}
	_, err := a.AdminCommand(&Command{
		Opcode:    OpFirmwareCommit,
		CDW10:     uint32(slot) | uint32(action)<<3,
		TimeoutMs: 120_000,
	})
	if err != nil {
		return fmt.Errorf("firmware commit slot %d action %d: %w", slot, action, err)
	}
	return nil
}

// NeedsReset reports the command-specific statuses that mean "accepted,
// activates after a reset" rather than failure (NVMe 2.0 Figure 191).
func (e *StatusError) NeedsReset() bool {
	if e.SCT != SCTCommandSpecific {
		return false
	}
	switch e.SC {
	case 0x0b, 0x10, 0x11:
		return true
	}
	return false
}
