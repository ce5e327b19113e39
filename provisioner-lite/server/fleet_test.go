package server_test

// Fleet operations through the real operator API: a Provision of a thousand
// nodes, capacity refusals and their retry on a second instance, selectors,
// cancel. The pipelines are real; their BMCs never answer, so every run stays
// active in its first BMC step and the counts are exact.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/catalog"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/render"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

type fleetEnv struct {
	t       *testing.T
	st      *store.Store
	pkiDir  string
	caPEM   []byte
	manDir  string
	engines []*pipeline.Engine
	clients []curev1.OperatorServiceClient
	addrs   []string
}

// hungBMC stands for BMCs that take longer than the test: the run stays in
// its first BMC step until cancelled.
func hungBMC(ctx context.Context, _ store.Node) (pipeline.BMC, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func newFleetEnv(t *testing.T, nodes int) *fleetEnv {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "cure.db"), store.WithStateKey(bytes.Repeat([]byte{3}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	manDir := filepath.Join(dir, "manifests")
	if err := os.MkdirAll(manDir, 0o700); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../../manifests/examples/qemu-nvme.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(manDir, "qemu-nvme.yaml"), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range nodes {
		rack := fmt.Sprintf("r%02d", i%10)
		n := store.Node{ID: fmt.Sprintf("n%04d", i), BMCURL: "https://192.0.2.1", BMCUser: "admin", BMCPassword: "pw", SKU: "qemu-nvme",
			MACs: []string{fmt.Sprintf("52:54:00:%02x:%02x:%02x", i>>16&255, i>>8&255, i&255)}, Labels: map[string]string{"rack": rack}}
		if err := st.UpsertNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	pkiDir := filepath.Join(dir, "pki")
	caPEM, err := pki.EnsureCA(pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	return &fleetEnv{t: t, st: st, pkiDir: pkiDir, caPEM: caPEM, manDir: manDir}
}

// instance starts one coordinator instance (engine + operator API) on the
// shared store, driving at most maxRuns runs.
func (f *fleetEnv) instance(name string, maxRuns int) curev1.OperatorServiceClient {
	t := f.t
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rec := audit.New(f.st, log, 0)
	ectx, cancel := context.WithCancel(context.Background())
	eng := pipeline.New(ectx, pipeline.Config{Store: f.st, Hub: sessions.NewHub(), Log: log, Audit: rec, ConnectBMC: hungBMC,
		Manifests: &catalog.Catalog{Dir: f.manDir}, ArtifactDir: t.TempDir(), BaseURL: "http://10.0.0.1:8080", RunnerAddr: "10.0.0.1:8443",
		MaxRuns: maxRuns, Timeouts: pipeline.Timeouts{BMCCall: time.Hour}})
	tlsCfg, err := pki.ServerTLSConfig(f.pkiDir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	opts := append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))}, server.ServerOptions(server.Limits{})...)
	opts = append(opts, server.OperatorAuth(rec, log)...)
	gs := grpc.NewServer(opts...)
	curev1.RegisterOperatorServiceServer(gs, &server.OperatorService{Store: f.st, Starter: eng, Auditor: eng, Canceler: eng, Instance: name})
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(gl)
	t.Cleanup(func() {
		gs.Stop()
		cancel()
		eng.Wait()
	})
	oc, err := pki.IssueOperatorCert(f.pkiDir, "olga", pki.RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := pki.LoadOperatorCert(oc.CertFile, oc.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pki.ClientTLSConfig(f.caPEM, "127.0.0.1", &cert)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(gl.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := curev1.NewOperatorServiceClient(conn)
	f.engines = append(f.engines, eng)
	f.clients = append(f.clients, c)
	f.addrs = append(f.addrs, gl.Addr().String())
	return c
}

func nodeIDs(from, to int) []string {
	var ids []string
	for i := from; i < to; i++ {
		ids = append(ids, fmt.Sprintf("n%04d", i))
	}
	return ids
}

// activeRuns counts the store's active runs per node; every node must have
// at most one.
func (f *fleetEnv) activeRuns() map[string]int {
	f.t.Helper()
	runs, err := f.st.ActiveRuns(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	m := map[string]int{}
	for _, r := range runs {
		m[r.NodeID]++
	}
	return m
}

func TestProvision1000AllStartedOrRefused(t *testing.T) {
	const n, capacity = 1000, 700
	f := newFleetEnv(t, n)
	c := f.instance("a", capacity)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	ids := nodeIDs(0, n)
	resp, err := c.Provision(ctx, &curev1.ProvisionRequest{NodeIds: ids, Mode: curev1.Mode_MODE_AUDIT})
	if err != nil {
		t.Fatalf("Provision of %d nodes: %v", n, err)
	}
	// Every node is accounted for exactly once: started, or refused with a reason.
	seen := map[string]string{}
	for _, r := range resp.GetRuns() {
		if r.GetRunId() == "" {
			t.Errorf("node %s: started without a run id", r.GetNodeId())
		}
		seen[r.GetNodeId()] = "started"
	}
	for _, r := range resp.GetRefused() {
		if _, dup := seen[r.GetNodeId()]; dup {
			t.Errorf("node %s both started and refused", r.GetNodeId())
		}
		if r.GetReason() != server.RefusedCapacity || r.GetRetryAfterMs() <= 0 || r.GetMessage() == "" {
			t.Errorf("node %s refused with reason %q retry %dms message %q; want capacity with a retry hint", r.GetNodeId(), r.GetReason(), r.GetRetryAfterMs(), r.GetMessage())
		}
		seen[r.GetNodeId()] = "refused"
	}
	for _, id := range ids {
		if seen[id] == "" {
			t.Errorf("node %s neither started nor refused", id)
		}
	}
	if len(resp.GetRuns()) != capacity || len(resp.GetRefused()) != n-capacity {
		t.Fatalf("%d started, %d refused; want %d and %d (capacity %d)", len(resp.GetRuns()), len(resp.GetRefused()), capacity, n-capacity, capacity)
	}
	if resp.GetInstance() != "a" {
		t.Errorf("instance %q, want a", resp.GetInstance())
	}
	// What the answer says is what the store holds.
	active := f.activeRuns()
	if len(active) != capacity {
		t.Errorf("%d nodes with an active run in the store, want %d", len(active), capacity)
	}
	for _, r := range resp.GetRuns() {
		if active[r.GetNodeId()] != 1 {
			t.Errorf("node %s: %d active runs, want 1", r.GetNodeId(), active[r.GetNodeId()])
		}
	}

	// Asked again, the started nodes are busy and the rest still at capacity:
	// nothing starts, and the whole answer comes back as the error's detail.
	_, err = c.Provision(ctx, &curev1.ProvisionRequest{NodeIds: ids, Mode: curev1.Mode_MODE_AUDIT})
	st := status.Convert(err)
	if st.Code() != codes.FailedPrecondition {
		t.Fatalf("second Provision: %v; want FailedPrecondition (busy and capacity)", err)
	}
	var detail *curev1.ProvisionResponse
	for _, d := range st.Details() {
		if pr, ok := d.(*curev1.ProvisionResponse); ok {
			detail = pr
		}
	}
	if detail == nil || len(detail.GetRefused()) != n {
		t.Fatalf("second Provision: details %v; want all %d nodes refused", st.Details(), n)
	}
	reasons := map[string]int{}
	for _, r := range detail.GetRefused() {
		reasons[r.GetReason()]++
	}
	if reasons[server.RefusedBusy] != capacity || reasons[server.RefusedCapacity] != n-capacity {
		t.Errorf("second Provision refusals %v; want %d busy, %d capacity", reasons, capacity, n-capacity)
	}

	// Cancel by selector ends exactly that rack's active runs (which nodes
	// got the capacity depends on the order the starts ran in).
	inRack := 0
	for _, r := range resp.GetRuns() {
		var i int
		fmt.Sscanf(r.GetNodeId(), "n%d", &i)
		if i%10 == 3 {
			inRack++
		}
	}
	cresp, err := c.Cancel(ctx, &curev1.CancelRequest{Selector: map[string]string{"rack": "r03"}, Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cresp.GetCanceled()) != inRack || len(cresp.GetRefused()) != n/10-inRack {
		t.Errorf("cancel rack r03: %d canceled, %d refused; want %d and %d", len(cresp.GetCanceled()), len(cresp.GetRefused()), inRack, n/10-inRack)
	}
	waitFor(t, func() bool { return len(f.activeRuns()) == capacity-inRack })
	for _, r := range cresp.GetCanceled() {
		run, err := f.st.GetRun(ctx, r.GetRunId())
		if err != nil || run.Status != curev1.RunStatus_RUN_CANCELED {
			t.Errorf("run %s: %v, status %q; want canceled", r.GetRunId(), err, run.Status)
		}
	}
	fs, err := c.Fleet(ctx, &curev1.FleetRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if fs.GetNodes() != n || fs.GetActive() != int64(capacity-inRack) || fs.GetByStatus()["canceled"] != int64(inRack) || fs.GetByStatus()["none"] != int64(n-capacity) {
		t.Errorf("fleet: %d nodes, %d active, by status %v", fs.GetNodes(), fs.GetActive(), fs.GetByStatus())
	}
}

func TestProvisionUnknownNodesNamedNothingStarted(t *testing.T) {
	f := newFleetEnv(t, 5)
	c := f.instance("a", 100)
	ctx := context.Background()
	_, err := c.Provision(ctx, &curev1.ProvisionRequest{NodeIds: []string{"n0001", "typo-1", "n0002", "typo-2"}, Mode: curev1.Mode_MODE_AUDIT})
	if status.Code(err) != codes.InvalidArgument || !bytes.Contains([]byte(err.Error()), []byte("typo-1, typo-2")) {
		t.Fatalf("Provision with unknown ids: %v; want InvalidArgument naming typo-1, typo-2", err)
	}
	if a := f.activeRuns(); len(a) != 0 {
		t.Errorf("%d runs started despite unknown ids", len(a))
	}
	_, err = c.Provision(ctx, &curev1.ProvisionRequest{Selector: map[string]string{"rack": "r99"}, Mode: curev1.Mode_MODE_AUDIT})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Provision with a selector matching nothing: %v; want InvalidArgument", err)
	}
	resp, err := c.Provision(ctx, &curev1.ProvisionRequest{Selector: map[string]string{"rack": "r01", "sku": "qemu-nvme"}, Mode: curev1.Mode_MODE_AUDIT})
	if err != nil || len(resp.GetRuns()) != 1 || resp.GetRuns()[0].GetNodeId() != "n0001" {
		t.Fatalf("Provision rack=r01,sku=qemu-nvme: %v %v; want one run on n0001", resp, err)
	}
}

func TestCapacityRejectsAndRetries(t *testing.T) {
	const n = 120
	f := newFleetEnv(t, n)
	f.instance("a", 50)
	f.instance("b", 100)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// One instance alone refuses what is beyond its capacity, at once.
	resp, err := f.clients[0].Provision(ctx, &curev1.ProvisionRequest{NodeIds: nodeIDs(0, 60), Mode: curev1.Mode_MODE_AUDIT})
	if err != nil || len(resp.GetRuns()) != 50 || len(resp.GetRefused()) != 10 {
		t.Fatalf("instance a: %v, %d started, %d refused; want 50 and 10", err, len(resp.GetRuns()), len(resp.GetRefused()))
	}
	// Full now: a node it is asked for is refused with ResourceExhausted and a retry hint.
	_, err = f.clients[0].Provision(ctx, &curev1.ProvisionRequest{NodeIds: nodeIDs(60, 61), Mode: curev1.Mode_MODE_AUDIT})
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted {
		t.Fatalf("full instance: %v; want ResourceExhausted", err)
	}

	// curectl's way: the refused nodes move on to the next instance.
	targets := []render.Target{{Addr: f.addrs[0], Client: f.clients[0]}, {Addr: f.addrs[1], Client: f.clients[1]}}
	var progress bytes.Buffer
	res, err := render.ProvisionAcross(ctx, targets, &curev1.ProvisionRequest{NodeIds: nodeIDs(60, n), Mode: curev1.Mode_MODE_AUDIT}, &progress)
	if err != nil {
		t.Fatalf("ProvisionAcross: %v\n%s", err, progress.String())
	}
	if len(res.Runs) != n-60 || len(res.Refused) != 0 {
		t.Fatalf("ProvisionAcross: %d started, %d refused (%v); want %d started\n%s", len(res.Runs), len(res.Refused), res.Refused, n-60, progress.String())
	}
	for _, r := range res.Runs {
		if res.Instance[r.GetRunId()] != "b" {
			t.Errorf("run %s on %s started by %q; instance a is full, want b", r.GetRunId(), r.GetNodeId(), res.Instance[r.GetRunId()])
		}
	}
	if got := f.engines[0].Active() + f.engines[1].Active(); got != n-10+10 {
		// a: 50, b: 60 (the 10 refused first are not retried by this call)
		if got != 110 {
			t.Errorf("engines drive %d runs, want 110", got)
		}
	}
	if a := f.activeRuns(); len(a) != 110 {
		t.Errorf("%d nodes with an active run, want 110", len(a))
	}

	// With both full, every node is refused and curectl says so.
	f2 := []render.Target{{Addr: f.addrs[0], Client: f.clients[0]}}
	var refusedFirst []string
	for _, r := range resp.GetRefused() {
		refusedFirst = append(refusedFirst, r.GetNodeId())
	}
	res, err = render.ProvisionAcross(ctx, f2, &curev1.ProvisionRequest{NodeIds: refusedFirst, Mode: curev1.Mode_MODE_AUDIT}, nil)
	if err != nil || len(res.Runs) != 0 || len(res.Refused) != 10 || res.Refused[0].GetReason() != server.RefusedCapacity {
		t.Fatalf("full instance via curectl: %v, %+v", err, res)
	}
}
