package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/enlist"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/pool"
	"github.com/cure-oss/cure/provisioner-lite/rmaparts"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
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
	// OSBooter boots a node without an active run into its installed OS
	// (the engine); nil: BootInstalledOS is unimplemented.
	OSBooter OSBooter
	// Pool moves nodes in the day-2 pool and admits runs by pool state;
	// nil: the pool methods are unimplemented and every run is admitted.
	Pool *pool.Pool
	// Instance names this coordinator instance in answers.
	Instance string
	// OnMeasurementsAccepted, if set, hears of an accepted measurement
	// hold after the store cleared it (the pool reconsiders the node).
	OnMeasurementsAccepted func(ctx context.Context, nodeID, actor, reason string)
	// KnownSKU checks the SKU of a node added at run time against the
	// manifests (sitecheck.KnownSKU); nil accepts any.
	KnownSKU func(string) error
	// BMCCADir keeps the BMC CA bundles AddNodes receives (in the state
	// dir); empty refuses them.
	BMCCADir string
	// Manifests lists the manifests the coordinator runs (its catalog);
	// nil: ListManifests is unimplemented.
	Manifests ManifestLister
	// ManifestBundle is the manifest bundle version running (0: the
	// --manifests directory); nil: 0.
	ManifestBundle func() int64
	// Enlist lists and approves enlisted machines (--enlist); nil: those
	// methods answer that enlistment is off.
	Enlist *enlist.Enlister
	Log    *slog.Logger
	// StartWorkers bounds the Starts one Provision runs at once (default
	// 256): a Start mostly waits for its commits, which the store's group
	// commit batches, so more in flight means bigger batches (32 took 94 s
	// to start 5,000 nodes on 2 cores under the fleet's load).
	StartWorkers int

	// importMu serialises AddNodes' writes (CA bundles, then the nodes).
	importMu sync.Mutex
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
			if r, err := o.Store.LatestRun(ctx, id); err == nil && ModeRole(r.Mode) == pki.RoleAdmin {
				need, what = pki.RoleAdmin, "resuming "+string(r.Mode)+" run "+r.ID
			}
		}
	}
	if !op.Role.Allows(need) {
		return status.Errorf(codes.PermissionDenied, "operator %s has role %s; %s needs %s", op.Name, op.Role, what, need)
	}
	return nil
}

// mayErase says whether the run would be a provision or a wipe: a resume
// is the latest run's mode, and a resume whose latest run cannot be read is
// taken as one (the check fails closed).
func (o *OperatorService) mayErase(ctx context.Context, id string, mode modes.Mode, resume bool) bool {
	if resume {
		r, err := o.Store.LatestRun(ctx, id)
		switch {
		case err == nil:
			mode = r.Mode
		case !errors.Is(err, store.ErrNotFound):
			return true
		}
	}
	return mode == modes.Provision || mode == modes.Wipe
}

// allowErase refuses a provision or a wipe (or the resume of one) of a
// node in the day-2 pool unless the caller is admin and confirmed that
// very node: both erase a deployed node's disks (sed_revert, os_install),
// so an operator may provision new or returned hardware but never take a
// node from its tenant. Pool states are read once for the whole request;
// nothing is started when one node is refused.
func (o *OperatorService) allowErase(ctx context.Context, mode modes.Mode, req *curev1.ProvisionRequest, ids []string) error {
	op, ok := OperatorFrom(ctx)
	if !ok {
		return status.Error(codes.Unauthenticated, "no authenticated operator")
	}
	pools, err := o.Store.NodePools(ctx)
	if err != nil {
		return status.Errorf(codes.Unavailable, "read the pool states: %v (nothing was started)", err)
	}
	confirmed := make(map[string]bool, len(req.GetConfirmNodeIds()))
	for _, id := range req.GetConfirmNodeIds() {
		confirmed[id] = true
	}
	var deployed, unconfirmed []string
	for _, id := range ids {
		np, in := pools[id]
		if !in || pool.State(np.State) == pool.None {
			continue
		}
		if !o.mayErase(ctx, id, mode, req.GetResume()) {
			continue
		}
		deployed = append(deployed, id+" ("+np.State+")")
		if !confirmed[id] {
			unconfirmed = append(unconfirmed, id)
		}
	}
	if len(deployed) == 0 {
		return nil
	}
	named := textsafe.JoinFirst(deployed, maxNamed, maxEchoedID, ", ")
	if !op.Role.Allows(pki.RoleAdmin) {
		return status.Errorf(codes.PermissionDenied, "operator %s has role %s; mode %s of %d node(s) in the pool (%s) erases their disks and needs %s (nothing was started)",
			op.Name, op.Role, mode, len(deployed), named, pki.RoleAdmin)
	}
	if len(unconfirmed) > 0 {
		return status.Errorf(codes.FailedPrecondition, "mode %s of %d node(s) in the pool (%s) erases their disks; not confirmed: %s (confirm_node_ids must name each: curectl provision lists them and asks, or --yes) (nothing was started)",
			mode, len(deployed), named, textsafe.JoinFirst(unconfirmed, maxNamed, maxEchoedID, ", "))
	}
	return nil
}

// Bounds of the answers a client must read whole: curectl (and any gRPC
// client left at its default) receives at most 4 MiB, whatever the store
// holds. An audit page stops at auditPageBytes (one entry at least) and
// each entry is cut (audit.Clip) to auditViewNodes ids and auditViewDetail
// bytes (a report is bounded by MaxReportBytes).
const (
	auditPageBytes  = 1 << 20
	auditViewNodes  = 256
	auditViewDetail = 8 << 10
	maxAuditPage    = 5000 // entries
	// maxEchoedID bounds a request's id quoted in an error.
	maxEchoedID = 128
)

// ListAuditLog reads the audit log, newest first, one page: at most the
// limit asked for, and no more than fits auditPageBytes.
// next_before_id reads the next page.
func (o *OperatorService) ListAuditLog(ctx context.Context, req *curev1.ListAuditLogRequest) (*curev1.ListAuditLogResponse, error) {
	f := store.AuditFilter{Kind: store.AuditKind(req.GetKind()), Node: req.GetNodeId(), BeforeID: req.GetBeforeId(), Limit: int(req.GetLimit())}
	if f.Kind != "" && f.Kind != store.AuditOperator && f.Kind != store.AuditSecurity {
		return nil, status.Errorf(codes.InvalidArgument, "kind %q: want %s, %s or empty", textsafe.BoundedLine(req.GetKind(), 64), store.AuditOperator, store.AuditSecurity)
	}
	if ms := req.GetSinceUnixMs(); ms > 0 {
		f.Since = time.UnixMilli(ms)
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	f.Limit = min(f.Limit, maxAuditPage)
	// One more than asked says whether an older entry exists.
	want := f.Limit
	f.Limit++
	entries, err := o.Store.AuditLog(ctx, f)
	if err != nil {
		return nil, err
	}
	resp := &curev1.ListAuditLogResponse{}
	size := 0
	for i, a := range entries {
		if i == want {
			resp.NextBeforeId = resp.Entries[len(resp.Entries)-1].GetId()
			break
		}
		a = audit.Clip(a, auditViewNodes, auditViewDetail)
		e := &curev1.AuditEntry{
			Id: a.ID, TimeUnixMs: a.Time.UnixMilli(), Kind: string(a.Kind), Actor: a.Actor, Role: a.Role, Peer: a.Peer,
			Action: a.Action, NodeIds: a.Nodes, RunId: a.RunID, Result: a.Result, Detail: a.Detail,
		}
		n := proto.Size(e) + 8 // and its framing in the list
		if len(resp.Entries) > 0 && size+n > auditPageBytes {
			resp.NextBeforeId = resp.Entries[len(resp.Entries)-1].GetId()
			break
		}
		size += n
		resp.Entries = append(resp.Entries, e)
	}
	return resp, nil
}

func (o *OperatorService) resolveRun(ctx context.Context, runID, nodeID string) (store.Run, error) {
	if runID != "" {
		r, err := o.Store.GetRun(ctx, runID)
		if errors.Is(err, store.ErrNotFound) {
			return store.Run{}, fmt.Errorf("unknown run id %q: %w", textsafe.BoundedLine(runID, maxEchoedID), store.ErrNotFound)
		}
		return r, err
	}
	if nodeID == "" {
		return store.Run{}, status.Error(codes.InvalidArgument, "run_id or node_id required")
	}
	r, err := o.Store.LatestRun(ctx, nodeID)
	if errors.Is(err, store.ErrNotFound) {
		if _, nerr := o.Store.GetNode(ctx, nodeID); errors.Is(nerr, store.ErrNotFound) {
			return store.Run{}, fmt.Errorf("unknown node id %q: %w", textsafe.BoundedLine(nodeID, maxEchoedID), store.ErrNotFound)
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
	signal, unsub := o.Store.Signals().Subscribe(r.ID)
	defer unsub()
	var cursor int64
	var lastBeat store.ProgressRecord
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
		// Caught up: the runner's latest heartbeat, when it is new.
		if rec, err := o.Store.RunProgress(ctx, r.ID); err == nil && (rec.BootID != lastBeat.BootID || rec.Seq != lastBeat.Seq) {
			lastBeat = rec
			if e := progressEntry(ctx, o.Store, r.ID, rec); e != nil {
				if err := stream.Send(e); err != nil {
					return err
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-signal:
		case <-time.After(2 * time.Second):
		}
	}
}

// progressEntry is a heartbeat as a live timeline entry, with the phase's
// deadline; nil when the stored heartbeat does not parse.
func progressEntry(ctx context.Context, st *store.Store, runID string, rec store.ProgressRecord) *curev1.TimelineEntry {
	var p curev1.Progress
	if err := protojson.Unmarshal(rec.JSON, &p); err != nil {
		return nil
	}
	e := &curev1.TimelineEntry{RunId: runID, TimeUnixMs: rec.Received.UnixMilli(), Phase: string(rec.Phase), Kind: string(runstate.EventProgress),
		Source: string(runstate.SourceRunner), Progress: &p, Message: ProgressLine(&p)}
	if r, err := st.GetRun(ctx, runID); err == nil {
		e.NodeId = r.NodeID
		e.DeadlineUnixMs = phaseDeadline(r, rec.Phase)
	}
	return e
}

// ProgressLine sums a heartbeat up in one line: suite, stage, checks done
// and running, elapsed and what the runner says is left.
func ProgressLine(p *curev1.Progress) string {
	done, running := 0, 0
	for _, c := range p.GetChecks() {
		switch c.GetState() {
		case "done":
			done++
		case "running":
			running++
		}
	}
	line := fmt.Sprintf("suite %s", p.GetSuite())
	if p.GetStage() != "" {
		line += ", stage " + p.GetStage()
	}
	line += fmt.Sprintf(": %d/%d checks done, %d running, elapsed %s of %s planned, eta %s", done, len(p.GetChecks()), running,
		(time.Duration(p.GetElapsedMs()) * time.Millisecond).Round(time.Second), (time.Duration(p.GetPlannedMs()) * time.Millisecond).Round(time.Second),
		(time.Duration(p.GetRemainingMs()) * time.Millisecond).Round(time.Second))
	if p.GetResumed() > 0 {
		line += fmt.Sprintf(" (resumed after %d node reset(s))", p.GetResumed())
	}
	return line
}

// phaseDeadline is the deadline of phase while the run is active and in it
// (0 otherwise).
func phaseDeadline(r store.Run, phase modes.PhaseName) int64 {
	if !runstate.Active(r.Status) || r.Phase != phase || phase == "" {
		return 0
	}
	if d := r.Pipeline.Phase(phase).Deadline; !d.IsZero() {
		return d.UnixMilli()
	}
	return 0
}

func timelineEntry(ev store.Event) *curev1.TimelineEntry {
	return &curev1.TimelineEntry{
		RunId: ev.RunID, NodeId: ev.NodeID, TimeUnixMs: ev.Time.UnixMilli(), Phase: string(ev.Phase),
		Kind: string(ev.Kind), Status: ev.Status, Message: ev.Message, DurationMs: ev.DurationMs, Source: string(ev.Source),
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
		RunId: r.ID, NodeId: r.NodeID, Mode: modes.ToProto(r.Mode), Status: runstate.RunName(r.Status), RunStatus: r.Status,
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
		pr := &curev1.PhaseRecord{Name: string(p.Name), Status: runstate.PhaseName(p.Status), PhaseStatus: p.Status, StartedUnixMs: p.StartedAt.UnixMilli(), Attempts: uint32(p.Attempts), Message: p.Message}
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
	ms, err := runMeasurements(ctx, st, r.ID)
	if err != nil {
		return nil, err
	}
	for _, v := range vs {
		rep.Verdicts = append(rep.Verdicts, &curev1.Verdict{
			Component: v.Component, Check: v.Check, Status: v.Status,
			Observed: v.Observed, Expected: v.Expected, Message: v.Message, Measurements: ms[[2]string{v.Component, v.Check}],
			Stage: v.Stage, AtUnixMs: unixMs(v.At),
		})
	}
	if err := fleetReport(ctx, st, r.ID, rep); err != nil {
		return nil, err
	}
	b, err := RunBuckets(ctx, st, r)
	if err != nil {
		return nil, err
	}
	rep.Buckets = BucketsProto(b.Buckets)
	if u, err := st.Usage(ctx, r.ID); err == nil {
		rep.EventsNotStored = u.Dropped + u.NotesDropped
	}
	if err := addBMCEvidence(ctx, st, r.ID, rep); err != nil {
		return nil, err
	}
	if err := addHostSeries(ctx, st, r.ID, rep); err != nil {
		return nil, err
	}
	boundSeries(rep, MaxReportSeriesBytes)
	if rec, err := st.RunProgress(ctx, r.ID); err == nil {
		var p curev1.Progress
		if protojson.Unmarshal(rec.JSON, &p) == nil {
			rep.Progress, rep.ProgressUnixMs = &p, rec.Received.UnixMilli()
		}
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	for _, p := range phases {
		if p.Name == r.Phase && p.Status == curev1.PhaseStatus_PHASE_RUNNING {
			rep.DeadlineUnixMs = phaseDeadline(r, r.Phase)
		}
	}
	if rep.BootPath, err = st.RunBootPath(ctx, r.ID); err != nil {
		return nil, err
	}
	rmaparts.GPUIdentities(rep.GetInventory().GetInventory(), rep.Verdicts)
	rep.Parts = rmaparts.Parts(rep.GetInventory().GetInventory(), rep.Verdicts)
	boundReport(rep, MaxReportBytes)
	return rep, nil
}

// MaxReportBytes bounds a run report's answer below the 4 MiB a gRPC client
// (curectl) receives by default, whatever the run stored: its verdicts alone
// may reach 60 MiB (10,000 of up to 6 KiB each). Phases are few and the
// inventory is bounded to 256 KiB.
const MaxReportBytes = 3 << 20

// boundReport leaves verdicts out of rep until it encodes within max: the
// ones a technician must act on (failures and errors, then drift) are kept
// first, in their order; VerdictsOmitted counts the rest.
func boundReport(rep *curev1.RunReport, max int) {
	if proto.Size(rep) <= max {
		return
	}
	vs := rep.Verdicts
	rep.Verdicts = nil
	room := max - proto.Size(rep) - 16 // VerdictsOmitted, set below
	order := make([]int, len(vs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return verdictRank(vs[a].GetStatus()) - verdictRank(vs[b].GetStatus()) })
	keep := make([]bool, len(vs))
	omitted := 0
	for _, i := range order {
		n := proto.Size(vs[i])
		n += 1 + protowire.SizeVarint(uint64(n)) // field tag and length
		if n > room {
			omitted++
			continue
		}
		room -= n
		keep[i] = true
	}
	for i, v := range vs {
		if keep[i] {
			rep.Verdicts = append(rep.Verdicts, v)
		}
	}
	rep.VerdictsOmitted = uint32(omitted)
}

// verdictRank orders verdicts by what a technician must act on first.
func verdictRank(s curev1.VerdictStatus) int {
	switch s {
	case curev1.VerdictStatus_FAIL, curev1.VerdictStatus_ERROR, curev1.VerdictStatus_MARGINAL:
		return 0
	case curev1.VerdictStatus_DRIFT:
		return 1
	case curev1.VerdictStatus_PASS, curev1.VerdictStatus_MATCH, curev1.VerdictStatus_SKIP, curev1.VerdictStatus_VERDICT_STATUS_UNSPECIFIED:
		return 2
	default:
		return 2
	}
}

// ListNodes lists the inventory with each node's latest run.
func (o *OperatorService) ListNodes(ctx context.Context, _ *curev1.ListNodesRequest) (*curev1.ListNodesResponse, error) {
	nodes, err := o.Store.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	pools, err := o.Store.NodePools(ctx)
	if err != nil {
		return nil, err
	}
	resp := &curev1.ListNodesResponse{}
	for _, n := range nodes {
		ni := &curev1.NodeInfo{NodeId: n.ID, BmcEndpoint: n.BMCURL, Macs: n.MACs, Sku: n.SKU, State: "idle",
			PoolState: pool.State(pools[n.ID].State).Proto()}
		if r, err := o.Store.LatestRun(ctx, n.ID); err == nil {
			ni.LastRunId, ni.LastRunStatus, ni.LastRunState = r.ID, runstate.RunName(r.Status), r.Status
			if r.Status == curev1.RunStatus_RUN_RUNNING {
				ni.State = "in " + string(r.Phase)
			}
		}
		resp.Nodes = append(resp.Nodes, ni)
	}
	return resp, nil
}

// unixMs is t in unix milliseconds, 0 for the zero time.
func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
