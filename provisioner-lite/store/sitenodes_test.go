package store

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// Nodes added at run time: an add refuses an existing id, an import
// updates it, and a batch is written whole or not at all.
func TestPutNodesAddAndReplace(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	added, updated, err := s.PutNodes(ctx, []Node{testNode("a", "52:54:00:00:00:01"), testNode("b", "52:54:00:00:00:02")}, false)
	if err != nil || !reflect.DeepEqual(added, []string{"a", "b"}) || len(updated) != 0 {
		t.Fatalf("first add: added %v updated %v, %v", added, updated, err)
	}
	// An add of an existing id refuses, and the batch's other node is not written.
	_, _, err = s.PutNodes(ctx, []Node{testNode("c", "52:54:00:00:00:03"), testNode("a", "52:54:00:00:00:01")}, false)
	if !errors.Is(err, ErrNodeExists) || !strings.Contains(err.Error(), "node a") {
		t.Fatalf("add of an existing id: %v, want ErrNodeExists naming a", err)
	}
	if _, err := s.GetNode(ctx, "c"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("node c of the refused batch: %v, want not found", err)
	}
	// A MAC of another node refuses the whole batch too.
	_, _, err = s.PutNodes(ctx, []Node{testNode("c", "52:54:00:00:00:03"), testNode("d", "52:54:00:00:00:02")}, true)
	if err == nil || !strings.Contains(err.Error(), "MAC 52:54:00:00:00:02 already belongs to node b") {
		t.Fatalf("MAC of another node: %v", err)
	}
	if _, err := s.GetNode(ctx, "c"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("node c of the refused batch: %v, want not found", err)
	}
	// An import updates.
	a := testNode("a", "52:54:00:00:00:0a")
	a.SKU = "hgx-b200"
	added, updated, err = s.PutNodes(ctx, []Node{a, testNode("c", "52:54:00:00:00:03")}, true)
	if err != nil || !reflect.DeepEqual(added, []string{"c"}) || !reflect.DeepEqual(updated, []string{"a"}) {
		t.Fatalf("import: added %v updated %v, %v", added, updated, err)
	}
	got, err := s.GetNode(ctx, "a")
	if err != nil || got.SKU != "hgx-b200" || !reflect.DeepEqual(got.MACs, []string{"52:54:00:00:00:0a"}) {
		t.Fatalf("a after import: %+v, %v", got, err)
	}
	if n, err := s.NodeByMAC(ctx, "52:54:00:00:00:01"); err == nil {
		t.Fatalf("a's old MAC still finds %s", n.ID)
	}
}

// Removal: refused while a run is active; with history the node is hidden
// but its runs and inventories stay, its MACs and secrets go; without
// history it is deleted; the id can be used again.
func TestRemoveNode(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("a", "52:54:00:00:00:01"))
	mustNode(t, s, testNode("fresh", "52:54:00:00:00:02"))
	if err := s.CreateRun(ctx, Run{ID: "r1", NodeID: "a", Status: curev1.RunStatus_RUN_RUNNING, StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutInventory(ctx, InventoryRecord{NodeID: "a", RunID: "r1", BootID: "b1", JSON: []byte(`{"cpuCount":4}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveNode(ctx, "a"); !errors.Is(err, ErrActiveRun) || !strings.Contains(err.Error(), "r1") {
		t.Fatalf("remove with an active run: %v, want ErrActiveRun naming r1", err)
	}
	r, _ := s.GetRun(ctx, "r1")
	r.Status, r.EndedAt = curev1.RunStatus_RUN_SUCCEEDED, time.Now()
	if err := s.UpdateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	kept, err := s.RemoveNode(ctx, "a")
	if err != nil || kept != 1 {
		t.Fatalf("remove: kept %d, %v", kept, err)
	}
	if _, err := s.GetNode(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetNode of a removed node: %v", err)
	}
	if _, err := s.NodeByMAC(ctx, "52:54:00:00:00:01"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("NodeByMAC of a removed node: %v", err)
	}
	if idx, err := s.MACIndex(ctx); err != nil || len(idx) != 1 || idx["52:54:00:00:00:02"] != "fresh" {
		t.Fatalf("MACIndex after removal: %v, %v; want only fresh's MAC", idx, err)
	}
	ns, _ := s.ListNodes(ctx)
	sums, _ := s.NodeSummaries(ctx)
	if len(ns) != 1 || ns[0].ID != "fresh" || len(sums) != 1 {
		t.Fatalf("list after removal: %v / %v", ns, sums)
	}
	if _, err := s.RemoveNode(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second removal: %v, want not found", err)
	}
	if err := s.CreateRun(ctx, Run{ID: "r2", NodeID: "a", Status: curev1.RunStatus_RUN_RUNNING, StartedAt: time.Now()}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("run for a removed node: %v, want not found", err)
	}
	// The history stays, the secrets do not.
	if _, err := s.GetRun(ctx, "r1"); err != nil {
		t.Fatalf("run of a removed node: %v", err)
	}
	if inv, err := s.LatestInventory(ctx, "a"); err != nil || string(inv.JSON) != `{"cpuCount":4}` {
		t.Fatalf("inventory of a removed node: %+v, %v", inv, err)
	}
	var pw, psids string
	if err := s.r.QueryRowContext(ctx, `SELECT bmc_password, psids FROM nodes WHERE id = ?`, "a").Scan(&pw, &psids); err != nil || pw != "" || psids != "{}" {
		t.Fatalf("secrets of a removed node: %q %q %v", pw, psids, err)
	}
	// Its MAC is free; its id can come back (with its history).
	if _, _, err := s.PutNodes(ctx, []Node{testNode("b", "52:54:00:00:00:01")}, false); err != nil {
		t.Fatalf("reuse of a removed node's MAC: %v", err)
	}
	if added, _, err := s.PutNodes(ctx, []Node{testNode("a", "52:54:00:00:00:09")}, false); err != nil || len(added) != 1 {
		t.Fatalf("add of a removed id: %v %v", added, err)
	}
	if n, err := s.GetNode(ctx, "a"); err != nil || n.BMCPassword != "pw" {
		t.Fatalf("re-added node: %+v %v", n, err)
	}
	// Without history the row goes.
	if kept, err := s.RemoveNode(ctx, "fresh"); err != nil || kept != 0 {
		t.Fatalf("remove fresh: %d %v", kept, err)
	}
	var n int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM nodes WHERE id = ?`, "fresh").Scan(&n); err != nil || n != 0 {
		t.Fatalf("fresh rows: %d %v", n, err)
	}
}

func TestSetLabels(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("a", "52:54:00:00:00:01")) // rack=r12
	got, err := s.SetLabels(ctx, "a", map[string]string{"pool": "burnin", "rack": "r13"}, []string{"nothing"})
	if want := map[string]string{"pool": "burnin", "rack": "r13"}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("set: %v %v", got, err)
	}
	got, err = s.SetLabels(ctx, "a", nil, []string{"pool", "rack"})
	if err != nil || got != nil {
		t.Fatalf("remove all: %v %v", got, err)
	}
	if n, _ := s.GetNode(ctx, "a"); n.Labels != nil {
		t.Fatalf("stored labels %v", n.Labels)
	}
	if _, err := s.SetLabels(ctx, "nope", map[string]string{"a": "b"}, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown node: %v", err)
	}
}

// One inventory per boot; the run's and the node's latest are found; the
// prune keeps each finished run's newest.
func TestInventories(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("a", "52:54:00:00:00:01"))
	start := time.Now().Add(-time.Hour)
	if err := s.CreateRun(ctx, Run{ID: "r1", NodeID: "a", Status: curev1.RunStatus_RUN_RUNNING, StartedAt: start}); err != nil {
		t.Fatal(err)
	}
	put := func(run, boot, js string, at time.Time) bool {
		t.Helper()
		ok, err := s.PutInventory(ctx, InventoryRecord{NodeID: "a", RunID: run, BootID: boot, Time: at, Peer: "10.0.0.5", JSON: []byte(js), Truncated: boot == "b2"})
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !put("r1", "b1", `{"n":1}`, start.Add(time.Minute)) || put("r1", "b1", `{"n":"again"}`, start.Add(2*time.Minute)) {
		t.Fatal("a boot's first inventory must be stored once")
	}
	put("r1", "b2", `{"n":2}`, start.Add(3*time.Minute))
	got, err := s.RunInventory(ctx, "r1")
	if err != nil || string(got.JSON) != `{"n":2}` || !got.Truncated || got.Peer != "10.0.0.5" || got.BootID != "b2" {
		t.Fatalf("run inventory: %+v %v", got, err)
	}
	if got, err := s.InventoryBefore(ctx, "a", start.Add(90*time.Second)); err != nil || string(got.JSON) != `{"n":1}` {
		t.Fatalf("inventory before: %+v %v", got, err)
	}
	if _, err := s.RunInventory(ctx, "r0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no inventory: %v", err)
	}
	if _, err := s.PutInventory(ctx, InventoryRecord{NodeID: "a", RunID: "r1"}); err == nil {
		t.Fatal("an inventory without a boot id was stored")
	}
	// Active runs are not pruned; finished ones keep their newest.
	if n, err := s.PruneInventories(ctx, time.Now().Add(time.Hour)); err != nil || n != 0 {
		t.Fatalf("prune of an active run: %d %v", n, err)
	}
	r, _ := s.GetRun(ctx, "r1")
	r.Status, r.EndedAt = curev1.RunStatus_RUN_FAILED, time.Now()
	if err := s.UpdateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PruneInventories(ctx, time.Now().Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("prune: %d %v, want 1", n, err)
	}
	if got, err := s.LatestInventory(ctx, "a"); err != nil || string(got.JSON) != `{"n":2}` {
		t.Fatalf("after prune: %+v %v", got, err)
	}
}
