package textsafe

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestText(t *testing.T) {
	for _, c := range []struct{ in, text, line string }{
		{"plain ascii", "plain ascii", "plain ascii"},
		{"two\nlines\tand tab", "two\nlines\tand tab", "two lines and tab"},
		{"\x1b]0;pwned\x07title", "\uFFFD]0;pwned\uFFFDtitle", "\uFFFD]0;pwned\uFFFDtitle"},
		{"\x1b[2J\x1b[Hclear", "\uFFFD[2J\uFFFD[Hclear", "\uFFFD[2J\uFFFD[Hclear"},
		{"csi \u009b31m red", "csi \uFFFD31m red", "csi \uFFFD31m red"},
		{"cr\roverwrite", "cr\uFFFDoverwrite", "cr\uFFFDoverwrite"},
		{"del\x7f", "del\uFFFD", "del\uFFFD"},
		{"PASS \u202eLIAF", "PASS \uFFFDLIAF", "PASS \uFFFDLIAF"},
		{"bad \xff utf8", "bad \uFFFD utf8", "bad \uFFFD utf8"},
		{"GPU 3 — Ü ok", "GPU 3 — Ü ok", "GPU 3 — Ü ok"},
	} {
		if got := Text(c.in); got != c.text {
			t.Errorf("Text(%q) = %q, want %q", c.in, got, c.text)
		}
		if got := Line(c.in); got != c.line {
			t.Errorf("Line(%q) = %q, want %q", c.in, got, c.line)
		}
	}
}

func TestTruncate(t *testing.T) {
	if got := Truncate("short", 10); got != "short" {
		t.Fatalf("Truncate short = %q", got)
	}
	long := strings.Repeat("é", 100) // 200 bytes
	got := Truncate(long, 50)
	if len(got) > 50 || !utf8.ValidString(got) || !strings.HasSuffix(got, "bytes]") {
		t.Fatalf("Truncate = %q (%d bytes)", got, len(got))
	}
	if got := Truncate(long, 3); len(got) > 3+len("…[+200 bytes]") || !utf8.ValidString(got) {
		t.Fatalf("Truncate tiny = %q", got)
	}
}

func FuzzText(f *testing.F) {
	for _, s := range []string{"", "ok", "\x1b]0;x\x07", "\u202e", "\xff\xfe", "a\nb\tc\r"} {
		f.Add(s, 16)
	}
	f.Fuzz(func(t *testing.T, s string, max int) {
		for _, out := range []string{Text(s), Line(s)} {
			if !utf8.ValidString(out) {
				t.Fatalf("invalid UTF-8 out of %q: %q", s, out)
			}
			for _, r := range out {
				if unsafeRune(r) && r != '\n' && r != '\t' {
					t.Fatalf("unsafe rune %U survived in %q", r, out)
				}
			}
		}
		if strings.ContainsAny(Line(s), "\n\t") {
			t.Fatalf("Line kept a newline or tab: %q", Line(s))
		}
		if Text(Text(s)) != Text(s) {
			t.Fatalf("Text is not idempotent on %q", s)
		}
		if max >= 0 && max < 1<<16 {
			out := Bounded(s, max)
			if !utf8.ValidString(out) {
				t.Fatalf("Bounded(%q, %d) = %q: invalid UTF-8", s, max, out)
			}
			if len(Text(s)) <= max && out != Text(s) {
				t.Fatalf("Bounded cut a string that fits")
			}
		}
	})
}
