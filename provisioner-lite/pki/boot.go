package pki

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Verified network boot (docs/SECURITY.md): the site's Secure Boot signing
// key, which signs the CURE unified kernel image, and the boot CA, which
// issues the certificate of the HTTPS listener UEFI HTTP boot fetches the
// image from. Both are RSA: UEFI Secure Boot verifies RSA signatures, and
// EDK2's TLS (OVMF 2022.11, measured) completes no handshake with an
// ECDSA certificate, so the site CA (ECDSA) cannot serve firmware.
const (
	SecureBootCertFile = "secureboot.pem"
	SecureBootKeyFile  = "secureboot-key.pem"
	BootCACertFile     = "boot-ca.pem"
	BootCAKeyFile      = "boot-ca-key.pem"
	// BootCAESLFile is the boot CA as an EFI_SIGNATURE_LIST, the form
	// firmware setup and some BMCs enrol for HTTPS boot (EDK2's
	// TlsCaCertificate, OVMF's fw_cfg etc/edk2/https/cacerts).
	BootCAESLFile = "boot-ca.esl"
)

const (
	// BootTLSCertFile and BootTLSKeyFile are the HTTPS boot listener's
	// certificate and key when the boot CA's key is kept offline
	// (docs/KEYS.md): issued on the key host by `provisioner-lite pki
	// offline`, copied here, loaded and checked at every start.
	BootTLSCertFile = "boot-tls.pem"
	BootTLSKeyFile  = "boot-tls-key.pem"
)

const (
	rsaBits = 2048
	// The Secure Boot certificate is enrolled in the nodes' db and UEFI
	// checks no dates on image signatures: its life is the site's, ended
	// by dbx, not by expiry.
	secureBootValidity = 10 * 365 * 24 * time.Hour
	// The boot CA is enrolled in each node's firmware by hand or through
	// its BMC: long, but a rotation per hardware generation, not a decade.
	bootCAValidity = 5 * 365 * 24 * time.Hour
	// ListenerValidity is the default life of an offline-issued listener
	// certificate: short, because nothing revokes it (docs/KEYS.md).
	ListenerValidity = 90 * 24 * time.Hour
	// ListenerRenewWarning: a listener certificate expiring within this is
	// warned about at start.
	ListenerRenewWarning = 30 * 24 * time.Hour
)

// EnsureSecureBootKey returns the paths of the site's Secure Boot signing
// key and certificate in dir, creating them (RSA 2048, self-signed, 10
// years) if neither exists. A site that has its own db key puts its key and
// certificate there instead.
func EnsureSecureBootKey(dir string) (keyPath, certPath string, err error) {
	keyPath, certPath = filepath.Join(dir, SecureBootKeyFile), filepath.Join(dir, SecureBootCertFile)
	_, _, err = ensureRSASelfSigned(dir, keyPath, certPath, "Secure Boot signing key", pkix.Name{CommonName: "CURE site Secure Boot signing", Organization: []string{"CURE"}},
		false, secureBootValidity, time.Now())
	return keyPath, certPath, err
}

// EnsureSecureBootCert is what the coordinator's state dir needs of the
// Secure Boot key: its certificate. A certificate alone means the key is
// kept offline (offline true; cure-build signs on the key host); a key
// without its certificate is refused; neither creates both, as
// EnsureSecureBootKey.
func EnsureSecureBootCert(dir string) (certPath string, offline bool, err error) {
	keyPath, certPath := filepath.Join(dir, SecureBootKeyFile), filepath.Join(dir, SecureBootCertFile)
	if exists(certPath) && !exists(keyPath) {
		if _, err := loadRSACert(certPath, false); err != nil {
			return "", false, err
		}
		return certPath, true, nil
	}
	_, certPath, err = EnsureSecureBootKey(dir)
	return certPath, false, err
}

// EnsureBootCA returns the PEM of the boot CA in dir and writes its EFI
// signature list beside it. A certificate without its key is an offline
// CA and is accepted (the listener certificate must then be issued
// offline, see BootListenerCert); a key without its certificate is
// refused; neither creates both (RSA 2048, 5 years).
func EnsureBootCA(dir string) ([]byte, error) {
	certPath, keyPath := filepath.Join(dir, BootCACertFile), filepath.Join(dir, BootCAKeyFile)
	var certPEM []byte
	if exists(certPath) && !exists(keyPath) {
		if _, err := loadRSACert(certPath, true); err != nil {
			return nil, err
		}
		b, err := os.ReadFile(certPath)
		if err != nil {
			return nil, fmt.Errorf("pki: %w", err)
		}
		certPEM = b
	} else {
		_, b, err := ensureRSASelfSigned(dir, keyPath, certPath, "boot CA",
			pkix.Name{CommonName: "CURE provisioner-lite boot CA", Organization: []string{"CURE"}}, true, bootCAValidity, time.Now())
		if err != nil {
			return nil, err
		}
		certPEM = b
	}
	blk, _ := pem.Decode(certPEM)
	esl := signatureList(blk.Bytes)
	if err := writeAtomic(filepath.Join(dir, BootCAESLFile), esl, 0o644); err != nil {
		return nil, err
	}
	return certPEM, nil
}

// signatureList is der as a one-entry EFI_SIGNATURE_LIST of
// EFI_CERT_X509_GUID (tools/uefi has the general encoder and its tests;
// pki keeps to the standard library).
func signatureList(der []byte) []byte {
	x509GUID := []byte{0xa1, 0x59, 0xc0, 0xa5, 0xe4, 0x94, 0xa7, 0x4a, 0x87, 0xb5, 0xab, 0x15, 0x5c, 0x2b, 0xf0, 0x72}
	owner := []byte{0x61, 0xdf, 0xe4, 0x8b, 0xca, 0x93, 0xd2, 0x11, 0xaa, 0x0d, 0x00, 0xe0, 0x98, 0x03, 0x2b, 0x8c} // EFI_GLOBAL_VARIABLE
	sigSize := 16 + len(der)
	le := func(v int) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }
	out := append([]byte(nil), x509GUID...)
	out = append(out, le(28+sigSize)...)
	out = append(out, le(0)...)
	out = append(out, le(sigSize)...)
	out = append(out, owner...)
	return append(out, der...)
}

// BootListener is the HTTPS boot listener's certificate and where it came
// from, for the start's log.
type BootListener struct {
	Cert     tls.Certificate
	Offline  bool   // loaded from File, issued on the key host
	File     string // the certificate file when Offline
	NotAfter time.Time
}

// BootTLSCert is BootListenerCert's certificate for hosts, now.
func BootTLSCert(dir string, hosts []string) (tls.Certificate, error) {
	l, err := BootListenerCert(dir, hosts, hosts, time.Now())
	return l.Cert, err
}

// BootListenerCert is the RSA certificate of the HTTPS boot listener.
// With boot-tls.pem (or its key) in dir, the one issued offline: loaded and
// checked against boot-ca.pem, mustCover and now, refused naming the file
// when it does not hold (docs/KEYS.md). Otherwise one issued in memory for
// hosts by the boot CA's key (the CA is created if absent; firmware pins
// the CA, so a fresh leaf at every start costs nothing). A boot CA without
// its key and no listener certificate is refused: a new key pair would fork
// the site's trust.
func BootListenerCert(dir string, hosts, mustCover []string, now time.Time) (BootListener, error) {
	certPath, keyPath := filepath.Join(dir, BootTLSCertFile), filepath.Join(dir, BootTLSKeyFile)
	if exists(certPath) || exists(keyPath) {
		return loadBootListener(dir, mustCover, now)
	}
	caCertPath, caKeyPath := filepath.Join(dir, BootCACertFile), filepath.Join(dir, BootCAKeyFile)
	if exists(caCertPath) && !exists(caKeyPath) {
		return BootListener{}, fmt.Errorf("pki: the boot CA %s has no key here (%s: kept offline?) and there is no listener certificate %s: "+
			"issue one on the key host (provisioner-lite pki offline --host ...) and copy %s and %s to %s", caCertPath, caKeyPath, certPath, BootTLSCertFile, BootTLSKeyFile, dir)
	}
	if _, err := EnsureBootCA(dir); err != nil {
		return BootListener{}, err
	}
	caKey, caCert, err := loadRSA(caKeyPath, caCertPath)
	if err != nil {
		return BootListener{}, err
	}
	cert, err := issueBootTLS(caKey, caCert, hosts, now, serverValidity)
	if err != nil {
		return BootListener{}, err
	}
	return BootListener{Cert: cert, NotAfter: cert.Leaf.NotAfter}, nil
}

// issueBootTLS signs a fresh RSA listener key for hosts with the boot CA,
// valid for validity (at most until the CA expires).
func issueBootTLS(caKey *rsa.PrivateKey, caCert *x509.Certificate, hosts []string, now time.Time, validity time.Duration) (tls.Certificate, error) {
	dns, ips, err := normalizeHosts(hosts)
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := rsa.GenerateKey(rand.Reader, rsaBits)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: generate boot TLS key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return tls.Certificate{}, err
	}
	cn := hosts[0]
	if len(dns) > 0 {
		cn = dns[0]
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn, Organization: []string{"CURE"}},
		NotBefore: now.Add(-backdate), NotAfter: now.Add(validity), KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, DNSNames: dns, IPAddresses: ips}
	if tmpl.NotAfter.After(caCert.NotAfter) {
		tmpl.NotAfter = caCert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: sign boot TLS certificate: %w", err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// HTTPSTLSConfig is the HTTPS boot listener's TLS: the site server
// certificate for hosts (ECDSA, the CA baked in the image: what the runner
// pins) and the boot CA's RSA certificate (what firmware verifies; an
// offline-issued one must cover firmwareHosts). Go picks per client: a
// client that offers no ECDSA (EDK2's TLS) gets the RSA one. TLS 1.2 is
// allowed: EDK2 speaks no TLS 1.3.
func HTTPSTLSConfig(dir string, hosts, firmwareHosts []string, now time.Time) (*tls.Config, BootListener, error) {
	site, err := IssueServerCert(dir, hosts)
	if err != nil {
		return nil, BootListener{}, err
	}
	boot, err := BootListenerCert(dir, hosts, firmwareHosts, now)
	if err != nil {
		return nil, BootListener{}, err
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{site, boot.Cert}, MinVersion: tls.VersionTLS12, CipherSuites: FirmwareCipherSuites()}
	return cfg, boot, nil
}

// FirmwareCipherSuites are Go's default TLS 1.2 suites plus RSA key
// exchange with AES-GCM: EDK2's TLS (OVMF 2022.11, measured) offers only
// DHE_RSA, which Go does not implement, and static RSA suites. Those lack
// forward secrecy; the firmware fetches only the public signed image over
// them (its integrity is Secure Boot's signature as well as TLS), and the
// runner, which fetches the boot token, negotiates TLS 1.3 as before.
func FirmwareCipherSuites() []uint16 {
	var out []uint16
	for _, c := range tls.CipherSuites() {
		out = append(out, c.ID)
	}
	return append(out, tls.TLS_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_RSA_WITH_AES_256_GCM_SHA384)
}

func loadRSA(keyPath, certPath string) (*rsa.PrivateKey, *x509.Certificate, error) {
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %w", err)
	}
	blk, _ := pem.Decode(kb)
	if blk == nil {
		return nil, nil, fmt.Errorf("pki: %s: no PEM block", keyPath)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %s: %w", keyPath, err)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("pki: %s: not an RSA key", keyPath)
	}
	cb, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: %w", err)
	}
	c, err := parseCert(certPath, cb)
	if err != nil {
		return nil, nil, err
	}
	if !publicKeyEqual(c.PublicKey, &rk.PublicKey) {
		return nil, nil, fmt.Errorf("pki: %s does not match the key in %s", certPath, keyPath)
	}
	return rk, c, nil
}

func publicKeyEqual(a crypto.PublicKey, b *rsa.PublicKey) bool {
	ra, ok := a.(*rsa.PublicKey)
	return ok && ra.Equal(b)
}

// ensureRSASelfSigned loads or creates an RSA key with a self-signed
// certificate; one file without the other is refused (replacing a key
// would orphan what trusts it).
func ensureRSASelfSigned(dir, keyPath, certPath, what string, subject pkix.Name, isCA bool, validity time.Duration, now time.Time) (*rsa.PrivateKey, []byte, error) {
	certOK, keyOK := exists(certPath), exists(keyPath)
	switch {
	case certOK && keyOK:
		k, _, err := loadRSA(keyPath, certPath)
		if err != nil {
			return nil, nil, err
		}
		b, err := os.ReadFile(certPath)
		return k, b, err
	case certOK != keyOK:
		present, missing := certPath, keyPath
		if keyOK {
			present, missing = keyPath, certPath
		}
		return nil, nil, fmt.Errorf("pki: %s in %s is incomplete: %s exists but %s does not; restore it or remove both to create a new one", what, dir, present, missing)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("pki: %w", err)
	}
	key, err := rsa.GenerateKey(rand.Reader, rsaBits)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: generate %s: %w", what, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: subject, NotBefore: now.Add(-backdate), NotAfter: now.Add(validity),
		KeyUsage: x509.KeyUsageDigitalSignature}
	if isCA {
		tmpl.KeyUsage |= x509.KeyUsageCertSign | x509.KeyUsageCRLSign
		tmpl.BasicConstraintsValid, tmpl.IsCA, tmpl.MaxPathLenZero = true, true, true
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("pki: self-sign %s: %w", what, err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := writeAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return nil, nil, err
	}
	if err := writeAtomic(certPath, certPEM, 0o644); err != nil {
		return nil, nil, err
	}
	return key, certPEM, nil
}
