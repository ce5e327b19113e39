package blockdev

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// scsiSerial reads an sd disk's serial number from the SCSI VPD pages the
// kernel fetched at probe time and publishes, verbatim (4-byte header
// included), in the scsi_device directory (/sys/block/sdX/device). SCSI
// disks have no device/serial file: libata, SAS, virtio-scsi and UAS disks
// all answer here.
//
// Unit Serial Number (0x80) is the serial itself. Failing that, Device
// Identification (0x83) is used only for the T10 vendor ID designator that
// SAT defines for ATA disks ("ATA     ", then IDENTIFY's 40-byte model and
// 20-byte serial), which carries the same serial. Other 0x83 designators
// are not serial numbers: an NAA is a world wide name, and a non-ATA T10
// vendor-specific identifier has no standard layout. Putting either in
// Serial would break serial selectors and the serial-keyed PSID inventory
// without any error, so a disk with only those reports no serial.
//
// An absent page yields "". A page that is present but malformed (too
// short for its header, the wrong page code, a length running past the
// data, a serial that is not ASCII) is an error naming the file: the kernel
// publishes exactly the bytes the device returned, length-checked, so such
// a page means the tree is not what this package understands, and guessing
// a serial here could aim a wipe at the wrong disk.
func scsiSerial(devDir string) (string, error) {
	p80 := filepath.Join(devDir, "vpd_pg80")
	page, err := readVPD(p80, 0x80)
	if err != nil {
		return "", err
	}
	if page != nil {
		s, err := vpdASCII(p80, page, 4)
		if err != nil || s != "" {
			return s, err
		}
		// An all-blank 0x80 is a device with no serial there; try 0x83.
	}
	p83 := filepath.Join(devDir, "vpd_pg83")
	page, err = readVPD(p83, 0x83)
	if err != nil || page == nil {
		return "", err
	}
	return satSerial(p83, page)
}

// readVPD returns the page's data after the header, or nil when the file
// does not exist or the kernel has no such page cached (it answers EINVAL
// when a rescan dropped a page whose attribute is still listed).
func readVPD(path string, code byte) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.EINVAL) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(b) < 4 {
		return nil, fmt.Errorf("%s: VPD page is %d bytes, shorter than its 4-byte header", path, len(b))
	}
	if b[1] != code {
		return nil, fmt.Errorf("%s: page code %#02x, want %#02x", path, b[1], code)
	}
	n := int(binary.BigEndian.Uint16(b[2:4]))
	if 4+n > len(b) {
		return nil, fmt.Errorf("%s: page length %d runs past the %d bytes after the header", path, n, len(b)-4)
	}
	// Bytes past the declared length are not part of the page (SPC): the
	// kernel never publishes any, and they are ignored if present.
	return b[4 : 4+n], nil
}

// satSerial finds SAT's logical-unit T10 vendor ID designator in a 0x83
// page (data after the header) and returns its serial field, or "" when
// the page has none.
func satSerial(path string, page []byte) (string, error) {
	const (
		codeSetASCII = 2
		assocLU      = 0
		typeT10      = 1
		satLen       = 8 + 40 + 20 // vendor, IDENTIFY model, IDENTIFY serial
	)
	for off := 0; off < len(page); {
		if off+4 > len(page) {
			return "", fmt.Errorf("%s: designation descriptor header at byte %d runs past the page end (byte %d)", path, 4+off, 4+len(page))
		}
		n := int(page[off+3])
		if off+4+n > len(page) {
			return "", fmt.Errorf("%s: designator at byte %d is %d bytes long and runs past the page end (byte %d)", path, 4+off+4, n, 4+len(page))
		}
		codeSet, assoc, typ := page[off]&0x0f, page[off+1]>>4&0x03, page[off+1]&0x0f
		des := page[off+4 : off+4+n]
		if codeSet == codeSetASCII && assoc == assocLU && typ == typeT10 && n == satLen && string(des[:8]) == "ATA     " {
			return vpdASCII(path, des[48:], 4+off+4+48)
		}
		off += 4 + n
	}
	return "", nil
}

// vpdASCII trims the space and NUL padding around a VPD ASCII field
// (serials are right-aligned in SPC, left-aligned by libata) and refuses
// anything but printable ASCII. at is the field's byte offset in the file.
func vpdASCII(path string, field []byte, at int) (string, error) {
	for i, c := range field {
		if c != 0 && (c < 0x20 || c > 0x7e) {
			return "", fmt.Errorf("%s: serial byte %d is %#02x, not printable ASCII", path, at+i, c)
		}
	}
	s := strings.Trim(string(field), " \x00")
	if strings.ContainsRune(s, 0) {
		return "", fmt.Errorf("%s: serial %q has a NUL inside it", path, s)
	}
	return s, nil
}
