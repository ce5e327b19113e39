package manifests

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

var (
	placeholderRE = lazyRegexp(`\{\{\s*\.([A-Za-z0-9_]+)\s*\}\}`)
	hostLabelRE   = lazyRegexp(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
)

// RenderHostname expands the hostname template with a node's id and serial
// number and checks the result is an RFC 1123 host name (lower-cased, since
// serials are often upper case). An empty template renders as nodeID.
func (f FirstBoot) RenderHostname(nodeID, serial string) (string, error) {
	t := f.Hostname
	if t == "" {
		t = "{{.NodeID}}"
	}
	return renderHostname(t, nodeID, serial)
}

// renderHostname avoids text/template on purpose: a template language with
// functions and pipelines is more than a host name needs, and the loader must
// be able to reject anything but the two placeholders.
func renderHostname(tmpl, nodeID, serial string) (string, error) {
	// Check the literal text apart from the values, so the error names the
	// template's own mistake rather than a sample rendering.
	lit := placeholderRE.ReplaceAllString(tmpl, "")
	if strings.Contains(lit, "{{") || strings.Contains(lit, "}}") {
		return "", fmt.Errorf("%q: only {{.NodeID}} and {{.Serial}} are allowed inside {{ }}", tmpl)
	}
	if i := strings.IndexFunc(lit, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.')
	}); i >= 0 {
		r, _ := utf8.DecodeRuneInString(lit[i:])
		return "", fmt.Errorf("%q: %q is not allowed in a host name (letters, digits, '-', '.')", tmpl, string(r))
	}
	var bad error
	out := placeholderRE.ReplaceAllStringFunc(tmpl, func(m string) string {
		switch name := placeholderRE.FindStringSubmatch(m)[1]; name {
		case "NodeID":
			return nodeID
		case "Serial":
			return serial
		default:
			if bad == nil {
				bad = fmt.Errorf("%q: placeholder {{.%s}} is not allowed (only {{.NodeID}} and {{.Serial}})", tmpl, name)
			}
			return ""
		}
	})
	if bad != nil {
		return "", bad
	}
	host := strings.ToLower(out)
	if len(host) > 253 {
		return "", fmt.Errorf("%q renders to %d characters, more than the 253 a host name may have", tmpl, len(host))
	}
	for _, label := range strings.Split(host, ".") {
		if !hostLabelRE.MatchString(label) {
			return "", fmt.Errorf("%q renders to %q, which is not a valid host name (labels of letters, digits and '-', 1-63 characters)", tmpl, out)
		}
	}
	return host, nil
}
