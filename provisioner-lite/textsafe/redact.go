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
	start := 0
	if i := strings.Index(s[:at], "://"); i >= 0 {
		start = i + 3
	}
	return s[:start] + Redacted + s[at:]
}

// RedactURLs redacts the userinfo of every URL in free text (an error
// message or a detail that may quote one): from each "://" to the last '@'
// before the next white space. It is the second line of defence; the
// first is that code quoting a URL quotes RedactURL's form.
func RedactURLs(s string) string {
	if !strings.Contains(s, "://") || !strings.Contains(s, "@") {
		return s
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "://")
		if i < 0 {
			break
		}
		start := i + 3
		end := start + strings.IndexFunc(s[start:], isSpace)
		if end < start { // no white space: the token runs to the end
			end = len(s)
		}
		b.WriteString(s[:start])
		if at := strings.LastIndexByte(s[start:end], '@'); at >= 0 {
			b.WriteString(Redacted)
			start += at
		}
		// Go on from the '@' (or the scheme's end): a URL quoted inside
		// this one's token is redacted with it, one after it gets its own.
		s = s[start:]
	}
	b.WriteString(s)
	return b.String()
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
