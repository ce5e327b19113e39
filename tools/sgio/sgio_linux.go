//go:build linux

// Package sgio issues one SCSI command on a Linux block or sg device with
// the SG_IO ioctl (scsi/sg.h, the version 3 struct sg_io_hdr interface).
// It is only the real ioctl: callers such as tools/ata and tools/opal keep
// their own seams and fakes above it.
package sgio

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Direction is sg_io_hdr.dxfer_direction (scsi/sg.h SG_DXFER_*).
type Direction int32

const (
	DirNone    Direction = -1 // SG_DXFER_NONE
	DirToDev   Direction = -2 // SG_DXFER_TO_DEV
	DirFromDev Direction = -3 // SG_DXFER_FROM_DEV
)

// Request is one CDB with its buffers; the kernel reads and fills them in
// place during Do.
type Request struct {
	CDB   []byte    // 1 to 16 bytes
	Dir   Direction // sent as DirNone when Data is empty
	Data  []byte
	Sense []byte // room for sense data; at most 255 bytes are offered
	// Timeout is cut to whole milliseconds and capped at 2^32-1 ms (about
	// 49 days, what the 32-bit field holds); zero leaves the kernel's
	// default.
	Timeout time.Duration
}

// Result is the outcome fields of sg_io_hdr.
type Result struct {
	Status       uint8 // SCSI status: 0 GOOD, 2 CHECK CONDITION
	HostStatus   uint16
	DriverStatus uint16 // 0x08 DRIVER_SENSE only says sense is valid
	Resid        int32  // Data bytes not transferred
	Sense        []byte // the sb_len_wr bytes of Request.Sense the kernel wrote
}

// ioctlSGIO is SG_IO (scsi/sg.h).
const ioctlSGIO = 0x2285

// hdrSize is sizeof(struct sg_io_hdr) on 64-bit Linux.
const hdrSize = 88

// hdr is struct sg_io_hdr on 64-bit Linux (Go pads after packID as C
// does). The buffer addresses are unsafe.Pointer rather than uintptr so
// the buffers stay alive and a stack move before the ioctl updates them.
type hdr struct {
	interfaceID    int32
	dxferDirection int32
	cmdLen         uint8
	mxSbLen        uint8
	iovecCount     uint16
	dxferLen       uint32
	dxferp         unsafe.Pointer
	cmdp           unsafe.Pointer
	sbp            unsafe.Pointer
	timeout        uint32
	flags          uint32
	packID         int32
	usrPtr         unsafe.Pointer
	status         uint8
	maskedStatus   uint8
	msgStatus      uint8
	sbLenWr        uint8
	hostStatus     uint16
	driverStatus   uint16
	resid          int32
	duration       uint32
	info           uint32
}

var _ [hdrSize]byte = [unsafe.Sizeof(hdr{})]byte{}

// timeoutMs converts for sg_io_hdr.timeout.
func timeoutMs(d time.Duration) uint32 {
	ms := d.Milliseconds()
	switch {
	case ms <= 0:
		return 0
	case ms > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(ms)
}

func newHdr(r *Request) (*hdr, error) {
	if len(r.CDB) == 0 || len(r.CDB) > 16 {
		return nil, fmt.Errorf("SG_IO: CDB length %d, want 1..16", len(r.CDB))
	}
	h := &hdr{
		interfaceID:    'S',
		dxferDirection: int32(r.Dir),
		cmdLen:         uint8(len(r.CDB)),
		mxSbLen:        uint8(min(len(r.Sense), 255)),
		dxferLen:       uint32(len(r.Data)),
		cmdp:           unsafe.Pointer(&r.CDB[0]),
		timeout:        timeoutMs(r.Timeout),
	}
	if len(r.Data) > 0 {
		h.dxferp = unsafe.Pointer(&r.Data[0])
	} else {
		h.dxferDirection = int32(DirNone)
	}
	if len(r.Sense) > 0 {
		h.sbp = unsafe.Pointer(&r.Sense[0])
	}
	return h, nil
}

// OpenDevice opens the device node path read-write: the kernel lets
// data-out commands through SG_IO only on a writable handle. purpose names
// the caller in errors ("open /dev/sda for opal: ...").
func OpenDevice(path, purpose string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s for %s: %w", path, purpose, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if fi.Mode()&os.ModeDevice == 0 {
		f.Close()
		return nil, fmt.Errorf("open %s for %s: expected a device node, found mode %v", path, purpose, fi.Mode())
	}
	return f, nil
}

// Do issues r on f. An error means the request was malformed or the ioctl
// failed; whatever the device answered, good or not, is in the Result.
func Do(f *os.File, r *Request) (Result, error) {
	h, err := newHdr(r)
	if err != nil {
		return Result{}, err
	}
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), ioctlSGIO, uintptr(unsafe.Pointer(h)))
	runtime.KeepAlive(f)
	if errno != 0 {
		return Result{}, fmt.Errorf("SG_IO on %s: %w", f.Name(), errno)
	}
	n := min(int(h.sbLenWr), len(r.Sense))
	return Result{
		Status:       h.status,
		HostStatus:   h.hostStatus,
		DriverStatus: h.driverStatus,
		Resid:        h.resid,
		Sense:        r.Sense[:n],
	}, nil
}
