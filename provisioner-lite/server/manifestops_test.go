package server

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/catalog"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// ListManifests: a viewer gets the catalog's SKUs and suites and the
// bundle version, audited; a caller without an operator certificate is
// refused before the handler.
func TestListManifests(t *testing.T) {
	man := t.TempDir()
	for dst, src := range map[string]string{"qemu-nvme.yaml": "qemu-nvme.yaml", "suites/rma-quick.yaml": "suites/rma-quick.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "manifests", "examples", src))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(man, dst)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(man, dst), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	tlsCfg, err := pki.ServerTLSConfig(dir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := pki.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	gs := grpc.NewServer(append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))}, OperatorAuth(nil, log)...)...)
	curev1.RegisterOperatorServiceServer(gs, &OperatorService{Manifests: &catalog.Catalog{Dir: man}, ManifestBundle: func() int64 { return 7 },
		Instance: "i1", Log: log})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(l)
	t.Cleanup(gs.Stop)
	e := &authEnv{addr: l.Addr().String(), caPEM: caPEM, pkiDir: dir}
	call := func(conn *grpc.ClientConn) (*curev1.ListManifestsResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return curev1.NewOperatorServiceClient(conn).ListManifests(ctx, &curev1.ListManifestsRequest{})
	}

	if _, err := call(e.dial(t, nil)); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("ListManifests without a certificate: %v, want Unauthenticated", err)
	}
	oc, err := pki.IssueOperatorCert(dir, "vera", pki.RoleViewer)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := call(e.dial(t, loadCert(t, oc.CertFile, oc.KeyFile)))
	if err != nil {
		t.Fatalf("ListManifests as a viewer: %v", err)
	}
	if !slices.Equal(resp.GetSkus(), []string{"qemu-nvme"}) || !slices.Equal(resp.GetSuites(), []string{"rma-quick"}) ||
		resp.GetBundleVersion() != 7 || resp.GetInstance() != "i1" || len(resp.GetInvalid()) != 0 {
		t.Fatalf("ListManifests = %v", resp)
	}
	if want := "action=/cure.v1.OperatorService/ListManifests actor=vera role=viewer"; !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %q:\n%s", want, logs)
	}

	// An unreadable directory: Internal, without its path.
	if err := os.RemoveAll(man); err != nil {
		t.Fatal(err)
	}
	_, err = call(e.dial(t, loadCert(t, oc.CertFile, oc.KeyFile)))
	if status.Code(err) != codes.Internal || strings.Contains(err.Error(), man) {
		t.Fatalf("ListManifests of a missing directory: %v, want Internal without the path", err)
	}
}
