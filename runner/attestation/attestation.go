// Package attestation is the runner's half of measured boot: it opens the
// node's TPM, asks the coordinator for a challenge (BeginAttestation),
// activates the credential, quotes the PCRs the coordinator names over its
// nonce, and returns what goes in the boot's Hello with the firmware's
// event log. The TPM and the log are seams (Source), so tests run it
// against a real swtpm and a log they wrote.
package attestation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/tools/tpm/attest"
	"github.com/google/go-tpm/tpm2/transport"
	"google.golang.org/grpc"
)

// maxSentLog bounds the event log a Hello carries: the coordinator takes
// messages of up to 1 MiB, and a real firmware's log is tens of KiB.
const maxSentLog = 512 << 10

// Source is where the TPM and the event log come from.
type Source struct {
	// Open returns the TPM; the caller closes it.
	Open func() (transport.TPMCloser, error)
	// EventLog returns the firmware's measurement log.
	EventLog func() ([]byte, error)
}

// Device is the node's own TPM (/dev/tpmrm0, else /dev/tpm0) and the log
// the kernel serves, under root ("" or "/" on the node).
func Device(root string) Source {
	if root == "/" {
		root = ""
	}
	return Source{
		Open: func() (transport.TPMCloser, error) {
			t, _, err := attest.OpenDevice(root)
			return t, err
		},
		EventLog: func() ([]byte, error) {
			return readBounded(filepath.Join(root, attest.EventLogPath), maxSentLog)
		},
	}
}

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// securityfs reports size 0: read until EOF, bounded.
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: more than %d bytes", path, limit)
	}
	return b, nil
}

// Beginner is the coordinator's BeginAttestation (curev1.RunnerServiceClient).
type Beginner interface {
	BeginAttestation(ctx context.Context, in *curev1.AttestBegin, opts ...grpc.CallOption) (*curev1.AttestChallenge, error)
}

// Attest runs the exchange for one Hello. It never fails the boot: a node
// without a TPM (or a TPM that errs) sends an Attestation naming why, and
// the coordinator decides what an unattested boot may do.
//
// A TPM command can fail once and work when tried again (a kernel TPM
// driver under load answered a read with nothing), so the whole exchange,
// with a fresh challenge, is tried up to attestTries times.
func Attest(ctx context.Context, src Source, c Beginner, token, bootID string) *curev1.Attestation {
	var errs []string
	for try := 1; try <= attestTries; try++ {
		a, err := attestOnce(ctx, src, c, token, bootID)
		if err == nil {
			return a
		}
		errs = append(errs, err.Error())
		if errors.Is(err, errNoTPM) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(try) * time.Second):
		}
	}
	return &curev1.Attestation{Error: strings.Join(errs, "; then ")}
}

const attestTries = 3

// errNoTPM marks a node with no TPM device: trying again cannot help.
var errNoTPM = errors.New("no TPM device")

func attestOnce(ctx context.Context, src Source, c Beginner, token, bootID string) (*curev1.Attestation, error) {
	tpm, err := src.Open()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNoTPM, err)
	}
	defer tpm.Close()
	keys, err := attest.NewKeys(tpm)
	if err != nil {
		return nil, err
	}
	defer keys.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ch, err := c.BeginAttestation(cctx, &curev1.AttestBegin{Token: token, BootId: bootID,
		EkPublic: keys.EKPublic, EkCertificate: keys.EKCert, EkChain: keys.EKChain, AkPublic: keys.AKPublic})
	if err != nil {
		return nil, fmt.Errorf("begin attestation: %w", err)
	}
	secret, err := keys.Activate(ch.GetCredentialBlob(), ch.GetEncryptedSecret())
	if err != nil {
		return nil, err
	}
	q, err := keys.Quote(ch.GetNonce(), ch.GetPcrs())
	if err != nil {
		return nil, err
	}
	a := &curev1.Attestation{ChallengeId: ch.GetChallengeId(), ActivatedSecret: secret, Quote: q.Attest, Signature: q.Signature, Pcrs: q.PCRs}
	if src.EventLog != nil {
		if a.EventLog, err = src.EventLog(); err != nil {
			// The quote still proves the PCRs; without the log the
			// coordinator can only compare whole PCR values.
			a.Error = fmt.Sprintf("event log: %v", err)
		}
	}
	return a, nil
}
