package store

import (
	"context"
	"fmt"
	"sort"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/provisioner-lite/natural"
)

// Verdict is the latest outcome of one check on one component within a run.
type Verdict struct {
	RunID, Component, Check     string
	Status                      curev1.VerdictStatus
	Observed, Expected, Message string
	Time                        time.Time
	// At is when the finding happened, when earlier than Time (a bar on a
	// sampled series); zero: at Time. Stage is the suite stage.
	At    time.Time
	Stage string
	// Measurements are stored apart (measurements.go) when the runner's
	// verdict is: Verdicts does not return them (RunMeasurements does).
	Measurements []Measurement
}

const upsertVerdict = `
INSERT INTO verdicts (run_id, component, check_name, status, observed, expected, message, time, at, stage)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT(run_id, component, check_name) DO UPDATE SET status=excluded.status, observed=excluded.observed,
	expected=excluded.expected, message=excluded.message, time=excluded.time, at=excluded.at, stage=excluded.stage`

// PutVerdict inserts or replaces the (RunID, Component, Check) verdict.
func (s *Store) PutVerdict(ctx context.Context, v Verdict) error {
	if v.Component == "" || v.Check == "" {
		return fmt.Errorf("store: verdict of run %s: component %q and check %q must both be set", v.RunID, v.Component, v.Check)
	}
	err := s.tx(ctx, func(tx *Tx) error {
		_, err := tx.ExecContext(ctx, upsertVerdict,
			v.RunID, v.Component, v.Check, verdictStatusCol(&v.Status), v.Observed, v.Expected, v.Message, toMs(v.Time), toMs(v.At), v.Stage)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: put verdict %s/%s of run %s: %w", v.Component, v.Check, v.RunID, err)
	}
	s.notify(v.RunID)
	return nil
}

// Verdicts returns a run's verdicts sorted by component in natural order
// (gpu/2 before gpu/10), then by check.
func (s *Store) Verdicts(ctx context.Context, runID string) ([]Verdict, error) {
	rows, err := s.r.QueryContext(ctx, `
SELECT run_id, component, check_name, status, observed, expected, message, time, at, stage FROM verdicts WHERE run_id = ?`, runID)
	if err != nil {
		return nil, fmt.Errorf("store: verdicts of run %s: %w", runID, err)
	}
	defer rows.Close()
	var out []Verdict
	for rows.Next() {
		var v Verdict
		var t, at int64
		if err := rows.Scan(&v.RunID, &v.Component, &v.Check, verdictStatusCol(&v.Status), &v.Observed, &v.Expected, &v.Message, &t, &at, &v.Stage); err != nil {
			return nil, fmt.Errorf("store: verdicts of run %s: %w", runID, err)
		}
		v.Time, v.At = fromMs(t), fromMs(at)
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: verdicts of run %s: %w", runID, err)
	}
	sort.Slice(out, func(i, j int) bool {
		if c := natural.Compare(out[i].Component, out[j].Component); c != 0 {
			return c < 0
		}
		return natural.Compare(out[i].Check, out[j].Check) < 0
	})
	return out, nil
}
