package store

import (
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// NodeCount counts the inventory's nodes, a removed one no more.
func TestNodeCount(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	if n, err := s.NodeCount(ctx); err != nil || n != 0 {
		t.Fatalf("empty store: %d, %v", n, err)
	}
	mustNode(t, s, testNode("a", "52:54:00:00:00:01"))
	mustNode(t, s, testNode("b", "52:54:00:00:00:02"))
	if n, err := s.NodeCount(ctx); err != nil || n != 2 {
		t.Fatalf("two nodes: %d, %v", n, err)
	}
	if err := s.CreateRun(ctx, Run{ID: "r1", NodeID: "a", Status: curev1.RunStatus_RUN_SUCCEEDED, StartedAt: time.Now(), EndedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RemoveNode(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.NodeCount(ctx); err != nil || n != 1 {
		t.Fatalf("after removing a: %d, %v", n, err)
	}
}
