package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// A migration takes the schema from version i to i+1, on SQLite and
// PostgreSQL alike: one list, the SQL written once. Where the databases
// spell a type differently the SQL names it by a placeholder each dialect
// renders (schemaTypes):
//
//	{bigint}  INTEGER on SQLite; BIGINT on PostgreSQL (times in unix ms, counters)
//	{bool}    INTEGER (0/1); BOOLEAN, with {false} its zero
//	{real}    REAL; DOUBLE PRECISION
//	{blob}    BLOB; BYTEA
//	{serial}  INTEGER PRIMARY KEY AUTOINCREMENT (ids never reused); an identity column
//	{rowid}   nothing (SQLite's implicit rowid); an explicit identity column
//	          (runs: the rowid breaks ties in run order)
//
// INTEGER stays INTEGER on both. "window" is quoted (reserved in
// PostgreSQL). The few statements the dialects cannot share go in sqlite
// and postgres instead of sql.
type migration struct {
	sql string
	// sqlite and postgres replace sql on their dialect.
	sqlite, postgres string
}

// render is m's SQL for dialect d.
func (m migration) render(d dialect) string {
	q := m.sql
	switch {
	case d.name == sqliteDialect.name && m.sqlite != "":
		q = m.sqlite
	case d.name == postgresDialect.name && m.postgres != "":
		q = m.postgres
	}
	return schemaTypes[d.name].Replace(q)
}

// schemaTypes renders the type placeholders of migrations, per dialect.
var schemaTypes = map[string]*strings.Replacer{
	"sqlite": strings.NewReplacer("{bigint}", "INTEGER", "{bool}", "INTEGER", "{false}", "0", "{real}", "REAL",
		"{blob}", "BLOB", "{serial}", "INTEGER PRIMARY KEY AUTOINCREMENT", "{rowid}", ""),
	"postgres": strings.NewReplacer("{bigint}", "BIGINT", "{bool}", "BOOLEAN", "{false}", "false", "{real}", "DOUBLE PRECISION",
		"{blob}", "BYTEA", "{serial}", "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", "{rowid}", "rowid BIGINT GENERATED ALWAYS AS IDENTITY,"),
}

// migrations[i] takes the schema from version i to i+1 (SQLite's
// user_version, PostgreSQL's schema_version). Append only: a released
// migration is never edited, so every database converges on one schema.
var migrations = []migration{
	// 1: initial schema. Times are UTC unix milliseconds (0 = unset); maps and
	// lists are JSON text.
	{sql: `
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
	updated_at    {bigint} NOT NULL
);
CREATE TABLE node_macs (
	mac     TEXT PRIMARY KEY,              -- normalised: lowercase, colon-separated
	node_id TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
	pos     INTEGER NOT NULL               -- order as declared in the inventory
);
CREATE INDEX node_macs_node ON node_macs(node_id);

CREATE TABLE runs (
	{rowid}
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
	started_at       {bigint} NOT NULL DEFAULT 0,
	ended_at         {bigint} NOT NULL DEFAULT 0,
	message          TEXT NOT NULL DEFAULT '',
	data             TEXT NOT NULL DEFAULT '{}',
	created_at       {bigint} NOT NULL
);
CREATE INDEX runs_node ON runs(node_id, created_at);
CREATE INDEX runs_status ON runs(status);

CREATE TABLE phases (
	run_id     TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	name       TEXT NOT NULL,
	status     TEXT NOT NULL CHECK (status IN ('running','ok','skipped','failed')),
	attempts   INTEGER NOT NULL DEFAULT 0,
	started_at {bigint} NOT NULL DEFAULT 0,
	ended_at   {bigint} NOT NULL DEFAULT 0,
	message    TEXT NOT NULL DEFAULT '',
	ord        INTEGER NOT NULL,            -- insertion order, tie-break for equal start times
	PRIMARY KEY (run_id, name)
);

CREATE TABLE events (
	id          {serial}, -- AUTOINCREMENT: ids are never reused
	run_id      TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	node_id     TEXT NOT NULL DEFAULT '',
	source      TEXT NOT NULL CHECK (source IN ('coordinator','runner','hostos')),
	boot_id     TEXT NOT NULL DEFAULT '',
	seq         {bigint} NOT NULL DEFAULT 0,
	time        {bigint} NOT NULL DEFAULT 0,
	phase       TEXT NOT NULL DEFAULT '',
	kind        TEXT NOT NULL CHECK (kind IN ('phase_start','phase_end','verdict','log','metric','run_end','info','host_ready','unknown')),
	status      TEXT NOT NULL DEFAULT '',
	message     TEXT NOT NULL DEFAULT '',
	duration_ms {bigint} NOT NULL DEFAULT 0,
	payload     {blob}
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
	time       {bigint} NOT NULL DEFAULT 0,
	PRIMARY KEY (run_id, component, check_name)
);

CREATE TABLE boot_tokens (
	token   TEXT PRIMARY KEY,
	node_id TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
	run_id  TEXT NOT NULL DEFAULT '',
	expires {bigint} NOT NULL
);
CREATE INDEX boot_tokens_expires ON boot_tokens(expires);
`},
	// 2: the trust model of docs/SECURITY.md. BMC TLS and password references;
	// boot tokens kept as hashes and bound to the boot that used them (the old
	// table held live tokens in clear: they are dropped, a waiting node PXE
	// boots again); per-run event accounting for the caps; the audit log.
	{sql: `
ALTER TABLE nodes ADD COLUMN bmc_password_ref TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN bmc_ca_file      TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN bmc_fingerprint  TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN bmc_insecure     {bool} NOT NULL DEFAULT {false};

DROP TABLE IF EXISTS boot_tokens; -- created by migration 1, only on SQLite before they were one list
CREATE TABLE boot_tokens (
	token_sha256   TEXT PRIMARY KEY,
	node_id        TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
	run_id         TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	"window"       TEXT NOT NULL,            -- boot window: one arming of PXE into CURE
	peer           TEXT NOT NULL DEFAULT '', -- IP address that fetched the iPXE script
	issued_at      {bigint} NOT NULL,
	expires        {bigint} NOT NULL,         -- for an unbound token; a bound one lives with its run
	state          TEXT NOT NULL CHECK (state IN ('issued','bound','revoked')),
	revoked_why    TEXT NOT NULL DEFAULT '', -- window: another token of the window was bound; stale: superseded
	boot_id        TEXT NOT NULL DEFAULT '',
	session_sha256 TEXT NOT NULL DEFAULT '',
	bound_at       {bigint} NOT NULL DEFAULT 0,
	bound_peer     TEXT NOT NULL DEFAULT ''
);
CREATE INDEX boot_tokens_run ON boot_tokens(run_id, "window");
CREATE INDEX boot_tokens_node ON boot_tokens(node_id, issued_at);
CREATE INDEX boot_tokens_expires ON boot_tokens(expires);

CREATE TABLE run_usage (
	run_id   TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
	events   {bigint} NOT NULL DEFAULT 0,  -- runner events stored
	bytes    {bigint} NOT NULL DEFAULT 0,  -- their message and payload bytes
	dropped  {bigint} NOT NULL DEFAULT 0,  -- metrics and logs acked but not stored (cap)
	verdicts {bigint} NOT NULL DEFAULT 0   -- distinct (component, check) the runner reported
);

CREATE TABLE audit_log (
	id      {serial},
	time    {bigint} NOT NULL,
	kind    TEXT NOT NULL CHECK (kind IN ('operator','security')),
	actor   TEXT NOT NULL DEFAULT '',   -- operator name, or the node a runner claimed
	role    TEXT NOT NULL DEFAULT '',
	peer    TEXT NOT NULL DEFAULT '',
	action  TEXT NOT NULL DEFAULT '',   -- gRPC method, or the security event
	nodes   TEXT NOT NULL DEFAULT '[]',
	run_id  TEXT NOT NULL DEFAULT '',
	result  TEXT NOT NULL DEFAULT '',
	detail  TEXT NOT NULL DEFAULT ''
);
CREATE INDEX audit_log_time ON audit_log(time);
`},
	// 3: fleet scale. Runs are leased by the coordinator instance driving
	// them (several instances may share a database); a node has at most one
	// active run, whichever instance starts it.
	{sql: `
ALTER TABLE runs ADD COLUMN owner       TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN lease_until {bigint} NOT NULL DEFAULT 0;
CREATE INDEX runs_lease ON runs(status, lease_until);
CREATE UNIQUE INDEX runs_one_active ON runs(node_id) WHERE status IN ('pending','running');
`},
	// 4: nodes at run time and the hardware they report. A node removed
	// while it has history keeps its row (removed_at) so its runs and
	// reports stay; its MACs, tokens and secrets go. Each boot's Hello
	// inventory is kept as protojson, cleaned and bounded by the server.
	{sql: `
ALTER TABLE nodes ADD COLUMN removed_at {bigint} NOT NULL DEFAULT 0;
CREATE TABLE inventories (
	id        {serial},
	node_id   TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
	run_id    TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	boot_id   TEXT NOT NULL,
	time      {bigint} NOT NULL,
	peer      TEXT NOT NULL DEFAULT '',
	inventory TEXT NOT NULL,              -- protojson of cure.v1.Inventory
	truncated {bool} NOT NULL DEFAULT {false}  -- the server cut strings or lists to its bounds
);
CREATE UNIQUE INDEX inventories_boot ON inventories(run_id, boot_id);
CREATE INDEX inventories_node ON inventories(node_id, id);
`},
	// 5: a runner's session bounded like its events. Coordinator notes
	// (reconnect summaries, cap notices, session chatter) are marked, capped
	// per run and pruned with the runner's metrics and logs; a bound token
	// counts its boot's reconnects.
	{sql: `
ALTER TABLE events ADD COLUMN note {bool} NOT NULL DEFAULT {false};          -- a coordinator note: capped, pruned
ALTER TABLE run_usage ADD COLUMN notes {bigint} NOT NULL DEFAULT 0;       -- coordinator notes stored
ALTER TABLE run_usage ADD COLUMN notes_dropped {bigint} NOT NULL DEFAULT 0; -- notes counted past the cap
ALTER TABLE boot_tokens ADD COLUMN reconnects {bigint} NOT NULL DEFAULT 0; -- sessions of the bound boot after its first
`},
	// 6: series sampled during a run (the BMC's sensors, the host's
	// telemetry), bounded per run and thinned per series; and what the
	// run's BMC showed at the end of its validate phase.
	{sql: `
CREATE TABLE series (
	run_id    TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	source    TEXT NOT NULL,              -- bmc, host, gpu
	component TEXT NOT NULL,
	metric    TEXT NOT NULL,
	unit      TEXT NOT NULL DEFAULT '',
	points    TEXT NOT NULL,              -- JSON {"t":[unix ms],"v":[values]}, time order
	thinned   {bigint} NOT NULL DEFAULT 0, -- points merged away to stay bounded
	PRIMARY KEY (run_id, source, component, metric)
);
CREATE TABLE run_bmc_evidence (
	run_id   TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
	time     {bigint} NOT NULL,
	evidence TEXT NOT NULL                -- protojson of cure.v1.BmcEvidence
);
`},
	// 7: a suite's heartbeats. The latest Progress per run (liveness, each
	// check's state, the ETA), replaced in place: a soak of days keeps one
	// row, not an event a minute.
	{sql: `
CREATE TABLE run_progress (
	run_id   TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
	boot_id  TEXT NOT NULL,
	seq      {bigint} NOT NULL,
	phase    TEXT NOT NULL DEFAULT '',
	time     {bigint} NOT NULL,            -- the runner's clock
	received {bigint} NOT NULL,            -- the coordinator's
	progress TEXT NOT NULL                -- protojson of cure.v1.Progress
);
`},
	// 8: fleet history. Every verdict's measurements (metric, value, unit)
	// with what the fleet bands select them by (SKU, check, metric, time;
	// the coordinator's clock), bounded per run (run_usage.measurements),
	// pruned by their own retention; and each run's fleet judgement
	// (protojson of cure.v1.FleetJudgements), kept with the run.
	{sql: `
CREATE TABLE measurements (
	run_id     TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	node_id    TEXT NOT NULL,
	sku        TEXT NOT NULL DEFAULT '',   -- the node's when the verdict arrived
	suite      TEXT NOT NULL DEFAULT '',   -- the run's manifest
	check_name TEXT NOT NULL,
	component  TEXT NOT NULL,
	metric     TEXT NOT NULL,
	value      {real} NOT NULL,
	unit       TEXT NOT NULL DEFAULT '',
	time       {bigint} NOT NULL,
	passed     {bool} NOT NULL DEFAULT {false}, -- its verdict passed (PASS): a fleet sample
	PRIMARY KEY (run_id, component, check_name, metric)
);
CREATE INDEX measurements_fleet ON measurements(sku, check_name, metric, time);
CREATE INDEX measurements_time ON measurements(time);
ALTER TABLE run_usage ADD COLUMN measurements {bigint} NOT NULL DEFAULT 0; -- measurement rows the run keeps
CREATE TABLE run_fleet (
	run_id     TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
	time       {bigint} NOT NULL,
	judgements TEXT NOT NULL
);
`},
	// 9: when a verdict's finding happened (a bar on a sampled series: the
	// first sample past it) and the suite stage it came from.
	{sql: `
ALTER TABLE verdicts ADD COLUMN at {bigint} NOT NULL DEFAULT 0;      -- unix ms; 0: the verdict's time
ALTER TABLE verdicts ADD COLUMN stage TEXT NOT NULL DEFAULT '';
`},
	// 10: the day-2 loop. A node's pool state (provisioner-lite/pool: no
	// row is "not in the pool") and the installed OS a provision left on
	// its disk: the hash of the callback token that OS proved it holds, so
	// a later service run (or a suite ending in the host OS) can verify
	// the OS's callback without writing the disk.
	{sql: `
CREATE TABLE node_pool (
	node_id     TEXT PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
	state       TEXT NOT NULL CHECK (state IN ('in_service','draining','drained','revalidating','ready','rma')),
	since       {bigint} NOT NULL,
	reason      TEXT NOT NULL DEFAULT '',
	actor       TEXT NOT NULL DEFAULT '',
	run_id      TEXT NOT NULL DEFAULT '',  -- the revalidation run
	auto_return {bool} NOT NULL DEFAULT {false}
);
CREATE TABLE node_os (
	node_id      TEXT PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
	token_sha256 TEXT NOT NULL,             -- store.TokenHash of the token the OS called back with
	run_id       TEXT NOT NULL,             -- the provision that installed it
	installed_at {bigint} NOT NULL
);
`},
	// 11: a run's pipeline state typed, as one JSON document (PipelineState);
	// upgradeRunData fills it from the free-form keys of runs.data, which
	// is kept as it was and no longer read.
	{sql: `
ALTER TABLE runs ADD COLUMN pipeline TEXT NOT NULL DEFAULT '';
`},
	// 12: measured boot (attestation.go): each node's endorsement key
	// (trust on first use, or pinned by the nodes file), each boot's
	// attestation verdict, and each node's recorded firmware measurements
	// with a pending re-record when the pipeline changed its firmware.
	{sql: `
CREATE TABLE node_eks (
	node_id     TEXT PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
	ek_sha256   TEXT NOT NULL,
	source      TEXT NOT NULL CHECK (source IN ('tofu','pinned')),
	enrolled_at {bigint} NOT NULL,
	run_id      TEXT NOT NULL DEFAULT ''
);
CREATE TABLE boot_attestations (
	run_id    TEXT NOT NULL,
	boot_id   TEXT NOT NULL,
	node_id   TEXT NOT NULL,
	status    TEXT NOT NULL,
	detail    TEXT NOT NULL DEFAULT '',
	ek_sha256 TEXT NOT NULL DEFAULT '',
	time      {bigint} NOT NULL,
	PRIMARY KEY (run_id, boot_id)
);
CREATE TABLE firmware_pcrs (
	node_id        TEXT PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
	sku            TEXT NOT NULL DEFAULT '',
	firmware       TEXT NOT NULL DEFAULT '',
	pcrs           TEXT NOT NULL DEFAULT '{}',
	run_id         TEXT NOT NULL DEFAULT '',
	recorded_at    {bigint} NOT NULL DEFAULT 0,
	change_run     TEXT NOT NULL DEFAULT '',
	change_reason  TEXT NOT NULL DEFAULT ''
);
`},
	// run_fleet: the judgement to be made again (pipeline/fleet.go): its
	// SKU, why it is pending ('unbanded': a band lacked its minimum of
	// nodes; 'error': the judgement could not be made; '': final) and a
	// revision each write bumps, so two coordinators rejudging the same run
	// write once (compare-and-set).
	{sql: `
ALTER TABLE run_fleet ADD COLUMN sku TEXT NOT NULL DEFAULT '';
ALTER TABLE run_fleet ADD COLUMN pending TEXT NOT NULL DEFAULT '';
ALTER TABLE run_fleet ADD COLUMN rev {bigint} NOT NULL DEFAULT 0;
CREATE INDEX run_fleet_pending ON run_fleet(sku, pending, time);
`},
	// attest_challenges: issued attestation challenges, in the store so
	// that any coordinator instance judges the Hello of a boot another
	// issued the challenge to; single use by compare-and-set on used_at,
	// pruned once expired. The challenge's secret is kept as its sha256
	// only. firmware_pcrs' hold_*: a firmware measurement drift the
	// pipeline did not cause holds the node out of service until an
	// operator accepts the drifted values (kept in hold_pcrs) or the
	// pipeline reflashes it.
	{sql: `
CREATE TABLE attest_challenges (
	id            TEXT PRIMARY KEY,
	token_hash    TEXT NOT NULL,
	boot_id       TEXT NOT NULL,
	ek_public     {blob} NOT NULL,
	ek_cert       {blob} NOT NULL,
	ek_chain      {blob} NOT NULL,
	ak_public     {blob} NOT NULL,
	pcrs          TEXT NOT NULL DEFAULT '[]',
	nonce         {blob} NOT NULL,
	secret_sha256 TEXT NOT NULL,
	issued_at     {bigint} NOT NULL,
	expires_at    {bigint} NOT NULL,
	used_at       {bigint} NOT NULL DEFAULT 0,
	used_by       TEXT NOT NULL DEFAULT ''
);
CREATE INDEX attest_challenges_expiry ON attest_challenges(expires_at);
CREATE INDEX attest_challenges_issued ON attest_challenges(issued_at);
ALTER TABLE firmware_pcrs ADD COLUMN hold_run TEXT NOT NULL DEFAULT '';
ALTER TABLE firmware_pcrs ADD COLUMN hold_detail TEXT NOT NULL DEFAULT '';
ALTER TABLE firmware_pcrs ADD COLUMN hold_at {bigint} NOT NULL DEFAULT 0;
ALTER TABLE firmware_pcrs ADD COLUMN hold_pcrs TEXT NOT NULL DEFAULT '{}';
ALTER TABLE firmware_pcrs ADD COLUMN hold_firmware TEXT NOT NULL DEFAULT '';
`},
	// The join gate (provisioner-lite/admission): a node provisioned on a
	// SKU with spec.admission is accepting until admitted, or quarantined.
	// SQLite cannot alter a CHECK: its table is rebuilt; PostgreSQL
	// replaces the constraint.
	{sqlite: `
CREATE TABLE node_pool_new (
	node_id     TEXT PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
	state       TEXT NOT NULL CHECK (state IN ('in_service','draining','drained','revalidating','ready','rma','accepting','quarantined')),
	since       {bigint} NOT NULL,
	reason      TEXT NOT NULL DEFAULT '',
	actor       TEXT NOT NULL DEFAULT '',
	run_id      TEXT NOT NULL DEFAULT '',
	auto_return {bool} NOT NULL DEFAULT {false}
);
INSERT INTO node_pool_new SELECT node_id, state, since, reason, actor, run_id, auto_return FROM node_pool;
DROP TABLE node_pool;
ALTER TABLE node_pool_new RENAME TO node_pool;
`, postgres: `
ALTER TABLE node_pool DROP CONSTRAINT node_pool_state_check;
ALTER TABLE node_pool ADD CONSTRAINT node_pool_state_check
	CHECK (state IN ('in_service','draining','drained','revalidating','ready','rma','accepting','quarantined'));
`},
	// sku_pcrs: what a SKU's firmware version is known to produce, per
	// PCR (PCR 4 per image too), from the first node whose vetted boot
	// showed it: the pipeline's own flash is re-baselined against it.
	{sql: `
CREATE TABLE sku_pcrs (
	sku         TEXT NOT NULL,
	firmware    TEXT NOT NULL,
	pcr         INTEGER NOT NULL,
	image       TEXT NOT NULL DEFAULT '',
	value       TEXT NOT NULL,
	node_id     TEXT NOT NULL DEFAULT '',
	run_id      TEXT NOT NULL DEFAULT '',
	recorded_at {bigint} NOT NULL DEFAULT 0,
	PRIMARY KEY (sku, firmware, pcr, image)
);
`},
	// Several instances behind one address (instances.go): the instance
	// registry (each instance's artifact base URL, the manifest bundle it
	// runs, its last heartbeat), named leases (one holder at a time: the
	// proxy DHCP/TFTP front door) and the manifest bundles every instance
	// loads, versioned.
	{sql: `
CREATE TABLE instances (
	id               TEXT PRIMARY KEY,
	artifact_url     TEXT NOT NULL DEFAULT '',
	manifest_version {bigint} NOT NULL DEFAULT 0,
	started_at       {bigint} NOT NULL DEFAULT 0,
	seen_at          {bigint} NOT NULL DEFAULT 0
);
CREATE TABLE named_leases (
	name   TEXT PRIMARY KEY,
	holder TEXT NOT NULL DEFAULT '',
	held_since {bigint} NOT NULL DEFAULT 0,
	held_until {bigint} NOT NULL DEFAULT 0
);
CREATE TABLE manifest_bundles (
	version    {serial},
	sha256     TEXT NOT NULL,
	files      TEXT NOT NULL,
	pushed_by  TEXT NOT NULL DEFAULT '',
	created_at {bigint} NOT NULL
);
`},
	// Enlistment (discovered.go): machines with unknown MACs that booted
	// CURE in inspect mode (--enlist), each with its discovery token's
	// digest and its report, until an operator approves it into a node.
	{sql: `
CREATE TABLE discovered (
	id            TEXT PRIMARY KEY,
	mac           TEXT NOT NULL UNIQUE,
	peer          TEXT NOT NULL DEFAULT '',
	arch          TEXT NOT NULL DEFAULT '',
	token_hash    TEXT NOT NULL DEFAULT '',
	token_expires {bigint} NOT NULL DEFAULT 0,
	state         TEXT NOT NULL CHECK (state IN ('booted','reported','approved')),
	report        {blob},
	node_id       TEXT NOT NULL DEFAULT '',
	first_seen    {bigint} NOT NULL,
	reported_at   {bigint} NOT NULL DEFAULT 0
);
CREATE INDEX discovered_token ON discovered(token_hash);
`},
	// The site's cabling map (nodes file `cabling:`): per port of the node,
	// the switch and switch port LLDP must show there; JSON, {} when none.
	{sql: `
ALTER TABLE nodes ADD COLUMN cabling TEXT NOT NULL DEFAULT '{}';
`},
}

// migrationSteps are the data conversions SQL cannot express, by the schema
// version whose migration they complete; each runs in that migration's
// transaction, after its SQL, on SQLite and PostgreSQL alike.
var migrationSteps = map[int]func(ctx context.Context, tx *sql.Tx, rebind func(string) string) error{
	pipelineSchema: upgradeRunData,
}

// SchemaVersion is the user_version a fully migrated database has.
var SchemaVersion = len(migrations)

func migrate(ctx context.Context, db *sql.DB) error { return migrateTo(ctx, db, len(migrations)) }

// migrateTo applies the migrations up to schema version target (tests build
// databases of older versions with it).
func migrateTo(ctx context.Context, db *sql.DB, target int) error {
	var v int
	if err := db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if v > len(migrations) {
		return fmt.Errorf("schema version %d is newer than this binary knows (%d): refusing to touch it", v, len(migrations))
	}
	for i := v; i < target; i++ {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("migration %d: begin: %w", i+1, err)
		}
		if _, err := tx.ExecContext(ctx, migrations[i].render(sqliteDialect)); err != nil {
			tx.Rollback()
			return fmt.Errorf("migration %d: %w", i+1, err)
		}
		if step := migrationSteps[i+1]; step != nil {
			if err := step(ctx, tx, sqliteDialect.rebind); err != nil {
				tx.Rollback()
				return fmt.Errorf("migration %d: %w", i+1, err)
			}
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
