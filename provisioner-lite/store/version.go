package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/cure-oss/cure/tools/version"
)

// A store records its schema version (the number of migrations applied:
// SQLite's user_version, PostgreSQL's schema_version) and, in
// store_version, the CURE version that last migrated it. A binary older
// than the store refuses to open it and names both: an old binary writing
// a newer schema would corrupt it silently. store_version lives outside
// the migration list so that any binary, older or newer, can read it
// before deciding whether to migrate.

// ErrNewerStore is wrapped by Open's refusal of a store whose schema is
// newer than this binary's.
var ErrNewerStore = errors.New("the store is newer than this provisioner-lite")

// Version is a store's schema and the CURE that last migrated it.
type Version struct {
	Schema      int       // migrations applied
	CUREVersion string    // "" when the store predates the record
	MigratedAt  time.Time // zero when unrecorded
}

// Querier is a *sql.DB, *sql.Conn or *sql.Tx.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// CUREVersion is this binary's version as a store records it: the
// module (or release) version and the VCS revision.
func CUREVersion() string {
	i := version.Get()
	s := i.Version
	if rev := i.Revision; rev != "" {
		s += " (" + rev[:min(12, len(rev))]
		if i.Dirty {
			s += "+dirty"
		}
		s += ")"
	}
	return s
}

// ReadVersion reads the store's version through q, a connection to a
// SQLite (postgres false) or PostgreSQL database, without changing it; a
// database no coordinator created reads as schema 0.
func ReadVersion(ctx context.Context, q Querier, postgres bool) (Version, error) {
	var v Version
	exists := func(table string) (bool, error) {
		var n int
		query := `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?`
		if postgres {
			query = `SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = $1`
		}
		err := q.QueryRowContext(ctx, query, table).Scan(&n)
		return n > 0, err
	}
	if postgres {
		ok, err := exists("schema_version")
		if err != nil {
			return v, fmt.Errorf("read schema version: %w", err)
		}
		if ok {
			err = q.QueryRowContext(ctx, `SELECT version FROM schema_version`).Scan(&v.Schema)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return v, fmt.Errorf("read schema version: %w", err)
			}
		}
	} else if err := q.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v.Schema); err != nil {
		return v, fmt.Errorf("read schema version: %w", err)
	}
	ok, err := exists("store_version")
	if err != nil || !ok {
		return v, err
	}
	var ms int64
	err = q.QueryRowContext(ctx, `SELECT cure_version, migrated_at FROM store_version WHERE id = 1`).Scan(&v.CUREVersion, &ms)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return v, fmt.Errorf("read store_version: %w", err)
	}
	v.MigratedAt = fromMs(ms)
	return v, nil
}

// CheckNotNewer refuses (ErrNewerStore) a store whose schema is newer
// than this binary's, naming both versions.
func CheckNotNewer(v Version) error {
	if v.Schema <= SchemaVersion {
		return nil
	}
	by := v.CUREVersion
	if by == "" {
		by = "an unrecorded version"
	}
	return fmt.Errorf("%w: the store has schema version %d, last migrated by CURE %s; this provisioner-lite is CURE %s with schema version %d. "+
		"Run a provisioner-lite at least as new as the store's (or restore a backup taken before the upgrade)",
		ErrNewerStore, v.Schema, by, CUREVersion(), SchemaVersion)
}

// checkNotNewerDB is CheckNotNewer on an open database, before migrating it.
func checkNotNewerDB(ctx context.Context, db Querier, postgres bool) error {
	v, err := ReadVersion(ctx, db, postgres)
	if err != nil {
		return err
	}
	return CheckNotNewer(v)
}

// recordVersion notes this binary as the one that last migrated the store
// when the recorded schema differs from the current one (or none is
// recorded). Idempotent, and safe for two instances opening at once.
func recordVersion(ctx context.Context, db Querier, d dialect) error {
	if _, err := db.ExecContext(ctx, schemaTypes[d.name].Replace(`CREATE TABLE IF NOT EXISTS store_version (
	id             INTEGER PRIMARY KEY CHECK (id = 1),
	schema_version INTEGER NOT NULL,
	cure_version   TEXT NOT NULL,
	migrated_at    {bigint} NOT NULL
)`)); err != nil {
		return fmt.Errorf("store_version: %w", err)
	}
	_, err := db.ExecContext(ctx, d.rebind(`INSERT INTO store_version (id, schema_version, cure_version, migrated_at) VALUES (1, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET schema_version = excluded.schema_version, cure_version = excluded.cure_version, migrated_at = excluded.migrated_at
WHERE store_version.schema_version <> excluded.schema_version`), SchemaVersion, CUREVersion(), time.Now().UnixMilli())
	if err != nil {
		return fmt.Errorf("store_version: %w", err)
	}
	return nil
}

// Version is the store's schema version and the CURE that last migrated it.
func (s *Store) Version(ctx context.Context) (Version, error) {
	return ReadVersion(ctx, s.w, s.dialect.name == postgresDialect.name)
}

// MigratePostgresTo migrates the PostgreSQL database db to schema version
// target, no further (a restore loads a dump of that version into it, and
// opening the store then migrates it the rest of the way).
func MigratePostgresTo(ctx context.Context, db *sql.DB, target int) error {
	if target > SchemaVersion {
		return CheckNotNewer(Version{Schema: target})
	}
	if err := checkNotNewerDB(ctx, db, true); err != nil {
		return err
	}
	return migratePostgresTo(ctx, db, target)
}
