package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Run statuses.
const (
	RunPending   = "pending"
	RunRunning   = "running"
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
	RunAttention = "attention"
	RunCanceled  = "canceled"
)

// Run is one execution of a mode against a node.
type Run struct {
	ID, NodeID, Mode, Manifest string
	Status                     string // pending|running|succeeded|failed|attention|canceled
	Phase                      string // phase reached (current)
	ResumeCount, PhaseFailures int
	Disconnects, Reboots       int
	CompletedPhases            []string
	StartedAt, EndedAt         time.Time
	Message                    string
	Data                       map[string]string // pipeline scratch: tokens, expected boot id...
}

func validRunStatus(s string) bool {
	switch s {
	case RunPending, RunRunning, RunSucceeded, RunFailed, RunAttention, RunCanceled:
		return true
	}
	return false
}

// CreateRun inserts a new run; r.ID must be set by the caller and r.NodeID must
// name an existing node. An empty Status means pending.
func (s *Store) CreateRun(ctx context.Context, r Run) error {
	if r.ID == "" {
		return errors.New("store: create run: empty id")
	}
	if r.Status == "" {
		r.Status = RunPending
	}
	if !validRunStatus(r.Status) {
		return fmt.Errorf("store: create run %s: status %q is not one of pending|running|succeeded|failed|attention|canceled", r.ID, r.Status)
	}
	completed, data, err := marshalRun(r)
	if err != nil {
		return fmt.Errorf("store: create run %s: %w", r.ID, err)
	}
	err = s.tx(ctx, func(tx *sql.Tx) error {
		var exists int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM nodes WHERE id = ?`, r.NodeID).Scan(&exists); err != nil {
			return err
		}
		if exists == 0 {
			return fmt.Errorf("node %q: %w", r.NodeID, ErrNotFound)
		}
		_, err := tx.ExecContext(ctx, `
INSERT INTO runs (id, node_id, mode, manifest, status, phase, resume_count, phase_failures, disconnects, reboots,
	completed_phases, started_at, ended_at, message, data, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			r.ID, r.NodeID, r.Mode, r.Manifest, r.Status, r.Phase, r.ResumeCount, r.PhaseFailures, r.Disconnects, r.Reboots,
			completed, toMs(r.StartedAt), toMs(r.EndedAt), r.Message, data, time.Now().UnixMilli())
		return err
	})
	if err != nil {
		return fmt.Errorf("store: create run %s for node %s: %w", r.ID, r.NodeID, err)
	}
	s.notify(r.ID)
	return nil
}

// UpdateRun replaces every field of the run except ID and NodeID, which are fixed
// at creation. Subscribers of the run are signalled.
func (s *Store) UpdateRun(ctx context.Context, r Run) error {
	if !validRunStatus(r.Status) {
		return fmt.Errorf("store: update run %s: status %q is not one of pending|running|succeeded|failed|attention|canceled", r.ID, r.Status)
	}
	completed, data, err := marshalRun(r)
	if err != nil {
		return fmt.Errorf("store: update run %s: %w", r.ID, err)
	}
	err = s.tx(ctx, func(tx *sql.Tx) error {
		var nodeID string
		if err := tx.QueryRowContext(ctx, `SELECT node_id FROM runs WHERE id = ?`, r.ID).Scan(&nodeID); errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		} else if err != nil {
			return err
		}
		if r.NodeID != "" && r.NodeID != nodeID {
			return fmt.Errorf("run belongs to node %s, update names node %s", nodeID, r.NodeID)
		}
		_, err := tx.ExecContext(ctx, `
UPDATE runs SET mode=?, manifest=?, status=?, phase=?, resume_count=?, phase_failures=?, disconnects=?, reboots=?,
	completed_phases=?, started_at=?, ended_at=?, message=?, data=?
WHERE id = ?`,
			r.Mode, r.Manifest, r.Status, r.Phase, r.ResumeCount, r.PhaseFailures, r.Disconnects, r.Reboots,
			completed, toMs(r.StartedAt), toMs(r.EndedAt), r.Message, data, r.ID)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: update run %s: %w", r.ID, err)
	}
	s.notify(r.ID)
	return nil
}

const runCols = `id, node_id, mode, manifest, status, phase, resume_count, phase_failures, disconnects, reboots,
	completed_phases, started_at, ended_at, message, data`

// GetRun returns the run with that id, or an error wrapping ErrNotFound.
func (s *Store) GetRun(ctx context.Context, id string) (Run, error) {
	r, err := scanRun(s.r.QueryRowContext(ctx, `SELECT `+runCols+` FROM runs WHERE id = ?`, id))
	if err != nil {
		return Run{}, fmt.Errorf("store: run %q: %w", id, err)
	}
	return r, nil
}

// LatestRun returns the most recently created run of a node.
func (s *Store) LatestRun(ctx context.Context, nodeID string) (Run, error) {
	r, err := scanRun(s.r.QueryRowContext(ctx,
		`SELECT `+runCols+` FROM runs WHERE node_id = ? ORDER BY created_at DESC, rowid DESC LIMIT 1`, nodeID))
	if err != nil {
		return Run{}, fmt.Errorf("store: latest run of node %q: %w", nodeID, err)
	}
	return r, nil
}

// ActiveRuns returns the pending and running runs, oldest first: what a
// restarted coordinator must resume.
func (s *Store) ActiveRuns(ctx context.Context) ([]Run, error) {
	return s.listRuns(ctx, `WHERE status IN ('pending','running') ORDER BY created_at, rowid`)
}

// RunsOfNode returns a node's runs, newest first.
func (s *Store) RunsOfNode(ctx context.Context, nodeID string) ([]Run, error) {
	return s.listRuns(ctx, `WHERE node_id = ? ORDER BY created_at DESC, rowid DESC`, nodeID)
}

func (s *Store) listRuns(ctx context.Context, where string, args ...any) ([]Run, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+runCols+` FROM runs `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list runs: %w", err)
	}
	defer rows.Close()
	var out []Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list runs: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list runs: %w", err)
	}
	return out, nil
}

func marshalRun(r Run) (completed, data string, err error) {
	c := r.CompletedPhases
	if c == nil {
		c = []string{}
	}
	b, err := json.Marshal(c)
	if err != nil {
		return "", "", fmt.Errorf("completed phases: %w", err)
	}
	data, err = marshalMap(r.Data)
	if err != nil {
		return "", "", fmt.Errorf("data: %w", err)
	}
	return string(b), data, nil
}

func scanRun(sc scanner) (Run, error) {
	var r Run
	var completed, data string
	var started, ended int64
	err := sc.Scan(&r.ID, &r.NodeID, &r.Mode, &r.Manifest, &r.Status, &r.Phase, &r.ResumeCount, &r.PhaseFailures,
		&r.Disconnects, &r.Reboots, &completed, &started, &ended, &r.Message, &data)
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, ErrNotFound
	}
	if err != nil {
		return Run{}, err
	}
	if err := json.Unmarshal([]byte(completed), &r.CompletedPhases); err != nil {
		return Run{}, fmt.Errorf("run %s: completed_phases column: %w", r.ID, err)
	}
	if len(r.CompletedPhases) == 0 {
		r.CompletedPhases = nil
	}
	if r.Data, err = unmarshalMap(data); err != nil {
		return Run{}, fmt.Errorf("run %s: data column: %w", r.ID, err)
	}
	r.StartedAt, r.EndedAt = fromMs(started), fromMs(ended)
	return r, nil
}
