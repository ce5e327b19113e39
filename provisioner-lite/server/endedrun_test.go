package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// runEnded is the RunEnded detail of err (nil: none).
func runEnded(err error) *curev1.RunEnded {
	for _, d := range status.Convert(err).Details() {
		if re, ok := d.(*curev1.RunEnded); ok {
			return re
		}
	}
	return nil
}

// A runner whose run ended (the node left in CURE, as a diagnostic leaves
// it) has its session ended, and is told why when it dials back with
// its token and session secret: FailedPrecondition with a RunEnded detail,
// and no security event. Anyone else presenting that token (another boot
// id, a wrong secret) gets exactly what a never-issued token gets, and is
// a security event; so is the right boot claiming another node's hardware.
func TestEndedRunnerNoSecurityEvents(t *testing.T) {
	h := newHostile(t)
	ctx := context.Background()
	tok := h.fetchToken(nodeA.mac)
	s, cancel := h.session(helloOpts{token: tok, boot: "boot1", node: nodeA})
	defer cancel()
	if err := send(s, logEvent(1, "", "working")); err != nil {
		t.Fatal(err)
	}
	// The run ends as the coordinator ends it: tokens, status, sessions.
	if err := h.eng.Cancel(ctx, nodeA.run, "done with the node"); err != nil {
		t.Fatal(err)
	}
	for i := 0; h.run(nodeA.run).Status == curev1.RunStatus_RUN_RUNNING; i++ {
		if i > 200 {
			t.Fatal("the run did not end")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Its open session ends at once: Canceled where the hub's close
	// cancelled the session's read (sessionloop.go), which the runner
	// answers by dialling back, below.
	if _, err := s.Recv(); status.Code(err) != codes.Canceled && status.Code(err) != codes.Aborted && runEnded(err) == nil {
		t.Fatalf("the open session ended with %v", err)
	}
	for i := range 3 { // a runner that does not know the answer dials back
		s, cancel := h.session(helloOpts{token: tok, boot: "boot1", node: nodeA})
		err := send(s, logEvent(uint64(2+i), "", "still here"))
		cancel()
		re := runEnded(err)
		if status.Code(err) != codes.FailedPrecondition || re == nil || re.GetRunId() != nodeA.run || re.GetNodeId() != nodeA.id || re.GetStatus() != "canceled" {
			t.Fatalf("the ended run's own boot dialling back: %v (detail %v), want FailedPrecondition with RunEnded", err, re)
		}
		if !strings.Contains(status.Convert(err).Message(), "curectl nodes boot-os "+nodeA.id) {
			t.Errorf("the answer does not say how to send the node home: %v", err)
		}
	}
	if evs := h.security(audit.BootTokenRejected); len(evs) != 0 {
		t.Fatalf("security events for the coordinator's own ended runner: %+v", evs)
	}

	// Probes of the token: each answered as a never-issued token is.
	never := func() *status.Status {
		s, cancel := h.session(helloOpts{token: strings.Repeat("f", 64), boot: "boot1", node: nodeA})
		defer cancel()
		return status.Convert(send(s, logEvent(1, "", "x")))
	}()
	if never.Code() != codes.Unauthenticated {
		t.Fatalf("a never-issued token: %v", never.Err())
	}
	for _, probe := range []helloOpts{
		{token: tok, boot: "other-boot", node: nodeA},
		{token: tok, boot: "boot1", secret: "not-the-secret-" + strings.Repeat("y", 32), node: nodeA},
		{token: tok, boot: "other-boot", node: nodeB},
	} {
		s, cancel := h.session(probe)
		got := status.Convert(send(s, logEvent(1, "", "x")))
		cancel()
		if !proto.Equal(got.Proto(), never.Proto()) {
			t.Errorf("probe %s/%s: %v, want what a never-issued token gets: %v", probe.boot, probe.node.id, got.Err(), never.Err())
		}
	}
	// The recorder folds repeats of an action by one actor from one peer
	// into one entry: one per node the probes claimed to be.
	actors := map[string]bool{}
	for _, e := range h.security(audit.BootTokenRejected) {
		actors[e.Actor] = true
	}
	if len(actors) != 2 || !actors[nodeA.id] || !actors[nodeB.id] {
		t.Errorf("boot_token_rejected events by actor %v, want the probes as %s and as %s", actors, nodeA.id, nodeB.id)
	}
	// The ended run's own boot, claiming node B's hardware: refused as a
	// token of another node is.
	s, cancel = h.session(helloOpts{token: tok, boot: "boot1", node: nodeB})
	err := send(s, logEvent(9, "", "x"))
	cancel()
	if status.Code(err) != codes.PermissionDenied || runEnded(err) != nil || len(h.security(audit.RunnerIdentity)) != 1 {
		t.Errorf("the ended run's boot as node B: %v, identity events %d", err, len(h.security(audit.RunnerIdentity)))
	}
}
