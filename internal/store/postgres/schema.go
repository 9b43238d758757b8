package postgres

// migrations[i] takes the schema from version i to version i+1. Append only:
// a released migration never changes. The first is the whole schema of
// SQLite's eleven (internal/store/sqlite/schema.go), in PostgreSQL's
// types: timestamps are nanoseconds since the epoch (BIGINT), as there.
var migrations = []string{
	`CREATE TABLE identity (id TEXT NOT NULL);
	INSERT INTO identity (id) VALUES (left(encode(sha256((random()::text || clock_timestamp()::text)::bytea), 'hex'), 16));

	CREATE TABLE tenants (
		name               TEXT PRIMARY KEY,
		max_sandboxes      BIGINT NOT NULL DEFAULT 0,
		max_memory         BIGINT NOT NULL DEFAULT 0,
		max_cpu_millis     BIGINT NOT NULL DEFAULT 0,
		max_disk           BIGINT NOT NULL DEFAULT 0,
		max_snapshot_bytes BIGINT NOT NULL DEFAULT 0,
		created_at         BIGINT NOT NULL,
		updated_at         BIGINT NOT NULL
	);
	INSERT INTO tenants (name, created_at, updated_at)
		VALUES ('default', (extract(epoch FROM now()) * 1000000000)::bigint, (extract(epoch FROM now()) * 1000000000)::bigint);

	CREATE TABLE sandboxes (
		id            TEXT PRIMARY KEY,
		tenant        TEXT NOT NULL,
		name          TEXT NOT NULL,
		request_id    TEXT,
		spec          TEXT NOT NULL,
		desired_state TEXT NOT NULL,
		phase         TEXT NOT NULL,
		generation    BIGINT NOT NULL,
		reason        TEXT NOT NULL DEFAULT '',
		exit_code     BIGINT,
		restarts      BIGINT NOT NULL DEFAULT 0,
		created_at    BIGINT NOT NULL,
		updated_at    BIGINT NOT NULL,
		deadline      BIGINT NOT NULL,
		revision      BIGINT NOT NULL,
		memory        BIGINT NOT NULL DEFAULT 0,
		cpu_millis    BIGINT NOT NULL DEFAULT 0,
		disk          BIGINT NOT NULL DEFAULT 0,
		pause_memory  BOOLEAN NOT NULL DEFAULT false,
		UNIQUE (tenant, name),
		UNIQUE (tenant, request_id)
	);
	CREATE INDEX sandboxes_by_name ON sandboxes (name);

	CREATE TABLE operations (
		id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		sandbox_id  TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
		kind        TEXT NOT NULL,
		state       TEXT NOT NULL,
		owner       TEXT NOT NULL,
		attempt     BIGINT NOT NULL,
		generation  BIGINT NOT NULL,
		started_at  BIGINT NOT NULL,
		deadline    BIGINT NOT NULL CHECK (deadline > 0),
		finished_at BIGINT,
		error       TEXT NOT NULL DEFAULT '',
		detail      TEXT NOT NULL DEFAULT '',
		actor       TEXT NOT NULL DEFAULT ''
	);
	CREATE INDEX operations_by_sandbox ON operations (sandbox_id, id);
	CREATE INDEX operations_pending ON operations (state) WHERE state = 'pending';

	CREATE TABLE gateway_events (
		id      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		at      BIGINT NOT NULL,
		kind    TEXT NOT NULL,
		subject TEXT NOT NULL,
		detail  TEXT NOT NULL DEFAULT ''
	);

	CREATE TABLE exposed_ports (
		sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
		port       BIGINT NOT NULL,
		address    TEXT NOT NULL UNIQUE,
		created_at BIGINT NOT NULL,
		PRIMARY KEY (sandbox_id, port)
	);

	CREATE TABLE pools (
		tenant     TEXT NOT NULL,
		name       TEXT NOT NULL,
		size       BIGINT NOT NULL CHECK (size > 0),
		spec       TEXT NOT NULL,
		created_at BIGINT NOT NULL,
		PRIMARY KEY (tenant, name)
	);

	CREATE TABLE secrets (
		tenant      TEXT NOT NULL,
		name        TEXT NOT NULL,
		sealed      BYTEA NOT NULL,
		fingerprint TEXT NOT NULL,
		created_at  BIGINT NOT NULL,
		updated_at  BIGINT NOT NULL,
		PRIMARY KEY (tenant, name)
	);

	CREATE TABLE credential_uses (
		seq        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		tenant     TEXT NOT NULL DEFAULT 'default',
		secret     TEXT NOT NULL,
		credential TEXT NOT NULL,
		sandbox_id TEXT NOT NULL,
		sandbox    TEXT NOT NULL,
		time       BIGINT NOT NULL,
		host       TEXT NOT NULL,
		port       BIGINT NOT NULL,
		method     TEXT NOT NULL,
		path       TEXT NOT NULL,
		verdict    TEXT NOT NULL,
		reason     TEXT NOT NULL,
		status     BIGINT NOT NULL
	);
	CREATE INDEX credential_uses_by_secret ON credential_uses (tenant, secret, seq);

	CREATE TABLE egress_denials (
		seq        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		sandbox_id TEXT NOT NULL,
		sandbox    TEXT NOT NULL,
		time       BIGINT NOT NULL,
		host       TEXT NOT NULL,
		port       BIGINT NOT NULL,
		addr       TEXT NOT NULL,
		method     TEXT NOT NULL,
		path       TEXT NOT NULL,
		verdict    TEXT NOT NULL,
		policy     TEXT NOT NULL,
		reason     TEXT NOT NULL
	);
	CREATE INDEX egress_denials_by_sandbox ON egress_denials (sandbox_id, seq);

	CREATE TABLE tokens (
		id         TEXT PRIMARY KEY,
		name       TEXT NOT NULL UNIQUE,
		tenant     TEXT NOT NULL,
		role       TEXT NOT NULL,
		hash       BYTEA NOT NULL UNIQUE,
		created_at BIGINT NOT NULL,
		expires_at BIGINT NOT NULL,
		revoked_at BIGINT
	);

	CREATE TABLE snapshots (
		id          TEXT PRIMARY KEY,
		tenant      TEXT NOT NULL,
		name        TEXT NOT NULL,
		state       TEXT NOT NULL,
		source      TEXT NOT NULL,
		source_name TEXT NOT NULL,
		spec        TEXT NOT NULL,
		manifest    TEXT NOT NULL,
		files       BIGINT NOT NULL,
		bytes       BIGINT NOT NULL,
		paused      TEXT NOT NULL,
		created_at  BIGINT NOT NULL,
		UNIQUE (tenant, name)
	);`,
	// The replicas of the store (replicas.go): each gateway's row, beaten
	// every second, and the lease of the one that holds the store, whose
	// epoch grows with every new holder and is on every journal entry.
	`CREATE TABLE replicas (
		id         TEXT PRIMARY KEY,
		pid        BIGINT NOT NULL,
		host       TEXT NOT NULL,
		home       TEXT NOT NULL,
		listen     TEXT NOT NULL DEFAULT '',
		started_at BIGINT NOT NULL,
		seen_at    BIGINT NOT NULL
	);
	CREATE TABLE lease (
		one    BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
		epoch  BIGINT NOT NULL,
		holder TEXT NOT NULL,
		since  BIGINT NOT NULL
	);
	INSERT INTO lease (epoch, holder, since) VALUES (0, '', 0);
	ALTER TABLE operations ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0;`,
}

// SchemaVersion is the schema version this build writes.
var SchemaVersion = len(migrations)
