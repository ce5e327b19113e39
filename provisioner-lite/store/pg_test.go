package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/store/pgtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.StopShared()
	os.Exit(code)
}

// TestPostgresBackend runs the store's backend-neutral tests against a real
// PostgreSQL server (a private cluster this test starts).
func TestPostgresBackend(t *testing.T) {
	pgtest.Shared(t)
	backend = "postgres"
	defer func() { backend = "sqlite" }()
	for name, f := range map[string]func(*testing.T){
		"Nodes": TestNodes, "DeleteNodeRefusesWithRuns": TestDeleteNodeRefusesWithRuns, "Runs": TestRuns, "Phases": TestPhases,
		"EventsIdempotentReplay": TestEventsIdempotentReplay, "VerdictsNaturalOrderAndUpsert": TestVerdictsNaturalOrderAndUpsert,
		"ConcurrentWriters": TestConcurrentWriters, "Subscribe": TestSubscribe, "BootTokenBinding": TestBootTokenBinding,
		"EndBootWindowAndPrune": TestEndBootWindowAndPrune, "RunnerEventCaps": TestRunnerEventCaps, "Retention": TestRetention,
		"AuditLog": TestAuditLog, "GroupCommit": TestGroupCommit, "Leases": TestLeases, "UpdateRunInPlace": TestUpdateRunInPlace,
		"PutNodesAddAndReplace": TestPutNodesAddAndReplace, "RemoveNode": TestRemoveNode, "SetLabels": TestSetLabels, "Inventories": TestInventories,
		"CoordinatorNotesCapped": TestCoordinatorNotesCapped, "ReconnectSummary": TestReconnectSummary, "HasInventory": TestHasInventory,
		"Series": TestSeries, "SeriesBounds": TestSeriesBounds, "BMCEvidence": TestBMCEvidence,
		"RunProgress":                 TestRunProgress,
		"SeriesRunnerBudgetAndReplay": TestSeriesRunnerBudgetAndReplay, "VerdictAtAndStage": TestVerdictAtAndStage,
		"NodePool": TestNodePool, "InstalledOS": TestInstalledOS, "LatestRunSummaries": TestLatestRunSummaries,
		"PipelineStateRoundTrip": TestPipelineStateRoundTrip,
		"ProgressCapsAndEnd":     TestProgressCapsAndEnd, "ProgressOrderUnderConcurrency": TestProgressOrderUnderConcurrency,
	} {
		t.Run(name, f)
	}
}

func TestRebindDollar(t *testing.T) {
	got := rebindDollar(`SELECT '?', "a?" FROM t WHERE a = ? AND b IN (?, ?)`)
	if want := `SELECT '?', "a?" FROM t WHERE a = $1 AND b IN ($2, $3)`; got != want {
		t.Fatalf("rebind:\n got %s\nwant %s", got, want)
	}
}

// Many concurrent writers share commits; one failing write does not fail
// the others of its batch; a caller that gave up while queued never runs.
func TestGroupCommit(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	runningRunOn(t, s, "r1", "n1")
	before := s.Stats()
	const writers = 64
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 13 {
				// Fails inside the transaction (the run does not exist).
				errs[i] = s.UpsertPhase(ctx, Phase{RunID: "missing-run", Name: "nvme", Status: curev1.PhaseStatus_PHASE_RUNNING})
				return
			}
			_, _, errs[i] = s.AppendEvent(ctx, Event{RunID: "r1", Source: "coordinator", Kind: "info", Message: fmt.Sprint(i)})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if (i == 13) != (err != nil) {
			t.Errorf("writer %d: %v", i, err)
		}
	}
	evs, err := s.Events(ctx, "r1", 0, 0)
	if err != nil || len(evs) != writers-1 {
		t.Fatalf("%d events stored (%v), want %d", len(evs), err, writers-1)
	}
	after := s.Stats()
	ops, commits := after.Ops-before.Ops, after.Commits-before.Commits
	if ops != writers-1 || commits >= ops {
		t.Errorf("ops %d, commits %d", ops, commits)
	}
	t.Logf("%d writes in %d commits (max batch %d)", ops, commits, after.MaxBatch)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := s.AppendEvent(cctx, Event{RunID: "r1", Source: "coordinator", Kind: "info", Message: "late"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled caller: %v", err)
	}
	if evs, _ := s.Events(ctx, "r1", 0, 0); len(evs) != writers-1 {
		t.Fatalf("a cancelled write landed: %d events", len(evs))
	}
}

func runningRunOn(t *testing.T, s *Store, id, node string) {
	t.Helper()
	if err := s.CreateRun(ctxT(t), Run{ID: id, NodeID: node, Status: curev1.RunStatus_RUN_RUNNING, StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

// UpdateRun writes only what changed, and nothing when nothing did.
func TestUpdateRunInPlace(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	runningRunOn(t, s, "r1", "n1")
	r, err := s.GetRun(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	r.Pipeline.RunnerAddr = "a:1"
	if err := s.UpdateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	c := s.Stats().Commits
	if err := s.UpdateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	if got := s.Stats().Commits; got != c {
		t.Errorf("unchanged UpdateRun committed (%d -> %d)", c, got)
	}
	r.Phase = "nvme"
	if err := s.UpdateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	got, _ := s.GetRun(ctx, "r1")
	if got.Phase != "nvme" || got.Pipeline.RunnerAddr != "a:1" {
		t.Fatalf("after in-place update: %+v", got)
	}
	// A second store writing the row meanwhile: the first store's next
	// update of another column must not resurrect its stale view.
	bad := got
	bad.NodeID = "other"
	if err := s.UpdateRun(ctx, bad); err == nil {
		t.Fatal("UpdateRun moved a run to another node")
	}
}

// Two instances on one database: a run is driven by the instance holding
// its lease; the other cannot overwrite it, and takes it over only once the
// lease expired, exactly once even when both try at the same time.
func TestLeases(t *testing.T) {
	a, dsn := openTest(t)
	ctx := ctxT(t)
	open := func(inst string) *Store {
		s, err := OpenDSN(dsn, WithStateKey(testKey), WithInstance(inst), WithLeaseTTL(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a.Close()
	a, b, c := open("a"), open("b"), open("c")
	mustNode(t, a, testNode("n1", "52:54:00:00:00:01"))
	mustNode(t, a, testNode("n2", "52:54:00:00:00:02"))
	runningRunOn(t, a, "r1", "n1")
	runningRunOn(t, a, "r2", "n2")
	r, _ := b.GetRun(ctx, "r1")
	if r.Owner != "a" || !r.LeaseUntil.After(time.Now()) {
		t.Fatalf("new run: owner %q lease %v", r.Owner, r.LeaseUntil)
	}
	if ok, err := b.ClaimRun(ctx, "r1"); ok || err != nil {
		t.Fatalf("b claimed a live lease: %v %v", ok, err)
	}
	r.Phase = "stale-b"
	if err := b.UpdateRun(ctx, r); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("b updated a's run: %v, want ErrLeaseLost", err)
	}
	// a renews r1 only; r2's lease runs out... both run out once a stops.
	if n, err := a.RenewLeases(ctx); err != nil || n != 2 {
		t.Fatalf("renew: %d %v", n, err)
	}
	time.Sleep(400 * time.Millisecond)
	// b and c race for the expired runs: each run goes to exactly one.
	var wg sync.WaitGroup
	got := map[string][]Run{}
	var mu sync.Mutex
	for _, s := range []*Store{b, c} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs, err := s.ClaimExpired(ctx, 10)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			got[s.Instance()] = runs
			mu.Unlock()
		}()
	}
	wg.Wait()
	claimed := map[string]string{}
	for inst, runs := range got {
		for _, r := range runs {
			if prev, dup := claimed[r.ID]; dup {
				t.Errorf("run %s claimed by %s and %s", r.ID, prev, inst)
			}
			claimed[r.ID] = inst
			if r.PrevOwner != "a" || r.Owner != inst {
				t.Errorf("claimed run %s: owner %q prev %q", r.ID, r.Owner, r.PrevOwner)
			}
		}
	}
	if len(claimed) != 2 {
		t.Fatalf("claimed %v, want r1 and r2", claimed)
	}
	// The old owner is fenced out now.
	r, _ = a.GetRun(ctx, "r1")
	r.Phase = "stale-a"
	if err := a.UpdateRun(ctx, r); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a updated a run it lost: %v", err)
	}
	owner := claimed["r1"]
	s := map[string]*Store{"b": b, "c": c}[owner]
	r, _ = s.GetRun(ctx, "r1")
	r.Phase = "new-owner"
	if err := s.UpdateRun(ctx, r); err != nil {
		t.Fatalf("new owner %s: %v", owner, err)
	}
	if err := s.ReleaseRun(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.ClaimRun(ctx, "r1"); !ok || err != nil {
		t.Fatalf("claim of a released run: %v %v", ok, err)
	}
	if n, err := a.ActiveRunCount(ctx, "a"); err != nil || n != 1 {
		t.Fatalf("a's active runs: %d %v", n, err)
	}
}
