import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { CompiledQuery, Kysely, SqliteDialect, sql, type Compilable } from 'kysely';
import type { Schema } from './schema.ts';
import { Listeners } from './listeners.ts';
import type { MetadataStore } from './db.ts';
import { MIGRATIONS } from './migrations.ts';

export interface SqliteOptions {
  /** How long a writer waits for another process (the admin CLI) to release the lock. */
  busyTimeoutMs?: number;
}

/**
 * Opens (and migrates) the SQLite metadata store in `file`. WAL lets readers proceed while one
 * writer commits, and lets the admin CLI work on the same file while the server runs;
 * synchronous=FULL makes every acknowledged commit survive a power cut, because an upload's
 * metadata commit is what makes the user's file visible.
 */
export async function openSqliteStore(file: string, options: SqliteOptions = {}): Promise<MetadataStore> {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const sqlite = new Database(file);
  sqlite.pragma('journal_mode = WAL');
  sqlite.pragma('synchronous = FULL');
  sqlite.pragma(`busy_timeout = ${options.busyTimeoutMs ?? 5000}`);
  sqlite.pragma('foreign_keys = ON');
  migrate(sqlite);
  let generation = 0;
  const statements = withStatementCache(sqlite, () => generation++);
  const commits = new CommitWatch(file, sqlite);
  const db = new Kysely<Schema>({ dialect: new SqliteDialect({ database: statements }) });
  // While a write transaction is open on the one connection, a direct read would see its
  // uncommitted rows: reads then take Kysely's way, which waits for the transaction to end.
  let writing = 0;
  const committed = new Listeners();
  const instance = crypto.randomUUID();
  return {
    dialect: 'sqlite',
    db,
    instance,
    location: file,
    // The home lock keeps every other server out: the only live doer of work is this process
    // (an admin command beside the server records none).
    isLive: async (holder) => holder?.split('#')[0] === instance,
    jsonText: (column, key) => sql<string | null>`json_extract(${sql.ref(column)}, ${sql.lit('$.' + key)})`,
    ping: async () => {
      statements.prepare('SELECT 1').get();
    },
    write: (fn, options) =>
      db.connection().execute(async (conn) => {
        writing++;
        const relaxed = options?.durable === false;
        try {
          // Set before the transaction begins, and set back once it ended (one connection:
          // nothing else runs on it meanwhile).
          if (relaxed) await sql`PRAGMA synchronous = NORMAL`.execute(conn);
          await sql`BEGIN IMMEDIATE`.execute(conn);
          try {
            const result = await fn(conn);
            await sql`COMMIT`.execute(conn);
            committed.emit();
            return result;
          } catch (err) {
            await sql`ROLLBACK`.execute(conn);
            throw err;
          }
        } finally {
          if (relaxed) await sql`PRAGMA synchronous = FULL`.execute(conn);
          writing--;
        }
      }),
    onCommit: (listener) => committed.add(listener),
    version: () => (writing > 0 ? `w${generation}` : `${generation}:${commits.count()}`),
    prepared<R>(query: Compilable<R>) {
      const compiled = query.compile();
      return async (params: readonly unknown[]) => {
        if (writing > 0) return (await db.executeQuery<R>(CompiledQuery.raw(compiled.sql, [...params]))).rows;
        return statements.prepare(compiled.sql).all(...params) as R[];
      };
    },
    async close() {
      await db.destroy();
      // Only once SQLite's connection is closed: see CommitWatch.
      commits.close();
    },
  };
}

/** The WAL index header: two copies of a 48-byte header at the start of the -shm file. */
const WAL_INDEX_HEADER_BYTES = 96;

/**
 * Counts commits by other connections (the admin CLI), read before every call (the hot-path
 * caches' version). SQLite rewrites the WAL index header in `<db>-shm` at every commit (its
 * change counter and frame count, and salts when the WAL restarts), and readers find new
 * commits through it; the page cache keeps that file coherent with SQLite's shared mapping.
 * One pread of it, compared with the last one, says whether anything was committed since,
 * where `PRAGMA data_version` opens a read transaction (two fcntl locks on that file). A read
 * torn by a commit under way only differs: a change is never missed. Where the file cannot be
 * read (not in WAL mode, an unusual VFS), data_version answers instead.
 *
 * The descriptor is closed only after SQLite's own connection: closing any descriptor of a file
 * drops every POSIX lock the process holds on it, SQLite's on the -shm file included (the one
 * that tells other processes a connection is using it), and another process would then
 * re-initialise the WAL index under our live connection. So a failed read leaves it open, unused.
 */
class CommitWatch {
  private readonly dataVersion: Database.Statement;
  private fd: number | undefined;
  /** False once reading the header failed: data_version answers from then on. */
  private usable = false;
  private readonly last = Buffer.alloc(WAL_INDEX_HEADER_BYTES);
  private readonly now = Buffer.alloc(WAL_INDEX_HEADER_BYTES);
  private changes = 0;

  constructor(file: string, sqlite: Database.Database) {
    this.dataVersion = sqlite.prepare('PRAGMA data_version').pluck();
    // Reading once makes SQLite open (and create) the WAL index; our connection keeps it.
    this.dataVersion.get();
    if (String(sqlite.pragma('journal_mode', { simple: true })).toLowerCase() !== 'wal') return;
    try {
      this.fd = fs.openSync(`${file}-shm`, 'r');
      this.usable = fs.readSync(this.fd, this.last, 0, WAL_INDEX_HEADER_BYTES, 0) === WAL_INDEX_HEADER_BYTES;
    } catch {
      this.usable = false;
    }
  }

  /** A value that changes whenever another connection has committed since it was last read. */
  count(): number | string {
    if (this.usable) {
      try {
        if (fs.readSync(this.fd!, this.now, 0, WAL_INDEX_HEADER_BYTES, 0) !== WAL_INDEX_HEADER_BYTES || !this.now.equals(this.last)) {
          this.now.copy(this.last);
          this.changes++;
        }
        return this.changes;
      } catch {
        this.usable = false;
      }
    }
    return `d${this.dataVersion.get() as number}`;
  }

  /** After SQLite's connection is closed, never before (see above). */
  close(): void {
    this.usable = false;
    if (this.fd !== undefined) fs.closeSync(this.fd);
    this.fd = undefined;
  }
}

/**
 * Kysely prepares every query anew; preparing costs more than running the indexed lookups a
 * request makes. Queries are built from a fixed set of shapes, so their SQL text repeats and
 * prepared statements can be reused (better-sqlite3 runs them synchronously, never two at once).
 */
function withStatementCache(sqlite: Database.Database, onWrite: () => void, max = 500) {
  const cache = new Map<string, Database.Statement>();
  return {
    close: () => sqlite.close(),
    prepare(sqlText: string): Database.Statement {
      let stmt = cache.get(sqlText);
      if (!stmt) {
        if (cache.size >= max) cache.clear();
        stmt = sqlite.prepare(sqlText);
        cache.set(sqlText, stmt);
      }
      // Kysely prepares right before it runs: a statement that writes (or begins, commits,
      // rolls back) changes the store's version.
      if (!stmt.reader) onWrite();
      return stmt;
    },
  };
}

/** Applies pending migrations under an immediate (write) lock, so two processes never race. */
function migrate(sqlite: Database.Database): void {
  const current = sqlite.pragma('user_version', { simple: true }) as number;
  if (current >= MIGRATIONS.length) return;
  sqlite.exec('BEGIN IMMEDIATE');
  try {
    const now = sqlite.pragma('user_version', { simple: true }) as number;
    for (let i = now; i < MIGRATIONS.length; i++) {
      sqlite.exec(MIGRATIONS[i]!.sqlite);
    }
    sqlite.pragma(`user_version = ${MIGRATIONS.length}`);
    sqlite.exec('COMMIT');
  } catch (err) {
    sqlite.exec('ROLLBACK');
    throw err;
  }
}

