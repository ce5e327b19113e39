package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/statedir"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

func testConfig(state string) config {
	return config{
		stateDir: state, manifestDir: "../../../manifests/examples", imageDir: filepath.Join(state, "no-image"),
		httpListen: "127.0.0.1:0", grpcListen: "127.0.0.1:0", advertise: "127.0.0.1",
		eventLimits: store.DefaultEventLimits, retention: store.DefaultRetention,
		conns: connFlags{httpConns: 16, grpcConns: 16}, tokensPerWindow: 6, bindBootIP: true,
	}
}

// Two coordinators on one state dir would drive the same nodes: the second
// refuses to start and names the first.
func TestSecondCoordinatorRefused(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { first <- run(ctx, log, testConfig(state)) }()
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
	err := run(context.Background(), log, testConfig(state))
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
	if err := run(ctx2, log, testConfig(state)); err != nil {
		t.Fatalf("restart after the first stopped: %v", err)
	}
}

// The server certificate carries --advertise, the loopback names and every
// --tls-name, so curectl --server can verify the name an operator types.
func TestServerHostsTLSNames(t *testing.T) {
	got := serverHosts("10.9.8.7", "coord-a.dc1", "vip.dc1, localhost", "10.9.8.7")
	want := []string{"10.9.8.7", "127.0.0.1", "localhost", "coord-a.dc1", "vip.dc1"}
	if !slices.Equal(got, want) {
		t.Fatalf("serverHosts = %q, want %q", got, want)
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
