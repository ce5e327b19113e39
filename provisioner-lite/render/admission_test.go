package render

import (
	"bytes"
	"strings"
	"testing"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

func TestPrintAdmission(t *testing.T) {
	var b bytes.Buffer
	PrintAdmission(&b, &curev1.NodeAdmissionResponse{NodeId: "gpu-001", Sku: "hgx-b200", Policy: true, Decision: "refuse",
		Pool: &curev1.PoolStatus{State: curev1.PoolState_POOL_QUARANTINED, Reason: "admission refused: acceptance failed"},
		Requirements: []*curev1.AdmissionRequirement{
			{Name: "boot_path", State: "met", RunId: "r1", Detail: "booted by uefi-https", Evidence: "provision run r1: uefi-https"},
			{Name: "acceptance", State: "failed", RunId: "r2", Detail: "suite burnin-24h-hgx run r2 failed", Evidence: "bmc/psu/1 psu FAIL"},
		}})
	out := b.String()
	for _, want := range []string{"node gpu-001 (SKU hgx-b200): pool quarantined", "admission: refuse", "acceptance   failed  r2", "[bmc/psu/1 psu FAIL]"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	PrintAdmission(&b, &curev1.NodeAdmissionResponse{NodeId: "n", Decision: "admit"})
	if !strings.Contains(b.String(), "no spec.admission") {
		t.Errorf("a SKU without a policy: %s", b.String())
	}
}
