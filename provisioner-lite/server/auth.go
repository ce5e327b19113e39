package server

import (
	"context"
	"crypto/x509"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/textsafe"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Deny by default (docs/SECURITY.md): the runner's session is the one method
// open without an operator certificate, and every other method must be named
// here with the role it needs. Names are matched exactly, as the canonical
// "/Service/Method" string: any other spelling of a path is refused.
const runnerSession = curev1.RunnerService_Session_FullMethodName

// runnerBeginAttestation is the runner's one unary call: like the session,
// it carries no operator certificate; the boot token inside authenticates it.
const runnerBeginAttestation = curev1.RunnerService_BeginAttestation_FullMethodName

// runnerInspect is an enlisting machine's report: its discovery token
// authenticates it (provisioner-lite/enlist), and grants nothing else.
const runnerInspect = curev1.RunnerService_Inspect_FullMethodName

var methodRoles = map[string]pki.Role{
	curev1.OperatorService_ListNodes_FullMethodName:     pki.RoleViewer,
	curev1.OperatorService_Watch_FullMethodName:         pki.RoleViewer,
	curev1.OperatorService_Report_FullMethodName:        pki.RoleViewer,
	curev1.OperatorService_ListAuditLog_FullMethodName:  pki.RoleViewer,
	curev1.OperatorService_Fleet_FullMethodName:         pki.RoleViewer,
	curev1.OperatorService_ShowNode_FullMethodName:      pki.RoleViewer,
	curev1.OperatorService_NodeAdmission_FullMethodName: pki.RoleViewer,
	// Manifest names only (the files stay on the coordinator): what
	// completion and a viewer's scripts need.
	curev1.OperatorService_ListManifests_FullMethodName: pki.RoleViewer,
	// Labels choose which nodes a selector provisions: an operator's call.
	curev1.OperatorService_LabelNode_FullMethodName: pki.RoleOperator,
	// A node added names a BMC the coordinator will log in to with the
	// credentials given; a node removed loses its secrets: admin only.
	curev1.OperatorService_AddNodes_FullMethodName:    pki.RoleAdmin,
	curev1.OperatorService_RemoveNode_FullMethodName:  pki.RoleAdmin,
	curev1.OperatorService_Cancel_FullMethodName:      pki.RoleOperator,
	curev1.OperatorService_AuditDirect_FullMethodName: pki.RoleOperator,
	curev1.OperatorService_TimeBuckets_FullMethodName: pki.RoleViewer,
	curev1.OperatorService_FleetBands_FullMethodName:  pki.RoleViewer,
	// Provision needs operator; a wipe (or resuming one) needs admin, which
	// the handler checks against the mode (ModeRole).
	curev1.OperatorService_Provision_FullMethodName: pki.RoleOperator,
	// The pool: an operator's calls, and the scheduler's (drained), which
	// is given an operator certificate of its own (docs/SECURITY.md).
	curev1.OperatorService_Drain_FullMethodName:        pki.RoleOperator,
	curev1.OperatorService_MarkDrained_FullMethodName:  pki.RoleOperator,
	curev1.OperatorService_Revalidate_FullMethodName:   pki.RoleOperator,
	curev1.OperatorService_ReturnToPool_FullMethodName: pki.RoleOperator,
	// Accepting drifted firmware measurements vouches for a node's
	// firmware after a security event: admin only.
	curev1.OperatorService_AcceptMeasurements_FullMethodName: pki.RoleAdmin,
	// Booting a node without an active run into its installed OS changes
	// no data (its disk is booted as it is): an operator's call.
	curev1.OperatorService_BootInstalledOS_FullMethodName: pki.RoleOperator,
	// Enlistment: what enlisted is for viewers; approving one names a BMC
	// the coordinator will log in to, as AddNodes does: admin only.
	curev1.OperatorService_ListDiscovered_FullMethodName:    pki.RoleViewer,
	curev1.OperatorService_ApproveDiscovered_FullMethodName: pki.RoleAdmin,
}

// ModeRole is the role a run of mode m needs: wipe destroys data.
func ModeRole(m modes.Mode) pki.Role {
	if m == modes.Wipe {
		return pki.RoleAdmin
	}
	return pki.RoleOperator
}

const operatorCertHint = "operator API calls require an operator client certificate: pass curectl --cert/--key " +
	"with a certificate issued by `provisioner-lite pki --operator NAME --role ROLE`"

// Operator is the authenticated caller of an operator method.
type Operator struct {
	Name string
	Role pki.Role
	Peer string
}

type operatorKey struct{}

// OperatorFrom returns the caller the interceptor authenticated.
func OperatorFrom(ctx context.Context) (Operator, bool) {
	op, ok := ctx.Value(operatorKey{}).(Operator)
	return op, ok
}

// OperatorAuth returns the server options that authorize every call: the
// runner session and BeginAttestation pass (runners prove themselves with
// their boot token); every other method needs a verified operator certificate (signed by
// the coordinator CA, ClientAuth, OU cure-operator) whose role allows it.
// Every operator call, allowed or refused, goes to the audit log. The TLS
// config must verify client certificates when given (pki.ServerTLSConfig).
func OperatorAuth(rec *audit.Recorder, log *slog.Logger) []grpc.ServerOption {
	if log == nil {
		log = slog.Default()
	}
	if rec == nil {
		rec = audit.New(nil, log, 0)
	}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod == runnerBeginAttestation || info.FullMethod == runnerInspect {
			return handler(ctx, req)
		}
		op, err := authorize(ctx, info.FullMethod, rec, req)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		resp, err := handler(context.WithValue(ctx, operatorKey{}, op), req)
		err = redactStatus(err)
		recordCall(ctx, rec, op, info.FullMethod, req, resp, err, time.Since(start))
		return resp, err
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if info.FullMethod == runnerSession {
			return handler(srv, ss)
		}
		op, err := authorize(ss.Context(), info.FullMethod, rec, nil)
		if err != nil {
			return err
		}
		start := time.Now()
		w := &operatorStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), operatorKey{}, op)}
		err = redactStatus(handler(srv, w))
		recordCall(ss.Context(), rec, op, info.FullMethod, w.firstReq, nil, err, time.Since(start))
		return err
	}
	// Unknown services and methods go through the interceptors too, so a
	// peer probing for methods is refused and recorded like any other call.
	// (grpc-go itself refuses a :path without its leading slash.)
	unknown := func(any, grpc.ServerStream) error { return status.Error(codes.Unimplemented, "unknown method") }
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream), grpc.UnknownServiceHandler(unknown)}
}

// redactStatus drops what may be a URL's userinfo from an error's message
// (textsafe.RedactURLs): a second line behind the handlers, which quote
// URLs redacted already. Code and details are kept.
func redactStatus(err error) error {
	st, ok := status.FromError(err)
	if err == nil || !ok {
		return err
	}
	msg := textsafe.RedactURLs(st.Message())
	if msg == st.Message() {
		return err
	}
	p := st.Proto()
	p.Message = msg
	return status.ErrorProto(p)
}

// operatorStream carries the operator in its context and remembers the
// stream's request for the audit entry.
type operatorStream struct {
	grpc.ServerStream
	ctx      context.Context
	firstReq any
}

func (s *operatorStream) Context() context.Context { return s.ctx }

func (s *operatorStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil && s.firstReq == nil {
		s.firstReq = m
	}
	return err
}

// authorize returns the caller of an operator method, or the error that
// refuses it (recorded in the audit log).
func authorize(ctx context.Context, method string, rec *audit.Recorder, req any) (Operator, error) {
	op := Operator{Peer: peerHost(ctx)}
	need, known := methodRoles[method]
	name, role, why := certOperator(ctx)
	op.Name, op.Role = name, role
	// A refused call is a peer's: its entry is bounded and charged to the
	// peer's budget (audit.Recorder.Denied), whatever it sent.
	refuse := func(code codes.Code, msg string) (Operator, error) {
		rec.Denied(ctx, store.AuditEntry{Actor: op.Name, Role: string(op.Role), Peer: op.Peer, Action: method, Nodes: requestNodes(req),
			Result: code.String(), Detail: msg})
		return Operator{}, status.Error(code, msg)
	}
	switch {
	case !known:
		return refuse(codes.PermissionDenied, fmt.Sprintf("method %q is not open to anyone", textsafe.BoundedLine(method, 128)))
	case why != "":
		return refuse(codes.Unauthenticated, why+": "+operatorCertHint)
	case !role.Allows(need):
		return refuse(codes.PermissionDenied, fmt.Sprintf("operator %s has role %s; %s needs %s", name, role, method, need))
	}
	return op, nil
}

// certOperator reads the operator's name and role from the verified client
// certificate; why says what is missing when there is none.
func certOperator(ctx context.Context) (name string, role pki.Role, why string) {
	p, _ := peer.FromContext(ctx)
	if p == nil {
		return "", "", "no peer information"
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return "", "", "connection is not TLS"
	}
	// VerifiedChains is set only when the TLS layer verified the presented
	// certificate against the coordinator CA (ClientCAs).
	if len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return "", "", "no verified client certificate"
	}
	leaf := ti.State.VerifiedChains[0][0]
	cn := leaf.Subject.CommonName
	if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return cn, "", "client certificate " + cn + " lacks the ClientAuth key usage"
	}
	if !slices.Contains(leaf.Subject.OrganizationalUnit, pki.OperatorOU) {
		return cn, "", "client certificate " + cn + " is not an operator certificate (OU " + pki.OperatorOU + ")"
	}
	if cn == "" {
		return "", "", "operator certificate has no CN"
	}
	r, err := pki.CertRole(leaf)
	if err != nil {
		return cn, "", err.Error()
	}
	return cn, r, ""
}

// recordCall writes an allowed call's audit entry: who, which method, which
// nodes and runs, the result.
func recordCall(ctx context.Context, rec *audit.Recorder, op Operator, method string, req, resp any, err error, d time.Duration) {
	e := store.AuditEntry{Actor: op.Name, Role: string(op.Role), Peer: op.Peer, Action: method, Nodes: requestNodes(req), Result: status.Code(err).String()}
	// A builder: a Provision of 1,000 nodes names 1,000 runs, and adding
	// each to a string copied the whole line every time (20 MB a call).
	var detail strings.Builder
	fmt.Fprintf(&detail, "duration=%s", d.Round(time.Millisecond))
	switch r := req.(type) {
	case *curev1.ProvisionRequest:
		fmt.Fprintf(&detail, " mode=%s manifest=%q resume=%t", r.GetMode(), r.GetManifest(), r.GetResume())
		if pr, ok := resp.(*curev1.ProvisionResponse); ok {
			for _, rr := range pr.GetRuns() {
				detail.WriteString(" run=" + rr.GetNodeId() + ":" + rr.GetRunId())
			}
		}
	case *curev1.WatchRequest, *curev1.ReportRequest:
		if id := runOf(r); id != "" {
			e.RunID = id
		}
	case *curev1.AddNodesRequest:
		// Never the secrets: the audit log is readable by viewers.
		fmt.Fprintf(&detail, " nodes=%d replace=%t source=%q", len(r.GetNodes()), r.GetReplace(), textsafe.BoundedLine(r.GetSource(), 256))
		if ar, ok := resp.(*curev1.AddNodesResponse); ok {
			fmt.Fprintf(&detail, " added=%d updated=%d", len(ar.GetAdded()), len(ar.GetUpdated()))
		}
	case *curev1.ApproveDiscoveredRequest:
		// Never the BMC password: the audit log is readable by viewers.
		fmt.Fprintf(&detail, " discovered=%s", textsafe.BoundedLine(r.GetId(), 128))
		if ar, ok := resp.(*curev1.ApproveDiscoveredResponse); ok {
			fmt.Fprintf(&detail, " node=%s sku=%s bmc=%s", ar.GetNodeId(), ar.GetSku(), textsafe.BoundedLine(ar.GetBmcUrl(), 256))
		}
	case *curev1.LabelNodeRequest:
		fmt.Fprintf(&detail, " set=%s remove=%s", FormatSelector(r.GetSet()), strings.Join(r.GetRemove(), ","))
	case *curev1.RemoveNodeRequest:
		if rr, ok := resp.(*curev1.RemoveNodeResponse); ok {
			fmt.Fprintf(&detail, " runs_kept=%d", rr.GetRunsKept())
		}
	case *curev1.PoolRequest:
		fmt.Fprintf(&detail, " reason=%q", textsafe.BoundedLine(r.GetReason(), 256))
	case *curev1.RevalidateRequest:
		fmt.Fprintf(&detail, " suite=%q mode=%s auto_return=%t reason=%q", textsafe.BoundedLine(r.GetSuite(), 128), r.GetMode(), r.GetAutoReturn(),
			textsafe.BoundedLine(r.GetReason(), 256))
	case *curev1.AcceptMeasurementsRequest:
		fmt.Fprintf(&detail, " reason=%q", textsafe.BoundedLine(r.GetReason(), 256))
		if ar, ok := resp.(*curev1.AcceptMeasurementsResponse); ok {
			fmt.Fprintf(&detail, " held_by_run=%s previous_run=%s firmware=%q adopted=%s", ar.GetHeldByRun(), ar.GetPreviousRun(),
				textsafe.BoundedLine(ar.GetFirmware(), 128), formatPCRs(ar.GetPcrs()))
		}
	}
	if pr, ok := resp.(*curev1.PoolResponse); ok {
		for _, n := range pr.GetNodes() {
			detail.WriteString(" pool=" + n.GetNodeId() + ":" + n.GetState().String())
			if n.GetRunId() != "" {
				detail.WriteString(":" + n.GetRunId())
			}
		}
	}
	if err != nil {
		detail.WriteString(" error=" + status.Convert(err).Message())
	}
	e.Detail = detail.String()
	rec.Operator(ctx, e)
}

func requestNodes(req any) []string {
	switch r := req.(type) {
	case *curev1.ProvisionRequest:
		return withSelector(r.GetNodeIds(), r.GetSelector())
	case *curev1.CancelRequest:
		return withSelector(append(slices.Clone(r.GetNodeIds()), r.GetRunIds()...), r.GetSelector())
	case *curev1.AuditDirectRequest:
		return r.GetNodeIds()
	case *curev1.PoolRequest:
		return withSelector(r.GetNodeIds(), r.GetSelector())
	case *curev1.RevalidateRequest:
		return withSelector(r.GetNodeIds(), r.GetSelector())
	case *curev1.WatchRequest:
		if r.GetNodeId() != "" {
			return []string{r.GetNodeId()}
		}
	case *curev1.ReportRequest:
		if r.GetNodeId() != "" {
			return []string{r.GetNodeId()}
		}
	case *curev1.ListAuditLogRequest:
		if r.GetNodeId() != "" {
			return []string{r.GetNodeId()}
		}
	case *curev1.AddNodesRequest:
		ids := make([]string, 0, len(r.GetNodes()))
		for _, n := range r.GetNodes() {
			ids = append(ids, n.GetId())
		}
		return ids
	case *curev1.RemoveNodeRequest:
		return []string{r.GetNodeId()}
	case *curev1.AcceptMeasurementsRequest:
		return []string{r.GetNodeId()}
	case *curev1.BootInstalledOSRequest:
		return []string{r.GetNodeId()}
	case *curev1.LabelNodeRequest:
		return []string{r.GetNodeId()}
	case *curev1.ShowNodeRequest:
		return []string{r.GetNodeId()}
	case *curev1.NodeAdmissionRequest:
		return []string{r.GetNodeId()}
	}
	return nil
}

// withSelector records a label selector beside the node ids it selects, as
// "selector:k=v,...", so the audit log says what the operator asked for.
func withSelector(ids []string, sel map[string]string) []string {
	if len(sel) == 0 {
		return ids
	}
	return append(slices.Clone(ids), "selector:"+FormatSelector(sel))
}

func runOf(req any) string {
	switch r := req.(type) {
	case *curev1.WatchRequest:
		return r.GetRunId()
	case *curev1.ReportRequest:
		return r.GetRunId()
	}
	return ""
}
