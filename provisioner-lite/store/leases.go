package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Leases let several coordinator instances share one database: each active
// run is leased by the instance driving it, which renews the lease on a
// heartbeat. A run whose lease expired (its instance died or lost the
// database) may be claimed by another instance, which resumes it from the
// store. Writes are fenced: UpdateRun of a run that another instance holds
// fails with ErrLeaseLost, so a stale instance cannot overwrite the state of
// the one that took over.

// DefaultLeaseTTL is how long a lease outlives its last renewal.
const DefaultLeaseTTL = 15 * time.Second

// ErrLeaseLost is wrapped by writes to a run another instance now holds.
var ErrLeaseLost = errors.New("run is leased by another coordinator instance")

// Instance is the lease owner this store writes as ("" without leases).
func (s *Store) Instance() string { return s.instance }

// Shared reports whether other coordinator instances can use this database
// (PostgreSQL). A SQLite store belongs to one instance: the state dir's lock
// keeps any other out, so its leases need no heartbeat.
func (s *Store) Shared() bool { return s.dialect.name == postgresDialect.name }

// OwnedActiveRuns lists the ids of the active runs this instance holds.
func (s *Store) OwnedActiveRuns(ctx context.Context) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id FROM runs WHERE status IN ('pending','running') AND owner = ?`, s.instance)
	if err != nil {
		return nil, fmt.Errorf("store: active runs of %s: %w", s.instance, err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("store: active runs of %s: %w", s.instance, err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// LeaseTTL is the lease duration of this store.
func (s *Store) LeaseTTL() time.Duration { return s.leaseTTL }

func (s *Store) leaseDeadline() int64 { return time.Now().Add(s.leaseTTL).UnixMilli() }

// ClaimRun takes the lease of an active run if nobody else holds it (no
// owner, this instance, or an expired lease). It reports whether it did.
func (s *Store) ClaimRun(ctx context.Context, runID string) (bool, error) {
	if s.instance == "" {
		return true, nil
	}
	var claimed bool
	err := s.tx(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE runs SET owner = ?, lease_until = ?
WHERE id = ? AND status IN ('pending','running') AND (owner = '' OR owner = ? OR lease_until < ?)`,
			s.instance, s.leaseDeadline(), runID, s.instance, time.Now().UnixMilli())
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		claimed = n == 1
		return err
	})
	if err != nil {
		return false, fmt.Errorf("store: claim run %s for %s: %w", runID, s.instance, err)
	}
	if claimed {
		s.forgetRun(runID) // another instance may have written it meanwhile
	}
	return claimed, nil
}

// RenewLeases extends the lease of every active run this instance holds and
// returns how many.
func (s *Store) RenewLeases(ctx context.Context) (int64, error) {
	if s.instance == "" {
		return 0, nil
	}
	// A renewal stuck behind a busy or locked database must come back when
	// ctx ends: the caller stops driving its runs before they could expire.
	counted := make(chan int64, 1)
	err := s.gc.doUntil(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE runs SET lease_until = ? WHERE owner = ? AND status IN ('pending','running')`,
			s.leaseDeadline(), s.instance)
		if err != nil {
			return err
		}
		k, err := res.RowsAffected()
		select { // a batch run again runs fn again: keep the last count
		case <-counted:
		default:
		}
		counted <- k
		return err
	})
	var n int64
	if err == nil {
		n = <-counted
	}
	if err != nil {
		return 0, fmt.Errorf("store: renew leases of %s: %w", s.instance, err)
	}
	return n, nil
}

// ClaimExpired claims up to limit active runs whose lease expired (or that
// have no owner) and returns them, oldest first. Concurrent claimers never
// get the same run: the claim is one conditional UPDATE per run, and only
// the instance whose UPDATE matched gets it.
func (s *Store) ClaimExpired(ctx context.Context, limit int) ([]Run, error) {
	if s.instance == "" || limit <= 0 {
		return nil, nil
	}
	now := time.Now().UnixMilli()
	cands, err := s.listRuns(ctx, `WHERE status IN ('pending','running') AND owner <> ? AND lease_until < ? ORDER BY created_at LIMIT ?`,
		s.instance, now, limit)
	if err != nil {
		return nil, err
	}
	var out []Run
	for _, r := range cands {
		var claimed bool
		err := s.tx(ctx, func(tx *Tx) error {
			res, err := tx.ExecContext(ctx, `UPDATE runs SET owner = ?, lease_until = ?
WHERE id = ? AND owner = ? AND lease_until = ? AND status IN ('pending','running')`,
				s.instance, s.leaseDeadline(), r.ID, r.Owner, toMs(r.LeaseUntil))
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			claimed = n == 1
			return err
		})
		if err != nil {
			return out, fmt.Errorf("store: claim run %s: %w", r.ID, err)
		}
		if claimed {
			s.forgetRun(r.ID)
			prev := r.Owner
			if r, err = s.GetRun(ctx, r.ID); err != nil {
				return out, err
			}
			r.PrevOwner = prev
			out = append(out, r)
		}
	}
	return out, nil
}

// ReleaseRun gives a run's lease up (at shutdown) so another instance can
// claim it at once.
func (s *Store) ReleaseRun(ctx context.Context, runID string) error {
	if s.instance == "" {
		return nil
	}
	err := s.tx(ctx, func(tx *Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE runs SET owner = '', lease_until = 0 WHERE id = ? AND owner = ?`, runID, s.instance)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: release run %s: %w", runID, err)
	}
	s.forgetRun(runID)
	return nil
}

// ActiveRunCount counts active runs, of one owner or ("" ) all.
func (s *Store) ActiveRunCount(ctx context.Context, owner string) (int, error) {
	var n int
	var err error
	if owner == "" {
		err = s.r.QueryRowContext(ctx, `SELECT count(*) FROM runs WHERE status IN ('pending','running')`).Scan(&n)
	} else {
		err = s.r.QueryRowContext(ctx, `SELECT count(*) FROM runs WHERE status IN ('pending','running') AND owner = ?`, owner).Scan(&n)
	}
	if err != nil {
		return 0, fmt.Errorf("store: count active runs: %w", err)
	}
	return n, nil
}
