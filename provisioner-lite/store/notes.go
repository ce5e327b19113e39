package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
)

// The coordinator writes two kinds of events into a run's timeline. Its
// essential timeline (run created, phases, reboots, retries, the first
// connect of each boot, the run's end) follows the pipeline, whose budgets
// bound it, and is kept for good. Notes are what a peer can provoke (a
// runner reconnecting, a session re-attached, a cap reached): they are
// capped per run (past the cap one more note says so and the rest are
// counted in run_usage.notes_dropped) and pruned with the runner's metrics
// and logs once the run has ended (Retention.RunEvents).

// DefaultMaxNotes is the notes kept per run: far above what a real run
// writes (a few per boot), far below what would bloat a report.
const DefaultMaxNotes = 10_000

// WithMaxNotes sets the coordinator notes kept per run (default
// DefaultMaxNotes).
func WithMaxNotes(n int64) Option { return func(o *options) { o.maxNotes = n } }

func (o options) notes() int64 {
	if o.maxNotes <= 0 {
		return DefaultMaxNotes
	}
	return o.maxNotes
}

// appendNote stores the note e within its run's cap, in tx. It reports the
// note's id and whether it was stored, and whether anything was written to
// the timeline (the note, or the notice that the cap was reached).
func (s *Store) appendNote(ctx context.Context, tx *Tx, e Event) (id int64, inserted, wrote bool, err error) {
	var notes, dropped int64
	err = tx.QueryRowContext(ctx, `SELECT notes, notes_dropped FROM run_usage WHERE run_id = ?`, e.RunID).Scan(&notes, &dropped)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, false, false, err
	}
	if notes >= s.maxNotes {
		if dropped == 0 {
			notice := Event{RunID: e.RunID, NodeID: e.NodeID, Source: runstate.SourceCoordinator, Time: e.Time, Phase: e.Phase, Kind: runstate.EventInfo, Note: true,
				Message: fmt.Sprintf("coordinator notes cap reached (%d notes): this run's further notes (reconnects, session changes) are counted, not stored", s.maxNotes)}
			if _, wrote, err = insertEvent(ctx, tx, notice); err != nil {
				return 0, false, false, err
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO run_usage (run_id, notes_dropped) VALUES (?, 1)
ON CONFLICT(run_id) DO UPDATE SET notes_dropped = run_usage.notes_dropped + 1`, e.RunID)
		return 0, false, wrote, err
	}
	id, inserted, err = insertEvent(ctx, tx, e)
	if err != nil || !inserted {
		return id, false, false, err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO run_usage (run_id, notes) VALUES (?, 1)
ON CONFLICT(run_id) DO UPDATE SET notes = run_usage.notes + 1`, e.RunID)
	return id, true, true, err
}

// Reconnect is a session of a boot that had registered before (its bound
// token and session secret): the coordinator counts it against the run and
// summarises it instead of writing an event each.
type Reconnect struct {
	TokenHash             string // the boot's bound token (TokenHash)
	RunID, NodeID, BootID string
	Phase                 modes.PhaseName
	Peer                  string
	Time                  time.Time
}

// reconnectSeq is the seq of a boot's reconnect summary. Coordinator events
// have seq 0 otherwise, so (run, coordinator, boot id, reconnectSeq) names
// the one summary of a boot.
const reconnectSeq = 1

// NoteReconnect counts one reconnect of a boot: on its bound token (the
// boot's total, returned), against its run's caps as one event (past the
// caps, counted as dropped like a metric), and in the boot's one summary
// note, rewritten in place ("runner reconnected N times since ..."). It
// wraps ErrNotFound when the boot holds no bound token of the run (the run
// ended meanwhile).
func (s *Store) NoteReconnect(ctx context.Context, rc Reconnect, lim EventLimits) (int64, error) {
	if rc.Time.IsZero() {
		rc.Time = time.Now()
	}
	var n int64
	var wrote bool
	err := s.tx(ctx, func(tx *Tx) error {
		err := tx.QueryRowContext(ctx, `UPDATE boot_tokens SET reconnects = reconnects + 1
WHERE token_sha256 = ? AND run_id = ? AND boot_id = ? AND state = 'bound' RETURNING reconnects`, rc.TokenHash, rc.RunID, rc.BootID).Scan(&n)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("no bound token of boot %q: %w", rc.BootID, ErrNotFound)
		}
		if err != nil {
			return err
		}
		var events, bytes int64
		if err := tx.QueryRowContext(ctx, `SELECT events, bytes FROM run_usage WHERE run_id = ?`, rc.RunID).Scan(&events, &bytes); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		charge := `INSERT INTO run_usage (run_id, events) VALUES (?, 1) ON CONFLICT(run_id) DO UPDATE SET events = run_usage.events + 1`
		if events+1 > lim.MaxEvents || bytes > lim.MaxBytes {
			charge = `INSERT INTO run_usage (run_id, dropped) VALUES (?, 1) ON CONFLICT(run_id) DO UPDATE SET dropped = run_usage.dropped + 1`
		}
		if _, err := tx.ExecContext(ctx, charge, rc.RunID); err != nil {
			return err
		}
		var id, since int64
		err = tx.QueryRowContext(ctx, `SELECT id, time FROM events WHERE run_id = ? AND source = 'coordinator' AND boot_id = ? AND seq = ?`,
			rc.RunID, rc.BootID, reconnectSeq).Scan(&id, &since)
		if errors.Is(err, sql.ErrNoRows) {
			_, _, wrote, err = s.appendNote(ctx, tx, Event{RunID: rc.RunID, NodeID: rc.NodeID, Source: runstate.SourceCoordinator, BootID: rc.BootID,
				Seq: reconnectSeq, Time: rc.Time, Phase: rc.Phase, Kind: runstate.EventInfo, Note: true, Message: reconnectMessage(n, rc.Time, rc)})
			return err
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE events SET message = ? WHERE id = ?`, reconnectMessage(n, fromMs(since), rc), id)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: reconnect of boot %q to run %s: %w", rc.BootID, rc.RunID, err)
	}
	if wrote {
		s.notify(rc.RunID)
	}
	return n, nil
}

func reconnectMessage(n int64, since time.Time, rc Reconnect) string {
	times := "times"
	if n == 1 {
		times = "time"
	}
	return fmt.Sprintf("runner reconnected %d %s since %s (boot %s; last from %s at %s)", n, times,
		since.UTC().Format(time.RFC3339), rc.BootID, rc.Peer, rc.Time.UTC().Format(time.RFC3339))
}
