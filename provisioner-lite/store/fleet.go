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

// latestRunsQuery selects each node's runs created last.
const latestRunsQuery = `
SELECT r.id, r.node_id, r.mode, r.status, r.phase, r.message, r.started_at, r.ended_at
FROM (SELECT node_id, MAX(created_at) AS created_at FROM runs GROUP BY node_id) latest
JOIN runs r ON r.node_id = latest.node_id AND r.created_at = latest.created_at`

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
// one query. The latest creation time per node comes from the runs_node
// index alone, and only those rows are read: a window over the whole runs
// table read and sorted every run's row (the largest part of a fleet view's
// cost, which the fleet simulator asks for every half second per run). Two
// runs of a node created in the same millisecond both match; the greater
// id is kept (the order the window had).
func (s *Store) LatestRunSummaries(ctx context.Context) (map[string]RunSummary, error) {
	rows, err := s.r.QueryContext(ctx, latestRunsQuery)
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
		if prev, ok := out[r.NodeID]; ok && prev.ID > r.ID {
			continue
		}
		out[r.NodeID] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: latest runs: %w", err)
	}
	return out, nil
}
