package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// Node is one machine in the inventory.
type Node struct {
	ID, BMCURL, BMCUser, SKU, Hostname, SystemSerial string
	// BMCPassword is a literal password, sealed at rest; BMCPasswordRef names
	// where to read it instead ("env:NAME" or "file:/path"), and then only the
	// reference is stored. At most one of the two is set.
	BMCPassword, BMCPasswordRef string
	// BMC TLS: BMCCAFile is a PEM bundle the BMC's chain must verify against;
	// BMCFingerprint pins its certificate ("sha256:" + hex of the DER);
	// BMCInsecure skips verification (and allows http://) because the
	// inventory says so.
	BMCCAFile, BMCFingerprint string
	BMCInsecure               bool
	MACs                      []string          // normalised: lowercase, colon-separated
	PSIDs                     map[string]string // disk serial -> PSID (printed on the drive label), sealed at rest
	Labels                    map[string]string
}

// NormalizeMAC parses a 6-byte Ethernet MAC written with ':' or '-' separators
// (any case) and returns it lowercase and colon-separated, the form the store keys on.
func NormalizeMAC(mac string) (string, error) {
	s := strings.TrimSpace(mac)
	if len(s) != 17 {
		return "", fmt.Errorf("MAC %q: want 6 hex octets separated by ':' or '-'", mac)
	}
	s = strings.ReplaceAll(s, "-", ":")
	hw, err := net.ParseMAC(s)
	if err != nil || len(hw) != 6 {
		return "", fmt.Errorf("MAC %q: want 6 hex octets separated by ':' or '-'", mac)
	}
	return hw.String(), nil
}

// UpsertNode inserts or replaces a node, including its MAC list. A MAC that
// already belongs to another node is an error: a MAC must identify one node.
func (s *Store) UpsertNode(ctx context.Context, n Node) error {
	if n.ID == "" {
		return errors.New("store: upsert node: empty id")
	}
	macs := make([]string, 0, len(n.MACs))
	seen := map[string]bool{}
	for _, m := range n.MACs {
		nm, err := NormalizeMAC(m)
		if err != nil {
			return fmt.Errorf("store: upsert node %s: %w", n.ID, err)
		}
		if seen[nm] {
			return fmt.Errorf("store: upsert node %s: MAC %s listed twice", n.ID, nm)
		}
		seen[nm] = true
		macs = append(macs, nm)
	}
	if n.BMCPassword != "" && n.BMCPasswordRef != "" {
		return fmt.Errorf("store: upsert node %s: both a literal BMC password and a reference (%s): give one", n.ID, n.BMCPasswordRef)
	}
	password, err := s.sealer.seal(n.BMCPassword, passwordAAD(n.ID))
	if err != nil {
		return fmt.Errorf("store: upsert node %s: BMC password: %w", n.ID, err)
	}
	psids := "{}"
	if len(n.PSIDs) > 0 {
		plain, err := marshalMap(n.PSIDs)
		if err != nil {
			return fmt.Errorf("store: upsert node %s: psids: %w", n.ID, err)
		}
		if psids, err = s.sealer.seal(plain, psidsAAD(n.ID)); err != nil {
			return fmt.Errorf("store: upsert node %s: psids: %w", n.ID, err)
		}
	}
	labels, err := marshalMap(n.Labels)
	if err != nil {
		return fmt.Errorf("store: upsert node %s: labels: %w", n.ID, err)
	}
	err = s.tx(ctx, func(tx *Tx) error {
		if _, err := tx.ExecContext(ctx, `
INSERT INTO nodes (id, bmc_url, bmc_user, bmc_password, bmc_password_ref, bmc_ca_file, bmc_fingerprint, bmc_insecure,
	sku, hostname, system_serial, psids, labels, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT(id) DO UPDATE SET bmc_url=excluded.bmc_url, bmc_user=excluded.bmc_user,
	bmc_password=excluded.bmc_password, bmc_password_ref=excluded.bmc_password_ref, bmc_ca_file=excluded.bmc_ca_file,
	bmc_fingerprint=excluded.bmc_fingerprint, bmc_insecure=excluded.bmc_insecure,
	sku=excluded.sku, hostname=excluded.hostname,
	system_serial=excluded.system_serial, psids=excluded.psids, labels=excluded.labels,
	updated_at=excluded.updated_at`,
			n.ID, n.BMCURL, n.BMCUser, password, n.BMCPasswordRef, n.BMCCAFile, n.BMCFingerprint, n.BMCInsecure,
			n.SKU, n.Hostname, n.SystemSerial, psids, labels, time.Now().UnixMilli()); err != nil {
			return err
		}
		for _, m := range macs {
			var owner string
			err := tx.QueryRowContext(ctx, `SELECT node_id FROM node_macs WHERE mac = ?`, m).Scan(&owner)
			if err == nil && owner != n.ID {
				return fmt.Errorf("MAC %s already belongs to node %s", m, owner)
			}
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM node_macs WHERE node_id = ?`, n.ID); err != nil {
			return err
		}
		for i, m := range macs {
			if _, err := tx.ExecContext(ctx, `INSERT INTO node_macs (mac, node_id, pos) VALUES (?, ?, ?)`, m, n.ID, i); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: upsert node %s: %w", n.ID, err)
	}
	return nil
}

// DeleteNode removes a node, its MACs and boot tokens. It refuses while the node
// still has runs (their history must not be orphaned).
func (s *Store) DeleteNode(ctx context.Context, id string) error {
	err := s.tx(ctx, func(tx *Tx) error {
		var runs int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM runs WHERE node_id = ?`, id).Scan(&runs); err != nil {
			return err
		}
		if runs > 0 {
			return fmt.Errorf("node has %d runs; refusing to orphan their history", runs)
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM nodes WHERE id = ?`, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ErrNotFound
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: delete node %s: %w", id, err)
	}
	return nil
}

const nodeCols = `id, bmc_url, bmc_user, bmc_password, bmc_password_ref, bmc_ca_file, bmc_fingerprint, bmc_insecure, sku, hostname, system_serial, psids, labels`

// GetNode returns the node with that id, or an error wrapping ErrNotFound.
func (s *Store) GetNode(ctx context.Context, id string) (Node, error) {
	n, err := s.queryNode(ctx, `SELECT `+nodeCols+` FROM nodes WHERE id = ?`, id)
	if err != nil {
		return Node{}, fmt.Errorf("store: node %q: %w", id, err)
	}
	return n, nil
}

// NodeByMAC returns the node owning mac (any case, ':' or '-' separated).
func (s *Store) NodeByMAC(ctx context.Context, mac string) (Node, error) {
	nm, err := NormalizeMAC(mac)
	if err != nil {
		return Node{}, fmt.Errorf("store: node by MAC: %w", err)
	}
	n, err := s.queryNode(ctx, `SELECT `+prefixed("n.", nodeCols)+` FROM nodes n JOIN node_macs m ON m.node_id = n.id WHERE m.mac = ?`, nm)
	if err != nil {
		return Node{}, fmt.Errorf("store: node with MAC %s: %w", nm, err)
	}
	return n, nil
}

// ListNodes returns every node ordered by id.
func (s *Store) ListNodes(ctx context.Context) ([]Node, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+nodeCols+` FROM nodes ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("store: list nodes: %w", err)
	}
	defer rows.Close()
	var out []Node
	for rows.Next() {
		n, err := s.scanNode(rows)
		if err != nil {
			return nil, fmt.Errorf("store: list nodes: %w", err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list nodes: %w", err)
	}
	for i := range out {
		if out[i].MACs, err = s.macs(ctx, out[i].ID); err != nil {
			return nil, fmt.Errorf("store: list nodes: %w", err)
		}
	}
	return out, nil
}

func (s *Store) queryNode(ctx context.Context, q string, arg any) (Node, error) {
	n, err := s.scanNode(s.r.QueryRowContext(ctx, q, arg))
	if errors.Is(err, sql.ErrNoRows) {
		return Node{}, ErrNotFound
	}
	if err != nil {
		return Node{}, err
	}
	if n.MACs, err = s.macs(ctx, n.ID); err != nil {
		return Node{}, err
	}
	return n, nil
}

func (s *Store) macs(ctx context.Context, id string) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT mac FROM node_macs WHERE node_id = ? ORDER BY pos`, id)
	if err != nil {
		return nil, fmt.Errorf("MACs of %s: %w", id, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var m string
		if err := rows.Scan(&m); err != nil {
			return nil, fmt.Errorf("MACs of %s: %w", id, err)
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

type scanner interface{ Scan(...any) error }

func (s *Store) scanNode(sc scanner) (Node, error) {
	var n Node
	var password, psids, labels string
	if err := sc.Scan(&n.ID, &n.BMCURL, &n.BMCUser, &password, &n.BMCPasswordRef, &n.BMCCAFile, &n.BMCFingerprint, &n.BMCInsecure,
		&n.SKU, &n.Hostname, &n.SystemSerial, &psids, &labels); err != nil {
		return Node{}, err
	}
	var err error
	if n.BMCPassword, err = s.sealer.open(password, passwordAAD(n.ID)); err != nil {
		return Node{}, fmt.Errorf("node %s: BMC password: %w", n.ID, err)
	}
	if psids != "" && psids != "{}" {
		plain, err := s.sealer.open(psids, psidsAAD(n.ID))
		if err != nil {
			return Node{}, fmt.Errorf("node %s: psids: %w", n.ID, err)
		}
		if n.PSIDs, err = unmarshalMap(plain); err != nil {
			return Node{}, fmt.Errorf("node %s: psids column: %w", n.ID, err)
		}
	}
	if n.Labels, err = unmarshalMap(labels); err != nil {
		return Node{}, fmt.Errorf("node %s: labels column: %w", n.ID, err)
	}
	return n, nil
}

func prefixed(p, cols string) string {
	parts := strings.Split(cols, ", ")
	for i := range parts {
		parts[i] = p + parts[i]
	}
	return strings.Join(parts, ", ")
}

func marshalMap(m map[string]string) (string, error) {
	if m == nil {
		return "{}", nil
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// unmarshalMap returns nil for an empty map so a round trip of a nil map is nil.
func unmarshalMap(s string) (map[string]string, error) {
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}
