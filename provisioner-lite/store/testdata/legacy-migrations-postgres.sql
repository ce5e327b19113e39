-- The postgres migrations as they stood before the store's two lists became one
-- (frozen: TestMigrationsMatchLegacy builds databases with them). Never edit.
-- cure:migration 1

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

-- cure:migration 2

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

-- cure:migration 3

ALTER TABLE runs ADD COLUMN owner       TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN lease_until BIGINT NOT NULL DEFAULT 0;
CREATE INDEX runs_lease ON runs(status, lease_until);
CREATE UNIQUE INDEX runs_one_active ON runs(node_id) WHERE status IN ('pending','running');

-- cure:migration 4

ALTER TABLE nodes ADD COLUMN removed_at BIGINT NOT NULL DEFAULT 0;
CREATE TABLE inventories (
	id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	node_id TEXT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE, run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
	boot_id TEXT NOT NULL, time BIGINT NOT NULL, peer TEXT NOT NULL DEFAULT '', inventory TEXT NOT NULL,
	truncated BOOLEAN NOT NULL DEFAULT false
);
CREATE UNIQUE INDEX inventories_boot ON inventories(run_id, boot_id);
CREATE INDEX inventories_node ON inventories(node_id, id);

-- cure:migration 5

ALTER TABLE events ADD COLUMN note BOOLEAN NOT NULL DEFAULT false;
ALTER TABLE run_usage ADD COLUMN notes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE run_usage ADD COLUMN notes_dropped BIGINT NOT NULL DEFAULT 0;
ALTER TABLE boot_tokens ADD COLUMN reconnects BIGINT NOT NULL DEFAULT 0;

-- cure:migration 6

CREATE TABLE series (
	run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE, source TEXT NOT NULL, component TEXT NOT NULL,
	metric TEXT NOT NULL, unit TEXT NOT NULL DEFAULT '', points TEXT NOT NULL, thinned BIGINT NOT NULL DEFAULT 0,
	PRIMARY KEY (run_id, source, component, metric)
);
CREATE TABLE run_bmc_evidence (
	run_id TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE, time BIGINT NOT NULL, evidence TEXT NOT NULL
);

-- cure:migration 7

CREATE TABLE run_progress (
	run_id TEXT PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE, boot_id TEXT NOT NULL, seq BIGINT NOT NULL,
	phase TEXT NOT NULL DEFAULT '', time BIGINT NOT NULL, received BIGINT NOT NULL, progress TEXT NOT NULL
);

-- cure:migration 8

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

-- cure:migration 9

ALTER TABLE verdicts ADD COLUMN at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE verdicts ADD COLUMN stage TEXT NOT NULL DEFAULT '';

-- cure:migration 10

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

-- cure:migration 11

ALTER TABLE runs ADD COLUMN pipeline TEXT NOT NULL DEFAULT '';

-- cure:migration 12

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

-- cure:migration 13

ALTER TABLE run_fleet ADD COLUMN sku TEXT NOT NULL DEFAULT '';
ALTER TABLE run_fleet ADD COLUMN pending TEXT NOT NULL DEFAULT '';
ALTER TABLE run_fleet ADD COLUMN rev BIGINT NOT NULL DEFAULT 0;
CREATE INDEX run_fleet_pending ON run_fleet(sku, pending, time);

-- cure:migration 14

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

-- cure:migration 15

ALTER TABLE node_pool DROP CONSTRAINT node_pool_state_check;
ALTER TABLE node_pool ADD CONSTRAINT node_pool_state_check
	CHECK (state IN ('in_service','draining','drained','revalidating','ready','rma','accepting','quarantined'));

-- cure:migration 16

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

