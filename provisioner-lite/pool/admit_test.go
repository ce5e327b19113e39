package pool

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/store"
)

// TestQuarantineWithoutPolicy: on a SKU without spec.admission a node
// quarantined for a measurement drift stays quarantined while the hold
// stands, periodic reconciles never release it, and once the hold is
// accepted it leaves the pool (an operator returns it), never straight
// into service.
func TestQuarantineWithoutPolicy(t *testing.T) {
	p, st, _, h, _ := newPool(t)
	ctx := context.Background()
	if err := st.RecordFirmware(ctx, store.FirmwareRecord{NodeID: "n1", SKU: "qemu-nvme", PCRs: map[string]string{"0": "aa"}, RunID: "r0", RecordedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := st.HoldFirmware(ctx, "n1", store.MeasurementHold{RunID: "r1", Detail: "PCR 0 differs", At: time.Now(), PCRs: map[string]string{"0": "bb"}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Quarantine(ctx, "n1", "r1", "firmware measurement drift: PCR 0 differs"); err != nil {
		t.Fatal(err)
	}
	if err := p.Reconsider(ctx, "n1", "alice", "asked"); err != nil {
		t.Fatal(err)
	}
	np, _ := st.NodePool(ctx, "n1")
	if np.State != string(Quarantined) || !strings.Contains(np.Reason, "measurement hold of run r1") {
		t.Fatalf("held node reconsidered: %+v", np)
	}
	if _, err := st.AcceptMeasurements(ctx, "n1", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := p.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if np, _ := st.NodePool(ctx, "n1"); np.State != string(Quarantined) {
		t.Fatalf("a periodic reconcile released a node of a SKU without admission: %+v", np)
	}
	if err := p.Reconsider(ctx, "n1", "alice", "measurements accepted"); err != nil {
		t.Fatal(err)
	}
	if np, _ := st.NodePool(ctx, "n1"); np.State != string(None) {
		t.Fatalf("after the accept: %+v, want out of the pool", np)
	}
	if got := h.path(); got != "-"+">quarantined quarantined>-" {
		t.Errorf("announced %q", got)
	}
}
