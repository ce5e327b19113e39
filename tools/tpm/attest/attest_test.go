package attest_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/tools/tpm/attest"
	"github.com/cure-oss/cure/tools/tpm/eventlog"
	"github.com/cure-oss/cure/tools/tpm/swtpmtest"
)

var bootPCRs = []uint32{0, 1, 2, 3, 4, 7}

// TestAttestSWTPM runs the whole exchange against a real swtpm: keys,
// challenge, activation, quote, verification, event log replay; then the
// forgeries a verifier must refuse.
func TestAttestSWTPM(t *testing.T) {
	sw := swtpmtest.Start(t, "")
	boot := sw.Measure()
	app := sha256.Sum256([]byte("cure.efi"))
	boot.Firmware("fw-1.0", app[:])
	tpm := sw.Open()
	keys, err := attest.NewKeys(tpm)
	if err != nil {
		t.Fatal(err)
	}
	defer keys.Close()
	ch, err := attest.NewChallenge(keys.EKPublic, keys.AKPublic)
	if err != nil {
		t.Fatal(err)
	}
	got, err := keys.Activate(ch.CredentialBlob, ch.EncryptedSecret)
	if err != nil {
		t.Fatal(err)
	}
	if !ch.SecretMatches(got) {
		t.Fatal("activated secret differs from the challenge's")
	}
	q, err := keys.Quote(ch.Nonce, bootPCRs)
	if err != nil {
		t.Fatal(err)
	}
	if err := attest.VerifyQuote(keys.AKPublic, q, ch.Nonce, bootPCRs); err != nil {
		t.Fatalf("good quote refused: %v", err)
	}
	log, err := eventlog.Parse(boot.Log.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Check(q.PCRs); err != nil {
		t.Fatalf("event log does not replay to the quote: %v", err)
	}
	if d := log.Digests(4, eventlog.EVEFIBootServicesApplication); len(d) != 1 || !bytes.Equal(d[0], app[:]) {
		t.Fatalf("boot application digests %x", d)
	}
	fp, err := attest.EKFingerprint(keys.EKPublic)
	if err != nil || len(fp) != 64 {
		t.Fatalf("EK fingerprint %q, %v", fp, err)
	}

	t.Run("wrong nonce", func(t *testing.T) {
		other, _ := attest.NewChallenge(keys.EKPublic, keys.AKPublic)
		if err := attest.VerifyQuote(keys.AKPublic, q, other.Nonce, bootPCRs); err == nil || !strings.Contains(err.Error(), "nonce") {
			t.Fatalf("quote over another nonce: %v", err)
		}
	})
	t.Run("PCR values changed", func(t *testing.T) {
		forged := *q
		forged.PCRs = map[uint32][]byte{}
		for k, v := range q.PCRs {
			forged.PCRs[k] = v
		}
		forged.PCRs[0] = make([]byte, 32)
		if err := attest.VerifyQuote(keys.AKPublic, &forged, ch.Nonce, bootPCRs); err == nil {
			t.Fatal("changed PCR value accepted")
		}
	})
	t.Run("other PCR selection", func(t *testing.T) {
		if err := attest.VerifyQuote(keys.AKPublic, q, ch.Nonce, []uint32{0, 1}); err == nil {
			t.Fatal("quote over other PCRs accepted")
		}
	})
	t.Run("attest bytes changed", func(t *testing.T) {
		forged := *q
		forged.Attest = bytes.Clone(q.Attest)
		forged.Attest[len(forged.Attest)-1] ^= 1
		if err := attest.VerifyQuote(keys.AKPublic, &forged, ch.Nonce, bootPCRs); err == nil || !strings.Contains(err.Error(), "signature") {
			t.Fatalf("changed quote: %v", err)
		}
	})
	t.Run("another TPM cannot activate", func(t *testing.T) {
		other := swtpmtest.Start(t, "")
		okeys, err := attest.NewKeys(other.Open())
		if err != nil {
			t.Fatal(err)
		}
		defer okeys.Close()
		if bytes.Equal(okeys.EKPublic, keys.EKPublic) {
			t.Fatal("two swtpms with one EK")
		}
		// The other TPM claims this TPM's EK with its own AK: the credential
		// is encrypted to an EK it does not hold.
		c, err := attest.NewChallenge(keys.EKPublic, okeys.AKPublic)
		if err != nil {
			t.Fatal(err)
		}
		if s, err := okeys.Activate(c.CredentialBlob, c.EncryptedSecret); err == nil && c.SecretMatches(s) {
			t.Fatal("another TPM recovered the credential")
		}
		// And this TPM cannot activate a credential made for the other's AK.
		c2, _ := attest.NewChallenge(keys.EKPublic, okeys.AKPublic)
		if s, err := keys.Activate(c2.CredentialBlob, c2.EncryptedSecret); err == nil && c2.SecretMatches(s) {
			t.Fatal("credential for another AK's name activated")
		}
		// Its quote does not verify under this TPM's AK.
		oq, err := okeys.Quote(ch.Nonce, bootPCRs)
		if err != nil {
			t.Fatal(err)
		}
		if err := attest.VerifyQuote(keys.AKPublic, oq, ch.Nonce, bootPCRs); err == nil {
			t.Fatal("another TPM's quote verified under this AK")
		}
	})
	t.Run("not an AK", func(t *testing.T) {
		if _, err := attest.NewChallenge(keys.EKPublic, keys.EKPublic); err == nil {
			t.Fatal("a decryption key accepted as AK")
		}
	})
	t.Run("same EK after restart", func(t *testing.T) {
		keys.Close()
		sw.Restart()
		k2, err := attest.NewKeys(sw.Open())
		if err != nil {
			t.Fatal(err)
		}
		defer k2.Close()
		if !bytes.Equal(k2.EKPublic, keys.EKPublic) {
			t.Fatal("EK changed across a restart on the same state")
		}
		vals, err := attest.ReadPCRs(sw.Open(), []uint32{0})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(vals[0], make([]byte, 32)) {
			t.Fatalf("PCR 0 not reset by the restart: %x", vals[0])
		}
	})
}

// TestWriteEKCert: a certificate written where the profile puts it is the
// one NewKeys reads back, and a second write replaces it.
func TestWriteEKCert(t *testing.T) {
	tp := swtpmtest.Start(t, "").Open()
	k, err := attest.NewKeys(tp)
	if err != nil {
		t.Fatal(err)
	}
	ek := k.EKPublic
	k.Close()
	for _, der := range [][]byte{bytes.Repeat([]byte{0x30}, 1300), []byte("a shorter certificate")} {
		if err := attest.WriteEKCert(tp, ek, der); err != nil {
			t.Fatal(err)
		}
		k, err := attest.NewKeys(tp)
		if err != nil {
			t.Fatal(err)
		}
		got := k.EKCert
		k.Close()
		if !bytes.Equal(got, der) {
			t.Fatalf("read back %d bytes, wrote %d", len(got), len(der))
		}
	}
}

// TestEKChainFromNV: intermediates the manufacturer left in the EK chain
// range are read in index order with the EK certificate, and bytes that
// are no certificate are left out.
func TestEKChainFromNV(t *testing.T) {
	tp := swtpmtest.Start(t, "").Open()
	k, err := attest.NewKeys(tp)
	if err != nil {
		t.Fatal(err)
	}
	ek := k.EKPublic
	k.Close()
	if err := attest.WriteEKCert(tp, ek, []byte("the EK certificate")); err != nil {
		t.Fatal(err)
	}
	var chain [][]byte
	for _, name := range []string{"Intermediate 1", "Intermediate 2"} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		chain = append(chain, der)
	}
	if err := attest.WriteEKChain(tp, chain[0], []byte("not a certificate"), chain[1]); err != nil {
		t.Fatal(err)
	}
	k, err = attest.NewKeys(tp)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if len(k.EKChain) != 2 || !bytes.Equal(k.EKChain[0], chain[0]) || !bytes.Equal(k.EKChain[1], chain[1]) {
		t.Fatalf("EK chain read: %d certificates, want the 2 written, in order", len(k.EKChain))
	}
}
