package ata

import (
	"os"
	"time"

	"github.com/cure-oss/cure/tools/sgio"
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
	f, err := sgio.OpenDevice(path, "ATA pass-through")
	if err != nil {
		return nil, err
	}
	return &Device{f: f, path: path}, nil
}

// Path is the device path.
func (d *Device) Path() string { return d.path }

// Close closes the device.
func (d *Device) Close() error { return d.f.Close() }

// defaultTimeout is for a request without one, where SG_IO would use the
// kernel's default instead.
const defaultTimeout = 30 * time.Second

// request maps a pass-through onto SG_IO: data moves only for a data
// direction.
func request(cdb [16]byte, dir Direction, data []byte, timeout time.Duration) *sgio.Request {
	r := &sgio.Request{CDB: cdb[:], Dir: sgio.DirNone, Sense: make([]byte, 64), Timeout: timeout}
	switch dir {
	case DirIn:
		r.Dir, r.Data = sgio.DirFromDev, data
	case DirOut:
		r.Dir, r.Data = sgio.DirToDev, data
	case DirNone:
	}
	if timeout.Milliseconds() <= 0 {
		r.Timeout = defaultTimeout
	}
	return r
}

// PassThrough implements Transport with the SG_IO ioctl.
func (d *Device) PassThrough(cdb [16]byte, dir Direction, data []byte, timeout time.Duration) (Reply, error) {
	res, err := sgio.Do(d.f, request(cdb, dir, data, timeout))
	if err != nil {
		return Reply{}, err
	}
	return Reply{Status: res.Status, HostStatus: res.HostStatus, DriverStatus: res.DriverStatus, Sense: res.Sense}, nil
}
