package wipe

import (
	"bytes"
	"os"
	"regexp"
	"testing"
)

// TestWipeQEMUSATA boots the CURE kernel with internal/qemuinit in SATA
// mode against QEMU's AHCI disk: IDENTIFY DEVICE goes through the real
// SG_IO ATA PASS-THROUGH (16) path and libata's SAT translation, and the
// planner judges the real answer. QEMU's IDE emulation has no Security
// feature set, so the expected outcome is a refusal that quotes the
// drive's own words 82 and 128. Needs what bootWipeGuest needs.
func TestWipeQEMUSATA(t *testing.T) {
	// ahci pulls libahci and libata, sd_mod scsi_mod; the CRC modules are
	// soft dependencies resolveModules cannot see.
	con, diskPath := bootWipeGuest(t, "cure.wipetest=sata",
		[]string{"crct10dif_generic", "crc64_rocksoft_generic", "ahci", "sd_mod"},
		"-device", "ahci,id=sata0",
		"-device", "ide-hd,bus=sata0.0,drive=d0,serial=CUREWIPESATA1,model=CURE QEMU SATA")
	for _, want := range []*regexp.Regexp{
		// Selected by serial: blockdev read it from sysfs (VPD page 0x80).
		regexp.MustCompile(`step=blockdev name=sda transport=sata serial="CUREWIPESATA1" model="CURE QEMU SATA"`),
		// The serial and model come from our IDENTIFY parse (byte-swapped
		// ATA strings), not from sysfs: the pass-through path worked.
		regexp.MustCompile(`step=ata-identify transport=sata model="CURE QEMU SATA" serial="CUREWIPESATA1" sectors=131072 word82=0x[0-9a-f]{4} word128=0x0000 state="SEC0 \(not supported\)"`),
		// libata's answer to a command the drive aborts, decoded down to
		// the ATA error register (Debian 12's kernel uses the pre-6.11
		// fixed-format offsets).
		regexp.MustCompile(`step=ata-abort aborted=true err=ATA SECURITY SET PASSWORD \(F1h\): command aborted by the drive: ATA status 0x[0-9a-f]{2} \([A-Z ]*ERR\), error 0x04 \(ABRT\)`),
		regexp.MustCompile(`step=plan-sata err=wipe sda \(serial "CUREWIPESATA1"\): no erase method satisfies policy format .*ata-security-erase: IDENTIFY word 82 0x[0-9a-f]{4}, word 128 0x0000: the drive does not support the Security feature set`),
	} {
		if !want.MatchString(con) {
			logConsole(t, con)
			t.Errorf("console lacks %s", want)
		}
	}
	// Probing wrote nothing.
	img, err := os.ReadFile(diskPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(img, []byte(diskFill)) || !bytes.HasSuffix(img, []byte(diskFill)) {
		t.Error("the disk image changed during a probe")
	}
}
