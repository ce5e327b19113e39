package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
)

// Fleet history: every verdict's measurements are kept apart from the
// verdict (one row per metric) with what the fleet bands select them by,
// so "the recent passing readMBps of disk-read on SKU x" is one index range
// (measurements_fleet). A row's time is the coordinator's clock when the
// verdict arrived: a node's clock does not decide whether its result is
// recent. Rows outlive the runner's logs (Retention.Fleet).

// Measurement is one measured number of a verdict, with its unit.
type Measurement struct {
	Metric string
	Value  float64
	Unit   string
}

// Bounds of what one run keeps: MaxVerdictMeasurements per verdict (the
// rest are not stored), DefaultMaxRunMeasurements rows per run (a verdict
// past it is stored without its measurements).
const (
	MaxVerdictMeasurements    = 32
	DefaultMaxRunMeasurements = 20_000
)

// WithMaxMeasurements sets the measurement rows kept per run (default
// DefaultMaxRunMeasurements).
func WithMaxMeasurements(n int64) Option { return func(o *options) { o.maxMeasurements = n } }

func (o options) measurements() int64 {
	if o.maxMeasurements <= 0 {
		return DefaultMaxRunMeasurements
	}
	return o.maxMeasurements
}

// MeasurementRecord is one stored measurement.
type MeasurementRecord struct {
	RunID, NodeID, SKU, Suite, Check, Component string
	Measurement
	Time   time.Time
	Passed bool // its verdict passed (PASS): a fleet sample
}

// putMeasurements replaces the measurements of v's (component, check) in
// run runID with v's, within the run's bound, in tx. The node, its SKU and
// the suite are the run's, as stored: never what the runner says.
func (s *Store) putMeasurements(ctx context.Context, tx *Tx, runID string, v Verdict) error {
	if len(v.Measurements) == 0 {
		return nil
	}
	var node, sku, suite string
	err := tx.QueryRowContext(ctx, `SELECT r.node_id, n.sku, r.manifest FROM runs r JOIN nodes n ON n.id = r.node_id WHERE r.id = ?`, runID).Scan(&node, &sku, &suite)
	if err != nil {
		return fmt.Errorf("measurements of %s/%s: run %s: %w", v.Component, v.Check, runID, err)
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM measurements WHERE run_id = ? AND component = ? AND check_name = ?`, runID, v.Component, v.Check)
	if err != nil {
		return err
	}
	replaced, err := res.RowsAffected()
	if err != nil {
		return err
	}
	var have int64
	if err := tx.QueryRowContext(ctx, `SELECT measurements FROM run_usage WHERE run_id = ?`, runID).Scan(&have); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	have = max(have-replaced, 0)
	now := toMs(time.Now())
	seen := map[string]bool{}
	for i, m := range v.Measurements {
		if i == MaxVerdictMeasurements || have >= s.maxMeasurements {
			break
		}
		if m.Metric == "" || seen[m.Metric] || math.IsNaN(m.Value) || math.IsInf(m.Value, 0) {
			continue
		}
		seen[m.Metric] = true
		if _, err := tx.ExecContext(ctx, `
INSERT INTO measurements (run_id, node_id, sku, suite, check_name, component, metric, value, unit, time, passed)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, runID, node, sku, suite, v.Check, v.Component, m.Metric, m.Value, m.Unit, now, v.Status == curev1.VerdictStatus_PASS); err != nil {
			return err
		}
		have++
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO run_usage (run_id, measurements) VALUES (?, ?)
ON CONFLICT(run_id) DO UPDATE SET measurements = excluded.measurements`, runID, have)
	return err
}

const measurementCols = `run_id, node_id, sku, suite, check_name, component, metric, value, unit, time, passed`

func scanMeasurements(rows *sql.Rows) ([]MeasurementRecord, error) {
	defer rows.Close()
	var out []MeasurementRecord
	for rows.Next() {
		var m MeasurementRecord
		var t int64
		if err := rows.Scan(&m.RunID, &m.NodeID, &m.SKU, &m.Suite, &m.Check, &m.Component, &m.Metric, &m.Value, &m.Unit, &t, &m.Passed); err != nil {
			return nil, err
		}
		m.Time = fromMs(t)
		out = append(out, m)
	}
	return out, rows.Err()
}

// RunMeasurements returns a run's measurements by component, check and metric.
func (s *Store) RunMeasurements(ctx context.Context, runID string) ([]MeasurementRecord, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+measurementCols+` FROM measurements WHERE run_id = ? ORDER BY component, check_name, metric`, runID)
	if err != nil {
		return nil, fmt.Errorf("store: measurements of run %s: %w", runID, err)
	}
	out, err := scanMeasurements(rows)
	if err != nil {
		return nil, fmt.Errorf("store: measurements of run %s: %w", runID, err)
	}
	return out, nil
}

// FleetQuery selects the fleet of one check's metric on one SKU.
type FleetQuery struct {
	SKU, Check, Metric string
	Since              time.Time // no older than this
	// ExcludeNode leaves a node out (the one judged); Node keeps only one
	// (where it sits). IncludeFailing keeps measurements whose verdict did
	// not pass (a node's own place, not its fleet).
	ExcludeNode, Node string
	IncludeFailing    bool
	Limit             int // rows; 0: DefaultFleetLimit
}

// DefaultFleetLimit bounds one fleet query: 5,000 nodes of 16 drives each
// (2,500 at MaxNodeComponents).
const DefaultFleetLimit = 80_000

// MaxNodeComponents bounds the components one node brings to a fleet query
// (the first by name): an 8-GPU server has 28 GPU pairs, 16 drives, 10
// NICs. A node's components make one vote (package fleetband), and the
// bound keeps a node that names thousands from filling the query's limit
// and pushing other nodes out of it.
const MaxNodeComponents = 32

// FleetModes are the modes whose runs give fleet samples: the acceptance
// runs (what a SKU's admission runs and revalidates with). An audit, a
// verify or a provision measures nothing the fleet is judged against.
var FleetModes = []string{string(modes.Burnin), string(modes.Diagnostic)}

// FleetSamples returns the measurements of each node's latest qualifying
// run (an acceptance run, FleetModes, whose verdict passed unless
// IncludeFailing, within the window) of the query's SKU, check and metric,
// at most MaxNodeComponents per node, in node and component order. A node
// that ran often weighs no more than one that ran once; fleetband.Pool
// makes its components one vote.
func (s *Store) FleetSamples(ctx context.Context, q FleetQuery) ([]MeasurementRecord, error) {
	if q.SKU == "" && q.Node == "" || q.Check == "" || q.Metric == "" {
		return nil, fmt.Errorf("store: fleet samples: SKU (or node), check and metric are needed (got %q, %q, %q)", q.SKU, q.Check, q.Metric)
	}
	if q.Limit <= 0 {
		q.Limit = DefaultFleetLimit
	}
	where := []string{"m.sku = ?", "m.check_name = ?", "m.metric = ?", "m.time >= ?"}
	args := []any{q.SKU, q.Check, q.Metric, toMs(q.Since)}
	if q.SKU == "" {
		where, args = where[1:], args[1:]
	}
	where = append(where, "r.mode IN (?, ?)")
	args = append(args, FleetModes[0], FleetModes[1])
	if !q.IncludeFailing {
		where, args = append(where, "m.passed = ?"), append(args, true)
	}
	if q.ExcludeNode != "" {
		where, args = append(where, "m.node_id <> ?"), append(args, q.ExcludeNode)
	}
	if q.Node != "" {
		where, args = append(where, "m.node_id = ?"), append(args, q.Node)
	}
	// q: the qualifying rows; latest: each node's latest run among them;
	// ranked: that run's components, numbered per node.
	rows, err := s.r.QueryContext(ctx, `WITH q AS (
SELECT `+prefixed("m.", measurementCols)+` FROM measurements m JOIN runs r ON r.id = m.run_id WHERE `+strings.Join(where, " AND ")+`),
latest AS (SELECT node_id, run_id FROM (
	SELECT node_id, run_id, ROW_NUMBER() OVER (PARTITION BY node_id ORDER BY time DESC, run_id DESC) AS rn FROM q) AS l WHERE rn = 1),
ranked AS (SELECT `+prefixed("q.", measurementCols)+`, ROW_NUMBER() OVER (PARTITION BY q.node_id ORDER BY q.component) AS k
	FROM q JOIN latest ON latest.node_id = q.node_id AND latest.run_id = q.run_id)
SELECT `+measurementCols+` FROM ranked WHERE k <= ? ORDER BY node_id, component LIMIT ?`, append(args, MaxNodeComponents, q.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("store: fleet samples of %s %s %s: %w", q.SKU, q.Check, q.Metric, err)
	}
	out, err := scanMeasurements(rows)
	if err != nil {
		return nil, fmt.Errorf("store: fleet samples of %s %s %s: %w", q.SKU, q.Check, q.Metric, err)
	}
	return out, nil
}

// FleetKey names a fleet: a SKU's check's metric.
type FleetKey struct{ SKU, Check, Metric string }

// FleetKeys lists the (SKU, check, metric) with passing measurements of
// acceptance runs (FleetModes) since since, filtered by the non-empty
// arguments, in order; truncated says more than limit matched.
func (s *Store) FleetKeys(ctx context.Context, sku, check, metric string, since time.Time, limit int) ([]FleetKey, bool, error) {
	where := []string{"m.time >= ?", "m.passed = ?", "r.mode IN (?, ?)"}
	args := []any{toMs(since), true, FleetModes[0], FleetModes[1]}
	for _, c := range []struct{ col, v string }{{"m.sku", sku}, {"m.check_name", check}, {"m.metric", metric}} {
		if c.v != "" {
			where, args = append(where, c.col+" = ?"), append(args, c.v)
		}
	}
	rows, err := s.r.QueryContext(ctx, `SELECT DISTINCT m.sku, m.check_name, m.metric FROM measurements m JOIN runs r ON r.id = m.run_id WHERE `+
		strings.Join(where, " AND ")+` ORDER BY m.sku, m.check_name, m.metric LIMIT ?`, append(args, limit+1)...)
	if err != nil {
		return nil, false, fmt.Errorf("store: fleet keys: %w", err)
	}
	defer rows.Close()
	var out []FleetKey
	for rows.Next() {
		var k FleetKey
		if err := rows.Scan(&k.SKU, &k.Check, &k.Metric); err != nil {
			return nil, false, fmt.Errorf("store: fleet keys: %w", err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("store: fleet keys: %w", err)
	}
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}

// PutFleetJudgement stores a run's fleet judgement in one transaction: the
// MARGINAL verdicts (replacing the runner's PASS of the same component and
// check; their measurements stop being fleet samples) and the judgement
// itself (protojson of cure.v1.FleetJudgements), replacing an earlier one.
func (s *Store) PutFleetJudgement(ctx context.Context, runID string, marginal []Verdict, judgements []byte) error {
	_, err := s.WriteFleetJudgement(ctx, FleetWrite{RunID: runID, Verdicts: marginal, Judgements: judgements})
	return err
}

// RunFleetJudgement returns a run's stored fleet judgement (ErrNotFound:
// none was made, or only its error is on record: FleetRecordOf reads that).
func (s *Store) RunFleetJudgement(ctx context.Context, runID string) ([]byte, time.Time, error) {
	var js string
	var t int64
	err := s.r.QueryRowContext(ctx, `SELECT judgements, time FROM run_fleet WHERE run_id = ? AND pending <> ?`, runID, FleetError).Scan(&js, &t)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, time.Time{}, fmt.Errorf("store: fleet judgement of run %s: %w", runID, ErrNotFound)
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("store: fleet judgement of run %s: %w", runID, err)
	}
	return []byte(js), fromMs(t), nil
}

// PruneMeasurements deletes measurements older than t (their runs' verdicts
// and judgements stay).
func (s *Store) PruneMeasurements(ctx context.Context, olderThan time.Time) (int64, error) {
	var n int64
	err := s.tx(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM measurements WHERE time < ?`, toMs(olderThan))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: prune measurements: %w", err)
	}
	return n, nil
}
