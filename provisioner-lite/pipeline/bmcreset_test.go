package pipeline

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// resettingBMC refuses connections until back; only WaitBMC and Close are
// used by withBMC itself.
type resettingBMC struct {
	BMC
	waited time.Duration
}

func (b *resettingBMC) WaitBMC(_ context.Context, budget time.Duration) error {
	b.waited = budget
	return nil
}
func (b *resettingBMC) Close(context.Context) error { return nil }

// A coordinator that takes over a run whose BMC it reset before dying waits
// for the BMC with the reset's budget instead of failing the phase on the
// first refused connection; without a pending reset, a refused connection
// fails at once.
func TestPendingBMCResetWaitedForAfterRestart(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(filepath.Join(t.TempDir(), "cure.db"), store.WithStateKey(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.UpsertNode(ctx, store.Node{ID: "n1", BMCURL: "https://bmc", BMCUser: "u", BMCPassword: "p", SKU: "s", MACs: []string{"52:54:00:00:00:01"}}); err != nil {
		t.Fatal(err)
	}
	run := store.Run{ID: "r1", NodeID: "n1", Mode: "provision", Manifest: "s", Status: curev1.RunStatus_RUN_RUNNING, StartedAt: time.Now().UTC()}
	if err := st.CreateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	back := time.Now().Add(300 * time.Millisecond)
	connects := 0
	bmc := &resettingBMC{}
	e := New(ctx, Config{Store: st, Hub: sessions.NewHub(),
		Timeouts: Timeouts{BMCCall: 100 * time.Millisecond, BMCReset: 5 * time.Second},
		ConnectBMC: func(context.Context, store.Node) (BMC, error) {
			mu.Lock()
			defer mu.Unlock()
			connects++
			if time.Now().Before(back) {
				return nil, errors.New("connection refused")
			}
			return bmc, nil
		}})

	// No reset pending: the refusal is the answer.
	called := false
	err = e.power.withBMC(ctx, &run, func(context.Context, BMC) error { called = true; return nil })
	if err == nil || called || connects != 1 {
		t.Fatalf("without a pending reset: err %v, called %v, %d connects; want one refused connect", err, called, connects)
	}

	run.Pipeline.BMC.ResetAt = time.Now()
	if err := st.UpdateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	err = e.power.withBMC(ctx, &run, func(context.Context, BMC) error { called = true; return nil })
	if err != nil || !called {
		t.Fatalf("with a pending reset: err %v, called %v", err, called)
	}
	if time.Now().Before(back) {
		t.Error("the operation ran before the BMC was back")
	}
	if bmc.waited <= 0 || bmc.waited > 5*time.Second {
		t.Errorf("WaitBMC budget %v, want what is left of the reset budget", bmc.waited)
	}
	stored, err := st.GetRun(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if at := stored.Pipeline.BMC.ResetAt; !at.IsZero() {
		t.Error("the pending reset is still recorded after the BMC came back")
	}

	// A BMC that never comes back within the reset budget fails the phase.
	back = time.Now().Add(time.Hour)
	run.Pipeline.BMC.ResetAt = time.Now().Add(-5 * time.Second)
	called = false
	err = e.power.withBMC(ctx, &run, func(context.Context, BMC) error { called = true; return nil })
	if err == nil || called {
		t.Fatalf("BMC never back: err %v, called %v", err, called)
	}
}
