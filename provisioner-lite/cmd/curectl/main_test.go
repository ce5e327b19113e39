package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

func TestOperatorCertDefaults(t *testing.T) {
	dir := t.TempDir()
	if _, err := pki.EnsureCA(dir); err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(dir, pki.CACertFile)

	// Nothing beside the CA: no certificate, and the description says where curectl looked.
	cc, err := operatorCert(ca, "", "")
	if err != nil || cc.cert != nil || !strings.Contains(cc.desc, filepath.Join(dir, "operators", "operator.pem")) {
		t.Fatalf("no default files: %+v, %v", cc, err)
	}
	// The admin certificate `provisioner-lite init` issues is found without exports.
	if _, err := pki.IssueOperatorCert(dir, "admin", pki.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	cc, err = operatorCert(ca, "", "")
	if err != nil || cc.cert == nil || cc.cert.Leaf.Subject.CommonName != "admin" {
		t.Fatalf("init's admin certificate: %+v, %v", cc, err)
	}
	// The default operator certificate is picked up first.
	if _, err := pki.IssueOperatorCert(dir, "operator", pki.RoleOperator); err != nil {
		t.Fatal(err)
	}
	cc, err = operatorCert(ca, "", "")
	if err != nil || cc.cert == nil || cc.cert.Leaf.Subject.CommonName != "operator" {
		t.Fatalf("default files: %+v, %v", cc, err)
	}
	// Explicit files win.
	alice, err := pki.IssueOperatorCert(dir, "alice", pki.RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	cc, err = operatorCert(ca, alice.CertFile, alice.KeyFile)
	if err != nil || cc.cert == nil || cc.cert.Leaf.Subject.CommonName != "alice" {
		t.Fatalf("--cert/--key: %+v, %v", cc, err)
	}
	if _, err := operatorCert(ca, alice.CertFile, ""); err == nil || !strings.Contains(err.Error(), "go together") {
		t.Fatalf("--cert without --key: %v", err)
	}
	if _, err := operatorCert(ca, filepath.Join(dir, pki.ServerCertFile), alice.KeyFile); err == nil {
		t.Fatal("a missing certificate file was accepted")
	}
}

type nodesStub struct {
	curev1.UnimplementedOperatorServiceServer
}

func (nodesStub) ListNodes(context.Context, *curev1.ListNodesRequest) (*curev1.ListNodesResponse, error) {
	return &curev1.ListNodesResponse{Nodes: []*curev1.NodeInfo{{NodeId: "node7"}}}, nil
}

// curectl against a coordinator-style server: refused without a certificate,
// with a message naming what it sent; accepted with the default one.
func TestNodesWithOperatorCert(t *testing.T) {
	dir := t.TempDir()
	tlsCfg, err := pki.ServerTLSConfig(dir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))},
		server.OperatorAuth(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))...)...)
	curev1.RegisterOperatorServiceServer(gs, nodesStub{})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(l)
	defer gs.Stop()
	args := []string{"--server", l.Addr().String(), "--ca", filepath.Join(dir, pki.CACertFile), "nodes"}

	var out bytes.Buffer
	if rc := run(args, &out); rc != 1 {
		t.Fatalf("nodes without operator certificate: rc %d, out %q", rc, out.String())
	}
	cc, _ := operatorCert(filepath.Join(dir, pki.CACertFile), "", "")
	explained := cc.explain(status.Error(codes.Unauthenticated, "no verified client certificate"))
	if !strings.Contains(explained.Error(), "curectl sent no client certificate") {
		t.Fatalf("explained error = %v", explained)
	}

	if _, err := pki.IssueOperatorCert(dir, "operator", pki.RoleOperator); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if rc := run(args, &out); rc != 0 || !strings.Contains(out.String(), "node7") {
		t.Fatalf("nodes with the default operator certificate: rc %d, out %q", rc, out.String())
	}
}
