package transport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// newCA returns a CA certificate PEM and a server certificate for 127.0.0.1 signed by it.
func newCA(t *testing.T) ([]byte, tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "coordinator"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestDialTLSWithIPSAN(t *testing.T) {
	caPEM, cert := newCA(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewServerTLSFromCert(&cert)))
	c := &coordinator{t: t, cutAfter: 1 << 62, toSend: make(chan *curev1.CoordinatorMessage)}
	curev1.RegisterRunnerServiceServer(srv, c)
	go srv.Serve(lis)
	defer srv.Stop()

	caFile := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(caFile, caPEM, 0o644)
	conn, err := Dial(lis.Addr().String(), caFile)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s := NewSession(conn, func() *curev1.Hello { return &curev1.Hello{Token: "t"} }, SessionOptions{Log: quiet()})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go s.Run(ctx)
	if d, err := s.Next(ctx); err != nil || d.Idle == nil {
		t.Fatalf("over TLS: directive %+v, %v", d, err)
	}

	// A CA that did not sign the server certificate must not connect.
	otherCA, _ := newCA(t)
	bad := filepath.Join(t.TempDir(), "other.pem")
	os.WriteFile(bad, otherCA, 0o644)
	conn2, err := Dial(lis.Addr().String(), bad)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	if err := waitReady(ctx, conn2, 2*time.Second); err == nil {
		t.Fatal("connected with an untrusted CA")
	}
}

func TestDialErrors(t *testing.T) {
	if _, err := Dial("nohostport", "/nonexistent"); err == nil || !strings.Contains(err.Error(), "HOST:PORT") {
		t.Errorf("bad address: %v", err)
	}
	if _, err := Dial("h:1", "/nonexistent/ca.pem"); err == nil || !strings.Contains(err.Error(), "ca.pem") {
		t.Errorf("missing CA: %v", err)
	}
	f := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(f, []byte("not pem"), 0o644)
	if _, err := Dial("h:1", f); err == nil || !strings.Contains(err.Error(), "PEM") {
		t.Errorf("garbage CA: %v", err)
	}
}

func TestBootIDAndUptime(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "sys/kernel/random"), 0o755)
	os.WriteFile(filepath.Join(dir, "sys/kernel/random/boot_id"), []byte("0f3c-11\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "uptime"), []byte("4.62 7.10\n"), 0o644)
	if id, err := BootID(dir); err != nil || id != "0f3c-11" {
		t.Errorf("BootID = %q, %v", id, err)
	}
	if u, err := Uptime(dir); err != nil || u != 4620*time.Millisecond {
		t.Errorf("Uptime = %v, %v", u, err)
	}
}

// A runner told of several coordinator instances uses the first and, when
// it dies, carries on with the next: same session, events replayed there.
func TestDialFailsOverToNextCoordinator(t *testing.T) {
	caPEM, cert := newCA(t)
	start := func() (*grpc.Server, *coordinator, string) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer(grpc.Creds(credentials.NewServerTLSFromCert(&cert)))
		c := &coordinator{t: t, cutAfter: 1 << 62, toSend: make(chan *curev1.CoordinatorMessage)}
		curev1.RegisterRunnerServiceServer(srv, c)
		go srv.Serve(lis)
		t.Cleanup(srv.Stop)
		return srv, c, lis.Addr().String()
	}
	srvA, a, addrA := start()
	_, b, addrB := start()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(caFile, caPEM, 0o644)
	conn, err := Dial(addrA+","+addrB, caFile)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s := NewSession(conn, func() *curev1.Hello { return &curev1.Hello{Token: "t"} },
		SessionOptions{Log: quiet(), BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond, ConnectTimeout: 3 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go s.Run(ctx)
	if d, err := s.Next(ctx); err != nil || d.Idle == nil {
		t.Fatalf("first instance: directive %+v, %v", d, err)
	}
	hellos := func(c *coordinator) int { c.mu.Lock(); defer c.mu.Unlock(); return len(c.hellos) }
	if hellos(a) != 1 || hellos(b) != 0 {
		t.Fatalf("hellos a=%d b=%d; want the first instance only", hellos(a), hellos(b))
	}
	srvA.Stop()
	for hellos(b) == 0 {
		if ctx.Err() != nil {
			t.Fatal("the runner never reached the second instance after the first died")
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Emit(&curev1.Event{RunId: "r"})
	for s.Pending() != 0 {
		if ctx.Err() != nil {
			t.Fatal("event not acked by the second instance")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The runner speaks TLS 1.3 only, whatever the image's GODEBUG defaults.
func TestTLSConfigIsTLS13Only(t *testing.T) {
	caPEM, _ := newCA(t)
	cfg, err := TLSConfig(caPEM, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS13 {
		t.Errorf("MinVersion = %#x, want TLS 1.3", cfg.MinVersion)
	}
}
