package redfish

import (
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// FingerprintPrefix starts a normalised certificate pin: "sha256:" + 64
// lowercase hex digits of the SHA-256 of the leaf certificate's DER.
const FingerprintPrefix = "sha256:"

// ParseFingerprint reads a SHA-256 certificate pin as operators copy it:
// with or without the "sha256:" prefix, hex in any case, either plain or
// with ':' between every byte (openssl x509 -fingerprint -sha256).
func ParseFingerprint(s string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	h := strings.TrimSpace(s)
	if i := strings.IndexByte(h, ':'); i >= 0 && !isHexPair(h[:i]) {
		// An algorithm prefix, not the first byte of "AA:BB:...".
		if !strings.EqualFold(h[:i+1], FingerprintPrefix) {
			return sum, fmt.Errorf("fingerprint %q: algorithm %q: only sha256 is supported (want sha256:<64 hex digits>)", s, h[:i])
		}
		h = h[i+1:]
	}
	if strings.Contains(h, ":") {
		parts := strings.Split(h, ":")
		if len(parts) != sha256.Size {
			return sum, fmt.Errorf("fingerprint %q: %d ':'-separated bytes: want %d (sha256:<64 hex digits>)", s, len(parts), sha256.Size)
		}
		for _, p := range parts {
			if !isHexPair(p) {
				return sum, fmt.Errorf("fingerprint %q: %q is not a hex byte (want sha256:<64 hex digits>)", s, p)
			}
		}
		h = strings.Join(parts, "")
	}
	if len(h) != 2*sha256.Size {
		return sum, fmt.Errorf("fingerprint %q: %d hex digits: want %d (sha256:<64 hex digits>)", s, len(h), 2*sha256.Size)
	}
	if _, err := hex.Decode(sum[:], []byte(h)); err != nil {
		return sum, fmt.Errorf("fingerprint %q: not hex: want sha256:<64 hex digits>", s)
	}
	return sum, nil
}

func isHexPair(s string) bool {
	if len(s) != 2 {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// NormalizeFingerprint parses s (ParseFingerprint) and returns it as
// "sha256:" + lowercase hex without separators, the form the store keeps.
func NormalizeFingerprint(s string) (string, error) {
	sum, err := ParseFingerprint(s)
	if err != nil {
		return "", err
	}
	return FingerprintPrefix + hex.EncodeToString(sum[:]), nil
}

// CertFingerprint is the pin of a certificate given as DER.
func CertFingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return FingerprintPrefix + hex.EncodeToString(sum[:])
}

// CertificateError is a BMC certificate that did not verify. It carries the
// presented certificate's fingerprint so the operator can check it out of
// band and pin it.
type CertificateError struct {
	URL         string // the BMC endpoint
	Fingerprint string // of the leaf the BMC presented ("" if none)
	Subject     string
	Problem     string // what was wrong, in words
	Advice      string // what to do
	Err         error  // the x509 error, if any
}

func (e *CertificateError) Error() string {
	msg := fmt.Sprintf("BMC %s presented %s", e.URL, e.Problem)
	if e.Fingerprint != "" {
		msg += fmt.Sprintf(" (%s, subject %q)", e.Fingerprint, e.Subject)
	}
	if e.Advice != "" {
		msg += ": " + e.Advice
	}
	return msg
}

func (e *CertificateError) Unwrap() error { return e.Err }

// tlsPolicy is an Endpoint's parsed TLS settings.
type tlsPolicy struct {
	url      string
	host     string // what the certificate must name (CA verification)
	roots    *x509.CertPool
	pin      []byte // SHA-256 of the leaf DER; nil: verify the chain
	insecure bool
}

// config builds the client TLS configuration. Chain and pin checks both run
// in VerifyConnection (so also on resumed sessions), which lets the error
// name the certificate the BMC presented; the stdlib check is switched off
// only because this one replaces it.
//
// Sessions are resumed: the pool closes a BMC's idle connection between a
// run's steps, so every step opens a new one, and a resumed handshake
// spares both sides the certificate signature and its parsing (the
// verification below still runs on it). The cache is the client's own: one
// BMC, a few tickets.
func (p *tlsPolicy) config() *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ClientSessionCache: tls.NewLRUClientSessionCache(4)}
	if p.insecure {
		cfg.InsecureSkipVerify = true //nolint:gosec // the node's inventory says insecure: true; warned about at every Connect
		return cfg
	}
	cfg.InsecureSkipVerify = true //nolint:gosec // verified in VerifyConnection below
	cfg.VerifyConnection = p.verify
	return cfg
}

func (p *tlsPolicy) verify(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return &CertificateError{URL: p.url, Problem: "no certificate", Advice: "a BMC must present one over https"}
	}
	leaf := cs.PeerCertificates[0]
	fp := CertFingerprint(leaf.Raw)
	ce := &CertificateError{URL: p.url, Fingerprint: fp, Subject: leaf.Subject.String()}
	if p.pin != nil {
		sum := sha256.Sum256(leaf.Raw)
		if subtle.ConstantTimeCompare(sum[:], p.pin) == 1 {
			return nil
		}
		ce.Problem = fmt.Sprintf("a certificate other than the pinned %s%s", FingerprintPrefix, hex.EncodeToString(p.pin))
		ce.Advice = fmt.Sprintf("if the BMC's certificate was replaced, check the new one out of band and pin it with `fingerprint: %s` in the node inventory; otherwise something else answers at this address", fp)
		return ce
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := leaf.Verify(x509.VerifyOptions{
		Roots: p.roots, Intermediates: inter, DNSName: p.host,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err == nil {
		return nil
	}
	ce.Err = err
	pinAdvice := fmt.Sprintf("pin it with `fingerprint: %s` in the node inventory after checking it out of band", fp)
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ie x509.CertificateInvalidError
	switch {
	case errors.As(err, &ua):
		ce.Problem = "a certificate signed by an unknown authority"
		ce.Advice = pinAdvice + ", or give caFile (or --bmc-ca) with the CA that signed it"
	case errors.As(err, &he):
		ce.Problem = fmt.Sprintf("a certificate that is not valid for %q (it names %s)", p.host, certNames(leaf))
		ce.Advice = "use the address the certificate names in the node's url, or " + pinAdvice
	case errors.As(err, &ie):
		ce.Problem = fmt.Sprintf("an invalid certificate (%v)", err)
		ce.Advice = "renew the BMC's certificate, or " + pinAdvice
	default:
		ce.Problem = fmt.Sprintf("a certificate that does not verify (%v)", err)
		ce.Advice = pinAdvice + ", or give caFile with the CA that signed it"
	}
	return ce
}

func certNames(c *x509.Certificate) string {
	var names []string
	names = append(names, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		return "no DNS or IP subject alternative names"
	}
	return strings.Join(names, ", ")
}

// originGuard refuses every request that would leave the BMC's origin. The
// driver builds URLs as endpoint + a path the BMC sent (gofish does too), so
// a hostile "@evil/x" or ".evil/x" would otherwise carry the session token or
// Basic credentials to another host; redirects pass here as well.
type originGuard struct {
	base              http.RoundTripper
	scheme, host, url string
}

func (g *originGuard) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme != g.scheme || !strings.EqualFold(r.URL.Host, g.host) || r.URL.User != nil {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, fmt.Errorf("refusing a request to %s://%s%s: not the BMC %s (a URI the BMC sent points elsewhere)",
			r.URL.Scheme, r.URL.Host, r.URL.EscapedPath(), g.url)
	}
	resp, err := g.base.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	return boundResponse(r, resp, maxResponseBytes)
}

// CloseIdleConnections lets http.Client.CloseIdleConnections reach the transport.
func (g *originGuard) CloseIdleConnections() {
	if c, ok := g.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// guardClient returns a copy of hc whose requests cannot leave u's origin.
func guardClient(hc *http.Client, u *url.URL, raw string, onRetry func(int)) *http.Client {
	out := *hc
	base := out.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	rt := newRetryTransport(base)
	rt.onRetry = onRetry
	out.Transport = &originGuard{base: rt, scheme: u.Scheme, host: u.Host, url: raw}
	return &out
}
