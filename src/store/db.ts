import type { Compilable, Kysely, RawBuilder } from 'kysely';
import type { Schema } from './schema.ts';

export type Db = Kysely<Schema>;

export type Dialect = 'sqlite' | 'postgres';

export interface WriteOptions {
  /**
   * false: the commit returns without waiting for the disk (SQLite: synchronous=NORMAL for this
   * commit, where the store keeps FULL; PostgreSQL: synchronous_commit off for this
   * transaction). A process that dies loses nothing; a power cut or an operating system crash
   * may lose the last such commits (whole, never half; and never a durable commit after them).
   * Only for bookkeeping that can be done again from what is durable: the webhook
   * dispatcher's, whose deliveries are made again from the outbox, and sent again under the same
   * webhook-id (docs/events.md). Blocking on the disk, on one event loop, is what such a commit
   * costs most (bench:events: 2 to 5 ms a commit, during which no request moves).
   */
  durable?: boolean;
}

/**
 * The metadata store: every table of the schema behind Kysely, on SQLite in the home (one
 * machine) or on PostgreSQL (several servers sharing it). Queries are written once against
 * `db`; what differs between the dialects (transactions, prepared reads, change detection,
 * JSON, liveness of other servers, migrations) stays behind this interface, and
 * test/metadata-store.test.ts holds both implementations to the same cases.
 */
export interface MetadataStore {
  readonly dialect: Dialect;
  db: Db;
  /**
   * Runs `fn` in a transaction that excludes every other writer for its whole length (a
   * transaction that reads then writes never fails half-way because another process wrote in
   * between; it waits for its turn instead). SQLite: `BEGIN IMMEDIATE`; PostgreSQL: a
   * transaction-scoped advisory lock that every `write` takes first.
   */
  write<T>(fn: (trx: Db) => Promise<T>, options?: WriteOptions): Promise<T>;
  /**
   * Calls `listener` after every `write` of this process that committed (the outbox's readers
   * wake on it, rather than wait for their next poll). Returns a function that stops it.
   */
  onCommit(listener: () => void): () => void;
  /**
   * A read on the hot path (every call authenticates and resolves), compiled by Kysely once
   * and then run with new parameters, in the order they appear in the query, without building
   * and compiling it again per request.
   */
  prepared<R>(query: Compilable<R>): (params: readonly unknown[]) => Promise<R[]>;
  /**
   * Changes whenever the data the hot-path caches read may have changed: a write by this
   * process, or a commit by another process (the admin CLI; another server on PostgreSQL,
   * heard of within a second). Hot-path caches keep what they read together with this value,
   * and read again when it differs. Where a change could go unheard (PostgreSQL's notice
   * connection is down), it differs at every read, so nothing is served from a cache.
   */
  version(): string;
  /** The text at top-level `key` of a JSON text column, as SQL (json_extract, `->>`). */
  jsonText(column: string, key: string): RawBuilder<string | null>;
  /**
   * This process's id. Work in flight (a blob being written, a build running) is recorded
   * with it, so that a process that finds such work can tell whether its doer is still alive.
   */
  readonly instance: string;
  /**
   * Whether the process that recorded `instance` may still be running (its work in flight
   * must be left alone). SQLite: only this process (the home lock keeps other servers out);
   * PostgreSQL: whoever holds that instance's session lock.
   */
  isLive(instance: string | null): Promise<boolean>;
  /** Resolves when the store answers a query now; for /health. */
  ping(): Promise<void>;
  /** Where the store is, for logs and /health (no password). */
  readonly location: string;
  /** PostgreSQL: its connection pool's figures (docs/metrics.md); SQLite has no pool. */
  poolStats?(): { total: number; idle: number; waiting: number };
  close(): Promise<void>;
}

/** A unique-constraint violation, in SQLite's or PostgreSQL's words. */
export function isUniqueViolation(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY' || code === '23505';
}
