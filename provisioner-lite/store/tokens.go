package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// PutBootToken records a per-boot token for a node (and the run it was minted
// for, which may be empty). Re-putting a token replaces it.
func (s *Store) PutBootToken(ctx context.Context, token, nodeID, runID string, expires time.Time) error {
	if token == "" {
		return fmt.Errorf("store: boot token for node %s: empty token", nodeID)
	}
	if expires.IsZero() {
		return fmt.Errorf("store: boot token for node %s: no expiry: every token must expire", nodeID)
	}
	err := s.tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `
INSERT INTO boot_tokens (token, node_id, run_id, expires) VALUES (?, ?, ?, ?)
ON CONFLICT(token) DO UPDATE SET node_id=excluded.node_id, run_id=excluded.run_id, expires=excluded.expires`,
			token, nodeID, runID, toMs(expires))
		return err
	})
	if err != nil {
		return fmt.Errorf("store: put boot token for node %s run %s: %w", nodeID, runID, err)
	}
	return nil
}

// LookupBootToken returns what a token was minted for. An unknown token wraps
// ErrNotFound; an expired one returns its fields and an error wrapping ErrExpired,
// so a caller that only checks err never accepts a stale token.
func (s *Store) LookupBootToken(ctx context.Context, token string) (nodeID, runID string, expires time.Time, err error) {
	var ms int64
	err = s.r.QueryRowContext(ctx, `SELECT node_id, run_id, expires FROM boot_tokens WHERE token = ?`, token).Scan(&nodeID, &runID, &ms)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", time.Time{}, fmt.Errorf("store: boot token: %w", ErrNotFound)
	}
	if err != nil {
		return "", "", time.Time{}, fmt.Errorf("store: boot token: %w", err)
	}
	expires = fromMs(ms)
	if !time.Now().Before(expires) {
		return nodeID, runID, expires, fmt.Errorf("store: boot token for node %s: expired at %s: %w", nodeID, expires.Format(time.RFC3339), ErrExpired)
	}
	return nodeID, runID, expires, nil
}

// DeleteBootToken removes a token (e.g. once used). Deleting an absent token is not an error.
func (s *Store) DeleteBootToken(ctx context.Context, token string) error {
	err := s.tx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM boot_tokens WHERE token = ?`, token)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: delete boot token: %w", err)
	}
	return nil
}

// PruneBootTokens deletes tokens that expired before t and returns how many.
func (s *Store) PruneBootTokens(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM boot_tokens WHERE expires < ?`, toMs(before))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: prune boot tokens: %w", err)
	}
	return n, nil
}

// PruneBootTokensEvery prunes, every interval until ctx ends, the tokens
// that expired more than keep ago. Keeping them a while lets a late PXE
// request be told "expired" rather than "unknown". Every node boot adds a
// token, so without this the table grows with the fleet's boot count.
func (s *Store) PruneBootTokensEvery(ctx context.Context, every, keep time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			n, err := s.PruneBootTokens(ctx, now.Add(-keep))
			switch {
			case err != nil && ctx.Err() == nil:
				log.Warn("pruning expired boot tokens", "err", err)
			case n > 0:
				log.Info("pruned expired boot tokens", "count", n)
			}
		}
	}
}
