package pipeline

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

// A run whose stored state the schema upgrade could not read is not driven
// on a misreading (an attempt count read as 0 would grant a fresh retry
// budget): it ends in attention with the upgrade's note naming the run, the
// key and the value, before any BMC is touched.
func TestMalformedRunDataNeedsAttention(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(filepath.Join(t.TempDir(), "cure.db"), store.WithStateKey(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.UpsertNode(ctx, store.Node{ID: "n1", BMCURL: "https://bmc", BMCUser: "u", BMCPassword: "p", SKU: "s", MACs: []string{"52:54:00:00:00:01"}}); err != nil {
		t.Fatal(err)
	}
	run := store.Run{ID: "r1", NodeID: "n1", Mode: "provision", Manifest: "s", Status: curev1.RunStatus_RUN_RUNNING, StartedAt: time.Now().UTC(),
		Phase: "bmc", Pipeline: store.PipelineState{Malformed: `run r1: data attempts/bmc = "two" is not a decimal integer`}}
	if err := st.CreateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	connects := 0
	e := New(ctx, Config{Store: st, Hub: sessions.NewHub(), Timeouts: Timeouts{BMCCall: 100 * time.Millisecond},
		ConnectBMC: func(context.Context, store.Node) (BMC, error) {
			connects++
			return nil, errors.New("connection refused")
		}})
	e.driver.drive(ctx, "r1")
	got, err := st.GetRun(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != curev1.RunStatus_RUN_ATTENTION {
		t.Errorf("status %s, want attention", got.Status)
	}
	for _, want := range []string{"r1", "attempts/bmc", `"two"`} {
		if !strings.Contains(got.Message, want) {
			t.Errorf("message %q does not name %s", got.Message, want)
		}
	}
	if connects != 0 {
		t.Errorf("%d BMC connects for a run with malformed state", connects)
	}
	if got.Pipeline.Malformed != run.Pipeline.Malformed {
		t.Errorf("the upgrade's note was overwritten (%q): the operator must see what was stored", got.Pipeline.Malformed)
	}
}
