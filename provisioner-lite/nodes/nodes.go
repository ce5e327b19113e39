// Package nodes imports the node inventory (YAML or CSV) into store.Node values.
// Parsing is strict: unknown fields, duplicate ids or MACs, malformed MACs, URLs
// and PSIDs, labels a selector could not name, and (with WithSKUCheck) SKUs
// the coordinator does not have are errors that name the file, line and
// field. The coordinator's start, `provisioner-lite check` and `curectl nodes
// import` all read the inventory through this package; Check applies the
// same rules to a node built another way (curectl nodes add, the API).
package nodes

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/cure-oss/cure/provisioner-lite/redfish"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
)

// Option adds a check to parsing.
type Option func(*options)

type options struct {
	sku       func(name string) error
	caChecked bool
}

// WithCABundleChecked tells Check that the node's caFile is not to be read:
// its caller has checked the bundle's bytes (ParseCABundle) and writes the
// file only once every node of an import passed.
func WithCABundleChecked() Option {
	return func(o *options) { o.caChecked = true }
}

// WithSKUCheck reports, at the sku field, every SKU for which known returns
// an error (the coordinator passes its manifest catalog).
func WithSKUCheck(known func(name string) error) Option {
	return func(o *options) { o.sku = known }
}

func newOptions(opts []Option) options {
	var o options
	for _, f := range opts {
		f(&o)
	}
	return o
}

// checkSKU is the sku field's check: empty is allowed (curectl provision
// --manifest names one then).
func (o options) checkSKU(sku string) error {
	if sku == "" || o.sku == nil {
		return nil
	}
	return o.sku(sku)
}

// Load reads an inventory file; the format follows the extension (.yaml, .yml, .csv).
func Load(path string, opts ...Option) ([]store.Node, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("node inventory: %w", err)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		return ParseYAML(path, data, opts...)
	case ".csv":
		return ParseCSV(path, data, opts...)
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
		return fmt.Errorf("%s: want 1-63 characters of A-Z a-z 0-9 . _ - starting with a letter or digit", quote(id))
	}
	return nil
}

// maxBMCURL bounds a BMC URL (a Redfish base URL is short; the inventory
// is shown in every node listing).
const maxBMCURL = 2048

// checkBMCURL refuses a URL with userinfo ("user:password@") before
// anything else: a password there would be stored with the URL and echoed
// wherever the URL is (listings, logs, the audit log viewers read). Any '@'
// counts, parsed as userinfo or not (a malformed URL is the one an error
// quotes). Errors quote the URL redacted (quote).
func checkBMCURL(s string) error {
	if s == "" {
		return errors.New("required")
	}
	if strings.Contains(s, "@") {
		return fmt.Errorf("%s: credentials in the URL (user:password@) are refused: they would be stored and shown with the URL; put the user in username and the password in password, passwordEnv or passwordFile", quote(s))
	}
	if len(s) > maxBMCURL {
		return fmt.Errorf("%d bytes: at most %d", len(s), maxBMCURL)
	}
	u, err := url.Parse(s)
	if err != nil {
		// url.Error quotes the whole input; its cause does not.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("%s: %v", quote(s), err)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return fmt.Errorf("%s: scheme %s: want https (or http with insecure: true)", quote(s), quote(u.Scheme))
	}
	if u.Hostname() == "" {
		return fmt.Errorf("%s: no host", quote(s))
	}
	return nil
}

// quote is how an error shows a value from the inventory: quoted, one line,
// at most 256 bytes, and with anything a URL's userinfo could hold replaced
// (textsafe.RedactURL): errors reach logs, curectl and the audit log.
func quote(s string) string {
	return strconv.Quote(textsafe.BoundedLine(textsafe.RedactURL(s), 256))
}

// hostnameRE is one RFC 1123 label.
var hostnameRE = regexp.MustCompile(`(?i)^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

func checkHostname(h string) error {
	if h == "" {
		return nil
	}
	if len(h) > 253 {
		return fmt.Errorf("%s: longer than 253 characters", quote(h))
	}
	for _, l := range strings.Split(h, ".") {
		if !hostnameRE.MatchString(l) {
			return fmt.Errorf("%s: label %s: want letters, digits and '-' (RFC 1123), 1-63 characters", quote(h), quote(l))
		}
	}
	return nil
}

// labelKeyRE, labelValueRE: labels are matched by selectors written as
// k=v,k2=v2 on command lines, so neither part may hold ',', '=' or spaces.
var (
	labelKeyRE   = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?$`)
	labelValueRE = regexp.MustCompile(`^[A-Za-z0-9._/:@+-]{0,128}$`)
)

// CheckLabel is the rule for one label, here and in `curectl nodes label`.
func CheckLabel(k, v string) error {
	if !labelKeyRE.MatchString(k) {
		return fmt.Errorf("label name %s: want 1-63 letters, digits and . _ / - (starting and ending with a letter or digit)", quote(k))
	}
	if !labelValueRE.MatchString(v) {
		return fmt.Errorf("label %s: value %s: want at most 128 letters, digits and . _ / : @ + - (no spaces, ',' or '=': selectors are k=v,...)", k, quote(v))
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
	caChecked                                                     bool // caFile's bundle was checked already (WithCABundleChecked)
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
		if b.caChecked {
			out.BMCCAFile = p
		} else if _, err := LoadCABundle(p); err != nil {
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
		bad("url", fmt.Errorf("%s: plain http:// sends the BMC password in clear: use https://, or add insecure: true to allow it", quote(b.url)))
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
		return fmt.Errorf("duplicate id %s (first defined at %s)", quote(id), prev)
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

// Check applies the inventory file's rules to a node built another way (the
// flags of `curectl nodes add`, an AddNodes call): id, BMC settings,
// hostname, MACs, PSIDs, labels and, with WithSKUCheck, the SKU. It
// normalises MACs and the fingerprint in place and returns every problem,
// joined, each naming its field as the YAML format spells it
// (bmc.url, macs[1], labels.rack).
func Check(n *store.Node, opts ...Option) error {
	o := newOptions(opts)
	var errs []error
	bad := func(field string, err error) { errs = append(errs, fmt.Errorf("%s: %w", field, err)) }
	if err := checkID(n.ID); err != nil {
		bad("id", err)
	}
	if err := checkBMCURL(n.BMCURL); err != nil {
		bad("bmc.url", err)
	}
	if n.BMCUser == "" {
		bad("bmc.username", errors.New("required"))
	}
	b := bmcFields{url: n.BMCURL, password: n.BMCPassword, caFile: n.BMCCAFile, fingerprint: n.BMCFingerprint, insecure: n.BMCInsecure, caChecked: o.caChecked}
	switch ref := n.BMCPasswordRef; {
	case strings.HasPrefix(ref, RefEnv):
		b.passwordEnv = strings.TrimPrefix(ref, RefEnv)
	case strings.HasPrefix(ref, RefFile):
		b.passwordFile = strings.TrimPrefix(ref, RefFile)
	case ref != "":
		bad("bmc.password", fmt.Errorf("reference %s: want env:NAME or file:/path", quote(ref)))
	}
	out := *n
	out.BMCPassword, out.BMCPasswordRef, out.BMCCAFile, out.BMCFingerprint = "", "", "", ""
	for _, fe := range b.apply("/", &out) {
		field := "bmc.password"
		if fe.field != "" {
			field = "bmc." + fe.field
		}
		bad(field, fe.err)
	}
	if err := checkHostname(n.Hostname); err != nil {
		bad("hostname", err)
	}
	if err := o.checkSKU(n.SKU); err != nil {
		bad("sku", err)
	}
	if len(n.MACs) == 0 {
		bad("macs", errors.New("required: at least one MAC the node PXE-boots from"))
	}
	seen := map[string]bool{}
	out.MACs = nil
	for i, m := range n.MACs {
		nm, err := store.NormalizeMAC(m)
		if err != nil {
			bad(fmt.Sprintf("macs[%d]", i), err)
			continue
		}
		if seen[nm] {
			bad(fmt.Sprintf("macs[%d]", i), fmt.Errorf("MAC %s listed twice", nm))
			continue
		}
		seen[nm] = true
		out.MACs = append(out.MACs, nm)
	}
	for _, serial := range slices.Sorted(maps.Keys(n.PSIDs)) {
		if err := checkPSID(serial, n.PSIDs[serial]); err != nil {
			bad("psids", err)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(n.Labels)) {
		if err := CheckLabel(k, n.Labels[k]); err != nil {
			bad("labels."+k, err)
		}
	}
	out.Cabling = checkCabling(n.Cabling, bad)
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	*n = out
	return nil
}

// CheckEKSHA256 checks a pinned TPM endorsement key: the sha256 of its
// SubjectPublicKeyInfo, 64 hex digits (openssl x509 -in ek.pem -pubkey |
// openssl pkey -pubin -outform der | sha256sum).
func CheckEKSHA256(s string) error {
	if len(s) != 64 {
		return fmt.Errorf("want the 64 hex digits of the EK's SubjectPublicKeyInfo sha256, got %d characters", len(s))
	}
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return fmt.Errorf("%q is not hex", c)
		}
	}
	return nil
}
