package pki

import (
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The key host's export holds the certificates and the listener's key,
// never the Secure Boot or boot CA key; a pki dir made of it serves the
// offline-issued listener certificate; the export refuses to be the keys
// directory.
func TestOfflineExport(t *testing.T) {
	keys, out, now := t.TempDir(), filepath.Join(t.TempDir(), "export"), time.Now()
	res, err := OfflineExport(keys, out, []string{"10.0.2.2", "boot.example"}, 0, now)
	if err == nil {
		t.Fatal("a zero validity was accepted")
	}
	res, err = OfflineExport(keys, out, []string{"10.0.2.2", "boot.example"}, ListenerValidity, now)
	if err != nil {
		t.Fatal(err)
	}
	if d := res.NotAfter.Sub(now); d > ListenerValidity || d < ListenerValidity-time.Second { // x509 keeps whole seconds
		t.Errorf("listener valid for %v, want %v", d, ListenerValidity)
	}
	entries, _ := os.ReadDir(out)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	want := []string{BootCACertFile, BootCAESLFile, BootTLSKeyFile, BootTLSCertFile, SecureBootCertFile}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("export holds %v, want %v", names, want)
	}
	if fi, err := os.Stat(filepath.Join(out, BootTLSKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("listener key mode: %v %v", fi, err)
	}
	for _, f := range []string{SecureBootKeyFile, BootCAKeyFile} {
		if !exists(filepath.Join(keys, f)) {
			t.Errorf("the key host has no %s", f)
		}
	}
	sb1, _ := os.ReadFile(filepath.Join(keys, SecureBootKeyFile))
	l, err := BootListenerCert(out, []string{"10.0.2.2"}, []string{"10.0.2.2", "boot.example"}, now)
	if err != nil || !l.Offline || l.File != filepath.Join(out, BootTLSCertFile) {
		t.Fatalf("the export as a pki dir: %+v, %v", l, err)
	}
	// A second export (the listener's rotation) reuses the keys.
	if _, err := OfflineExport(keys, out, []string{"10.0.2.2"}, 24*time.Hour, now); err != nil {
		t.Fatal(err)
	}
	if sb2, _ := os.ReadFile(filepath.Join(keys, SecureBootKeyFile)); string(sb1) != string(sb2) {
		t.Error("a second export replaced the Secure Boot key")
	}
	if _, err := OfflineExport(keys, keys, nil, ListenerValidity, now); err == nil || !strings.Contains(err.Error(), "keys directory") {
		t.Errorf("export into the keys directory: %v", err)
	}
	// The key host needs the CA's key: a certificate alone is refused there.
	os.Remove(filepath.Join(keys, BootCAKeyFile))
	if _, err := OfflineExport(keys, out, []string{"10.0.2.2"}, ListenerValidity, now); err == nil || !strings.Contains(err.Error(), BootCAKeyFile) {
		t.Errorf("a key host without the boot CA key: %v", err)
	}
	if exists(filepath.Join(keys, BootCAKeyFile)) {
		t.Error("a new boot CA key was made beside the certificate")
	}
}

// An offline-issued listener certificate is refused, naming the file and
// what is wrong: another CA's, expired, not yet valid, not covering the
// advertised address, without its key, or a key without its certificate.
// One expiring soon loads (the coordinator warns).
func TestBootListenerChecks(t *testing.T) {
	keys, other, now := t.TempDir(), t.TempDir(), time.Now()
	good := filepath.Join(t.TempDir(), "good")
	if _, err := OfflineExport(keys, good, []string{"10.0.2.2"}, ListenerValidity, now); err != nil {
		t.Fatal(err)
	}
	if _, err := OfflineExport(other, filepath.Join(t.TempDir(), "x"), nil, ListenerValidity, now); err != nil {
		t.Fatal(err)
	}
	caKey, caCert, err := loadRSA(filepath.Join(keys, BootCAKeyFile), filepath.Join(keys, BootCACertFile))
	if err != nil {
		t.Fatal(err)
	}
	otherKey, otherCert, err := loadRSA(filepath.Join(other, BootCAKeyFile), filepath.Join(other, BootCACertFile))
	if err != nil {
		t.Fatal(err)
	}
	issue := func(key *rsa.PrivateKey, ca *x509.Certificate, hosts []string, at time.Time, validity time.Duration) tls.Certificate {
		c, err := issueBootTLS(key, ca, hosts, at, validity)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cases := []struct {
		name string
		cert tls.Certificate
		drop string // a file removed from the pki dir
		want string // in the error; "" loads
	}{
		{"good", issue(caKey, caCert, []string{"10.0.2.2"}, now, ListenerValidity), "", ""},
		{"expiring soon", issue(caKey, caCert, []string{"10.0.2.2"}, now, 10*24*time.Hour), "", ""},
		{"another CA", issue(otherKey, otherCert, []string{"10.0.2.2"}, now, ListenerValidity), "", "does not chain to the boot CA"},
		{"expired", issue(caKey, caCert, []string{"10.0.2.2"}, now.Add(-100*24*time.Hour), ListenerValidity), "", "expired"},
		{"not yet valid", issue(caKey, caCert, []string{"10.0.2.2"}, now.Add(48*time.Hour), ListenerValidity), "", "not valid until"},
		{"another host", issue(caKey, caCert, []string{"10.0.2.3", "boot.example"}, now, ListenerValidity), "", "does not cover 10.0.2.2"},
		{"no key", issue(caKey, caCert, []string{"10.0.2.2"}, now, ListenerValidity), BootTLSKeyFile, "has no key"},
		{"no certificate", issue(caKey, caCert, []string{"10.0.2.2"}, now, ListenerValidity), BootTLSCertFile, "has no certificate"},
		{"no boot CA", issue(caKey, caCert, []string{"10.0.2.2"}, now, ListenerValidity), BootCACertFile, "does not exist"},
	}
	for _, c := range cases {
		dir := t.TempDir()
		for _, f := range []string{SecureBootCertFile, BootCACertFile, BootCAESLFile} {
			b, _ := os.ReadFile(filepath.Join(good, f))
			os.WriteFile(filepath.Join(dir, f), b, 0o644)
		}
		if err := writeListener(c.cert.Leaf.Raw, c.cert.PrivateKey.(*rsa.PrivateKey), filepath.Join(dir, BootTLSCertFile), filepath.Join(dir, BootTLSKeyFile)); err != nil {
			t.Fatal(err)
		}
		if c.drop != "" {
			os.Remove(filepath.Join(dir, c.drop))
		}
		l, err := BootListenerCert(dir, []string{"10.0.2.2"}, []string{"10.0.2.2"}, now)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want == "" && (!l.Offline || !l.NotAfter.Equal(c.cert.Leaf.NotAfter)):
			t.Errorf("%s: loaded %+v, not the offline certificate", c.name, l)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), dir)):
			t.Errorf("%s: %v, want an error naming a file in %s and %q", c.name, err, dir, c.want)
		}
		for _, f := range []string{BootCAKeyFile, SecureBootKeyFile} {
			if exists(filepath.Join(dir, f)) {
				t.Errorf("%s: %s was made in a pki dir without it", c.name, f)
			}
		}
	}
}

// A Secure Boot certificate without its key is offline (the coordinator
// needs no key); a key without its certificate is refused.
func TestSecureBootCertOffline(t *testing.T) {
	dir := t.TempDir()
	key, cert, err := EnsureSecureBootKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, offline, err := EnsureSecureBootCert(dir); err != nil || offline {
		t.Errorf("key and certificate: offline %v, %v", offline, err)
	}
	certPEM, _ := os.ReadFile(cert)
	os.Remove(key)
	if p, offline, err := EnsureSecureBootCert(dir); err != nil || !offline || p != cert || exists(key) {
		t.Errorf("certificate only: %s offline %v, %v", p, offline, err)
	}
	os.Remove(cert)
	os.WriteFile(key, certPEM, 0o600) // anything: a key file without a certificate
	if _, _, err := EnsureSecureBootCert(dir); err == nil || !strings.Contains(err.Error(), SecureBootCertFile) {
		t.Errorf("key only: %v", err)
	}
}
