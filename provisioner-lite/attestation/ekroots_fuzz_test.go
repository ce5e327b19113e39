package attestation

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// testEKRoots is a root CA in a temp dir and a leaf it signed (DER).
func testEKRoots(t testing.TB) (*EKRoots, []byte) {
	t.Helper()
	rootKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	root := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test EK root"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	rootDER, err := x509.CreateCertificate(rand.Reader, root, root, &rootKey.PublicKey, rootKey)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "root.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rootDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := LoadEKRoots(dir)
	if err != nil {
		t.Fatal(err)
	}
	rootCert, _ := x509.ParseCertificate(rootDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "EK"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, rootCert, &leafKey.PublicKey, rootKey)
	if err != nil {
		t.Fatal(err)
	}
	return r, leafDER
}

// FuzzEKRootsVerify feeds Verify what a hostile boot can send: an EK
// public area, a certificate and intermediates, all chosen bytes. It must
// never panic and never accept: no fuzzed key is the one the test root
// certified (an acceptance would need the root's private key).
func FuzzEKRootsVerify(f *testing.F) {
	r, leaf := testEKRoots(f)
	f.Add([]byte{0, 1}, leaf, []byte{})
	f.Add([]byte{}, []byte{0x30, 0x82, 0xff, 0xff}, leaf)
	f.Add([]byte{0x00, 0x23, 0x00, 0x0b}, leaf[:len(leaf)/2], leaf)
	f.Fuzz(func(t *testing.T, ekPub, cert, inter []byte) {
		var chain [][]byte
		if len(inter) > 0 {
			chain = [][]byte{inter}
		}
		if err := r.Verify(ekPub, cert, chain, time.Now()); err == nil {
			t.Fatalf("accepted EK %x with certificate %x", ekPub, cert)
		}
	})
}

// TestEKCertsBounded: a boot's EK certificate and intermediates are
// bounded before anything is kept of them.
func TestEKCertsBounded(t *testing.T) {
	big := make([]byte, MaxCertDER+1)
	for _, b := range []*curev1.AttestBegin{{EkCertificate: big}, {EkChain: [][]byte{{1}, big}}} {
		if _, _, err := (&Challenges{}).Issue(t.Context(), "h", "b", b, nil, time.Now()); err == nil {
			t.Errorf("a %d-byte certificate was taken", len(big))
		}
	}
}
