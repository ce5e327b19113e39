package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Starter starts (or resumes) runs; the pipeline engine implements it.
type Starter interface {
	Start(ctx context.Context, nodeID string, mode modes.Mode, manifest string, resume bool) (string, error)
}

// Auditor compares BMCs with manifests without starting a run.
type Auditor interface {
	AuditDirect(ctx context.Context, nodeIDs []string, manifest string) []*curev1.NodeAudit
}

// OperatorService serves curectl.
type OperatorService struct {
	curev1.UnimplementedOperatorServiceServer
	Store   *store.Store
	Starter Starter
	Auditor Auditor
	// Canceler ends runs (the engine); nil: Cancel is unimplemented.
	Canceler Canceler
	// Instance names this coordinator instance in answers.
	Instance string
	// KnownSKU checks the SKU of a node added at run time against the
	// manifests (sitecheck.KnownSKU); nil accepts any.
	KnownSKU func(string) error
	// BMCCADir keeps the BMC CA bundles AddNodes receives (in the state
	// dir); empty refuses them.
	BMCCADir string
	Log      *slog.Logger
	// StartWorkers bounds the Starts one Provision runs at once (default
	// 256): a Start mostly waits for its commits, which the store's group
	// commit batches, so more in flight means bigger batches (32 took 94 s
	// to start 5,000 nodes on 2 cores under the fleet's load).
	StartWorkers int
}

// Canceler ends an active run.
type Canceler interface {
	Cancel(ctx context.Context, runID, reason string) error
}

func (o *OperatorService) log() *slog.Logger {
	if o.Log == nil {
		return slog.Default()
	}
	return o.Log
}

// AuditDirect audits nodes' BMCs over Redfish alone. Unknown ids are an
// error naming them, before any BMC is called.
func (o *OperatorService) AuditDirect(ctx context.Context, req *curev1.AuditDirectRequest) (*curev1.AuditDirectResponse, error) {
	if len(req.GetNodeIds()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no node ids")
	}
	ids, err := o.resolveNodes(ctx, req.GetNodeIds(), nil)
	if err != nil {
		return nil, err
	}
	return &curev1.AuditDirectResponse{Nodes: o.Auditor.AuditDirect(ctx, ids, req.GetManifest())}, nil
}

// allowMode refuses a run the caller's role does not cover: a wipe, or a
// resume of a wipe run (resume continues the latest run in its own mode,
// whatever mode the request names).
func (o *OperatorService) allowMode(ctx context.Context, mode modes.Mode, req *curev1.ProvisionRequest, ids []string) error {
	op, ok := OperatorFrom(ctx)
	if !ok {
		return status.Error(codes.Unauthenticated, "no authenticated operator")
	}
	need := ModeRole(mode)
	what := "mode " + string(mode)
	if req.GetResume() {
		for _, id := range ids {
			if r, err := o.Store.LatestRun(ctx, id); err == nil && ModeRole(modes.Mode(r.Mode)) == pki.RoleAdmin {
				need, what = pki.RoleAdmin, "resuming "+r.Mode+" run "+r.ID
			}
		}
	}
	if !op.Role.Allows(need) {
		return status.Errorf(codes.PermissionDenied, "operator %s has role %s; %s needs %s", op.Name, op.Role, what, need)
	}
	return nil
}

// ListAuditLog reads the audit log.
func (o *OperatorService) ListAuditLog(ctx context.Context, req *curev1.ListAuditLogRequest) (*curev1.ListAuditLogResponse, error) {
	f := store.AuditFilter{Kind: req.GetKind(), Node: req.GetNodeId(), BeforeID: req.GetBeforeId(), Limit: int(req.GetLimit())}
	if f.Kind != "" && f.Kind != store.AuditOperator && f.Kind != store.AuditSecurity {
		return nil, status.Errorf(codes.InvalidArgument, "kind %q: want %s, %s or empty", f.Kind, store.AuditOperator, store.AuditSecurity)
	}
	if ms := req.GetSinceUnixMs(); ms > 0 {
		f.Since = time.UnixMilli(ms)
	}
	entries, err := o.Store.AuditLog(ctx, f)
	if err != nil {
		return nil, err
	}
	resp := &curev1.ListAuditLogResponse{}
	for _, a := range entries {
		resp.Entries = append(resp.Entries, &curev1.AuditEntry{
			Id: a.ID, TimeUnixMs: a.Time.UnixMilli(), Kind: a.Kind, Actor: a.Actor, Role: a.Role, Peer: a.Peer,
			Action: a.Action, NodeIds: a.Nodes, RunId: a.RunID, Result: a.Result, Detail: a.Detail,
		})
	}
	return resp, nil
}

func (o *OperatorService) resolveRun(ctx context.Context, runID, nodeID string) (store.Run, error) {
	if runID != "" {
		r, err := o.Store.GetRun(ctx, runID)
		if errors.Is(err, store.ErrNotFound) {
			return store.Run{}, fmt.Errorf("unknown run id %q: %w", runID, store.ErrNotFound)
		}
		return r, err
	}
	if nodeID == "" {
		return store.Run{}, status.Error(codes.InvalidArgument, "run_id or node_id required")
	}
	r, err := o.Store.LatestRun(ctx, nodeID)
	if errors.Is(err, store.ErrNotFound) {
		if _, nerr := o.Store.GetNode(ctx, nodeID); errors.Is(nerr, store.ErrNotFound) {
			return store.Run{}, fmt.Errorf("unknown node id %q: %w", nodeID, store.ErrNotFound)
		}
		return store.Run{}, fmt.Errorf("node %s has no run yet: %w", nodeID, store.ErrNotFound)
	}
	return r, err
}

// Watch streams the stored timeline, then follows it live.
func (o *OperatorService) Watch(req *curev1.WatchRequest, stream curev1.OperatorService_WatchServer) error {
	ctx := stream.Context()
	r, err := o.resolveRun(ctx, req.GetRunId(), req.GetNodeId())
	if err != nil {
		return status.Errorf(codes.NotFound, "%v", err)
	}
	signal, unsub := o.Store.Subscribe(r.ID)
	defer unsub()
	var cursor int64
	for {
		evs, err := o.Store.Events(ctx, r.ID, cursor, 500)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			cursor = ev.ID
			if err := stream.Send(timelineEntry(ev)); err != nil {
				return err
			}
			if ev.Kind == runstate.EventRunEnd && req.GetFollow() {
				// A resumed run has run_end events from earlier attempts:
				// only the end of an inactive run ends the watch.
				if cur, err := o.Store.GetRun(ctx, r.ID); err == nil && !runstate.Active(cur.Status) {
					if rest, _ := o.Store.Events(ctx, r.ID, cursor, 1); len(rest) == 0 {
						return nil
					}
				}
			}
		}
		if len(evs) == 500 {
			continue
		}
		if !req.GetFollow() {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-signal:
		case <-time.After(2 * time.Second):
		}
	}
}

func timelineEntry(ev store.Event) *curev1.TimelineEntry {
	return &curev1.TimelineEntry{
		RunId: ev.RunID, NodeId: ev.NodeID, TimeUnixMs: ev.Time.UnixMilli(), Phase: ev.Phase,
		Kind: ev.Kind, Status: ev.Status, Message: ev.Message, DurationMs: ev.DurationMs, Source: ev.Source,
	}
}

// Report returns phases, verdicts and counters of a run.
func (o *OperatorService) Report(ctx context.Context, req *curev1.ReportRequest) (*curev1.RunReport, error) {
	r, err := o.resolveRun(ctx, req.GetRunId(), req.GetNodeId())
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, status.Errorf(codes.NotFound, "%v", err)
		}
		return nil, err
	}
	return BuildReport(ctx, o.Store, r)
}

// BuildReport assembles a run report from the store.
func BuildReport(ctx context.Context, st *store.Store, r store.Run) (*curev1.RunReport, error) {
	rep := &curev1.RunReport{
		RunId: r.ID, NodeId: r.NodeID, Mode: modes.ToProto(modes.Mode(r.Mode)), Status: r.Status,
		StartedUnixMs: r.StartedAt.UnixMilli(), Reboots: uint32(r.Reboots), Message: r.Message,
	}
	if !r.EndedAt.IsZero() {
		rep.EndedUnixMs = r.EndedAt.UnixMilli()
	}
	phases, err := st.Phases(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	for _, p := range phases {
		pr := &curev1.PhaseRecord{Name: p.Name, Status: p.Status, StartedUnixMs: p.StartedAt.UnixMilli(), Attempts: uint32(p.Attempts), Message: p.Message}
		if !p.EndedAt.IsZero() {
			pr.EndedUnixMs = p.EndedAt.UnixMilli()
		}
		rep.Phases = append(rep.Phases, pr)
	}
	vs, err := st.Verdicts(ctx, r.ID)
	if err != nil {
		return nil, err
	}
	rep.Inventory = runInventory(ctx, st, r)
	for _, v := range vs {
		pv := &curev1.Verdict{
			Component: v.Component, Check: v.Check, Status: curev1.VerdictStatus(curev1.VerdictStatus_value[v.Status]),
			Observed: v.Observed, Expected: v.Expected, Message: v.Message,
		}
		for _, m := range v.Measurements {
			pv.Measurements = append(pv.Measurements, &curev1.Measurement{Metric: m.Metric, Value: m.Value, Unit: m.Unit})
		}
		rep.Verdicts = append(rep.Verdicts, pv)
	}
	b, err := RunBuckets(ctx, st, r)
	if err != nil {
		return nil, err
	}
	rep.Buckets = BucketsProto(b.Buckets)
	return rep, nil
}

// ListNodes lists the inventory with each node's latest run.
func (o *OperatorService) ListNodes(ctx context.Context, _ *curev1.ListNodesRequest) (*curev1.ListNodesResponse, error) {
	nodes, err := o.Store.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	resp := &curev1.ListNodesResponse{}
	for _, n := range nodes {
		ni := &curev1.NodeInfo{NodeId: n.ID, BmcEndpoint: n.BMCURL, Macs: n.MACs, Sku: n.SKU, State: "idle"}
		if r, err := o.Store.LatestRun(ctx, n.ID); err == nil {
			ni.LastRunId, ni.LastRunStatus = r.ID, r.Status
			if r.Status == runstate.RunRunning {
				ni.State = "in " + r.Phase
			}
		}
		resp.Nodes = append(resp.Nodes, ni)
	}
	return resp, nil
}
