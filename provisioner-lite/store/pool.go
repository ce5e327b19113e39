package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"
)

// NodePool is a node's place in the day-2 loop as stored. The states and
// which moves are allowed are provisioner-lite/pool's; the store keeps each
// move atomic (SetNodePool compares the state it replaces).
type NodePool struct {
	NodeID string
	// State is "" for a node not in the pool (no row).
	State      string
	Since      time.Time
	Reason     string
	Actor      string
	RunID      string // the revalidation run
	AutoReturn bool
}

// PoolConflict is a pool move refused because the node's state is not one
// the move starts from: another caller moved it first, or the caller asked
// for a move its state does not allow.
type PoolConflict struct {
	NodeID, State string
	Want          []string
}

func (c *PoolConflict) Error() string {
	state := c.State
	if state == "" {
		state = "not in the pool"
	}
	return fmt.Sprintf("node %s is %s, not %v", c.NodeID, state, c.Want)
}

const nodePoolCols = `node_id, state, since, reason, actor, run_id, auto_return`

func scanNodePool(sc interface{ Scan(...any) error }) (NodePool, error) {
	var p NodePool
	var since int64
	if err := sc.Scan(&p.NodeID, &p.State, &since, &p.Reason, &p.Actor, &p.RunID, &p.AutoReturn); err != nil {
		return NodePool{}, err
	}
	p.Since = fromMs(since)
	return p, nil
}

// NodePool is the pool state of a node; a node not in the pool (or an
// unknown one) reads as State "".
func (s *Store) NodePool(ctx context.Context, nodeID string) (NodePool, error) {
	p, err := scanNodePool(s.r.QueryRowContext(ctx, `SELECT `+nodePoolCols+` FROM node_pool WHERE node_id = ?`, nodeID))
	if errors.Is(err, sql.ErrNoRows) {
		return NodePool{NodeID: nodeID}, nil
	}
	if err != nil {
		return NodePool{}, fmt.Errorf("store: pool state of node %s: %w", nodeID, err)
	}
	return p, nil
}

// NodePools is the pool state of every node in the pool (removed nodes
// left out), by node id.
func (s *Store) NodePools(ctx context.Context) (map[string]NodePool, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT p.node_id, p.state, p.since, p.reason, p.actor, p.run_id, p.auto_return
FROM node_pool p JOIN nodes n ON n.id = p.node_id WHERE n.removed_at = 0`)
	if err != nil {
		return nil, fmt.Errorf("store: pool states: %w", err)
	}
	defer rows.Close()
	out := map[string]NodePool{}
	for rows.Next() {
		p, err := scanNodePool(rows)
		if err != nil {
			return nil, fmt.Errorf("store: pool states: %w", err)
		}
		out[p.NodeID] = p
	}
	return out, rows.Err()
}

// PoolCounts is the number of nodes (removed ones left out) per pool state.
func (s *Store) PoolCounts(ctx context.Context) (map[string]int, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT p.state, count(*) FROM node_pool p JOIN nodes n ON n.id = p.node_id WHERE n.removed_at = 0 GROUP BY p.state`)
	if err != nil {
		return nil, fmt.Errorf("store: pool counts: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var state string
		var n int
		if err := rows.Scan(&state, &n); err != nil {
			return nil, fmt.Errorf("store: pool counts: %w", err)
		}
		out[state] = n
	}
	return out, rows.Err()
}

// SetNodePool moves a node to p.State (State "" takes it out of the pool)
// if its current state is one of from ("" for not in the pool); with no
// from the move is unconditional. It returns the state replaced; a node
// in another state is a *PoolConflict and nothing is written.
func (s *Store) SetNodePool(ctx context.Context, p NodePool, from ...string) (NodePool, error) {
	if p.Since.IsZero() {
		p.Since = time.Now()
	}
	var prev NodePool
	err := s.tx(ctx, func(tx *Tx) error {
		var removedAt int64
		if err := tx.QueryRowContext(ctx, `SELECT removed_at FROM nodes WHERE id = ?`, p.NodeID).Scan(&removedAt); errors.Is(err, sql.ErrNoRows) || err == nil && removedAt != 0 {
			return ErrNotFound
		} else if err != nil {
			return err
		}
		cur, err := scanNodePool(tx.QueryRowContext(ctx, `SELECT `+nodePoolCols+` FROM node_pool WHERE node_id = ?`, p.NodeID))
		if errors.Is(err, sql.ErrNoRows) {
			cur, err = NodePool{NodeID: p.NodeID}, nil
		}
		if err != nil {
			return err
		}
		if len(from) > 0 && !slices.Contains(from, cur.State) {
			return &PoolConflict{NodeID: p.NodeID, State: cur.State, Want: from}
		}
		prev = cur
		if p.State == "" {
			_, err := tx.ExecContext(ctx, `DELETE FROM node_pool WHERE node_id = ?`, p.NodeID)
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO node_pool (`+nodePoolCols+`) VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (node_id) DO UPDATE SET state = excluded.state, since = excluded.since, reason = excluded.reason,
	actor = excluded.actor, run_id = excluded.run_id, auto_return = excluded.auto_return`,
			p.NodeID, p.State, toMs(p.Since), p.Reason, p.Actor, p.RunID, p.AutoReturn)
		return err
	})
	if err != nil {
		return NodePool{}, fmt.Errorf("store: pool state of node %s: %w", p.NodeID, err)
	}
	return prev, nil
}

// SetNodePoolRun records the run a node in state runs for, if the node is
// still in that state with no run recorded; it reports whether it did.
func (s *Store) SetNodePoolRun(ctx context.Context, nodeID, state, runID string) (bool, error) {
	var set bool
	err := s.tx(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE node_pool SET run_id = ? WHERE node_id = ? AND state = ? AND run_id = ''`, runID, nodeID, state)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		set = n > 0
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("store: pool run of node %s: %w", nodeID, err)
	}
	return set, nil
}

// InstalledOS is the OS a provision installed on a node and that called
// back: the hash of the callback token it holds (never the token).
type InstalledOS struct {
	NodeID, TokenHash, RunID string
	InstalledAt              time.Time
}

// SetInstalledOS records the OS a provision installed, replacing any
// earlier one.
func (s *Store) SetInstalledOS(ctx context.Context, o InstalledOS) error {
	if o.NodeID == "" || o.TokenHash == "" || o.RunID == "" {
		return fmt.Errorf("store: installed OS: node %q, token hash and run %q must all be set", o.NodeID, o.RunID)
	}
	if o.InstalledAt.IsZero() {
		o.InstalledAt = time.Now()
	}
	err := s.tx(ctx, func(tx *Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO node_os (node_id, token_sha256, run_id, installed_at) VALUES (?, ?, ?, ?)
ON CONFLICT (node_id) DO UPDATE SET token_sha256 = excluded.token_sha256, run_id = excluded.run_id, installed_at = excluded.installed_at`,
			o.NodeID, o.TokenHash, o.RunID, toMs(o.InstalledAt))
		return err
	})
	if err != nil {
		return fmt.Errorf("store: installed OS of node %s: %w", o.NodeID, err)
	}
	return nil
}

// InstalledOS is the OS on record for a node; ErrNotFound when none (never
// provisioned by CURE, or its disk was written or erased since).
func (s *Store) InstalledOS(ctx context.Context, nodeID string) (InstalledOS, error) {
	o := InstalledOS{NodeID: nodeID}
	var at int64
	err := s.r.QueryRowContext(ctx, `SELECT token_sha256, run_id, installed_at FROM node_os WHERE node_id = ?`, nodeID).Scan(&o.TokenHash, &o.RunID, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return InstalledOS{}, fmt.Errorf("node %s: no installed OS on record: %w", nodeID, ErrNotFound)
	}
	if err != nil {
		return InstalledOS{}, fmt.Errorf("store: installed OS of node %s: %w", nodeID, err)
	}
	o.InstalledAt = fromMs(at)
	return o, nil
}

// ForgetInstalledOS drops a node's installed OS: its disk is about to be
// written or erased.
func (s *Store) ForgetInstalledOS(ctx context.Context, nodeID string) error {
	err := s.tx(ctx, func(tx *Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM node_os WHERE node_id = ?`, nodeID)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: installed OS of node %s: %w", nodeID, err)
	}
	return nil
}
