package pipeline_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/notify"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/pool"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// receiver is a scheduler's webhook endpoint: it refuses a delivery whose
// signature does not verify and keeps the node.pool ones in order.
type receiver struct {
	t      *testing.T
	secret []byte
	mu     sync.Mutex
	pool   []notify.Payload
	bad    int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if err := notify.Verify(rc.secret, r.Header.Get(notify.HeaderTimestamp), r.Header.Get(notify.HeaderSignature), body, time.Now(), 5*time.Minute); err != nil {
		rc.mu.Lock()
		rc.bad++
		rc.mu.Unlock()
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var p notify.Payload
	if err := json.Unmarshal(body, &p); err != nil || p.Event != r.Header.Get(notify.HeaderEvent) {
		rc.t.Errorf("delivery %s: %v (event header %q)", body, err, r.Header.Get(notify.HeaderEvent))
	}
	if p.Event == notify.EventNodePool {
		rc.mu.Lock()
		rc.pool = append(rc.pool, p)
		rc.mu.Unlock()
	}
}

// states is the pool_state of every node.pool delivery so far.
func (rc *receiver) states() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []string
	for _, p := range rc.pool {
		out = append(out, nonEmptyOr(p.PoolState, "-"))
	}
	return out
}

func nonEmptyOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// poolAPI is the operator API over TLS with operator certificates, as a
// scheduler and operators reach it.
type poolAPI struct {
	olga, sched, vera curev1.OperatorServiceClient
}

func startPoolAPI(t *testing.T, f *fixture, pl *pool.Pool) poolAPI {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	pkiDir := filepath.Join(f.dir, "pki")
	caPEM, err := pki.EnsureCA(pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := pki.ServerTLSConfig(pkiDir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	opts := append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))}, server.ServerOptions(server.Limits{})...)
	opts = append(opts, server.OperatorAuth(audit.New(f.st, log, 0), log)...)
	gs := grpc.NewServer(opts...)
	curev1.RegisterOperatorServiceServer(gs, &server.OperatorService{Store: f.st, Starter: f.eng, Canceler: f.eng, Pool: pl, Instance: "test", Log: log})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(l)
	t.Cleanup(gs.Stop)
	client := func(name string, role pki.Role) curev1.OperatorServiceClient {
		oc, err := pki.IssueOperatorCert(pkiDir, name, role)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := pki.LoadOperatorCert(oc.CertFile, oc.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := pki.ClientTLSConfig(caPEM, "127.0.0.1", &cert)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return curev1.NewOperatorServiceClient(conn)
	}
	return poolAPI{olga: client("olga", pki.RoleOperator), sched: client("sched", pki.RoleOperator), vera: client("vera", pki.RoleViewer)}
}

// TestPoolTransitions drives a node around the day-2 loop through the
// operator API, with the scripted runner playing the node: provisioned
// (in service), drained at an operator's request and the scheduler's
// word, revalidated by a burn-in suite that ends in the installed OS
// (its callback verified with the token its provision left, nothing
// written), returned; drained and revalidated again, failing this time:
// rma. Every move is announced by a signed webhook a receiver verifies,
// and visible through the API; moves out of order are refused.
func TestPoolTransitions(t *testing.T) {
	secret := []byte("0123456789abcdef-pool-secret")
	rc := &receiver{t: t, secret: secret}
	hook := httptest.NewServer(rc)
	t.Cleanup(hook.Close)
	// One worker: deliveries arrive in the order they were announced.
	notifier, err := notify.New(notify.Config{URLs: []string{hook.URL}, Secret: secret, Workers: 1, BaseDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { notifier.Close(context.Background()) })

	var pl *pool.Pool
	f := newFixtureCfg(t, nil, nil, func(c *pipeline.Config) {
		c.Notify = func(rn pipeline.RunNotice) { pl.RunEnded(context.Background(), rn.Run) }
	})
	pl = pool.New(pool.Config{Store: f.st, Starter: f.eng, Announce: func(c pool.Change) { notifier.Notify(c.Payload()) }, Metrics: f.metrics})
	// A burn-in suite that hands the node back to its installed OS.
	suite, err := os.ReadFile("../../manifests/examples/suites/rma-quick.yaml")
	if err != nil {
		t.Fatal(err)
	}
	suite = bytes.Replace(suite, []byte("\nspec:\n"), []byte("\nspec:\n  end: host-os\n"), 1)
	if err := os.MkdirAll(filepath.Join(f.dir, "manifests", "suites"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, "manifests", "suites", "rma-quick.yaml"), suite, 0o644); err != nil {
		t.Fatal(err)
	}
	api := startPoolAPI(t, f, pl)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	node := []string{"node1"}
	poolOf := func() *curev1.PoolStatus {
		t.Helper()
		d, err := api.vera.ShowNode(ctx, &curev1.ShowNodeRequest{NodeId: "node1"})
		if err != nil {
			t.Fatal(err)
		}
		ls, err := api.vera.ListNodes(ctx, &curev1.ListNodesRequest{})
		if err != nil || len(ls.GetNodes()) != 1 || ls.GetNodes()[0].GetPoolState() != d.GetPool().GetState() {
			t.Fatalf("ListNodes %v disagrees with ShowNode %v (%v)", ls.GetNodes(), d.GetPool(), err)
		}
		return d.GetPool()
	}
	refusedFor := func(err error, want string) {
		t.Helper()
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want FailedPrecondition naming %q", err, want)
		}
	}
	revalidate := func() string {
		t.Helper()
		resp, err := api.olga.Revalidate(ctx, &curev1.RevalidateRequest{NodeIds: node, Suite: "rma-quick", Mode: curev1.Mode_MODE_BURNIN, Reason: "after the firmware day"})
		if err != nil {
			t.Fatal(err)
		}
		p := resp.GetNodes()[0]
		if p.GetState() != curev1.PoolState_POOL_REVALIDATING || p.GetRunId() == "" || p.GetActor() != "olga" {
			t.Fatalf("revalidate: %v", p)
		}
		return p.GetRunId()
	}

	// Provisioned: in service, with its installed OS on record.
	prov, err := api.olga.Provision(ctx, &curev1.ProvisionRequest{NodeIds: node})
	if err != nil {
		t.Fatal(err)
	}
	if r := f.waitRun(prov.GetRuns()[0].GetRunId()); r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("provision ended %s: %s", r.Status, r.Message)
	}
	if p := poolOf(); p.GetState() != curev1.PoolState_POOL_IN_SERVICE {
		t.Fatalf("after provision: %v", p)
	}
	installed, err := f.st.InstalledOS(ctx, "node1")
	if err != nil || installed.TokenHash != store.TokenHash(f.hostToken) {
		t.Fatalf("installed OS %+v, %v; want the provision's token", installed, err)
	}

	// Out of order, or not allowed: refused, nothing moves.
	if _, err := api.vera.Drain(ctx, &curev1.PoolRequest{NodeIds: node}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("viewer drain: %v", err)
	}
	_, err = api.olga.Revalidate(ctx, &curev1.RevalidateRequest{NodeIds: node, Suite: "rma-quick"})
	refusedFor(err, "node is in_service")
	_, err = api.sched.MarkDrained(ctx, &curev1.PoolRequest{NodeIds: node})
	refusedFor(err, "drain it first")
	_, err = api.olga.Provision(ctx, &curev1.ProvisionRequest{NodeIds: node, Mode: curev1.Mode_MODE_SERVICE})
	refusedFor(err, "drain it")

	// Drain: CURE records and announces it, and reboots nothing.
	runs := f.m.Boots()
	if _, err := api.olga.Drain(ctx, &curev1.PoolRequest{NodeIds: node, Reason: "kernel update"}); err != nil {
		t.Fatal(err)
	}
	if p := poolOf(); p.GetState() != curev1.PoolState_POOL_DRAINING || p.GetReason() != "kernel update" || p.GetActor() != "olga" {
		t.Fatalf("after drain: %v", p)
	}
	_, err = api.olga.Revalidate(ctx, &curev1.RevalidateRequest{NodeIds: node, Suite: "rma-quick"})
	refusedFor(err, "wait for the scheduler's drained")
	if len(f.m.Boots()) != len(runs) {
		t.Error("a draining node was rebooted")
	}
	if _, err := api.sched.MarkDrained(ctx, &curev1.PoolRequest{NodeIds: node, Reason: "jobs moved"}); err != nil {
		t.Fatal(err)
	}
	if p := poolOf(); p.GetState() != curev1.PoolState_POOL_DRAINED || p.GetActor() != "sched" {
		t.Fatalf("after drained: %v", p)
	}

	// Revalidate: the burn-in passes and the node is back in its OS.
	runID := revalidate()
	if r := f.waitRun(runID); r.Status != curev1.RunStatus_RUN_SUCCEEDED || r.Mode != modes.Burnin {
		t.Fatalf("revalidation %s ended %s: %s", r.Mode, r.Status, r.Message)
	}
	ps := f.phases(runID)
	if ps[modes.WaitForHostOS].Status != curev1.PhaseStatus_PHASE_OK || !strings.Contains(ps[modes.WaitForHostOS].Message, "host OS called back") ||
		ps[modes.PowerOffAtEnd].Status != curev1.PhaseStatus_PHASE_SKIPPED {
		t.Errorf("suite end: wait_for_host_os %+v, power_off %+v", ps[modes.WaitForHostOS], ps[modes.PowerOffAtEnd])
	}
	if p := poolOf(); p.GetState() != curev1.PoolState_POOL_READY || p.GetRunId() != runID || !strings.Contains(p.GetReason(), "passed") {
		t.Fatalf("after a passing revalidation: %v", p)
	}
	if _, err := api.olga.ReturnToPool(ctx, &curev1.PoolRequest{NodeIds: node}); err != nil {
		t.Fatal(err)
	}
	if p := poolOf(); p.GetState() != curev1.PoolState_POOL_IN_SERVICE {
		t.Fatalf("after return: %v", p)
	}

	// Again, and this time a check fails: rma, which does not return.
	f.mu.Lock()
	f.verdicts = map[modes.PhaseName][]*curev1.Verdict{modes.Validate: {{Component: "memory", Check: "memory-patterns", Status: curev1.VerdictStatus_FAIL, Message: "mismatch at 0x1f000"}}}
	f.phaseStatus = func(p modes.PhaseName, _ int) curev1.PhaseStatus {
		if p == modes.Validate {
			return curev1.PhaseStatus_PHASE_FAILED
		}
		return curev1.PhaseStatus_PHASE_OK
	}
	f.mu.Unlock()
	for _, call := range []func(context.Context, *curev1.PoolRequest, ...grpc.CallOption) (*curev1.PoolResponse, error){api.olga.Drain, api.sched.MarkDrained} {
		if _, err := call(ctx, &curev1.PoolRequest{NodeIds: node}); err != nil {
			t.Fatal(err)
		}
	}
	runID = revalidate()
	if r := f.waitRun(runID); r.Status != curev1.RunStatus_RUN_FAILED {
		t.Fatalf("failing revalidation ended %s: %s", r.Status, r.Message)
	}
	p := poolOf()
	if p.GetState() != curev1.PoolState_POOL_RMA || p.GetRunId() != runID || !strings.Contains(p.GetReason(), "memory memory-patterns FAIL") {
		t.Fatalf("after a failing revalidation: %v", p)
	}
	_, err = api.olga.ReturnToPool(ctx, &curev1.PoolRequest{NodeIds: node})
	refusedFor(err, "node is rma")

	// The scheduler heard every move, signed, in order.
	want := []string{"in_service", "draining", "drained", "revalidating", "ready", "in_service", "draining", "drained", "revalidating", "rma"}
	deadline := time.Now().Add(30 * time.Second)
	for len(rc.states()) < len(want) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := rc.states(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("node.pool webhooks %v\nwant             %v", got, want)
	}
	rc.mu.Lock()
	if rc.bad != 0 {
		t.Errorf("%d deliveries failed the signature check", rc.bad)
	}
	for _, d := range rc.pool {
		if d.NodeID != "node1" || d.SKU != "qemu-nvme" || d.Since.IsZero() || d.Reason == "" {
			t.Errorf("delivery %+v lacks node, SKU, since or reason", d)
		}
	}
	if d := rc.pool[2]; d.Actor != "sched" || d.PoolFrom != "draining" || d.Reason != "jobs moved" {
		t.Errorf("drained delivery %+v", d)
	}
	if d := rc.pool[9]; d.RunID != runID || d.Actor != pool.Coordinator || d.PoolFrom != "revalidating" {
		t.Errorf("rma delivery %+v", d)
	}
	rc.mu.Unlock()
}
