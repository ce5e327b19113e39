package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"
)

// Several coordinator instances behind one address share more than the
// runs' leases: each records itself in the instance registry (its artifact
// base URL, so a peer missing an artifact can fetch it there, and the
// manifest bundle it runs), one of them holds each named lease (the proxy
// DHCP/TFTP front door), and all load the manifest bundles pushed here.

// InstanceInfo is one coordinator instance as the registry knows it.
type InstanceInfo struct {
	ID              string
	ArtifactURL     string // the base URL peers fetch its artifacts at (--peer-url, or its boot server's; "" if none)
	ManifestVersion int64  // the manifest bundle it runs (0: its own directory)
	StartedAt       time.Time
	SeenAt          time.Time // its last heartbeat
}

// Heartbeat records this instance in the registry (created on the first
// call) with the base URL peers fetch its artifacts at and its manifest
// bundle version.
func (s *Store) Heartbeat(ctx context.Context, artifactURL string, manifestVersion int64) error {
	if s.instance == "" {
		return nil
	}
	now := time.Now().UnixMilli()
	err := s.tx(ctx, func(tx *Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO instances (id, artifact_url, manifest_version, started_at, seen_at) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET artifact_url = excluded.artifact_url, manifest_version = excluded.manifest_version, seen_at = excluded.seen_at`,
			s.instance, artifactURL, manifestVersion, now, now)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: heartbeat of instance %s: %w", s.instance, err)
	}
	return nil
}

// Instances lists the instances whose last heartbeat is within fresh
// (0: all), this one included, by id.
func (s *Store) Instances(ctx context.Context, fresh time.Duration) ([]InstanceInfo, error) {
	var since int64
	if fresh > 0 {
		since = time.Now().Add(-fresh).UnixMilli()
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id, artifact_url, manifest_version, started_at, seen_at FROM instances WHERE seen_at >= ? ORDER BY id`, since)
	if err != nil {
		return nil, fmt.Errorf("store: list instances: %w", err)
	}
	defer rows.Close()
	var out []InstanceInfo
	for rows.Next() {
		var i InstanceInfo
		var started, seen int64
		if err := rows.Scan(&i.ID, &i.ArtifactURL, &i.ManifestVersion, &started, &seen); err != nil {
			return nil, fmt.Errorf("store: list instances: %w", err)
		}
		i.StartedAt, i.SeenAt = fromMs(started), fromMs(seen)
		out = append(out, i)
	}
	return out, rows.Err()
}

// NamedLease is who holds a named lease, since when and until when.
type NamedLease struct {
	Name, Holder string
	Since, Until time.Time
}

// AcquireLease takes or renews the named lease for this instance for ttl:
// it succeeds when nobody holds it, this instance does, or the holder's
// lease expired; of two instances acquiring at once exactly one gets it
// (one conditional UPDATE). It returns the lease as it stands after the
// attempt and whether this instance holds it. A store no other instance
// can use (SQLite: the state dir's lock keeps others out) always holds it.
func (s *Store) AcquireLease(ctx context.Context, name string, ttl time.Duration) (NamedLease, bool, error) {
	if s.instance == "" || !s.Shared() {
		return NamedLease{Name: name, Holder: s.instance}, true, nil
	}
	now := time.Now()
	var got NamedLease
	err := s.tx(ctx, func(tx *Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO named_leases (name) VALUES (?) ON CONFLICT (name) DO NOTHING`, name); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE named_leases SET held_since = CASE WHEN holder = ? THEN held_since ELSE ? END, holder = ?, held_until = ?
WHERE name = ? AND (holder = ? OR holder = '' OR held_until < ?)`,
			s.instance, now.UnixMilli(), s.instance, now.Add(ttl).UnixMilli(), name, s.instance, now.UnixMilli())
		if err != nil {
			return err
		}
		var since, until int64
		if err := tx.QueryRowContext(ctx, `SELECT holder, held_since, held_until FROM named_leases WHERE name = ?`, name).Scan(&got.Holder, &since, &until); err != nil {
			return err
		}
		got.Name, got.Since, got.Until = name, fromMs(since), fromMs(until)
		return nil
	})
	if err != nil {
		return NamedLease{}, false, fmt.Errorf("store: acquire lease %s for %s: %w", name, s.instance, err)
	}
	return got, got.Holder == s.instance, nil
}

// ReleaseLease gives the named lease up if this instance holds it, so a
// standby takes it at its next attempt instead of after the TTL.
func (s *Store) ReleaseLease(ctx context.Context, name string) error {
	if s.instance == "" || !s.Shared() {
		return nil
	}
	err := s.tx(ctx, func(tx *Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE named_leases SET holder = '', held_until = 0 WHERE name = ? AND holder = ?`, name, s.instance)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: release lease %s: %w", name, err)
	}
	return nil
}

// Lease reads a named lease (zero Holder: nobody ever held it, or it was
// released).
func (s *Store) Lease(ctx context.Context, name string) (NamedLease, error) {
	l := NamedLease{Name: name}
	var since, until int64
	err := s.r.QueryRowContext(ctx, `SELECT holder, held_since, held_until FROM named_leases WHERE name = ?`, name).Scan(&l.Holder, &since, &until)
	if errors.Is(err, sql.ErrNoRows) {
		return l, nil
	}
	if err != nil {
		return l, fmt.Errorf("store: read lease %s: %w", name, err)
	}
	l.Since, l.Until = fromMs(since), fromMs(until)
	return l, nil
}

// ManifestBundle is one pushed set of manifest files, by path relative to
// the manifests directory ("sku.yaml", "suites/x.yaml").
type ManifestBundle struct {
	Version   int64
	SHA256    string // over the files, in path order (BundleDigest)
	Files     map[string][]byte
	PushedBy  string
	CreatedAt time.Time
}

// MaxBundleBytes bounds a manifest bundle: manifests are small text, and
// every instance reads the newest bundle whole.
const MaxBundleBytes = 16 << 20

// BundleDigest is the sha256 of files: each path and content, length
// prefixed, in path order (two bundles of the same files have one digest).
func BundleDigest(files map[string][]byte) string {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%d:%s%d:", len(n), n, len(files[n]))
		h.Write(files[n])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// PutManifestBundle stores files as the next bundle version and returns it.
// A bundle identical to the newest is not stored again: its version is
// returned.
func (s *Store) PutManifestBundle(ctx context.Context, files map[string][]byte, by string) (int64, error) {
	total := 0
	for n, b := range files {
		total += len(n) + len(b)
	}
	if total > MaxBundleBytes {
		return 0, fmt.Errorf("store: manifest bundle of %d bytes: over the %d-byte limit", total, MaxBundleBytes)
	}
	enc, err := json.Marshal(files) // []byte values as base64: any content survives
	if err != nil {
		return 0, fmt.Errorf("store: encode manifest bundle: %w", err)
	}
	sum := BundleDigest(files)
	var version int64
	err = s.tx(ctx, func(tx *Tx) error {
		var newest sql.NullInt64
		var newestSum sql.NullString
		err := tx.QueryRowContext(ctx, `SELECT version, sha256 FROM manifest_bundles ORDER BY version DESC LIMIT 1`).Scan(&newest, &newestSum)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if newestSum.String == sum {
			version = newest.Int64
			return nil
		}
		return tx.QueryRowContext(ctx, `INSERT INTO manifest_bundles (sha256, files, pushed_by, created_at) VALUES (?, ?, ?, ?) RETURNING version`,
			sum, string(enc), by, time.Now().UnixMilli()).Scan(&version)
	})
	if err != nil {
		return 0, fmt.Errorf("store: keep manifest bundle: %w", err)
	}
	return version, nil
}

// NewestManifestBundle returns the newest bundle if its version is above
// after (ok false: none newer).
func (s *Store) NewestManifestBundle(ctx context.Context, after int64) (ManifestBundle, bool, error) {
	var b ManifestBundle
	var files string
	var created int64
	err := s.r.QueryRowContext(ctx, `SELECT version, sha256, files, pushed_by, created_at FROM manifest_bundles WHERE version > ? ORDER BY version DESC LIMIT 1`, after).
		Scan(&b.Version, &b.SHA256, &files, &b.PushedBy, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return b, false, nil
	}
	if err != nil {
		return b, false, fmt.Errorf("store: newest manifest bundle: %w", err)
	}
	if err := json.Unmarshal([]byte(files), &b.Files); err != nil {
		return b, false, fmt.Errorf("store: manifest bundle %d: %w", b.Version, err)
	}
	if got := BundleDigest(b.Files); got != b.SHA256 {
		return b, false, fmt.Errorf("store: manifest bundle %d: content sha256 %s, recorded %s: the row was altered", b.Version, got, b.SHA256)
	}
	b.CreatedAt = fromMs(created)
	return b, true, nil
}
