package opal

import (
	"encoding/binary"
	"fmt"
)

// SCSI opcodes (SPC-5 6.40, 6.41).
const (
	OpSecurityProtocolIn  uint8 = 0xA2
	OpSecurityProtocolOut uint8 = 0xB5
)

// Direction of an SG_IO data transfer (scsi/sg.h SG_DXFER_*).
type Direction int32

const (
	DirNone    Direction = -1
	DirToDev   Direction = -2
	DirFromDev Direction = -3
)

// SCSICommand is one CDB with its data buffer.
type SCSICommand struct {
	CDB       []byte
	Dir       Direction
	Data      []byte
	Sense     []byte // filled with sense data; 32 bytes is plenty
	TimeoutMs uint32
}

// SCSIResult is the outcome fields of sg_io_hdr.
type SCSIResult struct {
	Status       uint8 // SCSI status: 0 GOOD, 2 CHECK CONDITION
	HostStatus   uint16
	DriverStatus uint16
	Resid        int32
	Sense        []byte // the sb_len_wr bytes of sense data
}

// SGIO is the SG_IO seam: one SCSI command through a block or sg device.
type SGIO interface {
	SGIO(cmd *SCSICommand) (*SCSIResult, error)
}

// securityCDB builds SECURITY PROTOCOL IN/OUT: opcode, protocol,
// protocol-specific (big endian), INC_512 = 0 (length in bytes), length in
// bytes 6..9, control 0.
func securityCDB(op, protocol uint8, sp uint16, length int) []byte {
	cdb := make([]byte, 12)
	cdb[0] = op
	cdb[1] = protocol
	binary.BigEndian.PutUint16(cdb[2:], sp)
	binary.BigEndian.PutUint32(cdb[6:], uint32(length))
	return cdb
}

// SCSITransport tunnels security protocols with SECURITY PROTOCOL IN/OUT.
// SATA disks behind libata take the same CDBs: the kernel's SAT layer
// translates them to ATA TRUSTED RECEIVE/SEND.
type SCSITransport struct {
	Dev SGIO
}

var _ SecurityTransport = SCSITransport{}

// SecurityReceive implements SecurityTransport.
func (t SCSITransport) SecurityReceive(protocol uint8, sp uint16, buf []byte) error {
	return t.do(&SCSICommand{CDB: securityCDB(OpSecurityProtocolIn, protocol, sp, len(buf)), Dir: DirFromDev, Data: buf})
}

// SecuritySend implements SecurityTransport.
func (t SCSITransport) SecuritySend(protocol uint8, sp uint16, buf []byte) error {
	return t.do(&SCSICommand{CDB: securityCDB(OpSecurityProtocolOut, protocol, sp, len(buf)), Dir: DirToDev, Data: buf})
}

func (t SCSITransport) do(cmd *SCSICommand) error {
	cmd.Sense = make([]byte, 32)
	cmd.TimeoutMs = 30_000
	name := "SECURITY PROTOCOL IN"
	if cmd.CDB[0] == OpSecurityProtocolOut {
		name = "SECURITY PROTOCOL OUT"
	}
	r, err := t.Dev.SGIO(cmd)
	if err != nil {
		return fmt.Errorf("%s protocol %#02x: %w", name, cmd.CDB[1], err)
	}
	if err := r.Err(); err != nil {
		return fmt.Errorf("%s protocol %#02x: %w", name, cmd.CDB[1], err)
	}
	return nil
}

// SenseError is a CHECK CONDITION with decoded sense data.
type SenseError struct {
	Status                   uint8
	Key, ASC, ASCQ           uint8
	HostStatus, DriverStatus uint16
}

func (e *SenseError) Error() string {
	if e.HostStatus != 0 || (e.DriverStatus&^driverSense) != 0 {
		return fmt.Sprintf("SCSI transport failure: host status %#x, driver status %#x", e.HostStatus, e.DriverStatus)
	}
	return fmt.Sprintf("SCSI status %#02x, sense key %#x (%s) ASC/ASCQ %02x/%02x", e.Status, e.Key, senseKeys[e.Key&0xf], e.ASC, e.ASCQ)
}

// Unsupported reports ILLEGAL REQUEST / INVALID COMMAND OPERATION CODE or
// INVALID FIELD IN CDB: the device does not do this security protocol.
func (e *SenseError) Unsupported() bool {
	return e.Key == 0x5 && (e.ASC == 0x20 || e.ASC == 0x24)
}

// driverSense is DRIVER_SENSE: sense data is valid, not a failure by itself.
const driverSense = 0x08

var senseKeys = [16]string{"NO SENSE", "RECOVERED ERROR", "NOT READY", "MEDIUM ERROR", "HARDWARE ERROR", "ILLEGAL REQUEST", "UNIT ATTENTION", "DATA PROTECT", "BLANK CHECK", "VENDOR SPECIFIC", "COPY ABORTED", "ABORTED COMMAND", "RESERVED", "VOLUME OVERFLOW", "MISCOMPARE", "RESERVED"}

// Err turns a non-GOOD outcome into a *SenseError.
func (r *SCSIResult) Err() error {
	if r.Status == 0 && r.HostStatus == 0 && r.DriverStatus&^driverSense == 0 {
		return nil
	}
	e := &SenseError{Status: r.Status, HostStatus: r.HostStatus, DriverStatus: r.DriverStatus}
	e.Key, e.ASC, e.ASCQ = parseSense(r.Sense)
	if e.Unsupported() {
		return fmt.Errorf("%w: %w", ErrNoTCG, e)
	}
	return e
}

// parseSense decodes fixed (0x70/0x71) and descriptor (0x72/0x73) sense.
func parseSense(s []byte) (key, asc, ascq uint8) {
	if len(s) < 1 {
		return 0, 0, 0
	}
	switch s[0] & 0x7f {
	case 0x70, 0x71:
		if len(s) >= 14 {
			return s[2] & 0xf, s[12], s[13]
		}
		if len(s) >= 3 {
			return s[2] & 0xf, 0, 0
		}
	case 0x72, 0x73:
		if len(s) >= 4 {
			return s[1] & 0xf, s[2], s[3]
		}
	}
	return 0, 0, 0
}
