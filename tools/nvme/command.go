// Package nvme speaks the NVMe admin command set through the Linux
// passthrough ioctl (NVME_IOCTL_ADMIN_CMD) and lists controllers from sysfs.
//
// Every command goes through the one-method Admin seam, so parsing and
// status handling are tested against byte vectors and fakes, while *Device
// is the real path exercised against QEMU's emulated controller.
package nvme

import "fmt"

// Admin opcodes used by this package (NVMe Base Specification 2.0, Figure 28).
const (
	OpGetLogPage       uint8 = 0x02
	OpIdentify         uint8 = 0x06
	OpFirmwareCommit   uint8 = 0x10
	OpFirmwareDownload uint8 = 0x11
)

// Command mirrors struct nvme_passthru_cmd (linux/nvme_ioctl.h); the buffer
// pointers and lengths are derived from the Metadata and Data slices.
type Command struct {
	Opcode    uint8
	Flags     uint8
	NSID      uint32
	CDW2      uint32
	CDW3      uint32
	Metadata  []byte
	Data      []byte
	CDW10     uint32
	CDW11     uint32
	CDW12     uint32
	CDW13     uint32
	CDW14     uint32
	CDW15     uint32
	TimeoutMs uint32
}

// Admin issues one admin command and returns completion dword 0. A command
// the controller completed with a non-zero status returns a *StatusError.
type Admin interface {
	AdminCommand(cmd *Command) (result uint32, err error)
}

// Status code types (NVMe 2.0, Figure 93).
const (
	SCTGeneric         uint8 = 0x0
	SCTCommandSpecific uint8 = 0x1
	SCTMediaError      uint8 = 0x2
	SCTPath            uint8 = 0x3
	SCTVendor          uint8 = 0x7
)

// StatusError is a command completion with a non-successful status field.
type StatusError struct {
	SCT, SC uint8
	DNR     bool // do not retry: the same command will fail again
	More    bool // more status information in the Error Information log
	Opcode  uint8
}

// ParseStatus decodes the status value the kernel returns from the
// passthrough ioctl: the 15-bit completion status (CQE DW3 bits 31:17,
// shifted down by one), i.e. SC in bits 7:0, SCT in 10:8, CRD in 12:11,
// More in 13 and DNR in 14. It returns nil for status 0.
func ParseStatus(opcode uint8, status uint32) *StatusError {
	if status&0x7fff == 0 {
		return nil
	}
	return &StatusError{
		SC:     uint8(status & 0xff),
		SCT:    uint8((status >> 8) & 0x7),
		More:   status&(1<<13) != 0,
		DNR:    status&(1<<14) != 0,
		Opcode: opcode,
	}
}

// Status re-encodes the status field in the kernel's ioctl return format.
func (e *StatusError) Status() uint16 {
	v := uint16(e.SC) | uint16(e.SCT&0x7)<<8
	if e.More {
		v |= 1 << 13
	}
	if e.DNR {
		v |= 1 << 14
	}
	return v
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("nvme admin opcode %#02x: %s (SCT %#x SC %#02x, status %#04x)",
		e.Opcode, e.Name(), e.SCT, e.SC, e.Status())
}

// Name is the specification's name for the status code.
func (e *StatusError) Name() string {
	var names map[uint8]string
	switch e.SCT {
	case SCTGeneric:
		names = genericStatus
	case SCTCommandSpecific:
		names = commandSpecificStatus
	case SCTMediaError:
		names = mediaStatus
	case SCTVendor:
		return "Vendor Specific"
	}
	if n, ok := names[e.SC]; ok {
		return n
	}
	return "Unknown Status"
}

// InvalidOpcode reports whether the controller does not implement the
// command at all (QEMU rejects Firmware Download/Commit, Sanitize and
// Security Send/Receive this way).
func (e *StatusError) InvalidOpcode() bool {
	return e.SCT == SCTGeneric && e.SC == 0x01
}

// NVMe 2.0 Figure 94.
var genericStatus = map[uint8]string{
	0x00: "Successful Completion",
	0x01: "Invalid Command Opcode",
	0x02: "Invalid Field in Command",
	0x03: "Command ID Conflict",
	0x04: "Data Transfer Error",
	0x05: "Commands Aborted due to Power Loss Notification",
	0x06: "Internal Error",
	0x07: "Command Abort Requested",
	0x08: "Command Aborted due to SQ Deletion",
	0x09: "Command Aborted due to Failed Fused Command",
	0x0a: "Command Aborted due to Missing Fused Command",
	0x0b: "Invalid Namespace or Format",
	0x0c: "Command Sequence Error",
	0x0d: "Invalid SGL Segment Descriptor",
	0x0e: "Invalid Number of SGL Descriptors",
	0x0f: "Data SGL Length Invalid",
	0x10: "Metadata SGL Length Invalid",
	0x11: "SGL Descriptor Type Invalid",
	0x12: "Invalid Use of Controller Memory Buffer",
	0x13: "PRP Offset Invalid",
	0x14: "Atomic Write Unit Exceeded",
	0x15: "Operation Denied",
	0x16: "SGL Offset Invalid",
	0x18: "Host Identifier Inconsistent Format",
	0x19: "Keep Alive Timer Expired",
	0x1a: "Keep Alive Timeout Invalid",
	0x1b: "Command Aborted due to Preempt and Abort",
	0x1c: "Sanitize Failed",
	0x1d: "Sanitize In Progress",
	0x1e: "SGL Data Block Granularity Invalid",
	0x1f: "Command Not Supported for Queue in CMB",
	0x20: "Namespace is Write Protected",
	0x21: "Command Interrupted",
	0x22: "Transient Transport Error",
	0x23: "Command Prohibited by Command and Feature Lockdown",
	0x24: "Admin Command Media Not Ready",
	0x80: "LBA Out of Range",
	0x81: "Capacity Exceeded",
	0x82: "Namespace Not Ready",
	0x83: "Reservation Conflict",
	0x84: "Format In Progress",
}

// NVMe 2.0 Figure 95 (admin commands only).
var commandSpecificStatus = map[uint8]string{
	0x00: "Completion Queue Invalid",
	0x01: "Invalid Queue Identifier",
	0x02: "Invalid Queue Size",
	0x03: "Abort Command Limit Exceeded",
	0x05: "Asynchronous Event Request Limit Exceeded",
	0x06: "Invalid Firmware Slot",
	0x07: "Invalid Firmware Image",
	0x08: "Invalid Interrupt Vector",
	0x09: "Invalid Log Page",
	0x0a: "Invalid Format",
	0x0b: "Firmware Activation Requires Conventional Reset",
	0x0c: "Invalid Queue Deletion",
	0x0d: "Feature Identifier Not Saveable",
	0x0e: "Feature Not Changeable",
	0x0f: "Feature Not Namespace Specific",
	0x10: "Firmware Activation Requires NVM Subsystem Reset",
	0x11: "Firmware Activation Requires Controller Level Reset",
	0x12: "Firmware Activation Requires Maximum Time Violation",
	0x13: "Firmware Activation Prohibited",
	0x14: "Overlapping Range",
	0x15: "Namespace Insufficient Capacity",
	0x16: "Namespace Identifier Unavailable",
	0x18: "Namespace Already Attached",
	0x19: "Namespace Is Private",
	0x1a: "Namespace Not Attached",
	0x1b: "Thin Provisioning Not Supported",
	0x1c: "Controller List Invalid",
	0x1d: "Device Self-test In Progress",
	0x1e: "Boot Partition Write Prohibited",
	0x1f: "Invalid Controller Identifier",
	0x20: "Invalid Secondary Controller State",
	0x21: "Invalid Number of Controller Resources",
	0x22: "Invalid Resource Identifier",
	0x23: "Sanitize Prohibited While Persistent Memory Region is Enabled",
	0x24: "ANA Group Identifier Invalid",
	0x25: "ANA Attach Failed",
}

// NVMe 2.0 Figure 96.
var mediaStatus = map[uint8]string{
	0x80: "Write Fault",
	0x81: "Unrecovered Read Error",
	0x82: "End-to-end Guard Check Error",
	0x83: "End-to-end Application Tag Check Error",
	0x84: "End-to-end Reference Tag Check Error",
	0x85: "Compare Failure",
	0x86: "Access Denied",
	0x87: "Deallocated or Unwritten Logical Block",
}
