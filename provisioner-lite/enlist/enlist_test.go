package enlist_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/provisioner-lite/audit"
	"github.com/cure-oss/cure/provisioner-lite/bootgate"
	"github.com/cure-oss/cure/provisioner-lite/catalog"
	"github.com/cure-oss/cure/provisioner-lite/enlist"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/server"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

const (
	knownMAC   = "52:54:00:00:00:01"
	unknownMAC = "52:54:00:00:00:99"
	peer       = "10.0.2.15"
)

// sku is the one SKU, with an inspection rule a QEMU machine matches.
const sku = `apiVersion: cure.dev/v1
kind: SKU
metadata:
  name: qemu-nvme
spec:
  inspection:
    match:
      serial: '^QEMU-'
      nicVendors: ['0x1af4']
    name: 'vm-{mac}'
`

type coord struct {
	st       *store.Store
	eng      *pipeline.Engine
	runner   curev1.RunnerServiceClient
	operator curev1.OperatorServiceClient
	op       *server.OperatorService
}

// newCoord is a coordinator in process: the engine's boot gate with the
// enlistment hook, the runner and operator services over gRPC (bufconn,
// behind OperatorAuth), on one store with a known node that has PSIDs and
// a BMC password.
func newCoord(t *testing.T, cfg enlist.Config) *coord {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "cure.db"), store.WithStateKey(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := os.MkdirAll(filepath.Join(dir, "manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifests", "qemu-nvme.yaml"), []byte(sku), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := st.UpsertNode(ctx, store.Node{ID: "node1", BMCURL: "https://10.0.0.1", BMCUser: "admin", BMCPassword: "bmc-secret", SKU: "qemu-nvme",
		MACs: []string{knownMAC}, SystemSerial: "S1", PSIDs: map[string]string{"DISK1": strings.Repeat("P", 32)}}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	rec := audit.New(st, log, time.Millisecond)
	cat := &catalog.Catalog{Dir: filepath.Join(dir, "manifests")}
	cfg.Store, cfg.Audit, cfg.Log, cfg.BaseURL, cfg.RunnerAddr = st, rec, log, "http://10.0.2.2:8080", "10.0.2.2:8443"
	cfg.SKUs = func() []*manifests.SKU {
		_, s, err := cat.Load("qemu-nvme")
		if err != nil {
			t.Error(err)
			return nil
		}
		return []*manifests.SKU{s}
	}
	en := enlist.New(cfg)
	hub := sessions.NewHub()
	ectx, cancel := context.WithCancel(ctx)
	eng := pipeline.New(ectx, pipeline.Config{Store: st, Hub: hub, Log: log, Audit: rec, Manifests: cat, BaseURL: cfg.BaseURL, RunnerAddr: cfg.RunnerAddr,
		ArtifactDir: filepath.Join(dir, "artifacts"), Enlist: en.Boot,
		ConnectBMC: func(context.Context, store.Node) (pipeline.BMC, error) { return nil, errors.New("no BMC in this test") }})
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer(server.OperatorAuth(rec, log)...)
	op := &server.OperatorService{Store: st, Starter: eng, Log: log, Enlist: en, BMCCADir: filepath.Join(dir, "bmc-ca")}
	curev1.RegisterRunnerServiceServer(gs, &server.RunnerService{Store: st, Hub: hub, Log: log, Audit: rec, Enlist: en})
	curev1.RegisterOperatorServiceServer(gs, op)
	go gs.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); eng.Wait(); gs.Stop(); conn.Close() })
	return &coord{st: st, eng: eng, runner: curev1.NewRunnerServiceClient(conn), operator: curev1.NewOperatorServiceClient(conn), op: op}
}

var enlistRE = regexp.MustCompile(`cure\.enlist=(\S+)`)

// boot is an unknown MAC's network boot: its discovery token.
func (c *coord) boot(t *testing.T, mac, from string) string {
	t.Helper()
	d, err := c.eng.BootDecision(context.Background(), mac, from)
	if err != nil || !d.Boot {
		t.Fatalf("boot of %s: %+v, %v", mac, d, err)
	}
	if !strings.Contains(d.Cmdline, "cure.mode=inspect") || strings.Contains(d.Cmdline, "cure.token=") || strings.Contains(d.Cmdline, "cure.node=") {
		t.Fatalf("enlistment boot's command line %q: want inspect mode, a discovery token and no boot token or node", d.Cmdline)
	}
	return enlistRE.FindStringSubmatch(d.Cmdline)[1]
}

// report is what a QEMU machine's runner reports in inspect mode.
func report(tok string) *curev1.InspectReport {
	return &curev1.InspectReport{Token: tok, BootId: "boot-1", Arch: "amd64",
		Inventory: &curev1.Inventory{System: &curev1.SystemInfo{Vendor: "QEMU", Serial: "QEMU-1234"}, CpuModel: "QEMU Virtual CPU",
			Nics: []*curev1.NetInterface{{Name: "eth0", Mac: unknownMAC, PciVendorId: 0x1af4}}},
		Bmc:    []*curev1.HostInterface{{InterfaceType: 0x40, BmcIp: "10.0.0.77", BmcPort: 443, IpDiscovery: "static"}},
		Drives: []*curev1.InspectDrive{{Name: "nvme0n1", Serial: "DISK1", Ssc: "Opal 2", PsidRevert: true}}}
}

// A discovery token opens the inspection report and nothing else: no
// runner session (so no assignment, PSID, BMC credential or host token),
// no attestation, no host callback, no operator call; the report is kept
// once; the records are capped and each source's boots rate-limited.
func TestEnlistGivesNoSecrets(t *testing.T) {
	start := time.Now()
	c := newCoord(t, enlist.Config{Max: 2, Burst: 3, Rate: 1e-6})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tok := c.boot(t, unknownMAC, peer)

	stream, err := c.runner.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.Send(&curev1.RunnerMessage{Msg: &curev1.RunnerMessage_Hello{Hello: &curev1.Hello{Token: tok, BootId: "boot-1",
		SessionSecret: strings.Repeat("s", 40), Identity: &curev1.Identity{BootMac: knownMAC, SystemSerial: "S1", NodeId: "node1"}}}})
	if msg, err := stream.Recv(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("session with a discovery token: %v, %v; want Unauthenticated and nothing sent", msg, err)
	}
	if _, err := c.runner.BeginAttestation(ctx, &curev1.AttestBegin{Token: tok, BootId: "boot-1"}); err == nil {
		t.Fatal("BeginAttestation accepted a discovery token")
	}
	form := func() (url.Values, error) { return url.Values{}, nil }
	for _, node := range []string{"node1", store.DiscoveredID(unknownMAC)} {
		if err := c.eng.HostReady(ctx, node, tok, peer, form); err == nil {
			t.Fatalf("host callback of %s accepted a discovery token", node)
		}
	}
	for name, call := range map[string]func() error{
		"Provision": func() error {
			_, err := c.operator.Provision(ctx, &curev1.ProvisionRequest{NodeIds: []string{"node1"}, Mode: curev1.Mode_MODE_PROVISION, Manifest: "qemu-nvme"})
			return err
		},
		"ShowNode":       func() error { _, err := c.operator.ShowNode(ctx, &curev1.ShowNodeRequest{NodeId: "node1"}); return err },
		"ListDiscovered": func() error { _, err := c.operator.ListDiscovered(ctx, &curev1.ListDiscoveredRequest{}); return err },
		"ApproveDiscovered": func() error {
			_, err := c.operator.ApproveDiscovered(ctx, &curev1.ApproveDiscoveredRequest{Id: "x"})
			return err
		},
	} {
		if code := status.Code(call()); code != codes.PermissionDenied && code != codes.Unauthenticated {
			t.Errorf("%s from the enlisting machine (no operator certificate): %v, want refused", name, code)
		}
	}
	if r, err := c.st.LatestRun(ctx, "node1"); err == nil {
		t.Fatalf("a run %s exists", r.ID)
	}

	if _, err := c.runner.Inspect(ctx, report("not-a-token")); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("report with a made-up token: %v", err)
	}
	ack, err := c.runner.Inspect(ctx, report(tok))
	if err != nil || ack.GetDiscoveredId() != store.DiscoveredID(unknownMAC) {
		t.Fatalf("report: %v, %v", ack, err)
	}
	if _, err := c.runner.Inspect(ctx, report(tok)); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("second report with one token: %v", err)
	}
	d, err := c.st.GetDiscovered(ctx, ack.GetDiscoveredId())
	if err != nil || d.State != store.DiscoveredReported || bytes.Contains(d.Report, []byte(tok)) {
		t.Fatalf("record %+v, %v: want reported, without its token", d, err)
	}

	// The cap: the second MAC fits, a third does not; a known MAC is
	// never enlisted. The source budget: 3 boots, then refusals.
	c.boot(t, "52:54:00:00:00:02", "10.0.2.16")
	if _, err := c.eng.BootDecision(ctx, "52:54:00:00:00:03", "10.0.2.17"); !errors.Is(err, bootgate.ErrRateLimited) {
		t.Fatalf("third record past a cap of 2: %v", err)
	}
	if d, err := c.eng.BootDecision(ctx, knownMAC, peer); err != nil || strings.Contains(d.Cmdline, "cure.enlist") {
		t.Fatalf("known MAC: %+v, %v", d, err)
	}
	for i := range 4 {
		if _, err := c.eng.BootDecision(ctx, "52:54:00:00:00:02", "10.0.2.19"); (i < 3) != (err == nil) || (err != nil && !errors.Is(err, bootgate.ErrRateLimited)) {
			t.Fatalf("boot %d from a fresh source (burst 3): %v", i+1, err)
		}
	}
	t.Logf("took %s", time.Since(start).Round(time.Millisecond))
}

// The cheap TestEnlistUnknownMachine (the QEMU one is make e2e-enlist's):
// an unknown MAC's boot enlists, the runner's inspect report makes a
// discovered record with its inventory, BMC record and proposal, and the
// approval makes a node the normal boot gate then answers.
func TestEnlistUnknownMachineInProcess(t *testing.T) {
	start := time.Now()
	c := newCoord(t, enlist.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tok := c.boot(t, unknownMAC, peer)
	if _, err := c.runner.Inspect(ctx, report(tok)); err != nil {
		t.Fatal(err)
	}
	l, err := c.op.ListDiscovered(ctx, &curev1.ListDiscoveredRequest{})
	if err != nil || len(l.GetDiscovered()) != 1 {
		t.Fatalf("discovered: %v, %v", l, err)
	}
	d := l.GetDiscovered()[0]
	if d.GetProposedSku() != "qemu-nvme" || d.GetProposedName() != "vm-525400000099" || d.GetReport().GetBmc()[0].GetBmcIp() != "10.0.0.77" ||
		d.GetReport().GetInventory().GetSystem().GetSerial() != "QEMU-1234" || !d.GetReport().GetDrives()[0].GetPsidRevert() || d.GetMac() != unknownMAC {
		t.Fatalf("discovered record %v", d)
	}
	if _, err := c.op.ApproveDiscovered(ctx, &curev1.ApproveDiscoveredRequest{Id: d.GetId()}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("approval without BMC credentials: %v", err)
	}
	ar, err := c.op.ApproveDiscovered(ctx, &curev1.ApproveDiscoveredRequest{Id: d.GetId(),
		Node: &curev1.NodeSpec{Bmc: &curev1.BMCSpec{Username: "admin", Password: "pw", Insecure: true}}})
	if err != nil || ar.GetNodeId() != "vm-525400000099" || ar.GetBmcUrl() != "https://10.0.0.77" {
		t.Fatalf("approve: %v, %v", ar, err)
	}
	n, err := c.st.NodeByMAC(ctx, unknownMAC)
	if err != nil || n.ID != "vm-525400000099" || n.SKU != "qemu-nvme" || n.SystemSerial != "QEMU-1234" || n.BMCPassword != "pw" {
		t.Fatalf("node %+v, %v", n, err)
	}
	if _, err := c.op.ApproveDiscovered(ctx, &curev1.ApproveDiscoveredRequest{Id: d.GetId()}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("second approval: %v", err)
	}
	// Now a node: the normal gate answers its boots (no run, no CURE).
	bd, err := c.eng.BootDecision(ctx, unknownMAC, peer)
	if err != nil || bd.Boot || !strings.Contains(bd.Reason, "no active run") {
		t.Fatalf("approved node's boot: %+v, %v", bd, err)
	}
	if l, _ := c.op.ListDiscovered(ctx, &curev1.ListDiscoveredRequest{}); len(l.GetDiscovered()) != 0 {
		t.Fatalf("approved machine still pending: %v", l)
	}
	t.Log(fmt.Sprintf("took %s", time.Since(start).Round(time.Millisecond)))
}
