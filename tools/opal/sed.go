package opal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// Ioctler issues one ioctl on an open block device with arg as the
// argument struct, already laid out as the kernel reads it (and written
// back into arg for _IOR requests). It returns the ioctl's non-negative
// return value; a failing ioctl returns the errno as a syscall.Errno.
type Ioctler interface {
	Ioctl(req uint32, arg []byte) (int, error)
}

// KeyMax is OPAL_KEY_MAX: the largest credential sed-opal accepts.
const KeyMax = 256

// opalKeySize is sizeof(struct opal_key): lr u8, key_len u8, __align[6],
// key[256] (linux/include/uapi/linux/sed-opal.h, 6.1).
const opalKeySize = 8 + KeyMax

// sed-opal requests used here, built as asm-generic/ioctl.h does:
// direction in bits 31:30 (1 write, 2 read), argument size in 29:16,
// type 'p' in 15:8, number in 7:0.
const (
	IocRevertTPer     uint32 = 1<<30 | opalKeySize<<16 | 'p'<<8 | 226 // IOC_OPAL_REVERT_TPR, 0x410870e2
	IocPSIDRevertTPer uint32 = 1<<30 | opalKeySize<<16 | 'p'<<8 | 232 // IOC_OPAL_PSID_REVERT_TPR, 0x410870e8
	IocGetStatus      uint32 = 2<<30 | 8<<16 | 'p'<<8 | 236           // IOC_OPAL_GET_STATUS, 0x800870ec
)

// encodeKey lays out struct opal_key for locking range lr.
func encodeKey(lr uint8, key []byte) []byte {
	b := make([]byte, opalKeySize)
	b[0] = lr
	b[1] = uint8(len(key))
	copy(b[8:], key)
	return b
}

// checkCredential refuses credentials that cannot be right before a
// drive sees them: some drives count failed PSID/SID attempts and stop
// accepting them until a power cycle.
func checkCredential(kind, cred string) error {
	switch {
	case cred == "":
		return fmt.Errorf("%s is empty", kind)
	case len(cred) > KeyMax:
		return fmt.Errorf("%s is %d bytes, more than the %d sed-opal accepts", kind, len(cred), KeyMax)
	case strings.TrimSpace(cred) != cred:
		return fmt.Errorf("%s has leading or trailing whitespace (copied from a label?); fix the inventory entry", kind)
	}
	return nil
}

// PSIDRevert reverts the drive to factory state with the PSID printed on
// its label (IOC_OPAL_PSID_REVERT_TPR). On Opal and Ruby drives this
// replaces the media encryption keys: every user byte becomes unreadable.
func PSIDRevert(dev Ioctler, psid string) error {
	if err := checkCredential("PSID", psid); err != nil {
		return fmt.Errorf("psid revert: %w", err)
	}
	return revert(dev, IocPSIDRevertTPer, "psid revert", psid)
}

// RevertTPer reverts the drive with the owner's SID credential
// (IOC_OPAL_REVERT_TPR, which authenticates as Admin SP SID).
func RevertTPer(dev Ioctler, sid string) error {
	if err := checkCredential("SID password", sid); err != nil {
		return fmt.Errorf("revert tper: %w", err)
	}
	return revert(dev, IocRevertTPer, "revert tper (SID)", sid)
}

func revert(dev Ioctler, req uint32, what, cred string) error {
	arg := encodeKey(0, []byte(cred))
	defer clear(arg) // do not leave the credential in memory longer than needed
	return callErr(what, req)(dev.Ioctl(req, arg))
}

// callErr maps an sed-opal ioctl outcome: a positive return value is the
// TCG method status the drive answered; a negative one an errno.
func callErr(what string, req uint32) func(int, error) error {
	return func(r int, err error) error {
		if err != nil {
			var errno syscall.Errno
			if errors.As(err, &errno) {
				switch errno {
				case syscall.ENOTTY, syscall.EOPNOTSUPP, errENOTSUPP:
					return fmt.Errorf("%s: ioctl %#x: kernel reports no Opal support on this device (%w): %w", what, req, ErrNoTCG, err)
				case syscall.EACCES, syscall.EPERM:
					return fmt.Errorf("%s: ioctl %#x: needs CAP_SYS_ADMIN: %w", what, req, err)
				}
			}
			return fmt.Errorf("%s: ioctl %#x: %w", what, req, err)
		}
		if r > 0 {
			return fmt.Errorf("%s: %w", what, &MethodStatus{Code: uint8(r)})
		}
		return nil
	}
}

// errENOTSUPP is the kernel-internal ENOTSUPP (524), which sed-opal in 6.1
// returns to user space when the block device has no Opal support (seen
// on QEMU's NVMe namespace: "errno 524").
const errENOTSUPP = syscall.Errno(524)

// MethodStatus is a TCG method status code returned by the drive (Core
// Spec 2.01 Table 166, as named by the kernel's opal_errors table).
type MethodStatus struct{ Code uint8 }

// TCG method status codes.
const (
	StatusSuccess            = 0x00
	StatusNotAuthorized      = 0x01
	StatusSPBusy             = 0x03
	StatusSPFailed           = 0x04
	StatusSPDisabled         = 0x05
	StatusSPFrozen           = 0x06
	StatusNoSessions         = 0x07
	StatusUniquenessConflict = 0x08
	StatusInsufficientSpace  = 0x09
	StatusInsufficientRows   = 0x0A
	StatusInvalidParameter   = 0x0C
	StatusTPerMalfunction    = 0x0F
	StatusTransactionFailure = 0x10
	StatusResponseOverflow   = 0x11
	StatusAuthorityLockedOut = 0x12
	StatusFail               = 0x3F
)

var statusNames = map[uint8]string{
	0x00: "SUCCESS",
	0x01: "NOT_AUTHORIZED",
	0x02: "OBSOLETE (UNKNOWN_ERROR)",
	0x03: "SP_BUSY",
	0x04: "SP_FAILED",
	0x05: "SP_DISABLED",
	0x06: "SP_FROZEN",
	0x07: "NO_SESSIONS_AVAILABLE",
	0x08: "UNIQUENESS_CONFLICT",
	0x09: "INSUFFICIENT_SPACE",
	0x0A: "INSUFFICIENT_ROWS",
	0x0B: "INVALID_FUNCTION",
	0x0C: "INVALID_PARAMETER",
	0x0D: "OBSOLETE (INVALID_REFERENCE)",
	0x0E: "OBSOLETE",
	0x0F: "TPER_MALFUNCTION",
	0x10: "TRANSACTION_FAILURE",
	0x11: "RESPONSE_OVERFLOW",
	0x12: "AUTHORITY_LOCKED_OUT",
	0x3F: "FAIL",
}

// Name is the specification's name for the code.
func (s *MethodStatus) Name() string {
	if n, ok := statusNames[s.Code]; ok {
		return n
	}
	return "UNKNOWN_STATUS"
}

func (s *MethodStatus) Error() string {
	hint := ""
	switch s.Code {
	case StatusNotAuthorized:
		hint = ": the credential was rejected (check the PSID/SID in the inventory against the drive label)"
	case StatusAuthorityLockedOut:
		hint = ": too many failed attempts; power-cycle the drive before retrying"
	case StatusSPFrozen, StatusSPBusy:
		hint = ": the SP is not accepting this now; a power cycle may clear it"
	}
	return fmt.Sprintf("TCG method status %#02x %s%s", s.Code, s.Name(), hint)
}

// IsStatus reports whether err carries TCG method status code.
func IsStatus(err error, code uint8) bool {
	var s *MethodStatus
	return errors.As(err, &s) && s.Code == code
}

// Status is the kernel's view from IOC_OPAL_GET_STATUS (struct
// opal_status: flags u32, reserved u32).
type Status struct {
	Supported, LockingSupported, LockingEnabled, Locked, MBREnabled, MBRDone bool
}

// GetStatus asks the kernel for the drive's Opal state (it runs its own
// Level 0 Discovery).
func GetStatus(dev Ioctler) (Status, error) {
	arg := make([]byte, 8)
	if err := callErr("opal get status", IocGetStatus)(dev.Ioctl(IocGetStatus, arg)); err != nil {
		return Status{}, err
	}
	f := binary.NativeEndian.Uint32(arg)
	return Status{
		Supported:        f&0x01 != 0,
		LockingSupported: f&0x02 != 0,
		LockingEnabled:   f&0x04 != 0,
		Locked:           f&0x08 != 0,
		MBREnabled:       f&0x10 != 0,
		MBRDone:          f&0x20 != 0,
	}, nil
}
