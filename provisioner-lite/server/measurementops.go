package server

import (
	"context"
	"errors"
	"maps"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxAcceptReason bounds an accept's reason (it goes to the audit log).
const maxAcceptReason = 1024

// AcceptMeasurements ends a node's firmware measurement hold: an admin's
// word that the drift is legitimate (a firmware update made by hand, a
// setting changed on purpose). The drifted values become the node's
// recorded ones, so its next boots compare against them, and
// OnMeasurementsAccepted lets the pool reconsider the node. The call is
// audited with its reason and what was adopted (recordCall).
func (o *OperatorService) AcceptMeasurements(ctx context.Context, req *curev1.AcceptMeasurementsRequest) (*curev1.AcceptMeasurementsResponse, error) {
	id := req.GetNodeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "no node id")
	}
	reason := textsafe.BoundedLine(req.GetReason(), maxAcceptReason)
	if reason == "" {
		return nil, status.Error(codes.InvalidArgument, "accepting measurements needs a reason (--reason): it is the audit log's record of why the drift is legitimate")
	}
	if _, err := o.Store.GetNode(ctx, id); errors.Is(err, store.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "unknown node id %q", textsafe.BoundedLine(id, maxEchoedID))
	} else if err != nil {
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	}
	before, err := o.Store.AcceptMeasurements(ctx, id, time.Now().UTC())
	switch {
	case errors.Is(err, store.ErrNotHeld):
		return nil, status.Errorf(codes.FailedPrecondition, "node %s has no firmware measurement hold: nothing to accept", id)
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	}
	actor := actorOf(ctx)
	o.log().Warn("firmware measurements accepted: hold ended", "node", id, "actor", actor, "reason", reason, "held_by_run", before.Hold.RunID)
	if o.OnMeasurementsAccepted != nil {
		o.OnMeasurementsAccepted(ctx, id, actor, reason)
	}
	return &curev1.AcceptMeasurementsResponse{NodeId: id, HeldByRun: before.Hold.RunID, Detail: before.Hold.Detail, HeldAtUnixMs: before.Hold.At.UnixMilli(),
		Pcrs: maps.Clone(before.Hold.PCRs), Firmware: before.Hold.Firmware, PreviousRun: before.RunID}, nil
}
