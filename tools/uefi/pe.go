package uefi

import (
	"encoding/binary"
	"fmt"
	"os"
)

// PinPETimestamp sets the PE header's TimeDateStamp, which objcopy (binutils
// 2.40) fills with the current time whatever SOURCE_DATE_EPOCH says, and
// recomputes the header checksum over the result, so the image is
// reproducible.
func PinPETimestamp(path string, ts uint32) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := SetPETimestamp(b, ts); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, b, 0o644)
}

// SetPETimestamp is PinPETimestamp on the bytes.
func SetPETimestamp(b []byte, ts uint32) error {
	if len(b) < 0x40 || b[0] != 'M' || b[1] != 'Z' {
		return fmt.Errorf("not a PE image: no MZ header")
	}
	pe := int(binary.LittleEndian.Uint32(b[0x3c:]))
	// Signature (4), COFF header (20), optional header up to CheckSum (64).
	sum := pe + 4 + 20 + 64
	if pe < 0x40 || sum+4 > len(b) || string(b[pe:pe+4]) != "PE\x00\x00" {
		return fmt.Errorf("not a PE image: bad PE header offset %#x", pe)
	}
	binary.LittleEndian.PutUint32(b[pe+8:], ts)
	binary.LittleEndian.PutUint32(b[sum:], 0)
	// The PE checksum: 16-bit one's-complement-style sum of the file with
	// the checksum field zero, folded, plus the file length.
	var c uint64
	for i := 0; i+1 < len(b); i += 2 {
		c += uint64(binary.LittleEndian.Uint16(b[i:]))
		c = (c & 0xffff) + (c >> 16)
	}
	if len(b)%2 == 1 {
		c += uint64(b[len(b)-1])
		c = (c & 0xffff) + (c >> 16)
	}
	c = (c & 0xffff) + (c >> 16)
	binary.LittleEndian.PutUint32(b[sum:], uint32(c)+uint32(len(b)))
	return nil
}
