package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cure-oss/cure/provisioner-lite/runstate"
)

// Run is one execution of a mode against a node.
type Run struct {
	ID, NodeID, Mode, Manifest string
	Status                     string // one of runstate.RunStatuses
	Phase                      string // phase reached (current)
	ResumeCount, PhaseFailures int
	Disconnects, Reboots       int
	CompletedPhases            []string
	StartedAt, EndedAt         time.Time
	Message                    string
	Data                       map[string]string // pipeline scratch: tokens, expected boot id...
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
	if r.Status == "" {
		r.Status = runstate.RunPending
	}
	if !runstate.ValidRun(r.Status) {
		return fmt.Errorf("store: create run %s: status %q is not one of pending|running|succeeded|failed|attention|canceled", r.ID, r.Status)
	}
	completed, data, err := marshalRun(r)
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
		if r.Status == runstate.RunPending || r.Status == runstate.RunRunning {
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
		_, err := tx.ExecContext(ctx, `
INSERT INTO runs (id, node_id, mode, manifest, status, phase, resume_count, phase_failures, disconnects, reboots,
	completed_phases, started_at, ended_at, message, data, created_at, owner, lease_until)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			r.ID, r.NodeID, r.Mode, r.Manifest, r.Status, r.Phase, r.ResumeCount, r.PhaseFailures, r.Disconnects, r.Reboots,
			completed, toMs(r.StartedAt), toMs(r.EndedAt), r.Message, data, time.Now().UnixMilli(), s.instance, lease)
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
	s.rememberRun(r)
	s.notify(r.ID)
	return nil
}

// UpdateRun replaces every field of the run except ID and NodeID, which are
// fixed at creation. Only the columns that changed since this store last
// wrote the run are written (nothing at all when none did). With
// leases, a run another live instance holds is refused with ErrLeaseLost.
// Subscribers of the run are signalled.
func (s *Store) UpdateRun(ctx context.Context, r Run) error {
	if !runstate.ValidRun(r.Status) {
		return fmt.Errorf("store: update run %s: status %q is not one of pending|running|succeeded|failed|attention|canceled", r.ID, r.Status)
	}
	completed, data, err := marshalRun(r)
	if err != nil {
		return fmt.Errorf("store: update run %s: %w", r.ID, err)
	}
	cols := []struct {
		name string
		val  any
	}{
		{"mode", r.Mode}, {"manifest", r.Manifest}, {"status", r.Status}, {"phase", r.Phase},
		{"resume_count", r.ResumeCount}, {"phase_failures", r.PhaseFailures}, {"disconnects", r.Disconnects}, {"reboots", r.Reboots},
		{"completed_phases", completed}, {"started_at", toMs(r.StartedAt)}, {"ended_at", toMs(r.EndedAt)}, {"message", r.Message}, {"data", data},
	}
	// Nothing changed since this store wrote the row: no transaction at all.
	if prev, ok := s.cachedRun(r.ID); ok && (r.NodeID == "" || r.NodeID == prev.NodeID) && sameRun(prev, r) {
		return nil
	}
	// The diff is taken inside the transaction: writes run there in commit
	// order, so the cache is exactly the row as committed before this one.
	unchanged := false
	err = s.tx(ctx, func(tx *Tx) error {
		var set []string
		var args []any
		prev, cached := s.cachedRun(r.ID)
		var prevCompleted, prevData string
		if cached {
			prevCompleted, prevData, _ = marshalRun(prev)
		}
		for i, c := range cols {
			if cached {
				same := false
				switch i {
				case 0:
					same = prev.Mode == r.Mode
				case 1:
					same = prev.Manifest == r.Manifest
				case 2:
					same = prev.Status == r.Status
				case 3:
					same = prev.Phase == r.Phase
				case 4:
					same = prev.ResumeCount == r.ResumeCount
				case 5:
					same = prev.PhaseFailures == r.PhaseFailures
				case 6:
					same = prev.Disconnects == r.Disconnects
				case 7:
					same = prev.Reboots == r.Reboots
				case 8:
					same = prevCompleted == completed
				case 9:
					same = toMs(prev.StartedAt) == toMs(r.StartedAt)
				case 10:
					same = toMs(prev.EndedAt) == toMs(r.EndedAt)
				case 11:
					same = prev.Message == r.Message
				case 12:
					same = prevData == data
				}
				if same {
					continue
				}
			}
			set = append(set, c.name+" = ?")
			args = append(args, c.val)
		}
		if len(set) == 0 && (r.NodeID == "" || r.NodeID == prev.NodeID) {
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
				r.NodeID = prev.NodeID
			}
			s.rememberRun(r)
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

// sameRun reports whether b would write nothing over a.
func sameRun(a, b Run) bool {
	ac, ad, err1 := marshalRun(a)
	bc, bd, err2 := marshalRun(b)
	return err1 == nil && err2 == nil && ac == bc && ad == bd && a.Mode == b.Mode && a.Manifest == b.Manifest && a.Status == b.Status &&
		a.Phase == b.Phase && a.ResumeCount == b.ResumeCount && a.PhaseFailures == b.PhaseFailures && a.Disconnects == b.Disconnects &&
		a.Reboots == b.Reboots && toMs(a.StartedAt) == toMs(b.StartedAt) && toMs(a.EndedAt) == toMs(b.EndedAt) && a.Message == b.Message
}

// rememberRun keeps the row as last written, for UpdateRun's diff; a run
// that ended is forgotten (it is rarely written again, and then in full).
func (s *Store) rememberRun(r Run) {
	s.runCacheMu.Lock()
	defer s.runCacheMu.Unlock()
	if r.Status != runstate.RunPending && r.Status != runstate.RunRunning {
		delete(s.runCache, r.ID)
		return
	}
	r.CompletedPhases = append([]string(nil), r.CompletedPhases...)
	m := make(map[string]string, len(r.Data))
	for k, v := range r.Data {
		m[k] = v
	}
	r.Data = m
	s.runCache[r.ID] = r
}

func (s *Store) cachedRun(id string) (Run, bool) {
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

const runCols = `id, node_id, mode, manifest, status, phase, resume_count, phase_failures, disconnects, reboots,
	completed_phases, started_at, ended_at, message, data, owner, lease_until`

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

func marshalRun(r Run) (completed, data string, err error) {
	c := r.CompletedPhases
	if c == nil {
		c = []string{}
	}
	b, err := json.Marshal(c)
	if err != nil {
		return "", "", fmt.Errorf("completed phases: %w", err)
	}
	data, err = marshalMap(r.Data)
	if err != nil {
		return "", "", fmt.Errorf("data: %w", err)
	}
	return string(b), data, nil
}

func scanRun(sc scanner) (Run, error) {
	var r Run
	var completed, data string
	var started, ended, lease int64
	err := sc.Scan(&r.ID, &r.NodeID, &r.Mode, &r.Manifest, &r.Status, &r.Phase, &r.ResumeCount, &r.PhaseFailures,
		&r.Disconnects, &r.Reboots, &completed, &started, &ended, &r.Message, &data, &r.Owner, &lease)
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, ErrNotFound
	}
	if err != nil {
		return Run{}, err
	}
	if err := json.Unmarshal([]byte(completed), &r.CompletedPhases); err != nil {
		return Run{}, fmt.Errorf("run %s: completed_phases column: %w", r.ID, err)
	}
	if len(r.CompletedPhases) == 0 {
		r.CompletedPhases = nil
	}
	if r.Data, err = unmarshalMap(data); err != nil {
		return Run{}, fmt.Errorf("run %s: data column: %w", r.ID, err)
	}
	r.StartedAt, r.EndedAt, r.LeaseUntil = fromMs(started), fromMs(ended), fromMs(lease)
	return r, nil
}
