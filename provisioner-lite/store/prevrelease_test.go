package store

import (
	"bytes"
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/store/pgtest"
)

// prevSchema is the schema version of the previous release (4daf6c3),
// the one testdata/prev-release's stores were made with.
const prevSchema = 16

// A store the previous release made (testdata/prev-release/README.md)
// opens with this code: its migrations apply, this binary is recorded as
// the one that migrated it, its nodes (their sealed BMC passwords), its
// finished run with phases, verdict and events read back, and its
// in-flight run is still active and continues to its end.
func TestMigrateFromPreviousRelease(t *testing.T) {
	key := bytes.Repeat([]byte{7}, 32)
	t.Run("sqlite", func(t *testing.T) {
		b, err := os.ReadFile("testdata/prev-release/store-4daf6c3.db")
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "cure.db")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		v, err := ReadVersion(ctxT(t), db, false)
		db.Close()
		if err != nil || v.Schema != prevSchema || v.CUREVersion != "" {
			t.Fatalf("the fixture reads as %+v %v, want schema %d and no record", v, err, prevSchema)
		}
		st, err := Open(path, WithStateKey(key))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		checkPrevRelease(t, st)
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.Shared(t).NewDatabase(t)
		dump, err := os.ReadFile("testdata/prev-release/store-4daf6c3.postgres.sql")
		if err != nil {
			t.Fatal(err)
		}
		// Its own pool: the dump empties the session's search_path.
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		// pg_dump's \restrict lines are psql meta-commands, not SQL.
		var stmts []string
		for _, l := range strings.Split(string(dump), "\n") {
			if !strings.HasPrefix(l, "\\") {
				stmts = append(stmts, l)
			}
		}
		if _, err := db.ExecContext(ctxT(t), strings.Join(stmts, "\n")); err != nil {
			t.Fatal(err)
		}
		db.Close()
		st, err := OpenDSN(dsn, WithStateKey(key))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		checkPrevRelease(t, st)
	})
}

func checkPrevRelease(t *testing.T, st *Store) {
	t.Helper()
	ctx := ctxT(t)
	if v, err := st.Version(ctx); err != nil || v.Schema != SchemaVersion || v.CUREVersion != CUREVersion() {
		t.Fatalf("after the migration: %+v %v, want schema %d by %q", v, err, SchemaVersion, CUREVersion())
	}
	nodes, err := st.ListNodes(ctx)
	if err != nil || len(nodes) != 3 {
		t.Fatalf("nodes %+v %v", nodes, err)
	}
	for _, n := range nodes {
		if n.BMCPassword != "pw-"+n.ID || len(n.MACs) != 1 || n.Labels["rack"] != "r1" {
			t.Errorf("node %s read back as %+v", n.ID, n)
		}
	}
	done, err := st.GetRun(ctx, "prev-run-done")
	if err != nil || done.Status != curev1.RunStatus_RUN_SUCCEEDED || len(done.CompletedPhases) != 3 || done.Message != "provisioned" {
		t.Fatalf("finished run %+v %v", done, err)
	}
	if ph, err := st.Phases(ctx, done.ID); err != nil || len(ph) != 3 {
		t.Fatalf("its phases %+v %v", ph, err)
	}
	if vs, err := st.Verdicts(ctx, done.ID); err != nil || len(vs) != 1 || vs[0].Status != curev1.VerdictStatus_PASS {
		t.Fatalf("its verdicts %+v %v", vs, err)
	}
	active, err := st.ActiveRuns(ctx)
	if err != nil || len(active) != 1 || active[0].ID != "prev-run-live" || active[0].Phase != modes.WaitForCURE {
		t.Fatalf("active runs %+v %v, want prev-run-live waiting for CURE", active, err)
	}
	live := active[0]
	if live.Pipeline.BootRequestedAt.IsZero() {
		t.Errorf("the in-flight run's pipeline state was lost: %+v", live.Pipeline)
	}
	// The in-flight run continues: its wait ends, it succeeds.
	now := time.Now().UTC()
	if err := st.UpsertPhase(ctx, Phase{RunID: live.ID, Name: modes.WaitForCURE, Status: curev1.PhaseStatus_PHASE_OK, Attempts: 1,
		StartedAt: live.StartedAt, EndedAt: now}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.AppendEvent(ctx, Event{RunID: live.ID, NodeID: live.NodeID, Source: runstate.SourceCoordinator, Kind: runstate.EventInfo,
		Time: now, Message: "continued by this release"}); err != nil {
		t.Fatal(err)
	}
	live.Status, live.EndedAt = curev1.RunStatus_RUN_SUCCEEDED, now
	live.CompletedPhases = append(live.CompletedPhases, modes.WaitForCURE)
	if err := st.UpdateRun(ctx, live); err != nil {
		t.Fatal(err)
	}
	got, err := st.GetRun(ctx, live.ID)
	if err != nil || got.Status != curev1.RunStatus_RUN_SUCCEEDED || !slices.Contains(got.CompletedPhases, modes.WaitForCURE) {
		t.Fatalf("the continued run %+v %v", got, err)
	}
	if evs, err := st.Events(ctx, live.ID, 0, 10); err != nil || len(evs) != 2 {
		t.Fatalf("the continued run's events %+v %v", evs, err)
	}
	// A new run on a node the previous release imported.
	if err := st.CreateRun(ctx, Run{ID: "new-run", NodeID: "prev-n3", Mode: modes.Provision}); err != nil {
		t.Fatal(err)
	}
}
