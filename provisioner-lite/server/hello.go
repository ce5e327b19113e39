package server

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/inventory"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// authenticate turns a Hello into a session: the token is bound to this boot
// (or this boot proves it is the one the token was bound to), the boot has
// not opened sessions faster than its budget, the hardware matches the
// token's node, and the token's run is active. It returns the binding's
// outcome: store.Bound for the boot's first Hello, store.Resumed for a
// reconnect.
func (s *RunnerService) authenticate(ctx context.Context, hello *curev1.Hello, peerIP string) (store.Node, store.Run, string, error) {
	node, run, outcome, err := s.authenticateHello(ctx, hello, peerIP)
	if err == nil {
		s.Log.Info("runner authenticated", "node", node.ID, "run", run.ID, "boot_id", hello.GetBootId(), "how", outcome)
	}
	return node, run, outcome, err
}

func (s *RunnerService) authenticateHello(ctx context.Context, hello *curev1.Hello, peerIP string) (store.Node, store.Run, string, error) {
	claimed := textsafe.BoundedLine(hello.GetIdentity().GetNodeId(), maxName)
	refuse := func(action, detail string, code codes.Code, msg string) (store.Node, store.Run, string, error) {
		s.Audit.Security(ctx, store.AuditEntry{Actor: claimed, Peer: peerIP, Action: action, Result: "refused", Detail: detail})
		return store.Node{}, store.Run{}, "", status.Error(code, msg)
	}
	if hello == nil {
		return refuse(audit.RunnerSession, "first message is not a Hello", codes.InvalidArgument, "first message must be Hello")
	}
	if hello.GetToken() == "" || len(hello.GetSessionSecret()) < sessionSecretMin || hello.GetBootId() == "" || len(hello.GetBootId()) > maxName {
		return refuse(audit.RunnerSession, "Hello without token, boot id or session secret", codes.InvalidArgument,
			fmt.Sprintf("Hello needs token, boot_id and a session_secret of at least %d characters", sessionSecretMin))
	}
	hash := store.TokenHash(hello.GetToken())
	tok, err := s.Store.LookupBootToken(ctx, hash)
	if err != nil {
		return refuse(audit.BootTokenRejected, "unknown boot token", codes.Unauthenticated, "unknown or expired boot token")
	}
	// A boot's sessions are charged to its budget; a reconnect (the token
	// is bound to this boot id and secret, which authenticates it) is
	// charged before anything is written, so one refused costs reads only.
	boot := tok.RunID + "\x00" + hello.GetBootId()
	// proven: the boot that registered with the token, reconnecting (its
	// boot id and session secret, which only that boot knows, match).
	proven := tok.State == store.TokenBound && tok.BootID == hello.GetBootId() &&
		subtle.ConstantTimeCompare([]byte(tok.SessionHash), []byte(store.TokenHash(hello.GetSessionSecret()))) == 1
	charged := false
	if proven {
		if !s.sessions.Allow(boot) {
			s.Audit.Security(ctx, store.AuditEntry{Actor: tok.NodeID, Peer: peerIP, Action: audit.RunnerSession, RunID: tok.RunID, Nodes: []string{tok.NodeID},
				Result: "refused", Detail: fmt.Sprintf("boot %s reconnects faster than its budget (%g a second, burst %d)",
					textsafe.BoundedLine(hello.GetBootId(), maxName), s.SessionRate, s.SessionBurst)})
			return store.Node{}, store.Run{}, "", status.Errorf(codes.ResourceExhausted, "boot %s reconnects too often: back off and retry",
				textsafe.BoundedLine(hello.GetBootId(), maxName))
		}
		charged = true
	}
	run, err := s.Store.GetRun(ctx, tok.RunID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return store.Node{}, store.Run{}, "", status.Errorf(codes.Unavailable, "run of the boot token: %v", err)
	}
	active := err == nil && runActive(run)
	if !active && !proven {
		// Only the boot that registered learns that its run ended: to
		// anyone else the token is one that opens nothing, answered as an
		// unknown one is, so the answer tells no prober which tokens were.
		return refuse(audit.BootTokenRejected, fmt.Sprintf("boot token of run %s, which is not active, presented without its boot's session secret", tok.RunID),
			codes.Unauthenticated, "unknown or expired boot token")
	}
	node, err := s.Store.GetNode(ctx, tok.NodeID)
	if err != nil {
		return store.Node{}, store.Run{}, "", status.Errorf(codes.Internal, "node %s: %v", tok.NodeID, err)
	}
	if err := checkIdentity(node, hello.GetIdentity()); err != nil {
		s.Audit.Security(ctx, store.AuditEntry{Actor: node.ID, Peer: peerIP, Action: audit.RunnerIdentity, RunID: tok.RunID, Result: "refused",
			Nodes: []string{node.ID}, Detail: textsafe.BoundedLine(err.Error(), maxMessage)})
		return store.Node{}, store.Run{}, "", status.Errorf(codes.PermissionDenied, "token of node %s: %s", node.ID, textsafe.BoundedLine(err.Error(), maxMessage))
	}
	if !active {
		s.Log.Info("runner told its run ended", "node", node.ID, "run", tok.RunID, "boot_id", hello.GetBootId(), "status", runstate.RunName(run.Status))
		return store.Node{}, store.Run{}, "", runEndedStatus(run, tok.RunID, node.ID)
	}
	if s.Instance != "" && run.Owner != "" && run.Owner != s.Instance && run.LeaseUntil.After(time.Now()) {
		// Another live instance drives this run and waits for its runner
		// there; the runner retries, and reaches this instance only if that
		// one dies (then this one takes the run over once its lease expired).
		s.Log.Info("runner refused: its run is driven by another instance", "node", node.ID, "run", run.ID, "owner", run.Owner)
		return store.Node{}, store.Run{}, "", status.Errorf(codes.Unavailable, "run %s is driven by coordinator instance %s; retry", run.ID, run.Owner)
	}
	outcome, tok, err := s.Store.BindBootToken(ctx, store.BindRequest{
		Hash: hash, BootID: hello.GetBootId(), SessionHash: store.TokenHash(hello.GetSessionSecret()), Peer: peerIP, RequirePeer: s.BindPeer,
	})
	var contested *store.ContestedError
	switch {
	case errors.As(err, &contested):
		s.contested(ctx, node.ID, peerIP, "boot "+textsafe.BoundedLine(hello.GetBootId(), maxName)+" presented a boot token", contested)
		return store.Node{}, store.Run{}, "", status.Error(codes.PermissionDenied, "another party claimed this boot window; the run is stopped for an operator")
	case errors.Is(err, store.ErrWindowContested):
		s.Audit.Security(ctx, store.AuditEntry{Actor: node.ID, Peer: peerIP, RunID: run.ID, Nodes: []string{node.ID}, Result: "refused",
			Action: audit.BootTokenRejected, Detail: err.Error()})
		return store.Node{}, store.Run{}, "", status.Error(codes.PermissionDenied, "this boot window was contested by two claimants; the run is stopped for an operator")
	case err != nil:
		s.Audit.Security(ctx, store.AuditEntry{Actor: node.ID, Peer: peerIP, RunID: run.ID, Nodes: []string{node.ID}, Result: "refused",
			Action: audit.BootTokenRejected, Detail: err.Error()})
		return store.Node{}, store.Run{}, "", status.Error(codes.Unauthenticated, "unknown, expired or superseded boot token")
	}
	if !charged {
		// The first Hello opens the boot's budget (or a reconnect that raced
		// its own first Hello): it is never refused for it.
		s.sessions.Allow(boot)
	}
	return node, run, outcome, nil
}

// runActive says whether a run may take runner sessions.
func runActive(r store.Run) bool {
	return r.Status == curev1.RunStatus_RUN_RUNNING || r.Status == curev1.RunStatus_RUN_PENDING
}

// runEndedStatus is the answer that tells a runner of an ended run (run,
// or only its id where the store no longer has it) that the coordinator
// has nothing more for its boot: FailedPrecondition with a RunEnded
// detail, which the runner recognises and stops dialling on. Only a boot
// that proved itself (its token bound to it, its session secret) or a
// session the coordinator authenticated gets it.
func runEndedStatus(run store.Run, runID, nodeID string) error {
	name := "gone"
	if run.ID != "" {
		name = runstate.RunName(run.Status)
	}
	msg := textsafe.BoundedLine(run.Message, maxMessage)
	st := status.New(codes.FailedPrecondition, fmt.Sprintf("run %s has ended (%s): nothing more for this boot; the node stays in CURE until `curectl nodes boot-os %s` (or another run)",
		runID, name, nodeID))
	if d, err := st.WithDetails(&curev1.RunEnded{RunId: runID, NodeId: nodeID, Status: name, Message: msg}); err == nil {
		st = d
	}
	return st.Err()
}

// contested records that two parties claimed one boot window (the store
// revoked its tokens): a security event naming both, and the run stopped
// in attention with its sessions closed (Guard).
func (s *RunnerService) contested(ctx context.Context, nodeID, peerIP, what string, ce *store.ContestedError) {
	detail := fmt.Sprintf("%s from %s, but boot window %s of run %s was claimed from %s first", what, peerIP, ce.Window, ce.RunID, ce.First)
	if ce.Bound.BootID != "" {
		detail += fmt.Sprintf(" (boot %s registered from there)", textsafe.BoundedLine(ce.Bound.BootID, maxName))
	}
	detail += fmt.Sprintf(": two claimants for node %s (%s and %s); every token of the window is revoked and neither gets a secret", nodeID, ce.First, ce.Second)
	s.Audit.Security(ctx, store.AuditEntry{Actor: nodeID, Peer: peerIP, Action: audit.BootWindowContested, RunID: ce.RunID, Nodes: []string{nodeID},
		Result: "refused", Detail: textsafe.BoundedLine(detail, maxMessage)})
	if s.Guard != nil {
		s.Guard.IdentityContested(ctx, ce.RunID, detail)
	}
}

// storeInventory keeps the hardware a boot reported in its Hello, cleaned
// and bounded (package inventory), once per boot: a reconnect of the same
// boot changes nothing, and costs one read when the boot's inventory is
// stored (a reconnect stores it only if its first Hello's was lost). Only an
// authenticated session gets here, so the record is the node's by the
// session, whatever its fields claim.
func (s *RunnerService) storeInventory(ctx context.Context, sess *sessions.Session, inv *curev1.Inventory, peerIP string, firstOfBoot bool, log *slog.Logger) {
	if inv == nil {
		return
	}
	if !firstOfBoot {
		if have, err := s.Store.HasInventory(ctx, sess.RunID, textsafe.BoundedLine(sess.BootID, maxName)); err != nil || have {
			return
		}
	}
	js, cut, err := inventory.Marshal(inv)
	if err != nil {
		log.Warn("hello inventory not stored", "err", err)
		return
	}
	stored, err := s.Store.PutInventory(ctx, store.InventoryRecord{NodeID: sess.NodeID, RunID: sess.RunID,
		BootID: textsafe.BoundedLine(sess.BootID, maxName), Time: time.Now().UTC(), Peer: peerIP, JSON: js, Truncated: cut})
	switch {
	case err != nil:
		log.Warn("hello inventory not stored", "err", err)
	case stored && cut:
		log.Warn("hello inventory stored cut to its bounds (strings, lists or size)", "bytes", len(js))
	}
}

// checkIdentity ties a token to the hardware presenting it: the runner's
// boot MAC must be one the inventory registered for the node, and a serial,
// when both sides know it, must agree. The MAC and serial are not secrets
// (the token is): this catches a token that reached the wrong node.
func checkIdentity(n store.Node, id *curev1.Identity) error {
	if id.GetNodeId() != "" && id.GetNodeId() != n.ID {
		return fmt.Errorf("runner says it is node %q", id.GetNodeId())
	}
	mac := strings.ToLower(id.GetBootMac())
	found := false
	for _, m := range n.MACs {
		if strings.EqualFold(m, mac) {
			found = true
		}
	}
	if !found {
		return fmt.Errorf("boot MAC %q is not registered for the node (have %s)", mac, strings.Join(n.MACs, ","))
	}
	if n.SystemSerial != "" && id.GetSystemSerial() != "" && n.SystemSerial != id.GetSystemSerial() {
		return fmt.Errorf("system serial %q, inventory says %q", id.GetSystemSerial(), n.SystemSerial)
	}
	return nil
}
