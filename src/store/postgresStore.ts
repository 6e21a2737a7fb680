import crypto from 'node:crypto';
import os from 'node:os';
import pg from 'pg';
import { CompiledQuery, Kysely, PostgresDialect, sql, type Compilable } from 'kysely';
import { AppError } from '../errors.ts';
import { ConfigError } from '../config.ts';
import type { Schema } from './schema.ts';
import type { MetadataStore } from './db.ts';
import { CHANGE_NOTICES, MIGRATIONS } from './migrations.ts';
import { redactUrl } from './redact.ts';
import { Listeners } from './listeners.ts';

export interface PostgresOptions {
  /** postgres://user:password@host:port/database (ALGOHOST_DATABASE_URL). */
  url: string;
  /** Connections in the pool (ALGOHOST_DATABASE_POOL). */
  poolSize?: number;
  /** Run pending migrations at open (serve does; `algohost migrate` is the same, alone). */
  migrate?: boolean;
}

/** Advisory lock keys are (namespace, key) pairs; ours are in this namespace ("algo"). */
const LOCK_NAMESPACE = 0x616c676f;
/** Key of the lock migrations run under, and of the one every `write` takes. */
const MIGRATION_LOCK = 0;
const WRITE_LOCK = 1;

/**
 * The notice connection proves it is still hearing every commit by answering a query this
 * often; when its last answer is older than STALE_AFTER_MS, version() stops vouching for the
 * caches (a change might have gone unheard), so no cached key or target outlives a change by
 * more than about a second, even when the connection died without a word.
 */
const HEARTBEAT_MS = 250;
const STALE_AFTER_MS = 750;
const RECONNECT_MS = 500;

const INT8 = 20;
const NUMERIC = 1700;
/**
 * Integers are stored as BIGINT (milliseconds, byte sizes) and come back as strings by
 * default; every one we store fits a JS number exactly (below 2^53), so they come back as
 * numbers, as SQLite's do. COUNT(*) and SUM() are BIGINT and NUMERIC.
 */
const TYPES = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    oid === INT8 || oid === NUMERIC ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format ?? 'text')) as typeof pg.types.getTypeParser,
};

/** Errors that say the database cannot be reached now (not that a query was wrong). */
function isConnectionError(err: unknown): boolean {
  const e = err as { code?: string; message?: string } | null;
  const code = e?.code ?? '';
  if (/^(08|57P0)/.test(code) || ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN'].includes(code)) return true;
  const message = e?.message ?? '';
  return /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|Connection terminated unexpectedly/.test(message);
}

function unavailable(err: unknown): AppError {
  return new AppError('metadata_unavailable', 'the metadata database is not answering; try again shortly', undefined, err);
}

/** What a person does about a database that refuses us at start, as one line. */
function startError(url: string, err: unknown): ConfigError {
  const e = err as { code?: string; message?: string };
  const where = `ALGOHOST_DATABASE_URL (${redactUrl(url)})`;
  switch (e.code) {
    case '28P01':
    case '28000':
      return new ConfigError(`${where}: the database refused the user name or password (${e.message})`);
    case '3D000':
      return new ConfigError(`${where}: ${e.message}; create it (createdb) or name another database`);
    case 'ECONNREFUSED':
      return new ConfigError(`${where}: nothing answers at that address (connection refused); is PostgreSQL running there?`);
    case 'ENOTFOUND':
    case 'EAI_AGAIN':
      return new ConfigError(`${where}: the host name does not resolve`);
    default:
      return new ConfigError(`${where}: cannot use the database: ${e.message ?? String(err)}`);
  }
}

function holderKey(instance: string): number {
  return crypto.createHash('sha256').update(instance).digest().readInt32BE(0);
}

const READ = /^\s*(select|show)\b/i;

/**
 * The metadata store on PostgreSQL, shared by every server of a deployment.
 *
 * - Writers exclude each other as SQLite's do: `write` takes a transaction-scoped advisory
 *   lock first. Metadata transactions are short (an upload's commit, a publish), so one at a
 *   time across the cluster costs little and keeps every read-then-write correct.
 * - Caches stay coherent through LISTEN/NOTIFY: tables the hot path caches carry a trigger
 *   that notifies `algohost_changes` at commit (migrations.ts); one connection per server
 *   listens and bumps the version, and its heartbeat bounds how long a change can go unheard.
 * - The same connection holds a session advisory lock named after this process's instance:
 *   while it is held the process is alive (isLive), and PostgreSQL drops it when the process
 *   or its connection dies, however it dies.
 */
export async function openPostgresStore(options: PostgresOptions): Promise<MetadataStore> {
  const url = options.url;
  // Safe in a `-c` option: no spaces, no quotes.
  const committed = new Listeners();
  const instance = `${os.hostname().replace(/[^\w.-]/g, '_')}:${process.pid}:${crypto.randomBytes(6).toString('hex')}`;
  const config: pg.PoolConfig = {
    connectionString: url,
    max: options.poolSize ?? 10,
    connectionTimeoutMillis: 5_000,
    keepAlive: true,
    types: TYPES,
    application_name: 'algohost',
    // Names this server in its commits' change notices (migrations.ts), so it skips its own.
    options: `-c algohost.instance=${instance}`,
  };
  // At start a database that refuses us is the operator's to fix: one line, naming the setting.
  const probe = new pg.Client(config);
  try {
    await probe.connect();
    if (options.migrate !== false) await migrate(probe);
  } catch (err) {
    await probe.end().catch(() => undefined);
    if (err instanceof ConfigError) throw err;
    throw startError(url, err);
  }
  await probe.end();

  let generation = 0;
  const pool = new pg.Pool(config);
  // An idle client that loses its connection emits here; the pool drops it and makes another.
  pool.on('error', () => undefined);
  const notices = new ChangeNotices(config, instance, holderKey(instance), () => generation++);
  await notices.start();

  const guarded: { connect(): Promise<pg.PoolClient>; end(): Promise<void> } = {
    async connect() {
      let client: pg.PoolClient;
      try {
        client = await pool.connect();
      } catch (err) {
        throw isConnectionError(err) ? unavailable(err) : err;
      }
      // The pool listens for its idle clients' errors only. One held here (by a transaction,
      // between its statements) whose connection is lost emits 'error' with no query on it, which
      // unheard would end the process: heard here, its next statement fails (unavailable) and
      // the pool drops it when it is released.
      client.on('error', ignoreLost);
      return wrapClient(client, () => generation++);
    },
    end: () => pool.end(),
  };
  const db = new Kysely<Schema>({ dialect: new PostgresDialect({ pool: guarded }) });
  let closed = false;
  return {
    dialect: 'postgres',
    db,
    instance,
    location: redactUrl(url),
    poolStats: () => ({ total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount }),
    write: async (fn, options) => {
      const result = await db.transaction().execute(async (trx) => {
        await sql`SELECT pg_advisory_xact_lock(${sql.lit(LOCK_NAMESPACE)}, ${sql.lit(WRITE_LOCK)})`.execute(trx);
        if (options?.durable === false) await sql`SET LOCAL synchronous_commit = off`.execute(trx);
        return fn(trx);
      });
      committed.emit();
      return result;
    },
    onCommit: (listener) => committed.add(listener),
    prepared<R>(query: Compilable<R>) {
      const compiled = query.compile();
      return async (params: readonly unknown[]) => (await db.executeQuery<R>(CompiledQuery.raw(compiled.sql, [...params]))).rows;
    },
    version: () => notices.version(generation),
    jsonText: (column, key) => sql<string | null>`(${sql.ref(column)}::jsonb ->> ${sql.lit(key)})`,
    async isLive(recorded) {
      // `<instance>#<what>` is work an instance claimed (a sweep): alive as the instance is.
      const holder = recorded?.split('#')[0];
      if (holder === instance) return true;
      if (holder === undefined || holder === '') return false;
      // Free only when nobody holds it: released at once, with the implicit transaction.
      const r = await sql<{ free: boolean }>`SELECT pg_try_advisory_xact_lock(${sql.lit(LOCK_NAMESPACE + 1)}, ${holderKey(holder)}) AS free`.execute(db);
      return !r.rows[0]!.free;
    },
    async ping() {
      await sql`SELECT 1`.execute(db);
    },
    async close() {
      if (closed) return;
      closed = true;
      await notices.stop();
      await db.destroy();
    },
  };
}

/**
 * Pool clients as Kysely sees them: a statement that is not a read changes the version before
 * it runs and again once it is done (a cached read that overlapped it is then not kept), and
 * a lost connection becomes `metadata_unavailable` (503) instead of a bare driver error.
 */
function wrapClient(client: pg.PoolClient, onWrite: () => void) {
  return {
    async query(text: string, values: readonly unknown[]) {
      const writes = !READ.test(text);
      if (writes) onWrite();
      try {
        return await client.query(text, values as unknown[]);
      } catch (err) {
        throw isConnectionError(err) ? unavailable(err) : err;
      } finally {
        if (writes) onWrite();
      }
    },
    release: () => {
      client.off('error', ignoreLost);
      client.release();
    },
  } as unknown as pg.PoolClient;
}

/** A held client's connection lost (see guarded.connect): its next statement says so. */
const ignoreLost = () => undefined;

/** Runs pending migration steps, once, however many servers start together. */
async function migrate(client: pg.Client): Promise<void> {
  await client.query('SELECT pg_advisory_lock($1, $2)', [LOCK_NAMESPACE, MIGRATION_LOCK]);
  try {
    await client.query('CREATE TABLE IF NOT EXISTS algohost_schema (version INTEGER NOT NULL)');
    const r = await client.query<{ version: number }>('SELECT version FROM algohost_schema');
    let version = r.rows[0]?.version ?? 0;
    if (r.rows.length === 0) await client.query('INSERT INTO algohost_schema (version) VALUES (0)');
    if (version > MIGRATIONS.length) {
      throw new ConfigError(`ALGOHOST_DATABASE_URL: the database's schema (step ${version}) is newer than this algohost knows (${MIGRATIONS.length}); upgrade algohost`);
    }
    for (; version < MIGRATIONS.length; version++) {
      await client.query('BEGIN');
      try {
        await client.query(MIGRATIONS[version]!.postgres);
        await client.query('UPDATE algohost_schema SET version = $1', [version + 1]);
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK');
        throw err;
      }
    }
  } finally {
    await client.query('SELECT pg_advisory_unlock($1, $2)', [LOCK_NAMESPACE, MIGRATION_LOCK]).catch(() => undefined);
  }
}

/**
 * One connection that LISTENs for commits of other servers and holds this process's instance
 * lock. While it is down, or has not proved itself within STALE_AFTER_MS, version() differs at
 * every read; it reconnects by itself and, once back, changes the version once more (commits
 * made while it was away were not heard).
 */
class ChangeNotices {
  private client: pg.Client | undefined;
  private lastAlive = 0;
  private beating = false;
  private unheard = 0;
  private stopped = false;
  private heartbeat: NodeJS.Timeout | undefined;
  private reconnect: NodeJS.Timeout | undefined;

  constructor(
    private readonly config: pg.ClientConfig,
    private readonly instance: string,
    private readonly key: number,
    private readonly onChange: () => void,
  ) {}

  version(generation: number): string {
    if (performance.now() - this.lastAlive > STALE_AFTER_MS) return `u${++this.unheard}`;
    return String(generation);
  }

  async start(): Promise<void> {
    await this.connect();
    this.heartbeat = setInterval(() => this.beat(), HEARTBEAT_MS);
    this.heartbeat.unref();
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({ ...this.config, application_name: `algohost notices ${this.instance}` });
    client.on('error', () => this.lost(client));
    client.on('end', () => this.lost(client));
    client.on('notification', (n) => {
      if (n.payload !== this.instance) this.onChange();
    });
    await client.connect();
    try {
      await client.query(`LISTEN ${CHANGE_NOTICES}`);
      await client.query('SELECT pg_advisory_lock($1, $2)', [LOCK_NAMESPACE + 1, this.key]);
    } catch (err) {
      await client.end().catch(() => undefined);
      throw err;
    }
    if (this.stopped) {
      await client.end().catch(() => undefined);
      return;
    }
    this.client = client;
    // Whatever was committed while no one listened: read again.
    this.onChange();
    this.lastAlive = performance.now();
  }

  private beat(): void {
    const client = this.client;
    // One at a time: a connection that hangs gets no queue of them.
    if (!client || this.beating) return;
    this.beating = true;
    const sent = performance.now();
    client.query('SELECT 1').then(
      () => {
        this.beating = false;
        if (this.client === client) this.lastAlive = sent;
      },
      () => {
        this.beating = false;
        this.lost(client);
      },
    );
  }

  private lost(client: pg.Client): void {
    if (this.client !== client) return;
    this.client = undefined;
    this.lastAlive = 0;
    client.end().catch(() => undefined);
    this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    if (this.stopped || this.reconnect) return;
    this.reconnect = setTimeout(() => {
      this.reconnect = undefined;
      this.connect().catch(() => this.scheduleReconnect());
    }, RECONNECT_MS);
    this.reconnect.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.heartbeat);
    clearTimeout(this.reconnect);
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }
}
