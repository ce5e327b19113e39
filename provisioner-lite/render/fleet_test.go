package render

import (
	"bytes"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

func TestParseSelector(t *testing.T) {
	sel, err := ParseSelector(" rack=r12, sku = hgx-b200 ")
	if err != nil || len(sel) != 2 || sel["rack"] != "r12" || sel["sku"] != "hgx-b200" {
		t.Fatalf("ParseSelector: %v %v", sel, err)
	}
	if sel, err := ParseSelector(""); sel != nil || err != nil {
		t.Fatalf("empty selector: %v %v", sel, err)
	}
	for _, bad := range []string{"rack", "=r12", "rack=r1,rack=r2"} {
		if _, err := ParseSelector(bad); err == nil {
			t.Errorf("ParseSelector(%q) accepted", bad)
		}
	}
}

func TestPrintFleetFailuresFirst(t *testing.T) {
	var b bytes.Buffer
	PrintFleet(&b, &curev1.FleetStatus{Nodes: 5000, Active: 4000,
		ByStatus: map[string]int64{"running": 4000, "succeeded": 950, "failed": 40, "attention": 10},
		ByPhase:  map[string]int64{"os_install": 3000, "nvme": 1000},
		Failures: []*curev1.FleetRun{{NodeId: "n0042", Status: "failed", Phase: "nic", Message: "flash of nic/0000:17:00.0 failed"}}})
	out := b.String()
	if !strings.Contains(out, "5000 nodes, 4000 active runs") || strings.Index(out, "failed 40") > strings.Index(out, "running 4000") ||
		!strings.Contains(out, "os_install 3000, nvme 1000") || !strings.Contains(out, "n0042") {
		t.Fatalf("fleet summary:\n%s", out)
	}
}
