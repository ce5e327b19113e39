package store

import (
	"context"
	"reflect"
	"testing"
)

// TestNodeCablingRoundTrip: a node's cabling map is kept with the node and
// replaced by an import; a node without one reads back none.
func TestNodeCablingRoundTrip(t *testing.T) {
	s, _ := openTest(t)
	ctx := context.Background()
	plan := map[string]Cable{
		"enp1s0": {Switch: "leaf-r12-a", Port: "Ethernet12"},
		"enp2s0": {Chassis: "0c:42:a1:00:00:02", Port: "swp7"},
	}
	if _, _, err := s.PutNodes(ctx, []Node{{ID: "n1", MACs: []string{"52:54:00:00:00:01"}, Cabling: plan}, {ID: "n2", MACs: []string{"52:54:00:00:00:02"}}}, false); err != nil {
		t.Fatal(err)
	}
	n1, err := s.GetNode(ctx, "n1")
	if err != nil || !reflect.DeepEqual(n1.Cabling, plan) {
		t.Fatalf("GetNode(n1).Cabling = %v, %v; want %v", n1.Cabling, err, plan)
	}
	if n2, err := s.GetNode(ctx, "n2"); err != nil || n2.Cabling != nil {
		t.Errorf("GetNode(n2).Cabling = %v, %v; want none", n2.Cabling, err)
	}
	n1.Cabling = nil
	if _, _, err := s.PutNodes(ctx, []Node{n1}, true); err != nil {
		t.Fatal(err)
	}
	if n1, err = s.GetNode(ctx, "n1"); err != nil || n1.Cabling != nil {
		t.Errorf("after an import without cabling: %v, %v", n1.Cabling, err)
	}
}
