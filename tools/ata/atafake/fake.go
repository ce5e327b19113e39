// Package atafake is a SATA drive behind libata, for tests: it checks
// every ATA PASS-THROUGH (16) CDB the way a SATL would, answers IDENTIFY
// DEVICE from its state, and runs the ACS-3 Security feature set state
// machine (SEC1..SEC6), answering failures with the sense data libata
// builds. Only tests import it.
package atafake

import (
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/cure-oss/cure/tools/ata"
)

// Drive is one fake drive. Set the exported fields before use; the state
// fields change as commands arrive.
type Drive struct {
	Model, Serial, Firmware  string
	Sectors                  uint64
	NoSecurity               bool   // word 82 bit 1 and word 128 bit 0 clear
	NoEnhanced               bool   // word 128 bit 5 clear
	NormalTime, EnhancedTime uint16 // raw words 89 and 90
	FixedSense               bool   // answer in fixed format (D_SENSE=0) instead of descriptor
	OldLibataSense           bool   // with FixedSense: the pre-6.11 libata offsets (Debian 12)
	NoPassThrough            bool   // a SCSI layer without SAT: ILLEGAL REQUEST 20/00

	// State (ACS-3 security states).
	Enabled, Locked, Frozen, CountExpired bool
	User                                  *ata.Password // the user password while one is set
	// LastSet is the last password SET PASSWORD carried, so a test can
	// look for it where it must never appear (logs, evidence, errors).
	LastSet ata.Password

	// Failure injection.
	EraseUnitError      uint8 // fail ERASE UNIT with this error register (e.g. ABRT, UNC)
	LockOnEraseFailure  bool  // a failed ERASE UNIT leaves the drive locked (reset mid-erase)
	KeepPasswordOnErase bool  // firmware bug: ERASE UNIT succeeds but security stays enabled
	DisableFails        bool  // SECURITY DISABLE PASSWORD aborts

	// OnErase runs when ERASE UNIT succeeds (wipe the backing store).
	OnErase func(enhanced bool)

	// Log is every command received, with its outcome.
	Log []string
	// EraseTimeout is the timeout the last ERASE UNIT came with.
	EraseTimeout time.Duration

	prepared bool
	attempts int
}

var _ ata.Transport = (*Drive)(nil)

// Commands is Log without outcomes, for sequence assertions.
func (d *Drive) Commands() []string {
	var out []string
	for _, l := range d.Log {
		name, _, _ := strings.Cut(l, " -> ")
		out = append(out, name)
	}
	return out
}

// PassThrough implements ata.Transport.
func (d *Drive) PassThrough(cdb [16]byte, dir ata.Direction, data []byte, timeout time.Duration) (ata.Reply, error) {
	wasPrepared := d.prepared
	d.prepared = false // any command other than ERASE UNIT cancels the prepare
	if d.NoPassThrough || cdb[0] != ata.OpATAPassThrough16 {
		d.Log = append(d.Log, fmt.Sprintf("opcode %#02x -> ILLEGAL REQUEST", cdb[0]))
		return d.checkCondition(ata.SenseIllegalRequest, 0x20, nil), nil
	}
	cmd := cdb[14]
	if why := checkCDB(cdb, dir, data); why != "" {
		d.Log = append(d.Log, fmt.Sprintf("command %#02x -> INVALID FIELD IN CDB: %s", cmd, why))
		return d.checkCondition(ata.SenseIllegalRequest, 0x24, nil), nil
	}
	proto := ata.Protocol(cdb[1] >> 1 & 0xf)
	want := map[uint8]ata.Protocol{
		ata.CmdIdentifyDevice: ata.ProtoPIODataIn, ata.CmdSecuritySetPassword: ata.ProtoPIODataOut,
		ata.CmdSecurityUnlock: ata.ProtoPIODataOut, ata.CmdSecurityErasePrepare: ata.ProtoNonData,
		ata.CmdSecurityEraseUnit: ata.ProtoPIODataOut, ata.CmdSecurityDisablePassword: ata.ProtoPIODataOut,
	}
	if p, ok := want[cmd]; ok && p != proto {
		// A real drive would hang or abort on a protocol mismatch; the
		// test wants to know.
		d.Log = append(d.Log, fmt.Sprintf("command %#02x -> protocol %d, want %d", cmd, proto, p))
		return d.abort(), nil
	}
	var pw ata.Password
	var ctl uint16
	if proto == ata.ProtoPIODataOut {
		ctl = binary.LittleEndian.Uint16(data)
		copy(pw[:], data[2:34])
	}
	who := ata.User
	if ctl&1 != 0 {
		who = ata.Master
	}
	switch cmd {
	case ata.CmdIdentifyDevice:
		copy(data, d.identify())
		return d.ok("IDENTIFY DEVICE")
	case ata.CmdSecuritySetPassword:
		return d.setPassword(who, pw)
	case ata.CmdSecurityUnlock:
		name := "SECURITY UNLOCK " + who.String()
		switch {
		case d.NoSecurity || d.Frozen || d.CountExpired:
			return d.fail(name, "not allowed in this state")
		case who != ata.User || d.User == nil || *d.User != pw:
			return d.wrongPassword(name)
		}
		d.Locked, d.attempts = false, 0
		return d.ok(name)
	case ata.CmdSecurityErasePrepare:
		if d.NoSecurity || d.Frozen {
			return d.fail("SECURITY ERASE PREPARE", "not allowed in this state")
		}
		d.prepared = true
		return d.ok("SECURITY ERASE PREPARE")
	case ata.CmdSecurityEraseUnit:
		return d.eraseUnit(who, pw, ctl&2 != 0, wasPrepared, timeout)
	case ata.CmdSecurityDisablePassword:
		name := "SECURITY DISABLE PASSWORD " + who.String()
		switch {
		case d.NoSecurity || d.Frozen || d.Locked || d.DisableFails:
			return d.fail(name, "not allowed in this state")
		case who != ata.User || d.User == nil || *d.User != pw:
			return d.wrongPassword(name)
		}
		d.Enabled, d.User = false, nil
		return d.ok(name)
	}
	return d.fail(fmt.Sprintf("command %#02x", cmd), "not implemented")
}

// setPassword is SECURITY SET PASSWORD.
func (d *Drive) setPassword(who ata.Identifier, pw ata.Password) (ata.Reply, error) {
	name := "SECURITY SET PASSWORD " + who.String()
	switch {
	case d.NoSecurity:
		return d.fail(name, "security not supported")
	case d.Frozen:
		return d.fail(name, "frozen")
	case d.Locked:
		return d.fail(name, "locked")
	}
	d.LastSet = pw
	if who == ata.User {
		p := pw
		d.User, d.Enabled = &p, true
	}
	return d.ok(name)
}

// eraseUnit is SECURITY ERASE UNIT; wasPrepared: the command before it
// was SECURITY ERASE PREPARE.
func (d *Drive) eraseUnit(who ata.Identifier, pw ata.Password, enhanced, wasPrepared bool, timeout time.Duration) (ata.Reply, error) {
	name := "SECURITY ERASE UNIT " + who.String()
	if enhanced {
		name += " enhanced"
	}
	d.EraseTimeout = timeout
	switch {
	case d.NoSecurity || d.Frozen || d.CountExpired:
		return d.fail(name, "not allowed in this state")
	case !wasPrepared:
		return d.fail(name, "not preceded by SECURITY ERASE PREPARE")
	case enhanced && d.NoEnhanced:
		return d.fail(name, "enhanced erase not supported")
	case who != ata.User || !d.Enabled || d.User == nil || *d.User != pw:
		return d.wrongPassword(name)
	case d.EraseUnitError != 0:
		if d.LockOnEraseFailure {
			d.Locked = true
		}
		d.Log = append(d.Log, name+" -> injected failure")
		return d.checkCondition(ata.SenseAbortedCommand, 0, &ata.Registers{Status: ata.StatusDRDY | ata.StatusERR, Error: d.EraseUnitError, Device: 0xA0}), nil
	}
	if d.OnErase != nil {
		d.OnErase(enhanced)
	}
	if !d.KeepPasswordOnErase {
		d.Enabled, d.Locked, d.User = false, false, nil
	}
	d.attempts = 0
	return d.ok(name)
}

// checkCDB applies the SAT field rules a SATL enforces for these commands.
func checkCDB(c [16]byte, dir ata.Direction, data []byte) string {
	proto := ata.Protocol(c[1] >> 1 & 0xf)
	tLength, bytBlok, tDir, tType := c[2]&3, c[2]>>2&1, c[2]>>3&1, c[2]>>4&1
	switch {
	case c[1]&0xe0 != 0:
		return "MULTIPLE_COUNT set on a non-multiple command"
	case c[1]&1 != 0:
		return "EXTEND set on a 28-bit command"
	case c[2]&0xc0 != 0:
		return "OFF_LINE set"
	}
	switch proto {
	case ata.ProtoNonData:
		if tLength != 0 || len(data) != 0 || dir != ata.DirNone {
			return "non-data protocol with a transfer"
		}
	case ata.ProtoPIODataIn, ata.ProtoPIODataOut:
		wantDir, wantT := ata.DirIn, uint8(1)
		if proto == ata.ProtoPIODataOut {
			wantDir, wantT = ata.DirOut, 0
		}
		switch {
		case tLength != 2 || bytBlok != 1 || tType != 0:
			return fmt.Sprintf("T_LENGTH %d BYTE_BLOCK %d T_TYPE %d, want 2/1/0 (COUNT in 512-byte blocks)", tLength, bytBlok, tType)
		case tDir != wantT || dir != wantDir:
			return fmt.Sprintf("T_DIR %d with data direction %d for protocol %d", tDir, dir, proto)
		case int(c[6])*ata.SectorSize != len(data) || c[5] != 0:
			return fmt.Sprintf("COUNT %d blocks but %d data bytes", c[6], len(data))
		}
	default:
		return fmt.Sprintf("protocol %d not expected", proto)
	}
	return ""
}

func (d *Drive) ok(name string) (ata.Reply, error) {
	d.Log = append(d.Log, name+" -> ok")
	return ata.Reply{}, nil
}

func (d *Drive) abort() ata.Reply {
	return d.checkCondition(ata.SenseAbortedCommand, 0, &ata.Registers{Status: ata.StatusDRDY | ata.StatusERR, Error: ata.ErrorABRT, Device: 0xA0})
}

func (d *Drive) fail(name, why string) (ata.Reply, error) {
	d.Log = append(d.Log, name+" -> aborted: "+why)
	return d.abort(), nil
}

func (d *Drive) wrongPassword(name string) (ata.Reply, error) {
	d.attempts++
	if d.attempts >= 5 {
		d.CountExpired = true
	}
	return d.fail(name, "wrong password")
}

// checkCondition builds the sense libata returns for a pass-through
// command: descriptor format with the ATA Status Return descriptor, or
// fixed format with the registers in INFORMATION (VALID set).
func (d *Drive) checkCondition(key, asc uint8, r *ata.Registers) ata.Reply {
	var s []byte
	if d.FixedSense {
		s = make([]byte, 18)
		s[0], s[2], s[7], s[12] = 0x70, key, 10, asc
		switch {
		case r != nil && d.OldLibataSense:
			s[8], s[9], s[10], s[11] = r.Error, r.Status, r.Device, uint8(r.Count)
		case r != nil:
			s[0] |= 0x80
			s[3], s[4], s[5], s[6] = r.Error, r.Status, r.Device, uint8(r.Count)
			s[9], s[10], s[11] = uint8(r.LBA), uint8(r.LBA>>8), uint8(r.LBA>>16)
		}
	} else {
		s = []byte{0x72, key, asc, 0, 0, 0, 0, 0}
		if r != nil {
			s[7] = 14
			s = append(s, 0x09, 12, 0, r.Error, 0, uint8(r.Count), 0, uint8(r.LBA), 0, uint8(r.LBA>>8), 0, uint8(r.LBA>>16), r.Device, r.Status)
		}
	}
	return ata.Reply{Status: 2, DriverStatus: 0x08, Sense: s}
}

// identify is the drive's IDENTIFY DEVICE data (ACS-3 7.12.7).
func (d *Drive) identify() []byte {
	b := make([]byte, ata.SectorSize)
	put := func(w int, v uint16) { binary.LittleEndian.PutUint16(b[2*w:], v) }
	str := func(from, to int, s string) {
		for i := from; i < to; i++ {
			b[2*i], b[2*i+1] = ' ', ' '
		}
		for i := 0; i < len(s) && i < 2*(to-from); i++ {
			b[(2*from+i)^1] = s[i]
		}
	}
	put(0, 0x0040) // fixed, ATA device
	str(10, 20, d.Serial)
	str(23, 27, d.Firmware)
	str(27, 47, d.Model)
	put(83, 0x4000|1<<10) // 48-bit supported
	binary.LittleEndian.PutUint64(b[200:], d.Sectors)
	if n := d.Sectors; n < 1<<28 {
		binary.LittleEndian.PutUint32(b[120:], uint32(n))
	} else {
		binary.LittleEndian.PutUint32(b[120:], 1<<28-1)
	}
	put(82, 0x4000|1<<5) // NOP, write cache
	if !d.NoSecurity {
		put(82, 0x4000|1<<5|1<<1)
		w128 := uint16(1)
		for bit, on := range []bool{1: d.Enabled, 2: d.Locked, 3: d.Frozen, 4: d.CountExpired, 5: !d.NoEnhanced} {
			if on {
				w128 |= 1 << bit
			}
		}
		put(128, w128)
		put(89, d.NormalTime)
		put(90, d.EnhancedTime)
		if d.Enabled {
			put(85, 1<<1)
		}
	}
	b[510] = 0xA5
	var sum uint8
	for _, c := range b[:511] {
		sum += c
	}
	b[511] = -sum
	return b
}
