package server_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// maxGoroutinesPerRunner is what one connected runner may cost the
// coordinator in goroutines: grpc-go's connection reader, its writer
// (loopy) and its keepalive timer loop, and the session's handler, which
// also reads the stream. grpc-go starts the first three for every
// connection; nothing else may wait per runner.
const maxGoroutinesPerRunner = 4

// coordLabel marks the goroutines the test's gRPC server starts: labels
// pass to every goroutine a labelled one starts, so they are told apart
// from the fake runners' client goroutines in the same process.
const coordLabel = "cure-test-side"

type goroutineEnv struct {
	t     testing.TB
	label string // the value of coordLabel on its server's goroutines
	st    *store.Store
	hub   *sessions.Hub
	addr  string
	caPEM []byte
}

// newGoroutineEnv is a coordinator's runner service on real TLS gRPC, as
// provisioner-lite wires it (plain: without ServerOptions, so without the
// session's stream control: the select loop and its receiver goroutine),
// with n nodes whose runs wait for CURE and hold one issued boot token
// each ("tok-<i>").
func newGoroutineEnv(t testing.TB, n int, plain bool) *goroutineEnv {
	t.Helper()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(filepath.Join(dir, "cure.db"), store.WithStateKey(bytes.Repeat([]byte{1}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ctx := context.Background()
	for i := range n {
		id, run := fmt.Sprintf("g%03d", i), fmt.Sprintf("run-g%03d", i)
		if err := st.UpsertNode(ctx, store.Node{ID: id, BMCURL: "https://192.0.2.1", BMCUser: "admin", BMCPassword: "pw",
			MACs: []string{fmt.Sprintf("52:54:00:77:00:%02x", i)}, SystemSerial: "SER-" + id}); err != nil {
			t.Fatal(err)
		}
		if err := st.CreateRun(ctx, store.Run{ID: run, NodeID: id, Mode: "provision", Manifest: "m", Status: curev1.RunStatus_RUN_RUNNING,
			Phase: modes.WaitForCURE, StartedAt: time.Now(), Pipeline: store.PipelineState{Boot: store.BootCURE, CUREWindow: "w1"}}); err != nil {
			t.Fatal(err)
		}
		if err := st.IssueBootToken(ctx, store.BootToken{Hash: store.TokenHash(fmt.Sprintf("tok-%d", i)), NodeID: id, RunID: run, Window: "w1",
			Peer: "127.0.0.1", Expires: time.Now().Add(time.Hour)}, 0); err != nil {
			t.Fatal(err)
		}
	}
	pkiDir := filepath.Join(dir, "pki")
	tlsCfg, err := pki.ServerTLSConfig(pkiDir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := pki.EnsureCA(pkiDir)
	rec := audit.New(st, log, 0)
	opts := []grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))}
	if !plain {
		opts = append(opts, server.ServerOptions(server.Limits{})...)
	}
	opts = append(opts, server.OperatorAuth(rec, log)...)
	gs := grpc.NewServer(opts...)
	hub := sessions.NewHub()
	curev1.RegisterRunnerServiceServer(gs, &server.RunnerService{Store: st, Hub: hub, Log: log, Audit: rec, SessionBurst: 1000})
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	label := fmt.Sprintf("coordinator-%t", plain)
	go pprof.Do(ctx, pprof.Labels(coordLabel, label), func(context.Context) { _ = gs.Serve(gl) })
	t.Cleanup(gs.Stop)
	return &goroutineEnv{t: t, label: label, st: st, hub: hub, addr: gl.Addr().String(), caPEM: caPEM}
}

// runner connects runner i on its own connection, as a node does, says
// Hello and has one event acked: its session is then being served.
func (e *goroutineEnv) runner(i int) curev1.RunnerService_SessionClient {
	t := e.t
	t.Helper()
	cfg, err := pki.ClientTLSConfig(e.caPEM, "127.0.0.1", nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	stream, err := curev1.NewRunnerServiceClient(conn).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("g%03d", i)
	if err := stream.Send(&curev1.RunnerMessage{Msg: &curev1.RunnerMessage_Hello{Hello: &curev1.Hello{
		Token: fmt.Sprintf("tok-%d", i), BootId: "boot-" + id, SessionSecret: strings.Repeat("s", 40),
		Identity: &curev1.Identity{BootMac: fmt.Sprintf("52:54:00:77:00:%02x", i), SystemSerial: "SER-" + id, NodeId: id},
	}}}); err != nil {
		t.Fatal(err)
	}
	if err := send(stream, logEvent(1, "", "hello from "+id)); err != nil {
		t.Fatalf("runner %s: first event: %v", id, err)
	}
	return stream
}

// coordGoroutines counts the goroutines the coordinator's server started,
// by the function that identifies each (the first frame of gRPC or CURE).
func coordGoroutines(t testing.TB, label string) (int, map[string]int) {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		t.Fatal(err)
	}
	total, by := 0, map[string]int{}
	count, labelled, named := 0, false, false
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.Contains(line, " @ 0x"):
			count, _ = strconv.Atoi(strings.Fields(line)[0])
			labelled, named = false, false
		case strings.HasPrefix(line, "# labels:"):
			labelled = strings.Contains(line, fmt.Sprintf("%q:%q", coordLabel, label))
			if labelled {
				total += count
			}
		case labelled && !named && strings.HasPrefix(line, "#\t0x"):
			f := strings.Fields(line)
			if len(f) >= 3 && (strings.Contains(f[2], "grpc") || strings.Contains(f[2], "cure-oss")) {
				by[f[2][strings.LastIndex(f[2], "/")+1:]] += count
				named = true
			}
		}
	}
	return total, by
}

// settled waits until the coordinator's goroutine count holds still
// (connection setup goroutines ending), then returns it.
func (e *goroutineEnv) settled() (int, map[string]int) {
	prev, by := coordGoroutines(e.t, e.label)
	for range 50 {
		time.Sleep(20 * time.Millisecond)
		n, b := coordGoroutines(e.t, e.label)
		if n == prev {
			return n, b
		}
		prev, by = n, b
	}
	return prev, by
}

// perRunner connects more runners beside first ones and returns what each
// costs: the coordinator's goroutines, the process's (client side too) and
// the process's goroutine stack bytes.
func (e *goroutineEnv) perRunner(first, more int) (coord, all, stack float64, base, after int, by map[string]int, streams []curev1.RunnerService_SessionClient) {
	for i := range first {
		streams = append(streams, e.runner(i))
	}
	base, _ = e.settled()
	allBase := runtime.NumGoroutine()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	stackBase := ms.StackInuse
	for i := first; i < first+more; i++ {
		streams = append(streams, e.runner(i))
	}
	after, by = e.settled()
	runtime.ReadMemStats(&ms)
	n := float64(more)
	return float64(after-base) / n, float64(runtime.NumGoroutine()-allBase) / n, (float64(ms.StackInuse) - float64(stackBase)) / n, base, after, by, streams
}

// TestSessionGoroutinesPerRunner counts the goroutines a connected runner
// costs the coordinator: a 10,000-node fleet holds 10,000 sessions, each
// mostly idle, so each goroutine per runner is 10,000 stacks. Counted
// between 10 and 30 sessions, so that what is started once does not count.
// The sessions must still work the way the pipeline and the hub use them:
// a message queued reaches the runner, a closed session ends at once.
func TestSessionGoroutinesPerRunner(t *testing.T) {
	const first, more = 10, 20
	// The select loop (a server without ServerOptions), in the same run.
	plainCoord, plainAll, plainStack, _, _, _, _ := newGoroutineEnv(t, first+more, true).perRunner(first, more)
	e := newGoroutineEnv(t, first+more, false)
	per, all, stack, base, after, by, streams := e.perRunner(first, more)
	names := make([]string, 0, len(by))
	for k, v := range by {
		names = append(names, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(names)
	t.Logf("per connected runner: coordinator goroutines %.2f (select loop %.2f), whole process %.2f (%.2f), stack bytes in the process %.0f (%.0f); coordinator %d -> %d for %d runners; by function at %d runners: %s",
		per, plainCoord, all, plainAll, stack, plainStack, base, after, more, first+more, strings.Join(names, " "))
	if after-base > more*maxGoroutinesPerRunner {
		t.Errorf("%d runners cost the coordinator %d goroutines, %.2f each: want at most %d each", more, after-base, per, maxGoroutinesPerRunner)
	}

	// A message the pipeline queues reaches its runner; the hub closing a
	// session ends it at once (Canceled: the runner dials again, and its
	// Hello is answered), and the runner dialling back is served again.
	sess := e.hub.Current("g005")
	if sess == nil {
		t.Fatal("runner g005 connected but not attached to the hub")
	}
	if err := sess.Send(&curev1.CoordinatorMessage{Msg: &curev1.CoordinatorMessage_Ack{Ack: &curev1.Ack{Seq: 99}}}); err != nil {
		t.Fatal(err)
	}
	if m, err := streams[5].Recv(); err != nil || m.GetAck().GetSeq() != 99 {
		t.Fatalf("queued message: %v, %v; want the ack of 99", m, err)
	}
	if n := e.hub.CloseRun("run-g005"); n != 1 {
		t.Fatalf("CloseRun closed %d sessions, want 1", n)
	}
	start := time.Now()
	if _, err := streams[5].Recv(); status.Code(err) != codes.Canceled && status.Code(err) != codes.Aborted {
		t.Fatalf("closed session: %v, want Canceled (or Aborted)", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("closed session ended after %v", d)
	}
	if err := send(streams[6], logEvent(2, "", "still here")); err != nil {
		t.Fatalf("another runner's session after the close: %v", err)
	}
	e.runner(5) // dials back with its token, boot and secret: served again
	if e.hub.Current("g005") == nil || e.hub.Current("g005") == sess {
		t.Fatal("runner g005 dialled back but its new session is not the hub's")
	}
	// The closed session's connection stays open (its client keeps it),
	// the dial back is one connection more: nothing of the closed session's
	// own is left behind.
	if after, _ := e.settled(); after > base+(more+1)*maxGoroutinesPerRunner {
		t.Errorf("after a close and a reconnect the coordinator has %d goroutines, want at most %d", after, base+(more+1)*maxGoroutinesPerRunner)
	}
}

// BenchmarkSessionEvent is one runner event's round trip (sent, stored,
// acked) through the select loop and its receiver goroutine, and through
// the handler's own read: go test -bench SessionEvent -benchmem
// ./provisioner-lite/server/ (allocations and CPU are both sides').
func BenchmarkSessionEvent(b *testing.B) {
	for _, plain := range []bool{true, false} {
		name := map[bool]string{true: "select-loop", false: "inline"}[plain]
		b.Run(name, func(b *testing.B) {
			e := newGoroutineEnv(b, 1, plain)
			s := e.runner(0)
			b.ReportAllocs()
			seq := uint64(1)
			for b.Loop() {
				seq++
				if err := send(s, logEvent(seq, "", "bench")); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
