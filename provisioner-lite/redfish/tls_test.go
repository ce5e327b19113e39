package redfish

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cure-oss/cure/qemu-test/vbmc"
)

// testCA is a throwaway certificate authority.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

func (ca *testCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// issue signs a server certificate for the given IPs and DNS names.
func (ca *testCA) issue(t *testing.T, ips []net.IP, dns ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "bmc"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: ips, DNSNames: dns,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

var loopback = []net.IP{net.IPv4(127, 0, 0, 1)}

// seenRequests is what a test BMC was sent.
type seenRequests struct {
	mu                      sync.Mutex
	total, auth, sessionPOS int
}

func (s *seenRequests) counts() (total, auth, sessionPOST int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total, s.auth, s.sessionPOS
}

// tlsBMC serves a virtual BMC over HTTPS with cert (nil: plain HTTP),
// counting requests, credentials and session logins.
func tlsBMC(t *testing.T, cert *tls.Certificate) (string, *vbmc.BMC, *seenRequests) {
	t.Helper()
	b, err := vbmc.New(vbmc.Config{Name: "tls", Logger: testLogger(t).With("side", "bmc")}, vbmc.NewFakeMachine())
	if err != nil {
		t.Fatal(err)
	}
	seen := &seenRequests{}
	h := b.Handler()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.mu.Lock()
		seen.total++
		if r.Header.Get("Authorization") != "" || r.Header.Get("X-Auth-Token") != "" {
			seen.auth++
		}
		if r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/Sessions") {
			seen.sessionPOS++
		}
		seen.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	srv.Config.ErrorLog = quietLog
	if cert != nil {
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(func() {
		b.Close(context.Background())
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL, b, seen
}

// logBuffer collects a logger's output for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func fp(der []byte) string {
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func tryConnect(t *testing.T, ep Endpoint, log *slog.Logger) (*Client, error) {
	t.Helper()
	if log == nil {
		log = testLogger(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ep.Username == "" {
		ep.Username, ep.Password = "admin", "password"
	}
	c, err := Connect(ctx, ep, Options{Timeout: 5 * time.Second, Logger: log})
	if err == nil {
		t.Cleanup(func() { c.Close(context.Background()) })
	}
	return c, err
}

func TestBMCVerifiedCA(t *testing.T) {
	ca := newTestCA(t, "site BMC CA")
	cert := ca.issue(t, loopback)
	url, _, _ := tlsBMC(t, &cert)
	c, err := tryConnect(t, Endpoint{URL: url, RootCAs: ca.pool()}, nil)
	if err != nil {
		t.Fatalf("BMC certificate from the given CA refused: %v", err)
	}
	if ps, err := c.PowerState(context.Background()); err != nil || ps != "Off" {
		t.Fatalf("PowerState over verified TLS = %q, %v", ps, err)
	}
}

// A BMC whose certificate nothing vouches for is refused before any
// credential leaves: the server never sees a request at all.
func TestBMCUnknownCertRefused(t *testing.T) {
	ca := newTestCA(t, "someone's CA")
	cert := ca.issue(t, loopback)
	url, _, seen := tlsBMC(t, &cert)
	for name, roots := range map[string]*x509.CertPool{"system roots": nil, "another CA": newTestCA(t, "site CA").pool()} {
		t.Run(name, func(t *testing.T) {
			_, err := tryConnect(t, Endpoint{URL: url, RootCAs: roots}, nil)
			if err == nil {
				t.Fatal("BMC with an unknown certificate accepted")
			}
			var ce *CertificateError
			if !errors.As(err, &ce) {
				t.Fatalf("error is not a *CertificateError: %v", err)
			}
			want := fp(cert.Certificate[0])
			for _, s := range []string{"BMC " + url, "unknown authority", "(" + want, "fingerprint: " + want, "caFile"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q\nlacks %q", err, s)
				}
			}
			if ce.Fingerprint != want {
				t.Errorf("CertificateError.Fingerprint = %s, want %s", ce.Fingerprint, want)
			}
		})
	}
	if total, auth, sessions := seen.counts(); total != 0 || auth != 0 || sessions != 0 {
		t.Fatalf("refused BMC saw %d requests, %d with credentials, %d session POSTs; want none", total, auth, sessions)
	}
}

func TestBMCHostnameMismatchRefused(t *testing.T) {
	ca := newTestCA(t, "site BMC CA")
	cert := ca.issue(t, []net.IP{net.IPv4(10, 9, 9, 9)}, "bmc7.example")
	url, _, seen := tlsBMC(t, &cert)
	_, err := tryConnect(t, Endpoint{URL: url, RootCAs: ca.pool()}, nil)
	if err == nil || !strings.Contains(err.Error(), `not valid for "127.0.0.1" (it names bmc7.example, 10.9.9.9)`) {
		t.Fatalf("certificate for another host: %v", err)
	}
	if total, _, _ := seen.counts(); total != 0 {
		t.Fatalf("BMC with the wrong name saw %d requests", total)
	}
}

func TestBMCPinnedFingerprint(t *testing.T) {
	// The virtual BMC's own self-signed certificate, pinned in the form an
	// operator pastes from openssl: upper case, ':' between bytes.
	b, err := vbmc.New(vbmc.Config{Name: "pinned", Logger: testLogger(t)}, vbmc.NewFakeMachine())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := vbmc.Listen("127.0.0.1:0", b, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	raw, _ := hex.DecodeString(strings.TrimPrefix(srv.Fingerprint(), "sha256:"))
	var parts []string
	for _, x := range raw {
		parts = append(parts, strings.ToUpper(hex.EncodeToString([]byte{x})))
	}
	c, err := tryConnect(t, Endpoint{URL: srv.URL, Fingerprint: strings.Join(parts, ":")}, nil)
	if err != nil {
		t.Fatalf("pinned certificate refused: %v", err)
	}
	if ps, err := c.PowerState(context.Background()); err != nil || ps != "Off" {
		t.Fatalf("PowerState over pinned TLS = %q, %v", ps, err)
	}
	// A pin needs no CA and ignores the name: this certificate is from an
	// unknown CA and names another host.
	cert := newTestCA(t, "nobody").issue(t, nil, "elsewhere.example")
	url, _, _ := tlsBMC(t, &cert)
	if _, err := tryConnect(t, Endpoint{URL: url, Fingerprint: fp(cert.Certificate[0])}, nil); err != nil {
		t.Fatalf("pinned certificate with a foreign CA and name refused: %v", err)
	}
}

func TestBMCWrongPinRefused(t *testing.T) {
	cert := newTestCA(t, "nobody").issue(t, loopback)
	url, _, seen := tlsBMC(t, &cert)
	pin := "sha256:" + strings.Repeat("ab", 32)
	_, err := tryConnect(t, Endpoint{URL: url, Fingerprint: pin}, nil)
	if err == nil {
		t.Fatal("certificate that does not match the pin accepted")
	}
	got := fp(cert.Certificate[0])
	for _, s := range []string{"other than the pinned " + pin, "(" + got, "fingerprint: " + got} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q\nlacks %q", err, s)
		}
	}
	if total, auth, sessions := seen.counts(); total != 0 || auth != 0 || sessions != 0 {
		t.Fatalf("BMC failing its pin saw %d requests (%d with credentials, %d session POSTs)", total, auth, sessions)
	}
}

func TestBMCPlainHTTP(t *testing.T) {
	url, _, seen := tlsBMC(t, nil)
	_, err := tryConnect(t, Endpoint{URL: url}, nil)
	if err == nil {
		t.Fatal("http:// BMC accepted without Insecure")
	}
	for _, s := range []string{url, "in clear", "insecure: true"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q\nlacks %q", err, s)
		}
	}
	if total, _, _ := seen.counts(); total != 0 {
		t.Fatalf("refused http:// BMC saw %d requests", total)
	}
	// Allowed when the inventory says so, with a warning on every Connect.
	var logs logBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	for range 2 {
		c, err := tryConnect(t, Endpoint{URL: url, Insecure: true}, log)
		if err != nil {
			t.Fatalf("http:// with Insecure: %v", err)
		}
		if ps, err := c.PowerState(context.Background()); err != nil || ps != "Off" {
			t.Fatalf("PowerState over http:// = %q, %v", ps, err)
		}
	}
	if n := strings.Count(logs.String(), "level=WARN msg=\"BMC TLS verification is OFF"); n != 2 {
		t.Fatalf("want one warning per Connect (2), got %d in:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "scheme=http") {
		t.Errorf("warning does not say the scheme: %s", logs.String())
	}
}

func TestBMCInsecureTLS(t *testing.T) {
	cert := newTestCA(t, "nobody").issue(t, nil, "elsewhere.example")
	url, _, _ := tlsBMC(t, &cert)
	var logs logBuffer
	c, err := tryConnect(t, Endpoint{URL: url, Insecure: true}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("Insecure over TLS: %v", err)
	}
	if ps, err := c.PowerState(context.Background()); err != nil || ps != "Off" {
		t.Fatalf("PowerState = %q, %v", ps, err)
	}
	if !strings.Contains(logs.String(), "BMC TLS verification is OFF") || !strings.Contains(logs.String(), "bmc="+url) {
		t.Fatalf("no warning naming the BMC: %s", logs.String())
	}
}

func TestEndpointTLSContradictions(t *testing.T) {
	pin := "sha256:" + strings.Repeat("0f", 32)
	for _, tc := range []struct {
		name string
		ep   Endpoint
		want string
	}{
		{"pin and insecure", Endpoint{URL: "https://192.0.2.1", Fingerprint: pin, Insecure: true}, "both a certificate fingerprint and insecure"},
		{"pin and CA", Endpoint{URL: "https://192.0.2.1", Fingerprint: pin, RootCAs: x509.NewCertPool()}, "both a certificate fingerprint and a CA bundle"},
		{"bad pin", Endpoint{URL: "https://192.0.2.1", Fingerprint: "sha256:abc"}, "3 hex digits"},
		{"sha1 pin", Endpoint{URL: "https://192.0.2.1", Fingerprint: "sha1:" + strings.Repeat("0f", 20)}, "only sha256"},
		{"http with pin", Endpoint{URL: "http://192.0.2.1", Fingerprint: pin}, "in clear"},
		{"credentials in URL", Endpoint{URL: "https://u:p@192.0.2.1"}, "want https://host[:port]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.ep.Username = "admin"
			start := time.Now()
			_, err := Connect(context.Background(), tc.ep, Options{Timeout: 5 * time.Second, Logger: testLogger(t)})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Connect = %v, want %q", err, tc.want)
			}
			if time.Since(start) > time.Second {
				t.Fatalf("refusal took %v: it must not dial", time.Since(start))
			}
		})
	}
}

func TestParseFingerprint(t *testing.T) {
	hexs := strings.Repeat("0a1B", 16)
	want := "sha256:" + strings.ToLower(hexs)
	colons := func(s string) string {
		var p []string
		for i := 0; i < len(s); i += 2 {
			p = append(p, s[i:i+2])
		}
		return strings.Join(p, ":")
	}
	for _, in := range []string{hexs, "sha256:" + hexs, "SHA256:" + strings.ToUpper(hexs), colons(hexs), "sha256:" + colons(hexs), " " + hexs + "\n"} {
		got, err := NormalizeFingerprint(in)
		if err != nil || got != want {
			t.Errorf("NormalizeFingerprint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, why := range map[string]string{
		"":                                 "0 hex digits",
		"sha256:":                          "0 hex digits",
		hexs[:62]:                          "62 hex digits",
		hexs + "00":                        "66 hex digits",
		"md5:" + hexs:                      "only sha256",
		colons(hexs)[3:]:                   "31 ':'-separated bytes",
		strings.Repeat("zz", 32):           "not hex",
		colons(hexs)[:92] + ":g0":          "\"g0\" is not a hex byte",
		strings.Replace(hexs, "a", " ", 1): "not hex",
		"0a1:b" + hexs[5:]:                 "only sha256",
	} {
		if _, err := ParseFingerprint(in); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("ParseFingerprint(%q) = %v, want %q", in, err, why)
		}
	}
}

// A BMC (or whatever answers) that redirects elsewhere does not get the
// driver to talk to another host, credentials or not.
func TestRequestsStayAtTheBMC(t *testing.T) {
	var evilSeen seenRequests
	evil := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		evilSeen.mu.Lock()
		evilSeen.total++
		evilSeen.mu.Unlock()
	}))
	t.Cleanup(evil.Close)
	ca := newTestCA(t, "site")
	cert := ca.issue(t, loopback)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, evil.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, err := tryConnect(t, Endpoint{URL: srv.URL, RootCAs: ca.pool()}, nil)
	if err == nil || !strings.Contains(err.Error(), "not the BMC "+srv.URL) {
		t.Fatalf("redirect to another host: %v", err)
	}
	if total, _, _ := evilSeen.counts(); total != 0 {
		t.Fatalf("the other host saw %d requests", total)
	}
}

// A new connection to the same BMC resumes the TLS session, and the pin is
// still checked on the resumed one.
func TestBMCSessionResumedAndVerified(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	pol, err := endpointPolicy(Endpoint{URL: srv.URL, Username: "admin", Fingerprint: CertFingerprint(srv.Certificate().Raw)}, u)
	if err != nil {
		t.Fatal(err)
	}
	cfg := pol.config()
	var verified atomic.Int32
	check := cfg.VerifyConnection
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		verified.Add(1)
		return check(cs)
	}
	hc := newHTTPClient(cfg, 5*time.Second)
	var resumed []bool
	for range 2 {
		resp, err := hc.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		resumed = append(resumed, resp.TLS.DidResume)
		hc.CloseIdleConnections()
	}
	if !slices.Equal(resumed, []bool{false, true}) || verified.Load() != 2 {
		t.Fatalf("resumed %v, verified %d times; want the second connection resumed and both verified", resumed, verified.Load())
	}
}
