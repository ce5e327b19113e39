package vpd

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParse(t *testing.T) {
	b := Encode(Fields{"ConnectX-7", "MCX755106AS-HEAT"})
	if f := Parse(b); f != (Fields{"ConnectX-7", "MCX755106AS-HEAT"}) {
		t.Errorf("Parse = %+v", f)
	}
	// A resource whose length runs past the data stops the parse, keeping what was read.
	if f := Parse(b[:20]); f != (Fields{Name: "ConnectX-7"}) {
		t.Errorf("truncated: %+v", f)
	}
	// Padding (spaces, NULs) is trimmed; a small resource other than the end tag stops it.
	padded := Encode(Fields{" NVIDIA BlueField-3\x00\x00", "900-9D3B6-00CV-AA0 "})
	if f := Parse(padded); f != (Fields{"NVIDIA BlueField-3", "900-9D3B6-00CV-AA0"}) {
		t.Errorf("padded: %+v", f)
	}
	if f := Parse(append([]byte{0x10, 0}, b...)); f != (Fields{}) {
		t.Errorf("leading small resource: %+v", f)
	}
}

func TestParseRepairsUTF8(t *testing.T) {
	if f := Parse(Encode(Fields{"Connect\xffX", "MCX\xc3\x28"})); f.Name != "Connect\uFFFDX" || f.PartNumber != "MCX\uFFFD(" {
		t.Errorf("Parse = %+v: want invalid bytes replaced by U+FFFD", f)
	}
}

// FuzzParse reads PCI VPD as an adapter returns it. The name and part
// number select manifest entries by glob: they are UTF-8 and trimmed
// whatever the bytes, and a well-formed VPD built by Encode gives back
// exactly its name and part number.
func FuzzParse(f *testing.F) {
	b := Encode(Fields{"NVIDIA ConnectX-7 HHHL Adapter Card", "MCX75310AAS-NEAT"})
	f.Add(b, "ConnectX-7", "MCX755106AS-HEAT")
	f.Add(b[:20], "", "")
	f.Add([]byte{0x82, 0xff, 0xff, 'x'}, "a b", "PN")
	f.Add([]byte{0x90, 6, 0, 'P', 'N', 200, 'X', 'Y', 'Z', 0x78}, "\xff", "\x00")
	f.Fuzz(func(t *testing.T, b []byte, name, pn string) {
		got := Parse(b)
		for _, s := range []string{got.Name, got.PartNumber} {
			if !utf8.ValidString(s) || s != strings.TrimSpace(s) || strings.HasSuffix(s, "\x00") {
				t.Fatalf("VPD string %q", s)
			}
			if len(s) > 3*len(b) {
				t.Fatalf("string longer than the VPD: %q", s)
			}
		}
		if len(name) > 255 || len(pn) > 248 || !plain(name) || !plain(pn) {
			return
		}
		if back := Parse(Encode(Fields{name, pn})); back != (Fields{name, pn}) {
			t.Fatalf("Encode(%q, %q) parses as %+v", name, pn, back)
		}
	})
}

// plain is printable ASCII without surrounding spaces: what Parse keeps as is.
func plain(s string) bool {
	for _, c := range []byte(s) {
		if c < 0x21 && c != ' ' || c > 0x7e {
			return false
		}
	}
	return s == strings.TrimSpace(s)
}
