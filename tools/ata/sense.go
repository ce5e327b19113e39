package ata

import (
	"errors"
	"fmt"
	"strings"
)

// ATA Status register bits (ACS-3 6.2).
const (
	StatusERR  uint8 = 0x01
	StatusDRQ  uint8 = 0x08
	StatusDF   uint8 = 0x20
	StatusDRDY uint8 = 0x40
	StatusBSY  uint8 = 0x80
)

// ATA Error register bits (ACS-3 6.3).
const (
	ErrorABRT uint8 = 0x04
	ErrorIDNF uint8 = 0x10
	ErrorUNC  uint8 = 0x40
	ErrorICRC uint8 = 0x80
)

// Sense keys used below (SPC-5, sense key descriptions).
const (
	SenseRecoveredError uint8 = 0x1
	SenseIllegalRequest uint8 = 0x5
	SenseAbortedCommand uint8 = 0xB
)

// Registers are the ATA output fields a SATL returns in sense data.
type Registers struct {
	Error, Status, Device uint8
	Count                 uint16
	LBA                   uint64
}

// Sense is decoded sense data; ATA is nil when it carried no ATA fields.
type Sense struct {
	Key, ASC, ASCQ uint8
	ATA            *Registers
	// OldLibata: the registers were found where libata before Linux 6.11
	// puts them (see ParseSense).
	OldLibata bool
	Raw       []byte // as received, quoted when no registers were found
}

// passThroughInfo is ASC/ASCQ 00h/1Dh, ATA PASS-THROUGH INFORMATION
// AVAILABLE: CK_COND=1 on a command that succeeded.
func (s Sense) passThroughInfo() bool { return s.ASC == 0x00 && s.ASCQ == 0x1D }

// ParseSense decodes fixed (70h/71h) and descriptor (72h/73h) sense data,
// including the ATA fields SAT-4 12.2 defines for each:
//
//   - descriptor format: the ATA Status Return sense data descriptor
//     (type 09h, additional length 0Ch): byte 2 EXTEND, 3 ERROR, 4/5
//     COUNT(15:8)/(7:0), 6-11 LBA(31:24), LBA(7:0), LBA(39:32), LBA(15:8),
//     LBA(47:40), LBA(23:16), 12 DEVICE, 13 STATUS;
//   - fixed format: INFORMATION bytes 3-6 are ERROR, STATUS, DEVICE,
//     COUNT(7:0), and COMMAND-SPECIFIC INFORMATION bytes 9-11 LBA(7:0),
//     LBA(15:8), LBA(23:16), with the VALID bit set.
//
// libata before Linux 6.11 (fixed by commit 38dab832) writes the
// fixed-format fields 5 bytes late and without VALID: ERROR, STATUS,
// DEVICE, COUNT(7:0) at bytes 8-11, LBA at 17-19. Debian 12's 6.1 kernel
// does, as QEMU shows (TestWipeQEMUSATA). That layout is recognised only
// when INFORMATION is empty and byte 9 looks like a status with DRDY or
// ERR set, so other fixed sense is not misread.
func ParseSense(b []byte) Sense {
	s := Sense{Raw: b}
	if len(b) < 1 {
		return s
	}
	switch b[0] & 0x7f {
	case 0x70, 0x71:
		if len(b) >= 3 {
			s.Key = b[2] & 0xf
		}
		if len(b) >= 14 {
			s.ASC, s.ASCQ = b[12], b[13]
		}
		switch {
		case b[0]&0x80 != 0 && len(b) >= 12:
			s.ATA = &Registers{Error: b[3], Status: b[4], Device: b[5], Count: uint16(b[6]),
				LBA: uint64(b[9]) | uint64(b[10])<<8 | uint64(b[11])<<16}
		case len(b) >= 12 && b[7] >= 4 && b[3]|b[4]|b[5]|b[6] == 0 && b[9]&(StatusDRDY|StatusERR) != 0:
			s.ATA = &Registers{Error: b[8], Status: b[9], Device: b[10], Count: uint16(b[11])}
			if len(b) >= 20 {
				s.ATA.LBA = uint64(b[17]) | uint64(b[18])<<8 | uint64(b[19])<<16
			}
			s.OldLibata = true
		}
	case 0x72, 0x73:
		if len(b) < 4 {
			return s
		}
		s.Key, s.ASC, s.ASCQ = b[1]&0xf, b[2], b[3]
		if len(b) < 8 {
			return s
		}
		end := min(len(b), 8+int(b[7]))
		for i := 8; i+2 <= end; {
			typ, n := b[i], int(b[i+1])
			if typ == 0x09 && n >= 12 && i+14 <= end {
				d := b[i:]
				s.ATA = &Registers{
					Error:  d[3],
					Count:  uint16(d[4])<<8 | uint16(d[5]),
					LBA:    uint64(d[7]) | uint64(d[9])<<8 | uint64(d[11])<<16 | uint64(d[6])<<24 | uint64(d[8])<<32 | uint64(d[10])<<40,
					Device: d[12],
					Status: d[13],
				}
				break
			}
			i += 2 + n
		}
	}
	return s
}

// Error is an ATA command the drive (or the SATL) did not complete.
type Error struct {
	Command      string
	Opcode       uint8
	SCSIStatus   uint8
	HostStatus   uint16
	DriverStatus uint16
	Sense        Sense
}

// driverSense is DRIVER_SENSE: sense data is valid, not a failure by itself.
const driverSense = 0x08

func (e *Error) Error() string {
	name := fmt.Sprintf("ATA %s (%02Xh)", e.Command, e.Opcode)
	if e.HostStatus != 0 || e.DriverStatus&^driverSense != 0 {
		return fmt.Sprintf("%s: SCSI transport failure: host status %#x (%s), driver status %#x",
			name, e.HostStatus, hostStatusName(e.HostStatus), e.DriverStatus)
	}
	s := e.Sense
	sense := fmt.Sprintf("sense key %#x (%s) ASC/ASCQ %02x/%02x", s.Key, senseKeys[s.Key&0xf], s.ASC, s.ASCQ)
	if r := s.ATA; r != nil {
		what := "command failed"
		if e.Aborted() {
			what = "command aborted by the drive"
		}
		return fmt.Sprintf("%s: %s: ATA status %#02x (%s), error %#02x (%s); %s",
			name, what, r.Status, bitNames(r.Status, statusBits), r.Error, bitNames(r.Error, errorBits), sense)
	}
	if e.Unsupported() {
		return fmt.Sprintf("%s: not supported by the SCSI layer below (no SAT ATA pass-through): %s", name, sense)
	}
	return fmt.Sprintf("%s: SCSI status %#02x, %s (the sense carried no ATA status/error registers: % x)", name, e.SCSIStatus, sense, s.Raw)
}

// Aborted reports ERR with ABRT in the error register, or, when the sense
// carried no registers, libata's mapping of it: ABORTED COMMAND 00/00.
func (e *Error) Aborted() bool {
	if r := e.Sense.ATA; r != nil {
		return r.Status&StatusERR != 0 && r.Error&ErrorABRT != 0
	}
	return e.Sense.Key == SenseAbortedCommand && e.Sense.ASC == 0 && e.Sense.ASCQ == 0
}

// Unsupported reports ILLEGAL REQUEST with INVALID COMMAND OPERATION CODE
// (20h) or INVALID FIELD IN CDB (24h): the SCSI device does not take ATA
// PASS-THROUGH (16), so the ATA drive never saw the command.
func (e *Error) Unsupported() bool {
	return e.Sense.ATA == nil && e.Sense.Key == SenseIllegalRequest && (e.Sense.ASC == 0x20 || e.Sense.ASC == 0x24)
}

// Is makes errors.Is(err, ErrUnsupported) true for Unsupported errors.
func (e *Error) Is(target error) bool { return target == ErrUnsupported && e.Unsupported() }

// err turns a non-GOOD reply into an *Error. CHECK CONDITION with ATA
// PASS-THROUGH INFORMATION AVAILABLE and no ERR bit is a success that
// merely reports registers (CK_COND=1).
func (rep Reply) err(r *Request) error {
	if rep.Status == 0 && rep.HostStatus == 0 && rep.DriverStatus&^driverSense == 0 {
		return nil
	}
	e := &Error{Command: r.Name, Opcode: r.Command, SCSIStatus: rep.Status, HostStatus: rep.HostStatus,
		DriverStatus: rep.DriverStatus, Sense: ParseSense(rep.Sense)}
	if rep.HostStatus == 0 && rep.DriverStatus&^driverSense == 0 && rep.Status == 2 &&
		(e.Sense.Key == SenseRecoveredError || e.Sense.Key == 0) && e.Sense.passThroughInfo() &&
		(e.Sense.ATA == nil || e.Sense.ATA.Status&(StatusERR|StatusDF) == 0) {
		return nil
	}
	return e
}

var senseKeys = [16]string{"NO SENSE", "RECOVERED ERROR", "NOT READY", "MEDIUM ERROR", "HARDWARE ERROR", "ILLEGAL REQUEST", "UNIT ATTENTION", "DATA PROTECT", "BLANK CHECK", "VENDOR SPECIFIC", "COPY ABORTED", "ABORTED COMMAND", "RESERVED", "VOLUME OVERFLOW", "MISCOMPARE", "RESERVED"}

type bitName struct {
	bit  uint8
	name string
}

var (
	statusBits = []bitName{{StatusBSY, "BSY"}, {StatusDRDY, "DRDY"}, {StatusDF, "DF"}, {StatusDRQ, "DRQ"}, {StatusERR, "ERR"}}
	errorBits  = []bitName{{ErrorICRC, "ICRC"}, {ErrorUNC, "UNC"}, {ErrorIDNF, "IDNF"}, {ErrorABRT, "ABRT"}}
)

func bitNames(v uint8, names []bitName) string {
	var out []string
	for _, n := range names {
		if v&n.bit != 0 {
			out = append(out, n.name)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, " ")
}

// hostStatusName names the Linux SCSI host byte (scsi/scsi_status.h).
func hostStatusName(h uint16) string {
	switch h {
	case 0x01:
		return "DID_NO_CONNECT"
	case 0x02:
		return "DID_BUS_BUSY"
	case 0x03:
		return "DID_TIME_OUT: the command outlived its timeout and was aborted"
	case 0x04:
		return "DID_BAD_TARGET"
	case 0x05:
		return "DID_ABORT"
	case 0x07:
		return "DID_ERROR"
	case 0x08:
		return "DID_RESET"
	}
	return "see scsi_status.h"
}

var _ error = (*Error)(nil)

// AsError returns the *Error in err's chain, or nil.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}
