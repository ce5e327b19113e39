// Package version compares vendor firmware version strings.
//
// Vendor strings such as "28.39.1002", "BF-24.10-17", "P2.1.4" or "96.00.A5.00.01"
// are not semver: semver libraries read "-17" as a pre-release and reject "A5".
// This package compares them segment by segment instead:
//
//   - Segments are separated by '.', '-', '_', '+', '(' and ')'. Which separator
//     is used is not significant: "1.2-3" equals "1.2.3".
//   - A leading alphabetic prefix ("BF" in "BF-24.10-17", "P" in "P2.1.4") names
//     the version family of a component. Versions are compared on the rest when
//     both sides carry the same prefix (case-insensitively). A lone "v"/"V"
//     prefix ("v2.0") is decoration and is always dropped. Versions with
//     different prefixes are never equal; they are ordered by prefix only so
//     that Compare stays a total order — callers gating on "at least" should
//     check Prefix first.
//   - Within a segment, runs of digits compare numerically (leading zeros are
//     ignored, so "07" == "7" and "A05" == "A5") and runs of letters compare
//     lexically, case-insensitively; a digit run sorts before a letter run.
//   - Missing trailing segments count as 0: "1.2" == "1.2.0".
//   - The system-ROM form BMCs report for BIOS, "FAMILY vX.Y (MM/DD/YYYY)"
//     (HPE "U46 v2.10 (03/14/2024)", the DMTF mockup's "P79 v1.45
//     (12/06/2017)"), is the one place whitespace is allowed: FAMILY is the
//     prefix, X.Y the segments, and the release date is not compared (one
//     ROM version has one date).
//
// Equality after this normalisation is the gating default: "07.2.22" equals
// "7.2.22", because BMCs and tools disagree about zero padding, not about the
// firmware they describe.
package version

import (
	"fmt"
	"regexp"
	"strings"
)

// romForm is "FAMILY vX.Y" with an optional "(MM/DD/YYYY)" release date.
var romForm = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9]*)[ \t]+([vV]?[0-9][A-Za-z0-9._+-]*)(?:[ \t]+\(([0-9]{1,2}/[0-9]{1,2}/[0-9]{4})\))?$`)

// Version is a parsed vendor version string. The zero value is not valid;
// use Parse.
type Version struct {
	raw      string
	prefix   string    // lower-cased family prefix, "" when none
	segments []segment // after the prefix
}

// segment is a run of tokens between separators, e.g. "A5" -> [a, 5].
type segment []token

// token is a run of digits (numeric, leading zeros stripped) or of letters
// (lower-cased).
type token struct {
	numeric bool
	text    string
}

// zero is what a missing trailing segment compares as.
var zero = segment{{numeric: true, text: ""}}

// Parse parses a vendor version string. Surrounding whitespace is ignored;
// whitespace inside, empty segments, unbalanced parentheses, strings without
// a digit and characters outside [A-Za-z0-9._+()-] are errors.
func Parse(s string) (Version, error) {
	raw := strings.TrimSpace(s)
	if raw == "" {
		return Version{}, &ParseError{Input: s, Reason: "empty version"}
	}
	if m := romForm.FindStringSubmatch(raw); m != nil {
		v, err := Parse(m[2])
		if err != nil {
			return Version{}, perr(raw, "ROM version %q: %s", m[2], err.(*ParseError).Reason)
		}
		if v.prefix != "" {
			return Version{}, perr(raw, "ROM version %q carries a family of its own after family %q", m[2], m[1])
		}
		v.raw, v.prefix = raw, strings.ToLower(m[1])
		return v, nil
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
		case r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f':
			return Version{}, perr(raw, "whitespace at offset %d (only the ROM form \"FAMILY vX.Y (MM/DD/YYYY)\" may contain spaces)", i)
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
	// The family prefix is the leading run of letters, and the separator
	// right after it if any ("BF-24" and "BF24" have the same prefix).
	n := 0
	for n < len(rest) && isLetter(rest[n]) {
		n++
	}
	if n > 0 {
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
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
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
			segs = append(segs, tokenize(run))
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

func tokenize(part string) segment {
	var seg segment
	for i := 0; i < len(part); {
		j := i
		num := isDigit(part[i])
		for j < len(part) && isDigit(part[j]) == num {
			j++
		}
		t := part[i:j]
		if num {
			t = strings.TrimLeft(t, "0")
		} else {
			t = strings.ToLower(t)
		}
		seg = append(seg, token{numeric: num, text: t})
		i = j
	}
	return seg
}

// String returns the version as it was written (surrounding space trimmed).
func (v Version) String() string { return v.raw }

// Prefix returns the lower-cased family prefix ("bf" for "BF-24.10-17"), or ""
// when there is none. A lone "v" is not a prefix.
func (v Version) Prefix() string { return v.prefix }

// IsZero reports whether v is the zero Version (never returned by Parse).
func (v Version) IsZero() bool { return v.raw == "" }

// Compare returns -1, 0 or +1 as a is older than, the same as, or newer than b.
// It is a total order (see the package comment for the rules).
func Compare(a, b Version) int {
	if c := strings.Compare(a.prefix, b.prefix); c != 0 {
		return c
	}
	n := max(len(a.segments), len(b.segments))
	for i := range n {
		sa, sb := zero, zero
		if i < len(a.segments) {
			sa = a.segments[i]
		}
		if i < len(b.segments) {
			sb = b.segments[i]
		}
		if c := compareSegment(sa, sb); c != 0 {
			return c
		}
	}
	return 0
}

func compareSegment(a, b segment) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := compareToken(a[i], b[i]); c != 0 {
			return c
		}
	}
	switch {
	case len(a) < len(b):
		return -1
	case len(a) > len(b):
		return 1
	}
	return 0
}

func compareToken(a, b token) int {
	if a.numeric != b.numeric {
		if a.numeric {
			return -1
		}
		return 1
	}
	if a.numeric {
		// Leading zeros are already stripped: a longer digit run is larger.
		// Comparing as text avoids overflow on 20-digit build numbers.
		if len(a.text) != len(b.text) {
			if len(a.text) < len(b.text) {
				return -1
			}
			return 1
		}
	}
	return strings.Compare(a.text, b.text)
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
