package store

import (
	"errors"
	"testing"
)

// A pool move lands only from the states it names; a node in another
// state is a PoolConflict naming it, and nothing changes. State "" takes
// the node out of the pool; removed nodes are not listed and cannot move.
func TestNodePool(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	mustNode(t, s, testNode("n2", "52:54:00:00:00:02"))
	if p, err := s.NodePool(ctx, "n1"); err != nil || p.State != "" {
		t.Fatalf("fresh node: %+v, %v", p, err)
	}
	if _, err := s.SetNodePool(ctx, NodePool{NodeID: "n1", State: "in_service", Reason: "provisioned", Actor: "coordinator"}); err != nil {
		t.Fatal(err)
	}
	prev, err := s.SetNodePool(ctx, NodePool{NodeID: "n1", State: "draining", Reason: "kernel update", Actor: "alice"}, "in_service")
	if err != nil || prev.State != "in_service" || prev.Reason != "provisioned" {
		t.Fatalf("drain: prev %+v, %v", prev, err)
	}
	_, err = s.SetNodePool(ctx, NodePool{NodeID: "n1", State: "revalidating"}, "drained", "ready")
	var pc *PoolConflict
	if !errors.As(err, &pc) || pc.State != "draining" {
		t.Fatalf("revalidate while draining: %v", err)
	}
	if p, _ := s.NodePool(ctx, "n1"); p.State != "draining" || p.Actor != "alice" || p.Reason != "kernel update" || p.Since.IsZero() {
		t.Errorf("after a refused move: %+v", p)
	}
	if _, err := s.SetNodePool(ctx, NodePool{NodeID: "n2", State: "draining"}, "in_service"); !errors.As(err, &pc) || pc.State != "" {
		t.Errorf("drain of a node not in the pool: %v", err)
	}
	if _, err := s.SetNodePool(ctx, NodePool{NodeID: "n1", State: "revalidating", AutoReturn: true}, "draining"); err != nil {
		t.Fatal(err)
	}
	if set, err := s.SetNodePoolRun(ctx, "n1", "revalidating", "run-1"); !set || err != nil {
		t.Fatalf("SetNodePoolRun: %v, %v", set, err)
	}
	if set, _ := s.SetNodePoolRun(ctx, "n1", "revalidating", "run-2"); set {
		t.Error("a second run replaced the first")
	}
	all, err := s.NodePools(ctx)
	if err != nil || len(all) != 1 || all["n1"].RunID != "run-1" || !all["n1"].AutoReturn {
		t.Fatalf("NodePools = %+v, %v", all, err)
	}
	if c, err := s.PoolCounts(ctx); err != nil || len(c) != 1 || c["revalidating"] != 1 {
		t.Fatalf("PoolCounts = %v, %v", c, err)
	}
	if _, err := s.SetNodePool(ctx, NodePool{NodeID: "n1"}); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.NodePool(ctx, "n1"); p.State != "" {
		t.Errorf("taken out of the pool: %+v", p)
	}
	if _, err := s.SetNodePool(ctx, NodePool{NodeID: "ghost", State: "in_service"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown node: %v", err)
	}
	if _, err := s.SetNodePool(ctx, NodePool{NodeID: "n2", State: "in_service"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveNode(ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	if all, _ := s.NodePools(ctx); len(all) != 0 {
		t.Errorf("removed node listed: %+v", all)
	}
	if c, _ := s.PoolCounts(ctx); len(c) != 0 {
		t.Errorf("removed node counted: %v", c)
	}
}

// The installed OS is recorded, replaced and forgotten; a node without one
// is ErrNotFound.
func TestInstalledOS(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	if _, err := s.InstalledOS(ctx, "n1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("none yet: %v", err)
	}
	if err := s.SetInstalledOS(ctx, InstalledOS{NodeID: "n1", TokenHash: TokenHash("a"), RunID: "r1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetInstalledOS(ctx, InstalledOS{NodeID: "n1", TokenHash: TokenHash("b"), RunID: "r2"}); err != nil {
		t.Fatal(err)
	}
	o, err := s.InstalledOS(ctx, "n1")
	if err != nil || o.TokenHash != TokenHash("b") || o.RunID != "r2" || o.InstalledAt.IsZero() {
		t.Fatalf("InstalledOS = %+v, %v", o, err)
	}
	if err := s.SetInstalledOS(ctx, InstalledOS{NodeID: "n1", RunID: "r3"}); err == nil {
		t.Error("an empty token hash was stored")
	}
	if err := s.ForgetInstalledOS(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.InstalledOS(ctx, "n1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("after forget: %v", err)
	}
}
