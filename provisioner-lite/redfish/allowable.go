package redfish

import (
	"encoding/json"
	"strings"
)

// parseSystemReset reads a ComputerSystem's #ComputerSystem.Reset target,
// which must be a path on the BMC.
func parseSystemReset(raw []byte) (string, error) {
	d, err := parseSystemDoc(raw)
	if err != nil {
		return "", err
	}
	return d.resetTarget()
}

// allowList is an @Redfish.AllowableValues list read tolerantly: vendors
// publish a string instead of an array, nested arrays ([["SCP"]]), nulls
// and numbers among the strings, and comma-separated strings. It never
// fails to decode: an unreadable list is an empty one (the driver then
// sends what it was asked and lets the BMC judge), which is better than an
// UpdateService or Manager the driver cannot read at all.
type allowList []string

// maxAllowable bounds what a hostile BMC can make the driver keep.
const maxAllowable = 256

func (l *allowList) UnmarshalJSON(b []byte) error {
	// The usual shape, a flat array of strings, without the generic walk:
	// a ComputerSystem carries four such lists, read on every poll.
	if len(b) > 0 && b[0] == '[' {
		var flat []string
		if json.Unmarshal(b, &flat) == nil {
			var out []string
			for _, s := range flat {
				out = allowFields(out, s)
			}
			*l = out
			return nil
		}
	}
	*l = allowWalk(b)
	return nil
}

// allowWalk reads any shape: nested arrays, a bare string, other values
// among the strings (left out).
func allowWalk(b []byte) []string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return nil
	}
	var out []string
	var walk func(v any, depth int)
	walk = func(v any, depth int) {
		if depth > 8 || len(out) >= maxAllowable {
			return
		}
		switch v := v.(type) {
		case string:
			out = allowFields(out, v)
		case []any:
			for _, x := range v {
				walk(x, depth+1)
			}
		}
	}
	walk(v, 0)
	return out
}

// allowFields appends the values of s, split at separators (",; \t|"), up
// to maxAllowable values of at most 64 bytes each.
func allowFields(out []string, s string) []string {
	for len(s) > 0 && len(out) < maxAllowable {
		i := strings.IndexAny(s, ",; \t|")
		f := s
		if i >= 0 {
			f, s = s[:i], s[i+1:]
		} else {
			s = ""
		}
		if f != "" && len(f) <= 64 {
			out = append(out, f)
		}
	}
	return out
}

// Known enumerations: used to split values a BMC ran together
// ("GracefulShutdownGracefulRestart").
var (
	resetTypes = []string{"On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "Nmi",
		"ForceOn", "PushPowerButton", "PowerCycle", "Suspend", "Pause", "Resume", "FullPowerCycle"}
	transferProtocols = []string{"CIFS", "FTP", "SFTP", "HTTP", "HTTPS", "NSF", "NFS", "SCP", "TFTP", "OEM"}
)

// normalizeAllowed splits every value that is a concatenation of known
// names into those names (case-insensitively, longest name first), and
// maps a known name's case to the schema's ("https" -> "HTTPS"). Unknown
// values are kept as they are: a vendor's OEM value is still allowed.
func normalizeAllowed(vals []string, known []string) []string {
	var out []string
	add := func(s string) {
		for _, o := range out {
			if o == s {
				return
			}
		}
		out = append(out, s)
	}
	for _, v := range vals {
		if parts, ok := splitKnown(v, known); ok {
			for _, p := range parts {
				add(p)
			}
			continue
		}
		add(v)
	}
	return out
}

// splitKnown cuts s into a sequence of known names, if it is one.
func splitKnown(s string, known []string) ([]string, bool) {
	if s == "" {
		return nil, false
	}
	var best []string
	for _, k := range known {
		if len(k) > len(s) || !strings.EqualFold(s[:len(k)], k) {
			continue
		}
		if len(k) == len(s) {
			return []string{k}, true
		}
		if rest, ok := splitKnown(s[len(k):], known); ok && (best == nil || len(rest)+1 < len(best)) {
			best = append([]string{k}, rest...)
		}
	}
	return best, best != nil
}
