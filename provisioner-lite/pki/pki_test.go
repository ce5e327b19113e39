package pki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// handshake runs a TLS handshake over loopback TCP (kernel buffers: a failing
// client can send its alert while the server is still writing) and returns the
// client's error.
func handshake(t *testing.T, server, client *tls.Config) error {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.(*tls.Conn).Handshake()
	}()
	d := &net.Dialer{Timeout: 10 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", ln.Addr().String(), client)
	if err == nil {
		if v := c.ConnectionState().Version; v != tls.VersionTLS13 {
			t.Errorf("negotiated TLS version %x, want 1.3", v)
		}
		c.Close()
	}
	<-done
	return err
}

func TestHandshakeTrustsOnlyTheCA(t *testing.T) {
	dir := t.TempDir()
	srv, err := ServerTLSConfig(dir, []string{"coordinator.cure", "127.0.0.1", "10.0.2.2"})
	if err != nil {
		t.Fatal(err)
	}
	if srv.MinVersion != tls.VersionTLS13 {
		t.Fatalf("server MinVersion = %x", srv.MinVersion)
	}
	caPEM, err := EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"coordinator.cure", "10.0.2.2", "127.0.0.1"} {
		cli, err := ClientTLSConfig(caPEM, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := handshake(t, srv, cli); err != nil {
			t.Errorf("handshake as %s with the right CA: %v", name, err)
		}
	}

	// A name the certificate does not carry fails.
	cli, _ := ClientTLSConfig(caPEM, "other.cure")
	if err := handshake(t, srv, cli); err == nil {
		t.Error("handshake for a name not in the certificate succeeded")
	}

	// A client trusting another CA fails.
	otherCA, err := EnsureCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(otherCA, caPEM) {
		t.Fatal("two directories produced the same CA")
	}
	cli, _ = ClientTLSConfig(otherCA, "coordinator.cure")
	if err := handshake(t, srv, cli); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("handshake with the wrong CA: err = %v, want unknown authority", err)
	}

	if _, err := ClientTLSConfig([]byte("not pem"), "x"); err == nil {
		t.Error("ClientTLSConfig accepted garbage CA data")
	}
}

func TestEnsureCAIdempotentAndProtected(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	a, err := EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("second EnsureCA returned a different CA")
	}
	st, err := os.Stat(filepath.Join(dir, CAKeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("CA key mode = %v, %v; want 0600", st.Mode().Perm(), err)
	}
	ca, err := parseCert("ca.pem", a)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.IsCA || ca.NotAfter.Sub(ca.NotBefore) < 10*365*24*time.Hour || ca.PublicKeyAlgorithm != x509.ECDSA {
		t.Fatalf("CA: IsCA=%v validity=%v alg=%v", ca.IsCA, ca.NotAfter.Sub(ca.NotBefore), ca.PublicKeyAlgorithm)
	}

	// Only the certificate left: refuse rather than mint a new CA.
	if err := os.Remove(filepath.Join(dir, CAKeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureCA(dir); err == nil || !strings.Contains(err.Error(), "incomplete") {
		t.Fatalf("EnsureCA with the key missing: %v", err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, CACertFile))
	if !bytes.Equal(got, a) {
		t.Fatal("EnsureCA overwrote the CA certificate")
	}
}

func TestMismatchedCAKeyRejected(t *testing.T) {
	d1, d2 := t.TempDir(), t.TempDir()
	if _, err := EnsureCA(d1); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureCA(d2); err != nil {
		t.Fatal(err)
	}
	key, _ := os.ReadFile(filepath.Join(d2, CAKeyFile))
	os.WriteFile(filepath.Join(d1, CAKeyFile), key, 0o600)
	if _, err := EnsureCA(d1); err == nil || !strings.Contains(err.Error(), "does not hold the private key") {
		t.Fatalf("EnsureCA with a foreign key: %v", err)
	}
}

func leafSerial(t *testing.T, c tls.Certificate) string {
	t.Helper()
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.String()
}

func TestServerCertReuseAndReissue(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	c1, err := issueServerCert(dir, []string{"a.cure", "10.0.0.1"}, now)
	if err != nil {
		t.Fatal(err)
	}
	// Same set, other order/case/duplicates: reused.
	c2, err := issueServerCert(dir, []string{"10.0.0.1", "A.cure.", "a.cure"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if leafSerial(t, c1) != leafSerial(t, c2) {
		t.Fatal("same host set re-issued the certificate")
	}
	// Host set changed: re-issued, with the new names.
	c3, err := issueServerCert(dir, []string{"a.cure", "10.0.0.1", "b.cure"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if leafSerial(t, c3) == leafSerial(t, c1) {
		t.Fatal("changed host set did not re-issue")
	}
	leaf, _ := x509.ParseCertificate(c3.Certificate[0])
	if err := leaf.VerifyHostname("b.cure"); err != nil {
		t.Fatalf("re-issued certificate: %v", err)
	}
	if len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Fatalf("ExtKeyUsage = %v", leaf.ExtKeyUsage)
	}
	// The files on disk hold the new certificate.
	onDisk, err := tls.LoadX509KeyPair(filepath.Join(dir, ServerCertFile), filepath.Join(dir, ServerKeyFile))
	if err != nil || leafSerial(t, onDisk) != leafSerial(t, c3) {
		t.Fatalf("server.pem not updated: %v", err)
	}
	// Expiring within 30 days: re-issued.
	later := leaf.NotAfter.Add(-29 * 24 * time.Hour)
	c4, err := issueServerCert(dir, []string{"a.cure", "10.0.0.1", "b.cure"}, later)
	if err != nil {
		t.Fatal(err)
	}
	if leafSerial(t, c4) == leafSerial(t, c3) {
		t.Fatal("certificate expiring within 30 days was reused")
	}
	// Signed by a previous CA (CA replaced by the operator): re-issued.
	os.Remove(filepath.Join(dir, CACertFile))
	os.Remove(filepath.Join(dir, CAKeyFile))
	c5, err := issueServerCert(dir, []string{"a.cure", "10.0.0.1", "b.cure"}, later)
	if err != nil {
		t.Fatal(err)
	}
	if leafSerial(t, c5) == leafSerial(t, c4) {
		t.Fatal("certificate of a replaced CA was reused")
	}
}

func TestBadHosts(t *testing.T) {
	if _, err := IssueServerCert(t.TempDir(), nil); err == nil {
		t.Fatal("IssueServerCert without hosts succeeded")
	}
	if _, err := IssueServerCert(t.TempDir(), []string{"ok.cure", "bad host"}); err == nil || !strings.Contains(err.Error(), `hosts[1] "bad host"`) {
		t.Fatalf("bad host: %v", err)
	}
}
