package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/statedir"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testConfig is a coordinator on loopback with state in state, the example
// manifests and no image, metrics off.
func testConfig(state string) Config {
	c := DefaultConfig()
	c.StateDir, c.ManifestDir, c.ImageDir = state, "../../manifests/examples", filepath.Join(state, "no-image")
	c.HTTPListen, c.GRPCListen, c.Advertise, c.MetricsListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1", ""
	c.Conns.HTTPConns, c.Conns.GRPCConns = 16, 16
	return c
}

// serve is New and Serve of c, logging to log.
func serve(ctx context.Context, log *slog.Logger, c Config) error {
	c.Log = log
	co, err := New(c)
	if err != nil {
		return err
	}
	return co.Serve(ctx)
}

// The library on its own: a coordinator on a fresh state dir and loopback
// ports serves its health and boot endpoints, and returns nil soon after
// its context ends; it serves once.
func TestServeAndShutdown(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	c := testConfig(state)
	c.MetricsListen = "127.0.0.1:0"
	c.Log = quiet()
	co, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- co.Serve(ctx) }()
	select {
	case <-co.Ready():
	case err := <-done:
		t.Fatalf("Serve returned before it was ready: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("not ready after 60 s")
	}
	a := co.Addrs()
	if a.HTTP == "" || a.GRPC == "" || a.Metrics == "" || a.HTTPS != "" || a.Web != "" || strings.HasSuffix(a.HTTP, ":0") {
		t.Fatalf("Addrs = %+v", a)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, u := range []string{"http://" + a.Metrics + "/healthz", "http://" + a.Metrics + "/readyz"} {
		resp, err := hc.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s", u, resp.Status)
		}
	}
	// The boot server answers too (a MAC it does not know is refused, not
	// dropped).
	resp, err := hc.Get("http://" + a.HTTP + "/boot.ipxe")
	if err != nil {
		t.Fatalf("boot server: %v", err)
	}
	resp.Body.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve after cancel: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return within 30 s of its context's end")
	}
	if _, err := hc.Get("http://" + a.HTTP + "/boot.ipxe"); err == nil {
		t.Error("the boot server still answers after Serve returned")
	}
	if err := co.Serve(context.Background()); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a second Serve: %v", err)
	}
}

// A start that fails once the servers serve (here: --pprof-listen off
// loopback, checked last) returns the error and leaves nothing listening.
func TestFailedStartStopsServers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := testConfig(filepath.Join(t.TempDir(), "state"))
	c.HTTPListen, c.PprofListen = addr, "0.0.0.0:0"
	err = serve(context.Background(), quiet(), c)
	if err == nil || !strings.Contains(err.Error(), "--pprof-listen") {
		t.Fatalf("start with pprof off loopback: %v", err)
	}
	if conn, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
		conn.Close()
		t.Fatalf("the boot server still listens on %s after the failed start", addr)
	}
}

// New refuses a claim settle that is not positive, naming its flag.
func TestNewChecksConfig(t *testing.T) {
	c := testConfig(t.TempDir())
	c.ClaimSettle = 0
	if _, err := New(c); err == nil || !strings.Contains(err.Error(), "--claim-settle") {
		t.Fatalf("New with no claim settle: %v", err)
	}
}

// Two coordinators on one state dir would drive the same nodes: the second
// refuses to start and names the first.
func TestSecondCoordinatorRefused(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { first <- serve(ctx, log, testConfig(state)) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(state, statedir.LockFile))
		if strings.TrimSpace(string(b)) != "" {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("first coordinator did not take the lock: %v", <-first)
		}
		time.Sleep(20 * time.Millisecond)
	}
	err := serve(context.Background(), log, testConfig(state))
	if !errors.Is(err, statedir.ErrLocked) || !strings.Contains(err.Error(), "pid ") {
		t.Fatalf("second coordinator: %v, want refused with the holder's pid", err)
	}
	select {
	case err := <-first:
		t.Fatalf("the first coordinator stopped: %v", err)
	default:
	}
	cancel()
	if err := <-first; err != nil {
		t.Fatalf("first coordinator: %v", err)
	}
	// Stopped, the state dir is free again, and it was kept private.
	if st, err := os.Stat(state); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("state dir: %v %v, want 0700", st.Mode(), err)
	}
	if st, err := os.Stat(filepath.Join(state, statedir.DBFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("database: %v, want 0600", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel2()
	if err := serve(ctx2, log, testConfig(state)); err != nil {
		t.Fatalf("restart after the first stopped: %v", err)
	}
}

// The server certificate carries --advertise, the loopback names and every
// --tls-name, so curectl --server can verify the name an operator types.
func TestServerHostsTLSNames(t *testing.T) {
	got := ServerHosts("10.9.8.7", "coord-a.dc1", "vip.dc1, localhost", "10.9.8.7")
	want := []string{"10.9.8.7", "127.0.0.1", "localhost", "coord-a.dc1", "vip.dc1"}
	if !slices.Equal(got, want) {
		t.Fatalf("ServerHosts = %q, want %q", got, want)
	}
	cert, err := pki.IssueServerCert(t.TempDir(), got)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range want {
		if err := cert.Leaf.VerifyHostname(name); err != nil {
			t.Errorf("certificate does not carry %s: %v", name, err)
		}
	}
	if err := cert.Leaf.VerifyHostname("coord-b.dc1"); err == nil {
		t.Error("certificate carries coord-b.dc1, never given")
	}
}

// At start, a node whose MACs match none of the NICs its last boot
// reported is warned about.
func TestWarnUnlistedNICs(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "cure.db"), store.WithStateKey(bytes.Repeat([]byte{3}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	nodes := []store.Node{
		{ID: "typo", BMCURL: "https://10.0.0.1", BMCUser: "u", BMCPassword: "p", MACs: []string{"52:54:00:c0:de:01"}},
		{ID: "fine", BMCURL: "https://10.0.0.2", BMCUser: "u", BMCPassword: "p", MACs: []string{"52:54:00:c0:de:02"}},
		{ID: "new", BMCURL: "https://10.0.0.3", BMCUser: "u", BMCPassword: "p", MACs: []string{"52:54:00:c0:de:03"}},
	}
	if _, _, err := st.PutNodes(ctx, nodes, true); err != nil {
		t.Fatal(err)
	}
	for id, mac := range map[string]string{"typo": "52:54:00:c0:de:99", "fine": "52:54:00:c0:de:02"} {
		if err := st.CreateRun(ctx, store.Run{ID: "r-" + id, NodeID: id, Mode: "provision", Status: curev1.RunStatus_RUN_SUCCEEDED, StartedAt: time.Now(), EndedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.PutInventory(ctx, store.InventoryRecord{NodeID: id, RunID: "r-" + id, BootID: "b-" + id, Time: time.Now(),
			JSON: fmt.Appendf(nil, `{"nics":[{"name":"eth0","mac":%q}]}`, mac)}); err != nil {
			t.Fatal(err)
		}
	}
	var logb bytes.Buffer
	warnUnlistedNICs(ctx, st, nodes, slog.New(slog.NewTextHandler(&logb, nil)))
	got := logb.String()
	if !strings.Contains(got, "node=typo macs=52:54:00:c0:de:01 reported=52:54:00:c0:de:99 boot=b-typo") || strings.Count(got, "level=WARN") != 1 {
		t.Errorf("warnings:\n%s", got)
	}
}
