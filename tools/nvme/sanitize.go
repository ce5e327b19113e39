package nvme

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"
)

// OpSanitize is the Sanitize admin opcode (NVMe 2.0 Figure 28).
const OpSanitize uint8 = 0x84

// logSanitizeStatus is the Sanitize Status log identifier.
const logSanitizeStatus = 0x81

// SanitizeAction is the SANACT field (CDW10 bits 2:0, NVMe 2.0 Figure 372).
type SanitizeAction uint8

const (
	SanitizeExitFailure SanitizeAction = 1
	SanitizeBlockErase  SanitizeAction = 2
	SanitizeOverwrite   SanitizeAction = 3
	SanitizeCryptoErase SanitizeAction = 4
)

func (a SanitizeAction) String() string {
	switch a {
	case SanitizeExitFailure:
		return "exit failure mode"
	case SanitizeBlockErase:
		return "block erase"
	case SanitizeOverwrite:
		return "overwrite"
	case SanitizeCryptoErase:
		return "crypto erase"
	}
	return fmt.Sprintf("SANACT %d", uint8(a))
}

// Sanitize starts a sanitize operation on the whole NVM subsystem. The
// command completes as soon as the operation starts; poll the Sanitize
// Status log (WaitSanitize) for the outcome. noDealloc sets NDAS (bit 9):
// leave media allocated after the sanitize. Overwrite is not offered: it
// needs a pattern and pass count and is the slowest, least useful action.
func Sanitize(a Admin, action SanitizeAction, noDealloc bool) error {
	switch action {
	case SanitizeExitFailure, SanitizeBlockErase, SanitizeCryptoErase:
	case SanitizeOverwrite:
		fallthrough
	default:
		return fmt.Errorf("sanitize: action %s is not supported here (want exit failure, block erase or crypto erase)", action)
	}
	cdw10 := uint32(action)
	if noDealloc {
		cdw10 |= 1 << 9
	}
	_, err := a.AdminCommand(&Command{Opcode: OpSanitize, CDW10: cdw10, TimeoutMs: defaultTimeoutMs})
	if err != nil {
		return fmt.Errorf("sanitize (%s): %w", action, err)
	}
	return nil
}

// SanitizeState is SSTAT bits 2:0 (NVMe 2.0 Figure 290).
type SanitizeState uint8

const (
	SanitizeNever              SanitizeState = 0
	SanitizeSucceeded          SanitizeState = 1
	SanitizeInProgress         SanitizeState = 2
	SanitizeFailed             SanitizeState = 3
	SanitizeSucceededNoDealloc SanitizeState = 4
)

func (s SanitizeState) String() string {
	switch s {
	case SanitizeNever:
		return "never sanitized"
	case SanitizeSucceeded:
		return "completed successfully"
	case SanitizeInProgress:
		return "in progress"
	case SanitizeFailed:
		return "failed"
	case SanitizeSucceededNoDealloc:
		return "completed successfully, media not deallocated"
	}
	return fmt.Sprintf("state %d", uint8(s))
}

// SanitizeStatus is the Sanitize Status log page (LID 81h, Figure 290).
type SanitizeStatus struct {
	Progress    uint16 // SPROG: fraction of 65536 complete while in progress
	State       SanitizeState
	Passes      uint8  // SSTAT bits 7:3: overwrite passes completed
	GlobalErase bool   // SSTAT bit 8: no user data written since the last sanitize
	CDW10       uint32 // SCDW10: CDW10 of the sanitize that set this state
}

// ParseSanitizeStatus decodes the first bytes of the log page.
func ParseSanitizeStatus(b []byte) (*SanitizeStatus, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("sanitize status log: expected at least 8 bytes, got %d", len(b))
	}
	le := binary.LittleEndian
	sstat := le.Uint16(b[2:])
	return &SanitizeStatus{
		Progress:    le.Uint16(b[0:]),
		State:       SanitizeState(sstat & 0x7),
		Passes:      uint8(sstat>>3) & 0x1f,
		GlobalErase: sstat&(1<<8) != 0,
		CDW10:       le.Uint32(b[4:]),
	}, nil
}

// GetSanitizeStatus reads the Sanitize Status log.
func GetSanitizeStatus(a Admin) (*SanitizeStatus, error) {
	buf := make([]byte, 512)
	numd := uint32(len(buf)/4 - 1)
	_, err := a.AdminCommand(&Command{
		Opcode:    OpGetLogPage,
		NSID:      nsidAll,
		CDW10:     logSanitizeStatus | (numd&0xffff)<<16,
		CDW11:     numd >> 16,
		Data:      buf,
		TimeoutMs: defaultTimeoutMs,
	})
	if err != nil {
		return nil, fmt.Errorf("get log page sanitize status: %w", err)
	}
	return ParseSanitizeStatus(buf)
}

// WaitSanitize polls the Sanitize Status log every interval until the
// operation leaves the in-progress state or ctx ends. It returns the final
// status, and an error when the sanitize failed or never ran.
func WaitSanitize(ctx context.Context, a Admin, interval time.Duration) (*SanitizeStatus, error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		st, err := GetSanitizeStatus(a)
		if err != nil {
			return nil, err
		}
		switch st.State {
		case SanitizeSucceeded, SanitizeSucceededNoDealloc:
			return st, nil
		case SanitizeFailed:
			return st, fmt.Errorf("sanitize failed (sanitize status log SSTAT %s, CDW10 %#x); the controller stays in failure mode until a new sanitize or exit-failure", st.State, st.CDW10)
		case SanitizeNever:
			return st, fmt.Errorf("sanitize status log says never sanitized after a sanitize was started")
		case SanitizeInProgress:
			// poll again
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("waiting for sanitize (%.1f%% done): %w", float64(st.Progress)*100/65536, ctx.Err())
		case <-t.C:
		}
	}
}
