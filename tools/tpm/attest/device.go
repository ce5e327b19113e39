// Package attest is CURE's TPM 2.0 attestation, both ends: on the node
// (device.go: the endorsement key, an attestation key, credential
// activation and a quote, through go-tpm over any transport: the kernel's
// /dev/tpmrm0 or a swtpm socket in tests) and on the coordinator
// (verify.go: the credential challenge made to the EK for the AK's name,
// and the quote checked against the AK, the nonce and the PCR values).
// It knows no gRPC and no store: the runner and the coordinator carry its
// byte strings in api/curev1.
//
// go-attestation's quote check (AKPublic.Verify) covers the signature,
// nonce and PCR digest, but ParseAKPublic accepts any key: CheckAK's
// refusal of a key that is not restricted, sign-only and fixed to its TPM
// (one that could sign a quote the TPM never made) would stay ours, and its
// node side costs the runner 344 KB more than this package's (measured
// figures in tools/tpm/eventlog's package doc).
package attest

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
)

// Device paths, in the order the runner tries them: the kernel's resource
// manager first (it flushes what a crashed user left loaded), the raw
// device if the kernel has no resource manager.
var DevicePaths = []string{"/dev/tpmrm0", "/dev/tpm0"}

// EventLogPath is where Linux serves the firmware's measurement log.
const EventLogPath = "/sys/kernel/security/tpm0/binary_bios_measurements"

// OpenDevice opens the first TPM character device of paths (DevicePaths if
// none) under root ("" or "/" for the real system).
func OpenDevice(root string, paths ...string) (transport.TPMCloser, string, error) {
	if len(paths) == 0 {
		paths = DevicePaths
	}
	var errs []error
	for _, p := range paths {
		full := root + p
		f, err := os.OpenFile(full, os.O_RDWR, 0)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return &streamTPM{rw: f}, full, nil
	}
	return nil, "", fmt.Errorf("no TPM: %w", errors.Join(errs...))
}

// DialSocket connects to a TPM that serves raw TPM 2.0 commands on a stream
// socket (swtpm socket --server type=unixio or type=tcp).
func DialSocket(network, addr string, timeout time.Duration) (transport.TPMCloser, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("tpm socket %s: %w", addr, err)
	}
	return &streamTPM{rw: c}, nil
}

// streamTPM sends one command and reads one whole response, by its header's
// size: a socket may return a response in pieces (go-tpm's own wrapper
// reads once), and a character device returns it whole.
type streamTPM struct {
	mu sync.Mutex
	rw io.ReadWriteCloser
}

const maxResponse = 64 << 10

func (s *streamTPM) Send(cmd []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.rw.Write(cmd); err != nil {
		return nil, fmt.Errorf("tpm: write command: %w", err)
	}
	if f, isFile := s.rw.(*os.File); isFile {
		return readDeviceResponse(f)
	}
	hdr := make([]byte, 10)
	if _, err := io.ReadFull(s.rw, hdr); err != nil {
		return nil, fmt.Errorf("tpm: read response header: %w", err)
	}
	size := binary.BigEndian.Uint32(hdr[2:6])
	if size < 10 || size > maxResponse {
		return nil, fmt.Errorf("tpm: response of %d bytes", size)
	}
	rsp := make([]byte, size)
	copy(rsp, hdr)
	if _, err := io.ReadFull(s.rw, rsp[10:]); err != nil {
		return nil, fmt.Errorf("tpm: read response: %w", err)
	}
	return rsp, nil
}

func (s *streamTPM) Close() error { return s.rw.Close() }

// deviceResponseWait bounds how long a command may run in the TPM (key
// creation on a slow discrete TPM takes seconds).
const deviceResponseWait = 2 * time.Minute

// readDeviceResponse reads a command's response from a TPM character
// device, which answers a read with the whole response. Go puts a device
// in non-blocking mode, and Linux then runs the command asynchronously: a
// read before it completes can find nothing (EOF). That is not the
// answer: read again until it comes. A response left unread makes every
// later write on the file fail with EBUSY for two minutes (the kernel's
// read timer), which is how an ignored optional read (the EK certificate)
// failed the whole attestation.
func readDeviceResponse(f *os.File) ([]byte, error) {
	buf := make([]byte, maxResponse)
	deadline := time.Now().Add(deviceResponseWait)
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		n, err := f.Read(buf)
		if n > 0 {
			return buf[:n], nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("tpm: read response: %w", err)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("tpm: no response from %s within %s", f.Name(), deviceResponseWait)
		}
		time.Sleep(wait)
	}
}

// AKTemplate is CURE's attestation key: an ECC P-256 restricted signing key
// (ECDSA, SHA-256) that never leaves the TPM. A restricted key signs only
// digests the TPM made itself (a quote), never one a caller hands it, so a
// signature under it is the TPM's word.
var AKTemplate = tpm2.TPMTPublic{
	Type:    tpm2.TPMAlgECC,
	NameAlg: tpm2.TPMAlgSHA256,
	ObjectAttributes: tpm2.TPMAObject{
		FixedTPM: true, FixedParent: true, SensitiveDataOrigin: true, UserWithAuth: true,
		NoDA: true, Restricted: true, SignEncrypt: true,
	},
	Parameters: tpm2.NewTPMUPublicParms(tpm2.TPMAlgECC, &tpm2.TPMSECCParms{
		Symmetric: tpm2.TPMTSymDefObject{Algorithm: tpm2.TPMAlgNull},
		Scheme: tpm2.TPMTECCScheme{
			Scheme:  tpm2.TPMAlgECDSA,
			Details: tpm2.NewTPMUAsymScheme(tpm2.TPMAlgECDSA, &tpm2.TPMSSigSchemeECDSA{HashAlg: tpm2.TPMAlgSHA256}),
		},
		CurveID: tpm2.TPMECCNistP256,
		KDF:     tpm2.TPMTKDFScheme{Scheme: tpm2.TPMAlgNull},
	}),
	Unique: tpm2.NewTPMUPublicID(tpm2.TPMAlgECC, &tpm2.TPMSECCPoint{
		X: tpm2.TPM2BECCParameter{Buffer: []byte("CURE attestation key")},
	}),
}

// EK certificate NV indices (TCG EK Credential Profile 2.3): RSA 2048, ECC P-256.
const (
	nvEKCertRSA = 0x01c00002
	nvEKCertECC = 0x01c0000a
)

// The EK certificate chain's NV range (TCG EK Credential Profile 2.3,
// 2.2.1.5): the intermediate CA certificates, in index order, each index
// holding one or more DER certificates.
const (
	nvEKChainFirst = 0x01c00100
	nvEKChainLast  = 0x01c001ff
	// MaxEKChain bounds the intermediates read (a coordinator takes 4).
	MaxEKChain = 4
)

// Keys are a TPM's endorsement key and CURE's attestation key, loaded.
type Keys struct {
	tpm      transport.TPM
	ek, ak   tpm2.NamedHandle
	EKPublic []byte // TPMT_PUBLIC, marshalled
	AKPublic []byte // TPMT_PUBLIC, marshalled
	EKCert   []byte // DER, from the TPM's NV, nil when the TPM has none
	// EKChain are the intermediate CA certificates (DER) of the TPM's EK
	// chain range, in order, at most MaxEKChain: what the coordinator
	// needs between the EK certificate and a manufacturer's root.
	EKChain [][]byte
}

// NewKeys creates (re-derives: primaries come from the hierarchy's seed, so
// every boot gets the same ones) the EK from the TCG default template,
// ECC P-256 first and RSA 2048 where the TPM lacks ECC, and the AK in the
// endorsement hierarchy.
func NewKeys(t transport.TPM) (*Keys, error) {
	k := &Keys{tpm: t}
	var certIndex uint32
	var err error
	for _, c := range []struct {
		tmpl tpm2.TPMTPublic
		nv   uint32
	}{{tpm2.ECCEKTemplate, nvEKCertECC}, {tpm2.RSAEKTemplate, nvEKCertRSA}} {
		var rsp *tpm2.CreatePrimaryResponse
		rsp, err = tpm2.CreatePrimary{PrimaryHandle: tpm2.TPMRHEndorsement, InPublic: tpm2.New2B(c.tmpl)}.Execute(t)
		if err == nil {
			k.ek = tpm2.NamedHandle{Handle: rsp.ObjectHandle, Name: rsp.Name}
			k.EKPublic = rsp.OutPublic.Bytes()
			certIndex = c.nv
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("tpm: create endorsement key: %w", err)
	}
	rsp, err := tpm2.CreatePrimary{PrimaryHandle: tpm2.TPMRHEndorsement, InPublic: tpm2.New2B(AKTemplate)}.Execute(t)
	if err != nil {
		k.Close()
		return nil, fmt.Errorf("tpm: create attestation key: %w", err)
	}
	k.ak = tpm2.NamedHandle{Handle: rsp.ObjectHandle, Name: rsp.Name}
	k.AKPublic = rsp.OutPublic.Bytes()
	k.EKCert = readNV(t, certIndex) // optional: TPMs without one (swtpm unprovisioned) are TOFU
	if k.EKCert != nil {
		k.EKChain = readEKChain(t)
	}
	return k, nil
}

// readEKChain reads the intermediates of the EK chain range, nil if the TPM
// has none (most put the chain online, not in NV). Bytes that are not
// certificates are left out: the coordinator judges what it is sent.
func readEKChain(t transport.TPM) [][]byte {
	rsp, err := tpm2.GetCapability{Capability: tpm2.TPMCapHandles, Property: nvEKChainFirst, PropertyCount: 2 * MaxEKChain}.Execute(t)
	if err != nil {
		return nil
	}
	handles, err := rsp.CapabilityData.Data.Handles()
	if err != nil {
		return nil
	}
	var out [][]byte
	for _, h := range handles.Handle {
		if uint32(h) < nvEKChainFirst || uint32(h) > nvEKChainLast {
			break
		}
		certs, err := x509.ParseCertificates(readNV(t, uint32(h)))
		if err != nil {
			continue
		}
		for _, c := range certs {
			if len(out) == MaxEKChain {
				return out
			}
			out = append(out, c.Raw)
		}
	}
	return out
}

// readNV reads a whole NV index, nil if it is absent or unreadable.
func readNV(t transport.TPM, index uint32) []byte {
	pub, err := tpm2.NVReadPublic{NVIndex: tpm2.TPMHandle(index)}.Execute(t)
	if err != nil {
		return nil
	}
	nv, err := pub.NVPublic.Contents()
	if err != nil || nv.DataSize == 0 || nv.DataSize > 8192 {
		return nil
	}
	var out []byte
	for off := uint16(0); off < nv.DataSize; {
		n := min(nv.DataSize-off, 768) // under every TPM's MAX_NV_BUFFER_SIZE
		rsp, err := tpm2.NVRead{
			AuthHandle: tpm2.AuthHandle{Handle: tpm2.TPMHandle(index), Name: pub.NVName, Auth: tpm2.PasswordAuth(nil)},
			NVIndex:    tpm2.NamedHandle{Handle: tpm2.TPMHandle(index), Name: pub.NVName},
			Size:       n, Offset: off,
		}.Execute(t)
		if err != nil {
			return nil
		}
		out = append(out, rsp.Data.Buffer...)
		off += n
	}
	return out
}

// Activate recovers the coordinator's credential: only the TPM holding the
// EK's private part can, and it releases it only for an object with the
// AK's name loaded beside it (TPM2_ActivateCredential).
func (k *Keys) Activate(credentialBlob, encryptedSecret []byte) ([]byte, error) {
	rsp, err := tpm2.ActivateCredential{
		ActivateHandle: tpm2.AuthHandle{Handle: k.ak.Handle, Name: k.ak.Name, Auth: tpm2.PasswordAuth(nil)},
		KeyHandle: tpm2.AuthHandle{Handle: k.ek.Handle, Name: k.ek.Name,
			Auth: tpm2.Policy(tpm2.TPMAlgSHA256, 16, ekPolicy)},
		CredentialBlob: tpm2.TPM2BIDObject{Buffer: credentialBlob},
		Secret:         tpm2.TPM2BEncryptedSecret{Buffer: encryptedSecret},
	}.Execute(k.tpm)
	if err != nil {
		return nil, fmt.Errorf("tpm: activate credential: %w", err)
	}
	return rsp.CertInfo.Buffer, nil
}

// ekPolicy satisfies the default EK's policy: PolicySecret(endorsement).
func ekPolicy(t transport.TPM, handle tpm2.TPMISHPolicy, nonceTPM tpm2.TPM2BNonce) error {
	_, err := tpm2.PolicySecret{AuthHandle: tpm2.TPMRHEndorsement, PolicySession: handle, NonceTPM: nonceTPM}.Execute(t)
	return err
}

// Quote is a TPM's signed statement of its PCRs with the PCR values it covers.
type Quote struct {
	Attest    []byte            // TPMS_ATTEST, as the TPM signed it
	Signature []byte            // TPMT_SIGNATURE, marshalled
	PCRs      map[uint32][]byte // sha256 bank
}

// Quote signs the sha256 bank's pcrs and nonce with the AK, and reads the
// PCR values the quote covers.
func (k *Keys) Quote(nonce []byte, pcrs []uint32) (*Quote, error) {
	sel := Selection(pcrs)
	rsp, err := tpm2.Quote{
		SignHandle:     tpm2.AuthHandle{Handle: k.ak.Handle, Name: k.ak.Name, Auth: tpm2.PasswordAuth(nil)},
		QualifyingData: tpm2.TPM2BData{Buffer: nonce},
		InScheme:       tpm2.TPMTSigScheme{Scheme: tpm2.TPMAlgNull},
		PCRSelect:      sel,
	}.Execute(k.tpm)
	if err != nil {
		return nil, fmt.Errorf("tpm: quote: %w", err)
	}
	vals, err := ReadPCRs(k.tpm, pcrs)
	if err != nil {
		return nil, err
	}
	return &Quote{Attest: rsp.Quoted.Bytes(), Signature: tpm2.Marshal(rsp.Signature), PCRs: vals}, nil
}

// ReadPCRs reads sha256-bank PCRs (a TPM returns at most eight a call).
func ReadPCRs(t transport.TPM, pcrs []uint32) (map[uint32][]byte, error) {
	out := map[uint32][]byte{}
	left := slices.Clone(pcrs)
	for len(left) > 0 {
		rsp, err := tpm2.PCRRead{PCRSelectionIn: Selection(left)}.Execute(t)
		if err != nil {
			return nil, fmt.Errorf("tpm: read PCRs %v: %w", left, err)
		}
		got := selected(rsp.PCRSelectionOut)
		if len(got) == 0 || len(got) != len(rsp.PCRValues.Digests) {
			return nil, fmt.Errorf("tpm: read PCRs %v: the TPM returned %d values for %d PCRs", left, len(rsp.PCRValues.Digests), len(got))
		}
		for i, p := range got {
			out[p] = rsp.PCRValues.Digests[i].Buffer
		}
		left = slices.DeleteFunc(left, func(p uint32) bool { _, ok := out[p]; return ok })
	}
	return out, nil
}

// Extend extends a sha256-bank PCR with a digest (for tests and tools that
// play firmware against a software TPM).
func Extend(t transport.TPM, pcr uint32, digest []byte) error {
	_, err := tpm2.PCRExtend{
		PCRHandle: tpm2.AuthHandle{Handle: tpm2.TPMHandle(pcr), Auth: tpm2.PasswordAuth(nil)},
		Digests:   tpm2.TPMLDigestValues{Digests: []tpm2.TPMTHA{{HashAlg: tpm2.TPMAlgSHA256, Digest: digest}}},
	}.Execute(t)
	if err != nil {
		return fmt.Errorf("tpm: extend PCR %d: %w", pcr, err)
	}
	return nil
}

// Close flushes the keys.
func (k *Keys) Close() {
	for _, h := range []tpm2.NamedHandle{k.ak, k.ek} {
		if h.Handle != 0 {
			_, _ = tpm2.FlushContext{FlushHandle: h.Handle}.Execute(k.tpm)
		}
	}
}

// Selection is a sha256-bank PCR selection.
func Selection(pcrs []uint32) tpm2.TPMLPCRSelection {
	uints := make([]uint, len(pcrs))
	for i, p := range pcrs {
		uints[i] = uint(p)
	}
	return tpm2.TPMLPCRSelection{PCRSelections: []tpm2.TPMSPCRSelection{{
		Hash: tpm2.TPMAlgSHA256, PCRSelect: tpm2.PCClientCompatible.PCRs(uints...),
	}}}
}

// selected lists the sha256-bank PCRs of a selection, in index order.
func selected(sel tpm2.TPMLPCRSelection) []uint32 {
	var out []uint32
	for _, s := range sel.PCRSelections {
		if s.Hash != tpm2.TPMAlgSHA256 {
			continue
		}
		for i, b := range s.PCRSelect {
			for bit := 0; bit < 8; bit++ {
				if b&(1<<bit) != 0 {
					out = append(out, uint32(i*8+bit))
				}
			}
		}
	}
	return out
}

// pcrDigest is the quote's PCR digest: sha256 over the values in index order.
func pcrDigest(pcrs []uint32, vals map[uint32][]byte) []byte {
	h := sha256.New()
	for _, p := range pcrs {
		h.Write(vals[p])
	}
	return h.Sum(nil)
}
