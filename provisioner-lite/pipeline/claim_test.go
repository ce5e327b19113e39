package pipeline_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// peerRunner is a hostile peer's runner: it says Hello with a node's boot
// token (MAC and serial are not secrets) and keeps whatever the
// coordinator sends it.
type peerRunner struct {
	mu   sync.Mutex
	got  []*curev1.CoordinatorMessage
	done chan error // the session's end
}

func (f *fixture) peerHello(ctx context.Context, token, boot string) *peerRunner {
	f.t.Helper()
	stream, err := f.client.Session(ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	err = stream.Send(&curev1.RunnerMessage{Msg: &curev1.RunnerMessage_Hello{Hello: &curev1.Hello{
		Token: token, BootId: boot, SessionSecret: "secret-of-" + boot + strings.Repeat("x", 32),
		State:     &curev1.RunnerState{Kind: curev1.RunnerState_IDLE},
		Identity:  &curev1.Identity{BootMac: mac, SystemSerial: "S1", NodeId: "node1"},
		Inventory: &curev1.Inventory{Disks: helloDisks},
	}}})
	if err != nil {
		f.t.Fatal(err)
	}
	p := &peerRunner{done: make(chan error, 1)}
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				p.done <- err
				return
			}
			p.mu.Lock()
			p.got = append(p.got, m)
			p.mu.Unlock()
		}
	}()
	return p
}

// secrets are the assignments (with their PSIDs and host tokens) the peer
// was sent.
func (p *peerRunner) secrets() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, m := range p.got {
		if a := m.GetAssignment(); a != nil {
			out = append(out, fmt.Sprintf("assignment %v psids=%d host_token=%t", a.GetPhases(), len(a.GetPsids()), a.GetFirstBoot().GetCallbackToken() != ""))
		}
	}
	return out
}

// grabToken polls the node's boot identity from addr until the run's boot
// window opens, as a peer on the provisioning network can.
func (f *fixture) grabToken(ctx context.Context, addr string) string {
	f.t.Helper()
	for ctx.Err() == nil {
		if d, err := f.eng.BootDecision(ctx, mac, addr); err == nil && d.Boot {
			return tokenRE.FindStringSubmatch(d.Cmdline)[1]
		}
		time.Sleep(time.Millisecond)
	}
	f.t.Fatal("the boot window never opened")
	return ""
}

// notes are the run's events whose message contains sub.
func (f *fixture) notes(runID, sub string) []store.Event {
	f.t.Helper()
	evs, err := f.st.Events(context.Background(), runID, 0, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	var out []store.Event
	for _, e := range evs {
		if strings.Contains(e.Message, sub) {
			out = append(out, e)
		}
	}
	return out
}

// TestBootTokenRaceContested: a peer polls the node's boot identity from
// its own address, gets the window's token before the node and registers
// first; a retry of its own is no contest. Its boot is not attested, so it
// is given no assignment while the claim settles. The node, a POST later,
// asks from its own address: the run stops in attention naming both
// addresses, a security event is recorded, every token of the window is
// revoked, and neither got an assignment, a PSID or a host token, then or
// after.
func TestBootTokenRaceContested(t *testing.T) {
	// Margins for a loaded machine: the peer registers within
	// milliseconds, the node asks after its POST, the claim settles later.
	const settle = 5 * time.Second
	f := newFixtureCfg(t, nil, nil, func(c *pipeline.Config) { c.ClaimSettle = settle })
	f.mu.Lock()
	f.pxeDelay = 2 * time.Second // the node's power-on-to-iPXE
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const peerAddr = "10.0.2.66"

	runID, err := f.eng.Start(ctx, "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	tok := f.grabToken(ctx, peerAddr)
	// The same address asking again (iPXE retries, or the signed image's
	// HTTPS request) is the same claimant.
	if d, err := f.eng.BootDecision(ctx, mac, peerAddr); err != nil || !d.Boot {
		t.Fatalf("the claimant's retry: %+v %v, want a token", d, err)
	}
	if d, err := f.eng.HTTPSBootDecision(ctx, mac, peerAddr); err != nil || !d.Boot {
		t.Fatalf("the claimant's HTTPS retry: %+v %v, want a token", d, err)
	}
	if got := securityEvents(t, f.st, runID, audit.BootWindowContested); len(got) != 0 {
		t.Fatalf("a retry by the claimant was taken for a contest: %+v", got)
	}
	peer := f.peerHello(ctx, tok, "peer-boot")

	// Registered, not attested: nothing is handed to it while the claim
	// settles.
	waitUntil(t, 5*time.Second, "the hold noted", func() bool { return len(f.notes(runID, "holds no assignment yet")) > 0 })
	time.Sleep(500 * time.Millisecond)
	if s := peer.secrets(); len(s) != 0 {
		t.Fatalf("the first claimant was given %v before its claim settled", s)
	}

	// The node asks for its boot identity from its own address (playNode,
	// after its POST): two claimants.
	r := f.waitRun(runID)
	if r.Status != curev1.RunStatus_RUN_ATTENTION || !strings.Contains(r.Message, "contested") ||
		!strings.Contains(r.Message, peerAddr) || !strings.Contains(r.Message, nodeAddr) {
		t.Fatalf("run after two claimants: %s %q, want attention naming %s and %s", r.Status, r.Message, peerAddr, nodeAddr)
	}
	sec := securityEvents(t, f.st, runID, audit.BootWindowContested)
	if len(sec) != 1 || sec[0].Peer != nodeAddr || !strings.Contains(sec[0].Detail, peerAddr) {
		t.Fatalf("contest security events: %+v, want one from %s naming %s", sec, nodeAddr, peerAddr)
	}
	select {
	case <-peer.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the first claimant's session is still open after the contest")
	}
	if s := peer.secrets(); len(s) != 0 {
		t.Fatalf("the first claimant was given %v", s)
	}
	f.mu.Lock()
	asg, host, hellos := len(f.assignments), f.hostToken, len(f.hellos)
	f.mu.Unlock()
	if asg != 0 || host != "" || hellos != 0 {
		t.Fatalf("the node: %d assignments, host token %q, %d Hellos; want none (it got no token)", asg, host, hellos)
	}
	for _, who := range []string{peerAddr, nodeAddr} {
		if d, err := f.eng.BootDecision(ctx, mac, who); d.Boot || err == nil && strings.Contains(d.Cmdline, "cure.token") {
			t.Fatalf("a token for %s after the contest: %+v %v", who, d, err)
		}
	}
}

// TestAssignmentHeldUntilClaimSettles: with the default-style settle, a
// boot that does not attest registers at once but is given its assignment
// only once the claim settled, counted from the coordinator's power
// action; the run then goes through.
func TestAssignmentHeldUntilClaimSettles(t *testing.T) {
	const settle = 2 * time.Second
	f := newFixtureCfg(t, nil, nil, func(c *pipeline.Config) { c.ClaimSettle = settle })
	runID, err := f.eng.Start(context.Background(), "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.waitRun(runID); r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("run ended %s: %s", r.Status, r.Message)
	}
	power := f.phases(runID)[modes.PoweringOn]
	connected := f.notes(runID, "runner connected from")
	held := f.notes(runID, "holds no assignment yet")
	sent := f.notes(runID, "assignment sent")
	if power.StartedAt.IsZero() || len(connected) == 0 || len(held) == 0 || len(sent) == 0 {
		t.Fatalf("power-on %+v, %d connects, %d holds, %d assignments", power, len(connected), len(held), len(sent))
	}
	if wait := sent[0].Time.Sub(power.StartedAt); wait < settle {
		t.Fatalf("first assignment %s after the power action, want at least the settle (%s)", wait, settle)
	}
	if early := connected[0].Time.Sub(power.StartedAt); early >= settle {
		t.Fatalf("the runner registered %s after power-on: the test shows no hold", early)
	}
}

// TestAttestedBootSettledAtOnce: a boot that passed attestation is the
// node (its TPM proved it), so it is given its assignment without the
// claim's wait, however long that is.
func TestAttestedBootSettledAtOnce(t *testing.T) {
	f := newFixtureCfg(t, func(sku *manifests.SKU, _ string) { sku.Spec.Attestation = manifests.AttestationRequired }, nil,
		func(c *pipeline.Config) { c.ClaimSettle = time.Hour })
	node := newNodeTPM(t, "fw-1.0")
	node.requiredSetup(f, "node1")
	f.mu.Lock()
	f.attest = node.genuine(f)
	f.mu.Unlock()
	runID, err := f.eng.Start(context.Background(), "node1", modes.Provision, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.waitRun(runID); r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("attested run ended %s: %s", r.Status, r.Message)
	}
	if held := f.notes(runID, "holds no assignment yet"); len(held) != 0 {
		t.Fatalf("an attested boot was held: %+v", held)
	}
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
