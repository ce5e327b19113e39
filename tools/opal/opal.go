// Package opal reads TCG Storage Level 0 Discovery from self-encrypting
// drives and reverts them to factory state (PSID or SID RevertTPer).
//
// Discovery goes through a SecurityTransport (NVMe Security Receive, or
// SCSI SECURITY PROTOCOL IN through SG_IO for SATA/SAS disks); reverts go
// through the kernel's sed-opal ioctls on the block device behind the
// Ioctler seam. Parsing and error mapping are tested against byte vectors
// built from the TCG specifications; the real paths are thin wrappers.
package opal

import (
	"errors"
	"fmt"
)

// Security protocols (SPC-5 SECURITY PROTOCOL IN; the same values tunnel
// through NVMe Security Send/Receive and ATA TRUSTED commands).
const (
	ProtocolInfo uint8 = 0x00 // security protocol information
	ProtocolTCG1 uint8 = 0x01 // TCG: Level 0 Discovery and sessions
	ProtocolTCG2 uint8 = 0x02 // TCG: ComID management
)

// DiscoveryComID is the ComID Level 0 Discovery is read from (TCG Storage
// Architecture Core Spec 2.01, 3.3.6).
const DiscoveryComID uint16 = 0x0001

// DiscoveryBufferSize is how much Level 0 Discovery data is requested; the
// kernel's sed-opal uses the same 2048 bytes, and ATA trusted receive
// needs a multiple of 512.
const DiscoveryBufferSize = 2048

// SecurityTransport carries security protocol payloads to a drive.
type SecurityTransport interface {
	// SecurityReceive fills buf with the drive's answer for protocol and
	// protocol-specific field sp (a ComID for TCG).
	SecurityReceive(protocol uint8, sp uint16, buf []byte) error
	// SecuritySend delivers buf to the drive.
	SecuritySend(protocol uint8, sp uint16, buf []byte) error
}

// ErrNoTCG marks a drive that answered but is not a TCG storage device, or
// rejected the security commands altogether (e.g. QEMU's NVMe controller,
// which completes Security Receive with Invalid Command Opcode).
var ErrNoTCG = errors.New("no TCG storage support")

// Discover reads and parses Level 0 Discovery through t.
func Discover(t SecurityTransport) (*Discovery, error) {
	buf := make([]byte, DiscoveryBufferSize)
	if err := t.SecurityReceive(ProtocolTCG1, DiscoveryComID, buf); err != nil {
		return nil, fmt.Errorf("level 0 discovery (security protocol 0x01, ComID 0x0001): %w", err)
	}
	d, err := ParseDiscovery(buf)
	if err != nil {
		return nil, fmt.Errorf("level 0 discovery: %w", err)
	}
	return d, nil
}
