package store

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
)

// windowLatestRuns is the query LatestRunSummaries used before: a window over
// the whole runs table. The tests hold the new query to its answers.
const windowLatestRuns = `
SELECT id, node_id, mode, status, phase, message, started_at, ended_at FROM (
	SELECT id, node_id, mode, status, phase, message, started_at, ended_at,
		row_number() OVER (PARTITION BY node_id ORDER BY created_at DESC, id DESC) AS rn
	FROM runs) latest
WHERE rn = 1`

func windowRunSummaries(ctx context.Context, s *Store) (map[string]RunSummary, error) {
	rows, err := s.r.QueryContext(ctx, windowLatestRuns)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]RunSummary{}
	for rows.Next() {
		var r RunSummary
		var st, en int64
		if err := rows.Scan(&r.ID, &r.NodeID, &r.Mode, runStatusCol(&r.Status), &r.Phase, &r.Message, &st, &en); err != nil {
			return nil, err
		}
		r.StartedAt, r.EndedAt = fromMs(st), fromMs(en)
		out[r.NodeID] = r
	}
	return out, rows.Err()
}

// fillRuns gives nodes n0..n(nodes-1) runs: node i has i%3 runs (the last
// one running, the others ended), each with a pipeline state of a run in
// progress; node n1's two runs share their creation millisecond.
func fillRuns(t testing.TB, s *Store, nodes int) {
	t.Helper()
	ctx := context.Background()
	ns := make([]Node, nodes)
	for i := range ns {
		ns[i] = testNode(fmt.Sprintf("n%d", i))
	}
	if _, _, err := s.PutNodes(ctx, ns, false); err != nil {
		t.Fatal(err)
	}
	ps := PipelineState{RunnerAddr: "10.0.0.1:8443", Phases: map[modes.PhaseName]PhaseState{}}
	for _, ph := range []modes.PhaseName{"power_on", "wait_for_cure", "inventory", "bmc", "bios", "validate", "install", "wait_for_host_os"} {
		ps.Phases[ph] = PhaseState{Attempts: 1, StartedAt: time.Now(), Deadline: time.Now().Add(time.Hour), Ended: true}
	}
	for i := range nodes {
		for k := range i % 3 {
			st := curev1.RunStatus_RUN_SUCCEEDED
			if k == i%3-1 {
				st = curev1.RunStatus_RUN_RUNNING
			}
			r := Run{ID: fmt.Sprintf("r%d-%d", i, k), NodeID: ns[i].ID, Mode: "provision", Status: st, Phase: "install",
				Message: "phase install", StartedAt: time.Now(), Pipeline: ps}
			if err := s.CreateRun(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if nodes > 1 {
		if _, err := s.w.ExecContext(ctx, s.dialect.rebind(`UPDATE runs SET created_at = 7 WHERE node_id = ?`), "n1"); err != nil {
			t.Fatal(err)
		}
	}
}

// Each node's latest run (the greater id among runs created in the same
// millisecond), none for a node without runs: the same answer as the
// window query it replaces.
func TestLatestRunSummaries(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	fillRuns(t, s, 12)
	got, err := s.LatestRunSummaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, err := windowRunSummaries(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(got, want) {
		t.Fatalf("latest runs:\n got %v\nwant %v", got, want)
	}
	if len(got) != 8 { // nodes 1, 2, 4, 5, 7, 8, 10, 11
		t.Fatalf("%d nodes with a latest run, want 8: %v", len(got), got)
	}
	if r := got["n2"]; r.ID != "r2-1" || r.Status != curev1.RunStatus_RUN_RUNNING {
		t.Fatalf("n2's latest run: %+v, want r2-1 running", r)
	}
	if r := got["n1"]; r.ID != "r1-0" {
		t.Fatalf("n1's only run: %+v", r)
	}
	if _, ok := got["n0"]; ok {
		t.Fatal("n0 has no run but is listed")
	}
}

// BenchmarkLatestRunSummaries: the fleet view's run query over 3,000 nodes
// (3,000 runs), the window over the whole table against the index's latest
// per node, in the same run.
func BenchmarkLatestRunSummaries(b *testing.B) {
	path := b.TempDir() + "/cure.db"
	s, err := Open(path, WithStateKey(testKey))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	fillRuns(b, s, 3000)
	ctx := context.Background()
	b.Run("window", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := windowRunSummaries(ctx, s); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("latest", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.LatestRunSummaries(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
