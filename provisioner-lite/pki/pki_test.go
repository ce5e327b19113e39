package pki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
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
		cli, err := ClientTLSConfig(caPEM, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := handshake(t, srv, cli); err != nil {
			t.Errorf("handshake as %s with the right CA: %v", name, err)
		}
	}

	// A name the certificate does not carry fails.
	cli, _ := ClientTLSConfig(caPEM, "other.cure", nil)
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
	cli, _ = ClientTLSConfig(otherCA, "coordinator.cure", nil)
	if err := handshake(t, srv, cli); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("handshake with the wrong CA: err = %v, want unknown authority", err)
	}

	if _, err := ClientTLSConfig([]byte("not pem"), "x", nil); err == nil {
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

func TestOperatorCert(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	oc, err := issueOperatorCert(dir, "alice", RoleOperator, now)
	if err != nil {
		t.Fatal(err)
	}
	wantCert, wantKey := filepath.Join(dir, "operators", "alice.pem"), filepath.Join(dir, "operators", "alice-key.pem")
	if oc.CertFile != wantCert || oc.KeyFile != wantKey || !oc.Issued {
		t.Fatalf("IssueOperatorCert = %+v, want files %s, %s and Issued", oc, wantCert, wantKey)
	}
	st, err := os.Stat(oc.KeyFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("operator key mode = %v, %v; want 0600", st.Mode().Perm(), err)
	}
	c1, err := LoadOperatorCert(oc.CertFile, oc.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf := c1.Leaf
	if leaf.Subject.CommonName != "alice" || !slices.Equal(leaf.Subject.OrganizationalUnit, []string{OperatorOU, RoleOUPrefix + "operator"}) {
		t.Fatalf("subject = %v, want CN alice, OUs %s and %soperator", leaf.Subject, OperatorOU, RoleOUPrefix)
	}
	if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Fatalf("ExtKeyUsage = %v, want ClientAuth only", leaf.ExtKeyUsage)
	}
	if leaf.PublicKeyAlgorithm != x509.ECDSA || leaf.IsCA {
		t.Fatalf("alg=%v IsCA=%v", leaf.PublicKeyAlgorithm, leaf.IsCA)
	}
	if v := leaf.NotAfter.Sub(now); v < 364*24*time.Hour || v > 366*24*time.Hour {
		t.Fatalf("validity from now = %v, want a year", v)
	}
	caPEM, _ := EnsureCA(dir)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("operator certificate does not verify as a client certificate of the CA: %v", err)
	}

	// Second call: the stored certificate is reused.
	oc2, err := issueOperatorCert(dir, "alice", RoleOperator, now)
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := LoadOperatorCert(oc2.CertFile, oc2.KeyFile)
	if oc2.Issued || leafSerial(t, c2) != leafSerial(t, c1) {
		t.Fatalf("second issue re-issued (Issued=%v)", oc2.Issued)
	}
	// Another operator gets its own pair.
	bob, err := issueOperatorCert(dir, "bob", RoleOperator, now)
	if err != nil || bob.CertFile == oc.CertFile {
		t.Fatalf("bob: %+v, %v", bob, err)
	}
	// Expiring within 30 days: re-issued.
	later := leaf.NotAfter.Add(-29 * 24 * time.Hour)
	oc3, err := issueOperatorCert(dir, "alice", RoleOperator, later)
	if err != nil {
		t.Fatal(err)
	}
	c3, _ := tls.LoadX509KeyPair(oc3.CertFile, oc3.KeyFile)
	if !oc3.Issued || leafSerial(t, c3) == leafSerial(t, c1) {
		t.Fatal("operator certificate expiring within 30 days was reused")
	}
	// CA replaced: re-issued, and signed by the new CA.
	os.Remove(filepath.Join(dir, CACertFile))
	os.Remove(filepath.Join(dir, CAKeyFile))
	oc4, err := issueOperatorCert(dir, "alice", RoleOperator, later)
	if err != nil {
		t.Fatal(err)
	}
	c4, _ := LoadOperatorCert(oc4.CertFile, oc4.KeyFile)
	if !oc4.Issued || leafSerial(t, c4) == leafSerial(t, c3) {
		t.Fatal("operator certificate of a replaced CA was reused")
	}
	newCA, _ := EnsureCA(dir)
	ca, _ := parseCert("ca.pem", newCA)
	if err := c4.Leaf.CheckSignatureFrom(ca); err != nil {
		t.Fatalf("re-issued operator certificate not signed by the new CA: %v", err)
	}
}

func TestOperatorCertNames(t *testing.T) {
	dir := t.TempDir()
	for _, bad := range []string{"", "../x", "a/b", ".hidden", "-x", "alice-key", "a b", strings.Repeat("a", 65)} {
		if _, err := IssueOperatorCert(dir, bad, RoleViewer); err == nil {
			t.Errorf("IssueOperatorCert(%q) succeeded", bad)
		}
	}
	if _, err := IssueOperatorCert(dir, "alice@example.com", RoleViewer); err != nil {
		t.Errorf("e-mail style name: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, OperatorsDir, "..", "x.pem")); err == nil {
		t.Error("a bad name wrote outside the operators directory")
	}
}

func TestLoadOperatorCertRejectsServerCert(t *testing.T) {
	dir := t.TempDir()
	if _, err := IssueServerCert(dir, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	_, err := LoadOperatorCert(filepath.Join(dir, ServerCertFile), filepath.Join(dir, ServerKeyFile))
	if err == nil || !strings.Contains(err.Error(), "not a client certificate") {
		t.Fatalf("LoadOperatorCert(server cert) = %v, want not a client certificate", err)
	}
	if _, err := LoadOperatorCert(filepath.Join(dir, "none.pem"), filepath.Join(dir, "none-key.pem")); err == nil {
		t.Fatal("LoadOperatorCert of missing files succeeded")
	}
}

// serverHandshake runs a handshake and returns the server's view: in TLS 1.3
// the client finishes before the server has checked its certificate, so a
// rejected client certificate shows on the server side.
func serverHandshake(t *testing.T, server, client *tls.Config) (tls.ConnectionState, error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		st  tls.ConnectionState
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			res <- result{err: err}
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		tc := c.(*tls.Conn)
		err = tc.Handshake()
		res <- result{tc.ConnectionState(), err}
	}()
	d := &net.Dialer{Timeout: 10 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", ln.Addr().String(), client)
	if err == nil {
		// Read so the client sees the server's alert, if any, before closing.
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		c.Read(make([]byte, 1))
		c.Close()
	}
	r := <-res
	return r.st, r.err
}

func TestServerVerifiesOptionalClientCert(t *testing.T) {
	dir := t.TempDir()
	srv, err := ServerTLSConfig(dir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	if srv.ClientAuth != tls.VerifyClientCertIfGiven || srv.ClientCAs == nil {
		t.Fatalf("ClientAuth = %v, ClientCAs = %v", srv.ClientAuth, srv.ClientCAs)
	}
	caPEM, _ := EnsureCA(dir)

	// No client certificate (a runner): accepted, nothing verified.
	cli, _ := ClientTLSConfig(caPEM, "127.0.0.1", nil)
	st, err := serverHandshake(t, srv, cli)
	if err != nil || len(st.VerifiedChains) != 0 {
		t.Fatalf("without client certificate: err=%v chains=%d", err, len(st.VerifiedChains))
	}

	// An operator certificate: verified, CN visible to the server.
	oc, err := IssueOperatorCert(dir, "alice", RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := LoadOperatorCert(oc.CertFile, oc.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	cli, _ = ClientTLSConfig(caPEM, "127.0.0.1", &cert)
	st, err = serverHandshake(t, srv, cli)
	if err != nil || len(st.VerifiedChains) == 0 || st.VerifiedChains[0][0].Subject.CommonName != "alice" {
		t.Fatalf("with operator certificate: err=%v chains=%v", err, st.VerifiedChains)
	}

	// An operator certificate of another CA: the handshake fails.
	other, err := IssueOperatorCert(t.TempDir(), "mallory", RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	foreign, _ := LoadOperatorCert(other.CertFile, other.KeyFile)
	cli, _ = ClientTLSConfig(caPEM, "127.0.0.1", &foreign)
	if _, err := serverHandshake(t, srv, cli); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("with a foreign CA's certificate: server err = %v, want unknown authority", err)
	}
}

func TestOperatorRoles(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	oc, err := issueOperatorCert(dir, "carol", RoleViewer, now)
	if err != nil {
		t.Fatal(err)
	}
	c, err := LoadOperatorCert(oc.CertFile, oc.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := CertRole(c.Leaf); err != nil || r != RoleViewer {
		t.Fatalf("role of a viewer certificate: %q %v", r, err)
	}
	// Asking for another role re-issues: the stored certificate says viewer.
	oc2, err := issueOperatorCert(dir, "carol", RoleAdmin, now)
	if err != nil || !oc2.Issued {
		t.Fatalf("role change not re-issued: %+v %v", oc2, err)
	}
	c2, _ := LoadOperatorCert(oc2.CertFile, oc2.KeyFile)
	if r, _ := CertRole(c2.Leaf); r != RoleAdmin {
		t.Fatalf("role after re-issue: %q", r)
	}
	if _, err := issueOperatorCert(dir, "carol", Role("root"), now); err == nil {
		t.Fatal("unknown role accepted")
	}
	// A certificate without a role OU (issued before roles) is a viewer; two roles are refused.
	if r, err := CertRole(&x509.Certificate{}); err != nil || r != RoleViewer {
		t.Fatalf("no role OU: %q %v", r, err)
	}
	two := &x509.Certificate{}
	two.Subject.OrganizationalUnit = []string{OperatorOU, RoleOUPrefix + "viewer", RoleOUPrefix + "admin"}
	if _, err := CertRole(two); err == nil {
		t.Fatal("two roles accepted")
	}
	for _, c := range []struct {
		r, need Role
		ok      bool
	}{{RoleAdmin, RoleOperator, true}, {RoleOperator, RoleOperator, true}, {RoleOperator, RoleAdmin, false}, {RoleViewer, RoleOperator, false}, {RoleViewer, RoleViewer, true}, {"", RoleViewer, false}, {RoleAdmin, "", false}} {
		if got := c.r.Allows(c.need); got != c.ok {
			t.Errorf("%q.Allows(%q) = %v, want %v", c.r, c.need, got, c.ok)
		}
	}
}
