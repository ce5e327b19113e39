package fat

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// bootSector builds a minimal FAT boot sector by the spec's offsets.
func bootSector(fat32 bool, sig byte, label string) []byte {
	b := make([]byte, 512)
	b[0], b[1], b[2] = 0xEB, 0x3C, 0x90
	copy(b[3:], "mkfs.fat")
	binary.LittleEndian.PutUint16(b[0x0B:], 512)
	b[0x0D] = 4
	lbl := []byte(label + strings.Repeat(" ", max(0, 11-len(label))))
	if fat32 {
		binary.LittleEndian.PutUint16(b[0x16:], 0)
		binary.LittleEndian.PutUint32(b[0x24:], 1009)
		b[0x42] = sig
		copy(b[0x47:0x52], lbl)
		copy(b[0x52:], "FAT32   ")
	} else {
		binary.LittleEndian.PutUint16(b[0x16:], 8)
		b[0x26] = sig
		copy(b[0x2B:0x36], lbl)
		copy(b[0x36:], "FAT16   ")
	}
	b[510], b[511] = 0x55, 0xAA
	return b
}

func TestLabel(t *testing.T) {
	noSig := bootSector(false, 0x29, "CIDATA")
	noSig[511] = 0
	noJump := bootSector(false, 0x29, "CIDATA")
	noJump[0] = 0
	badBPS := bootSector(true, 0x29, "CIDATA")
	binary.LittleEndian.PutUint16(badBPS[0x0B:], 513)
	badSPC := bootSector(false, 0x29, "CIDATA")
	badSPC[0x0D] = 3
	// An MBR/GPT protective sector has 55 AA but no FAT BPB.
	mbr := make([]byte, 512)
	mbr[510], mbr[511] = 0x55, 0xAA
	mbr[0] = 0xFA
	for _, tc := range []struct {
		name    string
		bs      []byte
		want    string
		wantErr string
		notFAT  bool
	}{
		{"fat16", bootSector(false, 0x29, "CIDATA"), "CIDATA", "", false},
		{"fat32", bootSector(true, 0x29, "cidata"), "cidata", "", false},
		{"full 11 bytes", bootSector(true, 0x29, "ABCDEFGHIJK"), "ABCDEFGHIJK", "", false},
		{"NUL padded", bootSector(false, 0x29, "CIDATA\x00\x00\x00\x00\x00"), "CIDATA", "", false},
		{"longer than one sector", append(bootSector(false, 0x29, "CIDATA"), 1, 2, 3), "CIDATA", "", false},
		{"fat16 no label field", bootSector(false, 0x28, "CIDATA"), "", "extended boot signature 0x28", false},
		{"fat32 no label field", bootSector(true, 0, "CIDATA"), "", "extended boot signature 0x00 at 0x42", false},
		{"zeros", make([]byte, 512), "", "no 55 AA", true},
		{"no signature", noSig, "", "no 55 AA", true},
		{"no jump", noJump, "", "jump instruction", true},
		{"bytes/sector", badBPS, "", "bytes/sector 513", true},
		{"sectors/cluster", badSPC, "", "sectors/cluster 3", true},
		{"mbr", mbr, "", "jump instruction 0xfa", true},
		{"short", []byte{0xEB}, "", "boot sector is 1 bytes", true},
		{"100 bytes", make([]byte, 100), "", "boot sector is 100 bytes", true},
	} {
		got, err := Label(tc.bs)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || got != "" || errors.Is(err, ErrNotFAT) != tc.notFAT {
				t.Errorf("%s: %q, err = %v (want %q, ErrNotFAT %t)", tc.name, got, err, tc.wantErr, tc.notFAT)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v", tc.name, got, err)
		}
	}
}

// TestLabelMkfs checks the parser against images made by dosfstools.
func TestLabelMkfs(t *testing.T) {
	mkfs, err := exec.LookPath("mkfs.vfat")
	if err != nil {
		t.Skip("mkfs.vfat (dosfstools) not installed")
	}
	for _, tc := range []struct {
		args []string
		size int64
	}{
		{[]string{"-F", "12"}, 4 << 20},
		{[]string{"-F", "16"}, 32 << 20},
		{[]string{"-F", "32"}, 64 << 20},
	} {
		img := filepath.Join(t.TempDir(), "fat.img")
		if err := os.WriteFile(img, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(img, tc.size); err != nil {
			t.Fatal(err)
		}
		args := append(append([]string{}, tc.args...), "-n", "CIDATA", img)
		if out, err := exec.Command(mkfs, args...).CombinedOutput(); err != nil {
			t.Fatalf("mkfs.vfat %v: %v\n%s", args, err, out)
		}
		label, err := ReadLabel(img)
		if err != nil || label != "CIDATA" {
			t.Errorf("mkfs.vfat %v: label %q, %v", tc.args, label, err)
		}
	}
	if _, err := ReadLabel(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing file: no error")
	}
}
