// Package fat reads the volume label of a FAT12/16/32 file system from its
// boot sector. It is the one FAT parser: tools/firstboot finds the CIDATA
// partition of a written image with it, and the QEMU host OS finds its
// seed the same way, so both sides accept exactly the same sectors.
package fat

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// ErrNotFAT is matched (errors.Is) when the sector is not a FAT boot
// sector at all (an MBR, ext4, zeros), as opposed to a FAT without a label
// field.
var ErrNotFAT = errors.New("not a FAT file system")

// Label extracts the volume label from a FAT boot sector (the first 512
// bytes of bs are read). The sector must carry the 55 AA signature, a jump
// instruction and a sane BPB (bytes/sector a power of two 512..4096,
// sectors/cluster a power of two): an MBR or random data that happens to
// end in 55 AA is not taken for a FAT. The extended boot signature 0x29
// (at 0x26 for FAT12/16, 0x42 for FAT32) says the label field is present:
// 11 bytes at 0x2B or 0x47, space padded. FAT32 is recognised by a zero
// 16-bit FAT size (BPB_FATSz16 at 0x16).
func Label(bs []byte) (string, error) {
	if len(bs) < 512 {
		return "", fmt.Errorf("%w: boot sector is %d bytes", ErrNotFAT, len(bs))
	}
	if bs[510] != 0x55 || bs[511] != 0xAA {
		return "", fmt.Errorf("%w: no 55 AA boot signature", ErrNotFAT)
	}
	if bs[0] != 0xEB && bs[0] != 0xE9 {
		return "", fmt.Errorf("%w: jump instruction %#02x", ErrNotFAT, bs[0])
	}
	bps := binary.LittleEndian.Uint16(bs[0x0B:])
	spc := bs[0x0D]
	if (bps != 512 && bps != 1024 && bps != 2048 && bps != 4096) || spc == 0 || spc&(spc-1) != 0 {
		return "", fmt.Errorf("%w: bytes/sector %d, sectors/cluster %d", ErrNotFAT, bps, spc)
	}
	sigOff, labelOff := 0x26, 0x2B
	if binary.LittleEndian.Uint16(bs[0x16:]) == 0 {
		sigOff, labelOff = 0x42, 0x47
	}
	if bs[sigOff] != 0x29 {
		return "", fmt.Errorf("FAT without a volume label field (extended boot signature %#02x at %#x)", bs[sigOff], sigOff)
	}
	return strings.TrimRight(string(bs[labelOff:labelOff+11]), " \x00"), nil
}

// ReadLabel reads the boot sector of the device or image at path and
// returns its label.
func ReadLabel(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	bs := make([]byte, 512)
	if _, err := io.ReadFull(f, bs); err != nil {
		return "", fmt.Errorf("read boot sector: %w", err)
	}
	return Label(bs)
}
