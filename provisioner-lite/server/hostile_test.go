package server_test

// The hostile-peer suite (docs/SECURITY.md): each test is an attack tried the
// way a peer on the provisioning network would, with curl-like HTTP, a small
// gRPC client or raw HTTP/2 frames, against the real store, engine, boot
// server and gRPC services wired as provisioner-lite wires them. Each must fail.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/bootserver"
	"github.com/cure-oss/cure/provisioner-lite/catalog"
	"github.com/cure-oss/cure/provisioner-lite/metrics"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

type testNode struct{ id, mac, serial, run string }

var (
	nodeA = testNode{"nodeA", "52:54:00:aa:00:01", "SER-A", "runA"}
	nodeB = testNode{"nodeB", "52:54:00:bb:00:02", "SER-B", "runB"}
)

type hostile struct {
	t       *testing.T
	st      *store.Store
	eng     *pipeline.Engine
	hub     *sessions.Hub
	httpURL string
	grpc    string
	pkiDir  string
	caPEM   []byte
	starts  *startRecorder
	logs    *syncBuf
	metrics *metrics.Metrics
	// artifacts is the boot server's content-addressed store.
	artifacts string
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) { b.mu.Lock(); defer b.mu.Unlock(); return b.b.Write(p) }
func (b *syncBuf) String() string              { b.mu.Lock(); defer b.mu.Unlock(); return b.b.String() }

// startRecorder stands in for the engine's Start in operator tests: it
// records what an authorized operator would have started.
type startRecorder struct {
	mu    sync.Mutex
	calls []string
}

func (s *startRecorder) Start(_ context.Context, node string, mode modes.Mode, _ string, _ bool) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, node+":"+string(mode))
	return "run-" + node, nil
}

func (s *startRecorder) n() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.calls) }

type noAudit struct{}

func (noAudit) AuditDirect(context.Context, []string, string) []*curev1.NodeAudit { return nil }

// newHostile starts a coordinator: nodes A and B each have a provision run
// waiting for CURE (an open boot window), nobody drives them, so every change
// in the store is the attacker's doing or the defence's. Options adjust the
// runner service before it serves.
func newHostile(t *testing.T, runnerOpts ...func(*server.RunnerService)) *hostile {
	t.Helper()
	dir := t.TempDir()
	logs := &syncBuf{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	st, err := store.Open(filepath.Join(dir, "cure.db"), store.WithStateKey(bytes.Repeat([]byte{1}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	for _, n := range []testNode{nodeA, nodeB} {
		if err := st.UpsertNode(ctx, store.Node{ID: n.id, BMCURL: "https://192.0.2.1", BMCUser: "admin", BMCPassword: "pw", MACs: []string{n.mac}, SystemSerial: n.serial,
			PSIDs: map[string]string{"DISK-" + n.id: strings.Repeat("P", 32)}}); err != nil {
			t.Fatal(err)
		}
		if err := st.CreateRun(ctx, store.Run{ID: n.run, NodeID: n.id, Mode: "provision", Manifest: "m", Status: curev1.RunStatus_RUN_RUNNING, Phase: modes.WaitForCURE,
			StartedAt: time.Now(), Pipeline: store.PipelineState{Boot: store.BootCURE, CUREWindow: "w1"}}); err != nil {
			t.Fatal(err)
		}
	}
	rec := audit.New(st, log, 0)
	hub := sessions.NewHub()
	ectx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	eng := pipeline.New(ectx, pipeline.Config{Store: st, Hub: hub, Log: log, Audit: rec, Manifests: &catalog.Catalog{Dir: dir},
		BaseURL: "http://10.0.0.1:8080", RunnerAddr: "10.0.0.1:8443",
		Timeouts: pipeline.Timeouts{WaitForCURE: 10 * time.Minute, HostOS: time.Minute}})
	img := t.TempDir()
	for _, f := range []string{bootserver.Kernel, bootserver.InitramfsGzip} {
		if err := os.WriteFile(filepath.Join(img, f), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The flood tests open up to 32 connections from one address: room above
	// that, so the per-source cap (a listener test's subject) never decides them.
	artifacts := t.TempDir()
	bs, err := bootserver.New(bootserver.Config{ImageDir: img, ArtifactDir: artifacts, BaseURL: "http://10.0.0.1:8080", Logger: log,
		Limits: bootserver.Limits{MaxConnsPerSource: 256}}, eng)
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := bs.HTTPServer()
	go hs.Serve(bs.Listener(hl))
	t.Cleanup(func() { hs.Close() })

	pkiDir := filepath.Join(dir, "pki")
	tlsCfg, err := pki.ServerTLSConfig(pkiDir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := pki.EnsureCA(pkiDir)
	opts := append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))}, server.ServerOptions(server.Limits{})...)
	opts = append(opts, server.OperatorAuth(rec, log)...)
	gs := grpc.NewServer(opts...)
	starts := &startRecorder{}
	m := metrics.New(metrics.Options{})
	rs := &server.RunnerService{Store: st, Hub: hub, Log: log, Audit: rec, Guard: eng, BindPeer: true,
		HelloTimeout: time.Second, MaxPendingHellos: 64, Metrics: m}
	for _, o := range runnerOpts {
		o(rs)
	}
	curev1.RegisterRunnerServiceServer(gs, rs)
	curev1.RegisterOperatorServiceServer(gs, &server.OperatorService{Store: st, Starter: starts, Auditor: noAudit{}})
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(gl)
	t.Cleanup(gs.Stop)
	return &hostile{t: t, st: st, eng: eng, hub: hub, httpURL: "http://" + hl.Addr().String(), grpc: gl.Addr().String(),
		pkiDir: pkiDir, caPEM: caPEM, starts: starts, logs: logs, metrics: m, artifacts: artifacts}
}

var tokenRE = regexp.MustCompile(`cure\.token=([0-9a-f]+)`)

// fetchToken is `curl /ipxe/<mac>`: what anyone on the network can do.
func (h *hostile) fetchToken(mac string) string {
	h.t.Helper()
	resp, err := http.Get(h.httpURL + "/ipxe/" + mac)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := tokenRE.FindSubmatch(b)
	if resp.StatusCode != 200 || m == nil {
		h.t.Fatalf("GET /ipxe/%s: %d, no token:\n%s", mac, resp.StatusCode, b)
	}
	return string(m[1])
}

func (h *hostile) conn(local string, cert *tls.Certificate) *grpc.ClientConn {
	h.t.Helper()
	cfg, err := pki.ClientTLSConfig(h.caPEM, "127.0.0.1", cert)
	if err != nil {
		h.t.Fatal(err)
	}
	dial := grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		d := net.Dialer{}
		if local != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
		}
		return d.DialContext(ctx, "tcp", addr)
	})
	c, err := grpc.NewClient(h.grpc, grpc.WithTransportCredentials(credentials.NewTLS(cfg)), dial)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

type helloOpts struct {
	token, boot, secret string
	node                testNode // identity the runner claims
	from                string   // local address to dial from
	inv                 *curev1.Inventory
}

// session opens a runner session and says Hello.
func (h *hostile) session(o helloOpts) (curev1.RunnerService_SessionClient, context.CancelFunc) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	stream, err := curev1.NewRunnerServiceClient(h.conn(o.from, nil)).Session(ctx)
	if err != nil {
		cancel()
		h.t.Fatal(err)
	}
	if o.secret == "" {
		o.secret = "secret-of-" + o.boot + strings.Repeat("x", 32)
	}
	err = stream.Send(&curev1.RunnerMessage{Msg: &curev1.RunnerMessage_Hello{Hello: &curev1.Hello{
		Token: o.token, BootId: o.boot, SessionSecret: o.secret,
		Identity:  &curev1.Identity{BootMac: o.node.mac, SystemSerial: o.node.serial, NodeId: o.node.id},
		Inventory: o.inv,
	}}})
	if err != nil {
		cancel()
		h.t.Fatal(err)
	}
	return stream, cancel
}

// send sends an event and returns the coordinator's answer: nil for an ack.
func send(stream curev1.RunnerService_SessionClient, ev *curev1.Event) error {
	if err := stream.Send(&curev1.RunnerMessage{Msg: &curev1.RunnerMessage_Event{Event: ev}}); err != nil {
		_, rerr := stream.Recv()
		return rerr
	}
	m, err := stream.Recv()
	if err != nil {
		return err
	}
	if m.GetAck().GetSeq() != ev.GetSeq() {
		return fmt.Errorf("answer %v, want ack of seq %d", m, ev.GetSeq())
	}
	return nil
}

func logEvent(seq uint64, run, msg string) *curev1.Event {
	return &curev1.Event{Seq: seq, RunId: run, TimeUnixMs: time.Now().UnixMilli(), Body: &curev1.Event_Log{Log: &curev1.Log{Level: "INFO", Message: msg}}}
}

func verdictEvent(seq uint64, run string) *curev1.Event {
	return &curev1.Event{Seq: seq, RunId: run, Phase: string(modes.SEDRevert), TimeUnixMs: time.Now().UnixMilli(), Body: &curev1.Event_Verdict{Verdict: &curev1.Verdict{
		Component: "disk/nvme0n1", Check: "wipe", Status: curev1.VerdictStatus_PASS, Observed: "psid-revert", Message: "marker gone"}}}
}

func (h *hostile) run(id string) store.Run {
	h.t.Helper()
	r, err := h.st.GetRun(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

func (h *hostile) runnerEvents(run string) []store.Event {
	h.t.Helper()
	evs, err := h.st.Events(context.Background(), run, 0, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []store.Event
	for _, e := range evs {
		if e.Source == "runner" {
			out = append(out, e)
		}
	}
	return out
}

func (h *hostile) security(action string) []store.AuditEntry {
	h.t.Helper()
	all, err := h.st.AuditLog(context.Background(), store.AuditFilter{Kind: store.AuditSecurity, Limit: 10000})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []store.AuditEntry
	for _, a := range all {
		if a.Action == action {
			out = append(out, a)
		}
	}
	return out
}

func codeOf(err error) codes.Code { return status.Code(err) }

// Node A's token cannot write into node B's run: not by naming B's run in an
// event, not by claiming B's identity. What A writes lands in A's run only.
func TestHostileRunnerCannotWriteOtherRun(t *testing.T) {
	h := newHostile(t)
	tokA := h.fetchToken(nodeA.mac)

	// A's token with B's MAC and serial: the token is A's, the hardware is not.
	s, cancel := h.session(helloOpts{token: tokA, boot: "evil", node: nodeB})
	if err := send(s, logEvent(1, "", "x")); codeOf(err) != codes.PermissionDenied {
		t.Fatalf("A's token presented as node B: %v, want PermissionDenied", err)
	}
	cancel()

	s, cancel = h.session(helloOpts{token: tokA, boot: "bootA", node: nodeA})
	defer cancel()
	if err := send(s, verdictEvent(1, "")); err != nil {
		t.Fatalf("A's own verdict: %v", err)
	}
	// The attack: an event that names B's run, a verdict "disk wiped" for B.
	err := send(s, verdictEvent(2, nodeB.run))
	if codeOf(err) != codes.PermissionDenied {
		t.Fatalf("event naming run B on A's session: %v, want PermissionDenied", err)
	}
	if evs := h.runnerEvents(nodeB.run); len(evs) != 0 {
		t.Fatalf("run B holds %d runner events after the attack: %+v", len(evs), evs)
	}
	if vs, _ := h.st.Verdicts(context.Background(), nodeB.run); len(vs) != 0 {
		t.Fatalf("run B holds verdicts: %+v", vs)
	}
	if vs, _ := h.st.Verdicts(context.Background(), nodeA.run); len(vs) != 1 || vs[0].Component != "disk/nvme0n1" {
		t.Fatalf("run A verdicts: %+v, want the one A sent", vs)
	}
	if got := h.security(audit.EventOtherRun); len(got) != 1 || got[0].Actor != nodeA.id || got[0].RunID != nodeA.run {
		t.Fatalf("security events for the attempt: %+v", got)
	}
	if got := h.security(audit.RunnerIdentity); len(got) != 1 || got[0].Actor != nodeA.id {
		t.Fatalf("security events for the identity claim: %+v", got)
	}
	// B's run is where it was: nothing moved it.
	if r := h.run(nodeB.run); r.Status != curev1.RunStatus_RUN_RUNNING || r.Phase != modes.WaitForCURE {
		t.Fatalf("run B after the attack: %s in %s", r.Status, r.Phase)
	}
}

// A boot token opens one boot's session: the same boot reconnects with its
// secret; anyone else presenting the token (sniffed off the plaintext iPXE
// script) is refused, and because two parties then claim the node, the run
// stops for an operator instead of trusting either.
func TestBootTokenSingleUse(t *testing.T) {
	h := newHostile(t)
	tok := h.fetchToken(nodeA.mac)

	s1, cancel1 := h.session(helloOpts{token: tok, boot: "boot1", node: nodeA})
	defer cancel1()
	if err := send(s1, logEvent(1, "", "first")); err != nil {
		t.Fatalf("first Hello: %v", err)
	}
	// The same boot reconnecting (stream cut): same secret, accepted.
	s2, cancel2 := h.session(helloOpts{token: tok, boot: "boot1", node: nodeA})
	defer cancel2()
	if err := send(s2, logEvent(2, "", "after reconnect")); err != nil {
		t.Fatalf("reconnect of the same boot: %v", err)
	}
	// The window is closed: no more tokens for this boot.
	resp, err := http.Get(h.httpURL + "/ipxe/" + nodeA.mac)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if tokenRE.Match(body) || !strings.Contains(string(body), "exit") {
		t.Fatalf("iPXE after registration handed out a token:\n%s", body)
	}
	// The attacker replays the token from its own boot.
	s3, cancel3 := h.session(helloOpts{token: tok, boot: "attacker", node: nodeA})
	defer cancel3()
	if err := send(s3, verdictEvent(3, "")); codeOf(err) != codes.PermissionDenied {
		t.Fatalf("reused token: %v, want PermissionDenied", err)
	}
	// Contested: the run stops, the legitimate-looking session is cut too.
	r := h.run(nodeA.run)
	if r.Status != curev1.RunStatus_RUN_ATTENTION || !strings.Contains(r.Message, "contested") || !strings.Contains(r.Message, "attacker") {
		t.Fatalf("run after a contested boot window: %s %q", r.Status, r.Message)
	}
	if err := send(s2, logEvent(3, "", "still here?")); err == nil {
		t.Fatal("the session of a contested run still takes events")
	}
	if vs, _ := h.st.Verdicts(context.Background(), nodeA.run); len(vs) != 0 {
		t.Fatalf("the replayed token wrote verdicts: %+v", vs)
	}
	if got := h.security(audit.BootWindowContested); len(got) != 1 {
		t.Fatalf("contest security events: %+v", got)
	}
	// The token of an ended run opens nothing, even for the boot that had it.
	s4, cancel4 := h.session(helloOpts{token: tok, boot: "boot1", node: nodeA})
	defer cancel4()
	if err := send(s4, logEvent(4, "", "x")); err == nil {
		t.Fatal("the bound token of a stopped run still opens a session")
	}
}

// fetchFrom is `curl --interface local /ipxe/<mac>`: the script's status
// and body.
func (h *hostile) fetchFrom(local, mac string) (int, string) {
	h.t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}).DialContext}}
	resp, err := c.Get(h.httpURL + "/ipxe/" + mac)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A boot window has one claimant, the address its first token went to. A
// second address asking for the node's iPXE script, or presenting the
// token in a Hello, is a second claimant: neither gets anything more, the
// run stops in attention naming both addresses, and a security event says
// so. A retry by the claimant is none (TestBootTokenRaceContested, in
// package pipeline, plays the whole race with the engine driving).
func TestSecondClaimantContests(t *testing.T) {
	h := newHostile(t)

	// Node A: a peer polls the script from 127.0.0.2 first, and asks again.
	for i := 0; i < 2; i++ {
		if code, body := h.fetchFrom("127.0.0.2", nodeA.mac); code != http.StatusOK || !tokenRE.MatchString(body) {
			t.Fatalf("the claimant's request %d: %d\n%s", i, code, body)
		}
	}
	// The node asks from its own address.
	code, body := h.fetchFrom("127.0.0.1", nodeA.mac)
	if code != http.StatusConflict || tokenRE.MatchString(body) || !strings.Contains(body, "exit") {
		t.Fatalf("the second claimant's script: %d, want 409 and no token:\n%s", code, body)
	}
	if code, body := h.fetchFrom("127.0.0.2", nodeA.mac); tokenRE.MatchString(body) {
		t.Fatalf("the first claimant after the contest: %d, got a token:\n%s", code, body)
	}
	r := h.run(nodeA.run)
	if r.Status != curev1.RunStatus_RUN_ATTENTION || !strings.Contains(r.Message, "127.0.0.1") || !strings.Contains(r.Message, "127.0.0.2") {
		t.Fatalf("run A after two claimants: %s %q, want attention naming both addresses", r.Status, r.Message)
	}

	// Node B: its token presented in a Hello from another address.
	tok := h.fetchToken(nodeB.mac) // from 127.0.0.1
	s, cancel := h.session(helloOpts{token: tok, boot: "peer", node: nodeB, from: "127.0.0.2"})
	if err := send(s, logEvent(1, "", "x")); codeOf(err) != codes.PermissionDenied {
		t.Fatalf("token from another address: %v, want PermissionDenied", err)
	}
	cancel()
	s, cancel = h.session(helloOpts{token: tok, boot: "boot1", node: nodeB})
	defer cancel()
	// (contested, or unknown once the stopped run's tokens are deleted)
	if err := send(s, logEvent(1, "", "x")); codeOf(err) != codes.PermissionDenied && codeOf(err) != codes.Unauthenticated {
		t.Fatalf("the claimant's own Hello after the contest: %v, want PermissionDenied or Unauthenticated", err)
	}
	r = h.run(nodeB.run)
	if r.Status != curev1.RunStatus_RUN_ATTENTION || !strings.Contains(r.Message, "127.0.0.1") || !strings.Contains(r.Message, "127.0.0.2") {
		t.Fatalf("run B after two claimants: %s %q, want attention naming both addresses", r.Status, r.Message)
	}
	second := map[string]string{}
	for _, e := range h.security(audit.BootWindowContested) {
		second[e.RunID] += e.Peer
	}
	if len(second) != 2 || second[nodeA.run] != "127.0.0.1" || second[nodeB.run] != "127.0.0.2" {
		t.Fatalf("contest security events by run: %v, want one per run from its second claimant", second)
	}
}

// A run that ended takes nothing more: its tokens open no session, a session
// still open is cut at its next event, and iPXE hands out no token.
func TestFinishedRunTokenRefused(t *testing.T) {
	h := newHostile(t)
	tok := h.fetchToken(nodeA.mac)
	s, cancel := h.session(helloOpts{token: tok, boot: "boot1", node: nodeA})
	defer cancel()
	if err := send(s, logEvent(1, "", "working")); err != nil {
		t.Fatal(err)
	}
	spare := h.fetchToken(nodeB.mac) // an unused token of the other run, ended below too

	// Both runs end as the store records it; no cleanup ran (as after a crash).
	for _, id := range []string{nodeA.run, nodeB.run} {
		r := h.run(id)
		r.Status, r.EndedAt = curev1.RunStatus_RUN_SUCCEEDED, time.Now()
		if err := h.st.UpdateRun(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	if err := send(s, verdictEvent(2, "")); codeOf(err) != codes.FailedPrecondition {
		t.Fatalf("event of a finished run on an open session: %v, want FailedPrecondition", err)
	}
	for _, c := range []helloOpts{
		{token: tok, boot: "boot1", node: nodeA},  // the boot that had it
		{token: spare, boot: "late", node: nodeB}, // never used
	} {
		s, cancel := h.session(c)
		err := send(s, logEvent(1, "", "x"))
		cancel()
		if code := codeOf(err); code != codes.FailedPrecondition && code != codes.Unauthenticated {
			t.Fatalf("Hello with a token of finished run (%s): %v", c.boot, err)
		}
	}
	if vs, _ := h.st.Verdicts(context.Background(), nodeA.run); len(vs) != 0 {
		t.Fatalf("verdicts added to a finished run: %+v", vs)
	}
	resp, err := http.Get(h.httpURL + "/ipxe/" + nodeA.mac)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if tokenRE.Match(body) {
		t.Fatalf("iPXE for a finished run handed out a token:\n%s", body)
	}
	// The maintenance pass deletes what the crash left behind: the unused
	// token at once, the binding of the boot that registered (which lets
	// that boot be told its run ended) once it expired.
	if n, err := h.st.PruneBootTokens(context.Background(), time.Now().Add(-time.Hour)); err != nil || n != 1 {
		t.Fatalf("PruneBootTokens after the runs ended: %d %v, want the unused token", n, err)
	}
	if n, err := h.st.PruneBootTokens(context.Background(), time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("PruneBootTokens past the binding's expiry: %d %v, want the binding", n, err)
	}
}

// waitHost puts run A where the pipeline waits for the installed OS.
func (h *hostile) waitHost(token string, rebooted time.Time) {
	h.t.Helper()
	r := h.run(nodeA.run)
	r.Phase = modes.WaitForHostOS
	r.Pipeline.Boot = store.BootDisk
	r.Pipeline.HostTokens = nil
	r.Pipeline.AddHostToken(store.TokenHash(token))
	r.Pipeline.Host.WaitFrom = 7
	r.Pipeline.Host.RebootedAt = rebooted // zero: not rebooted yet
	if err := h.st.UpdateRun(context.Background(), r); err != nil {
		h.t.Fatal(err)
	}
}

func (h *hostile) callback(node, token string) int {
	h.t.Helper()
	req, _ := http.NewRequest("POST", h.httpURL+"/v1/nodes/"+node+"/ready", strings.NewReader(url.Values{"hostname": {"n"}}.Encode()))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func (h *hostile) hostReadyEvents() int {
	evs, _ := h.st.Events(context.Background(), nodeA.run, 0, 0)
	n := 0
	for _, e := range evs {
		if e.Kind == runstate.EventHostReady {
			n++
		}
	}
	return n
}

// The installed OS's callback counts once, after the reboot out of CURE,
// within the wait, with the token of the last install.
func TestHostCallbackOnce(t *testing.T) {
	h := newHostile(t)
	const tok = "host-token-0123456789abcdef0123456789abcdef0123456789abcdef"
	h.waitHost(tok, time.Time{})
	if code := h.callback(nodeA.id, tok); code != 401 {
		t.Fatalf("callback before the reboot: %d, want 401", code)
	}
	h.waitHost(tok, time.Now())
	// CURE still connected for the run: the installed OS cannot be up.
	rt := h.fetchTokenAfterReopen()
	s, cancel := h.session(helloOpts{token: rt, boot: "cure", node: nodeA})
	if err := send(s, logEvent(1, "", "still in CURE")); err != nil {
		t.Fatal(err)
	}
	if code := h.callback(nodeA.id, tok); code != 401 {
		t.Fatalf("callback while CURE is connected: %d, want 401", code)
	}
	cancel()
	waitFor(t, func() bool { return h.hub.Current(nodeA.id) == nil })
	h.waitHost(tok, time.Now())
	if code := h.callback(nodeA.id, "wrong"+tok[5:]); code != 401 {
		t.Fatalf("callback with a wrong token: %d, want 401", code)
	}
	if code := h.callback(nodeB.id, tok); code != 401 {
		t.Fatalf("A's token on B's callback: %d, want 401", code)
	}
	if code := h.callback(nodeA.id, tok); code != 200 {
		t.Fatalf("the real callback: %d, want 200", code)
	}
	if code := h.callback(nodeA.id, tok); code != 401 {
		t.Fatalf("replayed callback: %d, want 401", code)
	}
	if n := h.hostReadyEvents(); n != 1 {
		t.Fatalf("host_ready events: %d, want 1", n)
	}
	// After success.
	r := h.run(nodeA.run)
	r.Status, r.Phase = curev1.RunStatus_RUN_SUCCEEDED, modes.WaitForHostOS
	if err := h.st.UpdateRun(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if code := h.callback(nodeA.id, tok); code != 401 {
		t.Fatalf("callback after the run succeeded: %d, want 401", code)
	}
	// Expired: a wait that ended long ago.
	r.Status = curev1.RunStatus_RUN_RUNNING
	if err := h.st.UpdateRun(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	h.waitHost(tok, time.Now().Add(-2*time.Minute))
	r = h.run(nodeA.run)
	r.Pipeline.Host.WaitFrom = 8 // a new wait: only the expiry refuses
	if err := h.st.UpdateRun(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if code := h.callback(nodeA.id, tok); code != 401 {
		t.Fatalf("callback after the wait expired: %d, want 401", code)
	}
	if n := h.hostReadyEvents(); n != 1 {
		t.Fatalf("host_ready events after the refusals: %d, want 1", n)
	}
	if got := h.security(audit.HostCallback); len(got) == 0 {
		t.Fatal("refused callbacks left no security event")
	}
	// The token is checked before the body is read: a bad token with a
	// body that never comes is answered at once.
	c, err := net.Dial("tcp", strings.TrimPrefix(h.httpURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/nodes/nodeA/ready HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000000\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 401 {
		t.Fatalf("bad token with a pending body: %v %v, want an immediate 401", resp, err)
	}
}

// fetchTokenAfterReopen opens a new boot window on run A (as a reboot into
// CURE does) and fetches a token for it.
func (h *hostile) fetchTokenAfterReopen() string {
	h.t.Helper()
	r := h.run(nodeA.run)
	boot := r.Pipeline.Boot
	r.Pipeline.Boot = store.BootCURE
	r.Pipeline.CUREWindow = fmt.Sprintf("w%d", time.Now().UnixNano())
	if err := h.st.UpdateRun(context.Background(), r); err != nil {
		h.t.Fatal(err)
	}
	tok := h.fetchToken(nodeA.mac)
	r = h.run(nodeA.run)
	r.Pipeline.Boot = boot
	if err := h.st.UpdateRun(context.Background(), r); err != nil {
		h.t.Fatal(err)
	}
	return tok
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rawGRPC sends one gRPC request with hand-made HTTP/2 frames, so the :path
// is exactly what the attacker writes (a generated client always adds the
// slash). It returns the response's gRPC status and the DATA it carried.
func rawGRPC(t *testing.T, addr string, cfg *tls.Config, path string, req proto.Message) (grpcStatus string, data []byte) {
	t.Helper()
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":path", path}, {":authority", addr},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	msg, _ := proto.Marshal(req)
	frame := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(msg)))
	if err := fr.WriteData(1, true, append(frame, msg...)); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return grpcStatus + "(conn: " + err.Error() + ")", data
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				fr.WritePing(true, f.Data)
			}
		case *http2.MetaHeadersFrame:
			for _, hf := range f.Fields {
				if hf.Name == "grpc-status" {
					grpcStatus = hf.Value
				}
			}
			if f.StreamEnded() {
				return grpcStatus, data
			}
		case *http2.DataFrame:
			data = append(data, f.Data()...)
			if f.StreamEnded() {
				return grpcStatus, data
			}
		case *http2.RSTStreamFrame:
			return grpcStatus + "(rst " + f.ErrCode.String() + ")", data
		case *http2.GoAwayFrame:
			return grpcStatus + "(goaway)", data
		}
	}
}

// The operator API without a leading slash in :path (and other spellings)
// streamed a node's whole timeline with grpc v1.72.0 and no certificate.
func TestOperatorPathWithoutSlashDenied(t *testing.T) {
	h := newHostile(t)
	for i := 0; i < 3; i++ { // a timeline worth stealing
		if _, _, err := h.st.AppendEvent(context.Background(), store.Event{RunID: nodeA.run, NodeID: nodeA.id, Source: "coordinator", Kind: "info", Message: fmt.Sprintf("secret step %d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	anon, err := pki.ClientTLSConfig(h.caPEM, "127.0.0.1", nil)
	if err != nil {
		t.Fatal(err)
	}
	req := &curev1.WatchRequest{NodeId: nodeA.id}
	for _, path := range []string{
		"cure.v1.OperatorService/Watch",
		"/cure.v1.OperatorService/Watch",
		"//cure.v1.OperatorService/Watch",
		"/cure.v1.OperatorService/Watch/",
		"/cure.v1.OperatorService//Watch",
		"/cure.v1.operatorservice/watch",
		"/./cure.v1.OperatorService/Watch",
		"cure.v1.OperatorService/ListNodes",
	} {
		st, data := rawGRPC(t, h.grpc, anon, path, req)
		if strings.HasPrefix(st, "0") || len(data) > 0 {
			t.Errorf(":path %q without a certificate: status %q, %d bytes of data: %q", path, st, len(data), data)
		}
		t.Logf(":path %q: grpc-status %s", path, st)
	}
	// The same frames with an operator certificate and the canonical path do
	// stream the timeline: the refusals above are the defence, not broken frames.
	oc, err := pki.IssueOperatorCert(h.pkiDir, "vera", pki.RoleViewer)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.LoadOperatorCert(oc.CertFile, oc.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	withCert, _ := pki.ClientTLSConfig(h.caPEM, "127.0.0.1", &cert)
	st, data := rawGRPC(t, h.grpc, withCert, "/cure.v1.OperatorService/Watch", req)
	if st != "0" || !bytes.Contains(data, []byte("secret step 2")) {
		t.Fatalf("control with a viewer certificate: status %q, data %q", st, data)
	}
	// A certificate does not help a non-canonical spelling either.
	if st, data := rawGRPC(t, h.grpc, withCert, "cure.v1.OperatorService/Watch", req); strings.HasPrefix(st, "0") || len(data) > 0 {
		t.Fatalf("slash-less path with a certificate: %q %q", st, data)
	}
	// What reaches the server's routing (any spelling with its leading
	// slash) is refused by the deny-by-default check and recorded.
	entries, _ := h.st.AuditLog(context.Background(), store.AuditFilter{Kind: store.AuditOperator, Limit: 1000})
	recorded := map[string]string{}
	for _, e := range entries {
		recorded[e.Action] = e.Result
	}
	for _, path := range []string{"/cure.v1.OperatorService/Watch/", "/cure.v1.operatorservice/watch", "/cure.v1.OperatorService//Watch"} {
		if r, ok := recorded[path]; !ok || r == codes.OK.String() {
			t.Errorf("probe of %q not recorded as refused in the audit log (%q)", path, r)
		}
	}
}

func (h *hostile) operatorClient(name string, role pki.Role) curev1.OperatorServiceClient {
	h.t.Helper()
	oc, err := pki.IssueOperatorCert(h.pkiDir, name, role)
	if err != nil {
		h.t.Fatal(err)
	}
	cert, err := pki.LoadOperatorCert(oc.CertFile, oc.KeyFile)
	if err != nil {
		h.t.Fatal(err)
	}
	return curev1.NewOperatorServiceClient(h.conn("", &cert))
}

// Roles come from the certificate: a viewer reads, an operator provisions,
// only an admin wipes (or resumes a wipe).
func TestViewerCannotWipe(t *testing.T) {
	h := newHostile(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	viewer, op, admin := h.operatorClient("vic", pki.RoleViewer), h.operatorClient("olga", pki.RoleOperator), h.operatorClient("ada", pki.RoleAdmin)
	wipe := &curev1.ProvisionRequest{NodeIds: []string{nodeB.id}, Mode: curev1.Mode_MODE_WIPE}
	if _, err := viewer.Provision(ctx, wipe); codeOf(err) != codes.PermissionDenied {
		t.Fatalf("viewer wipe: %v, want PermissionDenied", err)
	}
	if _, err := viewer.Provision(ctx, &curev1.ProvisionRequest{NodeIds: []string{nodeB.id}, Mode: curev1.Mode_MODE_PROVISION}); codeOf(err) != codes.PermissionDenied {
		t.Fatalf("viewer provision: %v, want PermissionDenied", err)
	}
	if _, err := viewer.AuditDirect(ctx, &curev1.AuditDirectRequest{NodeIds: []string{nodeB.id}}); codeOf(err) != codes.PermissionDenied {
		t.Fatalf("viewer direct audit: %v, want PermissionDenied", err)
	}
	if _, err := op.Provision(ctx, wipe); codeOf(err) != codes.PermissionDenied {
		t.Fatalf("operator wipe: %v, want PermissionDenied", err)
	}
	// Resume continues the latest run in its own mode: resuming a failed
	// wipe is a wipe, whatever mode the request names.
	if err := h.st.CreateRun(ctx, store.Run{ID: "wipe-old", NodeID: nodeB.id, Mode: "wipe", Status: curev1.RunStatus_RUN_FAILED}); err != nil {
		t.Fatal(err)
	}
	if _, err := op.Provision(ctx, &curev1.ProvisionRequest{NodeIds: []string{nodeB.id}, Mode: curev1.Mode_MODE_PROVISION, Resume: true}); codeOf(err) != codes.PermissionDenied {
		t.Fatalf("operator resuming a wipe: %v, want PermissionDenied", err)
	}
	if n := h.starts.n(); n != 0 {
		t.Fatalf("%d runs started by refused calls", n)
	}
	if _, err := op.Provision(ctx, &curev1.ProvisionRequest{NodeIds: []string{nodeA.id}, Mode: curev1.Mode_MODE_DIAGNOSTIC, Manifest: "rma-quick"}); err != nil {
		t.Fatalf("operator diagnostic: %v", err)
	}
	if _, err := admin.Provision(ctx, wipe); err != nil {
		t.Fatalf("admin wipe: %v", err)
	}
	if got := h.starts.calls; len(got) != 2 || got[1] != "nodeB:wipe" {
		t.Fatalf("runs started: %v", got)
	}
	if _, err := viewer.ListNodes(ctx, &curev1.ListNodesRequest{}); err != nil {
		t.Fatalf("viewer ListNodes: %v", err)
	}
	log, err := viewer.ListAuditLog(ctx, &curev1.ListAuditLogRequest{Kind: "operator", NodeId: nodeB.id})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, e := range log.GetEntries() {
		seen = append(seen, e.GetActor()+"/"+e.GetRole()+"/"+e.GetResult())
	}
	for _, want := range []string{"vic/viewer/PermissionDenied", "olga/operator/PermissionDenied", "ada/admin/OK"} {
		if !strings.Contains(strings.Join(seen, " "), want) {
			t.Errorf("audit log of node B lacks %s: %v", want, seen)
		}
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// 10,000 iPXE requests (a node's MAC in a loop, and random MACs) mint a
// handful of tokens and timeline entries, hold no memory, and leave no
// goroutines behind.
func TestBootServerFloodBounded(t *testing.T) {
	h := newHostile(t)
	goBefore := runtime.NumGoroutine()
	heapBefore := heapInUse()
	const total, workers = 10000, 32
	var next, limited, tokens atomic.Int64
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}, Timeout: 30 * time.Second}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > total {
					return
				}
				mac := nodeA.mac
				if i%5 == 0 {
					mac = fmt.Sprintf("52:54:01:%02x:%02x:%02x", i>>16&0xff, i>>8&0xff, i&0xff)
				}
				resp, err := client.Get(h.httpURL + "/ipxe/" + mac)
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusTooManyRequests {
					limited.Add(1)
				}
				if tokenRE.Match(b) {
					tokens.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	client.CloseIdleConnections()
	heapAfter := heapInUse()
	ws, err := h.st.BootWindow(context.Background(), nodeA.run, "w1")
	if err != nil {
		t.Fatal(err)
	}
	if tokens.Load() != 6 || ws.Issued != 6 {
		t.Fatalf("tokens handed out %d, stored %d; want the window's 6", tokens.Load(), ws.Issued)
	}
	if limited.Load() != total*4/5-6 {
		t.Errorf("429 answers: %d, want %d", limited.Load(), total*4/5-6)
	}
	infos := 0
	evs, _ := h.st.Events(context.Background(), nodeA.run, 0, 0)
	for _, e := range evs {
		if strings.Contains(e.Message, "per-boot token") {
			infos++
		}
	}
	if infos != 6 || len(evs) > 10 {
		t.Errorf("timeline of run A: %d token entries, %d in all; want 6 and no flood", infos, len(evs))
	}
	if got := h.security(audit.BootTokenRateLimit); len(got) == 0 || len(got) > 5 {
		t.Errorf("rate-limit security events: %d, want a few (rate-limited)", len(got))
	}
	grew := int64(heapAfter) - int64(heapBefore)
	t.Logf("%d requests: %d tokens, %d refused with 429, heap %+d KiB", total, tokens.Load(), limited.Load(), grew/1024)
	if grew > 32<<20 {
		t.Errorf("heap grew %d MiB over the flood", grew>>20)
	}
	waitFor(t, func() bool { return runtime.NumGoroutine() <= goBefore+8 })
}

// Streams that never say Hello: past the cap they are refused at once, the
// rest are cut at the Hello deadline; nothing stays behind.
func TestNeverHelloFloodBounded(t *testing.T) {
	h := newHostile(t)
	goBefore := runtime.NumGoroutine()
	const streams = 600
	var exhausted, deadline, other atomic.Int64
	var wg sync.WaitGroup
	conns := make([]*grpc.ClientConn, 20)
	for i := range conns {
		conns[i] = h.conn("", nil)
	}
	start := time.Now()
	for i := 0; i < streams; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := curev1.NewRunnerServiceClient(conns[i%len(conns)]).Session(ctx)
			if err != nil {
				other.Add(1)
				return
			}
			_, err = s.Recv() // never send anything
			switch codeOf(err) {
			case codes.ResourceExhausted:
				exhausted.Add(1)
			case codes.DeadlineExceeded:
				deadline.Add(1)
			default:
				other.Add(1)
			}
		}(i)
	}
	wg.Wait()
	t.Logf("%d silent streams: %d refused at once (cap 64), %d cut at the Hello deadline, %d other, in %s",
		streams, exhausted.Load(), deadline.Load(), other.Load(), time.Since(start).Round(time.Millisecond))
	if exhausted.Load() == 0 || deadline.Load() == 0 || deadline.Load() > streams-exhausted.Load() {
		t.Fatalf("refused %d, cut %d, other %d: want both bounds to act", exhausted.Load(), deadline.Load(), other.Load())
	}
	if other.Load() != 0 {
		t.Fatalf("%d streams ended otherwise", other.Load())
	}
	for _, c := range conns {
		c.Close()
	}
	waitFor(t, func() bool { return runtime.NumGoroutine() <= goBefore+8 })
}
