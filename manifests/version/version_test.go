package version

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "empty version"},
		{"   ", "empty version"},
		{"1.2 3", "whitespace"},
		{"U50 v2.40 (2024)", "whitespace at offset 3 (spaces are allowed only in the forms FAMILY vX.Y [DATE]"},
		{"Not Present", "whitespace"},
		{"version not available", "whitespace"},
		{"3.50 0x800016DC", "whitespace"},
		{"0x00 0x0b 0x1FFFF", "whitespace"},
		{"BIOS Date: 08/04/2023 Ver 1..4", `version "1..4": empty segment`},
		{"2.55 Oct 01 2021 extra", "whitespace"},
		{"U50 BF-2.40", "whitespace"},
		{"U50 v2..40 (10/12/2024)", `FAMILY vX.Y [DATE]: version "v2..40": empty segment at offset 3`},
		{"2.40/3", `character '/'`},
		{"28.39..1002", "empty segment at offset 6"},
		{"1.2.", "empty segment at the end"},
		{"BF-24..1", "empty segment at offset 6"},
		{".1.2", "empty segment at the start"},
		{"1.2(3", "unbalanced '('"},
		{"1.2)3(", "unbalanced ')'"},
		{"abc", "no digit"},
		{"1.2.3\x00", "not allowed"},
	} {
		_, err := Parse(tc.in)
		var pe *ParseError
		if !errors.As(err, &pe) || !strings.Contains(pe.Reason, tc.want) || pe.Input != tc.in {
			t.Errorf("Parse(%q) error = %#v, want a *ParseError for the input mentioning %q", tc.in, err, tc.want)
		}
	}
}

func TestParsePrefix(t *testing.T) {
	for _, tc := range []struct{ in, prefix string }{
		{"BF-24.10-17", "bf"},
		{"P2.1.4", "p"},
		{"v2.0", ""},
		{"V2.0", ""},
		{"96.00.A5.00.01", ""},
		{"  28.39.1002 ", ""},
		{"U46 v2.10 (03/14/2024)", "u46"},
		{"P79 v1.45 (12/06/2017)", "p79"},
		{"P79 v1.45", "p79"},
		{"U30 2.54", "u30"},
	} {
		v, err := Parse(tc.in)
		if err != nil {
			t.Fatalf("Parse(%q): %v", tc.in, err)
		}
		if v.Prefix() != tc.prefix {
			t.Errorf("Parse(%q).Prefix() = %q, want %q", tc.in, v.Prefix(), tc.prefix)
		}
		if v.String() != strings.TrimSpace(tc.in) {
			t.Errorf("Parse(%q).String() = %q, want the trimmed input", tc.in, v.String())
		}
	}
}

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		// Mellanox/NVIDIA NIC: numeric segments, not lexical.
		{"28.39.1002", "28.39.1002", 0},
		{"28.39.1002", "28.40.1000", -1},
		{"28.39.1002", "28.39.998", 1},
		// BlueField bundles: "-17" is a build number, not a pre-release.
		{"BF-24.10-17", "BF-24.10-17", 0},
		{"BF-24.10-17", "BF-24.10-9", 1},
		{"BF-24.10-17", "BF-24.07-25", 1},
		{"bf-24.10-17", "BF-24.10.17", 0},
		// Shared prefix stripped, numeric compare after it.
		{"P2.1.4", "P2.1.10", -1},
		{"P2.1.4", "p2.1.4", 0},
		// Different families never compare equal.
		{"P2.1.4", "2.1.4", 1},
		{"BF-24.10-17", "P24.10.17", -1},
		// A lone v is decoration.
		{"v2.0", "2.0", 0},
		{"v2.0", "V2.1", -1},
		// Alphanumeric segments: natural order.
		{"96.00.A5.00.01", "96.00.A5.00.01", 0},
		{"96.00.A5.00.01", "96.00.B1.00.01", -1},
		{"96.00.a5.00.01", "96.00.A5.00.01", 0},
		{"96.00.A5.00.01", "96.00.5.00.01", 1}, // letters sort after digits
		// A VBIOS with a hex letter against another shape: just below the
		// first letter-free VBIOS above it (97.00.00.00.00).
		{"96.00.A5.00.01", "96.00.A10.00.01", 1},
		{"96.00.a5.00.01", "96.00.A05.00.01", 1},
		{"96.0.A5.0.1", "96.0.A10.0.1", -1}, // no VBIOS shape: as written
		// Leading zeros and missing trailing segments.
		{"07.2.22", "7.2.22", 0},
		{"1.2", "1.2.0", 0},
		{"1.2", "1.2.0.0.1", -1},
		{"1.2.0a", "1.2", 1},
		{"1.2.3", "1.2.3a", -1},
		// Separators are not significant.
		{"1_2-3", "1.2.3", 0},
		{"1.2+3", "1.2.3", 0},
		{"1.2(3)", "1.2.3", 0},
		// Numbers longer than int64 still compare numerically.
		{"1.99999999999999999999999", "1.100000000000000000000000", -1},
	} {
		got := Compare(MustParse(tc.a), MustParse(tc.b))
		if got != tc.want {
			t.Errorf("Compare(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if back := Compare(MustParse(tc.b), MustParse(tc.a)); back != -tc.want {
			t.Errorf("Compare(%q, %q) = %d, want %d (antisymmetry)", tc.b, tc.a, back, -tc.want)
		}
	}
}

func TestEqual(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"7.2.22", "07.2.22", true},
		{"7.2.22", "7.2.23", false},
		{"v2.0", "2.0.0", true},
		// Unparseable strings fall back to exact (trimmed) comparison.
		{"U50 v2.40 (10/12/2024)", "U50 v2.40 (10/12/2024)", true},
		{"U50 v2.40 (10/12/2024) ", "U50 v2.40 (10/12/2024)", true},
		{"U50 v2.40 (10/12/2024)", "U50 v2.41 (10/12/2024)", false},
		{"", "", false},
		{"n/a", "1.0", false},
	} {
		if got := Equal(tc.a, tc.b); got != tc.want {
			t.Errorf("Equal(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func FuzzCompare(f *testing.F) {
	for _, s := range [][3]string{
		{"28.39.1002", "28.39.998", "28.40"},
		{"BF-24.10-17", "BF-24.10.17", "P2.1.4"},
		{"96.00.A5.00.01", "96.00.a05", "v2.0"},
		{"1.2", "1.2.0", "1.2.0a"},
		{"1.2(3)", "(1)", "1+2_3"},
		{"2.55 Oct 01 2021", "iLO 5 v2.72", "11.2.0 Build 44"},
		{"BIOS Date: 08/04/2023 Ver 1.4", "0x00 0x0b 0x03 0x04", "TGBT42S 2.83 2023-07-05"},
		{"0x1A", "0x09", "26"},
		{"2.1.0-rc1", "2.1.0", "2.1.0-rev1"},
		{"HGX-22.10-1-rc57", "1.0.0rc2", "2.1.0-beta.2"},
		{"GB200Nvl-24.12-8", "U8E132C-3.20", "U8E132C 3.20"},
		{"4.9.0-43-g7d1fe7e", "4.9.0-43-g1234567", "1.45.455b66-rev4"},
		{"90.02.17.00.7D", "90.02.17.00.10", "96.00.A5.00.01"},
		{"96.00.A0.00.01", "96.00.9A.00.01", "96.00.89.00.01"},
		{"90.02.17.00.7D", "90.02.17.00.8", "90.02.17.00.7E5"},
		{"96.00.A5.00.01", "96.0.a5.0.1", "96.00.100.0.0"},
		{"4.40 0x8001b4e6 1.3492.0", "4.40", "4.40 0x8001c000 1.3492.0"},
		{"6.01 0x800034a4 1.1747.0", "6.01.0.0.1", "06.01.00.00.0A"},
		{"iDRAC 7.00.00.00", "BMC 1.2.3", "1.7.0-A03"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, a, b, c string) {
		va, errA := Parse(a)
		vb, errB := Parse(b)
		if errA != nil || errB != nil {
			return
		}
		if Compare(va, va) != 0 {
			t.Fatalf("Compare(%q, itself) != 0", a)
		}
		ab, ba := Compare(va, vb), Compare(vb, va)
		if ab != -ba {
			t.Fatalf("Compare(%q, %q) = %d but Compare(%q, %q) = %d", a, b, ab, b, a, ba)
		}
		if Equal(a, b) != (ab == 0) {
			t.Fatalf("Equal(%q, %q) = %v disagrees with Compare = %d", a, b, Equal(a, b), ab)
		}
		// Order answers as Compare does, or refuses both ways round.
		o, err := Order(va, vb)
		ro, rerr := Order(vb, va)
		if (err == nil) != (rerr == nil) || (err == nil && (o != ab || ro != ba)) {
			t.Fatalf("Order(%q, %q) = %d, %v; reverse %d, %v; Compare %d", a, b, o, err, ro, rerr, ab)
		}
		if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("%q", va.String())) {
			t.Fatalf("Order(%q, %q) error %q does not name the value", a, b, err)
		}
		if ok, serr := Satisfies(GateAtLeast, a, b); (serr == nil) != (err == nil) || (serr == nil && ok != (ab >= 0)) {
			t.Fatalf("Satisfies(at-least, %q, %q) = %v, %v; Order %d, %v", a, b, ok, serr, o, err)
		}
		// Re-parsing the String form yields the same version.
		if again, err := Parse(va.String()); err != nil || Compare(again, va) != 0 {
			t.Fatalf("Parse(%q.String()) = %v, %v", a, again, err)
		}
		vc, err := Parse(c)
		if err != nil {
			return
		}
		bc, ac := Compare(vb, vc), Compare(va, vc)
		if ab <= 0 && bc <= 0 && ac > 0 {
			t.Fatalf("not transitive: %q <= %q <= %q but %q > %q", a, b, c, a, c)
		}
	})
}

// BMCs report system ROMs as "FAMILY vX.Y (date)": the family gates, the
// version orders, the date is decoration.
func TestROMForm(t *testing.T) {
	for _, tc := range []struct {
		a, b  string
		want  int
		equal bool
	}{
		{"U46 v2.10 (03/14/2024)", "U46 v2.12 (01/01/2025)", -1, false},
		{"U46 v2.10 (03/14/2024)", "U46 v2.10", 0, true},
		{"u46 V2.10", "U46 v2.10 (03/14/2024)", 0, true},
		{"P79 v1.45 (12/06/2017)", "P79 v1.9", 1, false},
	} {
		a, b := MustParse(tc.a), MustParse(tc.b)
		if got := Compare(a, b); got != tc.want {
			t.Errorf("Compare(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := Equal(tc.a, tc.b); got != tc.equal {
			t.Errorf("%q.Equal(%q) = %v, want %v", tc.a, tc.b, got, tc.equal)
		}
	}
	if Equal("U46 v2.10", "U30 v2.10") {
		t.Error("different ROM families compared equal")
	}
}

// The spaced forms real BMCs report (the vendor profiles' captures in
// qemu-test/vbmc/profiles): what they parse to and how they order.
func TestVendorForms(t *testing.T) {
	for _, tc := range []struct {
		in, prefix, same string // same: an equal version in the plain form
	}{
		{"2.55 Oct 01 2021", "", "2.55"},               // HPE iLO 5 inventory
		{"2.72 Sep 04 2022", "", "2.72"},               // HPE iLO 5 inventory
		{"U30 v2.54 (04/18/2024)", "u30", "U30 v2.54"}, // HPE system ROM
		{"A42 v2.60 (08/11/2022)", "a42", "A42 v2.60"},
		{"iLO 5 v2.72", "ilo5", "iLO 5 v2.72"},                 // HPE manager FirmwareVersion
		{"TGBT42S 2.83 2023-07-05", "tgbt42s", "TGBT42S 2.83"}, // Lenovo XCC manager
		{"11.2.0 Build 44", "", "11.2.0.44"},                   // HPE platform data
		{"BIOS Date: 08/04/2023 Ver 1.4", "", "1.4"},           // Supermicro BIOS
		{"0x00 0x0b 0x03 0x04", "", "0.11.3.4"},                // NVIDIA CPLD
		{"1.45.455b66-rev4", "", "1.45.455b66.rev4"},
		{"P2.1.4", "p", "P2.1.4"},
		{"BF-24.10-17", "bf", "BF-24.10.17"},
		{"96.00.A5.00.01", "", "96.00.a5.00.01"},
		{"96.00.89.00.01", "", "96.0.89.0.1"}, // no hex letter: as written too
		{"4.40 0x8001b4e6 1.3492.0", "", "4.40 0X8001B4E6 1.3492"},
		{"HGX-22.10-1-rc57", "hgx", "HGX-22.10.1.rc57"},
		{"GB200Nvl-24.12-8", "gb200nvl", "GB200Nvl-24.12.8"}, // a platform name runs to the separator
		{"U8E132C-3.20", "u8e132c", "U8E132C 3.20"},          // Lenovo UEFI: build id, then version
		{"01.03.0262.0000_n04", "", "1.3.262.0.n04"},
	} {
		v, err := Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if v.Prefix() != tc.prefix || v.String() != tc.in {
			t.Errorf("Parse(%q) = prefix %q, string %q; want prefix %q and the input", tc.in, v.Prefix(), v.String(), tc.prefix)
		}
		if !Equal(tc.in, tc.same) {
			t.Errorf("Equal(%q, %q) = false, want true", tc.in, tc.same)
		}
	}
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"2.55 Oct 01 2021", "2.72 Sep 04 2022", -1},
		{"2.55 Oct 01 2021", "2.55 Jan 01 2030", 0}, // the date is not compared
		{"11.2.0 Build 44", "11.2.0 Build 9", 1},
		{"BIOS Date: 08/04/2023 Ver 1.4", "BIOS Date: 05/04/2023 Ver 1.3", 1},
		{"0x00 0x0b 0x03 0x04", "0x00 0x10 0x01 0x0f", -1},
	} {
		if got := Compare(MustParse(tc.a), MustParse(tc.b)); got != tc.want {
			t.Errorf("Compare(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestSatisfies(t *testing.T) {
	for _, tc := range []struct {
		gate, running, desired string
		ok                     bool
		err                    string
	}{
		{GateAtLeast, "2.55 Oct 01 2021", "2.50", true, ""},
		{GateAtLeast, "2.55 Oct 01 2021", "2.60", false, ""},
		{GateEqual, "2.55 Oct 01 2021", "2.55", true, ""},
		{GateAtLeast, "Not Present", "1.4", false, `running version: invalid version "Not Present"`},
		{GateAtLeast, "1.4", "1.4 1.5", false, `desired version: invalid version "1.4 1.5"`},
		{GateEqual, "Not Present", "Not Present", true, ""},
		{GateEqual, "Not Present", "1.4", false, ""},
		{GateAtLeast, "P2.1.4", "BF-24.10-17", false, "different version families"},
		{"", "7.2.22", "07.2.22", true, ""},
		{"newest", "1", "1", false, `unknown gate "newest"`},
	} {
		ok, err := Satisfies(tc.gate, tc.running, tc.desired)
		if ok != tc.ok || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("Satisfies(%q, %q, %q) = %v, %v; want %v, error containing %q", tc.gate, tc.running, tc.desired, ok, err, tc.ok, tc.err)
		}
	}
}

// vendorForm is one row of testdata/vendor_forms.txt.
type vendorForm struct {
	line                     int
	vendor, running, desired string
	equal                    bool
	atLeast                  string // true, false or error
}

// readVendorForms reads testdata/vendor_forms.txt (see its header).
func readVendorForms(t *testing.T) []vendorForm {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "vendor_forms.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var out []vendorForm
	for i, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Split(l, " | ")
		if len(f) != 5 || (f[3] != "true" && f[3] != "false") || !slices.Contains([]string{"true", "false", "error"}, f[4]) {
			t.Fatalf("testdata/vendor_forms.txt:%d: want vendor | running | desired | true/false | true/false/error, got %q", i+1, l)
		}
		out = append(out, vendorForm{i + 1, f[0], f[1], f[2], f[3] == "true", f[4]})
	}
	return out
}

// TestVendorVersionForms: the version strings of every vendor profile
// (Dell, HPE, Lenovo, Supermicro, the DMTF mockup, NVIDIA BlueField and
// HGX), hex bytes and platform prefixes included, under equal and
// at-least, as the table in testdata/vendor_forms.txt says; an at-least
// that cannot be answered without a guess is an error naming both values.
func TestVendorVersionForms(t *testing.T) {
	rows := readVendorForms(t)
	vendors := map[string]bool{}
	for _, r := range rows {
		vendors[strings.Fields(r.vendor)[0]] = true
		at := fmt.Sprintf("testdata/vendor_forms.txt:%d (%s)", r.line, r.vendor)
		if ok, err := Satisfies(GateEqual, r.running, r.desired); ok != r.equal || err != nil {
			t.Errorf("%s: equal %q, %q = %v, %v; want %v", at, r.running, r.desired, ok, err, r.equal)
		}
		ok, err := Satisfies(GateAtLeast, r.running, r.desired)
		got := fmt.Sprint(ok)
		if err != nil {
			got = "error"
			if !strings.Contains(err.Error(), fmt.Sprintf("%q", r.running)) && !strings.Contains(err.Error(), fmt.Sprintf("%q", r.desired)) {
				t.Errorf("%s: at-least %q, %q: error %q names neither value", at, r.running, r.desired, err)
			}
		}
		if got != r.atLeast {
			t.Errorf("%s: at-least %q, %q = %s (%v); want %s", at, r.running, r.desired, got, err, r.atLeast)
		}
		// What at-least answers, Compare agrees with; equal is Compare == 0.
		a, errA := Parse(r.running)
		b, errB := Parse(r.desired)
		if errA == nil && errB == nil {
			if c := Compare(a, b); (c >= 0) != ok && err == nil {
				t.Errorf("%s: Compare(%q, %q) = %d disagrees with at-least %v", at, r.running, r.desired, c, ok)
			}
		}
	}
	for _, v := range []string{"Dell", "HPE", "Lenovo", "Supermicro", "DMTF", "NVIDIA", "Intel", "CPLD"} {
		if !vendors[v] {
			t.Errorf("no %s rows in testdata/vendor_forms.txt", v)
		}
	}
	t.Run("pairs", testVendorVersionPairs)
}

// testVendorVersionPairs: NVIDIA's VBIOS hex bytes and Intel's NVM
// composites, as pairs with their order (less, equal, greater, or refused
// with a reason), mixed shapes, and forms the two rules leave alone.
func testVendorVersionPairs(t *testing.T) {
	const less, equal, greater, refused = "less", "equal", "greater", "refused"
	for _, tc := range []struct{ a, b, want, why string }{
		// VBIOS shape on both sides: five hex bytes.
		{"96.00.A0.00.01", "96.00.9A.00.01", greater, ""},
		{"96.00.A0.00.01", "96.00.A5.00.01", less, ""},
		{"90.02.17.00.7D", "90.02.17.00.10", greater, ""},
		{"96.00.A5.00.01", "96.00.5B.00.01", greater, ""},
		{"96.00.89.00.01", "96.00.9A.00.01", less, ""}, // as written 89 > 9; hex 0x89 < 0x9A
		{"96.00.99.00.01", "96.00.9A.00.01", less, ""},
		{"96.00.9F.00.01", "96.00.A0.00.01", less, ""},
		{"96.00.FF.00.01", "96.01.00.00.00", less, ""},
		{"96.00.89.00.01", "96.00.90.00.01", less, ""},
		{"86.00.4D.00.01", "90.00.0B.00.01", less, ""},
		{"96.00.a5.00.01", "96.00.A5.00.01", equal, ""},
		{"v96.00.A5.00.01", "96.00.A5.00.01", equal, ""},
		{"A5.00.00.00.01", "9F.00.00.00.01", greater, ""}, // no family: bytes
		// Mixed shapes: refused where hex bytes and the written form
		// disagree, ordered where they agree.
		{"96.00.A5.00.01", "96.00.5.00.01", refused, `letters "a" against the number 5`},
		{"96.00.A5.00.01", "96.00.A10.00.01", refused, "VBIOS shape"},
		{"96.00.A5.00.01", "96.0.a5.0.1", refused, "VBIOS shape"},
		{"96.00.A5.00.01", "96.00.A05.00.01", refused, "VBIOS shape"},
		{"90.02.17.00.7D", "90.02.17.00.8", refused, "VBIOS shape"},
		{"90.02.17.00.7D", "90.02.17.00.7D.1", refused, "VBIOS shape"},
		{"90.02.17.7D", "90.02.17.10", refused, "as hex bytes"}, // four segments: not the shape
		{"BF-96.00.A5.00.01", "96.00.A5.00.01", refused, "different version families"},
		{"96.00.A5.00.01", "97.1", less, ""},
		{"96.00.A5.00.01", "95.7", greater, ""},
		{"96.00.89.00.01", "96.0.89.0.1", equal, ""}, // no hex letter: as written
		{"96.00.89.00.01", "96.0.89", greater, ""},
		// Intel NVM composites: NVM version, then combo; EETrack equal or refused.
		{"4.40 0x8001b4e6 1.3492.0", "4.40 0x8001b4e6 1.3492.0", equal, ""},
		{"6.01 0x800034a4 1.1747.0", "6.01 0X800034A4 1.1747.0", equal, ""},
		{"4.40 0x8001b4e6 1.3492.0", "4.30 0x8001a000 1.3400.0", greater, ""},
		{"4.40 0x8001b4e6 1.3492.0", "4.40 0x8001b4e6 1.3500.0", less, ""},
		{"4.50 0x80020000 1.3492.0", "4.40 0x8001b4e6 1.3600.0", greater, ""}, // NVM first
		{"4.40 0x8001b4e6 1.3492.0", "4.40 0x8001c000 1.3500.0", less, ""},    // combo decides
		{"4.40 0x8001b4e6 1.3492.0", "4.40 0x8001c000 1.3492.0", refused, "different builds"},
		{"4.40 0x8001b4e6 1.3492.0", "4.40", greater, ""}, // a bare NVM version sorts below its composites
		{"4.40 0x8001b4e6 1.3492.0", "4.50", less, ""},
		{"4.40 0x8001b4e6 1.3492.0", "4.4", greater, ""},
		{"4.40 0x8001b4e6 1.3492.0", "4.40a", refused, `a suffix "a"`},
		{"4.40 0x8001b4e6 1.3492.0", "BF-4.40", refused, "different version families"},
		// Forms neither rule touches.
		{"28.39.1002", "28.40.1000", less, ""},
		{"BF-24.10-17", "BF-24.10", greater, ""},
		{"1.2.0a", "1.2.0", refused, `a suffix "a"`},
		{"0x1A", "0x09", greater, ""},
		{"2.1.0-rc1", "2.1.0", less, ""},
		{"1.13b", "1.13a", greater, ""},
		{"0x00 0x0b 0x03 0x04", "0.11.3.4", equal, ""},
		{"4.9.0-43-g7d1fe7e", "4.9.0-43-g1234567", refused, "two different commit ids"},
		{"U46 v2.10 (03/14/2024)", "U46 v2.12", less, ""},
	} {
		a, b := MustParse(tc.a), MustParse(tc.b)
		got, err := Order(a, b)
		back, berr := Order(b, a)
		name := map[int]string{-1: less, 0: equal, 1: greater}[got]
		if err != nil {
			name = refused
			if !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.a)) {
				t.Errorf("Order(%q, %q) error %q; want it naming both and saying %q", tc.a, tc.b, err, tc.why)
			}
		}
		if name != tc.want {
			t.Errorf("Order(%q, %q) = %d, %v: %s; want %s", tc.a, tc.b, got, err, name, tc.want)
		}
		if (err == nil) != (berr == nil) || back != -got {
			t.Errorf("Order(%q, %q) = %d, %v; reverse %d, %v", tc.a, tc.b, got, err, back, berr)
		}
		if c := Compare(a, b); (err == nil && c != got) || (err != nil && c == 0) {
			t.Errorf("Compare(%q, %q) = %d; Order %d, %v", tc.a, tc.b, c, got, err)
		}
		if ok, serr := Satisfies(GateAtLeast, tc.a, tc.b); (serr == nil) != (err == nil) || (serr == nil && ok != (got >= 0)) {
			t.Errorf("Satisfies(at-least, %q, %q) = %v, %v; Order %d, %v", tc.a, tc.b, ok, serr, got, err)
		}
	}
	// The equal gate: a manifest that pins only the NVM version matches a
	// running composite on that part; Equal itself stays Compare == 0.
	for _, tc := range []struct {
		running, desired string
		ok               bool
	}{
		{"4.40 0x8001b4e6 1.3492.0", "4.40", true},
		{"4.40 0x8001b4e6 1.3492.0", "4.4", false},
		{"4.40 0x8001b4e6 1.3492.0", "4.50", false},
		{"4.40", "4.40 0x8001b4e6 1.3492.0", false},
		{"4.40 0x8001b4e6 1.3492.0", "4.40 0x8001c000 1.3492.0", false},
		{"96.00.A5.00.01", "96.00.a5.00.01", true},
		{"96.00.A5.00.01", "96.0.a5.0.1", false},
	} {
		if ok, err := Satisfies(GateEqual, tc.running, tc.desired); ok != tc.ok || err != nil {
			t.Errorf("Satisfies(equal, %q, %q) = %v, %v; want %v", tc.running, tc.desired, ok, err, tc.ok)
		}
	}
	if Equal("4.40 0x8001b4e6 1.3492.0", "4.40") {
		t.Error(`Equal("4.40 0x8001b4e6 1.3492.0", "4.40") = true; Equal is Compare == 0`)
	}
}

// TestOrderRefusesGuesses: the places where an order would be a guess,
// and that Compare still answers them (it is a total order for sorting).
func TestOrderRefusesGuesses(t *testing.T) {
	for _, tc := range []struct{ a, b, why string }{
		{"96.00.A5.00.01", "96.00.5.00.01", `letters "a" against the number 5`},
		{"96.00.A5.00.01", "96.00.A10.00.01", "VBIOS shape"},
		{"1.2.0a", "1.2.0", `a suffix "a"`},
		{"1.7.0-A03", "1.7.0", `letters "a" against the number 0`},
		{"4.9.0-43-g7d1fe7e", "4.9.0-43-g1234567", "two different commit ids"},
		{"90.02.17.7D", "90.02.17.10", "as hex bytes"},
		{"90.02.17.00.7D", "90.02.17.00.8", "VBIOS shape"},
		{"4.40 0x8001b4e6 1.3492.0", "4.40 0x8001c000 1.3492.0", "EETrack 0x8001b4e6 against 0x8001c000"},
		{"P2.1.4", "BF-2.1.4", "different version families"},
	} {
		a, b := MustParse(tc.a), MustParse(tc.b)
		if _, err := Order(a, b); err == nil || !strings.Contains(err.Error(), tc.why) || !strings.Contains(err.Error(), tc.a) {
			t.Errorf("Order(%q, %q) = %v; want an error naming both and saying %q", tc.a, tc.b, err, tc.why)
		}
		if Compare(a, b) == 0 || Compare(a, b) != -Compare(b, a) {
			t.Errorf("Compare(%q, %q) = %d, reverse %d", tc.a, tc.b, Compare(a, b), Compare(b, a))
		}
	}
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"1.45.455b66-rev4", "1.45.455b66", 1}, // a post-release word
		{"2.1.0-rc1", "2.1.0", -1},
		{"1.0.0rc2", "1.0.0", -1},
		{"2.1.0-alpha", "2.1.0-beta", -1},
		{"2.1.0-rc.2", "2.1.0-rc.10", -1},
		{"2.1.0-rc1", "2.1.0-rev1", -1},
		{"0x1A", "0x09", 1},
		{"0x10", "16", 0},
		{"96.00.A5.00.01", "96.00.B1.00.01", -1},
		{"96.00.A5.00.01", "96.00.5B.00.01", 1}, // hex bytes: 0xA5 > 0x5B
		{"90.02.17.00.7D", "90.02.17.00.10", 1},
		{"BF-24.10-17", "BF-24.10", 1},
	} {
		if got, err := Order(MustParse(tc.a), MustParse(tc.b)); got != tc.want || err != nil {
			t.Errorf("Order(%q, %q) = %d, %v; want %d", tc.a, tc.b, got, err, tc.want)
		}
	}
}

// TestMixedShapesTotalOrder: Compare stays a total order, and Order agrees
// with it where it answers, over VBIOS versions with and without hex
// letters, other shapes near them, and NVM composites.
func TestMixedShapesTotalOrder(t *testing.T) {
	in := []string{
		"90.02.17.00.7D", "90.02.17.00.10", "90.02.17.00.7C", "90.02.17.00.80", "90.02.17.00.79",
		"90.02.17.00.8", "90.02.17.00.7E5", "90.02.17.00.7D.1", "90.02.17.7D", "90.02.17",
		"96.00.A5.00.01", "96.00.9A.00.01", "96.00.89.00.01", "96.00.99.99.99", "96.01.00.00.00",
		"96.0.a5.0.1", "96.00.A05.00.01", "96.00.A10.00.01", "96.00.100.0.0", "96.00.5.00.01",
		"97.1", "95.7", "99.99.99.99.A0", "FF.FF.FF.FF.F0", "A5.00.00.00.01", "00.00.00.00.0A",
		"1.2.0a", "1.2.0", "4.40", "4.4", "4.40 0x8001b4e6 1.3492.0", "4.40 0x8001c000 1.3492.0",
		"4.40 0x8001b4e6 1.3500.0", "4.50 0x80020000 1.0.0", "0x1A", "26", "BF-24.10-17",
	}
	vs := make([]Version, len(in))
	for i, s := range in {
		vs[i] = MustParse(s)
	}
	for i, a := range vs {
		for j, b := range vs {
			ab := Compare(a, b)
			if ab != -Compare(b, a) {
				t.Errorf("Compare(%q, %q) = %d, not antisymmetric", in[i], in[j], ab)
			}
			if o, err := Order(a, b); err == nil && o != ab {
				t.Errorf("Order(%q, %q) = %d, Compare %d", in[i], in[j], o, ab)
			}
			for k, c := range vs {
				if ab <= 0 && Compare(b, c) <= 0 && Compare(a, c) > 0 {
					t.Errorf("not transitive: %q <= %q <= %q but %q > %q", in[i], in[j], in[k], in[i], in[k])
				}
			}
		}
	}
}
