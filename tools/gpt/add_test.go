package gpt

import (
	"os"
	"strings"
	"testing"
)

// TestAddPartitionAfterImage: the array's remaining space becomes a new
// partition that sfdisk reads as a valid Linux data partition.
func TestAddPartitionAfterImage(t *testing.T) {
	p := image(t, twoParts)
	if err := os.Truncate(p, 64<<20); err != nil {
		t.Fatal(err)
	}
	n, err := AddPartitionDevice(p, "data")
	if err != nil || n != 3 {
		t.Fatalf("AddPartitionDevice = %d, %v", n, err)
	}
	if out := verify(t, p); !strings.Contains(out, "No errors detected") {
		t.Errorf("sfdisk --verify after add: %s", out)
	}
	parts := dump(t, p).PartitionTable.Partitions
	const last = 64<<20/512 - 1
	if len(parts) != 3 || parts[2].Start != 14336 || parts[2].Start+parts[2].Size-1 != (last-33+1)/2048*2048-1 || parts[2].Name != "data" {
		t.Errorf("partitions after add: %+v", parts)
	}
	if parts[1].Size != 8192 {
		t.Errorf("root changed: %+v", parts[1])
	}
	// The space is taken now: a second add refuses.
	if _, err := AddPartitionDevice(p, "more"); err == nil || !strings.Contains(err.Error(), "less than 1 MiB free") {
		t.Errorf("second add: %v", err)
	}
}

func TestPlanAddRefusesGrow(t *testing.T) {
	if err := PlanAdd(&Table{SectorSize: 512}, &Plan{Grow: &Grow{Number: 2}}, "x"); err == nil {
		t.Error("add and grow together accepted")
	}
	if err := PlanAdd(&Table{SectorSize: 512}, &Plan{}, strings.Repeat("n", 37)); err == nil {
		t.Error("37-unit name accepted")
	}
}
