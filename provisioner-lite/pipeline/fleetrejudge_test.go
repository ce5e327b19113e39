package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/catalog"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
	"github.com/cure-oss/cure/provisioner-lite/sessions"
	"github.com/cure-oss/cure/provisioner-lite/store"
)

const bandSuite = `apiVersion: cure.dev/v1
kind: ValidationSuite
metadata: {name: fleet-read}
spec:
  fleet: {window: 24h, minNodes: 3}
  checks:
    - name: disk-read
      type: storage-throughput
      appliesTo: "disk/*"
      thresholds: {readMBps: {min: 5}}
      fleet: {readMBps: {below: 3}}
`

// suiteRun stores node's diagnostic run with a passing disk-read measuring
// mbps (left active: the caller ends it).
func suiteRun(t *testing.T, st *store.Store, node string, mbps float64) store.Run {
	t.Helper()
	ctx := context.Background()
	if err := st.UpsertNode(ctx, store.Node{ID: node, BMCURL: "https://bmc-" + node, SKU: "s", MACs: []string{fmt.Sprintf("52:54:00:bb:00:%02x", node[0]+node[1])}}); err != nil {
		t.Fatal(err)
	}
	r := store.Run{ID: "run-" + node, NodeID: node, Mode: modes.Diagnostic, Manifest: "fleet-read", Status: curev1.RunStatus_RUN_RUNNING, StartedAt: time.Now().UTC()}
	if err := st.CreateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	v := store.Verdict{RunID: r.ID, Component: "disk/nvme0n1", Check: "disk-read", Status: curev1.VerdictStatus_PASS, Measurements: []store.Measurement{{Metric: "readMBps", Value: mbps, Unit: "MB/s"}}}
	if _, err := st.AppendRunnerEvent(ctx, store.Event{RunID: r.ID, NodeID: node, BootID: "b", Seq: 1, Time: time.Now(), Kind: runstate.EventVerdict, Phase: modes.Validate}, &v, store.DefaultEventLimits); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestJudgementThatAppliesBandSweeps: the judgement of the node that
// fills the band sweeps its SKU by itself: the slow node judged first
// (unbanded, its run ended) is found MARGINAL and the hook told.
func TestJudgementThatAppliesBandSweeps(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "suites"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "suites", "fleet-read.yaml"), []byte(bandSuite), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(t.TempDir(), "cure.db"), store.WithStateKey(bytes.Repeat([]byte{7}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var calls []string
	e := New(ctx, Config{Store: st, Hub: sessions.NewHub(), Manifests: &catalog.Catalog{Dir: dir},
		OnFleetRejudged: func(_ context.Context, node, run string, marginal bool, reason string) {
			calls = append(calls, fmt.Sprintf("%s %s %v %s", node, run, marginal, reason))
		}})

	slow := suiteRun(t, st, "n0", 41)
	if err := e.fleet.judgeFleet(ctx, &slow); err != nil {
		t.Fatal(err)
	}
	slow.Status, slow.EndedAt = curev1.RunStatus_RUN_SUCCEEDED, time.Now().UTC()
	if err := st.UpdateRun(ctx, slow); err != nil {
		t.Fatal(err)
	}
	suiteRun(t, st, "p1", 200)
	suiteRun(t, st, "p2", 206)
	last := suiteRun(t, st, "p3", 196)
	if err := e.fleet.judgeFleet(ctx, &last); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || !strings.HasPrefix(calls[0], "n0 run-n0 true fleet rejudge (judged before its fleet band had its minimum of nodes): MARGINAL") {
		t.Fatalf("hook calls %q", calls)
	}
	vs, _ := st.Verdicts(ctx, slow.ID)
	if len(vs) != 1 || vs[0].Status != curev1.VerdictStatus_MARGINAL {
		t.Errorf("the slow node's verdicts %+v", vs)
	}
}
