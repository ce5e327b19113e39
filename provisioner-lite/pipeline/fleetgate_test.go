package pipeline_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/pipeline"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// rejudged records OnFleetRejudged's calls.
type rejudged struct {
	mu    sync.Mutex
	calls []rejudgeCall
}

type rejudgeCall struct {
	node, run, reason string
	marginal          bool
}

func (h *rejudged) hook(c *pipeline.Config) {
	c.OnFleetRejudged = func(_ context.Context, node, run string, marginal bool, reason string) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.calls = append(h.calls, rejudgeCall{node, run, reason, marginal})
	}
}

func (h *rejudged) got() []rejudgeCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]rejudgeCall(nil), h.calls...)
}

// injectFleetFault makes the store refuse every fleet judgement but the
// record of its error (a failing disk, a lock, a bug), through a second
// connection to the coordinator's database; the returned func lifts it.
func injectFleetFault(t *testing.T, f *fixture) (lift func()) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(f.dir, "cure.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, op := range []string{"INSERT", "UPDATE"} {
		if _, err := db.Exec(`CREATE TRIGGER inject_fleet_` + op + ` BEFORE ` + op + ` ON run_fleet WHEN NEW.pending <> 'error'
BEGIN SELECT RAISE(ABORT, 'injected fault: run_fleet refuses the judgement'); END`); err != nil {
			t.Fatal(err)
		}
	}
	return func() {
		for _, op := range []string{"INSERT", "UPDATE"} {
			if _, err := db.Exec(`DROP TRIGGER inject_fleet_` + op); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func verdictOf(t *testing.T, st *store.Store, runID, component, check string) (store.Verdict, bool) {
	t.Helper()
	vs, err := st.Verdicts(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		if v.Component == component && v.Check == check {
			return v, true
		}
	}
	return store.Verdict{}, false
}

// TestFleetJudgementErrorFailsGate: the store refuses the fleet judgement
// of a run whose disk would be MARGINAL. The run does not succeed: it
// fails with an ERROR naming the fleet band and the store's error, an
// ERROR verdict (fleet fleet-band) stands, and the record is pending in
// error. Once the store works, the periodic sweep judges the run again: the
// ERROR is replaced, the MARGINAL verdict stored and the hook told once.
func TestFleetJudgementErrorFailsGate(t *testing.T) {
	var h rejudged
	f := fleetFixtureCfg(t, 41, func(c *pipeline.Config) {
		h.hook(c)
		c.FleetSweep = 50 * time.Millisecond // the periodic sweep judges it again
	})
	seedFleet(t, f.st, 200, 206, 196)
	lift := injectFleetFault(t, f)
	ctx := context.Background()
	runID, err := f.eng.Start(ctx, "node1", modes.Diagnostic, "fleet-read", false)
	if err != nil {
		t.Fatal(err)
	}
	r := f.waitRun(runID)
	if r.Status != curev1.RunStatus_RUN_FAILED || !strings.HasPrefix(r.Message, "ERROR: not judged") ||
		!strings.Contains(r.Message, "fleet band") || !strings.Contains(r.Message, "injected fault") {
		t.Fatalf("run %s: %s", r.Status, r.Message)
	}
	if v, ok := verdictOf(t, f.st, runID, "fleet", "fleet-band"); !ok || v.Status != curev1.VerdictStatus_ERROR || !strings.Contains(v.Message, "injected fault") {
		t.Fatalf("fleet ERROR verdict %+v (found %v)", v, ok)
	}
	if rec, err := f.st.FleetRecordOf(ctx, runID); err != nil || rec.Pending != store.FleetError || rec.SKU != "qemu-nvme" {
		t.Fatalf("record %+v %v", rec, err)
	}

	if len(h.got()) != 0 {
		t.Fatalf("rejudged while the store refused it: %+v", h.got())
	}
	lift()
	for deadline := time.Now().Add(10 * time.Second); len(h.got()) == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if v, _ := verdictOf(t, f.st, runID, "fleet", "fleet-band"); v.Status != curev1.VerdictStatus_PASS || !strings.Contains(v.Message, "replaces an earlier ERROR") {
		t.Errorf("the ERROR is not replaced: %+v", v)
	}
	if v, _ := verdictOf(t, f.st, runID, "disk/nvme0n1", "disk-read"); v.Status != curev1.VerdictStatus_MARGINAL {
		t.Errorf("disk verdict after the rejudge %+v", v)
	}
	calls := h.got()
	if len(calls) != 1 || !calls[0].marginal || calls[0].run != runID || calls[0].node != "node1" ||
		!strings.Contains(calls[0].reason, "its fleet judgement had failed") || !strings.Contains(calls[0].reason, "readMBps=41 MB/s") {
		t.Fatalf("hook calls %+v", calls)
	}
	if rec, _ := f.st.FleetRecordOf(ctx, runID); rec.Pending != store.FleetFinal {
		t.Errorf("record still pending %q", rec.Pending)
	}
}

// TestDay0BatchRejudged: the slow node of a day-0 batch finishes first,
// when its SKU has one other node (the band wants three): it passes on its
// absolute bars, unbanded. When the band fills, it is judged again against
// the full band: MARGINAL verdicts against its run and one hook call, even
// with two sweeps at once (two coordinators); a further sweep does nothing.
func TestDay0BatchRejudged(t *testing.T) {
	var h rejudged
	f := fleetFixtureCfg(t, 41, h.hook)
	seedPeer(t, f.st, 1, 200)
	ctx := context.Background()
	runID, err := f.eng.Start(ctx, "node1", modes.Diagnostic, "fleet-read", false)
	if err != nil {
		t.Fatal(err)
	}
	if r := f.waitRun(runID); r.Status != curev1.RunStatus_RUN_SUCCEEDED {
		t.Fatalf("run %s: %s", r.Status, r.Message)
	}
	if rec, err := f.st.FleetRecordOf(ctx, runID); err != nil || rec.Pending != store.FleetUnbanded {
		t.Fatalf("record %+v %v", rec, err)
	}
	// One more node: still short of the minimum, nothing rejudged.
	seedPeer(t, f.st, 2, 206)
	if n, err := f.eng.RejudgeFleet(ctx, "qemu-nvme"); err != nil || n != 0 || len(h.got()) != 0 {
		t.Fatalf("rejudge short of the minimum: %d, %v, hook %+v", n, err, h.got())
	}
	seedPeer(t, f.st, 3, 196)
	var wg sync.WaitGroup
	counts := make([]int, 2)
	for i := range counts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := f.eng.RejudgeFleet(ctx, "qemu-nvme")
			if err != nil {
				t.Error(err)
			}
			counts[i] = n
		}()
	}
	wg.Wait()
	if counts[0]+counts[1] != 1 {
		t.Errorf("rejudged %v times, want once in all", counts)
	}
	calls := h.got()
	if len(calls) != 1 || !calls[0].marginal || calls[0].run != runID || !strings.Contains(calls[0].reason, "before its fleet band had its minimum") ||
		!strings.Contains(calls[0].reason, "disk/nvme0n1 disk-read readMBps=41 MB/s, fleet median 200 MB/s (n=3)") {
		t.Fatalf("hook calls %+v", calls)
	}
	if v, _ := verdictOf(t, f.st, runID, "disk/nvme0n1", "disk-read"); v.Status != curev1.VerdictStatus_MARGINAL || !strings.Contains(v.Expected, "fleet band") {
		t.Errorf("verdict %+v", v)
	}
	if rec, _ := f.st.FleetRecordOf(ctx, runID); rec.Pending != store.FleetFinal {
		t.Errorf("record still pending %q", rec.Pending)
	}
	if n, _ := f.eng.RejudgeFleet(ctx, "qemu-nvme"); n != 0 || len(h.got()) != 1 {
		t.Errorf("a further sweep rejudged %d (hook calls %d)", n, len(h.got()))
	}
}
