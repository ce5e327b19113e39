package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// enlistStub answers ListDiscovered and ApproveDiscovered, keeping the
// approval it was sent.
type enlistStub struct {
	curev1.UnimplementedOperatorServiceServer
	mu  sync.Mutex
	got *curev1.ApproveDiscoveredRequest
}

func (*enlistStub) ListDiscovered(context.Context, *curev1.ListDiscoveredRequest) (*curev1.ListDiscoveredResponse, error) {
	return &curev1.ListDiscoveredResponse{Cap: 256, Discovered: []*curev1.Discovered{{Id: "disc-525400000099", Mac: "52:54:00:00:00:99", State: "reported",
		ProposedSku: "qemu-nvme", ProposedName: "vm-525400000099",
		Report: &curev1.InspectReport{Inventory: &curev1.Inventory{System: &curev1.SystemInfo{Serial: "QEMU-1"}},
			Bmc: []*curev1.HostInterface{{BmcIp: "10.0.0.77"}}, Drives: []*curev1.InspectDrive{{Serial: "D1", PsidRevert: true}}}}}}, nil
}

func (s *enlistStub) ApproveDiscovered(_ context.Context, req *curev1.ApproveDiscoveredRequest) (*curev1.ApproveDiscoveredResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.GetId() != "disc-525400000099" {
		return nil, status.Error(codes.NotFound, "no discovered machine")
	}
	s.got = req
	return &curev1.ApproveDiscoveredResponse{NodeId: "vm-525400000099", Sku: "qemu-nvme", BmcUrl: "https://10.0.0.77"}, nil
}

// nodes discovered lists with the proposal (-o json the API's message);
// nodes approve sends the credentials read from where --bmc-cred says,
// never the command line, and fails (1) on a refusal, (2) on bad usage.
func TestNodesDiscoveredAndApprove(t *testing.T) {
	dir := t.TempDir()
	tlsCfg, err := pki.ServerTLSConfig(dir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))},
		server.OperatorAuth(nil, slog.New(slog.NewTextHandler(io.Discard, nil)))...)...)
	stub := &enlistStub{}
	curev1.RegisterOperatorServiceServer(gs, stub)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(l)
	defer gs.Stop()
	if _, err := pki.IssueOperatorCert(dir, "operator", pki.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	base := []string{"--server", l.Addr().String(), "--ca", filepath.Join(dir, pki.CACertFile)}
	rc, out, errOut := runCaptured(t, append(base, "nodes", "discovered")...)
	if rc != 0 || !strings.Contains(out, "disc-525400000099") || !strings.Contains(out, "vm-525400000099") || !strings.Contains(out, "10.0.0.77") {
		t.Fatalf("nodes discovered: rc %d\n%s%s", rc, out, errOut)
	}
	rc, out, _ = runCaptured(t, append(base, "nodes", "discovered", "-o", "json")...)
	if rc != 0 || !strings.Contains(out, `"proposedSku": "qemu-nvme"`) || !strings.Contains(out, `"psidRevert": true`) {
		t.Fatalf("nodes discovered -o json: rc %d\n%s", rc, out)
	}
	t.Setenv("SITE_BMC_PW", "s3cret")
	rc, out, errOut = runCaptured(t, append(base, "nodes", "approve", "disc-525400000099", "--bmc-cred", "admin:env:SITE_BMC_PW", "--bmc-insecure",
		"--psid", "D1=PSID0001", "-o", "json")...)
	if rc != 0 || !strings.Contains(out, `"nodeId": "vm-525400000099"`) {
		t.Fatalf("nodes approve: rc %d\n%s%s", rc, out, errOut)
	}
	stub.mu.Lock()
	got := stub.got.GetNode()
	stub.mu.Unlock()
	if got.GetBmc().GetUsername() != "admin" || got.GetBmc().GetPassword() != "s3cret" || !got.GetBmc().GetInsecure() || got.GetPsids()["D1"] != "PSID0001" {
		t.Fatalf("approval sent %v", got)
	}
	if rc, _, _ := runCaptured(t, append(base, "nodes", "approve", "nope", "--bmc-cred", "admin:env:SITE_BMC_PW")...); rc != 1 {
		t.Fatalf("approve of an unknown id: rc %d, want 1", rc)
	}
	for _, bad := range [][]string{{"nodes", "approve", "disc-1"}, {"nodes", "approve", "disc-1", "--bmc-cred", "admin:s3cret"},
		{"nodes", "approve", "disc-1", "--bmc-cred", "admin:env:UNSET_VAR_FOR_TEST"}} {
		if rc, _, _ := runCaptured(t, append(base, bad...)...); rc != 2 {
			t.Errorf("%q: rc %d, want 2", bad, rc)
		}
	}
}
