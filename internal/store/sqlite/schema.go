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
}

// SchemaVersion is the schema version this build writes.
var SchemaVersion = len(migrations)
