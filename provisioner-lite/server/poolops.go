package server

import (
	"context"
	"errors"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/pool"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// RefusedPool is a Refusal's reason when the node's pool state does not
// allow the move or run asked for (provisioner-lite/pool).
const RefusedPool = "pool"

// Drain asks the scheduler (by the node.pool webhook) to move jobs away
// from in-service nodes.
func (o *OperatorService) Drain(ctx context.Context, req *curev1.PoolRequest) (*curev1.PoolResponse, error) {
	return o.poolAsk(ctx, req, pool.Drain)
}

// MarkDrained is the scheduler's (or an operator's) word that no job runs
// on draining nodes any more: from now on CURE may reboot them.
func (o *OperatorService) MarkDrained(ctx context.Context, req *curev1.PoolRequest) (*curev1.PoolResponse, error) {
	return o.poolAsk(ctx, req, pool.MarkDrain)
}

// ReturnToPool puts nodes back in service.
func (o *OperatorService) ReturnToPool(ctx context.Context, req *curev1.PoolRequest) (*curev1.PoolResponse, error) {
	return o.poolAsk(ctx, req, pool.Return)
}

// Revalidate starts a suite run on each drained (ready, rma) node.
func (o *OperatorService) Revalidate(ctx context.Context, req *curev1.RevalidateRequest) (*curev1.PoolResponse, error) {
	if o.Pool == nil {
		return nil, status.Error(codes.Unimplemented, "the pool is not wired on this coordinator")
	}
	if req.GetSuite() == "" {
		return nil, status.Error(codes.InvalidArgument, "revalidate needs a suite")
	}
	mode := modes.Diagnostic
	if req.GetMode() != curev1.Mode_MODE_UNSPECIFIED {
		m, err := modes.FromProto(req.GetMode())
		if err != nil || (m != modes.Diagnostic && m != modes.Burnin) {
			return nil, status.Errorf(codes.InvalidArgument, "revalidation mode %v: want diagnostic or burnin", req.GetMode())
		}
		mode = m
	}
	ids, err := o.resolveNodes(ctx, req.GetNodeIds(), req.GetSelector())
	if err != nil {
		return nil, err
	}
	actor := actorOf(ctx)
	return o.poolEach(ids, func(id string) (store.NodePool, error) {
		return o.Pool.Revalidate(ctx, id, pool.RevalidateRequest{Suite: req.GetSuite(), Mode: mode, AutoReturn: req.GetAutoReturn(),
			Actor: actor, Reason: req.GetReason()})
	})
}

func (o *OperatorService) poolAsk(ctx context.Context, req *curev1.PoolRequest, a pool.Action) (*curev1.PoolResponse, error) {
	if o.Pool == nil {
		return nil, status.Error(codes.Unimplemented, "the pool is not wired on this coordinator")
	}
	ids, err := o.resolveNodes(ctx, req.GetNodeIds(), req.GetSelector())
	if err != nil {
		return nil, err
	}
	actor := actorOf(ctx)
	return o.poolEach(ids, func(id string) (store.NodePool, error) { return o.Pool.Ask(ctx, id, a, actor, req.GetReason()) })
}

// poolEach moves each node; nodes refused are listed with why. Nothing
// moved at all is an error carrying the refusals.
func (o *OperatorService) poolEach(ids []string, move func(id string) (store.NodePool, error)) (*curev1.PoolResponse, error) {
	resp := &curev1.PoolResponse{}
	for _, id := range ids {
		np, err := move(id)
		if err != nil {
			r := refusal(id, err)
			if errors.Is(err, pool.ErrRefused) {
				r.Reason = RefusedPool
			}
			resp.Refused = append(resp.Refused, r)
			continue
		}
		resp.Nodes = append(resp.Nodes, poolStatus(np))
	}
	if len(resp.Nodes) == 0 {
		code := codes.FailedPrecondition
		for _, r := range resp.Refused {
			if r.GetReason() == RefusedError {
				code = codes.Unavailable
			}
		}
		st := status.New(code, "no node moved: "+summarizeRefusals(resp.Refused))
		if d, err := st.WithDetails(resp); err == nil {
			st = d
		}
		return nil, st.Err()
	}
	return resp, nil
}

// runMode is the mode a Provision request runs on a node: a resume
// continues the node's latest run in that run's mode.
func (o *OperatorService) runMode(ctx context.Context, id string, mode modes.Mode, resume bool) modes.Mode {
	if resume {
		if r, err := o.Store.LatestRun(ctx, id); err == nil {
			return r.Mode
		}
	}
	return mode
}

// admitPool refuses a run the node's pool state does not allow.
func (o *OperatorService) admitPool(ctx context.Context, id string, mode modes.Mode) error {
	if o.Pool == nil {
		return nil
	}
	return o.Pool.Admit(ctx, id, mode)
}

func poolStatus(np store.NodePool) *curev1.PoolStatus {
	return &curev1.PoolStatus{NodeId: np.NodeID, State: pool.State(np.State).Proto(), SinceUnixMs: unixMs(np.Since), Reason: np.Reason,
		Actor: np.Actor, RunId: np.RunID, AutoReturn: np.AutoReturn}
}

func actorOf(ctx context.Context) string {
	if op, ok := OperatorFrom(ctx); ok {
		return op.Name
	}
	return "unknown"
}
