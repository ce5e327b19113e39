package server

import (
	"context"
	"crypto/x509"
	"log/slog"
	"slices"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// operatorMethodPrefix selects the methods that need an operator certificate.
// RunnerService is left alone: runners have no client certificate and prove
// who they are with their boot token in Hello.
var operatorMethodPrefix = "/" + curev1.OperatorService_ServiceDesc.ServiceName + "/"

const operatorCertHint = "OperatorService requires an operator client certificate: pass curectl --cert/--key " +
	"with a certificate issued by `provisioner-lite pki --operator NAME`"

// OperatorAuth returns the server options that require a verified operator
// certificate (signed by the coordinator CA, ClientAuth, OU cure-operator) on
// every OperatorService call, and log who made each accepted call. The TLS
// config must verify client certificates when given (pki.ServerTLSConfig).
func OperatorAuth(log *slog.Logger) []grpc.ServerOption {
	if log == nil {
		log = slog.Default()
	}
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !strings.HasPrefix(info.FullMethod, operatorMethodPrefix) {
			return handler(ctx, req)
		}
		op, err := authorizeOperator(ctx, info.FullMethod, log)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		resp, err := handler(ctx, req)
		log.Info("operator call", append(auditAttrs(op, info.FullMethod, req, resp),
			"code", status.Code(err).String(), "duration", time.Since(start).Round(time.Millisecond))...)
		return resp, err
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !strings.HasPrefix(info.FullMethod, operatorMethodPrefix) {
			return handler(srv, ss)
		}
		op, err := authorizeOperator(ss.Context(), info.FullMethod, log)
		if err != nil {
			return err
		}
		// Streams (Watch) can follow a run for an hour: log at the start.
		log.Info("operator stream", "operator", op, "method", info.FullMethod)
		return handler(srv, ss)
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(unary), grpc.ChainStreamInterceptor(stream)}
}

// authorizeOperator returns the operator name (certificate CN) of the caller,
// or an Unauthenticated error.
func authorizeOperator(ctx context.Context, method string, log *slog.Logger) (string, error) {
	p, _ := peer.FromContext(ctx)
	addr := "unknown"
	if p != nil && p.Addr != nil {
		addr = p.Addr.String()
	}
	reject := func(why string) (string, error) {
		log.Warn("operator call rejected", "method", method, "peer", addr, "reason", why)
		return "", status.Errorf(codes.Unauthenticated, "%s: %s", why, operatorCertHint)
	}
	if p == nil {
		return reject("no peer information")
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return reject("connection is not TLS")
	}
	// VerifiedChains is set only when the TLS layer verified the presented
	// certificate against the coordinator CA (ClientCAs).
	if len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return reject("no verified client certificate")
	}
	leaf := ti.State.VerifiedChains[0][0]
	if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return reject("client certificate " + leaf.Subject.CommonName + " lacks the ClientAuth key usage")
	}
	if !slices.Contains(leaf.Subject.OrganizationalUnit, pki.OperatorOU) {
		return reject("client certificate " + leaf.Subject.CommonName + " is not an operator certificate (OU " + pki.OperatorOU + ")")
	}
	if leaf.Subject.CommonName == "" {
		return reject("operator certificate has no CN")
	}
	return leaf.Subject.CommonName, nil
}

// auditAttrs names the operator and, for calls that change or inspect nodes,
// which nodes and runs: the log then answers "who started this provision".
func auditAttrs(op, method string, req, resp any) []any {
	attrs := []any{"operator", op, "method", method}
	switch r := req.(type) {
	case *curev1.ProvisionRequest:
		attrs = append(attrs, "nodes", r.GetNodeIds(), "mode", r.GetMode().String(), "manifest", r.GetManifest(), "resume", r.GetResume())
		if pr, ok := resp.(*curev1.ProvisionResponse); ok {
			var runs []string
			for _, rr := range pr.GetRuns() {
				runs = append(runs, rr.GetNodeId()+"="+rr.GetRunId())
			}
			attrs = append(attrs, "runs", runs)
		}
	case *curev1.AuditDirectRequest:
		attrs = append(attrs, "nodes", r.GetNodeIds())
	}
	return attrs
}
