package pipeline

import (
	"bytes"
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/catalog"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
	"github.com/cure-oss/cure/provisioner-lite/store/pgtest"
)

// An instance whose lease renewals stall (its database busy) stops driving
// its runs, since a peer may take them over; when renewals work again and
// nobody took them, it drives them again instead of leaving them "running"
// with nobody behind them (5,000 runs were stranded that way at fleet load).
func TestAbandonedRunsResumeWhenRenewalsRecover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dsn := pgtest.Start(t).NewDatabase(t)
	const ttl = 600 * time.Millisecond
	st, err := store.OpenDSN(dsn, store.WithStateKey(bytes.Repeat([]byte{7}, 32)), store.WithInstance("a"), store.WithLeaseTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.UpsertNode(ctx, store.Node{ID: "n1", BMCURL: "https://bmc", BMCUser: "u", BMCPassword: "p", SKU: "qemu-nvme", MACs: []string{"52:54:00:00:00:01"}}); err != nil {
		t.Fatal(err)
	}
	// Past its preflight (which checks artifacts this test has none of).
	run := store.Run{ID: "r1", NodeID: "n1", Mode: "provision", Manifest: "qemu-nvme", Status: curev1.RunStatus_RUN_RUNNING, StartedAt: time.Now().UTC(),
		Phase: "powering_on", CompletedPhases: []modes.PhaseName{"preflight", "set_boot_order_pxe"}}
	if err := st.CreateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.ClaimRun(ctx, "r1"); err != nil || !ok {
		t.Fatalf("claim: %v %v", ok, err)
	}
	// The run's pipeline sits in preflight, talking to a BMC that never
	// answers, until it is stopped; each drive connects once.
	var mu sync.Mutex
	drives := 0
	e := New(ctx, Config{Store: st, Hub: sessions.NewHub(), Manifests: &catalog.Catalog{Dir: "../../manifests/examples"},
		Timeouts: Timeouts{BMCCall: time.Hour},
		ConnectBMC: func(ctx context.Context, _ store.Node) (BMC, error) {
			mu.Lock()
			drives++
			mu.Unlock()
			<-ctx.Done()
			return nil, ctx.Err()
		}})
	count := func() int { mu.Lock(); defer mu.Unlock(); return drives }
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	e.launch("r1")
	go e.RunLeases(ctx)
	waitFor("the first drive", func() bool { return count() == 1 })

	// Another session holds the runs table: renewals time out for several TTLs.
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `LOCK TABLE runs IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	waitFor("the run to be abandoned", func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		_, driving := e.running["r1"]
		return !driving
	})
	time.Sleep(2 * ttl)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	waitFor("the run to be driven again", func() bool { return count() == 2 })
	r, err := st.GetRun(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != curev1.RunStatus_RUN_RUNNING || r.Owner != "a" {
		t.Errorf("run after recovery: status %s owner %q, want running, owned by a", r.Status, r.Owner)
	}
}
