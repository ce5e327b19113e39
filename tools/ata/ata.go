// Package ata speaks the ATA commands a SATA disk erase needs (IDENTIFY
// DEVICE and the Security feature set) through SCSI ATA PASS-THROUGH(16),
// the SAT command libata translates for /dev/sdX disks on a SATA port.
//
// Every command goes through the one-method Transport seam: CDB encoding,
// sense decoding and IDENTIFY parsing are tested against byte vectors, the
// security state machine against atafake.Drive, and *Device is the real
// SG_IO path.
//
// References: ACS-3 (T13/2161-D) for the commands and IDENTIFY data, SAT-4
// (T10/BSR INCITS 491) for the pass-through CDB and the sense it returns.
package ata

import (
	"errors"
	"fmt"
	"time"
)

// ATA command opcodes (ACS-3 7.12 IDENTIFY DEVICE, 7.37-7.42 Security
// feature set commands).
const (
	CmdIdentifyDevice          uint8 = 0xEC
	CmdSecuritySetPassword     uint8 = 0xF1
	CmdSecurityUnlock          uint8 = 0xF2
	CmdSecurityErasePrepare    uint8 = 0xF3
	CmdSecurityEraseUnit       uint8 = 0xF4
	CmdSecurityDisablePassword uint8 = 0xF6
)

// OpATAPassThrough16 is the SCSI opcode of ATA PASS-THROUGH (16) (SAT-4 12.2).
const OpATAPassThrough16 uint8 = 0x85

// SectorSize is the size of every data block the commands here move: the
// IDENTIFY data and the security commands' parameter block (ACS-3).
const SectorSize = 512

// Protocol is the PROTOCOL field of the pass-through CDB (SAT-4 12.2, the
// PROTOCOL field table).
type Protocol uint8

const (
	ProtoNonData    Protocol = 3
	ProtoPIODataIn  Protocol = 4
	ProtoPIODataOut Protocol = 5
)

// Direction is where the data buffer goes.
type Direction int8

const (
	DirNone Direction = iota
	DirIn             // device to host
	DirOut            // host to device
)

func (p Protocol) dir() Direction {
	switch p {
	case ProtoPIODataIn:
		return DirIn
	case ProtoPIODataOut:
		return DirOut
	case ProtoNonData:
	}
	return DirNone
}

// Reply is what the transport saw: SCSI status, host/driver status of the
// Linux SCSI layer, and the sense bytes the device (libata's SATL) wrote.
type Reply struct {
	Status       uint8 // SCSI status: 0 GOOD, 2 CHECK CONDITION
	HostStatus   uint16
	DriverStatus uint16
	Sense        []byte
}

// Transport sends one ATA PASS-THROUGH (16) CDB. data is filled (DirIn) or
// sent (DirOut). A non-nil error means the command could not be submitted
// (an ioctl errno); what the drive answered is in the Reply.
type Transport interface {
	PassThrough(cdb [16]byte, dir Direction, data []byte, timeout time.Duration) (Reply, error)
}

// ErrUnsupported means the path below does not carry ATA PASS-THROUGH (a
// SCSI disk, a USB bridge without SAT) or the command: nothing reached an
// ATA drive's security state.
var ErrUnsupported = errors.New("ATA pass-through not supported")

// Request is one 28-bit ATA command as the pass-through carries it.
type Request struct {
	Name     string // for errors: "SECURITY ERASE UNIT"
	Command  uint8
	Features uint8
	Count    uint8
	LBA      uint32 // 28 bits
	Device   uint8
	Protocol Protocol
	// CheckCondition sets CK_COND: the SATL returns the ATA registers as
	// sense even on success. Unused by the commands here (errors carry
	// them anyway) and kept for completeness of the encoding.
	CheckCondition bool
	Data           []byte // whole 512-byte blocks; nil for non-data
	Timeout        time.Duration
}

// deviceObsolete is what libata itself puts in the Device field of
// non-LBA commands (ATA_DEVICE_OBS): bits 7 and 5, obsolete since ATA-7
// but expected by old drives and bridges.
const deviceObsolete = 0xA0

// CDB encodes r as ATA PASS-THROUGH (16) (SAT-4 12.2):
//
//	byte 0   opcode 85h
//	byte 1   MULTIPLE_COUNT(7:5)=0, PROTOCOL(4:1), EXTEND(0)=0 (28-bit command)
//	byte 2   OFF_LINE(7:6)=0, CK_COND(5), T_TYPE(4)=0, T_DIR(3), BYTE_BLOCK(2), T_LENGTH(1:0)
//	byte 3/4 FEATURES(15:8)/(7:0)
//	byte 5/6 COUNT(15:8)/(7:0)
//	byte 7-12 LBA(31:24), LBA(7:0), LBA(39:32), LBA(15:8), LBA(47:40), LBA(23:16)
//	byte 13  DEVICE, byte 14 COMMAND, byte 15 CONTROL
//
// A data command sets T_LENGTH=2 (length in COUNT), BYTE_BLOCK=1 and
// T_TYPE=0 (COUNT counts 512-byte blocks), and T_DIR by direction.
func (r *Request) CDB() [16]byte {
	var c [16]byte
	c[0] = OpATAPassThrough16
	c[1] = uint8(r.Protocol&0xf) << 1
	if r.CheckCondition {
		c[2] |= 0x20
	}
	switch r.Protocol.dir() {
	case DirIn:
		c[2] |= 0x08 | 0x04 | 0x02
	case DirOut:
		c[2] |= 0x04 | 0x02
	case DirNone:
	}
	c[4] = r.Features
	c[6] = r.Count
	c[8] = uint8(r.LBA)
	c[10] = uint8(r.LBA >> 8)
	c[12] = uint8(r.LBA >> 16)
	c[13] = r.Device | uint8(r.LBA>>24)&0x0f
	c[14] = r.Command
	return c
}

// Do sends r through t and turns a failed command into an *Error.
func Do(t Transport, r *Request) error {
	dir := r.Protocol.dir()
	if dir != DirNone && (len(r.Data) == 0 || len(r.Data)%SectorSize != 0 || len(r.Data)/SectorSize != int(r.Count)) {
		return fmt.Errorf("ATA %s: %d data bytes for COUNT %d", r.Name, len(r.Data), r.Count)
	}
	if dir == DirNone && len(r.Data) != 0 {
		return fmt.Errorf("ATA %s: non-data command with %d data bytes", r.Name, len(r.Data))
	}
	rep, err := t.PassThrough(r.CDB(), dir, r.Data, r.Timeout)
	if err != nil {
		return fmt.Errorf("ATA %s (%02Xh): %w", r.Name, r.Command, err)
	}
	return rep.err(r)
}
