package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
)

// Why a run's fleet judgement is to be made again (run_fleet.pending).
const (
	FleetFinal    = ""         // judged, every band applied (or none named)
	FleetUnbanded = "unbanded" // a band lacked its minimum of nodes
	FleetError    = "error"    // the judgement could not be made
)

// ErrFleetConflict: the run's fleet judgement changed since it was read (a
// second coordinator rejudged it first).
var ErrFleetConflict = errors.New("fleet judgement changed since it was read")

// FleetRecord is a run's stored fleet judgement.
type FleetRecord struct {
	RunID, SKU string
	Pending    string // FleetFinal, FleetUnbanded or FleetError
	Rev        int64  // bumped by each write
	Time       time.Time
	Judgements []byte // protojson of cure.v1.FleetJudgements ("{}" for an error)
}

// FleetWrite is one write of a run's fleet judgement.
type FleetWrite struct {
	RunID, SKU, Pending string
	// Verdicts are upserted with it (MARGINAL verdicts replacing the
	// runner's PASS, the fleet's own ERROR or its replacement); a
	// measurement whose verdict is not PASS stops being a fleet sample.
	Verdicts   []Verdict
	Judgements []byte
	// IfRev, when set, makes the write conditional: it lands only while
	// the stored revision is *IfRev (0: no record yet), else
	// ErrFleetConflict and nothing is written.
	IfRev *int64
}

// WriteFleetJudgement stores a run's fleet judgement and its verdicts in one
// transaction, returning the record's new revision.
func (s *Store) WriteFleetJudgement(ctx context.Context, w FleetWrite) (int64, error) {
	var rev int64
	err := s.tx(ctx, func(tx *Tx) error {
		var err error
		if rev, err = putFleetRow(ctx, tx, w); err != nil {
			return err
		}
		return putFleetVerdicts(ctx, tx, w.RunID, w.Verdicts)
	})
	if err != nil {
		return 0, fmt.Errorf("store: fleet judgement of run %s: %w", w.RunID, err)
	}
	s.notify(w.RunID)
	return rev, nil
}

// putFleetRow writes the run_fleet row, conditionally on its revision when
// w.IfRev is set: one statement whose row count says whether it landed, so
// two coordinators on PostgreSQL cannot both pass a read-then-write check.
func putFleetRow(ctx context.Context, tx *Tx, w FleetWrite) (int64, error) {
	now := toMs(time.Now())
	if w.IfRev == nil {
		if _, err := tx.ExecContext(ctx, `INSERT INTO run_fleet (run_id, time, judgements, sku, pending, rev) VALUES (?, ?, ?, ?, ?, 1)
ON CONFLICT(run_id) DO UPDATE SET time = excluded.time, judgements = excluded.judgements, sku = excluded.sku, pending = excluded.pending, rev = run_fleet.rev + 1`,
			w.RunID, now, string(w.Judgements), w.SKU, w.Pending); err != nil {
			return 0, err
		}
		var rev int64
		err := tx.QueryRowContext(ctx, `SELECT rev FROM run_fleet WHERE run_id = ?`, w.RunID).Scan(&rev)
		return rev, err
	}
	var res sql.Result
	var err error
	if *w.IfRev == 0 {
		res, err = tx.ExecContext(ctx, `INSERT INTO run_fleet (run_id, time, judgements, sku, pending, rev) VALUES (?, ?, ?, ?, ?, 1)
ON CONFLICT(run_id) DO NOTHING`, w.RunID, now, string(w.Judgements), w.SKU, w.Pending)
	} else {
		res, err = tx.ExecContext(ctx, `UPDATE run_fleet SET time = ?, judgements = ?, sku = ?, pending = ?, rev = rev + 1 WHERE run_id = ? AND rev = ?`,
			now, string(w.Judgements), w.SKU, w.Pending, w.RunID, *w.IfRev)
	}
	if err != nil {
		return 0, err
	}
	if n, err := res.RowsAffected(); err != nil {
		return 0, err
	} else if n != 1 {
		return 0, fmt.Errorf("%w (expected revision %d)", ErrFleetConflict, *w.IfRev)
	}
	return *w.IfRev + 1, nil
}

func putFleetVerdicts(ctx context.Context, tx *Tx, runID string, vs []Verdict) error {
	for _, v := range vs {
		if v.Component == "" || v.Check == "" {
			return fmt.Errorf("verdict: component %q and check %q must both be set", v.Component, v.Check)
		}
		if _, err := tx.ExecContext(ctx, upsertVerdict, runID, v.Component, v.Check, verdictStatusCol(&v.Status), v.Observed, v.Expected, v.Message, toMs(v.Time),
			toMs(v.At), v.Stage); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE measurements SET passed = ? WHERE run_id = ? AND component = ? AND check_name = ?`,
			v.Status == curev1.VerdictStatus_PASS, runID, v.Component, v.Check); err != nil {
			return err
		}
	}
	return nil
}

// FleetRecordOf returns a run's fleet judgement record (ErrNotFound: none).
func (s *Store) FleetRecordOf(ctx context.Context, runID string) (FleetRecord, error) {
	rec := FleetRecord{RunID: runID}
	var js string
	var t int64
	err := s.r.QueryRowContext(ctx, `SELECT judgements, time, sku, pending, rev FROM run_fleet WHERE run_id = ?`, runID).Scan(&js, &t, &rec.SKU, &rec.Pending, &rec.Rev)
	if errors.Is(err, sql.ErrNoRows) {
		return rec, fmt.Errorf("store: fleet judgement of run %s: %w", runID, ErrNotFound)
	}
	if err != nil {
		return rec, fmt.Errorf("store: fleet judgement of run %s: %w", runID, err)
	}
	rec.Time, rec.Judgements = fromMs(t), []byte(js)
	return rec, nil
}

// PendingFleetJudgements lists the runs of a SKU whose fleet judgement is
// pending (unbanded or in error) and was written since since, oldest first,
// at most limit (without their judgements).
func (s *Store) PendingFleetJudgements(ctx context.Context, sku string, since time.Time, limit int) ([]FleetRecord, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT run_id, time, sku, pending, rev FROM run_fleet WHERE sku = ? AND pending IN (?, ?) AND time >= ?
ORDER BY time, run_id LIMIT ?`, sku, FleetUnbanded, FleetError, toMs(since), limit)
	if err != nil {
		return nil, fmt.Errorf("store: pending fleet judgements of SKU %s: %w", sku, err)
	}
	defer rows.Close()
	var out []FleetRecord
	for rows.Next() {
		var r FleetRecord
		var t int64
		if err := rows.Scan(&r.RunID, &t, &r.SKU, &r.Pending, &r.Rev); err != nil {
			return nil, fmt.Errorf("store: pending fleet judgements of SKU %s: %w", sku, err)
		}
		r.Time = fromMs(t)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: pending fleet judgements of SKU %s: %w", sku, err)
	}
	return out, nil
}

// PendingFleetSKUs lists, in order, the SKUs with a pending fleet judgement
// written since since (at most limit).
func (s *Store) PendingFleetSKUs(ctx context.Context, since time.Time, limit int) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT DISTINCT sku FROM run_fleet WHERE sku <> '' AND pending IN (?, ?) AND time >= ? ORDER BY sku LIMIT ?`,
		FleetUnbanded, FleetError, toMs(since), limit)
	if err != nil {
		return nil, fmt.Errorf("store: SKUs with pending fleet judgements: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var sku string
		if err := rows.Scan(&sku); err != nil {
			return nil, fmt.Errorf("store: SKUs with pending fleet judgements: %w", err)
		}
		out = append(out, sku)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: SKUs with pending fleet judgements: %w", err)
	}
	return out, nil
}
