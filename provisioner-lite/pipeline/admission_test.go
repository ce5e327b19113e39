package pipeline_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/manifests"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/catalog"
	"github.com/cure-oss/cure/provisioner-lite/notify"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/pool"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/qemu-test/vbmc"
)

// admissionFixture is the scripted node on a SKU whose spec.admission
// names the QEMU diagnostic suite (ending in the installed OS), with the
// pool wired as the coordinator wires it and a webhook receiver.
func admissionFixture(t *testing.T) (*fixture, *pool.Pool, *receiver, poolAPI) {
	t.Helper()
	secret := []byte("0123456789abcdef-admission")
	rc := &receiver{t: t, secret: secret}
	hook := newHookServer(t, rc)
	notifier, err := notify.New(notify.Config{URLs: []string{hook}, Secret: secret, Workers: 1, BaseDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { notifier.Close(context.Background()) })
	var pl *pool.Pool
	f := newFixtureCfg(t, func(sku *manifests.SKU, _ string) {
		sku.Spec.Admission = &manifests.Admission{Boot: manifests.BootPXE, Attestation: manifests.AdmitUnattested, FleetBand: manifests.FleetBandIfAvailable,
			Acceptance: &manifests.Acceptance{Suite: "qemu-diagnostic", Mode: string(modes.Diagnostic), MaxAge: manifests.DefaultAcceptanceMaxAge}}
	}, nil, func(c *pipeline.Config) {
		c.Notify = func(rn pipeline.RunNotice) { pl.RunEnded(context.Background(), rn.Run) }
	})
	suite, err := os.ReadFile("../../manifests/examples/suites/qemu-diagnostic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	suite = []byte(strings.Replace(string(suite), "\nspec:\n", "\nspec:\n  end: host-os\n", 1))
	if err := os.MkdirAll(filepath.Join(f.dir, "manifests", "suites"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, "manifests", "suites", "qemu-diagnostic.yaml"), suite, 0o644); err != nil {
		t.Fatal(err)
	}
	catalog := &catalog.Catalog{Dir: filepath.Join(f.dir, "manifests")}
	pl = pool.New(pool.Config{Store: f.st, Starter: f.eng, Policies: catalog, Announce: func(c pool.Change) { notifier.Notify(c.Payload()) }, Metrics: f.metrics})
	return f, pl, rc, startPoolAPI(t, f, pl)
}

// waitPool waits until node1's pool state is want.
func waitPool(t *testing.T, st *store.Store, want pool.State) store.NodePool {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		np, err := st.NodePool(context.Background(), "node1")
		if err == nil && np.State == string(want) {
			return np
		}
		if time.Now().After(deadline) {
			t.Fatalf("node1 pool %+v (%v), want %s", np, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestProvisionWaitsForAcceptance: on a SKU with spec.admission a
// provision that succeeds leaves the node accepting and starts its
// acceptance suite; only when that passes is the node in service, and the
// scheduler's webhook fires once, then. curectl's admission view lists
// every requirement met, with its run.
func TestProvisionWaitsForAcceptance(t *testing.T) {
	f, _, rc, api := admissionFixture(t)
	// The acceptance suite takes a while: the node is seen accepting.
	scriptAcceptance(f, 500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	provID := provisionNode1(ctx, t, f, api)
	np := waitPool(t, f.st, pool.Accepting)
	accID := np.RunID
	if accID == "" || accID == provID || !strings.Contains(np.Reason, "acceptance run "+accID) {
		t.Fatalf("accepting %+v: want the acceptance run started and named", np)
	}
	adm, err := api.vera.NodeAdmission(ctx, &curev1.NodeAdmissionRequest{NodeId: "node1"})
	if err != nil {
		t.Fatal(err)
	}
	if adm.GetDecision() != "wait" || !adm.GetPolicy() {
		t.Errorf("admission during the acceptance run: %v", adm)
	}
	if got := rc.states(); len(got) != 0 {
		t.Errorf("webhooks before admission: %v (the scheduler must not hear of an accepting node)", got)
	}
	acc := f.waitRun(accID)
	if acc.Status != curev1.RunStatus_RUN_SUCCEEDED || acc.Mode != modes.Diagnostic || acc.Manifest != "qemu-diagnostic" {
		t.Fatalf("acceptance run %s %s %s: %s", acc.Mode, acc.Manifest, acc.Status, acc.Message)
	}
	np = waitPool(t, f.st, pool.InService)
	if np.RunID != accID || !strings.Contains(np.Reason, "admitted") {
		t.Errorf("in service %+v: want admitted by run %s", np, accID)
	}
	adm, err = api.vera.NodeAdmission(ctx, &curev1.NodeAdmissionRequest{NodeId: "node1"})
	if err != nil {
		t.Fatal(err)
	}
	if adm.GetDecision() != "admit" || adm.GetPool().GetState() != curev1.PoolState_POOL_IN_SERVICE {
		t.Errorf("admission after: %v", adm)
	}
	names := map[string]*curev1.AdmissionRequirement{}
	for _, q := range adm.GetRequirements() {
		names[q.GetName()] = q
		if q.GetState() != "met" {
			t.Errorf("requirement %s: %s (%s)", q.GetName(), q.GetState(), q.GetDetail())
		}
	}
	if q := names["acceptance"]; q == nil || q.GetRunId() != accID {
		t.Errorf("acceptance requirement %v: want run %s", q, accID)
	}
	if q := names["boot_path"]; q == nil || !strings.Contains(q.GetEvidence(), "pxe") {
		t.Errorf("boot path requirement %v", q)
	}
	waitDeliveries(t, rc, 1)
	time.Sleep(200 * time.Millisecond) // a second delivery would arrive by now
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.pool) != 1 || rc.pool[0].PoolState != string(pool.InService) || rc.pool[0].RunID != accID {
		t.Errorf("node.pool webhooks %+v: want one, in_service, naming the acceptance run", rc.pool)
	}
}

// TestAcceptanceFailureQuarantines: an acceptance run with a FAIL verdict
// leaves the node quarantined naming the part; Return cannot bypass it.
func TestAcceptanceFailureQuarantines(t *testing.T) {
	f, _, rc, api := admissionFixture(t)
	f.mu.Lock()
	f.verdicts = map[modes.PhaseName][]*curev1.Verdict{modes.Validate: {{Component: "nvme/0", Check: "nvme-health", Status: curev1.VerdictStatus_FAIL, Message: "critical warning 0x4"}}}
	f.phaseStatus = func(p modes.PhaseName, _ int) curev1.PhaseStatus {
		if p == modes.Validate {
			return curev1.PhaseStatus_PHASE_FAILED
		}
		return curev1.PhaseStatus_PHASE_OK
	}
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	provisionNode1(ctx, t, f, api)
	np := waitPool(t, f.st, pool.Quarantined)
	if !strings.Contains(np.Reason, "nvme/0 nvme-health FAIL") {
		t.Errorf("quarantined %+v: want the failing part named", np)
	}
	if _, err := api.olga.ReturnToPool(ctx, &curev1.PoolRequest{NodeIds: []string{"node1"}}); err == nil {
		t.Error("return of a quarantined node succeeded")
	}
	waitDeliveries(t, rc, 1)
	if got := rc.states(); strings.Join(got, " ") != "quarantined" {
		t.Errorf("webhooks %v: want only quarantined", got)
	}
}

func waitDeliveries(t *testing.T, rc *receiver, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for len(rc.states()) < n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
}

func newHookServer(t *testing.T, rc *receiver) string {
	t.Helper()
	s := httptest.NewServer(rc)
	t.Cleanup(s.Close)
	return s.URL
}

// TestFailedPSUQuarantinesAcceptingNode: the whole gate on the virtual BMC:
// a provision on a SKU with spec.admission, then its acceptance suite,
// during which the BMC reports a failed PSU: the suite fails under the
// default BMC bars, and the node is quarantined naming the PSU, never in
// service (the QEMU TestFailedPSUBlocksAdmission proves the same PSU bar
// on a real boot).
func TestFailedPSUQuarantinesAcceptingNode(t *testing.T) {
	f, _, rc, api := admissionFixture(t)
	scriptAcceptance(f, 1500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	provisionNode1(ctx, t, f, api)
	accID := waitPool(t, f.st, pool.Accepting).RunID
	deadline := time.Now().Add(30 * time.Second)
	for f.phases(accID)[modes.Validate].Status != curev1.PhaseStatus_PHASE_RUNNING {
		if time.Now().After(deadline) {
			t.Fatal("the acceptance suite's validate never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := f.bmc.SetPartHealth(vbmc.PartPSU, "Bay1", "Critical", "Power supply 'PSU 1' has failed: AC input lost."); err != nil {
		t.Fatal(err)
	}
	if r := f.waitRun(accID); r.Status == curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("acceptance run with a failed PSU succeeded: %s", r.Message)
	}
	np := waitPool(t, f.st, pool.Quarantined)
	if !strings.Contains(np.Reason, "bmc/psu/Bay1") {
		t.Errorf("quarantined %+v: want the PSU named", np)
	}
	adm, err := api.vera.NodeAdmission(ctx, &curev1.NodeAdmissionRequest{NodeId: "node1"})
	if err != nil || adm.GetDecision() != "refuse" {
		t.Fatalf("admission %v, %v: want refuse", adm, err)
	}
	waitDeliveries(t, rc, 1)
	if got := rc.states(); strings.Join(got, " ") != "quarantined" {
		t.Errorf("webhooks %v: the node must never have been announced in service", got)
	}
}

// scriptAcceptance makes the scripted runner's validate phase take hold
// and report one passing check.
func scriptAcceptance(f *fixture, hold time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.verdicts = map[modes.PhaseName][]*curev1.Verdict{modes.Validate: {{Component: "memory", Check: "memory-patterns", Status: curev1.VerdictStatus_PASS}}}
	f.hold = map[modes.PhaseName]time.Duration{modes.Validate: hold}
}

// provisionNode1 provisions node1 through the operator API and returns
// the run, which must succeed.
func provisionNode1(ctx context.Context, t *testing.T, f *fixture, api poolAPI) string {
	t.Helper()
	prov, err := api.olga.Provision(ctx, &curev1.ProvisionRequest{NodeIds: []string{"node1"}})
	if err != nil {
		t.Fatal(err)
	}
	id := prov.GetRuns()[0].GetRunId()
	if r := f.waitRun(id); r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("provision ended %s: %s", r.Status, r.Message)
	}
	return id
}
