package store

import (
	"errors"
	"testing"
	"time"
)

// TestWriteFleetJudgementCAS: a conditional write lands once per revision
// (the second coordinator's rejudge of the same run is refused, nothing
// written), and pending records are listed by SKU within the window.
func TestWriteFleetJudgementCAS(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	suiteRunOn(t, s, "r1", "n1", "qemu-fleet")
	mustNode(t, s, testNode("n2", "52:54:00:00:00:02"))
	suiteRunOn(t, s, "r2", "n2", "qemu-fleet")
	zero := int64(0)
	rev, err := s.WriteFleetJudgement(ctx, FleetWrite{RunID: "r1", SKU: "hgx-h100", Pending: FleetUnbanded, Judgements: []byte(`{}`), IfRev: &zero})
	if err != nil || rev != 1 {
		t.Fatalf("first write: rev %d, %v", rev, err)
	}
	if _, err := s.WriteFleetJudgement(ctx, FleetWrite{RunID: "r1", SKU: "hgx-h100", Judgements: []byte(`{}`), IfRev: &zero}); !errors.Is(err, ErrFleetConflict) {
		t.Fatalf("a second first write: %v, want ErrFleetConflict", err)
	}
	if _, err := s.WriteFleetJudgement(ctx, FleetWrite{RunID: "r2", SKU: "hgx-h100", Pending: FleetError, Judgements: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RunFleetJudgement(ctx, "r2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a judgement in error read as one made: %v", err)
	}
	pend, err := s.PendingFleetJudgements(ctx, "hgx-h100", time.Now().Add(-time.Hour), 10)
	if err != nil || len(pend) != 2 || pend[0].RunID != "r1" || pend[0].Pending != FleetUnbanded || pend[0].Rev != 1 || pend[1].Pending != FleetError {
		t.Fatalf("pending %+v %v", pend, err)
	}
	if skus, err := s.PendingFleetSKUs(ctx, time.Now().Add(-time.Hour), 10); err != nil || len(skus) != 1 || skus[0] != "hgx-h100" {
		t.Errorf("SKUs with pending judgements %v %v", skus, err)
	}
	if p, _ := s.PendingFleetJudgements(ctx, "other", time.Now().Add(-time.Hour), 10); len(p) != 0 {
		t.Errorf("another SKU's pending: %+v", p)
	}
	one := int64(1)
	if rev, err := s.WriteFleetJudgement(ctx, FleetWrite{RunID: "r1", SKU: "hgx-h100", Judgements: []byte(`{"judgements":[{}]}`), IfRev: &one}); err != nil || rev != 2 {
		t.Fatalf("rejudge: rev %d, %v", rev, err)
	}
	if _, err := s.WriteFleetJudgement(ctx, FleetWrite{RunID: "r1", SKU: "hgx-h100", Pending: FleetUnbanded, Judgements: []byte(`{}`), IfRev: &one}); !errors.Is(err, ErrFleetConflict) {
		t.Fatalf("a stale rejudge: %v, want ErrFleetConflict", err)
	}
	rec, err := s.FleetRecordOf(ctx, "r1")
	if err != nil || rec.Pending != FleetFinal || rec.Rev != 2 || string(rec.Judgements) != `{"judgements":[{}]}` {
		t.Fatalf("record %+v %v", rec, err)
	}
	if p, _ := s.PendingFleetJudgements(ctx, "hgx-h100", time.Now().Add(-time.Hour), 10); len(p) != 1 || p[0].RunID != "r2" {
		t.Errorf("pending after the final judgement: %+v", p)
	}
}
