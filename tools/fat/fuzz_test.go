package fat

import (
	"strings"
	"testing"
)

// FuzzLabel: a partition's boot sector is whatever the written image (or
// the disk before it) holds. A label is at most the 11-byte field,
// unpadded, and found only in a sector with the boot signature, a jump and
// a sane BPB; a longer input is read as its first sector.
func FuzzLabel(f *testing.F) {
	f.Add(bootSector(false, 0x29, "CIDATA"))
	f.Add(bootSector(true, 0x29, "cidata"))
	f.Add(bootSector(false, 0x28, "CIDATA"))
	f.Add(bootSector(true, 0x29, "\xff\xfe\x00 CIDATA"))
	f.Add(make([]byte, 511))
	f.Fuzz(func(t *testing.T, bs []byte) {
		label, err := Label(bs)
		if err != nil {
			if label != "" {
				t.Fatalf("label %q with error %v", label, err)
			}
			return
		}
		if len(bs) < 512 || bs[510] != 0x55 || bs[511] != 0xAA || bs[0] != 0xEB && bs[0] != 0xE9 {
			t.Fatalf("accepted a sector without a boot signature or jump: % x", bs[:min(len(bs), 16)])
		}
		if len(label) > 11 || label != strings.TrimRight(label, " \x00") {
			t.Fatalf("label %q", label)
		}
		if l2, err := Label(append(bs[:512:512], "more sectors"...)); err != nil || l2 != label {
			t.Fatalf("bytes after the sector changed the label: %q, %v", l2, err)
		}
	})
}
