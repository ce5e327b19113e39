package store

import (
	"context"
	"fmt"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
)

// Phase is one phase's record within a run.
type Phase struct {
	RunID              string
	Name               modes.PhaseName
	Status             curev1.PhaseStatus
	Attempts           int
	StartedAt, EndedAt time.Time
	Message            string
}

// UpsertPhase inserts or replaces the (RunID, Name) phase record.
func (s *Store) UpsertPhase(ctx context.Context, p Phase) error {
	if runstate.PhaseName(p.Status) == "" {
		return fmt.Errorf("store: phase %s of run %s: status %d is not a phase status", p.Name, p.RunID, p.Status)
	}
	if p.Name == "" {
		return fmt.Errorf("store: phase of run %s: empty name", p.RunID)
	}
	err := s.tx(ctx, func(tx *Tx) error {
		_, err := tx.ExecContext(ctx, `
INSERT INTO phases (run_id, name, status, attempts, started_at, ended_at, message, ord)
VALUES (?, ?, ?, ?, ?, ?, ?, (SELECT coalesce(max(ord), 0) + 1 FROM phases WHERE run_id = ?))
ON CONFLICT(run_id, name) DO UPDATE SET status=excluded.status, attempts=excluded.attempts,
	started_at=excluded.started_at, ended_at=excluded.ended_at, message=excluded.message`,
			p.RunID, string(p.Name), runstate.PhaseName(p.Status), p.Attempts, toMs(p.StartedAt), toMs(p.EndedAt), p.Message, p.RunID)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: upsert phase %s of run %s: %w", p.Name, p.RunID, err)
	}
	s.notify(p.RunID)
	return nil
}

// Phases returns a run's phases in start order (first insertion breaks ties and
// orders phases not yet started).
func (s *Store) Phases(ctx context.Context, runID string) ([]Phase, error) {
	rows, err := s.r.QueryContext(ctx, `
SELECT run_id, name, status, attempts, started_at, ended_at, message FROM phases
WHERE run_id = ? ORDER BY CASE WHEN started_at = 0 THEN 1 ELSE 0 END, started_at, ord`, runID)
	if err != nil {
		return nil, fmt.Errorf("store: phases of run %s: %w", runID, err)
	}
	defer rows.Close()
	var out []Phase
	for rows.Next() {
		var p Phase
		var st, en int64
		if err := rows.Scan(&p.RunID, &p.Name, phaseStatusCol(&p.Status), &p.Attempts, &st, &en, &p.Message); err != nil {
			return nil, fmt.Errorf("store: phases of run %s: %w", runID, err)
		}
		p.StartedAt, p.EndedAt = fromMs(st), fromMs(en)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: phases of run %s: %w", runID, err)
	}
	return out, nil
}
