package sqlite

// migrations[i] takes the schema from version i to version i+1. Append only:
// a released migration never changes.
var migrations = []string{
	`CREATE TABLE sandboxes (
		id            TEXT PRIMARY KEY,
		name          TEXT NOT NULL UNIQUE,
		request_id    TEXT UNIQUE,
		spec          TEXT NOT NULL,
		desired_state TEXT NOT NULL,
		phase         TEXT NOT NULL,
		generation    INTEGER NOT NULL,
		reason        TEXT NOT NULL DEFAULT '',
		exit_code     INTEGER,
		restarts      INTEGER NOT NULL DEFAULT 0,
		created_at    INTEGER NOT NULL,
		updated_at    INTEGER NOT NULL,
		deadline      INTEGER NOT NULL,
		revision      INTEGER NOT NULL
	);
	CREATE TABLE operations (
		id          INTEGER PRIMARY KEY AUTOINCREMENT,
		sandbox_id  TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
		kind        TEXT NOT NULL,
		state       TEXT NOT NULL,
		owner       TEXT NOT NULL,
		attempt     INTEGER NOT NULL,
		generation  INTEGER NOT NULL,
		started_at  INTEGER NOT NULL,
		deadline    INTEGER NOT NULL CHECK (deadline > 0),
		finished_at INTEGER,
		error       TEXT NOT NULL DEFAULT '',
		detail      TEXT NOT NULL DEFAULT ''
	);
	CREATE INDEX operations_by_sandbox ON operations(sandbox_id, id);
	CREATE INDEX operations_pending ON operations(state) WHERE state = 'pending';`,

	`CREATE TABLE gateway_events (
		id      INTEGER PRIMARY KEY AUTOINCREMENT,
		at      INTEGER NOT NULL,
		kind    TEXT NOT NULL,
		subject TEXT NOT NULL,
		detail  TEXT NOT NULL DEFAULT ''
	);`,

	`CREATE TABLE exposed_ports (
		sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
		port       INTEGER NOT NULL,
		address    TEXT NOT NULL UNIQUE,
		created_at INTEGER NOT NULL,
		PRIMARY KEY (sandbox_id, port)
	);`,

	`CREATE TABLE pools (
		name       TEXT PRIMARY KEY,
		size       INTEGER NOT NULL CHECK (size > 0),
		spec       TEXT NOT NULL,
		created_at INTEGER NOT NULL
	);`,

	// The store's identity: the gateway's, on every compute object it
	// makes, made once with the store.
	`CREATE TABLE identity (id TEXT NOT NULL);
	INSERT INTO identity (id) VALUES (lower(hex(randomblob(8))));`,

	// Secrets: their values sealed by the gateway's keyring (the key is a
	// file of the home, not in the store).
	`CREATE TABLE secrets (
		name        TEXT PRIMARY KEY,
		sealed      BLOB NOT NULL,
		fingerprint TEXT NOT NULL,
		created_at  INTEGER NOT NULL,
		updated_at  INTEGER NOT NULL
	);`,

	// The egress proxies' ledgers: each use of a credential (and each
	// refusal of its placeholder), kept by secret; each refused or audited
	// connection or request, kept by sandbox. Both bounded, oldest out.
	`CREATE TABLE credential_uses (
		seq        INTEGER PRIMARY KEY AUTOINCREMENT,
		secret     TEXT NOT NULL,
		credential TEXT NOT NULL,
		sandbox_id TEXT NOT NULL,
		sandbox    TEXT NOT NULL,
		time       INTEGER NOT NULL,
		host       TEXT NOT NULL,
		port       INTEGER NOT NULL,
		method     TEXT NOT NULL,
		path       TEXT NOT NULL,
		verdict    TEXT NOT NULL,
		reason     TEXT NOT NULL,
		status     INTEGER NOT NULL
	);
	CREATE INDEX credential_uses_by_secret ON credential_uses (secret, seq);
	CREATE TABLE egress_denials (
		seq        INTEGER PRIMARY KEY AUTOINCREMENT,
		sandbox_id TEXT NOT NULL,
		sandbox    TEXT NOT NULL,
		time       INTEGER NOT NULL,
		host       TEXT NOT NULL,
		port       INTEGER NOT NULL,
		addr       TEXT NOT NULL,
		method     TEXT NOT NULL,
		path       TEXT NOT NULL,
		verdict    TEXT NOT NULL,
		policy     TEXT NOT NULL,
		reason     TEXT NOT NULL
	);
	CREATE INDEX egress_denials_by_sandbox ON egress_denials (sandbox_id, seq);`,

	// Tenants: every sandbox, pool, secret (and so its ledger) belongs to
	// one, and names are unique within a tenant. What existed moves into
	// "default". Tables whose keys change are rebuilt (the migration runs
	// with foreign keys off, checked before it commits).
	`CREATE TABLE tenants (
		name           TEXT PRIMARY KEY,
		max_sandboxes  INTEGER NOT NULL DEFAULT 0,
		max_memory     INTEGER NOT NULL DEFAULT 0,
		max_cpu_millis INTEGER NOT NULL DEFAULT 0,
		max_disk       INTEGER NOT NULL DEFAULT 0,
		created_at     INTEGER NOT NULL,
		updated_at     INTEGER NOT NULL
	);
	INSERT INTO tenants (name, created_at, updated_at)
		VALUES ('default', unixepoch() * 1000000000, unixepoch() * 1000000000);

	CREATE TABLE sandboxes_new (
		id            TEXT PRIMARY KEY,
		tenant        TEXT NOT NULL,
		name          TEXT NOT NULL,
		request_id    TEXT,
		spec          TEXT NOT NULL,
		desired_state TEXT NOT NULL,
		phase         TEXT NOT NULL,
		generation    INTEGER NOT NULL,
		reason        TEXT NOT NULL DEFAULT '',
		exit_code     INTEGER,
		restarts      INTEGER NOT NULL DEFAULT 0,
		created_at    INTEGER NOT NULL,
		updated_at    INTEGER NOT NULL,
		deadline      INTEGER NOT NULL,
		revision      INTEGER NOT NULL,
		memory        INTEGER NOT NULL DEFAULT 0,
		cpu_millis    INTEGER NOT NULL DEFAULT 0,
		disk          INTEGER NOT NULL DEFAULT 0,
		UNIQUE (tenant, name),
		UNIQUE (tenant, request_id)
	);
	INSERT INTO sandboxes_new (id, tenant, name, request_id, spec, desired_state, phase, generation, reason,
		exit_code, restarts, created_at, updated_at, deadline, revision)
		SELECT id, 'default', name, request_id, spec, desired_state, phase, generation, reason,
		exit_code, restarts, created_at, updated_at, deadline, revision FROM sandboxes;
	DROP TABLE sandboxes;
	ALTER TABLE sandboxes_new RENAME TO sandboxes;
	CREATE INDEX sandboxes_by_name ON sandboxes (name);

	ALTER TABLE operations ADD COLUMN actor TEXT NOT NULL DEFAULT '';

	CREATE TABLE pools_new (
		tenant     TEXT NOT NULL,
		name       TEXT NOT NULL,
		size       INTEGER NOT NULL CHECK (size > 0),
		spec       TEXT NOT NULL,
		created_at INTEGER NOT NULL,
		PRIMARY KEY (tenant, name)
	);
	INSERT INTO pools_new SELECT 'default', name, size, spec, created_at FROM pools;
	DROP TABLE pools;
	ALTER TABLE pools_new RENAME TO pools;

	CREATE TABLE secrets_new (
		tenant      TEXT NOT NULL,
		name        TEXT NOT NULL,
		sealed      BLOB NOT NULL,
		fingerprint TEXT NOT NULL,
		created_at  INTEGER NOT NULL,
		updated_at  INTEGER NOT NULL,
		PRIMARY KEY (tenant, name)
	);
	INSERT INTO secrets_new SELECT 'default', name, sealed, fingerprint, created_at, updated_at FROM secrets;
	DROP TABLE secrets;
	ALTER TABLE secrets_new RENAME TO secrets;

	ALTER TABLE credential_uses ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
	DROP INDEX credential_uses_by_secret;
	CREATE INDEX credential_uses_by_secret ON credential_uses (tenant, secret, seq);

	CREATE TABLE tokens (
		id         TEXT PRIMARY KEY,
		name       TEXT NOT NULL UNIQUE,
		tenant     TEXT NOT NULL,
		role       TEXT NOT NULL,
		hash       BLOB NOT NULL UNIQUE,
		created_at INTEGER NOT NULL,
		expires_at INTEGER NOT NULL,
		revoked_at INTEGER
	);`,

	// Snapshots: their metadata; the content is in the snapshot store,
	// by digest.
	`CREATE TABLE snapshots (
		id          TEXT PRIMARY KEY,
		tenant      TEXT NOT NULL,
		name        TEXT NOT NULL,
		state       TEXT NOT NULL,
		source      TEXT NOT NULL,
		source_name TEXT NOT NULL,
		spec        TEXT NOT NULL,
		manifest    TEXT NOT NULL,
		files       INTEGER NOT NULL,
		bytes       INTEGER NOT NULL,
		paused      TEXT NOT NULL,
		created_at  INTEGER NOT NULL,
		UNIQUE (tenant, name)
	);`,

	// A tenant's quota bounds its snapshots' bytes too.
	`ALTER TABLE tenants ADD COLUMN max_snapshot_bytes INTEGER NOT NULL DEFAULT 0;`,

	// A paused sandbox's pause checkpointed its memory out (pause --memory).
	`ALTER TABLE sandboxes ADD COLUMN pause_memory INTEGER NOT NULL DEFAULT 0;`,

	// A journal entry's epoch: the lease's of the gateway that wrote it
	// (0 where one gateway holds the store by its home's lock).
	`ALTER TABLE operations ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;`,
}

// SchemaVersion is the schema version this build writes.
var SchemaVersion = len(migrations)
