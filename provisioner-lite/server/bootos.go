package server

import (
	"context"
	"errors"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// OSBooter sends a node without an active run to its installed OS (the
// engine: pipeline.Engine.BootInstalledOS).
type OSBooter interface {
	BootInstalledOS(ctx context.Context, nodeID string) (string, error)
}

// BootInstalledOS sends a node without an active run to its installed OS
// (a diagnostic leaves the node in CURE by default): the BMC's boot to the
// disk, then a reset. Refused while the node has an active run.
func (o *OperatorService) BootInstalledOS(ctx context.Context, req *curev1.BootInstalledOSRequest) (*curev1.BootInstalledOSResponse, error) {
	if o.OSBooter == nil {
		return nil, status.Error(codes.Unimplemented, "this coordinator does not boot nodes to their installed OS")
	}
	id := req.GetNodeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "node_id: no node id")
	}
	if _, err := o.Store.GetNode(ctx, id); errors.Is(err, store.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "unknown node id %q", textsafe.BoundedLine(id, maxEchoedID))
	} else if err != nil {
		return nil, status.Errorf(codes.Unavailable, "node %s: %v", id, err)
	}
	msg, err := o.OSBooter.BootInstalledOS(ctx, id)
	switch {
	case errors.Is(err, pipeline.ErrBusy):
		return nil, status.Errorf(codes.FailedPrecondition, "%v (nothing was done)", err)
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	}
	return &curev1.BootInstalledOSResponse{NodeId: id, Message: msg}, nil
}
