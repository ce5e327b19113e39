package attestation

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/cure-oss/cure/tools/tpm/eventlog"
)

// The firmware's own EV_EFI_ACTION strings (TCG PC Client PFP 10.4.4), as
// UEFI firmware (EDK2's Tcg2Dxe, OVMF's among them) measures them.
const (
	ActionCallingApp   = "Calling EFI Application from Boot Option"
	ActionReturningApp = "Returning from EFI Application from Boot Option"
	ActionExitBS       = "Exit Boot Services Invocation"
)

// BootPathPCR is the boot manager's PCR: the boot path is judged there.
const BootPathPCR = 4

// exitBSPCR is where firmware measures ExitBootServices (PFP 3.3.4.5).
const exitBSPCR = 5

// BootPathError is a boot path the coordinator refuses: the PCR, the
// offending event (Index -1 when something is missing rather than extra)
// and why.
type BootPathError struct {
	PCR    uint32
	Index  int
	Type   uint32
	Digest string
	Reason string
}

func (e *BootPathError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("PCR %d: %s", e.PCR, e.Reason)
	}
	return fmt.Sprintf("PCR %d: event %d (%s, sha256 %s): %s", e.PCR, e.Index, eventlog.TypeName(e.Type), e.Digest, e.Reason)
}

func refuse(ev eventlog.Event, format string, args ...any) *BootPathError {
	return &BootPathError{PCR: ev.PCR, Index: ev.Index, Type: ev.Type, Digest: hex.EncodeToString(ev.SHA256), Reason: fmt.Sprintf(format, args...)}
}

// CheckBootPath replays the log's boot path and requires it to be exactly
// the expected one: in PCR 4, the firmware's own events (its "Calling EFI
// Application from Boot Option" action, "Returning from ..." for an
// attempt that loaded nothing, one EV_SEPARATOR), then image (the signed
// CURE image's Authenticode hash) as the first and only boot application,
// and nothing after it; in PCR 5, "Exit Boot Services Invocation" after
// the image. Every firmware event's digest must be the hash of its data,
// so a foreign application's measurement cannot pass as one. The log must
// already have been checked against the quote (eventlog.Log.Check) for
// PCRs 4 and 5: its events are then what the TPM was extended with.
func CheckBootPath(l *eventlog.Log, image []byte) error {
	if len(image) != sha256.Size {
		return fmt.Errorf("the image's Authenticode hash has %d bytes, want %d", len(image), sha256.Size)
	}
	app, separators := -1, 0
	exitBS := false
	for _, ev := range l.Events {
		if ev.Type == eventlog.EVNoAction || (ev.PCR != BootPathPCR && ev.PCR != exitBSPCR) {
			continue
		}
		if ev.PCR == exitBSPCR {
			if app >= 0 && ev.Type == eventlog.EVEFIAction && string(ev.Data) == ActionExitBS && hashOfData(ev) {
				exitBS = true
			}
			continue
		}
		if err := bootPathEvent(ev, image, app, &separators); err != nil {
			return err
		}
		if ev.Type == eventlog.EVEFIBootServicesApplication {
			app = ev.Index
		}
	}
	if app < 0 {
		return &BootPathError{PCR: BootPathPCR, Index: -1, Reason: fmt.Sprintf("no boot application was measured: the image %x never started", image)}
	}
	if !exitBS {
		return &BootPathError{PCR: exitBSPCR, Index: -1, Reason: fmt.Sprintf("no %q after the image (event %d): the firmware's EV_EFI_ACTION must follow it", ActionExitBS, app)}
	}
	return nil
}

// bootPathEvent judges one PCR 4 event given whether the image has been
// measured yet (app >= 0) and the separators seen.
func bootPathEvent(ev eventlog.Event, image []byte, app int, separators *int) error {
	switch {
	case app >= 0 && ev.Type == eventlog.EVEFIBootServicesApplication:
		return refuse(ev, "a second boot application after the CURE image (event %d): the image must be the only one", app)
	case app >= 0:
		return refuse(ev, "measured after the CURE image (event %d): nothing may follow it in PCR %d", app, BootPathPCR)
	case ev.Type == eventlog.EVEFIBootServicesApplication && !bytes.Equal(ev.SHA256, image):
		return refuse(ev, "a boot application that is not the CURE image (Authenticode %x) started before it", image)
	case ev.Type == eventlog.EVEFIBootServicesApplication:
		if *separators != 1 {
			return refuse(ev, "the CURE image was measured after %d EV_SEPARATOR events, want 1 (the firmware's end of pre-boot)", *separators)
		}
		return nil
	case ev.Type == eventlog.EVSeparator:
		*separators++
		if !hashOfData(ev) || !bytes.Equal(ev.Data, []byte{0, 0, 0, 0}) {
			return refuse(ev, "not the firmware's separator (data %x, its digest the hash of 00000000)", bounded(ev.Data))
		}
		if *separators > 1 {
			return refuse(ev, "a second EV_SEPARATOR before the image")
		}
		return nil
	case ev.Type == eventlog.EVEFIAction:
		if (string(ev.Data) != ActionCallingApp && string(ev.Data) != ActionReturningApp) || !hashOfData(ev) {
			return refuse(ev, "not a firmware boot action (data %q; want %q or %q, its digest the hash of the text)", bounded(ev.Data), ActionCallingApp, ActionReturningApp)
		}
		return nil
	default:
		return refuse(ev, "not an event of the boot path (only the firmware's boot actions, its separator and the CURE image are)")
	}
}

func hashOfData(ev eventlog.Event) bool {
	sum := sha256.Sum256(ev.Data)
	return bytes.Equal(ev.SHA256, sum[:])
}

// bounded keeps a refusal's quote of hostile data short.
func bounded(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
