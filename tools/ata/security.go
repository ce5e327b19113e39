package ata

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Password is a 32-byte ATA security password. It never prints: a
// password that reaches a log is one the next tenant's attacker can read,
// and one an erase left behind is one nobody can recover.
type Password [32]byte

const redacted = "[ATA password redacted]"

func (Password) String() string             { return redacted }
func (Password) GoString() string           { return redacted }
func (Password) Format(f fmt.State, _ rune) { io.WriteString(f, redacted) }
func (Password) LogValue() slog.Value       { return slog.StringValue(redacted) }

var _ slog.LogValuer = Password{}

// passwordAlphabet is printable ASCII, the kind of password BIOS setups
// and hdparm take, so nothing between us and the drive mangles it.
const passwordAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// NewPassword draws 32 characters (about 190 bits) from rnd.
func NewPassword(rnd io.Reader) (Password, error) {
	var p Password
	var buf [64]byte
	n := 0
	for n < len(p) {
		if _, err := io.ReadFull(rnd, buf[:]); err != nil {
			return Password{}, fmt.Errorf("ATA password: %w", err)
		}
		for _, c := range buf {
			// 248 = 4 × 62: rejecting above it keeps the choice uniform.
			if c < 248 && n < len(p) {
				p[n] = passwordAlphabet[int(c)%len(passwordAlphabet)]
				n++
			}
		}
	}
	return p, nil
}

// Identifier selects the password a command compares against (control
// word bit 0 of every security parameter block).
type Identifier uint16

const (
	User   Identifier = 0
	Master Identifier = 1
)

func (i Identifier) String() string {
	if i == Master {
		return "master"
	}
	return "user"
}

// Control word bits of the security parameter blocks (ACS-3 7.37-7.42).
const (
	ctlMaster        = 1 << 0 // Identifier: compare/set the master password
	ctlEnhancedErase = 1 << 1 // SECURITY ERASE UNIT: enhanced erase mode
	// SET PASSWORD bit 8 (master password capability Maximum) stays clear.
)

// securityBlock builds the 512-byte parameter block every password-taking
// security command transfers: word 0 control, words 1-16 the password
// (bytes as given, not swapped: passwords are opaque, and CURE only ever
// compares a password with itself), words 17-255 zero (word 17 is the
// master password identifier, left 0000h: "do not change").
func securityBlock(control uint16, pw *Password) []byte {
	b := make([]byte, SectorSize)
	binary.LittleEndian.PutUint16(b[0:], control)
	copy(b[2:34], pw[:])
	return b
}

func securityRequest(name string, cmd uint8, data []byte, timeout time.Duration) *Request {
	r := &Request{Name: name, Command: cmd, Device: deviceObsolete, Protocol: ProtoNonData, Timeout: timeout}
	if data != nil {
		r.Protocol, r.Count, r.Data = ProtoPIODataOut, 1, data
	}
	return r
}

// SetPassword sends SECURITY SET PASSWORD (F1h, ACS-3 7.41). Setting the
// user password enables security (SEC5); master password capability is
// left High so the master password can still unlock the drive.
func SetPassword(t Transport, who Identifier, pw Password) error {
	ctl := uint16(0)
	if who == Master {
		ctl |= ctlMaster
	}
	return Do(t, securityRequest("SECURITY SET PASSWORD", CmdSecuritySetPassword, securityBlock(ctl, &pw), 30*time.Second))
}

// Unlock sends SECURITY UNLOCK (F2h, ACS-3 7.42): SEC4 to SEC5.
func Unlock(t Transport, who Identifier, pw Password) error {
	return Do(t, securityRequest("SECURITY UNLOCK", CmdSecurityUnlock, securityBlock(uint16(who&1), &pw), 30*time.Second))
}

// ErasePrepare sends SECURITY ERASE PREPARE (F3h, ACS-3 7.38, non-data).
// The next command must be SECURITY ERASE UNIT or the drive aborts it.
func ErasePrepare(t Transport) error {
	return Do(t, securityRequest("SECURITY ERASE PREPARE", CmdSecurityErasePrepare, nil, 30*time.Second))
}

// EraseUnit sends SECURITY ERASE UNIT (F4h, ACS-3 7.39). It blocks until
// the drive finishes, which takes hours on a large disk; timeout must
// come from Identify.EraseTimeout. Success also clears the user password
// and disables security (SEC1).
func EraseUnit(t Transport, who Identifier, pw Password, enhanced bool, timeout time.Duration) error {
	ctl := uint16(who & 1)
	name := "SECURITY ERASE UNIT"
	if enhanced {
		ctl |= ctlEnhancedErase
		name = "SECURITY ERASE UNIT (enhanced)"
	}
	return Do(t, securityRequest(name, CmdSecurityEraseUnit, securityBlock(ctl, &pw), timeout))
}

// DisablePassword sends SECURITY DISABLE PASSWORD (F6h, ACS-3 7.37):
// clears the user password in SEC5, back to SEC1.
func DisablePassword(t Transport, who Identifier, pw Password) error {
	return Do(t, securityRequest("SECURITY DISABLE PASSWORD", CmdSecurityDisablePassword, securityBlock(uint16(who&1), &pw), 30*time.Second))
}
