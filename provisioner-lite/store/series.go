package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cure-oss/cure/tools/telemetry"

	"github.com/cure-oss/cure/provisioner-lite/natural"
)

// Series is one sampled series of a run: the readings of one metric of one
// component from one source (the BMC's sensors, the host's telemetry), in
// time order. The store knows no metric: any source may add series.
type Series struct {
	RunID     string
	Source    string // bmc, host, gpu
	Component string // bmc/CPU1Temp, gpu/0, cpu/3
	Metric    string // temp_c, power_w, fan_rpm, clock_mhz
	Unit      string // C, W, RPM, MHz
	Times     []int64
	Values    []float64 // same length as Times
	// Thinned counts the points merged away to keep the series within
	// MaxSeriesPoints.
	Thinned int
}

// Bounds on the series of one run: a 72-hour burn-in sampled every 30
// seconds is 8,640 points a series, and a node has hundreds of sensors.
const (
	MaxSeriesPerRun = 512
	// MaxSeriesPoints is the points a series keeps; when an append goes
	// beyond it the series is thinned (ThinPoints) to at most half of it, so
	// a long soak keeps its whole span at a coarser step.
	MaxSeriesPoints = 1024
	// Name bounds: longer names are refused (the caller cleans and bounds).
	maxSeriesName = 160
)

// MaxRunnerSeriesPerRun is the share of MaxSeriesPerRun the runner's
// series (sources host and gpu) may take, so the BMC's always have room.
const MaxRunnerSeriesPerRun = 384

// SeriesAppend is what AppendSeries did.
type SeriesAppend struct {
	Points    int // points stored
	Refused   int // series not created: the run (or the sources' budget) is full
	Invalid   int // points not stored: not a finite number
	Duplicate int // points not stored: the series has a point at that time (a replayed batch)
}

// SeriesBudget caps the series some sources may create in one run, within
// MaxSeriesPerRun.
type SeriesBudget struct {
	Sources []string
	Max     int
}

type seriesPoints struct {
	T []int64   `json:"t"`
	V []float64 `json:"v"`
}

// AppendSeries adds points to a run's series, creating each (by source,
// component and metric) on its first points while the run has fewer than
// MaxSeriesPerRun; a series' unit is the one it was created with. Points
// out of time order are merged into place; a point at a time the series
// already has is a replay and not stored again. A series over
// MaxSeriesPoints is thinned.
func (s *Store) AppendSeries(ctx context.Context, runID string, batch []Series) (SeriesAppend, error) {
	return s.AppendSeriesWithin(ctx, runID, batch, SeriesBudget{})
}

// AppendSeriesWithin is AppendSeries where the series of budget's sources
// also stay within budget.Max (zero: no budget beyond the run's).
func (s *Store) AppendSeriesWithin(ctx context.Context, runID string, batch []Series, budget SeriesBudget) (SeriesAppend, error) {
	var res SeriesAppend
	inBudget := func(source string) bool { return budget.Max > 0 && slices.Contains(budget.Sources, source) }
	for _, in := range batch {
		if err := checkSeries(in); err != nil {
			return res, fmt.Errorf("store: series of run %s: %w", runID, err)
		}
		if budget.Max > 0 && !inBudget(in.Source) {
			return res, fmt.Errorf("store: series of run %s: source %q is not among the budget's %v", runID, in.Source, budget.Sources)
		}
	}
	err := s.tx(ctx, func(tx *Tx) error {
		res = SeriesAppend{}
		var count, budgeted int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM series WHERE run_id = ?`, runID).Scan(&count); err != nil {
			return err
		}
		if budget.Max > 0 {
			q := `SELECT count(*) FROM series WHERE run_id = ? AND source IN (?` + strings.Repeat(", ?", len(budget.Sources)-1) + `)`
			args := []any{runID}
			for _, src := range budget.Sources {
				args = append(args, src)
			}
			if err := tx.QueryRowContext(ctx, q, args...).Scan(&budgeted); err != nil {
				return err
			}
		}
		for _, in := range batch {
			var js string
			var thinned int
			err := tx.QueryRowContext(ctx, `SELECT points, thinned FROM series WHERE run_id = ? AND source = ? AND component = ? AND metric = ?`,
				runID, in.Source, in.Component, in.Metric).Scan(&js, &thinned)
			var pts seriesPoints
			switch {
			case errors.Is(err, sql.ErrNoRows):
				if count >= MaxSeriesPerRun || (budget.Max > 0 && budgeted >= budget.Max) {
					res.Refused++
					continue
				}
				count++
				budgeted++
			case err != nil:
				return err
			default:
				if err := json.Unmarshal([]byte(js), &pts); err != nil || len(pts.T) != len(pts.V) {
					return fmt.Errorf("series %s %s %s: stored points unreadable: %v", in.Source, in.Component, in.Metric, err)
				}
			}
			have := make(map[int64]bool, len(pts.T))
			for _, t := range pts.T {
				have[t] = true
			}
			for i, v := range in.Values {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					res.Invalid++
					continue
				}
				if have[in.Times[i]] {
					res.Duplicate++
					continue
				}
				have[in.Times[i]] = true
				pts.T, pts.V = append(pts.T, in.Times[i]), append(pts.V, v)
				res.Points++
			}
			pts.T, pts.V = sortPoints(pts.T, pts.V)
			var dropped int
			pts.T, pts.V, dropped = ThinPoints(pts.T, pts.V, MaxSeriesPoints)
			b, err := json.Marshal(pts)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO series (run_id, source, component, metric, unit, points, thinned) VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id, source, component, metric) DO UPDATE SET points = excluded.points, thinned = excluded.thinned`,
				runID, in.Source, in.Component, in.Metric, in.Unit, string(b), thinned+dropped); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return SeriesAppend{}, fmt.Errorf("store: append series of run %s: %w", runID, err)
	}
	if res.Points > 0 {
		s.notify(runID)
	}
	return res, nil
}

func checkSeries(in Series) error {
	for _, f := range []struct{ name, v string }{{"source", in.Source}, {"component", in.Component}, {"metric", in.Metric}, {"unit", in.Unit}} {
		if f.name != "unit" && f.v == "" {
			return fmt.Errorf("series %s/%s/%s: %s is empty", in.Source, in.Component, in.Metric, f.name)
		}
		if len(f.v) > maxSeriesName {
			return fmt.Errorf("series %s/%s: %s of %d bytes (limit %d)", in.Source, in.Metric, f.name, len(f.v), maxSeriesName)
		}
	}
	if len(in.Times) != len(in.Values) {
		return fmt.Errorf("series %s %s %s: %d times for %d values", in.Source, in.Component, in.Metric, len(in.Times), len(in.Values))
	}
	return nil
}

// sortPoints orders points by time, keeping the order of equal times.
func sortPoints(t []int64, v []float64) ([]int64, []float64) {
	if slices.IsSorted(t) {
		return t, v
	}
	idx := make([]int, len(t))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return t[idx[a]] < t[idx[b]] })
	nt, nv := make([]int64, len(t)), make([]float64, len(v))
	for i, j := range idx {
		nt[i], nv[i] = t[j], v[j]
	}
	return nt, nv
}

// ThinPoints thins a stored series the way the runner thins what it sends
// (telemetry.Thin: each run of four points keeps its lowest and highest, so
// a temperature peak or a stopped fan survives). It returns the points kept
// and how many were dropped.
func ThinPoints(t []int64, v []float64, max int) ([]int64, []float64, int) {
	return telemetry.Thin(t, v, max)
}

// RunSeries returns a run's series of source (every source when empty),
// by source, component (natural order) and metric.
func (s *Store) RunSeries(ctx context.Context, runID, source string) ([]Series, error) {
	q := `SELECT source, component, metric, unit, points, thinned FROM series WHERE run_id = ?`
	args := []any{runID}
	if source != "" {
		q += ` AND source = ?`
		args = append(args, source)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("store: series of run %s: %w", runID, err)
	}
	defer rows.Close()
	var out []Series
	for rows.Next() {
		sr := Series{RunID: runID}
		var js string
		if err := rows.Scan(&sr.Source, &sr.Component, &sr.Metric, &sr.Unit, &js, &sr.Thinned); err != nil {
			return nil, fmt.Errorf("store: series of run %s: %w", runID, err)
		}
		var pts seriesPoints
		if err := json.Unmarshal([]byte(js), &pts); err != nil || len(pts.T) != len(pts.V) {
			return nil, fmt.Errorf("store: series %s %s %s of run %s: stored points unreadable: %v", sr.Source, sr.Component, sr.Metric, runID, err)
		}
		sr.Times, sr.Values = pts.T, pts.V
		out = append(out, sr)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: series of run %s: %w", runID, err)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Source != b.Source {
			return a.Source < b.Source
		}
		if c := natural.Compare(a.Component, b.Component); c != 0 {
			return c < 0
		}
		return a.Metric < b.Metric
	})
	return out, nil
}

// PutBMCEvidence stores what was read from a run's BMC at the end of its
// validate phase (protojson of cure.v1.BmcEvidence: the store keeps the
// bytes), replacing an earlier reading of the same run.
func (s *Store) PutBMCEvidence(ctx context.Context, runID string, at time.Time, doc []byte) error {
	err := s.tx(ctx, func(tx *Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO run_bmc_evidence (run_id, time, evidence) VALUES (?, ?, ?)
ON CONFLICT (run_id) DO UPDATE SET time = excluded.time, evidence = excluded.evidence`, runID, toMs(at), string(doc))
		return err
	})
	if err != nil {
		return fmt.Errorf("store: BMC evidence of run %s: %w", runID, err)
	}
	s.notify(runID)
	return nil
}

// BMCEvidence is the BMC evidence stored for a run (ErrNotFound: none).
func (s *Store) BMCEvidence(ctx context.Context, runID string) (at time.Time, doc []byte, err error) {
	var js string
	var ms int64
	err = s.r.QueryRowContext(ctx, `SELECT time, evidence FROM run_bmc_evidence WHERE run_id = ?`, runID).Scan(&ms, &js)
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, nil, fmt.Errorf("store: BMC evidence of run %s: %w", runID, ErrNotFound)
	}
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("store: BMC evidence of run %s: %w", runID, err)
	}
	return fromMs(ms), []byte(js), nil
}
