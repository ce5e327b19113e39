package store

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/store/pgtest"
)

// testKey is a fixed state key; production keys come from the state dir.
var testKey = []byte("0123456789abcdef0123456789abcdef")

// backend is the database openTest opens; TestPostgresBackend runs the
// backend-neutral tests again with "postgres".
var backend = "sqlite"

func openTest(t *testing.T, opts ...Option) (*Store, string) {
	t.Helper()
	opts = append([]Option{WithStateKey(testKey)}, opts...)
	if backend == "postgres" {
		dsn := pgtest.Shared(t).NewDatabase(t)
		s, err := OpenDSN(dsn, opts...)
		if err != nil {
			t.Fatalf("OpenDSN: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s, dsn
	}
	path := filepath.Join(t.TempDir(), "cure.db")
	s, err := Open(path, opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testNode(id string, macs ...string) Node {
	return Node{
		ID: id, BMCURL: "https://10.0.0.1", BMCUser: "admin", BMCPassword: "pw", SKU: "hgx-h100",
		Hostname: id + ".dc1", SystemSerial: "SN-" + id, MACs: macs,
		PSIDs:  map[string]string{"S3EVNX0K": "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345"},
		Labels: map[string]string{"rack": "r12"},
	}
}

func mustNode(t *testing.T, s *Store, n Node) {
	t.Helper()
	if err := s.UpsertNode(ctxT(t), n); err != nil {
		t.Fatalf("UpsertNode %s: %v", n.ID, err)
	}
}

func TestSchemaVersion(t *testing.T) {
	s, _ := openTest(t)
	var v int
	if err := s.r.db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != SchemaVersion || v == 0 {
		t.Fatalf("user_version = %d, want %d", v, SchemaVersion)
	}
	var mode string
	if err := s.w.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q (%v), want wal", mode, err)
	}
	var fk int
	if err := s.w.QueryRow(`PRAGMA foreign_keys`).Scan(&fk); err != nil || fk != 1 {
		t.Fatalf("foreign_keys = %d (%v), want 1", fk, err)
	}
}

func TestRefusesNewerSchema(t *testing.T) {
	s, path := openTest(t)
	if _, err := s.w.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, SchemaVersion+1)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(path); err == nil {
		t.Fatal("Open of a database from a newer binary succeeded, want error")
	}
}

func TestNodes(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	n := testNode("n1", "52:54:00:AA:BB:01", "52-54-00-aa-bb-02")
	mustNode(t, s, n)

	got, err := s.GetNode(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	want := n
	want.MACs = []string{"52:54:00:aa:bb:01", "52:54:00:aa:bb:02"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("GetNode = %+v\nwant %+v", got, want)
	}
	for _, m := range []string{"52:54:00:aa:bb:02", "52-54-00-AA-BB-02", "52:54:00:Aa:bB:02"} {
		got, err := s.NodeByMAC(ctx, m)
		if err != nil || got.ID != "n1" {
			t.Fatalf("NodeByMAC(%s) = %q, %v; want n1", m, got.ID, err)
		}
	}
	if idx, err := s.MACIndex(ctx); err != nil || !reflect.DeepEqual(idx, map[string]string{"52:54:00:aa:bb:01": "n1", "52:54:00:aa:bb:02": "n1"}) {
		t.Fatalf("MACIndex = %v, %v", idx, err)
	}
	if _, err := s.NodeByMAC(ctx, "52:54:00:aa:bb:99"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("NodeByMAC unknown: err = %v, want ErrNotFound", err)
	}
	if _, err := s.NodeByMAC(ctx, "not-a-mac"); err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("NodeByMAC malformed: err = %v, want a syntax error", err)
	}
	if _, err := s.GetNode(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetNode unknown: err = %v, want ErrNotFound", err)
	}

	// Upsert replaces fields and the MAC set.
	n.SKU = "hgx-b200"
	n.MACs = []string{"52:54:00:aa:bb:03"}
	n.Labels = nil
	mustNode(t, s, n)
	got, _ = s.GetNode(ctx, "n1")
	if got.SKU != "hgx-b200" || !reflect.DeepEqual(got.MACs, []string{"52:54:00:aa:bb:03"}) || got.Labels != nil {
		t.Fatalf("after re-upsert: %+v", got)
	}
	if _, err := s.NodeByMAC(ctx, "52:54:00:aa:bb:01"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("old MAC still resolves: %v", err)
	}

	// A MAC can identify only one node.
	if err := s.UpsertNode(ctx, testNode("n2", "52:54:00:aa:bb:03")); err == nil {
		t.Fatal("UpsertNode with a MAC owned by n1 succeeded")
	}
	if _, err := s.GetNode(ctx, "n2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("failed upsert left node n2 behind: %v", err)
	}
	mustNode(t, s, testNode("n0", "52:54:00:aa:bb:04"))
	list, err := s.ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != "n0" || list[1].ID != "n1" || list[0].MACs[0] != "52:54:00:aa:bb:04" {
		t.Fatalf("ListNodes = %+v", list)
	}
	if err := s.UpsertNode(ctx, Node{ID: "bad", MACs: []string{"zz:zz"}}); err == nil {
		t.Fatal("UpsertNode accepted a malformed MAC")
	}
}

func TestDeleteNodeRefusesWithRuns(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	mustNode(t, s, testNode("n2", "52:54:00:00:00:02"))
	if err := s.CreateRun(ctx, Run{ID: "r1", NodeID: "n1"}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteNode(ctx, "n1"); err == nil {
		t.Fatal("DeleteNode of a node with runs succeeded")
	}
	if err := s.DeleteNode(ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.NodeByMAC(ctx, "52:54:00:00:00:02"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted node's MAC still resolves: %v", err)
	}
	if err := s.DeleteNode(ctx, "n2"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
}

func TestNormalizeMAC(t *testing.T) {
	for in, want := range map[string]string{
		"52:54:00:AB:cd:EF":  "52:54:00:ab:cd:ef",
		"52-54-00-ab-cd-ef":  "52:54:00:ab:cd:ef",
		" 52:54:00:ab:cd:ef": "52:54:00:ab:cd:ef",
	} {
		if got, err := NormalizeMAC(in); err != nil || got != want {
			t.Errorf("NormalizeMAC(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "52:54:00:ab:cd", "5254.00ab.cdef", "52:54:00:ab:cd:eg", "00:00:00:00:00:00:00:00", "52:54:00:ab:cd:ef:"} {
		if got, err := NormalizeMAC(bad); err == nil {
			t.Errorf("NormalizeMAC(%q) = %q, want error", bad, got)
		}
	}
}

func TestRuns(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	t0 := time.Date(2025, 3, 1, 10, 0, 0, 123456789, time.FixedZone("X", 3600))

	if err := s.CreateRun(ctx, Run{ID: "r1", NodeID: "nope"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("CreateRun for unknown node: %v, want ErrNotFound", err)
	}
	if err := s.CreateRun(ctx, Run{NodeID: "n1"}); err == nil {
		t.Fatal("CreateRun without id succeeded")
	}
	r := Run{ID: "r1", NodeID: "n1", Mode: "provision", Manifest: "hgx-h100.yaml", StartedAt: t0}
	if err := s.CreateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateRun(ctx, r); err == nil {
		t.Fatal("CreateRun with a duplicate id succeeded")
	}
	got, err := s.GetRun(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != curev1.RunStatus_RUN_PENDING || !got.StartedAt.Equal(t0.Truncate(time.Millisecond)) || got.StartedAt.Location() != time.UTC || !got.EndedAt.IsZero() {
		t.Fatalf("GetRun = %+v", got)
	}

	got.Status, got.Phase = curev1.RunStatus_RUN_RUNNING, "nvme"
	got.ResumeCount, got.PhaseFailures, got.Disconnects, got.Reboots = 1, 2, 3, 4
	got.CompletedPhases = []modes.PhaseName{"preflight", "powering_on"}
	got.Pipeline = PipelineState{CUREWindow: "w2", Boot: BootCURE, HostTokens: []string{"d1"},
		Batch: &RunnerBatch{Phases: []modes.PhaseName{"nvme"}, Cursor: 7, Bound: SessionRef{BootID: "b2", ConnectedNs: 42}}}
	got.Message = "flashing"
	got.EndedAt = t0.Add(time.Hour)
	if err := s.UpdateRun(ctx, got); err != nil {
		t.Fatal(err)
	}
	again, _ := s.GetRun(ctx, "r1")
	got.StartedAt, got.EndedAt = got.StartedAt.UTC(), got.EndedAt.Truncate(time.Millisecond).UTC()
	if !reflect.DeepEqual(again, got) {
		t.Fatalf("after UpdateRun:\n got %+v\nwant %+v", again, got)
	}
	if err := s.UpdateRun(ctx, Run{ID: "missing", Status: curev1.RunStatus_RUN_FAILED}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("UpdateRun of missing run: %v", err)
	}
	if err := s.UpdateRun(ctx, Run{ID: "r1", Status: curev1.RunStatus(99)}); err == nil {
		t.Fatal("UpdateRun accepted status 99")
	}
	bad := again
	bad.NodeID = "other"
	if err := s.UpdateRun(ctx, bad); err == nil {
		t.Fatal("UpdateRun moved a run to another node")
	}

	if err := s.CreateRun(ctx, Run{ID: "r2", NodeID: "n1", Status: curev1.RunStatus_RUN_SUCCEEDED}); err != nil {
		t.Fatal(err)
	}
	latest, err := s.LatestRun(ctx, "n1")
	if err != nil || latest.ID != "r2" {
		t.Fatalf("LatestRun = %q, %v; want r2", latest.ID, err)
	}
	if _, err := s.LatestRun(ctx, "n9"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("LatestRun of node without runs: %v", err)
	}
	// One active run per node: r1 is still running on n1.
	if err := s.CreateRun(ctx, Run{ID: "r3", NodeID: "n1"}); !errors.Is(err, ErrActiveRun) {
		t.Fatalf("second active run on n1: %v, want ErrActiveRun", err)
	}
	mustNode(t, s, testNode("n3", "52:54:00:aa:bb:33"))
	if err := s.CreateRun(ctx, Run{ID: "r3", NodeID: "n3"}); err != nil {
		t.Fatal(err)
	}
	active, err := s.ActiveRuns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(active) != 2 || active[0].ID != "r1" || active[1].ID != "r3" {
		t.Fatalf("ActiveRuns = %+v, want r1 (running), r3 (pending)", active)
	}
	all, _ := s.RunsOfNode(ctx, "n1")
	if len(all) != 2 || all[0].ID != "r2" {
		t.Fatalf("RunsOfNode = %+v", all)
	}
}

func TestPhases(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	if err := s.CreateRun(ctx, Run{ID: "r1", NodeID: "n1"}); err != nil {
		t.Fatal(err)
	}
	t0 := time.UnixMilli(1_700_000_000_000).UTC()
	for i, name := range []modes.PhaseName{"preflight", "powering_on", "set_boot_order"} {
		if err := s.UpsertPhase(ctx, Phase{RunID: "r1", Name: name, Status: curev1.PhaseStatus_PHASE_RUNNING, Attempts: 1, StartedAt: t0.Add(time.Duration(i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	// Updating an earlier phase must not move it.
	if err := s.UpsertPhase(ctx, Phase{RunID: "r1", Name: "preflight", Status: curev1.PhaseStatus_PHASE_OK, Attempts: 2, StartedAt: t0, EndedAt: t0.Add(500 * time.Millisecond), Message: "all inputs resolve"}); err != nil {
		t.Fatal(err)
	}
	ps, err := s.Phases(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	var names []modes.PhaseName
	for _, p := range ps {
		names = append(names, p.Name)
	}
	if !reflect.DeepEqual(names, []modes.PhaseName{"preflight", "powering_on", "set_boot_order"}) {
		t.Fatalf("Phases order = %v", names)
	}
	want := Phase{RunID: "r1", Name: "preflight", Status: curev1.PhaseStatus_PHASE_OK, Attempts: 2, StartedAt: t0, EndedAt: t0.Add(500 * time.Millisecond), Message: "all inputs resolve"}
	if !reflect.DeepEqual(ps[0], want) {
		t.Fatalf("phase = %+v, want %+v", ps[0], want)
	}
	if err := s.UpsertPhase(ctx, Phase{RunID: "r1", Name: "x", Status: curev1.PhaseStatus(99)}); err == nil {
		t.Fatal("UpsertPhase accepted status 99")
	}
	if err := s.UpsertPhase(ctx, Phase{RunID: "nope", Name: "x", Status: curev1.PhaseStatus_PHASE_OK}); err == nil {
		t.Fatal("UpsertPhase for a missing run succeeded (foreign keys off?)")
	}
}

func TestEventsIdempotentReplay(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	if err := s.CreateRun(ctx, Run{ID: "r1", NodeID: "n1"}); err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(1_700_000_000_000).UTC()
	ev := func(boot string, seq uint64) Event {
		return Event{RunID: "r1", NodeID: "n1", Source: "runner", BootID: boot, Seq: seq, Time: now, Phase: "nvme", Kind: "log", Message: fmt.Sprintf("%s#%d", boot, seq), Payload: []byte(`{"seq":1}`)}
	}
	var ids []int64
	for seq := uint64(1); seq <= 3; seq++ {
		id, ins, err := s.AppendEvent(ctx, ev("b1", seq))
		if err != nil || !ins {
			t.Fatalf("append seq %d: inserted=%v err=%v", seq, ins, err)
		}
		ids = append(ids, id)
	}
	// Replay after reconnect: same ids back, nothing new stored.
	for seq := uint64(1); seq <= 3; seq++ {
		id, ins, err := s.AppendEvent(ctx, ev("b1", seq))
		if err != nil || ins || id != ids[seq-1] {
			t.Fatalf("replay seq %d: id=%d inserted=%v err=%v; want id %d, not inserted", seq, id, ins, err, ids[seq-1])
		}
	}
	// Same seq in a new boot is a different event.
	if _, ins, err := s.AppendEvent(ctx, ev("b2", 1)); err != nil || !ins {
		t.Fatalf("seq 1 of boot b2: inserted=%v err=%v", ins, err)
	}
	// Coordinator events (seq 0) are never deduplicated.
	for i := 0; i < 2; i++ {
		if _, ins, err := s.AppendEvent(ctx, Event{RunID: "r1", Source: "coordinator", Kind: "info", Message: "power on"}); err != nil || !ins {
			t.Fatalf("coordinator event %d: inserted=%v err=%v", i, ins, err)
		}
	}
	all, err := s.Events(ctx, "r1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 6 {
		t.Fatalf("Events = %d, want 6", len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i].ID <= all[i-1].ID {
			t.Fatalf("event ids not increasing: %d then %d", all[i-1].ID, all[i].ID)
		}
	}
	first := all[0]
	want := ev("b1", 1)
	want.ID = ids[0]
	if !reflect.DeepEqual(first, want) {
		t.Fatalf("event = %+v\nwant %+v", first, want)
	}
	page, _ := s.Events(ctx, "r1", ids[0], 2)
	if len(page) != 2 || page[0].ID != ids[1] || page[1].ID != ids[2] {
		t.Fatalf("Events(after %d, limit 2) = %+v", ids[0], page)
	}
	if m, err := s.MaxSeq(ctx, "r1", "b1"); err != nil || m != 3 {
		t.Fatalf("MaxSeq(b1) = %d, %v; want 3", m, err)
	}
	if m, err := s.MaxSeq(ctx, "r1", "b9"); err != nil || m != 0 {
		t.Fatalf("MaxSeq(unknown boot) = %d, %v; want 0", m, err)
	}
	if id, err := s.LastEventID(ctx, "r1"); err != nil || id != all[len(all)-1].ID {
		t.Fatalf("LastEventID = %d, %v; want %d", id, err, all[len(all)-1].ID)
	}
	if id, err := s.LastEventID(ctx, "no-such-run"); err != nil || id != 0 {
		t.Fatalf("LastEventID(no run) = %d, %v; want 0", id, err)
	}
	if _, _, err := s.AppendEvent(ctx, Event{RunID: "r1", Source: "runner", Kind: "bogus"}); err == nil {
		t.Fatal("AppendEvent accepted kind bogus")
	}
	if _, _, err := s.AppendEvent(ctx, Event{RunID: "r1", Source: "runner", Kind: "log", Seq: 1 << 63}); err == nil {
		t.Fatal("AppendEvent accepted a seq beyond int64")
	}
}

func TestVerdictsNaturalOrderAndUpsert(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	if err := s.CreateRun(ctx, Run{ID: "r1", NodeID: "n1"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"gpu/10", "gpu/2", "nvme/0", "gpu/1", "bmc"} {
		for _, chk := range []string{"firmware", "ecc"} {
			if err := s.PutVerdict(ctx, Verdict{RunID: "r1", Component: c, Check: chk, Status: curev1.VerdictStatus_PASS}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.PutVerdict(ctx, Verdict{RunID: "r1", Component: "gpu/2", Check: "ecc", Status: curev1.VerdictStatus_FAIL, Observed: "12 DBE", Expected: "0"}); err != nil {
		t.Fatal(err)
	}
	vs, err := s.Verdicts(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, v := range vs {
		order = append(order, v.Component+" "+v.Check)
	}
	want := []string{"bmc ecc", "bmc firmware", "gpu/1 ecc", "gpu/1 firmware", "gpu/2 ecc", "gpu/2 firmware", "gpu/10 ecc", "gpu/10 firmware", "nvme/0 ecc", "nvme/0 firmware"}
	if !reflect.DeepEqual(order, want) {
		t.Fatalf("Verdicts order = %v\nwant %v", order, want)
	}
	if vs[4].Status != curev1.VerdictStatus_FAIL || vs[4].Observed != "12 DBE" {
		t.Fatalf("upserted verdict = %+v", vs[4])
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	s, path := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	run := Run{ID: "r1", NodeID: "n1", Mode: "provision", Status: curev1.RunStatus_RUN_RUNNING, Phase: "nvme", Reboots: 2, CompletedPhases: []modes.PhaseName{"preflight"},
		Pipeline: PipelineState{RunnerAddr: "a:1", Phases: map[modes.PhaseName]PhaseState{"nvme": {Attempts: 2}}}}
	if err := s.CreateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertPhase(ctx, Phase{RunID: "r1", Name: "nvme", Status: curev1.PhaseStatus_PHASE_RUNNING, Attempts: 1}); err != nil {
		t.Fatal(err)
	}
	id, _, err := s.AppendEvent(ctx, Event{RunID: "r1", Source: "runner", BootID: "b1", Seq: 7, Kind: "log", Message: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutVerdict(ctx, Verdict{RunID: "r1", Component: "nvme/0", Check: "firmware", Status: curev1.VerdictStatus_DRIFT}); err != nil {
		t.Fatal(err)
	}
	tok := BootToken{Hash: TokenHash("tok"), NodeID: "n1", RunID: "r1", Window: "w1", Expires: time.Now().Add(time.Hour)}
	if err := s.IssueBootToken(ctx, tok, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2, err := Open(path, WithStateKey(testKey))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if n, err := s2.NodeByMAC(ctx, "52:54:00:00:00:01"); err != nil || n.ID != "n1" || n.PSIDs["S3EVNX0K"] == "" {
		t.Fatalf("node after reopen: %+v %v", n, err)
	}
	got, err := s2.GetRun(ctx, "r1")
	if err != nil || !reflect.DeepEqual(got, run) {
		t.Fatalf("run after reopen: %+v %v\nwant %+v", got, err, run)
	}
	if active, _ := s2.ActiveRuns(ctx); len(active) != 1 {
		t.Fatalf("active runs after reopen: %+v", active)
	}
	if ps, _ := s2.Phases(ctx, "r1"); len(ps) != 1 || ps[0].Status != curev1.PhaseStatus_PHASE_RUNNING {
		t.Fatalf("phases after reopen: %+v", ps)
	}
	if m, _ := s2.MaxSeq(ctx, "r1", "b1"); m != 7 {
		t.Fatalf("MaxSeq after reopen = %d", m)
	}
	// Replaying the event after the restart is still deduplicated, and ids keep rising.
	if id2, ins, err := s2.AppendEvent(ctx, Event{RunID: "r1", Source: "runner", BootID: "b1", Seq: 7, Kind: "log"}); err != nil || ins || id2 != id {
		t.Fatalf("replay after reopen: id %d ins %v err %v", id2, ins, err)
	}
	if id3, _, err := s2.AppendEvent(ctx, Event{RunID: "r1", Source: "coordinator", Kind: "info"}); err != nil || id3 <= id {
		t.Fatalf("new event after reopen: id %d (prev %d) err %v", id3, id, err)
	}
	if vs, _ := s2.Verdicts(ctx, "r1"); len(vs) != 1 || vs[0].Status != curev1.VerdictStatus_DRIFT {
		t.Fatalf("verdicts after reopen: %+v", vs)
	}
	if got, err := s2.LookupBootToken(ctx, TokenHash("tok")); err != nil || got.NodeID != "n1" || got.State != TokenIssued {
		t.Fatalf("token after reopen: %+v %v", got, err)
	}
}

func TestConcurrentWriters(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	if err := s.CreateRun(ctx, Run{ID: "r1", NodeID: "n1"}); err != nil {
		t.Fatal(err)
	}
	const writers, each = 100, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 1; i <= each; i++ {
				boot := fmt.Sprintf("boot-%d", g)
				if _, _, err := s.AppendEvent(ctx, Event{RunID: "r1", Source: "runner", BootID: boot, Seq: uint64(i), Kind: "log"}); err != nil {
					errs <- err
				}
				// Readers run alongside the writers.
				if _, err := s.MaxSeq(ctx, "r1", boot); err != nil {
					errs <- err
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent append: %v", err)
	}
	all, err := s.Events(ctx, "r1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != writers*each {
		t.Fatalf("stored %d events, want %d", len(all), writers*each)
	}
}

func TestTwoStoresSameFile(t *testing.T) {
	// Two coordinators (or curectl next to a coordinator) on one file: busy_timeout
	// makes the second writer wait instead of failing.
	a, path := openTest(t)
	b, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := ctxT(t)
	mustNode(t, a, testNode("n1", "52:54:00:00:00:01"))
	if err := a.CreateRun(ctx, Run{ID: "r1", NodeID: "n1"}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for i, st := range []*Store{a, b, a, b} {
		wg.Add(1)
		go func(i int, st *Store) {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				if _, _, err := st.AppendEvent(ctx, Event{RunID: "r1", Source: "coordinator", Kind: "info", Message: fmt.Sprint(i, j)}); err != nil {
					errs <- err
				}
			}
		}(i, st)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("append from two stores: %v", err)
	}
	if all, _ := b.Events(ctx, "r1", 0, 0); len(all) != 200 {
		t.Fatalf("stored %d events, want 200", len(all))
	}
}

func TestSubscribe(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	mustNode(t, s, testNode("n2", "52:54:00:00:00:02"))
	for i, id := range []string{"r1", "r2"} {
		if err := s.CreateRun(ctx, Run{ID: id, NodeID: fmt.Sprintf("n%d", i+1)}); err != nil {
			t.Fatal(err)
		}
	}
	ch, cancel := s.Signals().Subscribe("r1")
	other, cancelOther := s.Signals().Subscribe("r2")
	defer cancelOther()

	expect := func(what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(2 * time.Second):
			t.Fatalf("no signal after %s", what)
		}
	}
	expectNone := func(c <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
			t.Fatalf("unexpected signal after %s", what)
		default:
		}
	}
	if _, _, err := s.AppendEvent(ctx, Event{RunID: "r1", Source: "runner", BootID: "b", Seq: 1, Kind: "log"}); err != nil {
		t.Fatal(err)
	}
	expect("AppendEvent")
	// A replayed (not inserted) event changes nothing: no signal.
	if _, _, err := s.AppendEvent(ctx, Event{RunID: "r1", Source: "runner", BootID: "b", Seq: 1, Kind: "log"}); err != nil {
		t.Fatal(err)
	}
	expectNone(ch, "replay")
	r, _ := s.GetRun(ctx, "r1")
	r.Status = curev1.RunStatus_RUN_RUNNING
	if err := s.UpdateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	expect("UpdateRun")
	expectNone(other, "changes to r1")

	// Many changes while nobody reads coalesce into one pending signal; the writer never blocks.
	for i := 0; i < 5; i++ {
		if _, _, err := s.AppendEvent(ctx, Event{RunID: "r1", Source: "coordinator", Kind: "info"}); err != nil {
			t.Fatal(err)
		}
	}
	expect("burst")
	expectNone(ch, "drained burst")

	cancel()
	cancel() // idempotent
	if _, _, err := s.AppendEvent(ctx, Event{RunID: "r1", Source: "coordinator", Kind: "info"}); err != nil {
		t.Fatal(err)
	}
	expectNone(ch, "cancel") // the bus's bookkeeping is runsignal's test
}
