package store

import (
	"context"
	"fmt"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"github.com/cure-oss/cure/modes"
)

// NodeSummary is what selecting nodes by label needs: no secrets, no MACs,
// one query for the whole inventory.
type NodeSummary struct {
	ID, SKU string
	Labels  map[string]string
}

// NodeSummaries returns every node's id, SKU and labels, ordered by id.
func (s *Store) NodeSummaries(ctx context.Context) ([]NodeSummary, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, sku, labels FROM nodes WHERE removed_at = 0 ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("store: node summaries: %w", err)
	}
	defer rows.Close()
	var out []NodeSummary
	for rows.Next() {
		var n NodeSummary
		var labels string
		if err := rows.Scan(&n.ID, &n.SKU, &labels); err != nil {
			return nil, fmt.Errorf("store: node summaries: %w", err)
		}
		if n.Labels, err = unmarshalMap(labels); err != nil {
			return nil, fmt.Errorf("store: node %s: labels column: %w", n.ID, err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: node summaries: %w", err)
	}
	return out, nil
}

// RunSummary is a run without its scratch data: what a fleet view lists.
type RunSummary struct {
	ID, NodeID         string
	Mode               modes.Mode
	Phase              modes.PhaseName
	Message            string
	Status             curev1.RunStatus
	StartedAt, EndedAt time.Time
}

// LatestRunSummaries returns the latest run of every node that has one, in
// one query (a window function, which SQLite and PostgreSQL both have).
func (s *Store) LatestRunSummaries(ctx context.Context) (map[string]RunSummary, error) {
	rows, err := s.r.QueryContext(ctx, `
SELECT id, node_id, mode, status, phase, message, started_at, ended_at FROM (
	SELECT id, node_id, mode, status, phase, message, started_at, ended_at,
		row_number() OVER (PARTITION BY node_id ORDER BY created_at DESC, id DESC) AS rn
	FROM runs) latest
WHERE rn = 1`)
	if err != nil {
		return nil, fmt.Errorf("store: latest runs: %w", err)
	}
	defer rows.Close()
	out := map[string]RunSummary{}
	for rows.Next() {
		var r RunSummary
		var st, en int64
		if err := rows.Scan(&r.ID, &r.NodeID, &r.Mode, runStatusCol(&r.Status), &r.Phase, &r.Message, &st, &en); err != nil {
			return nil, fmt.Errorf("store: latest runs: %w", err)
		}
		r.StartedAt, r.EndedAt = fromMs(st), fromMs(en)
		out[r.NodeID] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: latest runs: %w", err)
	}
	return out, nil
}
