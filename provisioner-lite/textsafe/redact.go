package textsafe

import (
	"strconv"
	"strings"
)

// Redacted stands where a URL's userinfo ("user:password@") was.
const Redacted = "REDACTED"

// RedactURL is a URL as it may be echoed (an error, a log line, an audit
// entry): everything between the scheme and the last '@' is replaced, so
// a "user:password@" never leaves, whether or not s parses as a URL (a
// malformed URL is exactly the one an error quotes).
func RedactURL(s string) string {
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return s
	}
	start := userinfoStart(s[:at])
	return s[:start] + Redacted + s[at:]
}

// RedactURLs redacts what may be a URL's userinfo in free text (an error
// message or a detail that may quote a URL): in each word holding an '@'
// with a ':' before it ("https://u:p@h", "u:p@h", quoted or not), from the
// scheme (or the word's start) to its last '@'. It is the second line of
// defence; the first is that code quoting a URL quotes RedactURL's form.
func RedactURLs(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		end := strings.IndexFunc(s, isSpace)
		if end < 0 {
			end = len(s)
		}
		word := s[:end]
		if at := strings.LastIndexByte(word, '@'); at > 0 && strings.Contains(word[:at], ":") {
			start := userinfoStart(word[:at])
			word = word[:start] + Redacted + word[at:]
		}
		b.WriteString(word)
		// The white space after the word, as it was.
		rest := s[end:]
		sp := strings.IndexFunc(rest, func(r rune) bool { return !isSpace(r) })
		if sp < 0 {
			sp = len(rest)
		}
		b.WriteString(rest[:sp])
		s = rest[sp:]
	}
	return b.String()
}

// userinfoStart is where the userinfo of head (what precedes the last
// '@') begins: after "scheme://" when head starts with one (after any
// quotes or brackets around it), else after those quotes or brackets. A
// "://" that does not follow a scheme is part of the userinfo.
func userinfoStart(head string) int {
	lead := strings.IndexFunc(head, func(r rune) bool { return !strings.ContainsRune("\"'`([{<=,;", r) })
	if lead < 0 {
		return len(head)
	}
	if i := strings.Index(head[lead:], "://"); i > 0 && isScheme(head[lead:lead+i]) {
		return lead + i + 3
	}
	return lead
}

// isScheme is RFC 3986's scheme: a letter, then letters, digits, + - .
func isScheme(s string) bool {
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case i > 0 && (r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return s != ""
}

func isSpace(r rune) bool {
	return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f'
}

// JoinFirst joins at most maxItems items, each cut to itemMax bytes as one line,
// and says how many it left out ("a, b and 3 more"): a list taken from a
// request (ids, problems) stays bounded whatever its length.
func JoinFirst(items []string, maxItems, itemMax int, sep string) string {
	return strings.Join(First(items, maxItems, itemMax), sep)
}

// First is JoinFirst's list: at most maxItems items, each cut to itemMax bytes
// as one line, then one "… and N more" item when some were left out.
func First(items []string, maxItems, itemMax int) []string {
	n := min(len(items), max(maxItems, 0))
	out := make([]string, 0, n+1)
	for _, it := range items[:n] {
		out = append(out, BoundedLine(it, itemMax))
	}
	if len(items) > n {
		out = append(out, "… and "+strconv.Itoa(len(items)-n)+" more")
	}
	return out
}
