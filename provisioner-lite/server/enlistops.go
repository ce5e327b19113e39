package server

import (
	"context"
	"errors"
	"fmt"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/enlist"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Inspect takes an enlisting machine's report (provisioner-lite/enlist):
// its discovery token authenticates this call only. A coordinator
// without --enlist has no discovery tokens and refuses every report.
func (s *RunnerService) Inspect(ctx context.Context, rep *curev1.InspectReport) (*curev1.InspectAck, error) {
	s.init()
	if s.Enlist == nil {
		return nil, status.Error(codes.Unauthenticated, "unknown or expired discovery token")
	}
	id, err := s.Enlist.Inspect(ctx, rep, peerHost(ctx))
	switch {
	case errors.Is(err, enlist.ErrLimited):
		return nil, status.Error(codes.ResourceExhausted, "inspection reports over budget: back off and retry")
	case errors.Is(err, enlist.ErrToken):
		return nil, status.Error(codes.Unauthenticated, "unknown or expired discovery token")
	case errors.Is(err, enlist.ErrTooLarge):
		return nil, status.Error(codes.InvalidArgument, textsafe.BoundedLine(err.Error(), maxMessage))
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "inspection report: %v", err)
	}
	return &curev1.InspectAck{DiscoveredId: id}, nil
}

// ListDiscovered lists the enlisted machines with their proposals.
func (o *OperatorService) ListDiscovered(ctx context.Context, req *curev1.ListDiscoveredRequest) (*curev1.ListDiscoveredResponse, error) {
	if o.Enlist == nil {
		return nil, status.Error(codes.FailedPrecondition, "enlistment is off on this coordinator (provisioner-lite --enlist)")
	}
	ds, err := o.Enlist.List(ctx, req.GetAll())
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "discovered machines: %v", err)
	}
	return &curev1.ListDiscoveredResponse{Discovered: ds, Cap: uint32(o.Enlist.Max())}, nil
}

// ApproveDiscovered turns a reported record into a node, through AddNodes
// (every check of an import; nothing written unless it passes): the id,
// SKU, MAC, serial and BMC URL the operator leaves empty come from the
// record and its proposal; the BMC credentials only from the operator.
func (o *OperatorService) ApproveDiscovered(ctx context.Context, req *curev1.ApproveDiscoveredRequest) (*curev1.ApproveDiscoveredResponse, error) {
	if o.Enlist == nil {
		return nil, status.Error(codes.FailedPrecondition, "enlistment is off on this coordinator (provisioner-lite --enlist)")
	}
	d, err := o.Enlist.Get(ctx, req.GetId())
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, status.Errorf(codes.NotFound, "no discovered machine %q", textsafe.BoundedLine(req.GetId(), maxName))
	case err != nil:
		return nil, status.Errorf(codes.Unavailable, "%v", err)
	case d.GetState() == store.DiscoveredApproved:
		return nil, status.Errorf(codes.AlreadyExists, "%s was approved already as node %s", d.GetId(), d.GetNodeId())
	case d.GetState() != store.DiscoveredReported:
		return nil, status.Errorf(codes.FailedPrecondition, "%s has not reported its inspection yet", d.GetId())
	}
	spec, err := approvedSpec(d, req.GetNode())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if _, err := o.AddNodes(ctx, &curev1.AddNodesRequest{Nodes: []*curev1.NodeSpec{spec}, Source: "enlistment " + d.GetId()}); err != nil {
		return nil, err
	}
	if err := o.Enlist.Approved(ctx, d.GetId(), spec.GetId()); err != nil {
		return nil, status.Errorf(codes.Aborted, "node %s added, but %s not marked approved: %v", spec.GetId(), d.GetId(), err)
	}
	o.log().Info("enlisted machine approved", "discovered", d.GetId(), "node", spec.GetId(), "sku", spec.GetSku())
	return &curev1.ApproveDiscoveredResponse{NodeId: spec.GetId(), Sku: spec.GetSku(), BmcUrl: textsafe.RedactURL(spec.GetBmc().GetUrl())}, nil
}

// approvedSpec is the node the operator's spec names, its empty fields
// filled from the record.
func approvedSpec(d *curev1.Discovered, given *curev1.NodeSpec) (*curev1.NodeSpec, error) {
	spec := proto.CloneOf(given)
	if spec == nil {
		spec = &curev1.NodeSpec{}
	}
	if spec.Id == "" {
		spec.Id = d.GetProposedName()
	}
	if spec.Sku == "" {
		spec.Sku = d.GetProposedSku()
	}
	if spec.Id == "" || spec.Sku == "" {
		return nil, fmt.Errorf("%s: no inspection rule proposed a name and SKU: give --name and --sku", d.GetId())
	}
	if len(spec.Macs) == 0 {
		spec.Macs = []string{d.GetMac()}
	}
	if spec.Serial == "" {
		spec.Serial = d.GetReport().GetInventory().GetSystem().GetSerial()
	}
	if spec.Bmc == nil {
		spec.Bmc = &curev1.BMCSpec{}
	}
	if spec.Bmc.Url == "" {
		spec.Bmc.Url = enlist.BMCURL(d.GetReport())
	}
	if spec.Bmc.Url == "" {
		return nil, fmt.Errorf("%s reported no BMC address (no SMBIOS type 42 record with one): give --bmc-url", d.GetId())
	}
	return spec, nil
}
