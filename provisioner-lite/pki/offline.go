package pki

import (
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Offline keys (docs/KEYS.md): the Secure Boot signing key and the boot
// CA's key can live on a separate host. The coordinator's pki dir then holds
// secureboot.pem, boot-ca.pem (+ .esl) and a listener certificate and key
// the boot CA issued there (boot-tls.pem, boot-tls-key.pem), all written by
// OfflineExport.

// loadRSACert reads the RSA certificate at path; isCA also wants a CA
// that may sign certificates.
func loadRSACert(path string, isCA bool) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	c, err := parseCert(path, b)
	if err != nil {
		return nil, err
	}
	if _, ok := c.PublicKey.(*rsa.PublicKey); !ok {
		return nil, fmt.Errorf("pki: %s: key is %s, want RSA (UEFI Secure Boot and EDK2's TLS take only RSA)", path, c.PublicKeyAlgorithm)
	}
	if isCA && (!c.IsCA || c.KeyUsage&x509.KeyUsageCertSign == 0) {
		return nil, fmt.Errorf("pki: %s: certificate %q is not a CA (IsCA=%v)", path, c.Subject.CommonName, c.IsCA)
	}
	return c, nil
}

// loadBootListener loads the offline-issued listener certificate in dir
// and checks it: both files, an RSA key matching the certificate, issued
// by boot-ca.pem for server authentication, valid at now, covering each of
// mustCover. Every refusal names the file and what is wrong.
func loadBootListener(dir string, mustCover []string, now time.Time) (BootListener, error) {
	certPath, keyPath := filepath.Join(dir, BootTLSCertFile), filepath.Join(dir, BootTLSKeyFile)
	switch {
	case !exists(keyPath):
		return BootListener{}, fmt.Errorf("pki: listener certificate %s has no key: %s does not exist; copy both from the key host (provisioner-lite pki offline writes them together)", certPath, keyPath)
	case !exists(certPath):
		return BootListener{}, fmt.Errorf("pki: listener key %s has no certificate: %s does not exist; copy both from the key host (provisioner-lite pki offline writes them together)", keyPath, certPath)
	}
	caPath := filepath.Join(dir, BootCACertFile)
	if !exists(caPath) {
		return BootListener{}, fmt.Errorf("pki: listener certificate %s: the boot CA %s it must chain to does not exist; copy it from the key host", certPath, caPath)
	}
	ca, err := loadRSACert(caPath, true)
	if err != nil {
		return BootListener{}, err
	}
	key, leaf, err := loadRSA(keyPath, certPath)
	if err != nil {
		return BootListener{}, err
	}
	if err := checkListenerLeaf(certPath, caPath, leaf, ca, mustCover, now); err != nil {
		return BootListener{}, err
	}
	cert := tlsCertificate(leaf, key)
	return BootListener{Cert: cert, Offline: true, File: certPath, NotAfter: leaf.NotAfter}, nil
}

// checkListenerLeaf is what firmware will check of the listener
// certificate, checked first so the coordinator refuses to start instead
// of every HTTPS boot failing.
func checkListenerLeaf(certPath, caPath string, leaf, ca *x509.Certificate, mustCover []string, now time.Time) error {
	if now.Before(leaf.NotBefore) {
		return fmt.Errorf("pki: listener certificate %s is not valid until %s (now %s): check this host's clock or reissue it", certPath, leaf.NotBefore.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if now.After(leaf.NotAfter) {
		return fmt.Errorf("pki: listener certificate %s expired %s: reissue it on the key host (provisioner-lite pki offline --host ...)", certPath, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("pki: listener certificate %s (issuer %q) does not chain to the boot CA %s (%q) the nodes' firmware trusts: %w",
			certPath, leaf.Issuer.CommonName, caPath, ca.Subject.CommonName, err)
	}
	var missing []string
	for _, h := range mustCover {
		if leaf.VerifyHostname(h) != nil {
			missing = append(missing, h)
		}
	}
	if len(missing) > 0 {
		var has []string
		has = append(has, leaf.DNSNames...)
		for _, ip := range leaf.IPAddresses {
			has = append(has, ip.String())
		}
		return fmt.Errorf("pki: listener certificate %s does not cover %s (what firmware is given, --advertise); it names %s: reissue it with --host",
			certPath, strings.Join(missing, ", "), strings.Join(has, ", "))
	}
	return nil
}

// OfflineResult is what OfflineExport made and wrote.
type OfflineResult struct {
	Files    []string  // written into the export directory
	Listener string    // the listener certificate issued, "" without hosts
	NotAfter time.Time // its expiry
}

// OfflineExport runs on the key host. In keysDir it creates the Secure
// Boot key and the boot CA if absent (refusing half a pair); with hosts it
// issues a listener certificate for them, valid for validity; and it writes
// into outDir what the coordinator's pki dir needs: the certificates, the
// boot CA's signature list and the listener's certificate and key, never
// the Secure Boot or boot CA key.
func OfflineExport(keysDir, outDir string, hosts []string, validity time.Duration, now time.Time) (OfflineResult, error) {
	var res OfflineResult
	ka, err1 := filepath.Abs(keysDir)
	oa, err2 := filepath.Abs(outDir)
	if err := errors.Join(err1, err2); err != nil {
		return res, fmt.Errorf("pki: %w", err)
	}
	if ka == oa {
		return res, fmt.Errorf("pki: the export directory %s is the keys directory: it must hold no private key but the listener's", outDir)
	}
	if validity <= 0 {
		return res, fmt.Errorf("pki: listener validity %v: want a positive duration", validity)
	}
	if err := os.MkdirAll(keysDir, 0o700); err != nil {
		return res, fmt.Errorf("pki: %w", err)
	}
	if _, _, err := EnsureSecureBootKey(keysDir); err != nil {
		return res, err
	}
	caKey, caCert, err := ensureBootCAKey(keysDir)
	if err != nil {
		return res, err
	}
	if err := os.MkdirAll(outDir, 0o700); err != nil {
		return res, fmt.Errorf("pki: %w", err)
	}
	for _, f := range []string{SecureBootCertFile, BootCACertFile, BootCAESLFile} {
		b, err := os.ReadFile(filepath.Join(keysDir, f))
		if err != nil {
			return res, fmt.Errorf("pki: %w", err)
		}
		if err := writeAtomic(filepath.Join(outDir, f), b, 0o644); err != nil {
			return res, err
		}
		res.Files = append(res.Files, filepath.Join(outDir, f))
	}
	if len(hosts) == 0 {
		return res, nil
	}
	cert, err := issueBootTLS(caKey, caCert, hosts, now, validity)
	if err != nil {
		return res, err
	}
	certPath, keyPath := filepath.Join(outDir, BootTLSCertFile), filepath.Join(outDir, BootTLSKeyFile)
	if err := writeListener(cert.Leaf.Raw, cert.PrivateKey.(*rsa.PrivateKey), certPath, keyPath); err != nil {
		return res, err
	}
	res.Files = append(res.Files, certPath, keyPath)
	res.Listener, res.NotAfter = certPath, cert.Leaf.NotAfter
	return res, nil
}

// ensureBootCAKey is the boot CA with its key, created if neither file
// exists: on the key host the key is needed, so a certificate alone is
// refused (EnsureBootCA would accept it as offline).
func ensureBootCAKey(dir string) (*rsa.PrivateKey, *x509.Certificate, error) {
	certPath, keyPath := filepath.Join(dir, BootCACertFile), filepath.Join(dir, BootCAKeyFile)
	if exists(certPath) && !exists(keyPath) {
		return nil, nil, fmt.Errorf("pki: boot CA %s has no key: %s does not exist; this is the key host's directory, restore the key or remove both to create a new CA (and enrol it again)", certPath, keyPath)
	}
	if _, err := EnsureBootCA(dir); err != nil {
		return nil, nil, err
	}
	return loadRSA(keyPath, certPath)
}

func tlsCertificate(leaf *x509.Certificate, key *rsa.PrivateKey) tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
}

// writeListener writes the listener's key (0600) and then its
// certificate: a crash between them leaves a key without a certificate,
// which loadBootListener refuses, naming it.
func writeListener(der []byte, key *rsa.PrivateKey, certPath, keyPath string) error {
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("pki: encode listener key: %w", err)
	}
	if err := writeAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return err
	}
	return writeAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}
