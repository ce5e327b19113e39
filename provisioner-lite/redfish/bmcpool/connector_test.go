package bmcpool

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/qemu-test/vbmc"
)

func writeCAFile(t *testing.T, path string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: filepath.Base(path)},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestBMCEndpointPolicy(t *testing.T) {
	dir := t.TempDir()
	siteCA, nodeCA := filepath.Join(dir, "site.pem"), filepath.Join(dir, "node.pem")
	writeCAFile(t, siteCA)
	writeCAFile(t, nodeCA)
	b, err := NewConnector(siteCA, time.Second, quiet())
	if err != nil {
		t.Fatal(err)
	}
	pin := "sha256:" + strings.Repeat("ab", 32)
	base := store.Node{BMCURL: "https://10.0.0.1", BMCUser: "admin", BMCPassword: "pw"}
	with := func(id string, f func(*store.Node)) store.Node { n := base; n.ID = id; f(&n); return n }
	pinned := with("pinned", func(n *store.Node) { n.BMCFingerprint = pin })
	ownCA := with("own-ca", func(n *store.Node) { n.BMCCAFile = nodeCA })
	defCA := with("default-ca", func(*store.Node) {})
	insecure := with("insecure", func(n *store.Node) { n.BMCInsecure = true; n.BMCURL = "http://10.0.0.1" })

	ep, err := b.Endpoint(pinned)
	if err != nil || ep.Fingerprint != pin || ep.RootCAs != nil || ep.Insecure || ep.Password != "pw" {
		t.Errorf("pinned node: %+v, %v; want the pin and no CA pool", ep, err)
	}
	epOwn, err := b.Endpoint(ownCA)
	if err != nil || epOwn.RootCAs == nil || epOwn.Fingerprint != "" {
		t.Fatalf("node with caFile: %+v, %v", epOwn, err)
	}
	epDef, err := b.Endpoint(defCA)
	if err != nil || epDef.RootCAs == nil {
		t.Fatalf("node without caFile: %+v, %v", epDef, err)
	}
	if epOwn.RootCAs.Equal(epDef.RootCAs) {
		t.Error("the node's caFile did not override --bmc-ca")
	}
	ep, err = b.Endpoint(insecure)
	if err != nil || !ep.Insecure || ep.RootCAs != nil || ep.Fingerprint != "" {
		t.Errorf("insecure node: %+v, %v", ep, err)
	}
	// CA files are read once: gone from disk, the pools still serve.
	os.Remove(nodeCA)
	os.Remove(siteCA)
	if again, err := b.Endpoint(ownCA); err != nil || again.RootCAs != epOwn.RootCAs {
		t.Errorf("second endpoint for the same caFile: new pool %v or error %v", again.RootCAs != epOwn.RootCAs, err)
	}
	// No --bmc-ca and no caFile: nil, the system roots.
	sys, _ := NewConnector("", time.Second, quiet())
	if ep, err := sys.Endpoint(defCA); err != nil || ep.RootCAs != nil {
		t.Errorf("without --bmc-ca: %+v, %v; want nil RootCAs (system roots)", ep, err)
	}
	if _, err := NewConnector(filepath.Join(dir, "missing.pem"), time.Second, quiet()); err == nil || !strings.Contains(err.Error(), "--bmc-ca") {
		t.Errorf("missing --bmc-ca file: %v", err)
	}
	if _, err := b.Endpoint(with("nopw", func(n *store.Node) { n.BMCPassword = "" })); err == nil || !strings.Contains(err.Error(), "node nopw") {
		t.Errorf("node without a password: %v", err)
	}
}

// The ConnectBMC the coordinator uses verifies a pinned virtual BMC, reads
// its password from the environment, and refuses an unpinned one.
func TestBMCConnectPinned(t *testing.T) {
	bm, err := vbmc.New(vbmc.Config{Name: "n1", Logger: quiet()}, vbmc.NewFakeMachine())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := vbmc.Listen("127.0.0.1:0", bm, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	t.Setenv("CURE_TEST_BMC_PASSWORD", "password")
	b, _ := NewConnector("", 5*time.Second, quiet())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := store.Node{ID: "n1", BMCURL: srv.URL, BMCUser: "admin", BMCPasswordRef: "env:CURE_TEST_BMC_PASSWORD", BMCFingerprint: srv.Fingerprint()}
	c, err := b.Connect(ctx, n)
	if err != nil {
		t.Fatalf("pinned BMC: %v", err)
	}
	if ps, err := c.PowerState(ctx); err != nil || ps != "Off" {
		t.Fatalf("PowerState = %q, %v", ps, err)
	}
	c.Close(ctx)
	n.BMCFingerprint = ""
	if _, err := b.Connect(ctx, n); err == nil || !strings.Contains(err.Error(), "fingerprint: "+srv.Fingerprint()) {
		t.Fatalf("unpinned self-signed BMC: %v; want a refusal naming its fingerprint", err)
	}
}
