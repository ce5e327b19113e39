package blockdev

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzSCSISerial feeds VPD pages 0x80 and 0x83 as the device returned them
// (the kernel publishes them verbatim) through scsiSerial. A serial it
// returns is printable ASCII, trimmed, without NULs, and comes from the
// page it says: the selectors and the PSID inventory key on it.
func FuzzSCSISerial(f *testing.F) {
	f.Add(libataPg80, libataPg83, true, true)
	f.Add([]byte(nil), libataPg83, false, true)
	f.Add(vpdPage(0x80, []byte(pad("", 20))), libataPg83, true, true)
	f.Add(vpdPage(0x80, []byte("    ZA1B2C3D\x00\x00")), []byte(nil), true, false)
	f.Add([]byte("\x00\x80\x00\x14CUREWIPES0"), libataPg83, true, true)
	f.Add([]byte(nil), vpdPage(0x83, []byte("\x02\x01\x00\x44ATA     ")), false, true)
	f.Add([]byte(nil), vpdPage(0x83, append(designator(0x01, 0x03, []byte{0x50, 0, 0xc5, 0, 0xa1, 0xb2, 0xc3, 0xd4}), libataPg83[4+24:]...)), false, true)
	dir, err := os.MkdirTemp("", "fuzz-vpd-")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(dir) })
	p80, p83 := filepath.Join(dir, "vpd_pg80"), filepath.Join(dir, "vpd_pg83")
	put := func(t *testing.T, p string, b []byte, present bool) {
		os.Remove(p)
		if present {
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.Fuzz(func(t *testing.T, pg80, pg83 []byte, has80, has83 bool) {
		put(t, p80, pg80, has80)
		put(t, p83, pg83, has83)
		s, err := scsiSerial(dir)
		if err != nil {
			if s != "" || !strings.Contains(err.Error(), dir+"/vpd_pg8") {
				t.Fatalf("serial %q with error %v", s, err)
			}
			return
		}
		if s == "" {
			return
		}
		if s != strings.Trim(s, " \x00") || strings.ContainsRune(s, 0) {
			t.Fatalf("serial %q not trimmed or holds a NUL", s)
		}
		for _, c := range []byte(s) {
			if c < 0x20 || c > 0x7e {
				t.Fatalf("serial %q holds byte %#02x", s, c)
			}
		}
		if !(has80 && strings.Contains(string(pg80), s)) && !(has83 && strings.Contains(string(pg83), s)) {
			t.Fatalf("serial %q is in neither page", s)
		}
	})
}

// model and serial files hold the device's bytes; Disk strings go into
// protobuf messages, which refuse invalid UTF-8.
func TestListRepairsUTF8(t *testing.T) {
	root := fakeSys(t, []fixDisk{{name: "nvme0n1", devPath: "pci0000:00/0000:00:04.0/nvme/nvme0", sectors: "2048",
		model: "Model\xff\xfe", serial: "S\xc3\x28N"}})
	disks, err := List(root)
	if err != nil {
		t.Fatal(err)
	}
	if d := disks[0]; d.Model != "Model\uFFFD" || d.Serial != "S\uFFFD(N" {
		t.Errorf("model %q serial %q: want invalid bytes replaced by U+FFFD", d.Model, d.Serial)
	}
}
