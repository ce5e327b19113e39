package store

import (
	"database/sql"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/store/pgtest"
)

// Every field of the pipeline state survives the store, and a clone shares
// nothing with its original.
func TestPipelineStateRoundTrip(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	at := time.Date(2026, 11, 24, 12, 0, 0, 123456789, time.UTC)
	p := PipelineState{
		RunnerAddr: "a:1,b:2", Boot: BootCURE, CUREWindow: "w7", BootRequestedAt: at, FreshCURE: "resumed",
		HostTokens: []string{"d1", "d2"},
		Phases:     map[modes.PhaseName]PhaseState{"bmc": {Attempts: 3, StartedAt: at}, "validate": {Attempts: 1, StartedAt: at, Deadline: at.Add(time.Hour)}},
		Host:       HostWait{RebootAttempt: 2, RebootedAt: at, WaitFrom: 42},
		BMC: BMCWork{ResetAt: at, Resets: 1, Updates: map[string]FirmwareSubmission{"bmc-fw": {State: SubmissionAccepted, At: at, Op: "SimpleUpdate",
			URI: "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate", KnownTasks: []string{"/t/0"}, TasksListed: true, TaskURI: "/t/1", MonitorURI: "/m/1"}},
			BIOS: BIOSApply{Stage: BIOSRebooted, At: at, Changes: map[string]any{"ProcTurboMode": "Disabled"}, Matched: 3}},
		PowerOn: PowerAction{At: at, Msg: "node was Off: powered On"},
		Batch: &RunnerBatch{Phases: []modes.PhaseName{"hardware", "validate"}, Cursor: 17, Current: "validate", HadRunner: true,
			Bound: SessionRef{BootID: "b1", ConnectedNs: 5},
			Seen:  SessionRef{BootID: "b1", ConnectedNs: 5}, SeenStored: 9, Silent: SessionRef{BootID: "b0", ConnectedNs: 1},
			LostSince: at, LastAlive: at},
		Handled: SessionRef{BootID: "b1", ConnectedNs: 5},
	}
	if err := s.CreateRun(ctx, Run{ID: "r1", NodeID: "n1", Status: curev1.RunStatus_RUN_RUNNING, Pipeline: p}); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetRun(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Pipeline, p) {
		t.Fatalf("pipeline state after the store:\n got %+v\nwant %+v", got.Pipeline, p)
	}
	c := p.Clone()
	c.HostTokens[0] = "x"
	c.Phases["bmc"] = PhaseState{}
	c.BMC.Updates["bmc-fw"] = FirmwareSubmission{}
	c.BMC.BIOS.Changes["ProcTurboMode"] = "Enabled"
	c.Batch.Phases[0] = "x"
	c.Batch.Cursor = 1
	if !reflect.DeepEqual(got.Pipeline, p) {
		t.Errorf("changing a clone changed its original: %+v", p)
	}
	// Clearing what is done leaves no trace.
	got.Pipeline.SetSubmission("bmc-fw", FirmwareSubmission{})
	got.Pipeline.Batch = nil
	if err := s.UpdateRun(ctx, got); err != nil {
		t.Fatal(err)
	}
	again, _ := s.GetRun(ctx, "r1")
	if again.Pipeline.BMC.Updates != nil || again.Pipeline.Batch != nil {
		t.Errorf("after clearing: %+v", again.Pipeline)
	}
}

func TestHostTokensKeepNewest(t *testing.T) {
	var p PipelineState
	for i := range MaxHostTokens + 3 {
		p.AddHostToken(string(rune('a' + i)))
	}
	if len(p.HostTokens) != MaxHostTokens || p.HostTokens[0] != "d" || p.HostTokens[len(p.HostTokens)-1] != "k" {
		t.Errorf("HostTokens = %v, want the newest %d (d..k)", p.HostTokens, MaxHostTokens)
	}
}

// A database written before the pipeline state was typed upgrades: every
// key earlier coordinators wrote in runs.data (in their encodings) lands in
// its typed field, an outstanding assignment becomes a batch to resume,
// and a malformed value is named (run, key, value) for an operator instead
// of read as zero.
func TestUpgradeRunDataToPipelineState(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cure.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if err := migrateTo(ctx, db, pipelineSchema-1); err != nil {
		t.Fatal(err)
	}
	checkRunDataUpgrade(t, db, sqliteDialect.rebind, func() *Store {
		s, err := Open(path, WithStateKey(testKey))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// The same upgrade on PostgreSQL (its placeholders, its text types).
func TestUpgradeRunDataToPipelineStatePostgres(t *testing.T) {
	dsn := pgtest.Shared(t).NewDatabase(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	if err := migratePostgresTo(ctxT(t), db, pipelineSchema-1); err != nil {
		t.Fatal(err)
	}
	checkRunDataUpgrade(t, db, rebindDollar, func() *Store {
		s, err := OpenDSN(dsn, WithStateKey(testKey))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// checkRunDataUpgrade fills db (at the schema before pipelineSchema) with runs as earlier
// coordinators wrote them, closes it, opens the store (which upgrades it)
// and checks every run's state.
func checkRunDataUpgrade(t *testing.T, db *sql.DB, rebind func(string) string, open func() *Store) {
	ctx := ctxT(t)
	const ts = "2026-11-24T12:00:00.123456789Z"
	old := `{"attempts/bmc":"3","started/bmc":"` + ts + `","host_rebooted_at":"` + ts + `","host_wait_from":"42","host_reboot_attempt":"2",` +
		`"bmc_reset_at":"` + ts + `","bmc_resets":"1","boot_requested_at":"` + ts + `","assign_cursor":"0","boot":"cure","cure_window":"w7",` +
		`"runner_addr":"a:1,b:2","fresh_cure":"resumed","oob/bmc-fw":"submitted task /t/1","deadline/validate":"` + ts + `",` +
		`"host_token_sha256":"d1 d2","some_key_nobody_read":"x"}`
	malformed := map[string]string{
		"m1": `{"attempts/bmc":"two"}`, "m2": `{"attempts/bmc":"-1"}`, "m3": `{"started/bmc":"yesterday"}`,
		"m4": `{"deadline/validate":"soon"}`, "m5": `{"host_rebooted_at":"2026-13-01T00:00:00Z"}`, "m6": `{"host_wait_from":"7x"}`,
		"m7": `{"host_reboot_attempt":"1.5"}`, "m8": `{"bmc_reset_at":"1700000000"}`, "m9": `{"bmc_resets":"many"}`,
		"m10": `{"boot_requested_at":"now"}`, "m11": `{"assign_cursor":"0x10"}`, "m12": `{"boot":"usb"}`,
	}
	if _, err := db.Exec(`INSERT INTO nodes (id, updated_at) VALUES ('n1', 0)`); err != nil {
		t.Fatal(err)
	}
	q := rebind(`INSERT INTO runs (id, node_id, status, data, created_at) VALUES (?, 'n1', ?, ?, 0)`)
	ins := func(id, status, data string) {
		if _, err := db.Exec(q, id, status, data); err != nil {
			t.Fatal(err)
		}
	}
	ins("r1", "running", old)
	ins("r0", "succeeded", `{}`)
	for id, data := range malformed {
		ins(id, "failed", data)
	}
	db.Close()

	s := open()
	defer s.Close()
	at, _ := time.Parse(time.RFC3339Nano, ts)
	want := PipelineState{
		RunnerAddr: "a:1,b:2", Boot: BootCURE, CUREWindow: "w7", BootRequestedAt: at, FreshCURE: "resumed",
		HostTokens: []string{"d1", "d2"},
		Phases:     map[modes.PhaseName]PhaseState{"bmc": {Attempts: 3, StartedAt: at}, "validate": {Deadline: at}},
		Host:       HostWait{RebootAttempt: 2, RebootedAt: at, WaitFrom: 42},
		BMC:        BMCWork{ResetAt: at, Resets: 1, Updates: map[string]FirmwareSubmission{"bmc-fw": {State: SubmissionAccepted, TaskURI: "/t/1"}}},
		Batch:      &RunnerBatch{Cursor: 0, HadRunner: true},
	}
	r, err := s.GetRun(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Pipeline, want) {
		t.Errorf("upgraded state:\n got %+v\nwant %+v", r.Pipeline, want)
	}
	if r, err := s.GetRun(ctx, "r0"); err != nil || !reflect.DeepEqual(r.Pipeline, PipelineState{}) {
		t.Errorf("a run with no data: %+v %v", r.Pipeline, err)
	}
	for id, data := range malformed {
		r, err := s.GetRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var key, val string
		for k, v := range mustMap(t, data) {
			key, val = k, v
		}
		for _, w := range []string{id, key, `"` + val + `"`} {
			if !strings.Contains(r.Pipeline.Malformed, w) {
				t.Errorf("%s (%s): malformed note %q does not name %s", id, data, r.Pipeline.Malformed, w)
			}
		}
		var kept string
		if err := s.r.db.QueryRow(s.dialect.rebind(`SELECT data FROM runs WHERE id = ?`), id).Scan(&kept); err != nil || kept != data {
			t.Errorf("%s: data column %q after the upgrade, want it kept as %q", id, kept, data)
		}
	}
}

func mustMap(t *testing.T, s string) map[string]string {
	t.Helper()
	m, err := unmarshalMap(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// UpdateRun writes exactly the columns whose value changed, for every data
// column of the list: none is left out of the diff.
func TestUpdateRunDiffsEveryColumn(t *testing.T) {
	base := Run{ID: "r1", NodeID: "n1", Status: curev1.RunStatus_RUN_RUNNING}
	edits := map[string]func(r *Run){
		"mode": func(r *Run) { r.Mode = "wipe" }, "manifest": func(r *Run) { r.Manifest = "m" },
		"status": func(r *Run) { r.Status = curev1.RunStatus_RUN_FAILED }, "phase": func(r *Run) { r.Phase = "nvme" },
		"resume_count": func(r *Run) { r.ResumeCount = 1 }, "phase_failures": func(r *Run) { r.PhaseFailures = 1 },
		"disconnects": func(r *Run) { r.Disconnects = 1 }, "reboots": func(r *Run) { r.Reboots = 1 },
		"completed_phases": func(r *Run) { r.CompletedPhases = []modes.PhaseName{"preflight"} },
		"started_at":       func(r *Run) { r.StartedAt = time.UnixMilli(5) }, "ended_at": func(r *Run) { r.EndedAt = time.UnixMilli(5) },
		"message": func(r *Run) { r.Message = "x" }, "pipeline": func(r *Run) { r.Pipeline.Phases = map[modes.PhaseName]PhaseState{"x": {Attempts: 1}} },
	}
	prev, err := valuesOf(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range runColumns {
		if c.use != colData {
			continue
		}
		edit, ok := edits[c.name]
		if !ok {
			t.Errorf("column %s has no edit in this test", c.name)
			continue
		}
		r := base
		edit(&r)
		v, err := valuesOf(r)
		if err != nil {
			t.Fatal(err)
		}
		if set, _ := v.changed(prev); len(set) != 1 || set[0] != c.name+" = ?" {
			t.Errorf("editing %s sets %v", c.name, set)
		}
	}
	if set, _ := prev.changed(prev); len(set) != 0 {
		t.Errorf("an unchanged run sets %v", set)
	}
}

// A run stored by a coordinator that wrote submissions as free text reads
// back typed: a task to follow, or a sending update to trace.
func TestLegacySubmissionsRead(t *testing.T) {
	at := "2026-11-20T10:00:00Z"
	p, err := unmarshalPipeline(`{"bmc":{"submissions":{"bmc":"submitted task /redfish/v1/TaskService/Tasks/7","bios":"submitting ` + at + `","hgx":"garbled"}}}`)
	if err != nil {
		t.Fatal(err)
	}
	when, _ := time.Parse(time.RFC3339, at)
	want := map[string]FirmwareSubmission{
		"bmc":  {State: SubmissionAccepted, TaskURI: "/redfish/v1/TaskService/Tasks/7"},
		"bios": {State: SubmissionSending, At: when},
		"hgx":  {State: SubmissionSending},
	}
	if !reflect.DeepEqual(p.BMC.Updates, want) || p.BMC.LegacySubmissions != nil {
		t.Errorf("legacy submissions read as %+v (legacy left %v)", p.BMC.Updates, p.BMC.LegacySubmissions)
	}
	out, err := marshalPipeline(p)
	if err != nil || strings.Contains(out, `"submissions"`) {
		t.Errorf("written back with the free-text field: %s %v", out, err)
	}
}

// A phase attempt started and not ended is open: a coordinator stop cut it
// short.
func TestPhaseAttemptOpen(t *testing.T) {
	for _, c := range []struct {
		ps   PhaseState
		open bool
	}{{PhaseState{}, false}, {PhaseState{Attempts: 1}, true}, {PhaseState{Attempts: 2, Ended: true}, false}} {
		if c.ps.Open() != c.open {
			t.Errorf("%+v open = %t", c.ps, !c.open)
		}
	}
}
