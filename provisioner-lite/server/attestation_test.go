package server_test

import (
	"context"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/tools/tpm/attest"
	"github.com/cure-oss/cure/tools/tpm/swtpmtest"
	"google.golang.org/grpc/codes"
)

// BeginAttestation over the coordinator's real TLS listener with its
// operator authorization: no client certificate needed, but a live boot
// token of this boot; keys that are not an EK and an AK are refused.
func TestBeginAttestationNeedsLiveToken(t *testing.T) {
	h := newHostile(t)
	keys, err := attest.NewKeys(swtpmtest.Start(t, "").Open())
	if err != nil {
		t.Fatal(err)
	}
	defer keys.Close()
	c := curev1.NewRunnerServiceClient(h.conn("", nil))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	begin := func(token, boot string, ak []byte) (*curev1.AttestChallenge, error) {
		return c.BeginAttestation(ctx, &curev1.AttestBegin{Token: token, BootId: boot, EkPublic: keys.EKPublic, AkPublic: ak})
	}
	if _, err := begin("not-a-token", "boot1", keys.AKPublic); codeOf(err) != codes.Unauthenticated {
		t.Fatalf("unknown token: %v, want Unauthenticated", err)
	}
	tok := h.fetchToken(nodeA.mac)
	ch, err := begin(tok, "boot1", keys.AKPublic)
	if err != nil || len(ch.GetNonce()) != 32 || len(ch.GetCredentialBlob()) == 0 || len(ch.GetPcrs()) == 0 {
		t.Fatalf("live token: %v %v", ch, err)
	}
	if s, err := keys.Activate(ch.GetCredentialBlob(), ch.GetEncryptedSecret()); err != nil || len(s) != 32 {
		t.Fatalf("the TPM cannot activate its own challenge: %v", err)
	}
	if _, err := begin(tok, "boot1", keys.EKPublic); codeOf(err) != codes.InvalidArgument {
		t.Fatalf("an EK offered as AK: %v, want InvalidArgument", err)
	}
	// The token bound to boot1 (its first Hello): another boot cannot ask.
	s, stop := h.session(helloOpts{token: tok, boot: "boot1", node: nodeA})
	defer stop()
	if err := send(s, logEvent(1, "", "hello")); err != nil {
		t.Fatal(err)
	}
	if _, err := begin(tok, "attacker", keys.AKPublic); codeOf(err) != codes.Unauthenticated {
		t.Fatalf("bound token from another boot: %v, want Unauthenticated", err)
	}
	if _, err := begin(tok, "boot1", keys.AKPublic); err != nil {
		t.Fatalf("the bound boot itself (reconnect): %v", err)
	}
}
