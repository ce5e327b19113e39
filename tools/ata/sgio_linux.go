package ata

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Device is a SATA disk's block node (/dev/sdX) opened for SG_IO.
type Device struct {
	f    *os.File
	path string
}

var _ Transport = (*Device)(nil)

// Open opens path read-write: the kernel lets data-out pass-through
// commands (the security commands) through only on a writable handle.
func Open(path string) (*Device, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s for ATA pass-through: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if fi.Mode()&os.ModeDevice == 0 {
		f.Close()
		return nil, fmt.Errorf("open %s for ATA pass-through: expected a device node, found mode %v", path, fi.Mode())
	}
	return &Device{f: f, path: path}, nil
}

// Path is the device path.
func (d *Device) Path() string { return d.path }

// Close closes the device.
func (d *Device) Close() error { return d.f.Close() }

// SG_IO (scsi/sg.h).
const (
	ioctlSGIO   = 0x2285
	sgIOHdrSize = 88

	sgDxferNone    = -1
	sgDxferToDev   = -2
	sgDxferFromDev = -3
)

// sgIOHdr is struct sg_io_hdr on 64-bit Linux (pointers at 16, 24, 32 and
// 56; Go pads after pack_id as C does), 88 bytes.
type sgIOHdr struct {
	interfaceID    int32
	dxferDirection int32
	cmdLen         uint8
	mxSbLen        uint8
	iovecCount     uint16
	dxferLen       uint32
	dxferp         uintptr
	cmdp           uintptr
	sbp            uintptr
	timeout        uint32
	flags          uint32
	packID         int32
	usrPtr         uintptr
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

var _ [sgIOHdrSize]byte = [unsafe.Sizeof(sgIOHdr{})]byte{}

// timeoutMs converts for sg_io_hdr.timeout (milliseconds, 32 bits: about
// 49 days at most).
func timeoutMs(d time.Duration) uint32 {
	ms := d.Milliseconds()
	switch {
	case ms <= 0:
		return 30_000
	case ms > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(ms)
}

// newSGIOHdr fills the header; cdb, data and sense must stay alive until
// the ioctl returns.
func newSGIOHdr(cdb *[16]byte, dir Direction, data, sense []byte, timeout time.Duration) *sgIOHdr {
	h := &sgIOHdr{
		interfaceID:    'S',
		dxferDirection: sgDxferNone,
		cmdLen:         16,
		mxSbLen:        uint8(min(len(sense), 255)),
		cmdp:           uintptr(unsafe.Pointer(&cdb[0])),
		timeout:        timeoutMs(timeout),
	}
	if len(data) > 0 && dir != DirNone {
		h.dxferDirection = sgDxferFromDev
		if dir == DirOut {
			h.dxferDirection = sgDxferToDev
		}
		h.dxferLen = uint32(len(data))
		h.dxferp = uintptr(unsafe.Pointer(&data[0]))
	}
	if len(sense) > 0 {
		h.sbp = uintptr(unsafe.Pointer(&sense[0]))
	}
	return h
}

// PassThrough implements Transport with the SG_IO ioctl.
func (d *Device) PassThrough(cdb [16]byte, dir Direction, data []byte, timeout time.Duration) (Reply, error) {
	// One allocation for CDB and sense: it escapes through the returned
	// Sense, so it lives on the heap and cannot move under the kernel (the
	// header holds bare addresses the stack copier would not update).
	buf := make([]byte, 16+64)
	c := (*[16]byte)(buf[:16])
	*c = cdb
	sense := buf[16:]
	h := newSGIOHdr(c, dir, data, sense, timeout)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, d.f.Fd(), ioctlSGIO, uintptr(unsafe.Pointer(h)))
	runtime.KeepAlive(buf)
	runtime.KeepAlive(data)
	runtime.KeepAlive(d.f)
	if errno != 0 {
		return Reply{}, fmt.Errorf("SG_IO on %s: %w", d.path, errno)
	}
	n := min(int(h.sbLenWr), len(sense))
	return Reply{Status: h.status, HostStatus: h.hostStatus, DriverStatus: h.driverStatus, Sense: sense[:n]}, nil
}

// encodeSGIOHdr serializes h as the kernel reads it (tests pin the ABI).
func encodeSGIOHdr(h *sgIOHdr) []byte {
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(h)), sgIOHdrSize)...)
}
