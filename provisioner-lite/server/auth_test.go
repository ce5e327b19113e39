package server

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// stubOperator answers ListNodes and Watch and counts calls that got through.
type stubOperator struct {
	curev1.UnimplementedOperatorServiceServer
	mu    sync.Mutex
	calls int
}

func (s *stubOperator) hit() { s.mu.Lock(); s.calls++; s.mu.Unlock() }
func (s *stubOperator) n() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func (s *stubOperator) ListNodes(context.Context, *curev1.ListNodesRequest) (*curev1.ListNodesResponse, error) {
	s.hit()
	return &curev1.ListNodesResponse{Nodes: []*curev1.NodeInfo{{NodeId: "node1"}}}, nil
}

func (s *stubOperator) Watch(_ *curev1.WatchRequest, stream curev1.OperatorService_WatchServer) error {
	s.hit()
	return stream.Send(&curev1.TimelineEntry{RunId: "r1"})
}

// stubRunner proves a runner stream reached the handler.
type stubRunner struct {
	curev1.UnimplementedRunnerServiceServer
	reached chan struct{}
}

func (s *stubRunner) Session(curev1.RunnerService_SessionServer) error {
	s.reached <- struct{}{}
	return status.Error(codes.FailedPrecondition, "stub runner handler")
}

// syncBuffer collects the server log across goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}
func (b *syncBuffer) String() string { b.mu.Lock(); defer b.mu.Unlock(); return b.b.String() }

type authEnv struct {
	addr   string
	caPEM  []byte
	pkiDir string
	op     *stubOperator
	runner *stubRunner
	log    *syncBuffer
}

// startAuthServer serves both services on a real TLS listener configured as
// provisioner-lite does.
func startAuthServer(t *testing.T) *authEnv {
	t.Helper()
	dir := t.TempDir()
	tlsCfg, err := pki.ServerTLSConfig(dir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := pki.EnsureCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	e := &authEnv{caPEM: caPEM, pkiDir: dir, op: &stubOperator{}, runner: &stubRunner{reached: make(chan struct{}, 4)}, log: &syncBuffer{}}
	log := slog.New(slog.NewTextHandler(e.log, nil))
	gs := grpc.NewServer(append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))}, OperatorAuth(nil, log)...)...)
	curev1.RegisterOperatorServiceServer(gs, e.op)
	curev1.RegisterRunnerServiceServer(gs, e.runner)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(l)
	t.Cleanup(gs.Stop)
	e.addr = l.Addr().String()
	return e
}

func (e *authEnv) dial(t *testing.T, cert *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	cfg, err := pki.ClientTLSConfig(e.caPEM, "127.0.0.1", cert)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func listNodes(t *testing.T, conn *grpc.ClientConn) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := curev1.NewOperatorServiceClient(conn).ListNodes(ctx, &curev1.ListNodesRequest{})
	return err
}

func watchOnce(t *testing.T, conn *grpc.ClientConn) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := curev1.NewOperatorServiceClient(conn).Watch(ctx, &curev1.WatchRequest{RunId: "r1"})
	if err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

func loadCert(t *testing.T, certFile, keyFile string) *tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

// signClientCert signs a ClientAuth certificate with the CA in dir but with
// the given OU: a client the CA vouches for that is not an operator.
func signClientCert(t *testing.T, dir, cn, ou string) *tls.Certificate {
	t.Helper()
	ca, err := tls.LoadX509KeyPair(filepath.Join(dir, pki.CACertFile), filepath.Join(dir, pki.CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn, OrganizationalUnit: []string{ou}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, ca.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return &c
}

func TestOperatorServiceRequiresOperatorCert(t *testing.T) {
	e := startAuthServer(t)

	t.Run("no client certificate", func(t *testing.T) {
		conn := e.dial(t, nil)
		for name, call := range map[string]func(*testing.T, *grpc.ClientConn) error{"unary": listNodes, "stream": watchOnce} {
			err := call(t, conn)
			if status.Code(err) != codes.Unauthenticated {
				t.Fatalf("%s without certificate: %v, want Unauthenticated", name, err)
			}
			msg := status.Convert(err).Message()
			if !strings.Contains(msg, "--cert/--key") || !strings.Contains(msg, "provisioner-lite pki --operator NAME") {
				t.Errorf("%s: message %q does not tell the operator what to do", name, msg)
			}
		}
	})

	t.Run("certificate of another CA", func(t *testing.T) {
		other, err := pki.IssueOperatorCert(t.TempDir(), "mallory", pki.RoleAdmin)
		if err != nil {
			t.Fatal(err)
		}
		err = listNodes(t, e.dial(t, loadCert(t, other.CertFile, other.KeyFile)))
		// The TLS layer refuses it: the call never becomes an RPC.
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("foreign CA: %v, want Unavailable (handshake failure)", err)
		}
		t.Logf("foreign CA: %v", err)
	})

	t.Run("server certificate as client certificate", func(t *testing.T) {
		err := listNodes(t, e.dial(t, loadCert(t, filepath.Join(e.pkiDir, pki.ServerCertFile), filepath.Join(e.pkiDir, pki.ServerKeyFile))))
		if err == nil {
			t.Fatal("server certificate (no ClientAuth) accepted as operator")
		}
		if c := status.Code(err); c != codes.Unavailable && c != codes.Unauthenticated {
			t.Fatalf("server certificate: %v, want a handshake failure or Unauthenticated", err)
		}
		t.Logf("server certificate: %v", err)
	})

	t.Run("client certificate of the CA without the operator OU", func(t *testing.T) {
		err := listNodes(t, e.dial(t, signClientCert(t, e.pkiDir, "builder", "cure-builder")))
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "not an operator certificate") {
			t.Fatalf("wrong OU: %v, want Unauthenticated, not an operator certificate", err)
		}
	})

	if n := e.op.n(); n != 0 {
		t.Fatalf("%d rejected calls reached the operator handlers", n)
	}

	t.Run("operator certificate", func(t *testing.T) {
		oc, err := pki.IssueOperatorCert(e.pkiDir, "alice", pki.RoleViewer)
		if err != nil {
			t.Fatal(err)
		}
		conn := e.dial(t, loadCert(t, oc.CertFile, oc.KeyFile))
		if err := listNodes(t, conn); err != nil {
			t.Fatalf("ListNodes with operator certificate: %v", err)
		}
		if err := watchOnce(t, conn); err != nil {
			t.Fatalf("Watch with operator certificate: %v", err)
		}
		if n := e.op.n(); n != 2 {
			t.Fatalf("operator handlers reached %d times, want 2", n)
		}
		logs := e.log.String()
		for _, want := range []string{"action=/cure.v1.OperatorService/ListNodes actor=alice role=viewer", "action=/cure.v1.OperatorService/Watch actor=alice role=viewer"} {
			if !strings.Contains(logs, want) {
				t.Errorf("log lacks %q:\n%s", want, logs)
			}
		}
	})

	t.Run("runner without client certificate", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stream, err := curev1.NewRunnerServiceClient(e.dial(t, nil)).Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = stream.Recv()
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "stub runner handler") {
			t.Fatalf("runner session: %v, want the stub handler's FailedPrecondition", err)
		}
		select {
		case <-e.runner.reached:
		default:
			t.Fatal("runner handler not reached")
		}
		// BeginAttestation too reaches its handler (the stub's
		// Unimplemented) without a certificate; the boot token authenticates it.
		_, err = curev1.NewRunnerServiceClient(e.dial(t, nil)).BeginAttestation(ctx, &curev1.AttestBegin{})
		if status.Code(err) != codes.Unimplemented {
			t.Fatalf("BeginAttestation without a client certificate: %v, want the handler's Unimplemented", err)
		}
	})
}

// A verified chain whose leaf lacks ClientAuth cannot come from the TLS layer
// as configured; the interceptor still refuses it in case the config changes.
func TestCertOperatorChecksLeaf(t *testing.T) {
	ctxWith := func(leaf *x509.Certificate) context.Context {
		st := tls.ConnectionState{}
		if leaf != nil {
			st.VerifiedChains = [][]*x509.Certificate{{leaf}}
		}
		return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{}, AuthInfo: credentials.TLSInfo{State: st}})
	}
	opSubject := pkix.Name{CommonName: "alice", OrganizationalUnit: []string{pki.OperatorOU, pki.RoleOUPrefix + "admin"}}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		role pki.Role
	}{
		{"no peer", context.Background(), ""},
		{"no chain", ctxWith(nil), ""},
		{"server auth only", ctxWith(&x509.Certificate{Subject: opSubject, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}), ""},
		{"no OU", ctxWith(&x509.Certificate{Subject: pkix.Name{CommonName: "alice"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}), ""},
		{"operator without role OU", ctxWith(&x509.Certificate{Subject: pkix.Name{CommonName: "alice", OrganizationalUnit: []string{pki.OperatorOU}}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}), pki.RoleViewer},
		{"admin", ctxWith(&x509.Certificate{Subject: opSubject, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}), pki.RoleAdmin},
	} {
		name, role, why := certOperator(tc.ctx)
		if tc.role != "" && (why != "" || name != "alice" || role != tc.role) {
			t.Errorf("%s: %q %q %q; want alice as %s", tc.name, name, role, why, tc.role)
		}
		if tc.role == "" && why == "" {
			t.Errorf("%s: accepted as %q %q", tc.name, name, role)
		}
	}
}

// Every method of both services is either the runner session or named with
// a role: a method added to the proto without a decision here is refused,
// and this test says so before anyone is surprised.
func TestEveryMethodHasARole(t *testing.T) {
	for _, m := range curev1.OperatorService_ServiceDesc.Methods {
		full := "/" + curev1.OperatorService_ServiceDesc.ServiceName + "/" + m.MethodName
		if _, ok := methodRoles[full]; !ok {
			t.Errorf("%s has no role in methodRoles", full)
		}
	}
	for _, st := range curev1.OperatorService_ServiceDesc.Streams {
		full := "/" + curev1.OperatorService_ServiceDesc.ServiceName + "/" + st.StreamName
		if _, ok := methodRoles[full]; !ok {
			t.Errorf("%s has no role in methodRoles", full)
		}
	}
	if len(curev1.RunnerService_ServiceDesc.Streams) != 1 || runnerSession != "/"+curev1.RunnerService_ServiceDesc.ServiceName+"/"+curev1.RunnerService_ServiceDesc.Streams[0].StreamName {
		t.Fatalf("runner service changed: %+v", curev1.RunnerService_ServiceDesc)
	}
	// Every runner method passes OperatorAuth without a certificate: a new
	// one must be added there on purpose.
	ms := curev1.RunnerService_ServiceDesc.Methods
	prefix := "/" + curev1.RunnerService_ServiceDesc.ServiceName + "/"
	if len(ms) != 2 || runnerBeginAttestation != prefix+ms[0].MethodName || runnerInspect != prefix+ms[1].MethodName {
		t.Fatalf("runner service's unary methods changed: %+v", ms)
	}
}

// The interceptor itself refuses any method spelling it does not list, even
// for an admin: grpc-go rejects malformed paths today, and this is the
// second line if a future release routes them again.
func TestAuthorizeDeniesUnlistedSpelling(t *testing.T) {
	leaf := &x509.Certificate{Subject: pkix.Name{CommonName: "ada", OrganizationalUnit: []string{pki.OperatorOU, pki.RoleOUPrefix + "admin"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{}, AuthInfo: credentials.TLSInfo{State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf}}}}})
	for _, m := range []string{"cure.v1.OperatorService/Watch", "/cure.v1.OperatorService/Watch/", "/cure.v1.operatorservice/watch", "/cure.v1.OperatorService/Delete", runnerSession} {
		if _, err := authorize(ctx, m, nil2rec(), nil); status.Code(err) != codes.PermissionDenied {
			t.Errorf("authorize(%q) as admin: %v, want PermissionDenied", m, err)
		}
	}
	if op, err := authorize(ctx, curev1.OperatorService_Provision_FullMethodName, nil2rec(), nil); err != nil || op.Role != pki.RoleAdmin {
		t.Fatalf("canonical Provision as admin: %+v %v", op, err)
	}
}

func nil2rec() *audit.Recorder { return audit.New(nil, slog.New(slog.DiscardHandler), 0) }

// Only a wipe needs admin: service flashes firmware but leaves the disks,
// an operator's action like provision.
func TestModeRole(t *testing.T) {
	for _, m := range modes.All() {
		want := pki.RoleOperator
		if m == modes.Wipe {
			want = pki.RoleAdmin
		}
		if got := ModeRole(m); got != want {
			t.Errorf("ModeRole(%s) = %s, want %s", m, got, want)
		}
	}
}

// A Provision's audit entry names its mode, manifest and every run started
// (as far as the entry's detail bound allows), and a failed call its error.
func TestRecordCallProvisionDetail(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "cure.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	rec := audit.New(st, slog.New(slog.DiscardHandler), 0)
	req := &curev1.ProvisionRequest{NodeIds: []string{"n1", "n2"}, Mode: curev1.Mode_MODE_PROVISION, Manifest: "gpu-a"}
	resp := &curev1.ProvisionResponse{Runs: []*curev1.RunRef{{NodeId: "n1", RunId: "r1"}, {NodeId: "n2", RunId: "r2"}}}
	op := Operator{Name: "alice", Role: pki.RoleOperator, Peer: "10.0.0.1:5"}
	recordCall(ctx, rec, op, "/cure.v1.OperatorService/Provision", req, resp, nil, 1500*time.Millisecond)
	recordCall(ctx, rec, op, "/cure.v1.OperatorService/Provision", req, nil, status.Error(codes.NotFound, "node n3 unknown"), time.Millisecond)
	got, err := st.AuditLog(ctx, store.AuditFilter{Kind: store.AuditOperator})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d entries, want 2", len(got))
	}
	failed, ok := got[0], got[1]
	if want := `duration=1.5s mode=MODE_PROVISION manifest="gpu-a" resume=false run=n1:r1 run=n2:r2`; ok.Detail != want {
		t.Errorf("detail %q, want %q", ok.Detail, want)
	}
	if !strings.HasSuffix(failed.Detail, " error=node n3 unknown") || failed.Result != "NotFound" {
		t.Errorf("failed call: detail %q result %q", failed.Detail, failed.Result)
	}
}
