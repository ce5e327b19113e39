package blockdev

import (
	"strings"
	"testing"
)

// vpdPage prefixes data with a VPD header: peripheral device type 0 (disk),
// the page code, and the big-endian page length.
func vpdPage(code byte, data []byte) []byte {
	return append([]byte{0x00, code, byte(len(data) >> 8), byte(len(data))}, data...)
}

// designator builds one 0x83 designation descriptor.
func designator(codeSet, assocType byte, des []byte) []byte {
	return append([]byte{codeSet, assocType, 0, byte(len(des))}, des...)
}

func pad(s string, n int) string { return s + strings.Repeat(" ", n-len(s)) }

// What the kernel publishes for QEMU's "-device ide-hd,serial=CUREWIPESATA1,
// model=CURE QEMU SATA" behind AHCI. libata's SATL builds page 0x80 from
// IDENTIFY words 10-19 (20 bytes, space-padded on the right by QEMU) and
// page 0x83 from a vendor-specific serial designator followed by SAT's T10
// vendor ID designator "ATA     " + model (words 27-46) + serial. QEMU sets
// no WWN by default, so there is no NAA designator. Both vectors are byte
// for byte what /sys/block/sda/device/vpd_pg8{0,3} held in TestWipeQEMUSATA's
// guest (Debian 12 kernel 6.1).
var (
	libataPg80 = []byte("\x00\x80\x00\x14" + "CUREWIPESATA1       ")
	libataPg83 = []byte("\x00\x83\x00\x60" +
		"\x02\x00\x00\x14" + "CUREWIPESATA1       " +
		"\x02\x01\x00\x44" + "ATA     " + pad("CURE QEMU SATA", 40) + "CUREWIPESATA1       ")
)

func TestSCSISerial(t *testing.T) {
	naa := designator(0x01, 0x03, []byte{0x50, 0x00, 0xc5, 0x00, 0xa1, 0xb2, 0xc3, 0xd4})
	tests := []struct {
		name         string
		disk         string
		serial       string // device/serial
		vpd80, vpd83 []byte
		want         string
	}{
		{name: "libata page 0x80", disk: "sda", vpd80: libataPg80, vpd83: libataPg83, want: "CUREWIPESATA1"},
		{name: "SAS right-aligned, NUL padded", disk: "sda", vpd80: vpdPage(0x80, []byte("    ZA1B2C3D\x00\x00")), want: "ZA1B2C3D"},
		{name: "bytes past the page length ignored", disk: "sda", vpd80: append(vpdPage(0x80, []byte("ABCD")), "junk"...), want: "ABCD"},
		{name: "no page 0x80: SAT designator in 0x83", disk: "sda", vpd83: libataPg83, want: "CUREWIPESATA1"},
		{name: "blank page 0x80: SAT designator in 0x83", disk: "sda", vpd80: vpdPage(0x80, []byte(pad("", 20))), vpd83: libataPg83, want: "CUREWIPESATA1"},
		{name: "SAT designator, full-width model, right-aligned serial", disk: "sda",
			vpd83: vpdPage(0x83, designator(0x02, 0x01, []byte("ATA     "+strings.Repeat("MODEL-40", 5)+"     WD-WCC4E1234567"))), want: "WD-WCC4E1234567"},
		{name: "SAT designator after an NAA", disk: "sda", vpd83: vpdPage(0x83, append(naa, libataPg83[4+24:]...)), want: "CUREWIPESATA1"},
		// A WWN is not the serial the PSID inventory and selectors use.
		{name: "NAA only", disk: "sda", vpd83: vpdPage(0x83, naa), want: ""},
		// A non-ATA T10 vendor-specific identifier has no standard serial field.
		{name: "non-ATA T10 designator", disk: "sdb", vpd83: vpdPage(0x83, designator(0x02, 0x01, []byte("LIO-ORG block0     4f7b0d2e-1c2a-4d0b-9a55"))), want: ""},
		// SAT designator for the target port, not the logical unit.
		{name: "SAT designator for a port", disk: "sda", vpd83: vpdPage(0x83, designator(0x02, 0x11, []byte("ATA     "+pad("M", 40)+pad("S", 20)))), want: ""},
		{name: "no VPD pages", disk: "sda", want: ""},
		{name: "device/serial wins", disk: "sda", serial: "from-sysfs", vpd80: libataPg80, want: "from-sysfs"},
		// NVMe keeps its own path: VPD files are not consulted.
		{name: "nvme ignores VPD", disk: "nvme0n1", vpd80: libataPg80, want: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeSys(t, []fixDisk{{name: tc.disk, devPath: "pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0",
				sectors: "131072", serial: tc.serial, vpd80: tc.vpd80, vpd83: tc.vpd83}})
			disks, err := List(root)
			if err != nil {
				t.Fatal(err)
			}
			if len(disks) != 1 || disks[0].Serial != tc.want {
				t.Fatalf("disks = %+v, want one with serial %q", disks, tc.want)
			}
		})
	}
}

// A page that is present but malformed fails List naming the file, and
// page 0x83 is not consulted to paper over a broken 0x80.
func TestSCSISerialMalformed(t *testing.T) {
	tests := []struct {
		name         string
		vpd80, vpd83 []byte
		want         string
	}{
		{name: "length past the data", vpd80: []byte("\x00\x80\x00\x14" + "CUREWIPES0"), vpd83: libataPg83,
			want: "device/vpd_pg80: page length 20 runs past the 10 bytes after the header"},
		{name: "short header", vpd80: []byte{0x00, 0x80},
			want: "device/vpd_pg80: VPD page is 2 bytes, shorter than its 4-byte header"},
		{name: "wrong page code", vpd80: vpdPage(0x83, []byte("X")),
			want: "device/vpd_pg80: page code 0x83, want 0x80"},
		{name: "not ASCII", vpd80: vpdPage(0x80, []byte("AB\xffCD")),
			want: "device/vpd_pg80: serial byte 6 is 0xff, not printable ASCII"},
		{name: "NUL inside", vpd80: vpdPage(0x80, []byte("AB\x00CD  ")),
			want: `device/vpd_pg80: serial "AB\x00CD" has a NUL inside it`},
		{name: "designator past the page", vpd83: vpdPage(0x83, []byte("\x02\x01\x00\x44ATA     ")),
			want: "device/vpd_pg83: designator at byte 8 is 68 bytes long and runs past the page end (byte 16)"},
		{name: "descriptor header past the page", vpd83: vpdPage(0x83, []byte("\x01\x03\x00\x01X\x02\x01")),
			want: "device/vpd_pg83: designation descriptor header at byte 9 runs past the page end (byte 11)"},
		{name: "SAT serial not ASCII", vpd83: vpdPage(0x83, designator(0x02, 0x01, []byte("ATA     "+pad("M", 40)+"S\x07"+pad("", 18)))),
			want: "device/vpd_pg83: serial byte 57 is 0x07, not printable ASCII"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := fakeSys(t, []fixDisk{{name: "sda", devPath: "pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0",
				sectors: "131072", vpd80: tc.vpd80, vpd83: tc.vpd83}})
			_, err := List(root)
			if err == nil || !strings.Contains(err.Error(), "block device sda: ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want containing %q", err, tc.want)
			}
		})
	}
}
