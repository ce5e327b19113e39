package attest

import (
	"fmt"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
)

// WriteEKCert stores an EK certificate (DER) in the TPM's NV where the TCG
// EK Credential Profile puts it for the EK NewKeys derives (ECC P-256 at
// 0x01c0000a, RSA 2048 at 0x01c00002), as a TPM manufacturer does:
// platform-created, readable with empty auth. It replaces one already
// there. For test TPMs (swtpm) with a test manufacturer's CA: the platform
// hierarchy's auth must still be empty (before firmware locks it).
func WriteEKCert(t transport.TPM, ekPub, der []byte) error {
	ek, err := PublicKey(ekPub)
	if err != nil {
		return fmt.Errorf("tpm: EK certificate: %w", err)
	}
	idx := tpm2.TPMHandle(nvEKCertRSA)
	if ek.Type == tpm2.TPMAlgECC {
		idx = nvEKCertECC
	}
	return writeNV(t, idx, der)
}

// WriteEKChain stores intermediate CA certificates (DER) of the EK's
// certificate in the TCG profile's EK certificate chain range, one per
// index from 0x01c00100 in order, as a manufacturer does.
func WriteEKChain(t transport.TPM, ders ...[]byte) error {
	for i, der := range ders {
		if err := writeNV(t, tpm2.TPMHandle(nvEKChainFirst+i), der); err != nil {
			return err
		}
	}
	return nil
}

// writeNV (re)defines a platform-created index readable with empty auth
// and writes der into it.
func writeNV(t transport.TPM, idx tpm2.TPMHandle, der []byte) error {
	if pub, err := (tpm2.NVReadPublic{NVIndex: idx}).Execute(t); err == nil {
		if _, err := (tpm2.NVUndefineSpace{AuthHandle: tpm2.TPMRHPlatform, NVIndex: tpm2.NamedHandle{Handle: idx, Name: pub.NVName}}).Execute(t); err != nil {
			return fmt.Errorf("tpm: undefine NV index 0x%08x: %w", uint32(idx), err)
		}
	}
	if _, err := (tpm2.NVDefineSpace{AuthHandle: tpm2.TPMRHPlatform, PublicInfo: tpm2.New2B(tpm2.TPMSNVPublic{NVIndex: idx, NameAlg: tpm2.TPMAlgSHA256,
		Attributes: tpm2.TPMANV{PPWrite: true, PPRead: true, OwnerRead: true, AuthRead: true, PlatformCreate: true, NoDA: true, NT: tpm2.TPMNTOrdinary},
		DataSize:   uint16(len(der))})}).Execute(t); err != nil {
		return fmt.Errorf("tpm: define NV index 0x%08x: %w", uint32(idx), err)
	}
	pub, err := (tpm2.NVReadPublic{NVIndex: idx}).Execute(t)
	if err != nil {
		return fmt.Errorf("tpm: NV index 0x%08x: %w", uint32(idx), err)
	}
	for off := 0; off < len(der); off += 512 {
		chunk := der[off:min(off+512, len(der))]
		if _, err := (tpm2.NVWrite{AuthHandle: tpm2.TPMRHPlatform, NVIndex: tpm2.NamedHandle{Handle: idx, Name: pub.NVName},
			Data: tpm2.TPM2BMaxNVBuffer{Buffer: chunk}, Offset: uint16(off)}).Execute(t); err != nil {
			return fmt.Errorf("tpm: write NV index 0x%08x at %d: %w", uint32(idx), off, err)
		}
	}
	return nil
}
