// Package pki creates and loads the coordinator's private CA, its server
// certificate and the operators' client certificates. The CA certificate is
// baked into CURE images so runners trust only this coordinator; curectl trusts
// it the same way and proves who it is with an operator certificate.
//
// Files in dir: ca.pem, ca-key.pem (the CA), server.pem, server-key.pem (the
// serving certificate) and operators/<name>.pem, operators/<name>-key.pem (one
// client certificate per operator). Keys are ECDSA P-256, PKCS#8, mode 0600.
package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// File names inside the PKI directory.
const (
	CACertFile     = "ca.pem"
	CAKeyFile      = "ca-key.pem"
	ServerCertFile = "server.pem"
	ServerKeyFile  = "server-key.pem"
	// OperatorsDir holds the operator client certificates.
	OperatorsDir = "operators"
)

// OperatorOU is the Subject OU of operator certificates: the coordinator
// accepts OperatorService calls only from certificates carrying it, so a
// future client role signed by the same CA cannot drive provisioning.
const OperatorOU = "cure-operator"

// Role is what an operator certificate allows (docs/SECURITY.md): each role
// includes the ones before it.
type Role string

const (
	RoleViewer   Role = "viewer"   // read: nodes, timelines, reports, the audit log
	RoleOperator Role = "operator" // provision, audit, verify, diagnostic, burn-in
	RoleAdmin    Role = "admin"    // wipe, node changes
)

// RoleOUPrefix starts the Subject OU that carries the role: cure-role:admin.
const RoleOUPrefix = "cure-role:"

// ParseRole accepts viewer, operator and admin.
func ParseRole(s string) (Role, error) {
	switch r := Role(s); r {
	case RoleViewer, RoleOperator, RoleAdmin:
		return r, nil
	}
	return "", fmt.Errorf("pki: role %q: want viewer, operator or admin", s)
}

// Allows reports whether role r includes need.
func (r Role) Allows(need Role) bool { return r.rank() >= need.rank() && need.rank() > 0 }

func (r Role) rank() int {
	switch r {
	case RoleViewer:
		return 1
	case RoleOperator:
		return 2
	case RoleAdmin:
		return 3
	}
	return 0
}

// CertRole reads the role from a certificate's Subject OUs. A certificate
// without one (issued before roles existed) is a viewer; one with two
// different roles is refused.
func CertRole(c *x509.Certificate) (Role, error) {
	var found Role
	for _, ou := range c.Subject.OrganizationalUnit {
		if !strings.HasPrefix(ou, RoleOUPrefix) {
			continue
		}
		r, err := ParseRole(strings.TrimPrefix(ou, RoleOUPrefix))
		if err != nil {
			return "", err
		}
		if found != "" && found != r {
			return "", fmt.Errorf("pki: certificate %s carries two roles (%s, %s)", c.Subject.CommonName, found, r)
		}
		found = r
	}
	if found == "" {
		return RoleViewer, nil
	}
	return found, nil
}

const (
	caValidity     = 10 * 365 * 24 * time.Hour
	serverValidity = 397 * 24 * time.Hour // the longest validity browsers accept; rotation is automatic anyway
	// Operators re-run `provisioner-lite pki --operator` yearly; a short life
	// bounds how long a copied key stays useful.
	operatorValidity = 365 * 24 * time.Hour
	renewBefore      = 30 * 24 * time.Hour
	backdate         = time.Hour // tolerate clock skew between coordinator and freshly booted nodes
)

// EnsureCA returns the PEM of the CA certificate in dir, creating the CA (ECDSA
// P-256, valid 10 years) if neither ca.pem nor ca-key.pem exists. If only one
// of them exists it refuses: silently replacing a CA would orphan every image
// that trusts it.
func EnsureCA(dir string) (caCertPEM []byte, err error) {
	ca, err := ensureCA(dir, time.Now())
	if err != nil {
		return nil, err
	}
	return ca.certPEM, nil
}

// IssueServerCert returns the server certificate in dir for hosts (DNS names
// and/or IP addresses), signed by the CA (created if absent). The stored
// certificate is reused unless its host set differs, it expires within 30 days,
// it was not signed by the current CA, or its key does not match; then a new one
// is issued and written.
func IssueServerCert(dir string, hosts []string) (tls.Certificate, error) {
	return issueServerCert(dir, hosts, time.Now())
}

// ServerTLSConfig returns a TLS 1.3-only server config serving the certificate
// from IssueServerCert. A client certificate is verified against the CA when
// one is presented but not required: runners have none (they authenticate with
// their boot token), so the per-service check is left to the gRPC layer.
func ServerTLSConfig(dir string, hosts []string) (*tls.Config, error) {
	cert, err := IssueServerCert(dir, hosts)
	if err != nil {
		return nil, err
	}
	caPEM, err := EnsureCA(dir)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("pki: server TLS config: no PEM certificate in %s", filepath.Join(dir, CACertFile))
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS13,
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    pool,
	}, nil
}

// ClientTLSConfig returns a TLS 1.3-only client config that trusts only the CA
// in caPEM and expects serverName (a DNS name or IP) in the server certificate.
// clientCert, if not nil, is presented to the server (an operator certificate).
func ClientTLSConfig(caPEM []byte, serverName string, clientCert *tls.Certificate) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("pki: client TLS config: no PEM certificate found in the CA data")
	}
	if serverName == "" {
		return nil, errors.New("pki: client TLS config: empty server name")
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS13}
	if clientCert != nil {
		cfg.Certificates = []tls.Certificate{*clientCert}
	}
	return cfg, nil
}

// OperatorCert describes an operator client certificate on disk.
type OperatorCert struct {
	Name, CertFile, KeyFile string
	Role                    Role
	NotAfter                time.Time
	// Issued is false when the stored certificate was reused.
	Issued bool
}

// OperatorCertFiles returns the certificate and key paths of operator name in dir.
func OperatorCertFiles(dir, name string) (certFile, keyFile string) {
	d := filepath.Join(dir, OperatorsDir)
	return filepath.Join(d, name+".pem"), filepath.Join(d, name+"-key.pem")
}

// IssueOperatorCert returns the client certificate of operator name in dir
// (ECDSA P-256, ExtKeyUsageClientAuth only, CN name, OUs cure-operator and
// cure-role:ROLE, valid a year), signed by the CA (created if absent). Like
// the server certificate, the stored one is reused unless it expires within
// 30 days, was not signed by the current CA, does not match its key or
// carries another role; then a new one is issued and written.
func IssueOperatorCert(dir, name string, role Role) (OperatorCert, error) {
	return issueOperatorCert(dir, name, role, time.Now())
}

// LoadOperatorCert loads an operator certificate and key for a client, failing
// early (instead of at the coordinator) when the pair does not match, is not a
// client certificate, or has expired.
func LoadOperatorCert(certFile, keyFile string) (tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: operator certificate %s / %s: %w", certFile, keyFile, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: operator certificate %s: %w", certFile, err)
	}
	if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return tls.Certificate{}, fmt.Errorf("pki: %s is not a client certificate (no ClientAuth key usage); issue one with `provisioner-lite pki --operator NAME`", certFile)
	}
	if now := time.Now(); now.After(leaf.NotAfter) {
		return tls.Certificate{}, fmt.Errorf("pki: operator certificate %s (%s) expired on %s; re-issue it with `provisioner-lite pki --operator %s`",
			certFile, leaf.Subject.CommonName, leaf.NotAfter.Format(time.DateOnly), leaf.Subject.CommonName)
	}
	cert.Leaf = leaf
	return cert, nil
}

// validOperatorName keeps the name usable as a file name and unambiguous:
// "x-key" would be the key file of operator "x".
func validOperatorName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("pki: operator name %q: want 1 to 64 characters", name)
	}
	for i, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || (i > 0 && strings.ContainsRune("._@-", c))
		if !ok {
			return fmt.Errorf("pki: operator name %q: use letters, digits and . _ @ - (not first)", name)
		}
	}
	if strings.HasSuffix(name, "-key") {
		return fmt.Errorf("pki: operator name %q: must not end in -key (that is the key file name of operator %q)", name, strings.TrimSuffix(name, "-key"))
	}
	return nil
}

func issueOperatorCert(dir, name string, role Role, now time.Time) (OperatorCert, error) {
	if err := validOperatorName(name); err != nil {
		return OperatorCert{}, err
	}
	if _, err := ParseRole(string(role)); err != nil {
		return OperatorCert{}, err
	}
	ca, err := ensureCA(dir, now)
	if err != nil {
		return OperatorCert{}, err
	}
	if now.Add(renewBefore).After(ca.cert.NotAfter) {
		return OperatorCert{}, fmt.Errorf("pki: CA in %s expires %s (within 30 days): rotate the CA and rebuild images", dir, ca.cert.NotAfter.Format(time.DateOnly))
	}
	certPath, keyPath := OperatorCertFiles(dir, name)
	oc := OperatorCert{Name: name, CertFile: certPath, KeyFile: keyPath, Role: role}
	if _, leaf, why := loadLeaf(certPath, keyPath, ca, now); why == "" &&
		leaf.Subject.CommonName == name && slices.Contains(leaf.Subject.OrganizationalUnit, OperatorOU) &&
		slices.Contains(leaf.Subject.OrganizationalUnit, RoleOUPrefix+string(role)) &&
		slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		oc.NotAfter = leaf.NotAfter
		return oc, nil
	}
	if err := os.MkdirAll(filepath.Dir(certPath), 0o700); err != nil {
		return OperatorCert{}, fmt.Errorf("pki: create operator certificate directory: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return OperatorCert{}, err
	}
	notAfter := now.Add(operatorValidity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name, Organization: []string{"CURE"}, OrganizationalUnit: []string{OperatorOU, RoleOUPrefix + string(role)}},
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if _, err := signLeaf(ca, tmpl, certPath, keyPath, "operator"); err != nil {
		return OperatorCert{}, err
	}
	oc.NotAfter, oc.Issued = notAfter, true
	return oc, nil
}

type authority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

func ensureCA(dir string, now time.Time) (*authority, error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	certOK, keyOK := exists(certPath), exists(keyPath)
	switch {
	case certOK && keyOK:
		return loadCA(certPath, keyPath)
	case certOK != keyOK:
		present, missing := certPath, keyPath
		if keyOK {
			present, missing = keyPath, certPath
		}
		return nil, fmt.Errorf("pki: CA in %s is incomplete: %s exists but %s does not; restore it or remove both to create a new CA (images built with the old CA will stop trusting this coordinator)", dir, present, missing)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: create CA directory: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: generate CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "CURE provisioner-lite CA", Organization: []string{"CURE"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		// SubjectKeyId: x509.CreateCertificate derives it for CA templates.
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: self-sign CA: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	// Key first: a crash between the two writes leaves "key without cert", which
	// ensureCA reports instead of silently minting a second CA.
	if err := writeAtomic(keyPath, keyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := writeAtomic(certPath, certPEM, 0o644); err != nil {
		return nil, err
	}
	return loadCA(certPath, keyPath)
}

func loadCA(certPath, keyPath string) (*authority, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("pki: read CA: %w", err)
	}
	cert, err := parseCert(certPath, certPEM)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("pki: %s: certificate %q is not a CA (IsCA=%v)", certPath, cert.Subject.CommonName, cert.IsCA)
	}
	key, err := readKey(keyPath)
	if err != nil {
		return nil, err
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("pki: %s does not hold the private key of %s", keyPath, certPath)
	}
	return &authority{cert: cert, key: key, certPEM: certPEM}, nil
}

func issueServerCert(dir string, hosts []string, now time.Time) (tls.Certificate, error) {
	dns, ips, err := normalizeHosts(hosts)
	if err != nil {
		return tls.Certificate{}, err
	}
	ca, err := ensureCA(dir, now)
	if err != nil {
		return tls.Certificate{}, err
	}
	if now.Add(renewBefore).After(ca.cert.NotAfter) {
		return tls.Certificate{}, fmt.Errorf("pki: CA in %s expires %s (within 30 days): rotate the CA and rebuild images", dir, ca.cert.NotAfter.Format(time.DateOnly))
	}
	certPath, keyPath := filepath.Join(dir, ServerCertFile), filepath.Join(dir, ServerKeyFile)
	if cert, why := loadServer(certPath, keyPath, ca, dns, ips, now); why == "" {
		return cert, nil
	}

	serial, err := randomSerial()
	if err != nil {
		return tls.Certificate{}, err
	}
	notAfter := now.Add(serverValidity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	cn := hosts[0]
	if len(dns) > 0 {
		cn = dns[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"CURE"}},
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	return signLeaf(ca, tmpl, certPath, keyPath, "server")
}

// signLeaf generates a key, signs tmpl with the CA and writes key and
// certificate atomically (key first, as for the CA).
func signLeaf(ca *authority, tmpl *x509.Certificate, certPath, keyPath, what string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: generate %s key: %w", what, err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: sign %s certificate: %w", what, err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM, err := encodeKey(key)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := writeAtomic(keyPath, keyPEM, 0o600); err != nil {
		return tls.Certificate{}, err
	}
	if err := writeAtomic(certPath, certPEM, 0o644); err != nil {
		return tls.Certificate{}, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: load issued %s certificate: %w", what, err)
	}
	return cert, nil
}

// loadServer returns the stored server certificate, or a non-empty reason why
// it cannot be reused.
func loadServer(certPath, keyPath string, ca *authority, dns []string, ips []net.IP, now time.Time) (tls.Certificate, string) {
	cert, leaf, why := loadLeaf(certPath, keyPath, ca, now)
	if why != "" {
		return tls.Certificate{}, why
	}
	if !slices.Equal(sortedCopy(leaf.DNSNames), dns) || !sameIPs(leaf.IPAddresses, ips) {
		return tls.Certificate{}, "host set changed"
	}
	return cert, ""
}

// loadLeaf returns a stored certificate and its parsed leaf, or a non-empty
// reason why it cannot be reused: missing, key mismatch, not signed by the
// current CA, or expiring within 30 days.
func loadLeaf(certPath, keyPath string, ca *authority, now time.Time) (tls.Certificate, *x509.Certificate, string) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return tls.Certificate{}, nil, "no certificate"
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return tls.Certificate{}, nil, "no key"
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, nil, "key does not match: " + err.Error()
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return tls.Certificate{}, nil, "unparsable: " + err.Error()
		}
	}
	if leaf.CheckSignatureFrom(ca.cert) != nil {
		return tls.Certificate{}, nil, "not signed by the current CA"
	}
	if now.Add(renewBefore).After(leaf.NotAfter) {
		return tls.Certificate{}, nil, "expires within 30 days"
	}
	return cert, leaf, ""
}

// normalizeHosts splits hosts into sorted, de-duplicated DNS names (lowercase)
// and IPs. An empty list or an invalid name is an error.
func normalizeHosts(hosts []string) ([]string, []net.IP, error) {
	if len(hosts) == 0 {
		return nil, nil, errors.New("pki: server certificate: no hosts given: want the DNS names and/or IPs nodes dial")
	}
	var dns []string
	var ips []net.IP
	for i, h := range hosts {
		h = strings.TrimSpace(h)
		if ip := net.ParseIP(h); ip != nil {
			if v4 := ip.To4(); v4 != nil {
				ip = v4
			}
			if !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
			continue
		}
		h = strings.ToLower(strings.TrimSuffix(h, "."))
		if !validDNSName(h) {
			return nil, nil, fmt.Errorf("pki: server certificate: hosts[%d] %q is neither an IP address nor a DNS name", i, hosts[i])
		}
		if !slices.Contains(dns, h) {
			dns = append(dns, h)
		}
	}
	slices.Sort(dns)
	slices.SortFunc(ips, func(a, b net.IP) int { return bytes.Compare(a, b) })
	return dns, ips, nil
}

func validDNSName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for i, l := range strings.Split(h, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for j, c := range l {
			ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || (c == '*' && i == 0 && j == 0 && len(l) == 1)
			if !ok {
				return false
			}
		}
	}
	return true
}

func sameIPs(a, b []net.IP) bool {
	if len(a) != len(b) {
		return false
	}
	norm := func(in []net.IP) []net.IP {
		out := make([]net.IP, len(in))
		for i, ip := range in {
			if v4 := ip.To4(); v4 != nil {
				ip = v4
			}
			out[i] = ip
		}
		slices.SortFunc(out, func(x, y net.IP) int { return bytes.Compare(x, y) })
		return out
	}
	na, nb := norm(a), norm(b)
	for i := range na {
		if !na[i].Equal(nb[i]) {
			return false
		}
	}
	return true
}

func sortedCopy(s []string) []string {
	out := slices.Clone(s)
	for i := range out {
		out[i] = strings.ToLower(out[i])
	}
	slices.Sort(out)
	return out
}

func parseCert(path string, data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("pki: %s: no PEM CERTIFICATE block", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", path, err)
	}
	return cert, nil
}

func readKey(path string) (*ecdsa.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pki: read key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("pki: %s: no PEM block", path)
	}
	var k any
	switch block.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("pki: %s: PEM block %q: want PRIVATE KEY", path, block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("pki: %s: %w", path, err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("pki: %s: key is %T, want ECDSA", path, k)
	}
	return ek, nil
}

func encodeKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("pki: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func randomSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("pki: serial number: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil // never zero
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// writeAtomic writes via a temp file and rename so readers never see half a key.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("pki: write %s: %w", path, err)
	}
	return nil
}
