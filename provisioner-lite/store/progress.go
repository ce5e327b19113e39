package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"

	"github.com/cure-oss/cure/provisioner-lite/runstate"
)

// ProgressRecord is a run's latest heartbeat (Progress) from its runner.
// The store keeps the bytes it is given (protojson of cure.v1.Progress,
// cleaned and bounded by the server) and knows nothing of their schema.
type ProgressRecord struct {
	RunID, BootID string
	Seq           uint64
	Phase         modes.PhaseName
	Time          time.Time // the runner's clock
	Received      time.Time // the coordinator's
	JSON          []byte
}

// PutProgress keeps rec as its run's latest heartbeat: one row per run,
// replaced, so a soak of days keeps one and never counts against the run's
// event caps. A heartbeat of the same boot that is not newer (a replay)
// changes nothing; another boot's replaces it. kept says which happened.
// A run that ended takes none (ErrRunInactive).
func (s *Store) PutProgress(ctx context.Context, rec ProgressRecord) (kept bool, err error) {
	if rec.RunID == "" || rec.BootID == "" || rec.Seq == 0 || rec.Seq > math.MaxInt64 {
		return false, fmt.Errorf("store: progress of run %q boot %q seq %d: want a run, a boot and 1 <= seq <= 2^63-1", rec.RunID, rec.BootID, rec.Seq)
	}
	if rec.Received.IsZero() {
		rec.Received = time.Now()
	}
	err = s.tx(ctx, func(tx *Tx) error {
		var status curev1.RunStatus
		if err := tx.QueryRowContext(ctx, `SELECT status FROM runs WHERE id = ?`, rec.RunID).Scan(runStatusCol(&status)); errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		} else if err != nil {
			return err
		}
		if !runstate.Active(status) {
			return fmt.Errorf("%w (%s)", ErrRunInactive, runstate.RunName(status))
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO run_progress (run_id, boot_id, seq, phase, time, received, progress) VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id) DO UPDATE SET boot_id = excluded.boot_id, seq = excluded.seq, phase = excluded.phase, time = excluded.time,
	received = excluded.received, progress = excluded.progress
WHERE run_progress.boot_id <> excluded.boot_id OR run_progress.seq < excluded.seq`,
			rec.RunID, rec.BootID, int64(rec.Seq), string(rec.Phase), toMs(rec.Time), toMs(rec.Received), string(rec.JSON))
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		kept = n > 0
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("store: progress of run %s (boot %q, seq %d): %w", rec.RunID, rec.BootID, rec.Seq, err)
	}
	if kept {
		s.notify(rec.RunID)
	}
	return kept, nil
}

// RunProgress is the run's latest heartbeat (ErrNotFound: none yet).
func (s *Store) RunProgress(ctx context.Context, runID string) (ProgressRecord, error) {
	var r ProgressRecord
	var seq, t, recv int64
	var js string
	if err := s.flushRun(ctx, runID); err != nil { // a queued heartbeat (QueueProgress) is read too
		return ProgressRecord{}, fmt.Errorf("store: progress of run %s: %w", runID, err)
	}
	err := s.r.QueryRowContext(ctx, `SELECT run_id, boot_id, seq, phase, time, received, progress FROM run_progress WHERE run_id = ?`, runID).
		Scan(&r.RunID, &r.BootID, &seq, &r.Phase, &t, &recv, &js)
	if errors.Is(err, sql.ErrNoRows) {
		err = ErrNotFound
	}
	if err != nil {
		return ProgressRecord{}, fmt.Errorf("store: progress of run %s: %w", runID, err)
	}
	r.Seq, r.Time, r.Received, r.JSON = uint64(seq), fromMs(t), fromMs(recv), []byte(js)
	return r, nil
}
