package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Enlistment (provisioner-lite/enlist): a machine whose MAC is in no
// node's inventory booted CURE in inspect mode. Its record holds its
// discovery token's digest (one report, then the digest is cleared) and
// what it reported, until an operator approves it into a node.

// Discovered states.
const (
	DiscoveredBooted   = "booted"   // a boot script and token were handed out
	DiscoveredReported = "reported" // its inspection report is in
	DiscoveredApproved = "approved" // an operator made it node NodeID
)

// ErrDiscoveredFull refuses a new record past the cap: spoofed MACs must
// not fill the store.
var ErrDiscoveredFull = errors.New("discovered machines at their cap")

// Discovered is one enlisted machine.
type Discovered struct {
	ID, MAC, Peer, Arch string
	TokenHash           string
	TokenExpires        time.Time
	State               string
	Report              []byte // the InspectReport as the wire encodes it (token cleared)
	NodeID              string
	FirstSeen           time.Time
	ReportedAt          time.Time
}

// DiscoveredID is the record id of mac: one record per MAC, stable.
func DiscoveredID(mac string) string { return "disc-" + strings.ReplaceAll(mac, ":", "") }

// EnlistBoot records that mac booted CURE in inspect mode with the token
// whose digest d carries: a new record unless max records that are not
// approved exist already (ErrDiscoveredFull; records that never reported
// and whose token expired are dropped first), or the existing one's token
// replaced (its latest boot's counts). An approved record is not reopened.
func (s *Store) EnlistBoot(ctx context.Context, d Discovered, max int) (string, error) {
	id := DiscoveredID(d.MAC)
	err := s.tx(ctx, func(tx *Tx) error {
		var state string
		err := tx.QueryRowContext(ctx, `SELECT state FROM discovered WHERE id = ?`, id).Scan(&state)
		switch {
		case err == nil && state == DiscoveredApproved:
			return fmt.Errorf("discovered %s was approved already: %w", id, ErrNodeExists)
		case err == nil:
			_, err = tx.ExecContext(ctx, `UPDATE discovered SET peer = ?, arch = ?, token_hash = ?, token_expires = ? WHERE id = ?`,
				d.Peer, d.Arch, d.TokenHash, toMs(d.TokenExpires), id)
			return err
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		// A record that never reported goes when its token expires: a
		// spoofed MAC's boot holds a place for the token's life only.
		if _, err := tx.ExecContext(ctx, `DELETE FROM discovered WHERE state = 'booted' AND token_expires < ?`, toMs(time.Now())); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM discovered WHERE state <> 'approved'`).Scan(&n); err != nil {
			return err
		}
		if n >= max {
			return fmt.Errorf("%d records: %w", n, ErrDiscoveredFull)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO discovered (id, mac, peer, arch, token_hash, token_expires, state, first_seen) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			id, d.MAC, d.Peer, d.Arch, d.TokenHash, toMs(d.TokenExpires), DiscoveredBooted, toMs(time.Now()))
		return err
	})
	if err != nil {
		return "", fmt.Errorf("enlist %s: %w", d.MAC, err)
	}
	return id, nil
}

// DiscoveredByToken is the record whose unexpired, unused discovery token
// has digest hash (ErrNotFound otherwise).
func (s *Store) DiscoveredByToken(ctx context.Context, hash string) (Discovered, error) {
	if hash == "" {
		return Discovered{}, ErrNotFound
	}
	d, err := s.queryDiscovered(ctx, `WHERE token_hash = ? AND state <> 'approved'`, hash)
	if err != nil {
		return Discovered{}, err
	}
	if time.Now().After(d.TokenExpires) {
		return Discovered{}, ErrExpired
	}
	return d, nil
}

// RecordInspection keeps the report of the record whose token has digest
// hash and spends the token: one report per boot.
func (s *Store) RecordInspection(ctx context.Context, hash string, report []byte) error {
	return s.tx(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE discovered SET report = ?, state = ?, reported_at = ?, token_hash = '' WHERE token_hash = ? AND state <> 'approved'`,
			report, DiscoveredReported, toMs(time.Now()), hash)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("discovery token: %w", ErrNotFound)
		}
		return nil
	})
}

// GetDiscovered is one record.
func (s *Store) GetDiscovered(ctx context.Context, id string) (Discovered, error) {
	return s.queryDiscovered(ctx, `WHERE id = ?`, id)
}

// ListDiscovered lists the records, the approved ones only with all.
func (s *Store) ListDiscovered(ctx context.Context, all bool) ([]Discovered, error) {
	q := discoveredSelect + ` WHERE state <> 'approved' ORDER BY first_seen, id`
	if all {
		q = discoveredSelect + ` ORDER BY first_seen, id`
	}
	rows, err := s.r.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("list discovered: %w", err)
	}
	defer rows.Close()
	var out []Discovered
	for rows.Next() {
		d, err := scanDiscovered(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// ApproveDiscovered marks record id approved as node nodeID; a record
// approved already is refused (ErrNodeExists).
func (s *Store) ApproveDiscovered(ctx context.Context, id, nodeID string) error {
	return s.tx(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE discovered SET state = ?, node_id = ?, token_hash = '' WHERE id = ? AND state <> 'approved'`,
			DiscoveredApproved, nodeID, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("discovered %s: not found or approved already: %w", id, ErrNodeExists)
		}
		return nil
	})
}

const discoveredSelect = `SELECT id, mac, peer, arch, token_hash, token_expires, state, report, node_id, first_seen, reported_at FROM discovered`

func (s *Store) queryDiscovered(ctx context.Context, where string, arg any) (Discovered, error) {
	d, err := scanDiscovered(s.r.QueryRowContext(ctx, discoveredSelect+" "+where, arg))
	if errors.Is(err, sql.ErrNoRows) {
		return Discovered{}, ErrNotFound
	}
	return d, err
}

func scanDiscovered(row interface{ Scan(...any) error }) (Discovered, error) {
	var d Discovered
	var exp, first, reported int64
	err := row.Scan(&d.ID, &d.MAC, &d.Peer, &d.Arch, &d.TokenHash, &exp, &d.State, &d.Report, &d.NodeID, &first, &reported)
	d.TokenExpires, d.FirstSeen, d.ReportedAt = fromMs(exp), fromMs(first), fromMs(reported)
	return d, err
}
