package attest

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"slices"

	"github.com/google/go-tpm/tpm2"
)

// Challenge is what the coordinator sends a boot before it believes its
// quote: a fresh nonce to quote over, and a secret made so that only the
// TPM holding the EK can recover it, and only for the AK's name.
type Challenge struct {
	Nonce           []byte
	Secret          []byte // kept by the coordinator, never sent in clear
	CredentialBlob  []byte // TPM2B_ID_OBJECT contents
	EncryptedSecret []byte // TPM2B_ENCRYPTED_SECRET contents
}

// PublicKey parses a marshalled TPMT_PUBLIC.
func PublicKey(raw []byte) (*tpm2.TPMTPublic, error) {
	if len(raw) == 0 || len(raw) > 2048 {
		return nil, fmt.Errorf("public area of %d bytes", len(raw))
	}
	p, err := tpm2.Unmarshal[tpm2.TPMTPublic](raw)
	if err != nil {
		return nil, fmt.Errorf("public area: %w", err)
	}
	return p, nil
}

// CheckAK refuses a key that is not an attestation key: it must be
// restricted, sign only, fixed to its TPM and made inside it. A key that
// could sign any digest could sign a quote the TPM never made.
func CheckAK(ak *tpm2.TPMTPublic) error {
	a := ak.ObjectAttributes
	switch {
	case !a.Restricted || !a.SignEncrypt || a.Decrypt:
		return errors.New("attestation key is not a restricted signing key")
	case !a.FixedTPM || !a.FixedParent || !a.SensitiveDataOrigin:
		return errors.New("attestation key is not fixed to its TPM or was not generated in it")
	case ak.NameAlg != tpm2.TPMAlgSHA256:
		return fmt.Errorf("attestation key's name algorithm is 0x%x, want sha256", uint16(ak.NameAlg))
	case ak.Type != tpm2.TPMAlgECC && ak.Type != tpm2.TPMAlgRSA:
		return fmt.Errorf("attestation key of type 0x%x", uint16(ak.Type))
	}
	return nil
}

// CheckEK refuses an EK that cannot be one: a restricted decryption key
// fixed to its TPM, of a type the challenge can encrypt to.
func CheckEK(ek *tpm2.TPMTPublic) error {
	a := ek.ObjectAttributes
	switch {
	case !a.Restricted || !a.Decrypt || a.SignEncrypt:
		return errors.New("endorsement key is not a restricted decryption key")
	case !a.FixedTPM || !a.FixedParent:
		return errors.New("endorsement key is not fixed to its TPM")
	}
	return nil
}

// NewChallenge checks the keys and makes a challenge to the EK for the AK
// (TPM2_MakeCredential's computation, in software).
func NewChallenge(ekPub, akPub []byte) (*Challenge, error) {
	ek, ak, err := checkKeys(ekPub, akPub)
	if err != nil {
		return nil, err
	}
	name, err := tpm2.ObjectName(ak)
	if err != nil {
		return nil, fmt.Errorf("attestation key name: %w", err)
	}
	key, err := tpm2.ImportEncapsulationKey(ek)
	if err != nil {
		return nil, fmt.Errorf("endorsement key: %w", err)
	}
	c := &Challenge{Nonce: make([]byte, 32), Secret: make([]byte, 32)}
	if _, err := rand.Read(c.Nonce); err != nil {
		return nil, err
	}
	if _, err := rand.Read(c.Secret); err != nil {
		return nil, err
	}
	if c.CredentialBlob, c.EncryptedSecret, err = tpm2.CreateCredential(rand.Reader, key, name.Buffer, c.Secret); err != nil {
		return nil, fmt.Errorf("make credential: %w", err)
	}
	return c, nil
}

// SecretMatches compares an activated secret with the challenge's in
// constant time.
func (c *Challenge) SecretMatches(activated []byte) bool {
	return len(activated) == len(c.Secret) && subtle.ConstantTimeCompare(activated, c.Secret) == 1
}

// EKFingerprint is the sha256 of the EK's SubjectPublicKeyInfo (DER), hex:
// what an operator computes from the TPM's EK certificate
// (openssl x509 -pubkey | openssl pkey -pubin -outform der | sha256sum) to pin it.
func EKFingerprint(ekPub []byte) (string, error) {
	ek, err := PublicKey(ekPub)
	if err != nil {
		return "", err
	}
	pub, err := tpm2.Pub(*ek)
	if err != nil {
		return "", fmt.Errorf("endorsement key: %w", err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("endorsement key: %w", err)
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:]), nil
}

// VerifyQuote checks a quote: signed by the AK, made by a TPM
// (TPM_GENERATED), a quote over exactly pcrs of the sha256 bank, carrying
// nonce, and over the PCR values q.PCRs holds. Only then are q.PCRs the
// TPM's values.
func VerifyQuote(akPub []byte, q *Quote, nonce []byte, pcrs []uint32) error {
	ak, err := PublicKey(akPub)
	if err != nil {
		return fmt.Errorf("attestation key: %w", err)
	}
	if err := CheckAK(ak); err != nil {
		return err
	}
	if len(q.Attest) == 0 || len(q.Attest) > 4096 {
		return fmt.Errorf("quote of %d bytes", len(q.Attest))
	}
	sig, err := tpm2.Unmarshal[tpm2.TPMTSignature](q.Signature)
	if err != nil {
		return fmt.Errorf("quote signature: %w", err)
	}
	if err := verifySignature(ak, q.Attest, sig); err != nil {
		return err
	}
	att, err := tpm2.Unmarshal[tpm2.TPMSAttest](q.Attest)
	if err != nil {
		return fmt.Errorf("quote: %w", err)
	}
	if att.Magic != tpm2.TPMGeneratedValue || att.Type != tpm2.TPMSTAttestQuote {
		return errors.New("quote: not a TPM-generated quote structure")
	}
	if !bytes.Equal(att.ExtraData.Buffer, nonce) {
		return errors.New("quote: its nonce is not the one this boot was given (replayed or forged)")
	}
	info, err := att.Attested.Quote()
	if err != nil {
		return fmt.Errorf("quote: %w", err)
	}
	want := slices.Sorted(slices.Values(pcrs))
	got := selected(info.PCRSelect)
	if !slices.Equal(got, want) || len(info.PCRSelect.PCRSelections) != 1 {
		return fmt.Errorf("quote covers sha256 PCRs %v, want %v", got, want)
	}
	for _, p := range want {
		if len(q.PCRs[p]) != sha256.Size {
			return fmt.Errorf("quote: no sha256 value for PCR %d", p)
		}
	}
	if d := pcrDigest(want, q.PCRs); !bytes.Equal(d, info.PCRDigest.Buffer) {
		return errors.New("quote: the PCR values sent are not the ones the TPM quoted")
	}
	return nil
}

func verifySignature(ak *tpm2.TPMTPublic, msg []byte, sig *tpm2.TPMTSignature) error {
	pub, err := tpm2.Pub(*ak)
	if err != nil {
		return fmt.Errorf("attestation key: %w", err)
	}
	digest := sha256.Sum256(msg)
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		s, err := sig.Signature.ECDSA()
		if err != nil || sig.SigAlg != tpm2.TPMAlgECDSA || s.Hash != tpm2.TPMAlgSHA256 {
			return errors.New("quote signature is not ECDSA with SHA-256")
		}
		r, ss := new(big.Int).SetBytes(s.SignatureR.Buffer), new(big.Int).SetBytes(s.SignatureS.Buffer)
		if !ecdsa.Verify(k, digest[:], r, ss) {
			return errors.New("quote signature does not verify with the attestation key")
		}
	case *rsa.PublicKey:
		s, err := sig.Signature.RSASSA()
		if err != nil || sig.SigAlg != tpm2.TPMAlgRSASSA || s.Hash != tpm2.TPMAlgSHA256 {
			return errors.New("quote signature is not RSASSA with SHA-256")
		}
		if err := rsa.VerifyPKCS1v15(k, crypto.SHA256, digest[:], s.Sig.Buffer); err != nil {
			return errors.New("quote signature does not verify with the attestation key")
		}
	default:
		return fmt.Errorf("attestation key of type %T", pub)
	}
	return nil
}

// CheckKeys parses and checks an EK and an AK as NewChallenge does,
// without making a challenge: a coordinator refuses keys that are not an
// EK and an AK before it spends anything on the request.
func CheckKeys(ekPub, akPub []byte) error {
	_, _, err := checkKeys(ekPub, akPub)
	return err
}

func checkKeys(ekPub, akPub []byte) (ek, ak *tpm2.TPMTPublic, err error) {
	if ek, err = PublicKey(ekPub); err != nil {
		return nil, nil, fmt.Errorf("endorsement key: %w", err)
	}
	if err := CheckEK(ek); err != nil {
		return nil, nil, err
	}
	if ak, err = PublicKey(akPub); err != nil {
		return nil, nil, fmt.Errorf("attestation key: %w", err)
	}
	if err := CheckAK(ak); err != nil {
		return nil, nil, err
	}
	return ek, ak, nil
}
