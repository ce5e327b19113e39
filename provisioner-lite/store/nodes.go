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
	// EKSHA256 pins the node's TPM endorsement key (sha256 of its
	// SubjectPublicKeyInfo, hex) as declared; PutNodes keeps it in
	// node_eks as "pinned", and a declaration without one drops an earlier
	// pin (an EK enrolled on first use stays). GetNode leaves it empty:
	// NodeEK reads what is on record.
	EKSHA256 string
	// Cabling is the site's cabling map for the node: by the node's port
	// (its interface name in CURE), the switch and switch port LLDP must
	// show there. Empty: no map, so no cabling verdict.
	Cabling map[string]Cable
}

// Cable is where one port of a node is planned to plug in. Switch (the
// switch's LLDP system name) or Chassis (its chassis ID), or both, name
// the switch; Port is its port as LLDP names it (port ID or description).
type Cable struct {
	Switch  string `json:"switch,omitempty"`
	Chassis string `json:"chassis,omitempty"`
	Port    string `json:"port"`
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

// ErrNodeExists is wrapped by PutNodes when a node to add (not replace)
// is already in the inventory.
var ErrNodeExists = errors.New("node already exists")

// UpsertNode inserts or replaces a node, including its MAC list. A MAC that
// already belongs to another node is an error: a MAC must identify one node.
// A removed node of that id comes back.
func (s *Store) UpsertNode(ctx context.Context, n Node) error {
	_, _, err := s.PutNodes(ctx, []Node{n}, true)
	return err
}

// sealedNode is a node's row as written: secrets sealed, maps as JSON.
type sealedNode struct {
	Node
	macs                    []string
	password, psids, labels string
	cabling                 string
}

func (s *Store) sealNode(n Node) (sealedNode, error) {
	if n.ID == "" {
		return sealedNode{}, errors.New("empty id")
	}
	out := sealedNode{Node: n}
	seen := map[string]bool{}
	for _, m := range n.MACs {
		nm, err := NormalizeMAC(m)
		if err != nil {
			return sealedNode{}, err
		}
		if seen[nm] {
			return sealedNode{}, fmt.Errorf("MAC %s listed twice", nm)
		}
		seen[nm] = true
		out.macs = append(out.macs, nm)
	}
	if n.BMCPassword != "" && n.BMCPasswordRef != "" {
		return sealedNode{}, fmt.Errorf("both a literal BMC password and a reference (%s): give one", n.BMCPasswordRef)
	}
	var err error
	if out.password, err = s.sealer.seal(n.BMCPassword, passwordAAD(n.ID)); err != nil {
		return sealedNode{}, fmt.Errorf("BMC password: %w", err)
	}
	out.psids = "{}"
	if len(n.PSIDs) > 0 {
		plain, err := marshalMap(n.PSIDs)
		if err != nil {
			return sealedNode{}, fmt.Errorf("psids: %w", err)
		}
		if out.psids, err = s.sealer.seal(plain, psidsAAD(n.ID)); err != nil {
			return sealedNode{}, fmt.Errorf("psids: %w", err)
		}
	}
	if out.labels, err = marshalMap(n.Labels); err != nil {
		return sealedNode{}, fmt.Errorf("labels: %w", err)
	}
	out.cabling = "{}"
	if len(n.Cabling) > 0 {
		b, err := json.Marshal(n.Cabling)
		if err != nil {
			return sealedNode{}, fmt.Errorf("cabling: %w", err)
		}
		out.cabling = string(b)
	}
	return out, nil
}

// PutNodes writes nodes in one transaction: all of them or none. With
// replace, a node that exists is updated (an import); without it, an
// existing id is an error wrapping ErrNodeExists (an add). A removed node's
// id may always be used again: the node comes back with the new settings
// and keeps its history. A MAC that belongs to another node (or is listed
// twice) is an error. added and updated name the ids.
func (s *Store) PutNodes(ctx context.Context, ns []Node, replace bool) (added, updated []string, err error) {
	rows := make([]sealedNode, 0, len(ns))
	for _, n := range ns {
		r, err := s.sealNode(n)
		if err != nil {
			return nil, nil, fmt.Errorf("store: put node %s: %w", n.ID, err)
		}
		rows = append(rows, r)
	}
	now := time.Now().UnixMilli()
	err = s.tx(ctx, func(tx *Tx) error {
		added, updated = nil, nil
		for _, n := range rows {
			var removedAt int64
			switch err := tx.QueryRowContext(ctx, `SELECT removed_at FROM nodes WHERE id = ?`, n.ID).Scan(&removedAt); {
			case errors.Is(err, sql.ErrNoRows), err == nil && removedAt != 0:
				added = append(added, n.ID)
			case err != nil:
				return err
			case !replace:
				return fmt.Errorf("node %s: %w (update it with an import, or remove it first)", n.ID, ErrNodeExists)
			default:
				updated = append(updated, n.ID)
			}
			if _, err := tx.ExecContext(ctx, `
INSERT INTO nodes (id, bmc_url, bmc_user, bmc_password, bmc_password_ref, bmc_ca_file, bmc_fingerprint, bmc_insecure,
	sku, hostname, system_serial, psids, labels, cabling, updated_at, removed_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)
ON CONFLICT(id) DO UPDATE SET bmc_url=excluded.bmc_url, bmc_user=excluded.bmc_user,
	bmc_password=excluded.bmc_password, bmc_password_ref=excluded.bmc_password_ref, bmc_ca_file=excluded.bmc_ca_file,
	bmc_fingerprint=excluded.bmc_fingerprint, bmc_insecure=excluded.bmc_insecure,
	sku=excluded.sku, hostname=excluded.hostname,
	system_serial=excluded.system_serial, psids=excluded.psids, labels=excluded.labels,
	cabling=excluded.cabling, updated_at=excluded.updated_at, removed_at=0`,
				n.ID, n.BMCURL, n.BMCUser, n.password, n.BMCPasswordRef, n.BMCCAFile, n.BMCFingerprint, n.BMCInsecure,
				n.SKU, n.Hostname, n.SystemSerial, n.psids, n.labels, n.cabling, now); err != nil {
				return fmt.Errorf("node %s: %w", n.ID, err)
			}
			for _, m := range n.macs {
				var owner string
				err := tx.QueryRowContext(ctx, `SELECT node_id FROM node_macs WHERE mac = ?`, m).Scan(&owner)
				if err == nil && owner != n.ID {
					return fmt.Errorf("node %s: MAC %s already belongs to node %s", n.ID, m, owner)
				}
				if err != nil && !errors.Is(err, sql.ErrNoRows) {
					return err
				}
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM node_macs WHERE node_id = ?`, n.ID); err != nil {
				return err
			}
			if n.EKSHA256 == "" {
				if _, err := tx.ExecContext(ctx, `DELETE FROM node_eks WHERE node_id = ? AND source = 'pinned'`, n.ID); err != nil {
					return err
				}
			} else if _, err := tx.ExecContext(ctx, `INSERT INTO node_eks (node_id, ek_sha256, source, enrolled_at, run_id) VALUES (?, ?, 'pinned', ?, '')
ON CONFLICT(node_id) DO UPDATE SET ek_sha256 = excluded.ek_sha256, source = 'pinned', enrolled_at = excluded.enrolled_at, run_id = ''
WHERE node_eks.source <> 'pinned' OR node_eks.ek_sha256 <> excluded.ek_sha256`, n.ID, strings.ToLower(n.EKSHA256), now); err != nil {
				return fmt.Errorf("node %s: ek_sha256: %w", n.ID, err)
			}
			for i, m := range n.macs {
				if _, err := tx.ExecContext(ctx, `INSERT INTO node_macs (mac, node_id, pos) VALUES (?, ?, ?)`, m, n.ID, i); err != nil {
					return fmt.Errorf("node %s: MAC %s: %w", n.ID, m, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		if len(rows) == 1 {
			return nil, nil, fmt.Errorf("store: upsert node %s: %w", rows[0].ID, err)
		}
		return nil, nil, fmt.Errorf("store: put %d nodes (none written): %w", len(rows), err)
	}
	return added, updated, nil
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

// RemoveNode takes a node out of the inventory. It refuses (ErrActiveRun)
// while the node has an active run. A node without runs is deleted; one with
// runs keeps its row, marked removed, so its runs, reports and inventories
// stay readable: its MACs (free for another node), boot tokens, BMC
// password and PSIDs go. A removed node is not found by GetNode, NodeByMAC,
// ListNodes or NodeSummaries, and no run can be created for it.
func (s *Store) RemoveNode(ctx context.Context, id string) (runsKept int64, err error) {
	err = s.tx(ctx, func(tx *Tx) error {
		runsKept = 0
		var removedAt int64
		if err := tx.QueryRowContext(ctx, `SELECT removed_at FROM nodes WHERE id = ?`, id).Scan(&removedAt); errors.Is(err, sql.ErrNoRows) || err == nil && removedAt != 0 {
			return ErrNotFound
		} else if err != nil {
			return err
		}
		var active string
		err := tx.QueryRowContext(ctx, `SELECT id FROM runs WHERE node_id = ? AND status IN ('pending','running')`, id).Scan(&active)
		if err == nil {
			return fmt.Errorf("run %s: %w", active, ErrActiveRun)
		} else if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM runs WHERE node_id = ?`, id).Scan(&runsKept); err != nil {
			return err
		}
		if runsKept == 0 {
			_, err := tx.ExecContext(ctx, `DELETE FROM nodes WHERE id = ?`, id)
			return err
		}
		for _, q := range []string{`DELETE FROM node_macs WHERE node_id = ?`, `DELETE FROM boot_tokens WHERE node_id = ?`} {
			if _, err := tx.ExecContext(ctx, q, id); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `UPDATE nodes SET removed_at = ?, updated_at = ?, bmc_password = '', bmc_password_ref = '', psids = '{}' WHERE id = ?`,
			time.Now().UnixMilli(), time.Now().UnixMilli(), id)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: remove node %s: %w", id, err)
	}
	return runsKept, nil
}

// SetLabels sets and removes labels of a node in one step and returns its
// labels afterwards.
func (s *Store) SetLabels(ctx context.Context, id string, set map[string]string, remove []string) (map[string]string, error) {
	var out map[string]string
	err := s.tx(ctx, func(tx *Tx) error {
		var raw string
		if err := tx.QueryRowContext(ctx, `SELECT labels FROM nodes WHERE id = ? AND removed_at = 0`, id).Scan(&raw); errors.Is(err, sql.ErrNoRows) {
			return ErrNotFound
		} else if err != nil {
			return err
		}
		labels, err := unmarshalMap(raw)
		if err != nil {
			return fmt.Errorf("labels column: %w", err)
		}
		if labels == nil {
			labels = map[string]string{}
		}
		for _, k := range remove {
			delete(labels, k)
		}
		for k, v := range set {
			labels[k] = v
		}
		b, err := marshalMap(labels)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE nodes SET labels = ?, updated_at = ? WHERE id = ?`, b, time.Now().UnixMilli(), id); err != nil {
			return err
		}
		out = labels
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: labels of node %s: %w", id, err)
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

const nodeCols = `id, bmc_url, bmc_user, bmc_password, bmc_password_ref, bmc_ca_file, bmc_fingerprint, bmc_insecure, sku, hostname, system_serial, psids, labels, cabling`

// GetNode returns the node with that id, or an error wrapping ErrNotFound.
func (s *Store) GetNode(ctx context.Context, id string) (Node, error) {
	n, err := s.queryNode(ctx, `SELECT `+nodeCols+` FROM nodes WHERE id = ? AND removed_at = 0`, id)
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

// MACIndex maps every inventory MAC (normalised) to its node's id, in one
// query: what the proxy DHCP holds in memory to check a request's MAC.
func (s *Store) MACIndex(ctx context.Context) (map[string]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT m.mac, m.node_id FROM node_macs m JOIN nodes n ON n.id = m.node_id WHERE n.removed_at = 0`)
	if err != nil {
		return nil, fmt.Errorf("store: MAC index: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var mac, id string
		if err := rows.Scan(&mac, &id); err != nil {
			return nil, fmt.Errorf("store: MAC index: %w", err)
		}
		out[mac] = id
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: MAC index: %w", err)
	}
	return out, nil
}

// ListNodes returns every node ordered by id.
func (s *Store) ListNodes(ctx context.Context) ([]Node, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+nodeCols+` FROM nodes WHERE removed_at = 0 ORDER BY id`)
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
	var password, psids, labels, cabling string
	if err := sc.Scan(&n.ID, &n.BMCURL, &n.BMCUser, &password, &n.BMCPasswordRef, &n.BMCCAFile, &n.BMCFingerprint, &n.BMCInsecure,
		&n.SKU, &n.Hostname, &n.SystemSerial, &psids, &labels, &cabling); err != nil {
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
	if cabling != "" && cabling != "{}" {
		if err := json.Unmarshal([]byte(cabling), &n.Cabling); err != nil {
			return Node{}, fmt.Errorf("node %s: cabling column: %w", n.ID, err)
		}
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
