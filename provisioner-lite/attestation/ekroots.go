package attestation

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cure-oss/cure/tools/tpm/attest"
	"github.com/google/go-tpm/tpm2"
)

// EKRoots are the TPM manufacturers' root certificates a site trusts
// (--ek-roots): an EK certificate must chain to one of them, through the
// intermediates the boot presents, and certify the very EK the
// credential exchange proved.
type EKRoots struct {
	pool  *x509.CertPool
	Dir   string
	Count int
}

// LoadEKRoots reads every PEM file of dir (*.pem, *.crt, *.cer): each
// CERTIFICATE block is a root. A directory without one is an error: a
// site that configured roots and has none would refuse every EK.
func LoadEKRoots(dir string) (*EKRoots, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("EK roots: %w", err)
	}
	r := &EKRoots{pool: x509.NewCertPool(), Dir: dir}
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.IsDir() || !slices.Contains([]string{".pem", ".crt", ".cer"}, ext) {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("EK roots: %w", err)
		}
		n, err := r.add(raw)
		if err != nil {
			return nil, fmt.Errorf("EK roots: %s: %w", filepath.Join(dir, e.Name()), err)
		}
		if n == 0 {
			return nil, fmt.Errorf("EK roots: %s holds no PEM CERTIFICATE", filepath.Join(dir, e.Name()))
		}
	}
	if r.Count == 0 {
		return nil, fmt.Errorf("EK roots: no certificate in %s (want PEM files: *.pem, *.crt, *.cer)", dir)
	}
	return r, nil
}

func (r *EKRoots) add(raw []byte) (int, error) {
	n := 0
	for {
		var b *pem.Block
		b, raw = pem.Decode(raw)
		if b == nil {
			return n, nil
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return n, err
		}
		r.pool.AddCert(c)
		r.Count++
		n++
	}
}

// Verify checks that cert (DER) chains to a root through chain and that
// its public key is the EK ekPub (TPMT_PUBLIC). The error says which.
func (r *EKRoots) Verify(ekPub, cert []byte, chain [][]byte, now time.Time) error {
	if len(cert) == 0 {
		return errors.New("the boot presented no EK certificate (the TPM's NV holds none)")
	}
	c, err := x509.ParseCertificate(cert)
	if err != nil {
		return fmt.Errorf("EK certificate unreadable: %w", err)
	}
	inter := x509.NewCertPool()
	for i, der := range chain {
		ic, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("intermediate certificate %d unreadable: %w", i, err)
		}
		inter.AddCert(ic)
	}
	// TCG EK certificates carry the EK certificate purpose (2.23.133.8.1),
	// not a Go-known one, and often mark their SAN (the TPM's make and
	// model) critical: the chain is what is checked here.
	_, err = c.Verify(x509.VerifyOptions{Roots: r.pool, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		return fmt.Errorf("EK certificate (subject %q, issuer %q, serial %s) does not chain to an EK root of %s: %w", c.Subject, c.Issuer, c.SerialNumber, r.Dir, err)
	}
	pub, err := ekKey(ekPub)
	if err != nil {
		return err
	}
	eq, ok := c.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !eq.Equal(pub) {
		fp, _ := attest.EKFingerprint(ekPub)
		return fmt.Errorf("the EK certificate (subject %q, serial %s) certifies another key than the TPM's EK %s", c.Subject, c.SerialNumber, fp)
	}
	return nil
}

func ekKey(ekPub []byte) (crypto.PublicKey, error) {
	ek, err := attest.PublicKey(ekPub)
	if err != nil {
		return nil, fmt.Errorf("endorsement key: %w", err)
	}
	pub, err := tpm2.Pub(*ek)
	if err != nil {
		return nil, fmt.Errorf("endorsement key: %w", err)
	}
	return pub, nil
}
