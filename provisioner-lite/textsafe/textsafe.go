// Package textsafe makes text that came from a peer (a runner, a BMC, a
// host) safe to store and to show: no terminal escape sequences, no bidi
// overrides, valid UTF-8, bounded length. Runner text reaches operators'
// terminals and browsers; an OSC or CSI sequence in a verdict message must not
// retitle a terminal, move its cursor or hide a line (docs/SECURITY.md).
package textsafe

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Text keeps newlines and tabs and replaces every other control character
// (C0, DEL, C1), bidi override or isolate, and invalid UTF-8 with U+FFFD.
func Text(s string) string { return clean(s, false) }

// Line is Text for one line: newlines and tabs become spaces too.
func Line(s string) string { return clean(s, true) }

// Bounded is Text cut to at most max bytes (at a rune boundary), saying how
// much was cut.
func Bounded(s string, max int) string { return Truncate(Text(s), max) }

// BoundedLine is Line cut to at most max bytes.
func BoundedLine(s string, max int) string { return Truncate(Line(s), max) }

// Truncate cuts s to at most max bytes at a rune boundary, ending it with a
// note of the bytes dropped.
func Truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	note := fmt.Sprintf("…[+%d bytes]", len(s)-max)
	keep := max - len(note)
	if keep < 0 {
		keep = 0
	}
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + note
}

// Safe reports whether s needs no change by Text.
func Safe(s string) bool { return Text(s) == s }

func clean(s string, oneLine bool) string {
	if isPlain(s, oneLine) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i, w := 0, 0; i < len(s); i += w {
		r, size := utf8.DecodeRuneInString(s[i:])
		w = size
		switch {
		case r == utf8.RuneError && size <= 1:
			b.WriteRune(utf8.RuneError)
		case r == '\n' || r == '\t':
			if oneLine {
				b.WriteByte(' ')
			} else {
				b.WriteRune(r)
			}
		case unsafeRune(r):
			b.WriteRune(utf8.RuneError)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// isPlain is the fast path: printable ASCII needs nothing.
func isPlain(s string, oneLine bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 || c == 0x7f || (c < 0x20 && (oneLine || (c != '\n' && c != '\t'))) {
			return false
		}
	}
	return true
}

func unsafeRune(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f: // C0, DEL, C1 (CSI is U+009B)
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069: // bidi embeddings, overrides, isolates
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f: // bidi marks
		return true
	}
	return false
}
