package server

import (
	"context"
	"errors"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/admission"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NodeAdmission lists each requirement of the node's SKU's admission
// policy, met or not, with the run and evidence it rests on; it changes
// nothing (curectl nodes admission, the dashboard).
func (o *OperatorService) NodeAdmission(ctx context.Context, req *curev1.NodeAdmissionRequest) (*curev1.NodeAdmissionResponse, error) {
	if o.Pool == nil {
		return nil, status.Error(codes.Unimplemented, "the pool is not wired on this coordinator")
	}
	id := req.GetNodeId()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "no node id")
	}
	st, err := o.Pool.Standing(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "unknown node id %q", textsafe.BoundedLine(id, maxEchoedID))
	}
	if err != nil {
		// The gate fails closed: the answer says what could not be judged.
		return nil, status.Errorf(codes.Unavailable, "admission of node %s could not be judged: %v", id, err)
	}
	out := &curev1.NodeAdmissionResponse{NodeId: st.NodeID, Sku: st.SKU, Policy: st.Policy != nil}
	if st.Pool.State != "" {
		out.Pool = poolStatus(st.Pool)
	}
	if st.Policy == nil {
		out.Decision = string(admission.Admit)
		return out, nil
	}
	out.Decision = string(st.Result.Decision)
	for _, q := range st.Result.Requirements {
		out.Requirements = append(out.Requirements, &curev1.AdmissionRequirement{Name: q.Name, State: string(q.State),
			Detail: textsafe.Bounded(q.Detail, maxMessage), RunId: q.RunID, Evidence: textsafe.Bounded(q.Evidence, maxMessage)})
	}
	return out, nil
}
