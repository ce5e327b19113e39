package store

import (
	"slices"
	"strings"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
)

// The typed names a run holds (its mode, phase names, event kinds and
// sources, audit kinds) are stored as the plain strings they always were,
// in the columns and in the pipeline's JSON, and read back as written: a
// database written before they were typed reads the same.
func TestTypedNamesStoredAsStrings(t *testing.T) {
	s, _ := openTest(t)
	ctx := ctxT(t)
	mustNode(t, s, testNode("n1", "52:54:00:00:00:01"))
	at := time.UnixMilli(1_700_000_000_000).UTC()
	run := Run{ID: "r1", NodeID: "n1", Mode: modes.Burnin, Status: curev1.RunStatus_RUN_RUNNING, Phase: modes.Validate,
		CompletedPhases: []modes.PhaseName{modes.Preflight, modes.Hardware}, StartedAt: at,
		Pipeline: PipelineState{Phases: map[modes.PhaseName]PhaseState{modes.Validate: {Attempts: 2, StartedAt: at}},
			Batch: &RunnerBatch{Phases: []modes.PhaseName{modes.Hardware, modes.Validate}, Current: modes.Validate}}}
	if err := s.CreateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertPhase(ctx, Phase{RunID: "r1", Name: modes.Validate, Status: curev1.PhaseStatus_PHASE_RUNNING, Attempts: 2, StartedAt: at}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.AppendEvent(ctx, Event{RunID: "r1", NodeID: "n1", Source: runstate.SourceCoordinator, Time: at,
		Phase: modes.Validate, Kind: runstate.EventInfo, Message: "resumed"}); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendAudit(ctx, AuditEntry{Kind: AuditSecurity, Actor: "n1", Action: "probe", Result: "refused"}); err != nil {
		t.Fatal(err)
	}

	var mode, phase, completed, pipeline, phaseName, evSource, evPhase, evKind, auditKind string
	for _, q := range []struct {
		sql  string
		dest []any
	}{
		{`SELECT mode, phase, completed_phases, pipeline FROM runs WHERE id = 'r1'`, []any{&mode, &phase, &completed, &pipeline}},
		{`SELECT name FROM phases WHERE run_id = 'r1'`, []any{&phaseName}},
		{`SELECT source, phase, kind FROM events WHERE run_id = 'r1'`, []any{&evSource, &evPhase, &evKind}},
		{`SELECT kind FROM audit_log`, []any{&auditKind}},
	} {
		if err := s.r.QueryRowContext(ctx, q.sql).Scan(q.dest...); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	if mode != "burnin" || phase != "validate" || completed != `["preflight","hardware"]` || phaseName != "validate" ||
		evSource != "coordinator" || evPhase != "validate" || evKind != "info" || auditKind != "security" {
		t.Errorf("stored mode %q phase %q completed %s phase row %q event %q/%q/%q audit %q", mode, phase, completed, phaseName, evSource, evPhase, evKind, auditKind)
	}
	for _, want := range []string{`"phases":{"validate":{"attempts":2`, `"batch":{"phases":["hardware","validate"]`, `"current":"validate"`} {
		if !strings.Contains(pipeline, want) {
			t.Errorf("pipeline column %s lacks %s", pipeline, want)
		}
	}

	got, err := s.GetRun(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Mode != modes.Burnin || got.Phase != modes.Validate || !slices.Equal(got.CompletedPhases, run.CompletedPhases) ||
		got.Pipeline.Attempts(modes.Validate) != 2 || got.Pipeline.Batch == nil || got.Pipeline.Batch.Current != modes.Validate ||
		!slices.Equal(got.Pipeline.Batch.Phases, run.Pipeline.Batch.Phases) {
		t.Errorf("read back %+v, want %+v", got, run)
	}
	ps, err := s.Phases(ctx, "r1")
	if err != nil || len(ps) != 1 || ps[0].Name != modes.Validate {
		t.Errorf("phases read back %+v, %v", ps, err)
	}
	evs, err := s.Events(ctx, "r1", 0, 0)
	if err != nil || len(evs) != 1 || evs[0].Source != runstate.SourceCoordinator || evs[0].Phase != modes.Validate || evs[0].Kind != runstate.EventInfo {
		t.Errorf("events read back %+v, %v", evs, err)
	}
	if as, err := s.AuditLog(ctx, AuditFilter{Kind: AuditSecurity}); err != nil || len(as) != 1 || as[0].Kind != AuditSecurity {
		t.Errorf("audit read back %+v, %v", as, err)
	}
}
