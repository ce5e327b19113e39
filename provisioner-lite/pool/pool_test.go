package pool

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/metrics"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// starter creates runs in the store as the engine would, or fails.
type starter struct {
	st   *store.Store
	fail error
	runs []store.Run
}

func (s *starter) Start(ctx context.Context, nodeID string, mode modes.Mode, manifest string, _ bool) (string, error) {
	if s.fail != nil {
		return "", s.fail
	}
	r := store.Run{ID: nodeID + "-run", NodeID: nodeID, Mode: mode, Manifest: manifest, Status: curev1.RunStatus_RUN_RUNNING,
		StartedAt: time.Now().UTC()}
	if err := s.st.CreateRun(ctx, r); err != nil {
		return "", err
	}
	s.runs = append(s.runs, r)
	return r.ID, nil
}

type heard struct {
	mu sync.Mutex
	cs []Change
}

func (h *heard) add(c Change) { h.mu.Lock(); h.cs = append(h.cs, c); h.mu.Unlock() }
func (h *heard) path() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var p []string
	for _, c := range h.cs {
		p = append(p, c.From.Show()+">"+c.To.Show())
	}
	return strings.Join(p, " ")
}

func newPool(t *testing.T) (*Pool, *store.Store, *starter, *heard, *metrics.Metrics) {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "cure.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.UpsertNode(context.Background(), store.Node{ID: "n1", SKU: "qemu-nvme", MACs: []string{"52:54:00:00:00:01"}}); err != nil {
		t.Fatal(err)
	}
	s, h, m := &starter{st: st}, &heard{}, metrics.New(metrics.Options{})
	return New(Config{Store: st, Starter: s, Announce: h.add, Metrics: m, StartGrace: time.Millisecond}), st, s, h, m
}

func endRun(t *testing.T, st *store.Store, r store.Run, status curev1.RunStatus, verdicts ...store.Verdict) store.Run {
	t.Helper()
	ctx := context.Background()
	for _, v := range verdicts {
		v.RunID, v.Time = r.ID, time.Now()
		if err := st.PutVerdict(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	r.Status, r.EndedAt, r.Message = status, time.Now().UTC(), "ended"
	if err := st.UpdateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	return r
}

// The loop through the Pool: a provision puts the node in service, drain
// and drained move it as asked (out of order refused, nothing changed),
// a revalidation starts its run and its end decides; every move is
// announced in order and the gauge follows.
func TestPoolLoop(t *testing.T) {
	p, st, s, h, m := newPool(t)
	ctx := context.Background()
	p.RunEnded(ctx, store.Run{ID: "prov", NodeID: "n1", Mode: modes.Provision, Status: curev1.RunStatus_RUN_SUCCEEDED})
	if _, err := p.Ask(ctx, "n1", MarkDrain, "sched", ""); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "node is in_service") {
		t.Fatalf("drained before drain: %v", err)
	}
	if err := p.Admit(ctx, "n1", modes.Service); !errors.Is(err, ErrRefused) {
		t.Errorf("service admitted on a node in service: %v", err)
	}
	if np, err := p.Ask(ctx, "n1", Drain, "alice", "firmware day"); err != nil || np.State != string(Draining) || np.Reason != "firmware day" || np.Actor != "alice" {
		t.Fatalf("drain: %+v, %v", np, err)
	}
	if _, err := p.Revalidate(ctx, "n1", RevalidateRequest{Suite: "s", Mode: modes.Burnin, Actor: "alice"}); !errors.Is(err, ErrRefused) || len(s.runs) != 0 {
		t.Fatalf("revalidate while draining: %v (runs %d)", err, len(s.runs))
	}
	if _, err := p.Ask(ctx, "n1", MarkDrain, "sched", "jobs moved"); err != nil {
		t.Fatal(err)
	}
	if err := p.Admit(ctx, "n1", modes.Service); err != nil {
		t.Errorf("service refused on a drained node: %v", err)
	}
	np, err := p.Revalidate(ctx, "n1", RevalidateRequest{Suite: "s", Mode: modes.Burnin, Actor: "alice"})
	if err != nil || np.State != string(Revalidating) || np.RunID != "n1-run" {
		t.Fatalf("revalidate: %+v, %v", np, err)
	}
	if err := p.Reconcile(ctx); err != nil { // sets the gauge, as Run does
		t.Fatal(err)
	}
	if g := poolGauge(t, m, Revalidating); g != 1 {
		t.Errorf("gauge revalidating = %v", g)
	}
	p.RunEnded(ctx, endRun(t, st, s.runs[0], curev1.RunStatus_RUN_SUCCEEDED, store.Verdict{Component: "memory", Check: "memtest", Status: curev1.VerdictStatus_PASS}))
	if np, _ := st.NodePool(ctx, "n1"); np.State != string(Ready) || !strings.Contains(np.Reason, "passed") {
		t.Fatalf("after a pass: %+v", np)
	}
	if _, err := p.Ask(ctx, "n1", Return, "alice", ""); err != nil {
		t.Fatal(err)
	}
	want := "->in_service in_service>draining draining>drained drained>revalidating revalidating>ready ready>in_service"
	if got := h.path(); got != want {
		t.Errorf("announced %s\nwant      %s", got, want)
	}
	if c := h.cs[4]; c.RunID != "n1-run" || c.Actor != Coordinator || c.SKU != "qemu-nvme" {
		t.Errorf("judgement announced as %+v", c)
	}
	if err := p.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	gauge := func(state State) float64 { return poolGauge(t, m, state) }
	if gauge(InService) != 1 || gauge(Ready) != 0 || gauge(RMA) != 0 {
		t.Errorf("gauge in_service=%v ready=%v rma=%v", gauge(InService), gauge(Ready), gauge(RMA))
	}
}

// A revalidation with a FAIL goes to rma; a start that fails puts the node
// back as it was (both moves announced); a canceled one goes back to
// drained; an rma node cannot be returned.
func TestRevalidationOutcomes(t *testing.T) {
	p, st, s, h, _ := newPool(t)
	ctx := context.Background()
	if _, err := st.SetNodePool(ctx, store.NodePool{NodeID: "n1", State: string(Drained)}); err != nil {
		t.Fatal(err)
	}
	s.fail = errors.New("coordinator at capacity")
	if _, err := p.Revalidate(ctx, "n1", RevalidateRequest{Suite: "s", Mode: modes.Diagnostic}); err == nil || !strings.Contains(err.Error(), "capacity") {
		t.Fatalf("failed start: %v", err)
	}
	if np, _ := st.NodePool(ctx, "n1"); np.State != string(Drained) || !strings.Contains(np.Reason, "capacity") || h.path() != "drained>revalidating revalidating>drained" {
		t.Fatalf("after a failed start: %+v, announced %s", np, h.path())
	}
	s.fail = nil
	if _, err := p.Revalidate(ctx, "n1", RevalidateRequest{Suite: "s", Mode: modes.Diagnostic, AutoReturn: true}); err != nil {
		t.Fatal(err)
	}
	announced := h.path()
	if _, err := p.Revalidate(ctx, "n1", RevalidateRequest{Suite: "s", Mode: modes.Diagnostic}); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "is active") {
		t.Errorf("revalidate while its run is active: %v", err)
	}
	if h.path() != announced {
		t.Errorf("a refused revalidation was announced: %s", h.path())
	}
	p.RunEnded(ctx, endRun(t, st, s.runs[0], curev1.RunStatus_RUN_FAILED, store.Verdict{Component: "gpu/3", Check: "gpu-burn", Status: curev1.VerdictStatus_FAIL}))
	np, _ := st.NodePool(ctx, "n1")
	if np.State != string(RMA) || !strings.Contains(np.Reason, "gpu/3 gpu-burn FAIL") {
		t.Fatalf("after a FAIL: %+v", np)
	}
	if _, err := p.Ask(ctx, "n1", Return, "alice", ""); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "node is rma") {
		t.Errorf("return from rma: %v", err)
	}
	if _, err := p.Revalidate(ctx, "n1", RevalidateRequest{Suite: "s", Mode: modes.Provision}); !errors.Is(err, ErrRefused) {
		t.Errorf("revalidation in provision mode: %v", err)
	}
}

// A revalidation run that ended while no coordinator heard it is judged
// by Reconcile; a revalidating node whose run never started goes back to
// drained.
func TestReconcile(t *testing.T) {
	p, st, s, h, _ := newPool(t)
	ctx := context.Background()
	if _, err := st.SetNodePool(ctx, store.NodePool{NodeID: "n1", State: string(Drained)}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Revalidate(ctx, "n1", RevalidateRequest{Suite: "s", Mode: modes.Diagnostic}); err != nil {
		t.Fatal(err)
	}
	if err := p.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if np, _ := st.NodePool(ctx, "n1"); np.State != string(Revalidating) {
		t.Fatalf("a running revalidation was touched: %+v", np)
	}
	endRun(t, st, s.runs[0], curev1.RunStatus_RUN_SUCCEEDED)
	if err := p.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if np, _ := st.NodePool(ctx, "n1"); np.State != string(Ready) {
		t.Fatalf("unheard end not judged: %+v", np)
	}
	// Revalidating since after the latest run started, and none since.
	if _, err := st.SetNodePool(ctx, store.NodePool{NodeID: "n1", State: string(Revalidating), Since: time.Now().Add(time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // past StartGrace
	if err := p.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if np, _ := st.NodePool(ctx, "n1"); np.State != string(Drained) || !strings.Contains(np.Reason, "never started") {
		t.Fatalf("lost start: %+v", np)
	}
	if !strings.HasSuffix(h.path(), "revalidating>ready revalidating>drained") {
		t.Errorf("announced %s", h.path())
	}
}

// A provision or wipe started on a node in the pool takes it out (the
// scheduler is told); a successful wipe leaves it out, a provision puts
// it back in service.
func TestTenancyEnds(t *testing.T) {
	p, st, _, h, _ := newPool(t)
	ctx := context.Background()
	p.RunEnded(ctx, store.Run{ID: "prov", NodeID: "n1", Mode: modes.Provision, Status: curev1.RunStatus_RUN_SUCCEEDED})
	p.RunStarted(ctx, "n1", "wipe-1", modes.Wipe)
	p.RunStarted(ctx, "n1", "diag", modes.Diagnostic) // not a tenancy end
	p.RunEnded(ctx, store.Run{ID: "wipe-1", NodeID: "n1", Mode: modes.Wipe, Status: curev1.RunStatus_RUN_SUCCEEDED})
	p.RunEnded(ctx, store.Run{ID: "prov-2", NodeID: "n1", Mode: modes.Provision, Status: curev1.RunStatus_RUN_FAILED})
	if np, _ := st.NodePool(ctx, "n1"); np.State != "" {
		t.Fatalf("after a wipe and a failed provision: %+v", np)
	}
	if got := h.path(); got != "->in_service in_service>-" {
		t.Errorf("announced %s", got)
	}
}

// poolGauge reads cure_pool_nodes{state} as scraped (-1: no such series).
func poolGauge(t *testing.T, m *metrics.Metrics, state State) float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "cure_pool_nodes" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "state" && l.GetValue() == string(state) {
					return s.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}
