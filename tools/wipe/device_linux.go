package wipe

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cure-oss/cure/tools/ata"
	"github.com/cure-oss/cure/tools/blockdev"
	"github.com/cure-oss/cure/tools/nvme"
	"github.com/cure-oss/cure/tools/opal"
)

// BlockFile is a whole-disk block device opened with O_DIRECT, so marker
// reads after an erase come from the medium rather than the page cache
// (a passthrough Format NVM does not invalidate cached pages).
type BlockFile struct {
	f    *os.File
	path string
	size int64
}

var _ Block = (*BlockFile)(nil)

// OpenBlock opens path for direct I/O.
func OpenBlock(path string) (*BlockFile, error) {
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_DIRECT, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s for direct I/O: %w", path, err)
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("size of %s: %w", path, err)
	}
	return &BlockFile{f: f, path: path, size: size}, nil
}

// Size is the device size in bytes.
func (b *BlockFile) Size() int64 { return b.size }

// Close closes the device.
func (b *BlockFile) Close() error { return b.f.Close() }

// Sync flushes the device's volatile write cache.
func (b *BlockFile) Sync() error { return b.f.Sync() }

// aligned returns an n-byte slice whose start is 4 KiB aligned, as
// O_DIRECT requires of the buffer (Go's allocator does not promise it).
func aligned(n int) []byte {
	buf := make([]byte, n+blockSize)
	off := int(uintptr(unsafe.Pointer(&buf[0])) & (blockSize - 1))
	if off != 0 {
		off = blockSize - off
	}
	return buf[off : off+n]
}

func (b *BlockFile) check(p []byte, off int64) error {
	if off%blockSize != 0 || len(p)%blockSize != 0 {
		return fmt.Errorf("%s: direct I/O at offset %d length %d is not 4 KiB aligned", b.path, off, len(p))
	}
	return nil
}

// ReadAt reads through an aligned bounce buffer.
func (b *BlockFile) ReadAt(p []byte, off int64) (int, error) {
	if err := b.check(p, off); err != nil {
		return 0, err
	}
	buf := aligned(len(p))
	n, err := b.f.ReadAt(buf, off)
	copy(p, buf[:n])
	return n, err
}

// WriteAt writes through an aligned bounce buffer.
func (b *BlockFile) WriteAt(p []byte, off int64) (int, error) {
	if err := b.check(p, off); err != nil {
		return 0, err
	}
	buf := aligned(len(p))
	copy(buf, p)
	return b.f.WriteAt(buf, off)
}

// Device is every handle opened for one disk.
type Device struct {
	Handles
	NVMe    *NVMeInfo
	closers []io.Closer
}

// Close releases every handle.
func (d *Device) Close() error {
	var errs []error
	for _, c := range d.closers {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// Open opens the seams for disk: the block device, sed-opal ioctls, ATA
// pass-through for SATA and, for NVMe, the controller found under sysRoot
// ("/" in production).
func Open(disk blockdev.Disk, sysRoot string) (*Device, error) {
	d := &Device{}
	bf, err := OpenBlock(disk.Path)
	if err != nil {
		return nil, err
	}
	d.closers = append(d.closers, bf)
	d.Block = bf
	od, err := opal.OpenDevice(disk.Path)
	if err != nil {
		d.Close()
		return nil, err
	}
	d.closers = append(d.closers, od)
	d.Opal = od
	switch disk.Transport {
	case "nvme":
		ctrls, err := nvme.Enumerate(sysRoot)
		if err != nil {
			d.Close()
			return nil, err
		}
		var found *nvme.Info
		for i := range ctrls {
			for _, ns := range ctrls[i].Namespaces {
				if ns == disk.Name {
					found = &ctrls[i]
				}
			}
		}
		if found == nil {
			d.Close()
			return nil, fmt.Errorf("wipe %s: no NVMe controller under %s lists this namespace", disk.Name, filepath.Join(sysRoot, "sys/class/nvme"))
		}
		nsid, err := readNSID(sysRoot, disk.Name)
		if err != nil {
			d.Close()
			return nil, err
		}
		c, err := nvme.Open(found.DevPath)
		if err != nil {
			d.Close()
			return nil, err
		}
		d.closers = append(d.closers, c)
		d.Admin = c
		d.Security = opal.NVMeTransport{Admin: c}
		d.NVMe = &NVMeInfo{Controller: found.Name, NSID: nsid, Namespaces: found.Namespaces}
	case "sata", "sas", "scsi":
		d.Security = opal.SCSITransport{Dev: od}
	}
	if disk.Transport == "sata" {
		// libata's SAT layer takes ATA PASS-THROUGH (16) on the sd node.
		ad, err := ata.Open(disk.Path)
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("wipe %s: %w", disk.Name, err)
		}
		d.closers = append(d.closers, ad)
		d.ATA = ad
	}
	return d, nil
}

func readNSID(sysRoot, name string) (uint32, error) {
	p := filepath.Join(sysRoot, "sys/block", name, "nsid")
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, fmt.Errorf("wipe %s: read namespace id: %w", name, err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32)
	if err != nil || v == 0 {
		return 0, fmt.Errorf("wipe %s: %s: expected a namespace id >= 1, found %q", name, p, strings.TrimSpace(string(b)))
	}
	return uint32(v), nil
}
