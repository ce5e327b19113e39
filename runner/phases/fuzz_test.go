package phases

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseVPD reads PCI VPD as an adapter returns it (sysfs .../vpd). The
// name and part number select manifest entries by glob: they are UTF-8 and
// trimmed whatever the bytes, and a well-formed VPD built by vpdBytes gives
// back exactly its name and part number.
func FuzzParseVPD(f *testing.F) {
	b := vpdBytes("NVIDIA ConnectX-7 HHHL Adapter Card", "MCX75310AAS-NEAT")
	f.Add(b, "ConnectX-7", "MCX755106AS-HEAT")
	f.Add(b[:20], "", "")
	f.Add([]byte{0x82, 0xff, 0xff, 'x'}, "a b", "PN")
	f.Add([]byte{0x90, 6, 0, 'P', 'N', 200, 'X', 'Y', 'Z', 0x78}, "\xff", "\x00")
	f.Fuzz(func(t *testing.T, b []byte, name, pn string) {
		n, p := parseVPD(b)
		for _, s := range []string{n, p} {
			if !utf8.ValidString(s) || s != strings.TrimSpace(s) || strings.HasSuffix(s, "\x00") {
				t.Fatalf("VPD string %q", s)
			}
		}
		if len(n) > 3*len(b) || len(p) > 3*len(b) {
			t.Fatalf("strings longer than the VPD: %q %q", n, p)
		}
		if len(name) > 255 || len(pn) > 248 || !plain(name) || !plain(pn) {
			return
		}
		if gn, gp := parseVPD(vpdBytes(name, pn)); gn != name || gp != pn {
			t.Fatalf("vpdBytes(%q, %q) parses as %q, %q", name, pn, gn, gp)
		}
	})
}

// plain is printable ASCII without surrounding spaces: what parseVPD keeps as is.
func plain(s string) bool {
	for _, c := range []byte(s) {
		if c < 0x21 && c != ' ' || c > 0x7e {
			return false
		}
	}
	return s == strings.TrimSpace(s)
}

func TestParseVPDRepairsUTF8(t *testing.T) {
	if n, pn := parseVPD(vpdBytes("Connect\xffX", "MCX\xc3\x28")); n != "Connect\uFFFDX" || pn != "MCX\uFFFD(" {
		t.Errorf("parseVPD = %q, %q: want invalid bytes replaced by U+FFFD", n, pn)
	}
}
