package store

// The two migration lists as they stood before they became one list
// (migrations, rendered per dialect), frozen: TestMigrationsMatchLegacy
// builds databases with them, at every version, and migrates them forward
// with the one list, so a database an older binary created keeps working.
// Never edit these; a new migration goes only in migrations.

var oldSQLiteMigrations = []string{
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
	// 2: the trust model of docs/SECURITY.md. BMC TLS and password references;
	// boot tokens kept as hashes and bound to the boot that used them (the old
	// table held live tokens in clear: they are dropped, a waiting node PXE
	// boots again); per-run event accounting for the caps; the audit log.
	`
ALTER TABLE nodes ADD COLUMN bmc_password_ref TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN bmc_ca_file      TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN bmc_fingerprint  TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN bmc_insecure     INTEGER NOT NULL DEFAULT 0;

DROP TABLE boot_tokens;
CREATE TABLE boot_tokens (
	token_sha256   TEXT PRIMARY KEY,
	node_id        TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
	run_id         TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	window         TEXT NOT NULL,            -- boot window: one arming of PXE into CURE
	peer           TEXT NOT NULL DEFAULT '', -- IP address that fetched the iPXE script
	issued_at      INTEGER NOT NULL,
	expires        INTEGER NOT NULL,         -- for an unbound token; a bound one lives with its run
	state          TEXT NOT NULL CHECK (state IN ('issued','bound','revoked')),
	revoked_why    TEXT NOT NULL DEFAULT '', -- window: another token of the window was bound; stale: superseded
	boot_id        TEXT NOT NULL DEFAULT '',
	session_sha256 TEXT NOT NULL DEFAULT '',
	bound_at       INTEGER NOT NULL DEFAULT 0,
	bound_peer     TEXT NOT NULL DEFAULT ''
);
CREATE INDEX boot_tokens_run ON boot_tokens(run_id, window);
CREATE INDEX boot_tokens_node ON boot_tokens(node_id, issued_at);
CREATE INDEX boot_tokens_expires ON boot_tokens(expires);

CREATE TABLE run_usage (
	run_id   TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
	events   INTEGER NOT NULL DEFAULT 0,  -- runner events stored
	bytes    INTEGER NOT NULL DEFAULT 0,  -- their message and payload bytes
	dropped  INTEGER NOT NULL DEFAULT 0,  -- metrics and logs acked but not stored (cap)
	verdicts INTEGER NOT NULL DEFAULT 0   -- distinct (component, check) the runner reported
);

CREATE TABLE audit_log (
	id      INTEGER PRIMARY KEY AUTOINCREMENT,
	time    INTEGER NOT NULL,
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
`,
	// 3: fleet scale. Runs are leased by the coordinator instance driving
	// them (several instances may share a database); a node has at most one
	// active run, whichever instance starts it.
	`
ALTER TABLE runs ADD COLUMN owner       TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN lease_until INTEGER NOT NULL DEFAULT 0;
CREATE INDEX runs_lease ON runs(status, lease_until);
CREATE UNIQUE INDEX runs_one_active ON runs(node_id) WHERE status IN ('pending','running');
`,
	// 4: nodes at run time and the hardware they report. A node removed
	// while it has history keeps its row (removed_at) so its runs and
	// reports stay; its MACs, tokens and secrets go. Each boot's Hello
	// inventory is kept as protojson, cleaned and bounded by the server.
	`
ALTER TABLE nodes ADD COLUMN removed_at INTEGER NOT NULL DEFAULT 0;
CREATE TABLE inventories (
	id        INTEGER PRIMARY KEY AUTOINCREMENT,
	node_id   TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
	run_id    TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	boot_id   TEXT NOT NULL,
	time      INTEGER NOT NULL,
	peer      TEXT NOT NULL DEFAULT '',
	inventory TEXT NOT NULL,              -- protojson of cure.v1.Inventory
	truncated INTEGER NOT NULL DEFAULT 0  -- the server cut strings or lists to its bounds
);
CREATE UNIQUE INDEX inventories_boot ON inventories(run_id, boot_id);
CREATE INDEX inventories_node ON inventories(node_id, id);
`,
	// 5: a runner's session bounded like its events. Coordinator notes
	// (reconnect summaries, cap notices, session chatter) are marked, capped
	// per run and pruned with the runner's metrics and logs; a bound token
	// counts its boot's reconnects.
	`
ALTER TABLE events ADD COLUMN note INTEGER NOT NULL DEFAULT 0;          -- a coordinator note: capped, pruned
ALTER TABLE run_usage ADD COLUMN notes INTEGER NOT NULL DEFAULT 0;       -- coordinator notes stored
ALTER TABLE run_usage ADD COLUMN notes_dropped INTEGER NOT NULL DEFAULT 0; -- notes counted past the cap
ALTER TABLE boot_tokens ADD COLUMN reconnects INTEGER NOT NULL DEFAULT 0; -- sessions of the bound boot after its first
`,
	// 6: series sampled during a run (the BMC's sensors, the host's
	// telemetry), bounded per run and thinned per series; and what the
	// run's BMC showed at the end of its validate phase.
	`
CREATE TABLE series (
	run_id    TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	source    TEXT NOT NULL,              -- bmc, host, gpu
	component TEXT NOT NULL,
	metric    TEXT NOT NULL,
	unit      TEXT NOT NULL DEFAULT '',
	points    TEXT NOT NULL,              -- JSON {"t":[unix ms],"v":[values]}, time order
	thinned   INTEGER NOT NULL DEFAULT 0, -- points merged away to stay bounded
	PRIMARY KEY (run_id, source, component, metric)
);
CREATE TABLE run_bmc_evidence (
	run_id   TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
	time     INTEGER NOT NULL,
	evidence TEXT NOT NULL                -- protojson of cure.v1.BmcEvidence
);
`,
	// 7: a suite's heartbeats. The latest Progress per run (liveness, each
	// check's state, the ETA), replaced in place: a soak of days keeps one
	// row, not an event a minute.
	`
CREATE TABLE run_progress (
	run_id   TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
	boot_id  TEXT NOT NULL,
	seq      INTEGER NOT NULL,
	phase    TEXT NOT NULL DEFAULT '',
	time     INTEGER NOT NULL,            -- the runner's clock
	received INTEGER NOT NULL,            -- the coordinator's
	progress TEXT NOT NULL                -- protojson of cure.v1.Progress
);
`,
	// 8: fleet history. Every verdict's measurements (metric, value, unit)
	// with what the fleet bands select them by (SKU, check, metric, time;
	// the coordinator's clock), bounded per run (run_usage.measurements),
	// pruned by their own retention; and each run's fleet judgement
	// (protojson of cure.v1.FleetJudgements), kept with the run.
	`
CREATE TABLE measurements (
	run_id     TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	node_id    TEXT NOT NULL,
	sku        TEXT NOT NULL DEFAULT '',   -- the node's when the verdict arrived
	suite      TEXT NOT NULL DEFAULT '',   -- the run's manifest
	check_name TEXT NOT NULL,
	component  TEXT NOT NULL,
	metric     TEXT NOT NULL,
	value      REAL NOT NULL,
	unit       TEXT NOT NULL DEFAULT '',
	time       INTEGER NOT NULL,
	passed     INTEGER NOT NULL DEFAULT 0, -- its verdict passed (PASS): a fleet sample
	PRIMARY KEY (run_id, component, check_name, metric)
);
CREATE INDEX measurements_fleet ON measurements(sku, check_name, metric, time);
CREATE INDEX measurements_time ON measurements(time);
ALTER TABLE run_usage ADD COLUMN measurements INTEGER NOT NULL DEFAULT 0; -- measurement rows the run keeps
CREATE TABLE run_fleet (
	run_id     TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
	time       INTEGER NOT NULL,
	judgements TEXT NOT NULL
);
`,
	// 9: when a verdict's finding happened (a bar on a sampled series: the
	// first sample past it) and the suite stage it came from.
	`
ALTER TABLE verdicts ADD COLUMN at INTEGER NOT NULL DEFAULT 0;      -- unix ms; 0: the verdict's time
ALTER TABLE verdicts ADD COLUMN stage TEXT NOT NULL DEFAULT '';
`,
	// 10: the day-2 loop. A node's pool state (provisioner-lite/pool: no
	// row is "not in the pool") and the installed OS a provision left on
	// its disk: the hash of the callback token that OS proved it holds, so
	// a later service run (or a suite ending in the host OS) can verify
	// the OS's callback without writing the disk.
	`
CREATE TABLE node_pool (
	node_id     TEXT PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
	state       TEXT NOT NULL CHECK (state IN ('in_service','draining','drained','revalidating','ready','rma')),
	since       INTEGER NOT NULL,
	reason      TEXT NOT NULL DEFAULT '',
	actor       TEXT NOT NULL DEFAULT '',
	run_id      TEXT NOT NULL DEFAULT '',  -- the revalidation run
	auto_return INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE node_os (
	node_id      TEXT PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
	token_sha256 TEXT NOT NULL,             -- store.TokenHash of the token the OS called back with
	run_id       TEXT NOT NULL,             -- the provision that installed it
	installed_at INTEGER NOT NULL
);
`,
	// 11: a run's pipeline state typed, as one JSON document (PipelineState);
	// upgradeRunData fills it from the free-form keys of runs.data, which
	// is kept as it was and no longer read.
	`
ALTER TABLE runs ADD COLUMN pipeline TEXT NOT NULL DEFAULT '';
`,
	// 12: measured boot (attestation.go): each node's endorsement key
	// (trust on first use, or pinned by the nodes file), each boot's
	// attestation verdict, and each node's recorded firmware measurements
	// with a pending re-record when the pipeline changed its firmware.
	`
CREATE TABLE node_eks (
	node_id     TEXT PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
	ek_sha256   TEXT NOT NULL,
	source      TEXT NOT NULL CHECK (source IN ('tofu','pinned')),
	enrolled_at INTEGER NOT NULL,
	run_id      TEXT NOT NULL DEFAULT ''
);
CREATE TABLE boot_attestations (
	run_id    TEXT NOT NULL,
	boot_id   TEXT NOT NULL,
	node_id   TEXT NOT NULL,
	status    TEXT NOT NULL,
	detail    TEXT NOT NULL DEFAULT '',
	ek_sha256 TEXT NOT NULL DEFAULT '',
	time      INTEGER NOT NULL,
	PRIMARY KEY (run_id, boot_id)
);
CREATE TABLE firmware_pcrs (
	node_id        TEXT PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
	sku            TEXT NOT NULL DEFAULT '',
	firmware       TEXT NOT NULL DEFAULT '',
	pcrs           TEXT NOT NULL DEFAULT '{}',
	run_id         TEXT NOT NULL DEFAULT '',
	recorded_at    INTEGER NOT NULL DEFAULT 0,
	change_run     TEXT NOT NULL DEFAULT '',
	change_reason  TEXT NOT NULL DEFAULT ''
);
`,
	// run_fleet: the judgement to be made again (pipeline/fleet.go): its
	// SKU, why it is pending ('unbanded': a band lacked its minimum of
	// nodes; 'error': the judgement could not be made; '': final) and a
	// revision each write bumps, so two coordinators rejudging the same run
	// write once (compare-and-set).
	`
ALTER TABLE run_fleet ADD COLUMN sku TEXT NOT NULL DEFAULT '';
ALTER TABLE run_fleet ADD COLUMN pending TEXT NOT NULL DEFAULT '';
ALTER TABLE run_fleet ADD COLUMN rev INTEGER NOT NULL DEFAULT 0;
CREATE INDEX run_fleet_pending ON run_fleet(sku, pending, time);
`,
	// attest_challenges: issued attestation challenges, in the store so
	// that any coordinator instance judges the Hello of a boot another
	// issued the challenge to; single use by compare-and-set on used_at,
	// pruned once expired. The challenge's secret is kept as its sha256
	// only. firmware_pcrs' hold_*: a firmware measurement drift the
	// pipeline did not cause holds the node out of service until an
	// operator accepts the drifted values (kept in hold_pcrs) or the
	// pipeline reflashes it.
	`
CREATE TABLE attest_challenges (
	id            TEXT PRIMARY KEY,
	token_hash    TEXT NOT NULL,
	boot_id       TEXT NOT NULL,
	ek_public     BLOB NOT NULL,
	ek_cert       BLOB NOT NULL,
	ek_chain      BLOB NOT NULL,
	ak_public     BLOB NOT NULL,
	pcrs          TEXT NOT NULL DEFAULT '[]',
	nonce         BLOB NOT NULL,
	secret_sha256 TEXT NOT NULL,
	issued_at     INTEGER NOT NULL,
	expires_at    INTEGER NOT NULL,
	used_at       INTEGER NOT NULL DEFAULT 0,
	used_by       TEXT NOT NULL DEFAULT ''
);
CREATE INDEX attest_challenges_expiry ON attest_challenges(expires_at);
CREATE INDEX attest_challenges_issued ON attest_challenges(issued_at);
ALTER TABLE firmware_pcrs ADD COLUMN hold_run TEXT NOT NULL DEFAULT '';
ALTER TABLE firmware_pcrs ADD COLUMN hold_detail TEXT NOT NULL DEFAULT '';
ALTER TABLE firmware_pcrs ADD COLUMN hold_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE firmware_pcrs ADD COLUMN hold_pcrs TEXT NOT NULL DEFAULT '{}';
ALTER TABLE firmware_pcrs ADD COLUMN hold_firmware TEXT NOT NULL DEFAULT '';
`,
	// The join gate (provisioner-lite/admission): a node provisioned on a
	// SKU with spec.admission is accepting until admitted, or quarantined.
	// SQLite cannot alter a CHECK: the table is rebuilt.
	`
CREATE TABLE node_pool_new (
	node_id     TEXT PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
	state       TEXT NOT NULL CHECK (state IN ('in_service','draining','drained','revalidating','ready','rma','accepting','quarantined')),
	since       INTEGER NOT NULL,
	reason      TEXT NOT NULL DEFAULT '',
	actor       TEXT NOT NULL DEFAULT '',
	run_id      TEXT NOT NULL DEFAULT '',
	auto_return INTEGER NOT NULL DEFAULT 0
);
INSERT INTO node_pool_new SELECT node_id, state, since, reason, actor, run_id, auto_return FROM node_pool;
DROP TABLE node_pool;
ALTER TABLE node_pool_new RENAME TO node_pool;
`,
	// sku_pcrs: what a SKU's firmware version is known to produce, per
	// PCR (PCR 4 per image too), from the first node whose vetted boot
	// showed it: the pipeline's own flash is re-baselined against it.
	`
CREATE TABLE sku_pcrs (
	sku         TEXT NOT NULL,
	firmware    TEXT NOT NULL,
	pcr         INTEGER NOT NULL,
	image       TEXT NOT NULL DEFAULT '',
	value       TEXT NOT NULL,
	node_id     TEXT NOT NULL DEFAULT '',
	run_id      TEXT NOT NULL DEFAULT '',
	recorded_at INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (sku, firmware, pcr, image)
);
`,
}

var oldPostgresMigrations = []string{
	`
CREATE TABLE nodes (
	id TEXT PRIMARY KEY, bmc_url TEXT NOT NULL DEFAULT '', bmc_user TEXT NOT NULL DEFAULT '', bmc_password TEXT NOT NULL DEFAULT '',
	sku TEXT NOT NULL DEFAULT '', hostname TEXT NOT NULL DEFAULT '', system_serial TEXT NOT NULL DEFAULT '',
	psids TEXT NOT NULL DEFAULT '{}', labels TEXT NOT NULL DEFAULT '{}', updated_at BIGINT NOT NULL
);
CREATE TABLE node_macs (mac TEXT PRIMARY KEY, node_id TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE, pos INTEGER NOT NULL);
CREATE INDEX node_macs_node ON node_macs(node_id);
CREATE TABLE runs (
	rowid BIGINT GENERATED ALWAYS AS IDENTITY,
	id TEXT PRIMARY KEY, node_id TEXT NOT NULL REFERENCES nodes(id), mode TEXT NOT NULL DEFAULT '', manifest TEXT NOT NULL DEFAULT '',
	status TEXT NOT NULL CHECK (status IN ('pending','running','succeeded','failed','attention','canceled')),
	phase TEXT NOT NULL DEFAULT '', resume_count INTEGER NOT NULL DEFAULT 0, phase_failures INTEGER NOT NULL DEFAULT 0,
	disconnects INTEGER NOT NULL DEFAULT 0, reboots INTEGER NOT NULL DEFAULT 0, completed_phases TEXT NOT NULL DEFAULT '[]',
	started_at BIGINT NOT NULL DEFAULT 0, ended_at BIGINT NOT NULL DEFAULT 0, message TEXT NOT NULL DEFAULT '',
	data TEXT NOT NULL DEFAULT '{}', created_at BIGINT NOT NULL
);
CREATE INDEX runs_node ON runs(node_id, created_at);
CREATE INDEX runs_status ON runs(status);
CREATE TABLE phases (
	run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, name TEXT NOT NULL,
	status TEXT NOT NULL CHECK (status IN ('running','ok','skipped','failed')), attempts INTEGER NOT NULL DEFAULT 0,
	started_at BIGINT NOT NULL DEFAULT 0, ended_at BIGINT NOT NULL DEFAULT 0, message TEXT NOT NULL DEFAULT '', ord INTEGER NOT NULL,
	PRIMARY KEY (run_id, name)
);
CREATE TABLE events (
	id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, node_id TEXT NOT NULL DEFAULT '',
	source TEXT NOT NULL CHECK (source IN ('coordinator','runner','hostos')), boot_id TEXT NOT NULL DEFAULT '',
	seq BIGINT NOT NULL DEFAULT 0, time BIGINT NOT NULL DEFAULT 0, phase TEXT NOT NULL DEFAULT '',
	kind TEXT NOT NULL CHECK (kind IN ('phase_start','phase_end','verdict','log','metric','run_end','info','host_ready','unknown')),
	status TEXT NOT NULL DEFAULT '', message TEXT NOT NULL DEFAULT '', duration_ms BIGINT NOT NULL DEFAULT 0, payload BYTEA
);
CREATE INDEX events_run ON events(run_id, id);
CREATE UNIQUE INDEX events_dedup ON events(run_id, source, boot_id, seq) WHERE seq > 0;
CREATE TABLE verdicts (
	run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, component TEXT NOT NULL, check_name TEXT NOT NULL,
	status TEXT NOT NULL, observed TEXT NOT NULL DEFAULT '', expected TEXT NOT NULL DEFAULT '', message TEXT NOT NULL DEFAULT '',
	time BIGINT NOT NULL DEFAULT 0, PRIMARY KEY (run_id, component, check_name)
);
`,
	`
ALTER TABLE nodes ADD COLUMN bmc_password_ref TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN bmc_ca_file      TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN bmc_fingerprint  TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN bmc_insecure     BOOLEAN NOT NULL DEFAULT false;
CREATE TABLE boot_tokens (
	token_sha256 TEXT PRIMARY KEY, node_id TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
	run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, "window" TEXT NOT NULL, peer TEXT NOT NULL DEFAULT '',
	issued_at BIGINT NOT NULL, expires BIGINT NOT NULL, state TEXT NOT NULL CHECK (state IN ('issued','bound','revoked')),
	revoked_why TEXT NOT NULL DEFAULT '', boot_id TEXT NOT NULL DEFAULT '', session_sha256 TEXT NOT NULL DEFAULT '',
	bound_at BIGINT NOT NULL DEFAULT 0, bound_peer TEXT NOT NULL DEFAULT ''
);
CREATE INDEX boot_tokens_run ON boot_tokens(run_id, "window");
CREATE INDEX boot_tokens_node ON boot_tokens(node_id, issued_at);
CREATE INDEX boot_tokens_expires ON boot_tokens(expires);
CREATE TABLE run_usage (
	run_id TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE, events BIGINT NOT NULL DEFAULT 0, bytes BIGINT NOT NULL DEFAULT 0,
	dropped BIGINT NOT NULL DEFAULT 0, verdicts BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE audit_log (
	id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, time BIGINT NOT NULL,
	kind TEXT NOT NULL CHECK (kind IN ('operator','security')), actor TEXT NOT NULL DEFAULT '', role TEXT NOT NULL DEFAULT '',
	peer TEXT NOT NULL DEFAULT '', action TEXT NOT NULL DEFAULT '', nodes TEXT NOT NULL DEFAULT '[]', run_id TEXT NOT NULL DEFAULT '',
	result TEXT NOT NULL DEFAULT '', detail TEXT NOT NULL DEFAULT ''
);
CREATE INDEX audit_log_time ON audit_log(time);
`,
	`
ALTER TABLE runs ADD COLUMN owner       TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN lease_until BIGINT NOT NULL DEFAULT 0;
CREATE INDEX runs_lease ON runs(status, lease_until);
CREATE UNIQUE INDEX runs_one_active ON runs(node_id) WHERE status IN ('pending','running');
`,
	`
ALTER TABLE nodes ADD COLUMN removed_at BIGINT NOT NULL DEFAULT 0;
CREATE TABLE inventories (
	id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	node_id TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE, run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	boot_id TEXT NOT NULL, time BIGINT NOT NULL, peer TEXT NOT NULL DEFAULT '', inventory TEXT NOT NULL,
	truncated BOOLEAN NOT NULL DEFAULT false
);
CREATE UNIQUE INDEX inventories_boot ON inventories(run_id, boot_id);
CREATE INDEX inventories_node ON inventories(node_id, id);
`,
	`
ALTER TABLE events ADD COLUMN note BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE run_usage ADD COLUMN notes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE run_usage ADD COLUMN notes_dropped BIGINT NOT NULL DEFAULT 0;
ALTER TABLE boot_tokens ADD COLUMN reconnects BIGINT NOT NULL DEFAULT 0;
`,
	`
CREATE TABLE series (
	run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, source TEXT NOT NULL, component TEXT NOT NULL,
	metric TEXT NOT NULL, unit TEXT NOT NULL DEFAULT '', points TEXT NOT NULL, thinned BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (run_id, source, component, metric)
);
CREATE TABLE run_bmc_evidence (
	run_id TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE, time BIGINT NOT NULL, evidence TEXT NOT NULL
);
`,
	`
CREATE TABLE run_progress (
	run_id TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE, boot_id TEXT NOT NULL, seq BIGINT NOT NULL,
	phase TEXT NOT NULL DEFAULT '', time BIGINT NOT NULL, received BIGINT NOT NULL, progress TEXT NOT NULL
);
`,
	`
CREATE TABLE measurements (
	run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, node_id TEXT NOT NULL, sku TEXT NOT NULL DEFAULT '',
	suite TEXT NOT NULL DEFAULT '', check_name TEXT NOT NULL, component TEXT NOT NULL, metric TEXT NOT NULL,
	value DOUBLE PRECISION NOT NULL, unit TEXT NOT NULL DEFAULT '', time BIGINT NOT NULL, passed BOOLEAN NOT NULL DEFAULT false,
	PRIMARY KEY (run_id, component, check_name, metric)
);
CREATE INDEX measurements_fleet ON measurements(sku, check_name, metric, time);
CREATE INDEX measurements_time ON measurements(time);
ALTER TABLE run_usage ADD COLUMN measurements BIGINT NOT NULL DEFAULT 0;
CREATE TABLE run_fleet (run_id TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE, time BIGINT NOT NULL, judgements TEXT NOT NULL);
`,
	`
ALTER TABLE verdicts ADD COLUMN at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE verdicts ADD COLUMN stage TEXT NOT NULL DEFAULT '';
`,
	`
CREATE TABLE node_pool (
	node_id TEXT PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
	state TEXT NOT NULL CHECK (state IN ('in_service','draining','drained','revalidating','ready','rma')),
	since BIGINT NOT NULL, reason TEXT NOT NULL DEFAULT '', actor TEXT NOT NULL DEFAULT '', run_id TEXT NOT NULL DEFAULT '',
	auto_return BOOLEAN NOT NULL DEFAULT false
);
CREATE TABLE node_os (
	node_id TEXT PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE, token_sha256 TEXT NOT NULL, run_id TEXT NOT NULL,
	installed_at BIGINT NOT NULL
);
`,
	`
ALTER TABLE runs ADD COLUMN pipeline TEXT NOT NULL DEFAULT '';
`,
	`
CREATE TABLE node_eks (
	node_id     TEXT PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
	ek_sha256   TEXT NOT NULL,
	source      TEXT NOT NULL CHECK (source IN ('tofu','pinned')),
	enrolled_at BIGINT NOT NULL,
	run_id      TEXT NOT NULL DEFAULT ''
);
CREATE TABLE boot_attestations (
	run_id    TEXT NOT NULL,
	boot_id   TEXT NOT NULL,
	node_id   TEXT NOT NULL,
	status    TEXT NOT NULL,
	detail    TEXT NOT NULL DEFAULT '',
	ek_sha256 TEXT NOT NULL DEFAULT '',
	time      BIGINT NOT NULL,
	PRIMARY KEY (run_id, boot_id)
);
CREATE TABLE firmware_pcrs (
	node_id        TEXT PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
	sku            TEXT NOT NULL DEFAULT '',
	firmware       TEXT NOT NULL DEFAULT '',
	pcrs           TEXT NOT NULL DEFAULT '{}',
	run_id         TEXT NOT NULL DEFAULT '',
	recorded_at    BIGINT NOT NULL DEFAULT 0,
	change_run     TEXT NOT NULL DEFAULT '',
	change_reason  TEXT NOT NULL DEFAULT ''
);
`,
	`
ALTER TABLE run_fleet ADD COLUMN sku TEXT NOT NULL DEFAULT '';
ALTER TABLE run_fleet ADD COLUMN pending TEXT NOT NULL DEFAULT '';
ALTER TABLE run_fleet ADD COLUMN rev BIGINT NOT NULL DEFAULT 0;
CREATE INDEX run_fleet_pending ON run_fleet(sku, pending, time);
`,
	`
CREATE TABLE attest_challenges (
	id TEXT PRIMARY KEY, token_hash TEXT NOT NULL, boot_id TEXT NOT NULL,
	ek_public BYTEA NOT NULL, ek_cert BYTEA NOT NULL, ek_chain BYTEA NOT NULL, ak_public BYTEA NOT NULL,
	pcrs TEXT NOT NULL DEFAULT '[]', nonce BYTEA NOT NULL, secret_sha256 TEXT NOT NULL,
	issued_at BIGINT NOT NULL, expires_at BIGINT NOT NULL, used_at BIGINT NOT NULL DEFAULT 0, used_by TEXT NOT NULL DEFAULT ''
);
CREATE INDEX attest_challenges_expiry ON attest_challenges(expires_at);
CREATE INDEX attest_challenges_issued ON attest_challenges(issued_at);
ALTER TABLE firmware_pcrs ADD COLUMN hold_run TEXT NOT NULL DEFAULT '';
ALTER TABLE firmware_pcrs ADD COLUMN hold_detail TEXT NOT NULL DEFAULT '';
ALTER TABLE firmware_pcrs ADD COLUMN hold_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE firmware_pcrs ADD COLUMN hold_pcrs TEXT NOT NULL DEFAULT '{}';
ALTER TABLE firmware_pcrs ADD COLUMN hold_firmware TEXT NOT NULL DEFAULT '';
`,
	`
ALTER TABLE node_pool DROP CONSTRAINT node_pool_state_check;
ALTER TABLE node_pool ADD CONSTRAINT node_pool_state_check
	CHECK (state IN ('in_service','draining','drained','revalidating','ready','rma','accepting','quarantined'));
`,
	// sku_pcrs: what a SKU's firmware version is known to produce, per
	// PCR (PCR 4 per image too), from the first node whose vetted boot
	// showed it: the pipeline's own flash is re-baselined against it.
	`
CREATE TABLE sku_pcrs (
	sku         TEXT NOT NULL,
	firmware    TEXT NOT NULL,
	pcr         INTEGER NOT NULL,
	image       TEXT NOT NULL DEFAULT '',
	value       TEXT NOT NULL,
	node_id     TEXT NOT NULL DEFAULT '',
	run_id      TEXT NOT NULL DEFAULT '',
	recorded_at BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (sku, firmware, pcr, image)
);
`,
}
