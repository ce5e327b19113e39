package bluefield

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func testdataFiles(f *testing.F) {
	paths, _ := filepath.Glob("testdata/*.txt")
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
}

// FuzzParseMisc reads /dev/rshimN/misc, whose log part the DPU writes.
func FuzzParseMisc(f *testing.F) {
	testdataFiles(f)
	f.Add([]byte("BOOT_MODE x\n"))
	f.Add([]byte("BOOT_MODE   -1 (0:rshim)\nDEV_NAME pcie-0000:a3:00.2\n"))
	f.Add([]byte(" INFO[BL2]: start\n ERR[UEFI]: boot failed\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseMisc(b)
		crlf, err2 := ParseMisc(bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n")))
		if (err == nil) != (err2 == nil) || err == nil && !reflect.DeepEqual(m, crlf) {
			t.Fatalf("CRLF line endings changed the result: %v / %v", err, err2)
		}
		if err != nil {
			return
		}
		if len(m.Fields) == 0 || m.BootMode < -1 {
			t.Fatalf("fields %v, boot mode %d", m.Fields, m.BootMode)
		}
		for k, v := range m.Fields {
			if !miscField.MatchString(k+" x") || v == "" || v != strings.TrimSpace(v) || !utf8.ValidString(v) {
				t.Fatalf("field %q = %q", k, v)
			}
		}
		for _, l := range m.Log {
			if !logLine.MatchString(l) || !utf8.ValidString(l) {
				t.Fatalf("log line %q", l)
			}
		}
		if p := m.PCI(); p != "" && (!strings.HasSuffix(p, ".0") || !strings.HasPrefix("pcie-"+p[:len(p)-1], m.DevName[:len(m.DevName)-1])) {
			t.Fatalf("PCI %q from DEV_NAME %q", p, m.DevName)
		}
		s, failure := LogState(m.Log)
		if s.String() == "" || (s == StateFailed) != (failure != "") {
			t.Fatalf("state %v, failure %q", s, failure)
		}
	})
}

// FuzzParseVersions reads bfver output or the misc log for versions.
func FuzzParseVersions(f *testing.F) {
	testdataFiles(f)
	f.Add([]byte("BlueField ATF version: a BlueField UEFI version: b\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v := ParseVersions(b)
		for _, s := range []string{v.ATF, v.UEFI, v.BSP, v.OSRelease} {
			if strings.ContainsAny(s, "\n") || s != strings.TrimSpace(s) || !utf8.ValidString(s) {
				t.Fatalf("version %q", s)
			}
		}
		if v != ParseVersions(bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n"))) {
			t.Fatal("CRLF line endings changed the versions")
		}
	})
}

func TestParseMiscHostile(t *testing.T) {
	// A value of Unicode spaces only used to index an empty strings.Fields.
	if m, err := ParseMisc([]byte("BOOT_MODE \u00a0 (1)\nDEV_NAME usb-1\n")); err != nil || m.BootMode != -1 {
		t.Errorf("BOOT_MODE of U+00A0: %+v, %v", m, err)
	}
	if _, err := ParseMisc([]byte("BOOT_MODE -1\n")); err == nil || !strings.Contains(err.Error(), `BOOT_MODE "-1": expected a number`) {
		t.Errorf("negative BOOT_MODE: %v", err)
	}
	// The log is the DPU's: a field-like line in it is not a field.
	b, _ := os.ReadFile("testdata/misc_log_ready.txt")
	b = append(b, " BOOT_MODE 0\n DEV_NAME pcie-0000:00:01.2\n"...)
	m, err := ParseMisc(b)
	if err != nil || m.BootMode != 1 || m.DevName != "pcie-0000:a3:00.2" {
		t.Errorf("fields after the log header: boot mode %d, dev %q, %v", m.BootMode, m.DevName, err)
	}
	m, err = ParseMisc([]byte("DEV_INFO Blue\xffField\n INFO[BL2]: st\xc3\x28art\n"))
	if err != nil || m.DevInfo != "Blue\uFFFDField" || m.Log[0] != "INFO[BL2]: st\uFFFD(art" {
		t.Errorf("invalid UTF-8: %+v, %v", m, err)
	}
}
