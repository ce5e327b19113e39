package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/catalog"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/pki"
	"github.com/cure-oss/cure/provisioner-lite/pool"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/sitecheck"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// hungBMC stands for BMCs slower than the test: a run stays active in its
// first BMC step until cancelled.
func hungBMC(ctx context.Context, _ store.Node) (pipeline.BMC, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// coordinator is the coordinator's operator side as provisioner-lite wires
// it: store, engine, the real gRPC server with TLS, roles and the audit log.
type coordinator struct {
	st     *store.Store
	addr   string
	pkiDir string
	ca     string
	manDir string // its manifests (the catalog ListManifests reads)
}

func startCoordinator(t *testing.T) *coordinator {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "cure.db"), store.WithStateKey(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	manDir := filepath.Join(dir, "manifests")
	if err := os.MkdirAll(manDir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"qemu-nvme.yaml", "suites/rma-quick.yaml", "suites/qemu-diagnostic.yaml"} {
		raw, err := os.ReadFile(filepath.Join("../../../manifests/examples", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(manDir, name)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(manDir, name), raw, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rec := audit.New(st, log, 0)
	ectx, cancel := context.WithCancel(context.Background())
	eng := pipeline.New(ectx, pipeline.Config{Store: st, Hub: sessions.NewHub(), Log: log, Audit: rec, ConnectBMC: hungBMC,
		Manifests: &catalog.Catalog{Dir: manDir}, ArtifactDir: t.TempDir(), BaseURL: "http://10.0.0.1:8080", RunnerAddr: "10.0.0.1:8443",
		Timeouts: pipeline.Timeouts{BMCCall: time.Hour}})
	pkiDir := filepath.Join(dir, "pki")
	tlsCfg, err := pki.ServerTLSConfig(pkiDir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	opts := append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(tlsCfg))}, server.ServerOptions(server.Limits{})...)
	opts = append(opts, server.OperatorAuth(rec, log)...)
	gs := grpc.NewServer(opts...)
	curev1.RegisterOperatorServiceServer(gs, &server.OperatorService{Store: st, Starter: eng, Auditor: eng, Canceler: eng, Instance: "test",
		Pool:     pool.New(pool.Config{Store: st, Starter: eng, Log: log}),
		KnownSKU: sitecheck.KnownSKU(manDir), BMCCADir: filepath.Join(dir, "bmc-ca"), Log: log, Manifests: &catalog.Catalog{Dir: manDir}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(l)
	t.Cleanup(func() {
		gs.Stop()
		cancel()
		eng.Wait()
	})
	// The default certificate curectl finds beside the CA: an admin's.
	if _, err := pki.IssueOperatorCert(pkiDir, "operator", pki.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	return &coordinator{st: st, addr: l.Addr().String(), pkiDir: pkiDir, ca: filepath.Join(pkiDir, pki.CACertFile), manDir: manDir}
}

// curectl runs curectl's own code path against the coordinator.
func (c *coordinator) curectl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	stderr := captureStderr(t)
	var out bytes.Buffer
	rc := run(append([]string{"--server", c.addr, "--ca", c.ca}, args...), &out)
	return rc, out.String(), stderr()
}

// captureStderr redirects os.Stderr until the returned function is called.
func captureStderr(t *testing.T) func() string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stderr
	os.Stderr = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	return func() string {
		os.Stderr = old
		w.Close()
		return <-done
	}
}

func TestNodesAddAtRuntime(t *testing.T) {
	c := startCoordinator(t)
	ctx := context.Background()
	dir := t.TempDir()
	t.Setenv("SITE_BMC_PW", "hunter2-of-n1")

	// add with flags: the password is read here and sealed there.
	rc, out, errOut := c.curectl(t, "nodes", "add", "--id", "n1", "--bmc-url", "https://192.0.2.11", "--bmc-user", "admin",
		"--bmc-password-env", "SITE_BMC_PW", "--bmc-insecure", "--mac", "52-54-00-AA-00-01", "--sku", "qemu-nvme", "--label", "rack=r1")
	if rc != 0 || !strings.Contains(out, "added 1: n1") {
		t.Fatalf("nodes add n1: rc %d\n%s%s", rc, out, errOut)
	}
	n1, err := c.st.GetNode(ctx, "n1")
	if err != nil || n1.BMCPassword != "hunter2-of-n1" || n1.BMCPasswordRef != "" || n1.MACs[0] != "52:54:00:aa:00:01" {
		t.Fatalf("n1 stored as %+v, %v", n1, err)
	}
	// A YAML snippet.
	snippet := filepath.Join(dir, "n2.yaml")
	os.WriteFile(snippet, []byte("id: n2\nbmc: {url: https://192.0.2.12, username: admin, passwordEnv: SITE_BMC_PW, insecure: true}\nmacs: [52:54:00:aa:00:02]\nsku: qemu-nvme\n"), 0o600)
	if rc, out, errOut := c.curectl(t, "nodes", "add", "-f", snippet); rc != 0 || !strings.Contains(out, "added 1: n2") {
		t.Fatalf("nodes add -f: rc %d\n%s%s", rc, out, errOut)
	}
	// An add refuses an id that exists; an unknown SKU is refused with the
	// manifests it knows; nothing of either call is written.
	if rc, _, errOut := c.curectl(t, "nodes", "add", "-f", snippet); rc != 1 || !strings.Contains(errOut, "node n2: node already exists") {
		t.Fatalf("second add of n2: rc %d %s", rc, errOut)
	}
	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("id,bmc_url,bmc_username,bmc_password,macs,sku,hostname,serial,bmc_insecure\nn7,https://192.0.2.17,admin,pw,52:54:00:aa:00:07,hgx-h999,,,true\n"), 0o600)
	if rc, _, errOut := c.curectl(t, "nodes", "import", bad); rc != 1 || !strings.Contains(errOut, `nodes[0] (n7): sku: unknown SKU "hgx-h999": no hgx-h999.yaml`) || !strings.Contains(errOut, "(there: qemu-nvme)") {
		t.Fatalf("unknown SKU: rc %d %s", rc, errOut)
	}
	if _, err := c.st.GetNode(ctx, "n7"); err == nil {
		t.Fatal("n7 was written")
	}
	// A malformed file is refused before anything is sent, with file:line.
	os.WriteFile(bad, []byte("id,bmc_url,bmc_username,bmc_password,macs,sku,hostname,serial\nn8,ftp://x,admin,pw,52:54:00:aa:00:08,qemu-nvme,,\n"), 0o600)
	if rc, _, errOut := c.curectl(t, "nodes", "import", bad); rc != 2 || !strings.Contains(errOut, bad+":2:4: bmc_url") {
		t.Fatalf("malformed import: rc %d %s", rc, errOut)
	}
	// import: CSV, the same parser as at start; adds n3, updates n1.
	csv := filepath.Join(dir, "nodes.csv")
	os.WriteFile(csv, []byte("id,bmc_url,bmc_username,bmc_password,macs,sku,hostname,serial,bmc_insecure,labels\n"+
		"n1,https://192.0.2.11,admin,pw1,52:54:00:aa:00:01,qemu-nvme,n1.dc1,SN1,true,rack=r1\n"+
		"n3,https://192.0.2.13,admin,pw3,52:54:00:aa:00:03,qemu-nvme,,,true,rack=r2\n"), 0o600)
	if rc, out, errOut := c.curectl(t, "nodes", "import", csv); rc != 0 || !strings.Contains(out, "added 1: n3") || !strings.Contains(out, "updated 1: n1") {
		t.Fatalf("nodes import: rc %d\n%s%s", rc, out, errOut)
	}
	if n1, _ := c.st.GetNode(ctx, "n1"); n1.Hostname != "n1.dc1" || n1.BMCPassword != "pw1" {
		t.Fatalf("n1 after import: %+v", n1)
	}

	// label: set on two nodes, remove one; bad labels refused.
	for _, id := range []string{"n1", "n2"} {
		if rc, out, errOut := c.curectl(t, "nodes", "label", id, "pool=burnin", "rack-"); rc != 0 || !strings.Contains(out, "node "+id+" labels: pool=burnin") {
			t.Fatalf("label %s: rc %d\n%s%s", id, rc, out, errOut)
		}
	}
	if rc, _, errOut := c.curectl(t, "nodes", "label", "n3", "pool=a,b"); rc != 2 || !strings.Contains(errOut, "selectors are k=v") {
		t.Fatalf("bad label: rc %d %s", rc, errOut)
	}
	if rc, _, errOut := c.curectl(t, "nodes", "label", "nope", "pool=x"); rc != 1 || !strings.Contains(errOut, `unknown node id "nope"`) {
		t.Fatalf("label of an unknown node: rc %d %s", rc, errOut)
	}

	// Provision by the new label: exactly the two labelled nodes start.
	// (audit mode: its preflight waits on the hung BMC, so the runs stay
	// active; a provision's would fail at once on the SKU's OS image, which
	// this store does not hold.)
	rc, out, errOut = c.curectl(t, "provision", "--mode", "audit", "--selector", "pool=burnin")
	if rc != 0 || !strings.Contains(out, "2 started, 0 refused") || !strings.Contains(out, "started on n1") || !strings.Contains(out, "started on n2") {
		t.Fatalf("provision --selector pool=burnin: rc %d\n%s%s", rc, out, errOut)
	}
	// remove is refused while the run is active, and nothing changes.
	if rc, _, errOut := c.curectl(t, "nodes", "remove", "n1"); rc != 1 || !strings.Contains(errOut, "node n1 has an active run") || !strings.Contains(errOut, "curectl cancel n1") {
		t.Fatalf("remove with an active run: rc %d %s", rc, errOut)
	}
	if _, err := c.st.GetNode(ctx, "n1"); err != nil {
		t.Fatalf("n1 after the refused removal: %v", err)
	}
	// show: the entry without secrets, the state, no hardware yet.
	rc, out, errOut = c.curectl(t, "nodes", "show", "n1")
	if rc != 0 || !strings.Contains(out, "node n1  sku qemu-nvme  state in ") || !strings.Contains(out, "labels pool=burnin") ||
		!strings.Contains(out, "password sealed in the store") || strings.Contains(out, "pw1") || !strings.Contains(out, "no hardware reported yet") {
		t.Fatalf("nodes show n1: rc %d\n%s%s", rc, out, errOut)
	}
	// Once the run is over, the node goes; its history stays.
	if rc, _, errOut := c.curectl(t, "cancel", "n1"); rc != 0 {
		t.Fatalf("cancel n1: %d %s", rc, errOut)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, _ := c.st.LatestRun(ctx, "n1")
		if r.Status != curev1.RunStatus_RUN_RUNNING && r.Status != curev1.RunStatus_RUN_PENDING {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n1's run still %s", r.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if rc, out, errOut := c.curectl(t, "nodes", "remove", "n1"); rc != 0 || !strings.Contains(out, "node n1 removed (1 run(s) kept") {
		t.Fatalf("remove n1: rc %d\n%s%s", rc, out, errOut)
	}
	if rc, _, errOut := c.curectl(t, "nodes", "show", "n1"); rc != 1 || !strings.Contains(errOut, `unknown node id "n1"`) {
		t.Fatalf("show after removal: rc %d %s", rc, errOut)
	}
	if rc, out, _ := c.curectl(t, "report", "n1"); !strings.Contains(out, "node n1") || rc == 1 {
		t.Fatalf("report of the removed node's run: rc %d %s", rc, out)
	}
	if rc, out, _ := c.curectl(t, "nodes"); rc != 0 || strings.Contains(out, "n1 ") || !strings.Contains(out, "n3") {
		t.Fatalf("nodes after removal:\n%s", out)
	}

	// A viewer may look, not change; every call is in the audit log, no secret is.
	viewer, err := pki.IssueOperatorCert(c.pkiDir, "vera", pki.RoleViewer)
	if err != nil {
		t.Fatal(err)
	}
	if rc, _, errOut := c.curectl(t, "--cert", viewer.CertFile, "--key", viewer.KeyFile, "nodes", "remove", "n3"); rc != 1 || !strings.Contains(errOut, "RemoveNode needs admin") {
		t.Fatalf("viewer remove: rc %d %s", rc, errOut)
	}
	if rc, _, _ := c.curectl(t, "--cert", viewer.CertFile, "--key", viewer.KeyFile, "nodes", "show", "n3"); rc != 0 {
		t.Fatalf("viewer show: rc %d", rc)
	}
	entries, err := c.st.AuditLog(ctx, store.AuditFilter{Kind: store.AuditOperator, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, e := range entries {
		seen[e.Action[strings.LastIndex(e.Action, "/")+1:]+" "+e.Result]++
		for _, secret := range []string{"hunter2", "pw1", "pw3"} {
			if strings.Contains(e.Detail, secret) {
				t.Fatalf("audit entry holds a secret: %+v", e)
			}
		}
	}
	for _, want := range []string{"AddNodes OK", "AddNodes AlreadyExists", "AddNodes InvalidArgument", "LabelNode OK", "LabelNode NotFound", "RemoveNode FailedPrecondition", "RemoveNode OK", "RemoveNode PermissionDenied", "ShowNode OK"} {
		if seen[want] == 0 {
			t.Errorf("audit log lacks %q: %v", want, seen)
		}
	}
}

// TestNodesPool: the pool commands move a node as the coordinator allows,
// print where it went, and the list and show views carry its state; a move
// out of order is refused with what to do first.
func TestNodesPool(t *testing.T) {
	c := startCoordinator(t)
	ctx := context.Background()
	if err := c.st.UpsertNode(ctx, store.Node{ID: "n1", BMCURL: "https://192.0.2.11", BMCUser: "admin", BMCPassword: "pw", MACs: []string{"52:54:00:aa:00:01"}, SKU: "qemu-nvme"}); err != nil {
		t.Fatal(err)
	}
	if rc, _, errOut := c.curectl(t, "nodes", "drain", "n1"); rc != 1 || !strings.Contains(errOut, "node is -") || !strings.Contains(errOut, "only a node in service drains") {
		t.Fatalf("drain of a node not in the pool: rc %d %s", rc, errOut)
	}
	if rc, out, errOut := c.curectl(t, "nodes", "return", "--reason", "deployed before the pool", "n1"); rc != 0 || !strings.Contains(out, "node n1: in_service: deployed before the pool") {
		t.Fatalf("return (adopt): rc %d\n%s%s", rc, out, errOut)
	}
	if rc, _, errOut := c.curectl(t, "nodes", "drained", "n1"); rc != 1 || !strings.Contains(errOut, "drain it first") {
		t.Fatalf("drained before drain: rc %d %s", rc, errOut)
	}
	if rc, out, errOut := c.curectl(t, "nodes", "drain", "--reason", "firmware day", "n1"); rc != 0 || !strings.Contains(out, "node n1: draining: firmware day") {
		t.Fatalf("drain: rc %d\n%s%s", rc, out, errOut)
	}
	if rc, out, _ := c.curectl(t, "nodes"); rc != 0 || !strings.Contains(out, "POOL") || !regexp.MustCompile(`n1\s+qemu-nvme\s+idle\s+draining`).MatchString(out) {
		t.Fatalf("nodes list:\n%s", out)
	}
	if rc, _, errOut := c.curectl(t, "nodes", "revalidate", "n1"); rc != 2 || !strings.Contains(errOut, "--suite is required") {
		t.Fatalf("revalidate without a suite: rc %d %s", rc, errOut)
	}
	if rc, _, errOut := c.curectl(t, "nodes", "revalidate", "--suite", "s", "--mode", "provision", "n1"); rc != 2 || !strings.Contains(errOut, "want diagnostic or burnin") {
		t.Fatalf("revalidate in provision mode: rc %d %s", rc, errOut)
	}
	if rc, out, errOut := c.curectl(t, "nodes", "drained", "n1"); rc != 0 || !strings.Contains(out, "node n1: drained") {
		t.Fatalf("drained: rc %d\n%s%s", rc, out, errOut)
	}
	if rc, out, _ := c.curectl(t, "nodes", "show", "n1"); rc != 0 || !strings.Contains(out, "pool drained since") || !strings.Contains(out, "by operator") {
		t.Fatalf("nodes show:\n%s", out)
	}
	if rc, out, errOut := c.curectl(t, "nodes", "return", "n1"); rc != 0 || !strings.Contains(out, "node n1: in_service") {
		t.Fatalf("return: rc %d\n%s%s", rc, out, errOut)
	}
}
