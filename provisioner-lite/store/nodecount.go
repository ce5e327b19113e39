package store

import (
	"context"
	"fmt"
)

// NodeCount is the number of nodes in the inventory (removed ones left
// out): the fleet size the coordinator's memory limit is planned from.
func (s *Store) NodeCount(ctx context.Context) (int, error) {
	var n int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM nodes WHERE removed_at = 0`).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count nodes: %w", err)
	}
	return n, nil
}
