// Package version compares vendor firmware version strings.
//
// Vendor strings such as "28.39.1002", "BF-24.10-17", "P2.1.4" or "96.00.A5.00.01"
// are not semver: semver libraries read "-17" as a pre-release and reject "A5".
// This package compares them segment by segment instead:
//
//   - Segments are separated by '.', '-', '_', '+', '(' and ')'. Which separator
//     is used is not significant: "1.2-3" equals "1.2.3".
//   - A leading alphabetic prefix ("BF" in "BF-24.10-17", "P" in "P2.1.4") names
//     the version family of a component. A platform name that runs on through
//     digits and letters up to the first separator ("GB200Nvl" in
//     "GB200Nvl-24.12-8", Lenovo's build id "U8E132C" in "U8E132C-3.20": a
//     letter after a digit) is the family as a whole. Versions are compared
//     on the rest when both sides carry the same family (case-insensitively).
//     A lone "v"/"V" prefix ("v2.0") is decoration and is always dropped.
//     Versions with different families are never equal; they are ordered by
//     family only so that Compare stays a total order: Order and Satisfies
//     refuse to order them.
//   - Within a segment, runs of digits compare numerically (leading zeros are
//     ignored, so "07" == "7" and "A05" == "A5") and runs of letters compare
//     lexically, case-insensitively. A segment written as one hex number
//     ("0x1A", as CPLDs and PSUs report a single byte) is that number: "0x1A"
//     is newer than "0x09", and equals "26".
//   - Pre-releases sort below their release: a run of letters that is one of
//     alpha, beta, pre, preview or rc ("2.1.0-rc1", "HGX-22.10-1-rc57",
//     "1.0.0rc2") is older than the version without it. Only these words:
//     a number after a separator is a build, not a pre-release ("BF-24.10-17",
//     "1.2.3-4", git describe's "4.9.0-43-g7d1fe7e" are newer than
//     "BF-24.10", "1.2.3", "4.9.0"), unlike semver, because that is how
//     NVIDIA, Mellanox and OpenBMC number their builds.
//   - Missing trailing segments count as 0: "1.2" == "1.2.0".
//   - NVIDIA's VBIOS versions are hex bytes: a version of the VBIOS shape,
//     five '.'-separated segments of exactly two hex digits
//     ("96.00.A5.00.01", "90.02.17.00.7D", and "96.00.89.00.01" too: the
//     family writes hex throughout), compares with another of that shape
//     as five bytes, whichever of them has a letter: "96.00.A0.00.01" is
//     newer than "96.00.9A.00.01", "90.02.17.00.7D" than "90.02.17.00.10",
//     "96.00.9A.00.01" than "96.00.89.00.01". The shape has no family
//     ("A5.00.00.00.01" is bytes too); a lone "v" before it is dropped.
//     The shape is exact: "96.0.a5.0.1" and "96.00.A05.00.01" are not
//     VBIOS versions and are not equal to "96.00.A5.00.01". A VBIOS whose
//     bytes are all decimal digits orders the same as hex bytes and as
//     written, so it compares with other shapes as written ("96.00.89.00.01"
//     equals "96.0.89.0.1"); one with a letter is placed, for Compare,
//     just below the first letter-free VBIOS above it, and Order refuses
//     where that and reading it as written disagree (mixed shapes:
//     "96.00.A5.00.01" against "96.00.A10.00.01" or "96.0.a5.0.1").
//   - Intel's NVM composite, as ethtool and Redfish report E810 and X710
//     adapters ("4.40 0x8001b4e6 1.3492.0": NVM version, EETrack id, combo
//     image version), orders by its NVM version, then its combo version.
//     The EETrack is an identifier, only ever equal or not: two composites
//     that differ only in it are different builds that Order refuses to
//     order (Compare orders them by the id, for sorting). A bare version
//     against a composite is its NVM version, and sorts below every
//     composite of that NVM version, as a missing segment does: a manifest
//     that pins "4.40" is satisfied at least by "4.40 0x8001b4e6 1.3492.0",
//     and under the equal gate a running composite matches a desired bare
//     version on its NVM part (see Satisfies); a running bare "4.40" does
//     not say which image it is, so it does not reach a desired composite.
//     Only the three-part form is read ("3.50 0x800016DC" is an error).
//   - Compare is a total order, for sorting. Order (and so the at-least gate)
//     refuses to decide where the answer would be a guess: letters against
//     a number at the same place ("96.00.A5" against "96.00.5"), a suffix of
//     letters against nothing ("1.2.0a" against "1.2.0": "a" may mark an
//     alpha or a patch) unless it is a post-release word (rev, post, patch,
//     hotfix, build: "1.45.455b66-rev4" is newer than "1.45.455b66"), two
//     different git commit ids at the same distance from a tag, two
//     segments of two hex digits that order differently as hex bytes
//     outside two VBIOS-shaped versions ("90.02.17.7D" against
//     "90.02.17.10": they may be VBIOS bytes), a VBIOS against another
//     shape where hex bytes and the written form disagree, two Intel NVM
//     composites that differ only in the EETrack, and two families. A
//     wrong "at least" skips an update the manifest asks for.
//   - Whitespace is allowed only in the spaced forms BMCs report, where a
//     family, a release date or a build number stands beside the version
//     (see spacedForms): the system-ROM form "FAMILY vX.Y (MM/DD/YYYY)" (HPE
//     "U46 v2.10 (03/14/2024)", the DMTF mockup's "P79 v1.45 (12/06/2017)",
//     HPE's manager "iLO 5 v2.72", Lenovo's "TGBT42S 2.83 2023-07-05", Dell's
//     "iDRAC 7.00.00.00"), a version with a build date ("2.55 Oct 01 2021",
//     iLO's inventory), with a build number ("11.2.0 Build 44"), Supermicro's
//     "BIOS Date: 08/04/2023 Ver 1.4", and CPLD versions written as hex bytes
//     ("0x00 0x0b 0x03 0x04"), and Intel's NVM composite (above). A FAMILY
//     is the prefix; a date is never compared (one release has one date); a
//     build number is a last segment.
//
// Equality after this normalisation is the gating default: "07.2.22" equals
// "7.2.22", because BMCs and tools disagree about zero padding, not about the
// firmware they describe.
package version

import (
	"fmt"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// dateRE is a release date as BMCs print it beside a version.
const dateRE = `(?:\([0-9]{1,2}/[0-9]{1,2}/[0-9]{4}\)|[0-9]{1,2}/[0-9]{1,2}/[0-9]{4}|[0-9]{4}-[0-9]{2}-[0-9]{2}|` +
	`(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*[ \t]+[0-9]{1,2},?[ \t]+[0-9]{4})`

// coreRE is a version without whitespace, as the strict parser reads it.
const coreRE = `([vV]?[0-9A-Za-z][A-Za-z0-9._+()-]*)`

// spacedForms are the whitespace-carrying forms vendors report. Each
// yields a family (may be empty), the core version and an optional build
// number; the core then goes through the strict parser.
// Compiled on first use: the runner's busybox starts twice per boot and
// every package-level regexp is paid at each start.
var spacedForms = sync.OnceValue(func() []spacedForm {
	return []spacedForm{
		// "U46 v2.10 (03/14/2024)", "P79 v1.45", "iLO 5 v2.72", "TGBT42S 2.83 2023-07-05".
		{"FAMILY vX.Y [DATE]", regexp.MustCompile(`^([A-Za-z][A-Za-z0-9]*(?:[ \t]+[0-9]+)?)[ \t]+([vV]?[0-9][A-Za-z0-9._+-]*)(?:[ \t]+` + dateRE + `)?$`), 1, 2, 0},
		// "2.55 Oct 01 2021", "1.4 08/04/2023".
		{"X.Y DATE", regexp.MustCompile(`^` + coreRE + `[ \t]+` + dateRE + `$`), 0, 1, 0},
		// "11.2.0 Build 44".
		{"X.Y Build N", regexp.MustCompile(`^` + coreRE + `[ \t]+[Bb]uild[ \t]+([0-9]+)$`), 0, 1, 2},
		// Supermicro's BIOS: "BIOS Date: 08/04/2023 Ver 1.4".
		{"BIOS Date: DATE Ver X.Y", regexp.MustCompile(`^BIOS[ \t]+Date:[ \t]*` + dateRE + `[ \t]+(?:Ver|Rev)[ \t]+` + coreRE + `$`), 0, 1, 0},
	}
})

type spacedForm struct {
	name string
	re   *regexp.Regexp
	// family, core and build are submatch indexes (0: none).
	family, core, build int
}

// hexBytes is a version written as hex bytes: "0x00 0x0b 0x03 0x04".
var hexBytes = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^0[xX][0-9A-Fa-f]{1,4}(?:[ \t]+0[xX][0-9A-Fa-f]{1,4})+$`)
})

// vbiosShape is NVIDIA's VBIOS version: five segments of two hex digits.
var vbiosShape = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f]{2}){4}$`)
})

// intelNVM is Intel's NVM composite as ethtool and Redfish report it for
// E810 and X710 adapters: NVM version, EETrack id, combo image version.
var intelNVM = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^([0-9]+\.[0-9]+)[ \t]+0[xX]([0-9A-Fa-f]{1,8})[ \t]+([0-9]+(?:\.[0-9]+){1,3})$`)
})

// FormNames lists the spaced forms Parse reads, for error messages.
func FormNames() []string {
	names := []string{}
	for _, f := range spacedForms() {
		names = append(names, f.name)
	}
	return append(names, "0xHH 0xHH ...", "NVM 0xEETRACK COMBO")
}

// Version is a parsed vendor version string. The zero value is not valid;
// use Parse.
type Version struct {
	raw      string
	prefix   string    // lower-cased family prefix, "" when none
	segments []segment // after the prefix (of an NVM composite: the NVM version)
	// vbios: the VBIOS shape, five '.'-separated segments of two hex
	// digits ("96.00.A5.00.01"); bytes are those segments read as hex
	// bytes, hexLetter says whether one of them has a letter A-F.
	vbios, hexLetter bool
	bytes            [5]byte
	nvm              *nvmParts // Intel's NVM composite, nil otherwise
}

// nvmParts are the parts of Intel's NVM composite "4.40 0x8001b4e6
// 1.3492.0" after the NVM version: the EETrack id and the combo image
// version.
type nvmParts struct {
	eetrack uint64
	combo   []segment
}

// segment is a run of tokens between separators, e.g. "A5" -> [a, 5].
type segment struct {
	text string // as written, for messages
	toks []token
	// commit is a git describe commit id ("g7d1fe7e" after the count of
	// commits since the tag): two different ones are not ordered.
	commit bool
}

// kind classes tokens. Their order is the order of tokens of different
// kinds: a pre-release word sorts below the end of a segment, which sorts
// below a number, which sorts below other letters.
type kind int8

const (
	kindPre  kind = iota // alpha, beta, pre, preview, rc
	kindEnd              // no more tokens in the segment
	kindNum              // digits, leading zeros stripped (a hex segment: its decimal value)
	kindWord             // other letters, lower-cased
)

type token struct {
	kind kind
	text string
}

// preReleases are the words that mark a pre-release; postReleases the
// words that mark a later build of the same version.
var (
	preReleases  = []string{"alpha", "beta", "pre", "preview", "rc"}
	postReleases = []string{"rev", "post", "patch", "hotfix", "build"}
)

// zero is what a missing trailing segment compares as.
var zero = segment{text: "(none)", toks: []token{{kind: kindNum}}}

// Parse parses a vendor version string. Surrounding whitespace is ignored;
// whitespace inside, empty segments, unbalanced parentheses, strings without
// a digit and characters outside [A-Za-z0-9._+()-] are errors.
func Parse(s string) (Version, error) {
	raw := strings.TrimSpace(s)
	if raw == "" {
		return Version{}, &ParseError{Input: s, Reason: "empty version"}
	}
	if strings.ContainsAny(raw, " \t\n\r\v\f") {
		return parseSpaced(raw)
	}
	depth := 0
	hasDigit := false
	for i, r := range raw {
		switch {
		case r >= '0' && r <= '9':
			hasDigit = true
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '.', r == '-', r == '_', r == '+':
		case r == '(':
			depth++
		case r == ')':
			depth--
			if depth < 0 {
				return Version{}, perr(raw, "unbalanced ')' at offset %d", i)
			}
		default:
			return Version{}, perr(raw, "character %q at offset %d not allowed (want letters, digits, '.', '-', '_', '+', '(', ')')", r, i)
		}
	}
	if depth != 0 {
		return Version{}, perr(raw, "unbalanced '('")
	}
	if !hasDigit {
		return Version{}, perr(raw, "no digit")
	}

	v := Version{raw: raw}
	rest := raw
	// The VBIOS shape is hex bytes throughout: no family, even where the
	// first byte starts with a letter ("A5.00.00.00.01"); a lone "v" before
	// it is decoration as anywhere.
	hex := raw
	if (hex[0] == 'v' || hex[0] == 'V') && len(hex) > 1 && isDigit(hex[1]) {
		hex = hex[1:]
	}
	if vbiosShape().MatchString(hex) {
		for i := range v.bytes {
			b, _ := strconv.ParseUint(hex[3*i:3*i+2], 16, 8) // two hex digits: cannot fail
			v.bytes[i] = byte(b)
			v.hexLetter = v.hexLetter || b>>4 > 9 || b&15 > 9
		}
		v.vbios = true
		rest = hex
	}
	// The family prefix is the leading run of letters, and the separator
	// right after it if any ("BF-24" and "BF24" have the same prefix); a
	// platform name with a letter after a digit runs to the separator.
	n := 0
	for !v.vbios && n < len(rest) && isLetter(rest[n]) {
		n++
	}
	if n > 0 {
		if run := rest[:strings.IndexFunc(rest+".", func(r rune) bool { return r < 0x80 && isSep(byte(r)) })]; len(run) < len(rest) && letterAfterDigit(run) {
			n = len(run)
			if !strings.ContainsAny(rest[n:], "0123456789") {
				return Version{}, perr(raw, "platform %q is followed by no version number", run)
			}
		}
		p := strings.ToLower(rest[:n])
		rest = rest[n:]
		if len(rest) > 0 && isSep(rest[0]) {
			rest = rest[1:]
		}
		if p != "v" {
			v.prefix = p
		}
	}
	segs, err := split(rest, len(raw)-len(rest))
	if err != nil {
		return Version{}, perr(raw, "%v", err)
	}
	v.segments = segs
	return v, nil
}

// parseSpaced reads the forms with whitespace (see spacedForms).
func parseSpaced(raw string) (Version, error) {
	if hexBytes().MatchString(raw) {
		var segs []string
		for _, f := range strings.Fields(raw) {
			n, _ := strconv.ParseUint(f[2:], 16, 32) // at most 4 hex digits: cannot fail
			segs = append(segs, strconv.FormatUint(n, 10))
		}
		v, err := Parse(strings.Join(segs, "."))
		if err != nil {
			return Version{}, perr(raw, "%s", err.(*ParseError).Reason)
		}
		v.raw = raw
		return v, nil
	}
	if m := intelNVM().FindStringSubmatch(raw); m != nil {
		nvm, err := Parse(m[1])
		if err != nil {
			return Version{}, perr(raw, "NVM 0xEETRACK COMBO: NVM version %q: %s", m[1], err.(*ParseError).Reason)
		}
		combo, err := Parse(m[3])
		if err != nil {
			return Version{}, perr(raw, "NVM 0xEETRACK COMBO: combo version %q: %s", m[3], err.(*ParseError).Reason)
		}
		ee, _ := strconv.ParseUint(m[2], 16, 32) // at most 8 hex digits: cannot fail
		nvm.raw = raw
		nvm.nvm = &nvmParts{eetrack: ee, combo: combo.segments}
		return nvm, nil
	}
	for _, f := range spacedForms() {
		m := f.re.FindStringSubmatch(raw)
		if m == nil {
			continue
		}
		core := m[f.core]
		if f.build > 0 {
			core += "." + m[f.build]
		}
		v, err := Parse(core)
		if err != nil {
			return Version{}, perr(raw, "%s: version %q: %s", f.name, m[f.core], err.(*ParseError).Reason)
		}
		if f.family > 0 {
			if v.prefix != "" {
				return Version{}, perr(raw, "%s: version %q carries a family of its own after family %q", f.name, m[f.core], m[f.family])
			}
			v.prefix = strings.ToLower(strings.Join(strings.Fields(m[f.family]), ""))
			v.vbios, v.hexLetter, v.bytes = false, false, [5]byte{} // a family's version is no bare VBIOS
		}
		v.raw = raw
		return v, nil
	}
	i := strings.IndexAny(raw, " \t\n\r\v\f")
	return Version{}, perr(raw, "whitespace at offset %d (spaces are allowed only in the forms %s)", i, strings.Join(FormNames(), "; "))
}

// ParseError says why a string is not a version.
type ParseError struct {
	Input  string // as given to Parse
	Reason string // e.g. "empty segment at offset 6"
}

func (e *ParseError) Error() string { return fmt.Sprintf("invalid version %q: %s", e.Input, e.Reason) }

func perr(in, format string, args ...any) *ParseError {
	return &ParseError{Input: in, Reason: fmt.Sprintf(format, args...)}
}

// MustParse is Parse for constants in tests and tables; it panics on error.
func MustParse(s string) Version {
	v, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return v
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// letterAfterDigit reports whether a letter follows a digit in s
// ("GB200Nvl", "U8E132C"; not "P2" or "BF").
func letterAfterDigit(s string) bool {
	digit := false
	for i := 0; i < len(s); i++ {
		switch {
		case isDigit(s[i]):
			digit = true
		case digit && isLetter(s[i]):
			return true
		}
	}
	return false
}
func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isSep(c byte) bool {
	return c == '.' || c == '-' || c == '_' || c == '+' || c == '(' || c == ')'
}

// split cuts rest into segments. A run of several separators is an empty
// segment ("28.39..1", "1.") unless a parenthesis is part of it: "1.2-(3)",
// "(1.2)" and "1.2(3)" are all fine.
func split(rest string, base int) ([]segment, error) {
	var segs []segment
	for i := 0; i < len(rest); {
		j := i
		sep := isSep(rest[i])
		for j < len(rest) && isSep(rest[j]) == sep {
			j++
		}
		run := rest[i:j]
		if !sep {
			seg := tokenize(run)
			seg.commit = len(segs) > 0 && isCommitID(run) && segs[len(segs)-1].toks[0].kind == kindNum && len(segs[len(segs)-1].toks) == 1
			segs = append(segs, seg)
			i = j
			continue
		}
		paren := strings.ContainsAny(run, "()")
		switch {
		case i == 0 && strings.Trim(run, "(") != "":
			return nil, fmt.Errorf("empty segment at the start")
		case j == len(rest) && strings.Trim(run, ")") != "":
			return nil, fmt.Errorf("empty segment at the end")
		case len(run) > 1 && !paren:
			return nil, fmt.Errorf("empty segment at offset %d", base+i+1)
		}
		i = j
	}
	if len(segs) == 0 {
		return nil, fmt.Errorf("no segments")
	}
	return segs, nil
}

// tokenize cuts one segment into runs of digits and of letters. A
// segment that is one hex number ("0x1A") is that number.
func tokenize(part string) segment {
	seg := segment{text: part}
	if n, ok := hexNumber(part); ok {
		seg.toks = []token{{kind: kindNum, text: n}}
		return seg
	}
	for i := 0; i < len(part); {
		j := i
		num := isDigit(part[i])
		for j < len(part) && isDigit(part[j]) == num {
			j++
		}
		t := token{kind: kindNum, text: strings.TrimLeft(part[i:j], "0")}
		if !num {
			t.text = strings.ToLower(part[i:j])
			t.kind = kindWord
			if slices.Contains(preReleases, t.text) {
				t.kind = kindPre
			}
		}
		seg.toks = append(seg.toks, t)
		i = j
	}
	return seg
}

// hexNumber reads "0x1A" as its decimal digits without leading zeros
// ("26"; "" for zero, as a digit run compares).
func hexNumber(s string) (string, bool) {
	// Past 64 hex digits it is no byte, and converting would cost.
	if len(s) < 3 || len(s) > 66 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X') {
		return "", false
	}
	n, ok := new(big.Int).SetString(s[2:], 16)
	if !ok || n.Sign() < 0 || strings.ContainsAny(s[2:], "+-_") {
		return "", false
	}
	return strings.TrimLeft(n.Text(10), "0"), true
}

// isCommitID reports whether s looks like git describe's "g" and an
// abbreviated commit id ("g7d1fe7e").
func isCommitID(s string) bool {
	if len(s) < 8 || len(s) > 41 || s[0] != 'g' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isDigit(s[i]) && (s[i] < 'a' || s[i] > 'f') {
			return false
		}
	}
	return true
}

// String returns the version as it was written (surrounding space trimmed).
func (v Version) String() string { return v.raw }

// Prefix returns the lower-cased family prefix ("bf" for "BF-24.10-17"), or ""
// when there is none. A lone "v" is not a prefix.
func (v Version) Prefix() string { return v.prefix }

// nvmVersion is the NVM version of an Intel NVM composite, alone.
func (v Version) nvmVersion() Version {
	return Version{raw: v.raw, prefix: v.prefix, segments: v.segments}
}

// IsZero reports whether v is the zero Version (never returned by Parse).
func (v Version) IsZero() bool { return v.raw == "" }

// Compare returns -1, 0 or +1 as a is older than, the same as, or newer than b.
// It is a total order (see the package comment for the rules); where the
// order is a guess, Order says so.
func Compare(a, b Version) int {
	c, _ := order(a, b)
	return c
}

// Order is Compare for deciding, not sorting: it refuses, with an error
// naming both versions and the place, where the answer would be a guess
// (see the package comment): different families, letters against a number,
// a suffix of letters against nothing, two different commit ids, hex bytes
// outside two VBIOS-shaped versions, a VBIOS against another shape where
// the readings disagree, two NVM composites that differ only in the EETrack.
func Order(a, b Version) (int, error) {
	c, why := order(a, b)
	if why != "" {
		return 0, fmt.Errorf("%q and %q cannot be ordered: %s", a.raw, b.raw, why)
	}
	return c, nil
}

// order compares and says why the answer is a guess ("" when it is not).
// Two VBIOS-shaped versions compare as hex bytes; a VBIOS with a hex
// letter against a version of another shape is placed by crossOrder; all
// else compares as written (orderWritten).
func order(a, b Version) (int, string) {
	switch {
	case a.vbios && b.vbios:
		return slices.Compare(a.bytes[:], b.bytes[:]), ""
	case a.hexLetter && !b.vbios:
		return crossOrder(a, b)
	case b.hexLetter && !a.vbios:
		c, why := crossOrder(b, a)
		return -c, why
	}
	return orderWritten(a, b)
}

// crossOrder orders x, a VBIOS with a hex letter, against n, a version
// of another shape, so that Compare stays a total order: the VBIOS
// versions without a letter ("96.00.89.00.01") order the same as hex
// bytes and as written, and x sits, among them, just below the first
// one above it as hex bytes (decimalAbove); n is placed among them as
// written, below x when it falls in the same gap. Order refuses where
// this and reading x as written disagree.
func crossOrder(x, n Version) (int, string) {
	c := 1
	if above, ok := decimalAbove(x); ok {
		if d, _ := orderWritten(n, above); d >= 0 {
			c = -1
		}
	}
	w, why := orderWritten(x, n)
	if why == "" && w != c {
		why = fmt.Sprintf("only %q has NVIDIA's VBIOS shape (five segments of two hex digits, read as hex bytes), and read as hex bytes and as written they order differently", x.raw)
	}
	return c, why
}

// decimalAbove returns the least VBIOS-shaped version without a hex
// letter that is newer than x as hex bytes ("96.01.00.00.00" for
// "96.00.9A.00.01", "90.02.17.00.80" for "90.02.17.00.7D"), false when
// there is none ("99.99.99.99.A0").
func decimalAbove(x Version) (Version, bool) {
	var d [5]int
	for i, b := range x.bytes {
		hi, lo := int(b>>4), int(b&15)
		if hi <= 9 && lo <= 9 {
			d[i] = 10*hi + lo
			continue
		}
		// The greatest letter-free byte below b, plus one: "7D" -> 80,
		// "A5" -> 100 (a carry into the segment before).
		d[i] = 100
		if hi <= 9 {
			d[i] = 10*hi + 10
		}
		for j := i; j > 0 && d[j] == 100; j-- {
			d[j] = 0
			d[j-1]++
		}
		if d[0] == 100 {
			return Version{}, false
		}
		return MustParse(fmt.Sprintf("%02d.%02d.%02d.%02d.%02d", d[0], d[1], d[2], d[3], d[4])), true
	}
	return x, true // no letter: not reached from crossOrder
}

// orderWritten compares versions as written: family, segments, then the
// parts of an Intel NVM composite.
func orderWritten(a, b Version) (int, string) {
	if c := strings.Compare(a.prefix, b.prefix); c != 0 {
		return c, fmt.Sprintf("different version families (prefix %q vs %q)", a.prefix, b.prefix)
	}
	if c, why := orderSegments(a.segments, b.segments, "segment"); c != 0 {
		return c, why
	}
	switch {
	case a.nvm == nil && b.nvm == nil:
		return 0, ""
	case a.nvm == nil:
		return -1, "" // a bare NVM version is below each composite of it
	case b.nvm == nil:
		return 1, ""
	}
	if c, why := orderSegments(a.nvm.combo, b.nvm.combo, "combo version segment"); c != 0 {
		return c, why
	}
	if c := cmpInt(a.nvm.eetrack, b.nvm.eetrack); c != 0 {
		return c, fmt.Sprintf("same NVM and combo versions but EETrack 0x%08x against 0x%08x: different builds", a.nvm.eetrack, b.nvm.eetrack)
	}
	return 0, ""
}

// orderSegments compares two runs of segments, missing ones as zero;
// what names a segment in messages.
func orderSegments(as, bs []segment, what string) (int, string) {
	for i := range max(len(as), len(bs)) {
		sa, sb := zero, zero
		if i < len(as) {
			sa = as[i]
		}
		if i < len(bs) {
			sb = bs[i]
		}
		if c, why := compareSegment(sa, sb); c != 0 {
			if why == "" && hexByteOrder(sa.text, sb.text) == -c {
				why = "read as hex bytes (as NVIDIA writes VBIOS versions, \"96.00.A5.00.01\") they order the other way"
			}
			if why != "" {
				why = fmt.Sprintf("%s %d, %q against %q: %s", what, i+1, sa.text, sb.text, why)
			}
			return c, why
		}
	}
	return 0, ""
}

var end = token{kind: kindEnd}

// hexByteOrder compares two segments of two hex digits each, one of them
// with a letter ("7D" against "10"), as the bytes they may be; 0 when they
// are not such a pair.
func hexByteOrder(a, b string) int {
	isHex := func(s string) bool {
		return len(s) == 2 && strings.Trim(strings.ToLower(s), "0123456789abcdef") == ""
	}
	if !isHex(a) || !isHex(b) || !strings.ContainsAny(strings.ToLower(a+b), "abcdef") {
		return 0
	}
	x, _ := strconv.ParseUint(a, 16, 8)
	y, _ := strconv.ParseUint(b, 16, 8)
	return cmpInt(x, y)
}

func cmpInt(x, y uint64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func compareSegment(a, b segment) (int, string) {
	for i := 0; i < len(a.toks) || i < len(b.toks); i++ {
		ta, tb := end, end
		if i < len(a.toks) {
			ta = a.toks[i]
		}
		if i < len(b.toks) {
			tb = b.toks[i]
		}
		if c := compareToken(ta, tb); c != 0 {
			if a.commit && b.commit {
				return c, "two different commit ids are not ordered"
			}
			return c, guess(ta, tb)
		}
	}
	return 0, ""
}

func compareToken(a, b token) int {
	if a.kind != b.kind {
		if a.kind < b.kind {
			return -1
		}
		return 1
	}
	if a.kind == kindNum && len(a.text) != len(b.text) {
		// Leading zeros are already stripped: a longer digit run is larger.
		// Comparing as text avoids overflow on 20-digit build numbers.
		if len(a.text) < len(b.text) {
			return -1
		}
		return 1
	}
	return strings.Compare(a.text, b.text)
}

// guess says why the order of two differing tokens is a guess, "" when it
// is not: numbers against numbers and letters against letters order; a
// pre-release word is older than anything; a post-release word is newer
// than nothing more (the end, or a zero); other letters against a number
// or against nothing are a guess.
func guess(a, b token) string {
	if a.kind > b.kind {
		a, b = b, a
	}
	switch {
	case a.kind == b.kind, a.kind == kindPre, b.kind != kindWord:
		return ""
	case slices.Contains(postReleases, b.text) && (a.kind == kindEnd || a.text == ""):
		return ""
	case a.kind == kindEnd:
		return fmt.Sprintf("a suffix %q that may mark a pre- or a post-release", b.text)
	}
	return fmt.Sprintf("letters %q against the number %s", b.text, nonEmpty(a.text, "0"))
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Equal reports whether two version strings denote the same version. When
// either string does not parse, it falls back to exact comparison of the
// trimmed strings, so an unparseable inventory value still matches the
// identical manifest value and nothing else.
func Equal(a, b string) bool {
	va, errA := Parse(a)
	vb, errB := Parse(b)
	if errA != nil || errB != nil {
		ta, tb := strings.TrimSpace(a), strings.TrimSpace(b)
		return ta != "" && ta == tb
	}
	return Compare(va, vb) == 0
}

// Gates: when is a running version good enough. manifests names them in
// YAML; they are defined here so that the one comparison lives in one place.
const (
	GateEqual   = "equal"    // running == desired (after normalisation)
	GateAtLeast = "at-least" // running >= desired, same family
)

// Satisfies is the firmware gate every side of CURE plans with — the
// coordinator's Redfish phases and the runner's in-band phases — so they
// cannot disagree, errors included.
//
// GateEqual ("" too) uses Equal: an unparseable string matches only the
// identical string, never an error. One exception: a running Intel NVM
// composite ("4.40 0x8001b4e6 1.3492.0") against a desired bare version
// ("4.40") is compared on its NVM version, as the manifest pins only that. GateAtLeast needs both versions to
// parse, to be of one family and to be ordered without a guess (Order);
// otherwise it is an error naming the values (a caller reports it as
// ERROR, never as a silent DRIFT or MATCH).
func Satisfies(gate, running, desired string) (bool, error) {
	switch gate {
	case GateEqual, "":
		// A manifest that pins only the NVM version of an Intel NVM
		// composite matches on that part.
		if have, err := Parse(running); err == nil && have.nvm != nil {
			if want, err := Parse(desired); err == nil && want.nvm == nil {
				return Compare(have.nvmVersion(), want) == 0, nil
			}
		}
		return Equal(running, desired), nil
	case GateAtLeast:
		want, err := Parse(desired)
		if err != nil {
			return false, fmt.Errorf("desired version: %w", err)
		}
		have, err := Parse(running)
		if err != nil {
			return false, fmt.Errorf("running version: %w", err)
		}
		if have.Prefix() != want.Prefix() {
			return false, fmt.Errorf("running %q and desired %q are different version families (prefix %q vs %q); cannot order them",
				running, desired, have.Prefix(), want.Prefix())
		}
		c, err := Order(have, want)
		if err != nil {
			return false, fmt.Errorf("running against desired: %w", err)
		}
		return c >= 0, nil
	}
	return false, fmt.Errorf("unknown gate %q (want %s or %s)", gate, GateEqual, GateAtLeast)
}
