package nvme

import (
	"fmt"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ioctlAdminCmd is NVME_IOCTL_ADMIN_CMD = _IOWR('N', 0x41, struct nvme_admin_cmd):
// direction read|write (3<<30), size 72 (<<16), type 'N' (<<8), number 0x41.
const ioctlAdminCmd uintptr = 3<<30 | passthruSize<<16 | 'N'<<8 | 0x41

// passthruSize is sizeof(struct nvme_passthru_cmd).
const passthruSize = 72

// passthruCmd is struct nvme_passthru_cmd, laid out exactly as the kernel
// expects on 64-bit Linux (the uint64 buffer addresses fall on 8-byte
// offsets 16 and 24, so Go adds no padding).
type passthruCmd struct {
	opcode      uint8
	flags       uint8
	rsvd1       uint16
	nsid        uint32
	cdw2        uint32
	cdw3        uint32
	metadata    uint64
	addr        uint64
	metadataLen uint32
	dataLen     uint32
	cdw10       uint32
	cdw11       uint32
	cdw12       uint32
	cdw13       uint32
	cdw14       uint32
	cdw15       uint32
	timeoutMs   uint32
	result      uint32
}

var _ [passthruSize]byte = [unsafe.Sizeof(passthruCmd{})]byte{}

// Device is an NVMe controller character device (/dev/nvmeN).
type Device struct {
	f    *os.File
	path string
}

var _ Admin = (*Device)(nil)

// Open opens a controller character device such as /dev/nvme0.
func Open(path string) (*Device, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open nvme controller: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("stat nvme controller %s: %w", path, err)
	}
	// Admin passthrough also works on namespace block devices, but callers
	// expect controller semantics (NSID chosen per command), so insist on the
	// controller node.
	if fi.Mode()&os.ModeCharDevice == 0 {
		f.Close()
		return nil, fmt.Errorf("open nvme controller %s: expected a character device, found mode %v", path, fi.Mode())
	}
	return &Device{f: f, path: path}, nil
}

// Path is the device path given to Open.
func (d *Device) Path() string { return d.path }

// Close closes the device.
func (d *Device) Close() error { return d.f.Close() }

// AdminCommand submits cmd through NVME_IOCTL_ADMIN_CMD. The kernel returns
// a negative errno for transport/driver failures and a positive NVMe status
// for commands the controller completed unsuccessfully.
func (d *Device) AdminCommand(cmd *Command) (uint32, error) {
	if len(cmd.Data) > 1<<31 || len(cmd.Metadata) > 1<<31 {
		return 0, fmt.Errorf("nvme admin opcode %#02x on %s: buffer too large", cmd.Opcode, d.path)
	}
	pc := passthruCmd{
		opcode:      cmd.Opcode,
		flags:       cmd.Flags,
		nsid:        cmd.NSID,
		cdw2:        cmd.CDW2,
		cdw3:        cmd.CDW3,
		metadataLen: uint32(len(cmd.Metadata)),
		dataLen:     uint32(len(cmd.Data)),
		cdw10:       cmd.CDW10,
		cdw11:       cmd.CDW11,
		cdw12:       cmd.CDW12,
		cdw13:       cmd.CDW13,
		cdw14:       cmd.CDW14,
		cdw15:       cmd.CDW15,
		timeoutMs:   cmd.TimeoutMs,
	}
	// The kernel maps these user buffers for the duration of the ioctl; Go's
	// collector does not move heap objects, and KeepAlive below keeps them
	// reachable while only their addresses are held as integers.
	if len(cmd.Data) > 0 {
		pc.addr = uint64(uintptr(unsafe.Pointer(&cmd.Data[0])))
	}
	if len(cmd.Metadata) > 0 {
		pc.metadata = uint64(uintptr(unsafe.Pointer(&cmd.Metadata[0])))
	}
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, d.f.Fd(), ioctlAdminCmd, uintptr(unsafe.Pointer(&pc)))
	runtime.KeepAlive(cmd.Data)
	runtime.KeepAlive(cmd.Metadata)
	runtime.KeepAlive(d.f)
	if errno != 0 {
		return 0, fmt.Errorf("nvme admin opcode %#02x on %s: ioctl: %w", cmd.Opcode, d.path, errno)
	}
	if st := ParseStatus(cmd.Opcode, uint32(r)); st != nil {
		return pc.result, st
	}
	return pc.result, nil
}

// encodePassthru serializes pc as the kernel reads it; used by tests to pin
// the ABI layout independent of Go's struct layout rules.
func encodePassthru(pc *passthruCmd) []byte {
	b := unsafe.Slice((*byte)(unsafe.Pointer(pc)), passthruSize)
	return append([]byte(nil), b...)
}
