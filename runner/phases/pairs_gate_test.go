package phases

import (
	"bytes"
	"context"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/tools/checks"
	"github.com/cure-oss/cure/tools/checks/measure"
	"github.com/cure-oss/cure/tools/checks/paircheck"
	"github.com/cure-oss/cure/tools/checks/suite"
)

// echoBackend stands in for the tool on loopback: it echoes and counts
// the connections that reached it.
func echoBackend(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String(), &n
}

func dialFrom(t *testing.T, from, to string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", to)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", to, from, err)
	}
	return c
}

// closedSoon: the peer closes c without a byte of the backend's.
func closedSoon(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("%s: not closed by the gate: %v", what, err)
	}
	if bytes.Contains(b, []byte("ping")) {
		t.Fatalf("%s: reached the backend", what)
	}
}

// TestPairServerPartnerOnly: the test server's gate binds the node's own
// address only; a connection from another address is closed at once (it
// cannot hold the server), one from the partner's address without the
// slot's secret is refused, a silent one does not block the partner, and
// only the partner's end of the gate, proving the secret, reaches the
// tool. Over real iperf3 (when the host has it) a whole link is measured
// through both ends.
func TestPairServerPartnerOnly(t *testing.T) {
	const own, partner, intruder = "127.0.0.11", "127.0.0.12", "127.0.0.13"
	secret := bytes.Repeat([]byte{7}, 32)
	backend, reached := echoBackend(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	port, err := freeLoopbackPort()
	if err != nil {
		t.Fatal(err)
	}
	g, err := startServerGate(ctx, own, partner, port, secret, backend)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(own, strconv.Itoa(port))
	if got := g.ln.Addr().String(); got != addr {
		t.Fatalf("gate listens on %s, want only %s", got, addr)
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second); err == nil {
		c.Close()
		t.Fatal("the gate answers on another address than the node's own")
	}

	// An intruder connects first and would hold the server: closed at once.
	squatter := dialFrom(t, intruder, addr)
	closedSoon(t, squatter, "another address")
	// A silent connection from the partner's address holds one
	// handshake slot for a while, never the server.
	silent := dialFrom(t, partner, addr)
	defer silent.Close()
	// The partner's address with a wrong secret.
	wrong, err := startClientGate(ctx, partner, own, port, bytes.Repeat([]byte{8}, 32))
	if err != nil {
		t.Fatal(err)
	}
	wc := dialFrom(t, "127.0.0.1", net.JoinHostPort("127.0.0.1", strconv.Itoa(wrong.localPort())))
	wc.Write([]byte("ping"))
	closedSoon(t, wc, "a wrong secret")
	if e := wrong.refused.lastErr(); e == nil || !strings.Contains(e.Error(), "refused our proof") {
		t.Errorf("the wrong secret's end says %v", e)
	}
	// A raw peer on the partner's address that sends garbage.
	raw := dialFrom(t, partner, addr)
	raw.Write(bytes.Repeat([]byte("x"), 80))
	closedSoon(t, raw, "garbage proof")
	if n := reached.Load(); n != 0 {
		t.Fatalf("%d refused connection(s) reached the tool", n)
	}

	// The partner's end, with the secret, gets through while the silent
	// one still waits.
	right, err := startClientGate(ctx, partner, own, port, secret)
	if err != nil {
		t.Fatal(err)
	}
	c := dialFrom(t, "127.0.0.1", net.JoinHostPort("127.0.0.1", strconv.Itoa(right.localPort())))
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "ping" {
		t.Fatalf("partner through the gate: %q, %v (refused: %v)", got, err, right.refused.lastErr())
	}
	if reached.Load() != 1 {
		t.Errorf("%d connection(s) reached the tool, want the partner's 1", reached.Load())
	}
	// The silent one is dropped when its handshake time is up.
	closedSoon(t, silent, "a silent connection")
	sum := g.refused.summary()
	for _, want := range []string{"from " + intruder + ", not the partner " + partner, "a wrong proof of the slot's secret", "no proof of the slot's secret"} {
		if !strings.Contains(sum, want) {
			t.Errorf("refusals %s lack %q", sum, want)
		}
	}
	// No secret, no gate: fail closed.
	if _, err := startServerGate(ctx, own, partner, port+1, nil, backend); err == nil || !strings.Contains(err.Error(), "sent none") {
		t.Errorf("gate without a secret: %v", err)
	}
	if _, err := startClientGate(ctx, partner, own, port, nil); err == nil {
		t.Error("client gate without a secret started")
	}

	t.Run("iperf3", func(t *testing.T) { iperfThroughGates(t, own, partner) })
}

// iperfThroughGates measures one link with the host's iperf3 through the
// runner's slot code, both ends, as on a node.
func iperfThroughGates(t *testing.T, serverAddr, clientAddr string) {
	if _, err := exec.LookPath("iperf3"); err != nil {
		t.Skip("no iperf3 on this host")
	}
	port, err := freeLoopbackPort()
	if err != nil {
		t.Fatal(err)
	}
	secret := bytes.Repeat([]byte{9}, 32)
	run := func(ctx context.Context, r measure.Request) ([]checks.Verdict, error) {
		return measure.Run(ctx, r, checks.HostTools, t.TempDir())
	}
	emit := &recEmitter{}
	pr := &pairRunner{e: New(Config{Root: t.TempDir()}), emit: emit, measure: run}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := suite.PairConfig{Check: "pairs", Transport: paircheck.Ethernet}
	sched := &curev1.PairSchedule{Check: "pairs", DurationMs: 1000}
	slot := func(role, addr, partner string) *curev1.PairSlot {
		return &curev1.PairSlot{Round: 0, Role: role, Partner: "n-" + partner, Port: "eth0", Address: addr, PartnerPort: "eth0",
			PartnerAddress: partner, TcpPort: uint32(port), Transport: paircheck.Ethernet, Secret: secret}
	}
	done := make(chan struct{})
	go func() { defer close(done); pr.slot(ctx, cfg, sched, slot("server", serverAddr, clientAddr)) }()
	pr.slot(ctx, cfg, sched, slot("client", clientAddr, serverAddr))
	if len(emit.results) != 1 || emit.results[0].GetError() != "" || emit.results[0].GetForward() <= 0 || emit.results[0].GetReverse() <= 0 {
		t.Fatalf("result %v", emit.results)
	}
	t.Logf("through both gates: forward %g, reverse %g %s", emit.results[0].GetForward(), emit.results[0].GetReverse(), emit.results[0].GetUnit())
	cancel()
	<-done
}
