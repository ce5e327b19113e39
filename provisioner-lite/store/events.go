package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"
)

// Event is one entry of a run's timeline.
type Event struct {
	ID         int64 // store-assigned, monotonic
	RunID      string
	NodeID     string
	Source     string // coordinator|runner|hostos
	BootID     string
	Seq        uint64 // runner seq within (run, boot); 0 for coordinator events
	Time       time.Time
	Phase      string
	Kind       string // phase_start|phase_end|verdict|log|metric|run_end|info
	Status     string
	Message    string
	DurationMs int64
	Payload    []byte // protojson of the original event, optional
}

// AppendEvent stores e and returns its id. When e.Seq > 0 it is idempotent on
// (run, source, boot, seq): a replayed runner event returns the id of the copy
// already stored and inserted=false.
func (s *Store) AppendEvent(ctx context.Context, e Event) (id int64, inserted bool, err error) {
	if e.RunID == "" {
		return 0, false, errors.New("store: append event: empty run id")
	}
	if e.Seq > math.MaxInt64 {
		return 0, false, fmt.Errorf("store: append event to run %s: seq %d exceeds int64", e.RunID, e.Seq)
	}
	err = s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `
INSERT INTO events (run_id, node_id, source, boot_id, seq, time, phase, kind, status, message, duration_ms, payload)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT(run_id, source, boot_id, seq) WHERE seq > 0 DO NOTHING`,
			e.RunID, e.NodeID, e.Source, e.BootID, int64(e.Seq), toMs(e.Time), e.Phase, e.Kind, e.Status, e.Message, e.DurationMs, e.Payload)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			inserted = true
			id, err = res.LastInsertId()
			return err
		}
		return tx.QueryRowContext(ctx, `SELECT id FROM events WHERE run_id = ? AND source = ? AND boot_id = ? AND seq = ?`,
			e.RunID, e.Source, e.BootID, int64(e.Seq)).Scan(&id)
	})
	if err != nil {
		return 0, false, fmt.Errorf("store: append %s event (source %s, boot %q, seq %d) to run %s: %w", e.Kind, e.Source, e.BootID, e.Seq, e.RunID, err)
	}
	if inserted {
		s.notify(e.RunID)
	}
	return id, inserted, nil
}

// Events returns a run's events with ID > afterID in ID order, at most limit of
// them (limit <= 0: all).
func (s *Store) Events(ctx context.Context, runID string, afterID int64, limit int) ([]Event, error) {
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	rows, err := s.r.QueryContext(ctx, `
SELECT id, run_id, node_id, source, boot_id, seq, time, phase, kind, status, message, duration_ms, payload
FROM events WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?`, runID, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("store: events of run %s after %d: %w", runID, afterID, err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var seq, t int64
		if err := rows.Scan(&e.ID, &e.RunID, &e.NodeID, &e.Source, &e.BootID, &seq, &t, &e.Phase, &e.Kind, &e.Status, &e.Message, &e.DurationMs, &e.Payload); err != nil {
			return nil, fmt.Errorf("store: events of run %s: %w", runID, err)
		}
		e.Seq, e.Time = uint64(seq), fromMs(t)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: events of run %s: %w", runID, err)
	}
	return out, nil
}

// MaxSeq returns the highest runner seq stored for (runID, bootID), 0 if none:
// the ack a reconnecting runner resumes from.
func (s *Store) MaxSeq(ctx context.Context, runID, bootID string) (uint64, error) {
	var m int64
	err := s.r.QueryRowContext(ctx,
		`SELECT coalesce(max(seq), 0) FROM events WHERE run_id = ? AND boot_id = ? AND source = 'runner'`, runID, bootID).Scan(&m)
	if err != nil {
		return 0, fmt.Errorf("store: max seq of run %s boot %q: %w", runID, bootID, err)
	}
	return uint64(m), nil
}
