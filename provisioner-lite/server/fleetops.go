package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Refusal reasons (curev1.Refusal.reason).
const (
	RefusedCapacity = "capacity"
	RefusedBusy     = "busy"
	RefusedInvalid  = "invalid"
	RefusedError    = "error"
	RefusedNotRun   = "not_active"
)

// FormatSelector writes a selector as k=v pairs sorted by key.
func FormatSelector(sel map[string]string) string {
	keys := slices.Sorted(maps.Keys(sel))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + sel[k]
	}
	return strings.Join(parts, ",")
}

// selectorMatches: every pair must match a label; "sku" matches the node's
// SKU when the node has no label of that name.
func selectorMatches(n store.NodeSummary, sel map[string]string) bool {
	for k, v := range sel {
		got, ok := n.Labels[k]
		if !ok && k == "sku" {
			got, ok = n.SKU, true
		}
		if !ok || got != v {
			return false
		}
	}
	return true
}

// maxNamed bounds how many unknown ids an error message lists.
const maxNamed = 20

// Fleet answers list at most maxFleetFailures failed runs, each message cut
// to maxFleetMessage bytes (under 1 MiB in all).
const (
	maxFleetFailures = 500
	maxFleetMessage  = 1024
)

// resolveNodes turns ids and a selector into the node ids to act on, in the
// order given (ids first, then the selector's matches by id), deduplicated.
// Unknown ids are an error naming them; so is a selection that is empty.
func (o *OperatorService) resolveNodes(ctx context.Context, ids []string, sel map[string]string) ([]string, error) {
	if len(ids) == 0 && len(sel) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no node ids and no selector")
	}
	for k := range sel {
		if k == "" {
			return nil, status.Error(codes.InvalidArgument, "selector: empty label name")
		}
	}
	nodes, err := o.Store.NodeSummaries(ctx)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "read inventory: %v", err)
	}
	known := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		known[n.ID] = true
	}
	seen := map[string]bool{}
	var out, unknown []string
	for _, id := range ids {
		if !known[id] {
			unknown = append(unknown, id)
			continue
		}
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	if len(unknown) > 0 {
		return nil, status.Errorf(codes.InvalidArgument, "%d unknown node id(s): %s (nothing was started)", len(unknown),
			textsafe.JoinFirst(unknown, maxNamed, 128, ", "))
	}
	if len(sel) > 0 {
		matched := 0
		for _, n := range nodes {
			if selectorMatches(n, sel) {
				matched++
				if !seen[n.ID] {
					seen[n.ID] = true
					out = append(out, n.ID)
				}
			}
		}
		if matched == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "selector %s matches no node", FormatSelector(sel))
		}
	}
	return out, nil
}

// Provision starts one run per selected node, several at once. The answer
// lists every run started and every node refused with its reason; when no
// node started, the call fails (ResourceExhausted with a retry hint when
// capacity was the only reason) and carries the same answer as a detail.
func (o *OperatorService) Provision(ctx context.Context, req *curev1.ProvisionRequest) (*curev1.ProvisionResponse, error) {
	mode := modes.Provision
	if req.GetMode() != curev1.Mode_MODE_UNSPECIFIED {
		m, err := modes.FromProto(req.GetMode())
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		mode = m
	}
	ids, err := o.resolveNodes(ctx, req.GetNodeIds(), req.GetSelector())
	if err != nil {
		return nil, err
	}
	if err := o.allowMode(ctx, mode, req, ids); err != nil {
		return nil, err
	}
	if err := o.allowErase(ctx, mode, req, ids); err != nil {
		return nil, err
	}
	runs := make([]*curev1.RunRef, len(ids))
	refused := make([]*curev1.Refusal, len(ids))
	workers := o.StartWorkers
	if workers <= 0 {
		workers = 256
	}
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, len(ids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				id := ids[i]
				runMode := o.runMode(ctx, id, mode, req.GetResume())
				if err := o.admitPool(ctx, id, runMode); err != nil {
					refused[i] = refusal(id, err)
					refused[i].Reason = RefusedPool
					continue
				}
				runID, err := o.Starter.Start(ctx, id, mode, req.GetManifest(), req.GetResume())
				if err != nil {
					refused[i] = refusal(id, err)
					continue
				}
				if o.Pool != nil {
					o.Pool.RunStarted(ctx, id, runID, runMode)
				}
				runs[i] = &curev1.RunRef{RunId: runID, NodeId: id}
			}
		}()
	}
	for i := range ids {
		work <- i
	}
	close(work)
	wg.Wait()
	resp := &curev1.ProvisionResponse{Instance: o.Instance}
	for i := range ids {
		if runs[i] != nil {
			resp.Runs = append(resp.Runs, runs[i])
		} else {
			resp.Refused = append(resp.Refused, refused[i])
		}
	}
	if len(resp.Runs) > 0 {
		return resp, nil
	}
	return nil, refusedError(resp)
}

// refusedError is the status of a Provision that started nothing.
func refusedError(resp *curev1.ProvisionResponse) error {
	code, retry := codes.ResourceExhausted, int64(0)
	for _, r := range resp.Refused {
		if r.GetReason() != RefusedCapacity {
			code = codes.FailedPrecondition
		}
		retry = max(retry, r.GetRetryAfterMs())
	}
	msg := fmt.Sprintf("no node started: %s", summarizeRefusals(resp.Refused))
	st := status.New(code, msg)
	details := []protoadapt.MessageV1{resp}
	if code == codes.ResourceExhausted {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(time.Duration(retry) * time.Millisecond)})
	}
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st.Err()
}

// summarizeRefusals counts refusals per reason and quotes the first message.
func summarizeRefusals(rs []*curev1.Refusal) string {
	count := map[string]int{}
	for _, r := range rs {
		count[r.GetReason()]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(count)) {
		parts = append(parts, fmt.Sprintf("%d %s", count[k], k))
	}
	s := strings.Join(parts, ", ")
	if len(rs) > 0 {
		s += " (first: " + rs[0].GetNodeId() + ": " + rs[0].GetMessage() + ")"
	}
	return s
}

func refusal(nodeID string, err error) *curev1.Refusal {
	r := &curev1.Refusal{NodeId: nodeID, Message: err.Error()}
	var capErr *pipeline.CapacityError
	switch {
	case errors.As(err, &capErr):
		r.Reason, r.RetryAfterMs = RefusedCapacity, capErr.RetryAfter.Milliseconds()
	case errors.Is(err, pipeline.ErrBusy):
		r.Reason = RefusedBusy
	case errors.Is(err, pipeline.ErrInvalid), errors.Is(err, store.ErrNotFound):
		r.Reason = RefusedInvalid
	default:
		r.Reason = RefusedError
	}
	return r
}

// Cancel ends the active runs named by run id, node id or selector.
func (o *OperatorService) Cancel(ctx context.Context, req *curev1.CancelRequest) (*curev1.CancelResponse, error) {
	if o.Canceler == nil {
		return nil, status.Error(codes.Unimplemented, "cancel is not wired on this coordinator")
	}
	resp := &curev1.CancelResponse{}
	var runs []store.Run
	if len(req.GetNodeIds()) > 0 || len(req.GetSelector()) > 0 {
		ids, err := o.resolveNodes(ctx, req.GetNodeIds(), req.GetSelector())
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			r, err := o.Store.LatestRun(ctx, id)
			if err != nil || (r.Status != curev1.RunStatus_RUN_PENDING && r.Status != curev1.RunStatus_RUN_RUNNING) {
				resp.Refused = append(resp.Refused, &curev1.Refusal{NodeId: id, Reason: RefusedNotRun, Message: "node has no active run"})
				continue
			}
			runs = append(runs, r)
		}
	}
	for _, id := range req.GetRunIds() {
		r, err := o.Store.GetRun(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return nil, status.Errorf(codes.InvalidArgument, "unknown run id %q (nothing was canceled)", textsafe.BoundedLine(id, maxEchoedID))
		}
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "read run %s: %v", id, err)
		}
		if r.Status != curev1.RunStatus_RUN_PENDING && r.Status != curev1.RunStatus_RUN_RUNNING {
			resp.Refused = append(resp.Refused, &curev1.Refusal{NodeId: r.NodeID, Reason: RefusedNotRun, Message: fmt.Sprintf("run %s already %s", r.ID, r.Status)})
			continue
		}
		runs = append(runs, r)
	}
	for _, r := range runs {
		if err := o.Canceler.Cancel(ctx, r.ID, req.GetReason()); err != nil {
			resp.Refused = append(resp.Refused, refusal(r.NodeID, err))
			continue
		}
		resp.Canceled = append(resp.Canceled, &curev1.RunRef{RunId: r.ID, NodeId: r.NodeID})
	}
	return resp, nil
}

// Fleet summarises the latest run of every selected node.
func (o *OperatorService) Fleet(ctx context.Context, req *curev1.FleetRequest) (*curev1.FleetStatus, error) {
	nodes, latest, err := o.fleetState(ctx)
	if err != nil {
		return nil, err
	}
	maxFail := int(req.GetMaxFailures())
	if maxFail <= 0 {
		maxFail = 50
	}
	// The answer must stay under a client's receive limit whatever a
	// viewer asks for: at most maxFleetFailures runs of bounded message.
	maxFail = min(maxFail, maxFleetFailures)
	fs := &curev1.FleetStatus{ByStatus: map[string]int64{}, ByPhase: map[string]int64{}, ByInstance: map[string]int64{}, TimeUnixMs: time.Now().UnixMilli()}
	var failures []*curev1.FleetRun
	for _, n := range nodes {
		if !selectorMatches(n, req.GetSelector()) {
			continue
		}
		fs.Nodes++
		r, ok := latest[n.ID]
		if !ok {
			fs.ByStatus["none"]++
			continue
		}
		fs.ByStatus[runstate.RunName(r.Status)]++
		switch r.Status {
		case curev1.RunStatus_RUN_PENDING, curev1.RunStatus_RUN_RUNNING:
			fs.Active++
			fs.ByPhase[nonEmpty(r.Phase, "start")]++
		case curev1.RunStatus_RUN_FAILED, curev1.RunStatus_RUN_ATTENTION:
			failures = append(failures, &curev1.FleetRun{NodeId: n.ID, RunId: r.ID, Status: runstate.RunName(r.Status), RunStatus: r.Status,
				Phase: string(r.Phase), Message: textsafe.Truncate(r.Message, maxFleetMessage), EndedUnixMs: r.EndedAt.UnixMilli()})
		case curev1.RunStatus_RUN_SUCCEEDED, curev1.RunStatus_RUN_CANCELED, curev1.RunStatus_RUN_STATUS_UNSPECIFIED:
			// ended without needing anyone: counted only
		}
	}
	sort.SliceStable(failures, func(i, j int) bool { return failures[i].EndedUnixMs > failures[j].EndedUnixMs })
	if len(failures) > maxFail {
		failures = failures[:maxFail]
	}
	fs.Failures = failures
	return fs, nil
}

// nonEmpty is s as a string (a phase name or any string), or def when s
// is empty.
func nonEmpty[S ~string](s S, def string) string {
	if s == "" {
		return def
	}
	return string(s)
}

// fleetState reads every node and its latest run: what fleet views and
// summaries start from.
func (o *OperatorService) fleetState(ctx context.Context) ([]store.NodeSummary, map[string]store.RunSummary, error) {
	nodes, err := o.Store.NodeSummaries(ctx)
	if err != nil {
		return nil, nil, status.Errorf(codes.Unavailable, "read inventory: %v", err)
	}
	latest, err := o.Store.LatestRunSummaries(ctx)
	if err != nil {
		return nil, nil, status.Errorf(codes.Unavailable, "read runs: %v", err)
	}
	return nodes, latest, nil
}
