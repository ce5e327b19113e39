package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/server"
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

// TestBeginAttestationBoundToAddress: a boot token read off the wire does
// not spend the node's attestation budget. From another address than the
// token's, BeginAttestation is refused (a boot_token_peer security event)
// however often it is called, as are keys that are not an EK and an AK
// from the right address, and neither is charged: the node's own boot
// still gets its challenges, up to its budget and no further.
func TestBeginAttestationBoundToAddress(t *testing.T) {
	const burst = 2
	h := newHostile(t, func(rs *server.RunnerService) { rs.SessionRate, rs.SessionBurst = 1e-4, burst })
	keys, err := attest.NewKeys(swtpmtest.Start(t, "").Open())
	if err != nil {
		t.Fatal(err)
	}
	defer keys.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tok := h.fetchToken(nodeA.mac) // from 127.0.0.1, as the node
	node := curev1.NewRunnerServiceClient(h.conn("", nil))
	peer := curev1.NewRunnerServiceClient(h.conn("127.0.0.2", nil))
	begin := func(c curev1.RunnerServiceClient, boot string, ak []byte) error {
		_, err := c.BeginAttestation(ctx, &curev1.AttestBegin{Token: tok, BootId: boot, EkPublic: keys.EKPublic, AkPublic: ak})
		return err
	}
	for i := 0; i < 3*burst; i++ {
		if err := begin(peer, "boot1", keys.AKPublic); codeOf(err) != codes.PermissionDenied {
			t.Fatalf("call %d from another address: %v, want PermissionDenied", i, err)
		}
		if err := begin(node, "boot1", keys.EKPublic); codeOf(err) != codes.InvalidArgument {
			t.Fatalf("call %d with an EK offered as AK: %v, want InvalidArgument", i, err)
		}
	}
	// (the audit recorder folds repeats of one event into one entry)
	if got := h.security(audit.BootTokenPeer); len(got) == 0 || got[0].Peer != "127.0.0.2" || !strings.Contains(got[0].Detail, "127.0.0.1") {
		t.Fatalf("boot_token_peer events: %+v, want one from 127.0.0.2 naming the token's address", got)
	}
	for i := 0; i < burst; i++ {
		if err := begin(node, "boot1", keys.AKPublic); err != nil {
			t.Fatalf("the node's challenge %d after the refusals: %v (its budget was spent by them)", i, err)
		}
	}
	if err := begin(node, "boot1", keys.AKPublic); codeOf(err) != codes.ResourceExhausted {
		t.Fatalf("past the budget: %v, want ResourceExhausted", err)
	}
	// Bound to boot1's address by its Hello: still refused from elsewhere.
	s, stop := h.session(helloOpts{token: tok, boot: "boot1", node: nodeA})
	defer stop()
	if err := send(s, logEvent(1, "", "hello")); err != nil {
		t.Fatal(err)
	}
	if err := begin(peer, "boot1", keys.AKPublic); codeOf(err) != codes.PermissionDenied {
		t.Fatalf("bound token from another address: %v, want PermissionDenied", err)
	}
}
