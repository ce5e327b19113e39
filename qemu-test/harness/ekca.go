package harness

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// ekCA is the test environment's TPM manufacturer: the nodes' swtpm EK
// certificates chain to its root, which the coordinator is given as
// --ek-roots (a SKU requiring attestation enrols no EK on first use
// without it).
type ekCA struct {
	mu   sync.Mutex
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string // the roots directory (--ek-roots)
	n    int64
}

func newEKCA(work string) (*ekCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "CURE QEMU test TPM manufacturer"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(7 * 24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(work, "ek-roots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "test-manufacturer.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, err
	}
	return &ekCA{cert: cert, key: key, dir: dir, n: 1}, nil
}

// certify is an EK certificate for pub, shaped as real ones are (the TCG
// EK certificate purpose, the TPM named in a SAN, empty subject).
func (ca *ekCA) certify(pub crypto.PublicKey) ([]byte, error) {
	ca.mu.Lock()
	ca.n++
	serial := ca.n
	ca.mu.Unlock()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(7 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageKeyAgreement, UnknownExtKeyUsage: []asn1.ObjectIdentifier{{2, 23, 133, 8, 1}}, DNSNames: []string{"swtpm.test"}}
	return x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
}
