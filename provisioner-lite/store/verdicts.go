package store

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"time"
)

// Verdict is the latest outcome of one check on one component within a run.
type Verdict struct {
	RunID, Component, Check, Status, Observed, Expected, Message string
	Time                                                         time.Time
}

// PutVerdict inserts or replaces the (RunID, Component, Check) verdict.
func (s *Store) PutVerdict(ctx context.Context, v Verdict) error {
	if v.Component == "" || v.Check == "" {
		return fmt.Errorf("store: verdict of run %s: component %q and check %q must both be set", v.RunID, v.Component, v.Check)
	}
	err := s.tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `
INSERT INTO verdicts (run_id, component, check_name, status, observed, expected, message, time)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT(run_id, component, check_name) DO UPDATE SET status=excluded.status, observed=excluded.observed,
	expected=excluded.expected, message=excluded.message, time=excluded.time`,
			v.RunID, v.Component, v.Check, v.Status, v.Observed, v.Expected, v.Message, toMs(v.Time))
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
SELECT run_id, component, check_name, status, observed, expected, message, time FROM verdicts WHERE run_id = ?`, runID)
	if err != nil {
		return nil, fmt.Errorf("store: verdicts of run %s: %w", runID, err)
	}
	defer rows.Close()
	var out []Verdict
	for rows.Next() {
		var v Verdict
		var t int64
		if err := rows.Scan(&v.RunID, &v.Component, &v.Check, &v.Status, &v.Observed, &v.Expected, &v.Message, &t); err != nil {
			return nil, fmt.Errorf("store: verdicts of run %s: %w", runID, err)
		}
		v.Time = fromMs(t)
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: verdicts of run %s: %w", runID, err)
	}
	sort.Slice(out, func(i, j int) bool {
		if c := NaturalCompare(out[i].Component, out[j].Component); c != 0 {
			return c < 0
		}
		return NaturalCompare(out[i].Check, out[j].Check) < 0
	})
	return out, nil
}

// NaturalCompare orders strings so that runs of digits compare by value:
// "gpu/2" < "gpu/10", "nvme0n1" < "nvme10n1". It returns -1, 0 or +1.
func NaturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := isDigit(a[0]), isDigit(b[0])
		switch {
		case da && db:
			na, ra := leadingDigits(a)
			nb, rb := leadingDigits(b)
			// Compare by value without overflow: strip leading zeros, longer is larger.
			ta, tb := trimZeros(na), trimZeros(nb)
			if len(ta) != len(tb) {
				return cmp(len(ta), len(tb))
			}
			if ta != tb {
				return strCmp(ta, tb)
			}
			if len(na) != len(nb) { // equal value: fewer leading zeros first, for a total order
				return cmp(len(na), len(nb))
			}
			a, b = ra, rb
		case a[0] != b[0]:
			return cmp(int(a[0]), int(b[0]))
		default:
			a, b = a[1:], b[1:]
		}
	}
	return cmp(len(a), len(b))
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func leadingDigits(s string) (digits, rest string) {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return s[:i], s[i:]
}

func trimZeros(s string) string {
	for len(s) > 1 && s[0] == '0' {
		s = s[1:]
	}
	return s
}

func cmp(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func strCmp(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
