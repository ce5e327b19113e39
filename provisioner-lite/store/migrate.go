package store

import (
	"context"
	"database/sql"
	"fmt"
)

// migrations[i] takes the schema from user_version i to i+1. Append only: a
// released migration is never edited, so every database converges on one schema.
var migrations = []string{
	// 1: initial schema. Times are UTC unix milliseconds (0 = unset); maps and
	// lists are JSON text.
	`
CREATE TABLE nodes (
	id            TEXT PRIMARY KEY,
	bmc_url       TEXT NOT NULL DEFAULT '',
	bmc_user      TEXT NOT NULL DEFAULT '',
	bmc_password  TEXT NOT NULL DEFAULT '',
	sku           TEXT NOT NULL DEFAULT '',
	hostname      TEXT NOT NULL DEFAULT '',
	system_serial TEXT NOT NULL DEFAULT '',
	psids         TEXT NOT NULL DEFAULT '{}',
	labels        TEXT NOT NULL DEFAULT '{}',
	updated_at    INTEGER NOT NULL
);
CREATE TABLE node_macs (
	mac     TEXT PRIMARY KEY,              -- normalised: lowercase, colon-separated
	node_id TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
	pos     INTEGER NOT NULL               -- order as declared in the inventory
);
CREATE INDEX node_macs_node ON node_macs(node_id);

CREATE TABLE runs (
	id               TEXT PRIMARY KEY,
	node_id          TEXT NOT NULL REFERENCES nodes(id),
	mode             TEXT NOT NULL DEFAULT '',
	manifest         TEXT NOT NULL DEFAULT '',
	status           TEXT NOT NULL CHECK (status IN ('pending','running','succeeded','failed','attention','canceled')),
	phase            TEXT NOT NULL DEFAULT '',
	resume_count     INTEGER NOT NULL DEFAULT 0,
	phase_failures   INTEGER NOT NULL DEFAULT 0,
	disconnects      INTEGER NOT NULL DEFAULT 0,
	reboots          INTEGER NOT NULL DEFAULT 0,
	completed_phases TEXT NOT NULL DEFAULT '[]',
	started_at       INTEGER NOT NULL DEFAULT 0,
	ended_at         INTEGER NOT NULL DEFAULT 0,
	message          TEXT NOT NULL DEFAULT '',
	data             TEXT NOT NULL DEFAULT '{}',
	created_at       INTEGER NOT NULL
);
CREATE INDEX runs_node ON runs(node_id, created_at);
CREATE INDEX runs_status ON runs(status);

CREATE TABLE phases (
	run_id     TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	name       TEXT NOT NULL,
	status     TEXT NOT NULL CHECK (status IN ('running','ok','skipped','failed')),
	attempts   INTEGER NOT NULL DEFAULT 0,
	started_at INTEGER NOT NULL DEFAULT 0,
	ended_at   INTEGER NOT NULL DEFAULT 0,
	message    TEXT NOT NULL DEFAULT '',
	ord        INTEGER NOT NULL,            -- insertion order, tie-break for equal start times
	PRIMARY KEY (run_id, name)
);

CREATE TABLE events (
	id          INTEGER PRIMARY KEY AUTOINCREMENT, -- AUTOINCREMENT: ids are never reused
	run_id      TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	node_id     TEXT NOT NULL DEFAULT '',
	source      TEXT NOT NULL CHECK (source IN ('coordinator','runner','hostos')),
	boot_id     TEXT NOT NULL DEFAULT '',
	seq         INTEGER NOT NULL DEFAULT 0,
	time        INTEGER NOT NULL DEFAULT 0,
	phase       TEXT NOT NULL DEFAULT '',
	kind        TEXT NOT NULL CHECK (kind IN ('phase_start','phase_end','verdict','log','metric','run_end','info','host_ready','unknown')),
	status      TEXT NOT NULL DEFAULT '',
	message     TEXT NOT NULL DEFAULT '',
	duration_ms INTEGER NOT NULL DEFAULT 0,
	payload     BLOB
);
CREATE INDEX events_run ON events(run_id, id);
-- A runner replays unacked events after a reconnect: the same (run, source, boot, seq)
-- must land once.
CREATE UNIQUE INDEX events_dedup ON events(run_id, source, boot_id, seq) WHERE seq > 0;

CREATE TABLE verdicts (
	run_id     TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	component  TEXT NOT NULL,
	check_name TEXT NOT NULL,
	status     TEXT NOT NULL,
	observed   TEXT NOT NULL DEFAULT '',
	expected   TEXT NOT NULL DEFAULT '',
	message    TEXT NOT NULL DEFAULT '',
	time       INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (run_id, component, check_name)
);

CREATE TABLE boot_tokens (
	token   TEXT PRIMARY KEY,
	node_id TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
	run_id  TEXT NOT NULL DEFAULT '',
	expires INTEGER NOT NULL
);
CREATE INDEX boot_tokens_expires ON boot_tokens(expires);
`,
}

// SchemaVersion is the user_version a fully migrated database has.
var SchemaVersion = len(migrations)

func migrate(ctx context.Context, db *sql.DB) error {
	var v int
	if err := db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if v > len(migrations) {
		return fmt.Errorf("schema version %d is newer than this binary knows (%d): refusing to touch it", v, len(migrations))
	}
	for i := v; i < len(migrations); i++ {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("migration %d: begin: %w", i+1, err)
		}
		if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", i+1, err)
		}
		// PRAGMA takes no bind parameters; i is ours, not input.
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, i+1)); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: set user_version: %w", i+1, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migration %d: commit: %w", i+1, err)
		}
	}
	return nil
}
