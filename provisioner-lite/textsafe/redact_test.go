package textsafe

import (
	"net/url"
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://10.0.0.1/redfish/v1":   "https://10.0.0.1/redfish/v1",
		"https://admin:s3cret@10.0.0.1": "https://REDACTED@10.0.0.1",
		"https://admin@10.0.0.1:443/x":  "https://REDACTED@10.0.0.1:443/x",
		"HTTPS://a:p@ss@10.0.0.1":       "HTTPS://REDACTED@10.0.0.1",
		"https://a:p/w@10.0.0.1":        "https://REDACTED@10.0.0.1",
		"https//admin:s3cret@10.0.0.4":  "REDACTED@10.0.0.4",
		"https:admin:s3cret@10.0.0.4":   "REDACTED@10.0.0.4",
		"admin:s3cret@10.0.0.4":         "REDACTED@10.0.0.4",
		"https://a:b c@h":               "https://REDACTED@h",
		"":                              "",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRedactURLs(t *testing.T) {
	for in, want := range map[string]string{
		`nodes[0] (a): bmc.url: "https://admin:s3cret@10.0.0.1": credentials`: `nodes[0] (a): bmc.url: "https://REDACTED@10.0.0.1": credentials`,
		"two: https://u:p1@h1/x and http://u:p2@h2 done":                      "two: https://REDACTED@h1/x and http://REDACTED@h2 done",
		"mail me at ops@example.com, see https://h/docs":                      "mail me at ops@example.com, see https://h/docs",
		"nested https://u:a://b@h":                                            "nested https://REDACTED@h",
		"no url here":                                                         "no url here",
	} {
		if got := RedactURLs(in); got != want {
			t.Errorf("RedactURLs(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestJoinFirst(t *testing.T) {
	ids := []string{"a", "b", strings.Repeat("c", 100), "d", "e"}
	if got := JoinFirst(ids, 3, 10, ", "); got != "a, b, "+Truncate(strings.Repeat("c", 100), 10)+", … and 2 more" {
		t.Errorf("JoinFirst = %q", got)
	}
	if got := JoinFirst(ids[:2], 3, 10, ", "); got != "a, b" {
		t.Errorf("JoinFirst of a short list = %q", got)
	}
	if got := First(ids, -1, 10); len(got) != 1 || got[0] != "… and 5 more" {
		t.Errorf("First with max -1 = %q", got)
	}
}

// FuzzRedact: whatever text surrounds a URL with a password, and whatever
// the password, neither redactor lets the password through (RedactURL on
// the URL itself, RedactURLs on text that quotes it), and a URL that Go
// parses with userinfo never keeps that userinfo.
func FuzzRedact(f *testing.F) {
	f.Add("bmc.url: \"", "https", "s3cret-pass", "10.0.0.1/redfish", "\": credentials in the URL")
	f.Add("", "http", "p@ss/w:rd", "h", "")
	f.Add("x://y ", "HTTPS", "pa\"ss", "[::1]:443", " tail@x")
	f.Fuzz(func(t *testing.T, before, scheme, pass, host, after string) {
		// A URL, or (no scheme) the userinfo and host alone.
		u := scheme + "://admin:" + pass + "@" + host
		if scheme == "" {
			u = "admin:" + pass + "@" + host
		}
		if got := RedactURL(u); strings.Contains(got, ":"+pass+"@") {
			t.Fatalf("RedactURL(%q) = %q keeps the password", u, got)
		}
		if p, err := url.Parse(u); err == nil && p.User != nil {
			if got := RedactURL(u); strings.Contains(got, p.User.String()+"@") {
				t.Fatalf("RedactURL(%q) = %q keeps the userinfo Go parsed", u, got)
			}
		}
		// In free text the URL ends at white space, as a quoted one does.
		// The password carries a byte found nowhere else in the text, so
		// any copy of it in the output is a leak.
		rest := before + after + host + scheme + "admin:" + Redacted + "://@"
		if strings.ContainsAny(pass+host+scheme, " \t\n\r\v\f") || strings.Contains(scheme, "://") || !hasByteNotIn(pass, rest) {
			return
		}
		text := before + u + after
		if got := RedactURLs(text); strings.Contains(got, pass) {
			t.Fatalf("RedactURLs(%q) = %q keeps the password %q", text, got, pass)
		}
	})
}

func hasByteNotIn(s, other string) bool {
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(other, s[i]) < 0 {
			return true
		}
	}
	return false
}
