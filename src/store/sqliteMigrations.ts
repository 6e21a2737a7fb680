/**
 * SQLite schema migrations, applied in order; `PRAGMA user_version` records how many ran.
 * Queries elsewhere go through Kysely and stay portable; only this DDL is dialect-specific
 * (a PostgreSQL adapter brings its own list with the same tables).
 */
export const SQLITE_MIGRATIONS: readonly string[] = [
  `
  CREATE TABLE users (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    username TEXT NOT NULL,
    username_lc TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL
  );
  CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    key_hash TEXT NOT NULL UNIQUE,
    prefix TEXT NOT NULL,
    permissions TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
  );
  CREATE UNIQUE INDEX api_keys_live_name ON api_keys(user_id, name) WHERE revoked_at IS NULL;
  CREATE INDEX api_keys_user ON api_keys(user_id);
  CREATE TABLE nodes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    owner_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    dir TEXT NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('dir', 'file')),
    acl TEXT,
    blob_id TEXT,
    size INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    modified_at INTEGER NOT NULL
  );
  CREATE UNIQUE INDEX nodes_path ON nodes(owner_id, dir, name);
  CREATE INDEX nodes_listing ON nodes(owner_id, dir, kind, name);
  CREATE INDEX nodes_blob ON nodes(blob_id) WHERE blob_id IS NOT NULL;
  CREATE TABLE pending_blobs (
    blob_id TEXT PRIMARY KEY,
    created_at INTEGER NOT NULL
  );
  CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
  );
  `,
  `
  CREATE TABLE algorithms (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    owner_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    name_lc TEXT NOT NULL,
    details TEXT NOT NULL,
    settings TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
  );
  CREATE UNIQUE INDEX algorithms_name ON algorithms(owner_id, name_lc);
  `,
  `
  ALTER TABLE algorithms ADD COLUMN source_hash TEXT;
  ALTER TABLE algorithms ADD COLUMN build_hash TEXT;
  CREATE TABLE builds (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    algorithm_id INTEGER NOT NULL REFERENCES algorithms(id) ON DELETE CASCADE,
    hash TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('building', 'succeeded', 'failed')),
    language TEXT NOT NULL,
    runner TEXT,
    entry TEXT,
    logs TEXT NOT NULL DEFAULT '',
    started_at INTEGER NOT NULL,
    finished_at INTEGER
  );
  CREATE UNIQUE INDEX builds_hash ON builds(algorithm_id, hash);
  CREATE TABLE versions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    algorithm_id INTEGER NOT NULL REFERENCES algorithms(id) ON DELETE CASCADE,
    build_id INTEGER NOT NULL REFERENCES builds(id),
    major INTEGER NOT NULL,
    minor INTEGER NOT NULL,
    patch INTEGER NOT NULL,
    callability TEXT NOT NULL CHECK (callability IN ('public', 'private')),
    release_notes TEXT NOT NULL DEFAULT '',
    sample_input TEXT,
    settings TEXT NOT NULL,
    created_at INTEGER NOT NULL
  );
  CREATE UNIQUE INDEX versions_number ON versions(algorithm_id, major, minor, patch);
  CREATE UNIQUE INDEX versions_build ON versions(algorithm_id, build_id);
  `,
  `
  CREATE TABLE connectors (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
    label TEXT NOT NULL,
    label_lc TEXT NOT NULL,
    protocol TEXT NOT NULL CHECK (protocol IN ('objstore', 'filehost')),
    provider TEXT NOT NULL,
    is_default INTEGER NOT NULL DEFAULT 0,
    path TEXT NOT NULL DEFAULT '*',
    writeable INTEGER NOT NULL DEFAULT 0,
    public_cred TEXT NOT NULL,
    sealed_cred TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
  );
  CREATE UNIQUE INDEX connectors_label ON connectors(user_id, label_lc);
  CREATE UNIQUE INDEX connectors_default ON connectors(user_id, protocol) WHERE is_default = 1;
  `,
  // What create and update were told about the next version (sample input, release notes):
  // the next publish uses it where its own version_info is silent.
  `
  ALTER TABLE algorithms ADD COLUMN version_info TEXT;
  `,
];
