package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// InventoryRecord is the hardware inventory one boot of a node reported in
// its Hello, as the server cleaned and bounded it. The store keeps the
// bytes it is given (protojson of cure.v1.Inventory) and knows nothing of
// their schema: fields added to the contract later are kept as they come.
type InventoryRecord struct {
	ID                    int64
	NodeID, RunID, BootID string
	Time                  time.Time
	Peer                  string // the runner session's address
	JSON                  []byte
	Truncated             bool // the server cut strings or lists to its bounds
}

// PutInventory stores one boot's inventory. A boot's first Hello is kept:
// a reconnect of the same boot (same run and boot id) changes nothing and
// reports stored=false.
func (s *Store) PutInventory(ctx context.Context, r InventoryRecord) (stored bool, err error) {
	if r.NodeID == "" || r.RunID == "" || r.BootID == "" {
		return false, fmt.Errorf("store: inventory: node %q, run %q and boot id %q must all be set", r.NodeID, r.RunID, r.BootID)
	}
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	err = s.tx(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO inventories (node_id, run_id, boot_id, time, peer, inventory, truncated)
VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id, boot_id) DO NOTHING`,
			r.NodeID, r.RunID, r.BootID, toMs(r.Time), r.Peer, string(r.JSON), r.Truncated)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		stored = n > 0
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("store: inventory of node %s run %s boot %s: %w", r.NodeID, r.RunID, r.BootID, err)
	}
	return stored, nil
}

// HasInventory reports whether a boot of a run has its inventory stored
// (a reconnect then has nothing to add).
func (s *Store) HasInventory(ctx context.Context, runID, bootID string) (bool, error) {
	var one int
	err := s.r.QueryRowContext(ctx, `SELECT 1 FROM inventories WHERE run_id = ? AND boot_id = ?`, runID, bootID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: inventory of run %s boot %q: %w", runID, bootID, err)
	}
	return true, nil
}

const inventoryCols = `id, node_id, run_id, boot_id, time, peer, inventory, truncated`

func scanInventory(row *sql.Row) (InventoryRecord, error) {
	var r InventoryRecord
	var ms int64
	var js string
	if err := row.Scan(&r.ID, &r.NodeID, &r.RunID, &r.BootID, &ms, &r.Peer, &js, &r.Truncated); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return InventoryRecord{}, ErrNotFound
		}
		return InventoryRecord{}, err
	}
	r.Time, r.JSON = fromMs(ms), []byte(js)
	return r, nil
}

// LatestInventory is the newest inventory a node reported (removed nodes
// included: their history stays).
func (s *Store) LatestInventory(ctx context.Context, nodeID string) (InventoryRecord, error) {
	r, err := scanInventory(s.r.QueryRowContext(ctx, `SELECT `+inventoryCols+` FROM inventories WHERE node_id = ? ORDER BY id DESC LIMIT 1`, nodeID))
	if err != nil {
		return InventoryRecord{}, fmt.Errorf("store: latest inventory of node %s: %w", nodeID, err)
	}
	return r, nil
}

// RunInventory is the newest inventory reported during a run.
func (s *Store) RunInventory(ctx context.Context, runID string) (InventoryRecord, error) {
	r, err := scanInventory(s.r.QueryRowContext(ctx, `SELECT `+inventoryCols+` FROM inventories WHERE run_id = ? ORDER BY id DESC LIMIT 1`, runID))
	if err != nil {
		return InventoryRecord{}, fmt.Errorf("store: inventory of run %s: %w", runID, err)
	}
	return r, nil
}

// InventoryBefore is the node's newest inventory stored before t: what a
// run that never reached CURE shows (the node as last seen).
func (s *Store) InventoryBefore(ctx context.Context, nodeID string, t time.Time) (InventoryRecord, error) {
	r, err := scanInventory(s.r.QueryRowContext(ctx, `SELECT `+inventoryCols+` FROM inventories WHERE node_id = ? AND time <= ? ORDER BY id DESC LIMIT 1`, nodeID, toMs(t)))
	if err != nil {
		return InventoryRecord{}, fmt.Errorf("store: inventory of node %s before %s: %w", nodeID, t.UTC().Format(time.RFC3339), err)
	}
	return r, nil
}

// PruneInventories keeps, of every run that ended before endedBefore, only
// its newest inventory (the one its report shows); the other boots' go.
func (s *Store) PruneInventories(ctx context.Context, endedBefore time.Time) (int64, error) {
	var n int64
	err := s.tx(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM inventories WHERE run_id IN (
	SELECT id FROM runs WHERE status NOT IN ('pending','running') AND ended_at > 0 AND ended_at < ?)
AND id NOT IN (SELECT max(id) FROM inventories GROUP BY run_id)`, toMs(endedBefore))
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: prune inventories: %w", err)
	}
	return n, nil
}
