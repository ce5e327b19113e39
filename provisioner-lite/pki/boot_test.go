package pki

import (
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The Secure Boot key and the boot CA are RSA, made once, refused when half
// missing; the boot TLS certificate chains to the boot CA; the HTTPS
// listener offers the site certificate first and the boot one to clients
// that cannot take ECDSA.
func TestBootKeys(t *testing.T) {
	dir := t.TempDir()
	key, cert, err := EnsureSecureBootKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	k1, _ := os.ReadFile(key)
	if _, _, err := EnsureSecureBootKey(dir); err != nil {
		t.Fatal(err)
	}
	if k2, _ := os.ReadFile(key); string(k1) != string(k2) {
		t.Error("EnsureSecureBootKey replaced an existing key")
	}
	rk, c, err := loadRSA(key, cert)
	if err != nil || rk.N.BitLen() != 2048 || c.ExtKeyUsage[0] != x509.ExtKeyUsageCodeSigning {
		t.Errorf("Secure Boot key: %v", err)
	}
	caPEM, err := EnsureBootCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(caPEM)
	esl, _ := os.ReadFile(filepath.Join(dir, BootCAESLFile))
	if len(esl) != 44+len(blk.Bytes) || int(binary.LittleEndian.Uint32(esl[16:])) != len(esl) || string(esl[44:]) != string(blk.Bytes) {
		t.Errorf("boot-ca.esl is not the CA as one EFI signature list (%d bytes)", len(esl))
	}
	leaf, err := BootTLSCert(dir, []string{"10.0.2.2"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := leaf.PrivateKey.(*rsa.PrivateKey); !ok {
		t.Error("boot TLS key is not RSA")
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "10.0.2.2"}); err != nil {
		t.Errorf("boot TLS certificate does not chain to the boot CA: %v", err)
	}
	cfg, _, err := HTTPSTLSConfig(dir, []string{"10.0.2.2"}, []string{"10.0.2.2"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Certificates) != 2 {
		t.Fatalf("%d certificates", len(cfg.Certificates))
	}
	// A client offering only what EDK2 offers (TLS 1.2, static RSA key
	// exchange) gets the boot CA's certificate; a TLS 1.3 client the site's.
	for _, c := range []struct {
		name   string
		client *tls.Config
		want   string
	}{
		{"EDK2-like", &tls.Config{RootCAs: pool, MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_RSA_WITH_AES_128_GCM_SHA256}, ServerName: "10.0.2.2"}, "CURE provisioner-lite boot CA"},
		{"TLS 1.3", &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}, "CURE provisioner-lite CA"},
	} {
		a, b := net.Pipe()
		srv := tls.Server(a, cfg)
		go func() { _ = srv.Handshake(); srv.Close() }()
		cl := tls.Client(b, c.client)
		if err := cl.Handshake(); err != nil {
			t.Errorf("%s handshake: %v", c.name, err)
			continue
		}
		if got := cl.ConnectionState().PeerCertificates[0].Issuer.CommonName; got != c.want {
			t.Errorf("%s client got a certificate issued by %q, want %q", c.name, got, c.want)
		}
		cl.Close()
	}
	// A key without its certificate is refused, naming the files; a
	// certificate without its key is an offline CA, which issues nothing
	// here: the listener then needs an offline-issued certificate.
	caCert, _ := os.ReadFile(filepath.Join(dir, BootCACertFile))
	if err := os.Remove(filepath.Join(dir, BootCACertFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureBootCA(dir); err == nil || !strings.Contains(err.Error(), BootCACertFile) {
		t.Errorf("a boot CA key without its certificate: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, BootCACertFile), caCert, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, BootCAKeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureBootCA(dir); err != nil {
		t.Errorf("an offline boot CA (certificate only): %v", err)
	}
	if _, err := BootTLSCert(dir, []string{"10.0.2.2"}); err == nil || !strings.Contains(err.Error(), BootCAKeyFile) || !strings.Contains(err.Error(), BootTLSCertFile) {
		t.Errorf("an offline boot CA without a listener certificate: %v", err)
	}
	if exists(filepath.Join(dir, BootCAKeyFile)) {
		t.Error("a boot CA key was made beside a certificate without one")
	}
}
