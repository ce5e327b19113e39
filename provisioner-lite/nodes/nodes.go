// Package nodes imports the node inventory (YAML or CSV) into store.Node values.
// Parsing is strict: unknown fields, duplicate ids or MACs, malformed MACs, URLs
// and PSIDs are errors that name the file, line and field.
package nodes

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// Load reads an inventory file; the format follows the extension (.yaml, .yml, .csv).
func Load(path string) ([]store.Node, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("node inventory: %w", err)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		return ParseYAML(path, data)
	case ".csv":
		return ParseCSV(path, data)
	default:
		return nil, fmt.Errorf("node inventory %s: unknown extension %q: want .yaml, .yml or .csv", path, filepath.Ext(path))
	}
}

// idRE: ids travel in URLs (/v1/nodes/{id}/ready) and on the kernel command line
// (cure.node=ID), so they stay within a safe, unquoted alphabet.
var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

func checkID(id string) error {
	if id == "" {
		return errors.New("required")
	}
	if !idRE.MatchString(id) {
		return fmt.Errorf("%q: want 1-63 characters of A-Z a-z 0-9 . _ - starting with a letter or digit", id)
	}
	return nil
}

func checkBMCURL(s string) error {
	if s == "" {
		return errors.New("required")
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%q: %v", s, err)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return fmt.Errorf("%q: scheme %q: want https (or http with insecure: true)", s, u.Scheme)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("%q: no host", s)
	}
	if u.User != nil {
		return fmt.Errorf("%q: credentials in the URL: use username and password fields", s)
	}
	return nil
}

// hostnameRE is one RFC 1123 label.
var hostnameRE = regexp.MustCompile(`(?i)^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

func checkHostname(h string) error {
	if h == "" {
		return nil
	}
	if len(h) > 253 {
		return fmt.Errorf("%q: longer than 253 characters", h)
	}
	for _, l := range strings.Split(h, ".") {
		if !hostnameRE.MatchString(l) {
			return fmt.Errorf("%q: label %q: want letters, digits and '-' (RFC 1123), 1-63 characters", h, l)
		}
	}
	return nil
}

// psidRE: a TCG PSID is the 32-character code printed on the drive label.
var psidRE = regexp.MustCompile(`^[A-Za-z0-9]{32}$`)

func checkPSID(serial, psid string) error {
	if serial == "" {
		return errors.New("empty disk serial")
	}
	if !psidRE.MatchString(psid) {
		return fmt.Errorf("disk %s: PSID has %d characters: want the 32 letters/digits printed on the drive label", serial, len(psid))
	}
	return nil
}

// bmcFields is a node's bmc settings as written, before they are checked
// together (both formats share the rules).
type bmcFields struct {
	url, password, passwordEnv, passwordFile, caFile, fingerprint string
	insecure                                                      bool
}

// fieldErr is a problem with one bmc field (YAML key; "" for the password
// choice as a whole).
type fieldErr struct {
	field string
	err   error
}

// apply checks the fields together and fills out's BMC settings. dir
// resolves relative caFile and passwordFile paths (the inventory's
// directory). The password source is checked now, so a typo fails the
// import, but only a reference is kept for passwordEnv and passwordFile.
func (b bmcFields) apply(dir string, out *store.Node) []fieldErr {
	var errs []fieldErr
	bad := func(field string, err error) { errs = append(errs, fieldErr{field, err}) }
	out.BMCInsecure = b.insecure

	var given []string
	for _, g := range []struct{ name, v string }{{"password", b.password}, {"passwordEnv", b.passwordEnv}, {"passwordFile", b.passwordFile}} {
		if g.v != "" {
			given = append(given, g.name)
		}
	}
	switch {
	case len(given) > 1:
		bad("", fmt.Errorf("both %s set: give exactly one of password, passwordEnv, passwordFile", strings.Join(given, " and ")))
	case len(given) == 0:
		bad("", errNoPassword)
	case b.password != "":
		out.BMCPassword = b.password
	case b.passwordEnv != "":
		ref := RefEnv + b.passwordEnv
		if _, err := resolveRef(ref); err != nil {
			bad("passwordEnv", err)
		} else {
			out.BMCPasswordRef = ref
		}
	default:
		ref := RefFile + absPath(dir, b.passwordFile)
		if _, err := resolveRef(ref); err != nil {
			bad("passwordFile", err)
		} else {
			out.BMCPasswordRef = ref
		}
	}

	if b.fingerprint != "" {
		fp, err := redfish.NormalizeFingerprint(b.fingerprint)
		if err != nil {
			bad("fingerprint", err)
		} else {
			out.BMCFingerprint = fp
		}
	}
	if b.caFile != "" {
		p := absPath(dir, b.caFile)
		if _, err := LoadCABundle(p); err != nil {
			bad("caFile", err)
		} else {
			out.BMCCAFile = p
		}
	}
	switch {
	case b.insecure && b.fingerprint != "":
		bad("fingerprint", errors.New("contradicts insecure: true (a pinned certificate is verified): drop one"))
	case b.insecure && b.caFile != "":
		bad("caFile", errors.New("contradicts insecure: true (a CA-verified BMC is verified): drop one"))
	case b.fingerprint != "" && b.caFile != "":
		bad("fingerprint", errors.New("with caFile: give one way to verify the BMC, the pin or the CA"))
	}
	if u, err := url.Parse(b.url); err == nil && u.Scheme == "http" && !b.insecure {
		bad("url", fmt.Errorf("%q: plain http:// sends the BMC password in clear: use https://, or add insecure: true to allow it", b.url))
	}
	return errs
}

// absPath resolves p against dir and makes it absolute: the coordinator
// reads it later, maybe from another working directory.
func absPath(dir, p string) string {
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return filepath.Clean(p)
}

// seen tracks ids and MACs across the file to report duplicates with both places.
type seen struct {
	ids  map[string]string // id -> where first defined
	macs map[string]string // mac -> "node X at where"
}

func newSeen() *seen { return &seen{ids: map[string]string{}, macs: map[string]string{}} }

func (s *seen) id(id, where string) error {
	if prev, ok := s.ids[id]; ok {
		return fmt.Errorf("duplicate id %q (first defined at %s)", id, prev)
	}
	s.ids[id] = where
	return nil
}

func (s *seen) mac(mac, node, where string) error {
	if prev, ok := s.macs[mac]; ok {
		return fmt.Errorf("MAC %s already used by %s", mac, prev)
	}
	s.macs[mac] = fmt.Sprintf("node %s at %s", node, where)
	return nil
}
