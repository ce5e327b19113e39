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

// Event is one entry of a run's timeline.
type Event struct {
	ID         int64 // store-assigned, monotonic
	RunID      string
	NodeID     string
	Source     runstate.EventSource
	BootID     string
	Seq        uint64 // runner seq within (run, boot); 0 for coordinator events
	Time       time.Time
	Phase      modes.PhaseName
	Kind       runstate.EventKind
	Status     string
	Message    string
	DurationMs int64
	Payload    []byte // protojson of the original event, optional
	// Note marks a coordinator note (session chatter, reconnect summaries,
	// cap notices): capped per run and pruned with the runner's metrics and
	// logs, unlike the coordinator's essential timeline (notes.go).
	Note bool
}

// AppendEvent stores e and returns its id. When e.Seq > 0 it is idempotent on
// (run, source, boot, seq): a replayed runner event returns the id of the copy
// already stored and inserted=false. A note (e.Note) past its run's cap is
// counted, not stored: id 0 and inserted=false (notes.go).
func (s *Store) AppendEvent(ctx context.Context, e Event) (id int64, inserted bool, err error) {
	if e.RunID == "" {
		return 0, false, errors.New("store: append event: empty run id")
	}
	if e.Seq > math.MaxInt64 {
		return 0, false, fmt.Errorf("store: append event to run %s: seq %d exceeds int64", e.RunID, e.Seq)
	}
	if e.Note && e.Source != runstate.SourceCoordinator {
		return 0, false, fmt.Errorf("store: append event to run %s: only the coordinator writes notes (source %q)", e.RunID, e.Source)
	}
	var wrote bool
	var taken map[string]*pendingRun // the run's queued progress, written ahead of e: ids in arrival order
	var took bool
	err = s.tx(ctx, func(tx *Tx) error {
		if err := s.flushAhead(ctx, tx, e.RunID, &taken, &took); err != nil {
			return err
		}
		var err error
		if e.Note {
			id, inserted, wrote, err = s.appendNote(ctx, tx, e)
			return err
		}
		id, inserted, err = insertEvent(ctx, tx, e)
		wrote = inserted
		return err
	})
	_ = s.settle(taken, nil, err) // on failure the queued progress waits for the next flush
	if err != nil {
		return 0, false, fmt.Errorf("store: append %s event (source %s, boot %q, seq %d) to run %s: %w", e.Kind, e.Source, e.BootID, e.Seq, e.RunID, err)
	}
	if wrote {
		s.notify(e.RunID)
	}
	return id, inserted, nil
}

// insertEvent inserts e, or on a (run, source, boot, seq) already stored
// returns that row's id and inserted=false.
func insertEvent(ctx context.Context, tx *Tx, e Event) (id int64, inserted bool, err error) {
	// RETURNING gives the id in SQLite and PostgreSQL alike (pgx has no
	// LastInsertId); a conflict returns no row.
	err = tx.QueryRowContext(ctx, `
INSERT INTO events (run_id, node_id, source, boot_id, seq, time, phase, kind, status, message, duration_ms, payload, note)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT(run_id, source, boot_id, seq) WHERE seq > 0 DO NOTHING RETURNING id`,
		e.RunID, e.NodeID, string(e.Source), e.BootID, int64(e.Seq), toMs(e.Time), string(e.Phase), string(e.Kind), e.Status, e.Message, e.DurationMs, e.Payload, e.Note).Scan(&id)
	if err == nil {
		return id, true, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return 0, false, err
	}
	err = tx.QueryRowContext(ctx, `SELECT id FROM events WHERE run_id = ? AND source = ? AND boot_id = ? AND seq = ?`,
		e.RunID, string(e.Source), e.BootID, int64(e.Seq)).Scan(&id)
	return id, false, err
}

// Events returns a run's events with ID > afterID in ID order, at most limit of
// them (limit <= 0: all).
func (s *Store) Events(ctx context.Context, runID string, afterID int64, limit int) ([]Event, error) {
	if limit <= 0 {
		limit = math.MaxInt32 // no limit (PostgreSQL refuses LIMIT -1)
	}
	if err := s.flushRun(ctx, runID); err != nil {
		return nil, fmt.Errorf("store: events of run %s: %w", runID, err)
	}
	rows, err := s.r.QueryContext(ctx, `
SELECT id, run_id, node_id, source, boot_id, seq, time, phase, kind, status, message, duration_ms, payload, note
FROM events WHERE run_id = ? AND id > ? ORDER BY id LIMIT ?`, runID, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("store: events of run %s after %d: %w", runID, afterID, err)
	}
	defer rows.Close()
	var out []Event
	for rows.Next() {
		var e Event
		var seq, t int64
		if err := rows.Scan(&e.ID, &e.RunID, &e.NodeID, &e.Source, &e.BootID, &seq, &t, &e.Phase, &e.Kind, &e.Status, &e.Message, &e.DurationMs, &e.Payload, &e.Note); err != nil {
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

// LastEventID returns the id of run runID's latest event, 0 if none: where
// a watcher of the run's new events starts (one index lookup; reading the
// events to find it cost 1 % of the coordinator's CPU at fleet load).
func (s *Store) LastEventID(ctx context.Context, runID string) (int64, error) {
	var id int64
	if err := s.flushRun(ctx, runID); err != nil {
		return 0, fmt.Errorf("store: last event of run %s: %w", runID, err)
	}
	err := s.r.QueryRowContext(ctx, `SELECT coalesce(max(id), 0) FROM events WHERE run_id = ?`, runID).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("store: last event of run %s: %w", runID, err)
	}
	return id, nil
}

// MaxSeq returns the highest runner seq stored for (runID, bootID), 0 if none:
// the ack a reconnecting runner resumes from.
func (s *Store) MaxSeq(ctx context.Context, runID, bootID string) (uint64, error) {
	var m int64
	if err := s.flushRun(ctx, runID); err != nil {
		return 0, fmt.Errorf("store: max seq of run %s boot %q: %w", runID, bootID, err)
	}
	err := s.r.QueryRowContext(ctx,
		`SELECT coalesce(max(seq), 0) FROM events WHERE run_id = ? AND boot_id = ? AND source = 'runner'`, runID, bootID).Scan(&m)
	if err != nil {
		return 0, fmt.Errorf("store: max seq of run %s boot %q: %w", runID, bootID, err)
	}
	return uint64(m), nil
}

// LastPhaseEventKind returns the kind (phase_start or phase_end) of the
// latest phase event the runner of (runID, bootID) stored with a seq above
// afterSeq, "" if none: what the runner did since it said hello.
func (s *Store) LastPhaseEventKind(ctx context.Context, runID, bootID string, afterSeq uint64) (runstate.EventKind, error) {
	if afterSeq > math.MaxInt64 {
		afterSeq = math.MaxInt64
	}
	var kind runstate.EventKind
	err := s.r.QueryRowContext(ctx, `
SELECT kind FROM events WHERE run_id = ? AND source = 'runner' AND boot_id = ? AND seq > ? AND kind IN ('phase_start', 'phase_end')
ORDER BY seq DESC LIMIT 1`, runID, bootID, int64(afterSeq)).Scan(&kind)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("store: last phase event of run %s boot %q: %w", runID, bootID, err)
	}
	return kind, nil
}

// EventLimits bound what one run's runner may make the store keep
// (docs/SECURITY.md): past MaxEvents or MaxBytes, metrics and logs are
// acknowledged but not stored; phase events and verdicts are kept up to
// HardEvents; more than MaxVerdicts distinct (component, check) is refused.
type EventLimits struct {
	MaxEvents   int64
	MaxBytes    int64
	HardEvents  int64
	MaxVerdicts int64
}

// DefaultEventLimits fit a 72-hour burn-in of an 8-GPU node sampling every
// minute with room to spare, and stop a peer filling the disk.
var DefaultEventLimits = EventLimits{MaxEvents: 500_000, MaxBytes: 256 << 20, HardEvents: 520_000, MaxVerdicts: 10_000}

// Errors of AppendRunnerEvent.
var (
	ErrRunInactive = errors.New("run is not active")
	ErrRunCap      = errors.New("run exceeded its event caps")
)

// AppendResult says what became of a runner event.
type AppendResult struct {
	ID       int64
	Inserted bool // false: a replay of a stored event, or dropped
	Dropped  bool // a metric or log over the run's caps: acked, not stored
	// FirstDrop: this is the run's first dropped event (whichever session
	// sent it), the one moment to say so in the run's timeline.
	FirstDrop bool
	// Queued: answered before its write (QueueRunnerEvent); whether it is
	// kept or dropped is decided when it is written.
	Queued bool
}

// AppendRunnerEvent stores one runner event of an active run, and its verdict
// (v may be nil), in one transaction, within the run's limits. A replayed
// (run, boot, seq) is a no-op. It fails with ErrRunInactive when the run has
// ended and ErrRunCap when phase events or verdicts exceed the hard caps.
func (s *Store) AppendRunnerEvent(ctx context.Context, e Event, v *Verdict, lim EventLimits) (AppendResult, error) {
	var res AppendResult
	if e.RunID == "" || e.Seq == 0 || e.Seq > math.MaxInt64 {
		return res, fmt.Errorf("store: append runner event to run %q: seq %d: want a run and 1 <= seq <= 2^63-1", e.RunID, e.Seq)
	}
	e.Source = runstate.SourceRunner
	size := int64(len(e.Message) + len(e.Payload) + len(e.Phase) + len(e.Status))
	if v != nil {
		size += int64(len(v.Component) + len(v.Check) + len(v.Observed) + len(v.Expected) + len(v.Message) + len(v.Stage))
	}
	var taken map[string]*pendingRun // the run's queued progress, written ahead of e
	var took bool
	err := s.tx(ctx, func(tx *Tx) error {
		// The run's status and its usage so far in one statement (one
		// fewer per runner event in the committer's serial work).
		var status curev1.RunStatus
		var events, bytes, verdicts int64
		if err := tx.QueryRowContext(ctx, `SELECT r.status, COALESCE(u.events, 0), COALESCE(u.bytes, 0), COALESCE(u.verdicts, 0)
FROM runs r LEFT JOIN run_usage u ON u.run_id = r.id WHERE r.id = ?`, e.RunID).Scan(runStatusCol(&status), &events, &bytes, &verdicts); errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		} else if err != nil {
			return err
		}
		if !runstate.Active(status) {
			return fmt.Errorf("%w (%s)", ErrRunInactive, runstate.RunName(status))
		}
		err := tx.QueryRowContext(ctx, `SELECT id FROM events WHERE run_id = ? AND source = 'runner' AND boot_id = ? AND seq = ?`,
			e.RunID, e.BootID, int64(e.Seq)).Scan(&res.ID)
		if err == nil {
			return nil // replay
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		soft := e.Kind == runstate.EventMetric || e.Kind == runstate.EventLog
		if soft && (events+1 > lim.MaxEvents || bytes+size > lim.MaxBytes) {
			res.Dropped = true
			var dropped int64
			err := tx.QueryRowContext(ctx, `INSERT INTO run_usage (run_id, dropped) VALUES (?, 1)
ON CONFLICT(run_id) DO UPDATE SET dropped = run_usage.dropped + 1 RETURNING dropped`, e.RunID).Scan(&dropped)
			res.FirstDrop = dropped == 1
			return err
		}
		if events+1 > lim.HardEvents || bytes+size > lim.MaxBytes+lim.MaxBytes/8 {
			return fmt.Errorf("%w: %d events, %d bytes stored (caps %d events, %d bytes)", ErrRunCap, events, bytes, lim.HardEvents, lim.MaxBytes)
		}
		newVerdict := int64(0)
		if v != nil {
			var one int
			err := tx.QueryRowContext(ctx, `SELECT 1 FROM verdicts WHERE run_id = ? AND component = ? AND check_name = ?`, e.RunID, v.Component, v.Check).Scan(&one)
			if errors.Is(err, sql.ErrNoRows) {
				newVerdict = 1
			} else if err != nil {
				return err
			}
			if verdicts+newVerdict > lim.MaxVerdicts {
				return fmt.Errorf("%w: more than %d distinct verdicts", ErrRunCap, lim.MaxVerdicts)
			}
		}
		if err := s.flushAhead(ctx, tx, e.RunID, &taken, &took); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `
INSERT INTO events (run_id, node_id, source, boot_id, seq, time, phase, kind, status, message, duration_ms, payload)
VALUES (?, ?, 'runner', ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
			e.RunID, e.NodeID, e.BootID, int64(e.Seq), toMs(e.Time), string(e.Phase), string(e.Kind), e.Status, e.Message, e.DurationMs, e.Payload).Scan(&res.ID); err != nil {
			return err
		}
		res.Inserted = true
		if v != nil {
			if v.Component == "" || v.Check == "" {
				return fmt.Errorf("verdict: component %q and check %q must both be set", v.Component, v.Check)
			}
			if _, err := tx.ExecContext(ctx, upsertVerdict, e.RunID, v.Component, v.Check, verdictStatusCol(&v.Status), v.Observed, v.Expected, v.Message, toMs(v.Time),
				toMs(v.At), v.Stage); err != nil {
				return err
			}
			if err := s.putMeasurements(ctx, tx, e.RunID, *v); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO run_usage (run_id, events, bytes, verdicts) VALUES (?, 1, ?, ?)
ON CONFLICT(run_id) DO UPDATE SET events = run_usage.events + 1, bytes = run_usage.bytes + excluded.bytes, verdicts = run_usage.verdicts + excluded.verdicts`,
			e.RunID, size, newVerdict)
		return err
	})
	_ = s.settle(taken, nil, err) // on failure the queued progress waits for the next flush
	if err != nil {
		return AppendResult{}, fmt.Errorf("store: append runner %s event (boot %q, seq %d) to run %s: %w", e.Kind, e.BootID, e.Seq, e.RunID, err)
	}
	if res.Inserted {
		s.notify(e.RunID)
	}
	return res, nil
}

// RunUsage is what a run's runner has made the store keep (Events and
// Bytes include the reconnects charged to the run), and the coordinator
// notes kept and counted past their cap.
type RunUsage struct{ Events, Bytes, Dropped, Verdicts, Notes, NotesDropped int64 }

// Usage returns a run's accounting (zero for a run without runner events).
func (s *Store) Usage(ctx context.Context, runID string) (RunUsage, error) {
	var u RunUsage
	if err := s.flushRun(ctx, runID); err != nil {
		return u, fmt.Errorf("store: usage of run %s: %w", runID, err)
	}
	err := s.r.QueryRowContext(ctx, `SELECT events, bytes, dropped, verdicts, notes, notes_dropped FROM run_usage WHERE run_id = ?`, runID).Scan(
		&u.Events, &u.Bytes, &u.Dropped, &u.Verdicts, &u.Notes, &u.NotesDropped)
	if errors.Is(err, sql.ErrNoRows) {
		return RunUsage{}, nil
	}
	if err != nil {
		return u, fmt.Errorf("store: usage of run %s: %w", runID, err)
	}
	return u, nil
}

// PruneRunEvents deletes the runner's metrics and logs and the coordinator's
// notes of runs that ended before t; phases, verdicts and the coordinator's
// essential timeline stay.
func (s *Store) PruneRunEvents(ctx context.Context, endedBefore time.Time) (int64, error) {
	var n int64
	err := s.tx(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM events WHERE ((source = 'runner' AND kind IN ('metric', 'log')) OR note = ?) AND run_id IN
(SELECT id FROM runs WHERE status NOT IN ('pending', 'running') AND ended_at > 0 AND ended_at < ?)`, true, toMs(endedBefore))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: prune run events: %w", err)
	}
	return n, nil
}
