package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
	"github.com/cure-oss/cure/provisioner-lite/runstate"
)

// Run is one execution of a mode against a node.
type Run struct {
	ID, NodeID, Manifest       string
	Mode                       modes.Mode
	Status                     curev1.RunStatus
	Phase                      modes.PhaseName // phase reached (current)
	ResumeCount, PhaseFailures int
	Disconnects, Reboots       int
	CompletedPhases            []modes.PhaseName
	StartedAt, EndedAt         time.Time
	Message                    string
	// Pipeline is the pipeline's typed status of the run.
	Pipeline PipelineState
	// Owner is the coordinator instance holding the run's lease and
	// LeaseUntil when it expires (read-only: leases.go changes them).
	Owner      string
	LeaseUntil time.Time
	// PrevOwner is set by ClaimExpired: the instance the run was taken from.
	PrevOwner string
}

// ErrActiveRun is wrapped by CreateRun when the node already has an active
// run (whichever instance started it).
var ErrActiveRun = errors.New("node already has an active run")

// CreateRun inserts a new run; r.ID must be set by the caller and r.NodeID must
// name an existing node. An empty Status means pending.
func (s *Store) CreateRun(ctx context.Context, r Run) error {
	if r.ID == "" {
		return errors.New("store: create run: empty id")
	}
	if r.Status == curev1.RunStatus_RUN_STATUS_UNSPECIFIED {
		r.Status = curev1.RunStatus_RUN_PENDING
	}
	vals, err := valuesOf(r)
	if err != nil {
		return fmt.Errorf("store: create run %s: %w", r.ID, err)
	}
	err = s.tx(ctx, func(tx *Tx) error {
		var exists int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM nodes WHERE id = ? AND removed_at = 0`, r.NodeID).Scan(&exists); err != nil {
			return err
		}
		if exists == 0 {
			return fmt.Errorf("node %q: %w", r.NodeID, ErrNotFound)
		}
		if runstate.Active(r.Status) {
			var active string
			err := tx.QueryRowContext(ctx, `SELECT id FROM runs WHERE node_id = ? AND status IN ('pending','running')`, r.NodeID).Scan(&active)
			if err == nil {
				return fmt.Errorf("run %s: %w", active, ErrActiveRun)
			} else if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		var lease int64
		if s.instance != "" {
			lease = s.leaseDeadline()
		}
		var names []string
		var args []any
		for i, c := range runColumns {
			if c.use != colLease {
				names = append(names, c.name)
				args = append(args, vals[i])
			}
		}
		names = append(names, "created_at", "owner", "lease_until")
		args = append(args, time.Now().UnixMilli(), s.instance, lease)
		_, err := tx.ExecContext(ctx, `INSERT INTO runs (`+strings.Join(names, ", ")+`) VALUES (?`+strings.Repeat(", ?", len(names)-1)+`)`, args...)
		return err
	})
	if err != nil && !errors.Is(err, ErrActiveRun) && strings.Contains(err.Error(), "runs_one_active") || err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed: runs.node_id") {
		// Another instance inserted an active run for the node between our
		// check and our insert: the schema's one-active-run index refused.
		err = fmt.Errorf("%w (concurrent start)", ErrActiveRun)
	}
	if err != nil {
		return fmt.Errorf("store: create run %s for node %s: %w", r.ID, r.NodeID, err)
	}
	r.Owner = s.instance
	s.rememberRun(r.ID, r.NodeID, r.Status, vals)
	s.notify(r.ID)
	return nil
}

// UpdateRun replaces every field of the run except ID and NodeID, which are
// fixed at creation. Only the columns that changed since this store last
// wrote the run are written (nothing at all when none did). With
// leases, a run another live instance holds is refused with ErrLeaseLost.
// Subscribers of the run are signalled.
func (s *Store) UpdateRun(ctx context.Context, r Run) error {
	vals, err := valuesOf(r)
	if err != nil {
		return fmt.Errorf("store: update run %s: %w", r.ID, err)
	}
	// Nothing changed since this store wrote the row: no transaction at all.
	if prev, ok := s.cachedRun(r.ID); ok && (r.NodeID == "" || r.NodeID == prev.nodeID) {
		if set, _ := vals.changed(prev.vals); len(set) == 0 {
			return nil
		}
	}
	// The diff is taken inside the transaction, against the row as this
	// batch wrote it or else as last committed: the cache moves only after
	// a commit, since a batch rolled back for another write runs again.
	unchanged := false
	err = s.tx(ctx, func(tx *Tx) error {
		prev, cached := tx.runRows[r.ID]
		if !cached {
			prev, cached = s.cachedRun(r.ID)
		}
		var set []string
		var args []any
		if cached {
			set, args = vals.changed(prev.vals)
		} else {
			set, args = vals.changed(nil)
		}
		if len(set) == 0 && (r.NodeID == "" || r.NodeID == prev.nodeID) {
			unchanged = true
			return nil
		}
		if len(set) == 0 {
			set = append(set, "status = status")
		}
		q := `UPDATE runs SET ` + strings.Join(set, ", ") + ` WHERE id = ?`
		args = append(args, r.ID)
		if r.NodeID != "" {
			q += ` AND node_id = ?`
			args = append(args, r.NodeID)
		}
		if s.instance != "" {
			q += ` AND (owner = '' OR owner = ? OR lease_until < ?)`
			args = append(args, s.instance, time.Now().UnixMilli())
		}
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 1 {
			if r.NodeID == "" {
				r.NodeID = prev.nodeID
			}
			if tx.runRows == nil {
				tx.runRows = map[string]cachedRow{}
			}
			tx.runRows[r.ID] = cachedRow{nodeID: r.NodeID, vals: vals}
			tx.AfterCommit(func() { s.rememberRun(r.ID, r.NodeID, r.Status, vals) })
			return nil
		}
		// Nothing matched: say why.
		var nodeID, owner string
		var lease int64
		err = tx.QueryRowContext(ctx, `SELECT node_id, owner, lease_until FROM runs WHERE id = ?`, r.ID).Scan(&nodeID, &owner, &lease)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return ErrNotFound
		case err != nil:
			return err
		case r.NodeID != "" && r.NodeID != nodeID:
			return fmt.Errorf("run belongs to node %s, update names node %s", nodeID, r.NodeID)
		default:
			return fmt.Errorf("%w: %s until %s", ErrLeaseLost, owner, fromMs(lease).Format(time.RFC3339))
		}
	})
	if err != nil {
		// The row is not what the cache says (or the batch did not commit).
		s.forgetRun(r.ID)
		return fmt.Errorf("store: update run %s: %w", r.ID, err)
	}
	if !unchanged {
		s.notify(r.ID)
	}
	return nil
}

// cachedRow is a run's row as this store last wrote it, for UpdateRun's diff.
type cachedRow struct {
	nodeID string
	vals   runValues
}

// rememberRun keeps the row as last written; a run that ended is forgotten
// (it is rarely written again, and then in full).
func (s *Store) rememberRun(id, nodeID string, status curev1.RunStatus, vals runValues) {
	s.runCacheMu.Lock()
	defer s.runCacheMu.Unlock()
	if !runstate.Active(status) {
		delete(s.runCache, id)
		return
	}
	s.runCache[id] = cachedRow{nodeID: nodeID, vals: vals}
}

func (s *Store) cachedRun(id string) (cachedRow, bool) {
	s.runCacheMu.Lock()
	defer s.runCacheMu.Unlock()
	r, ok := s.runCache[id]
	return r, ok
}

func (s *Store) forgetRun(id string) {
	s.runCacheMu.Lock()
	delete(s.runCache, id)
	s.runCacheMu.Unlock()
}

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
