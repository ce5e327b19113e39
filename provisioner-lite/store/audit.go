package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// AuditKind is the kind of an audit entry (the audit_log's kind column).
type AuditKind string

// Audit entry kinds.
const (
	AuditOperator AuditKind = "operator" // an operator API call, allowed or refused
	AuditSecurity AuditKind = "security" // something a hostile peer may have tried
)

// AuditEntry is one row of the audit log: who did what to which nodes, when.
type AuditEntry struct {
	ID     int64
	Time   time.Time
	Kind   AuditKind
	Actor  string // operator name, or the node a runner claimed to be
	Role   string
	Peer   string
	Action string // gRPC method, or the security event
	Nodes  []string
	RunID  string
	Result string // gRPC code, or "refused"
	Detail string
}

// AppendAudit records one entry.
func (s *Store) AppendAudit(ctx context.Context, a AuditEntry) error {
	if a.Kind != AuditOperator && a.Kind != AuditSecurity {
		return fmt.Errorf("store: audit entry kind %q: want %s or %s", a.Kind, AuditOperator, AuditSecurity)
	}
	if a.Time.IsZero() {
		a.Time = time.Now()
	}
	nodes := a.Nodes
	if nodes == nil {
		nodes = []string{}
	}
	nb, err := json.Marshal(nodes)
	if err != nil {
		return err
	}
	err = s.tx(ctx, func(tx *Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO audit_log (time, kind, actor, role, peer, action, nodes, run_id, result, detail)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, toMs(a.Time), string(a.Kind), a.Actor, a.Role, a.Peer, a.Action, string(nb), a.RunID, a.Result, a.Detail)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: append audit entry %s %s: %w", a.Kind, a.Action, err)
	}
	return nil
}

// AuditFilter selects audit entries; zero fields select everything.
type AuditFilter struct {
	Kind     AuditKind
	Node     string // entries naming this node
	Since    time.Time
	BeforeID int64 // paging: entries older than this id
	Limit    int   // default 100, at most 10000
}

// AuditLog returns entries newest first.
func (s *Store) AuditLog(ctx context.Context, f AuditFilter) ([]AuditEntry, error) {
	var where []string
	var args []any
	if f.Kind != "" {
		where, args = append(where, "kind = ?"), append(args, string(f.Kind))
	}
	if f.Node != "" {
		where, args = append(where, "(actor = ? OR EXISTS (SELECT 1 FROM "+s.dialect.jsonElements("nodes")+" WHERE value = ?))"), append(args, f.Node, f.Node)
	}
	if !f.Since.IsZero() {
		where, args = append(where, "time >= ?"), append(args, toMs(f.Since))
	}
	if f.BeforeID > 0 {
		where, args = append(where, "id < ?"), append(args, f.BeforeID)
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	f.Limit = min(f.Limit, 10000)
	q := `SELECT id, time, kind, actor, role, peer, action, nodes, run_id, result, detail FROM audit_log`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id DESC LIMIT ?"
	rows, err := s.r.QueryContext(ctx, q, append(args, f.Limit)...)
	if err != nil {
		return nil, fmt.Errorf("store: audit log: %w", err)
	}
	defer rows.Close()
	var out []AuditEntry
	for rows.Next() {
		var a AuditEntry
		var t int64
		var nodes string
		if err := rows.Scan(&a.ID, &t, &a.Kind, &a.Actor, &a.Role, &a.Peer, &a.Action, &nodes, &a.RunID, &a.Result, &a.Detail); err != nil {
			return nil, fmt.Errorf("store: audit log: %w", err)
		}
		a.Time = fromMs(t)
		if err := json.Unmarshal([]byte(nodes), &a.Nodes); err != nil {
			return nil, fmt.Errorf("store: audit log entry %d: nodes: %w", a.ID, err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// PruneAudit deletes entries older than t.
func (s *Store) PruneAudit(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.tx(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM audit_log WHERE time < ?`, toMs(before))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: prune audit log: %w", err)
	}
	return n, nil
}
