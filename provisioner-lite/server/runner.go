// Package server implements the coordinator's gRPC services: the runner
// session (authenticate, register, store and ack events) and the operator API.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// RunnerService serves runner sessions.
type RunnerService struct {
	curev1.UnimplementedRunnerServiceServer
	Store *store.Store
	Hub   *sessions.Hub
	Log   *slog.Logger
	// HelloTimeout bounds the wait for the first message.
	HelloTimeout time.Duration
}

// Session authenticates the runner by its per-boot token, checks the token
// belongs to the node the runner says it is, then stores and acks events.
func (s *RunnerService) Session(stream curev1.RunnerService_SessionServer) error {
	ctx := stream.Context()
	log := s.Log
	if log == nil {
		log = slog.Default()
	}
	first, err := recvWithTimeout(stream, nonZero(s.HelloTimeout, 30*time.Second))
	if err != nil {
		return status.Errorf(codes.DeadlineExceeded, "waiting for hello: %v", err)
	}
	hello := first.GetHello()
	if hello == nil {
		return status.Error(codes.InvalidArgument, "first message must be Hello")
	}
	nodeID, runID, expires, err := s.Store.LookupBootToken(ctx, hello.GetToken())
	if err != nil || time.Now().After(expires) {
		log.Warn("runner rejected: unknown or expired boot token", "mac", hello.GetIdentity().GetBootMac(), "claimed_node", hello.GetIdentity().GetNodeId())
		return status.Error(codes.Unauthenticated, "unknown or expired boot token")
	}
	node, err := s.Store.GetNode(ctx, nodeID)
	if err != nil {
		return status.Errorf(codes.Internal, "node %s: %v", nodeID, err)
	}
	if err := checkIdentity(node, hello.GetIdentity()); err != nil {
		log.Warn("runner rejected: identity does not match token", "node", nodeID, "err", err)
		return status.Errorf(codes.PermissionDenied, "token of node %s: %v", nodeID, err)
	}
	log = log.With("node", nodeID, "run", runID, "boot_id", hello.GetBootId())

	sess := sessions.NewSession(nodeID, runID, hello, stream.Send)
	run, err := s.Store.GetRun(ctx, runID)
	active := err == nil && (run.Status == "running" || run.Status == "pending")
	if !active {
		// The runner keeps waiting; an operator can start a run later.
		_ = sess.Send(&curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_Idle{Idle: &curev1.Idle{Reason: "run " + runID + " is not active"}}})
	}
	st := hello.GetState()
	s.event(ctx, store.Event{
		RunID: runID, NodeID: nodeID, Source: "coordinator", Time: time.Now().UTC(), Phase: st.GetPhase(), Kind: "info",
		Message: fmt.Sprintf("runner connected: state=%s boot_id=%s guest_uptime=%dms mac=%s serial=%s runner=%s",
			st.GetKind(), hello.GetBootId(), hello.GetUptimeMs(), hello.GetIdentity().GetBootMac(), hello.GetIdentity().GetSystemSerial(), hello.GetRunnerVersion()),
	})
	log.Info("runner connected", "state", st.GetKind().String(), "uptime_ms", hello.GetUptimeMs())
	s.Hub.Attach(sess)
	defer func() {
		s.Hub.Detach(sess)
		log.Info("runner disconnected")
	}()

	for {
		msg, err := stream.Recv()
		if err != nil {
			return nil
		}
		ev := msg.GetEvent()
		if ev == nil {
			continue
		}
		if ev.GetRunId() == "" {
			ev.RunId = runID
		}
		if err := s.storeEvent(ctx, nodeID, hello.GetBootId(), ev); err != nil {
			log.Error("store runner event", "seq", ev.GetSeq(), "err", err)
			return status.Errorf(codes.Unavailable, "store: %v", err) // runner replays unacked events
		}
		if err := sess.Send(&curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_Ack{Ack: &curev1.Ack{Seq: ev.GetSeq()}}}); err != nil {
			return nil
		}
	}
}

func (s *RunnerService) event(ctx context.Context, e store.Event) {
	if _, _, err := s.Store.AppendEvent(ctx, e); err != nil && s.Log != nil {
		s.Log.Error("store event", "err", err)
	}
}

// storeEvent persists one runner event; a replayed seq is a no-op, so the
// ack is sent either way.
func (s *RunnerService) storeEvent(ctx context.Context, nodeID, bootID string, ev *curev1.Event) error {
	payload, _ := protojson.Marshal(ev)
	e := store.Event{
		RunID: ev.GetRunId(), NodeID: nodeID, Source: "runner", BootID: bootID, Seq: ev.GetSeq(),
		Time: time.UnixMilli(ev.GetTimeUnixMs()).UTC(), Phase: ev.GetPhase(), Payload: payload,
	}
	switch b := ev.GetBody().(type) {
	case *curev1.Event_PhaseStart:
		e.Kind = "phase_start"
	case *curev1.Event_PhaseEnd:
		e.Kind = "phase_end"
		e.Status = phaseStatus(b.PhaseEnd.GetStatus())
		e.Message = b.PhaseEnd.GetMessage()
		e.DurationMs = b.PhaseEnd.GetDurationMs()
	case *curev1.Event_Verdict:
		v := b.Verdict
		e.Kind = "verdict"
		e.Status = v.GetStatus().String()
		e.Message = fmt.Sprintf("%s %s: %s", v.GetComponent(), v.GetCheck(), v.GetMessage())
	case *curev1.Event_Log:
		e.Kind = "log"
		e.Status = b.Log.GetLevel()
		e.Message = b.Log.GetMessage()
	case *curev1.Event_Metric:
		m := b.Metric
		e.Kind = "metric"
		e.Message = fmt.Sprintf("%s=%g%s", m.GetName(), m.GetValue(), m.GetUnit())
	default:
		e.Kind = "unknown"
	}
	_, inserted, err := s.Store.AppendEvent(ctx, e)
	if err != nil {
		return err
	}
	if v := ev.GetVerdict(); v != nil && inserted {
		return s.Store.PutVerdict(ctx, store.Verdict{
			RunID: e.RunID, Component: v.GetComponent(), Check: v.GetCheck(), Status: v.GetStatus().String(),
			Observed: v.GetObserved(), Expected: v.GetExpected(), Message: v.GetMessage(), Time: e.Time,
		})
	}
	return nil
}

func phaseStatus(s curev1.PhaseStatus) string {
	switch s {
	case curev1.PhaseStatus_PHASE_OK:
		return "ok"
	case curev1.PhaseStatus_PHASE_SKIPPED:
		return "skipped"
	}
	return "failed"
}

// checkIdentity ties a token to the hardware presenting it: the runner's
// boot MAC must be one the inventory registered for the node, and a serial,
// when both sides know it, must agree.
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

func recvWithTimeout(stream curev1.RunnerService_SessionServer, d time.Duration) (*curev1.RunnerMessage, error) {
	type res struct {
		m   *curev1.RunnerMessage
		err error
	}
	ch := make(chan res, 1)
	go func() {
		m, err := stream.Recv()
		ch <- res{m, err}
	}()
	select {
	case r := <-ch:
		return r.m, r.err
	case <-time.After(d):
		return nil, errors.New("timeout")
	}
}

func nonZero(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
