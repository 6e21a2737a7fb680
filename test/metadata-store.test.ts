/**
 * The metadata store's contract, held the same way by both implementations: SQLite in a temp
 * file and PostgreSQL in a throwaway cluster on loopback (this file's own, or the one
 * test/run-shared.ts started). A case one of them cannot meet is skipped naming why.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { isUniqueViolation, type MetadataStore } from '../src/store/db.ts';
import { openSqliteStore } from '../src/store/sqliteStore.ts';
import { openPostgresStore } from '../src/store/postgresStore.ts';
import { MIGRATIONS } from '../src/store/migrations.ts';
import { VersionedCache } from '../src/store/versionedCache.ts';
import { AppError } from '../src/errors.ts';
import { createDatabase, postgresAvailable, startPostgres, type PostgresCluster } from './helpers/postgres.ts';
import { sleep } from './helpers/process.ts';

interface Backend {
  /** A new, empty, migrated store. */
  fresh(): Promise<{ open(): Promise<MetadataStore>; cleanup(): void }>;
  /** Whether another process's liveness can be seen (PostgreSQL: yes; SQLite: one server per home). */
  seesOthers: boolean;
  cluster?: PostgresCluster;
}

let cluster: PostgresCluster | undefined;
let adminUrl = process.env.ALGOHOST_TEST_PG_URL;
const pgMissing = adminUrl ? undefined : postgresAvailable();

before(async () => {
  if (!adminUrl && !pgMissing) {
    cluster = await startPostgres();
    adminUrl = cluster.adminUrl;
  }
});
after(() => cluster?.stop());

const BACKENDS: Record<string, Backend> = {
  sqlite: {
    seesOthers: false,
    async fresh() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-store-'));
      const file = path.join(dir, 'metadata.sqlite');
      return { open: () => openSqliteStore(file), cleanup: () => fs.rmSync(dir, { recursive: true, force: true }) };
    },
  },
  postgres: {
    seesOthers: true,
    async fresh() {
      const url = await createDatabase(adminUrl!, 'contract');
      return { open: () => openPostgresStore({ url }), cleanup: () => undefined };
    },
  },
};

const user = (name: string, at = 1) => ({ username: name, username_lc: name.toLowerCase(), created_at: at });

for (const [name, backend] of Object.entries(BACKENDS)) {
  const skip = name === 'postgres' ? pgMissing : undefined;
  describe(`metadata store contract: ${name}`, { skip }, () => {
    test('reads leave the version alone; our writes change it', async () => {
      const f = await backend.fresh();
      const store = await f.open();
      try {
        const v0 = store.version();
        await store.db.selectFrom('users').selectAll().execute();
        assert.equal(store.version(), v0);
        await store.db.insertInto('users').values(user('a')).execute();
        assert.notEqual(store.version(), v0);
      } finally {
        await store.close();
        f.cleanup();
      }
    });

    test("another process's commit changes the version within a second, and a cache reads again", async () => {
      const f = await backend.fresh();
      const a = await f.open();
      const b = await f.open();
      try {
        await a.db.insertInto('users').values(user('a')).execute();
        const cache = new VersionedCache(a);
        let loads = 0;
        const count = () => cache.get('n', async () => (++loads, (await a.db.selectFrom('users').selectAll().execute()).length));
        assert.equal(await count(), 1);
        assert.equal(await count(), 1);
        assert.equal(loads, 1, 'served from the cache while nothing changed');
        const before = a.version();
        const t0 = performance.now();
        await b.db.insertInto('users').values(user('b')).execute();
        while (a.version() === before && performance.now() - t0 < 1000) await sleep(5);
        assert.notEqual(a.version(), before, 'the commit was heard within 1 s');
        assert.equal(await count(), 2, 'the cache read again');
      } finally {
        await b.close();
        await a.close();
        f.cleanup();
      }
    });

    test('write transactions exclude each other: concurrent read-then-write loses no update', async () => {
      const f = await backend.fresh();
      const a = await f.open();
      const b = await f.open();
      try {
        await a.db.insertInto('meta').values({ key: 'n', value: '0' }).execute();
        const bump = (s: MetadataStore) =>
          s.write(async (trx) => {
            const row = await trx.selectFrom('meta').select('value').where('key', '=', 'n').executeTakeFirstOrThrow();
            await sleep(2);
            await trx.updateTable('meta').set({ value: String(Number(row.value) + 1) }).where('key', '=', 'n').execute();
          });
        // SQLite's other writer is another process: two connections in one process would
        // block each other's event loop (better-sqlite3 waits for a lock synchronously).
        await Promise.all(Array.from({ length: 20 }, (_, i) => bump(i % 2 && name === 'postgres' ? b : a)));
        const row = await a.db.selectFrom('meta').select('value').where('key', '=', 'n').executeTakeFirstOrThrow();
        assert.equal(row.value, '20');
        // A failure rolls the whole transaction back.
        await assert.rejects(
          a.write(async (trx) => {
            await trx.insertInto('users').values(user('gone')).execute();
            throw new Error('no');
          }),
          /no/,
        );
        assert.equal((await a.db.selectFrom('users').selectAll().execute()).length, 0);
      } finally {
        await b.close();
        await a.close();
        f.cleanup();
      }
    });

    test('a write that need not wait for the disk commits like any other, and only it is relaxed', async () => {
      const f = await backend.fresh();
      const a = await f.open();
      const b = await f.open();
      // The setting as the transaction sees it: SQLite's synchronous (1 NORMAL, 2 FULL), PostgreSQL's synchronous_commit.
      const setting = async (trx: MetadataStore['db']) =>
        name === 'sqlite'
          ? String(Object.values((await sql<Record<string, unknown>>`PRAGMA synchronous`.execute(trx)).rows[0]!)[0])
          : String((await sql<{ synchronous_commit: string }>`SHOW synchronous_commit`.execute(trx)).rows[0]!.synchronous_commit);
      try {
        // PostgreSQL's own default (the tests' clusters turn it off for speed: then only the relaxed write is checked).
        const durable = name === 'sqlite' ? '2' : String((await sql<{ reset_val: string }>`SELECT reset_val FROM pg_settings WHERE name = 'synchronous_commit'`.execute(a.db)).rows[0]!.reset_val);
        const relaxed = name === 'sqlite' ? '1' : 'off';
        assert.equal(await a.write((trx) => setting(trx)), durable);
        const seen = await a.write(async (trx) => {
          await trx.insertInto('meta').values({ key: 'relaxed', value: '1' }).execute();
          return setting(trx);
        }, { durable: false });
        assert.equal(seen, relaxed);
        // Committed: another connection (another process's, for SQLite) reads it.
        assert.equal((await b.db.selectFrom('meta').select('value').where('key', '=', 'relaxed').executeTakeFirst())?.value, '1');
        // The next write waits for the disk again, after a relaxed one that failed too.
        assert.equal(await a.write((trx) => setting(trx)), durable);
        await assert.rejects(a.write(async () => { throw new Error('no'); }, { durable: false }), /no/);
        assert.equal(await a.write((trx) => setting(trx)), durable);
        assert.equal(await a.write((trx) => setting(trx), { durable: true }), durable);
      } finally {
        await b.close();
        await a.close();
        f.cleanup();
      }
    });

    test('unique violations are recognised; integers come back as numbers; JSON fields are read', async () => {
      const f = await backend.fresh();
      const store = await f.open();
      try {
        await store.db.insertInto('users').values(user('a', 1_764_000_000_123)).execute();
        const err = await store.db.insertInto('users').values(user('A')).execute().then(
          () => undefined,
          (e: unknown) => e,
        );
        assert.ok(isUniqueViolation(err), `a unique violation: ${String(err)}`);
        const row = await store.db.selectFrom('users').select(['id', 'created_at']).executeTakeFirstOrThrow();
        assert.equal(row.created_at, 1_764_000_000_123);
        assert.equal(typeof row.id, 'number');
        const { n } = await store.db.selectFrom('users').select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
        assert.equal(n, 1);
        await store.db.insertInto('meta').values({ key: 'j', value: JSON.stringify({ mode: 'public', n: 2 }) }).execute();
        const j = await store.db.selectFrom('meta').select(store.jsonText('value', 'mode').as('mode')).where('key', '=', 'j').executeTakeFirstOrThrow();
        assert.equal(j.mode, 'public');
      } finally {
        await store.close();
        f.cleanup();
      }
    });

    test('text sorts byte-wise (listings page alike on both)', async () => {
      const f = await backend.fresh();
      const store = await f.open();
      try {
        const names = ['b', 'B', 'a', 'É', 'e', 'Z', '_', 'a b', 'ab', '~', '中'];
        for (const n of names) await store.db.insertInto('meta').values({ key: n, value: '' }).execute();
        const rows = await store.db.selectFrom('meta').select('key').orderBy('key').execute();
        const bytewise = [...names].sort((x, y) => Buffer.compare(Buffer.from(x), Buffer.from(y)));
        assert.deepEqual(
          rows.map((r) => r.key),
          bytewise,
        );
        const after = await store.db.selectFrom('meta').select('key').where('key', '>', 'Z').orderBy('key').execute();
        assert.deepEqual(
          after.map((r) => r.key),
          bytewise.filter((k) => Buffer.compare(Buffer.from(k), Buffer.from('Z')) > 0),
        );
      } finally {
        await store.close();
        f.cleanup();
      }
    });

    test('prepared reads take new parameters each run', async () => {
      const f = await backend.fresh();
      const store = await f.open();
      try {
        await store.db.insertInto('users').values([user('x'), user('y')]).execute();
        const byName = store.prepared(store.db.selectFrom('users').select('username').where('username_lc', '=', ''));
        assert.deepEqual(await byName(['x']), [{ username: 'x' }]);
        assert.deepEqual(await byName(['y']), [{ username: 'y' }]);
        assert.deepEqual(await byName(['z']), []);
      } finally {
        await store.close();
        f.cleanup();
      }
    });

    test('liveness: this process is alive; another is while its store is open, and not after', async (t) => {
      const f = await backend.fresh();
      const a = await f.open();
      try {
        assert.equal(await a.isLive(a.instance), true);
        assert.equal(await a.isLive(`${a.instance}#sweep`), true, 'work this process claimed');
        assert.equal(await a.isLive(null), false);
        if (!backend.seesOthers) {
          t.diagnostic('SQLite: one server per home (the home lock), so any other recorded process is gone');
          assert.equal(await a.isLive('someone-else'), false);
          return;
        }
        const b = await f.open();
        assert.equal(await a.isLive(b.instance), true);
        await b.close();
        assert.equal(await a.isLive(b.instance), false);
      } finally {
        await a.close();
        f.cleanup();
      }
    });

    test('several processes opening a new store at once migrate it once', async () => {
      const f = await backend.fresh();
      const stores = await Promise.all([f.open(), f.open(), f.open()]);
      try {
        for (const s of stores) await s.ping();
        await stores[0]!.db.insertInto('users').values(user('m')).execute();
        const counted = await stores[2]!.db.selectFrom('users').selectAll().execute();
        assert.equal(counted.length, 1);
        if (name === 'postgres') {
          const v = await sql<{ version: number }>`SELECT version FROM algohost_schema`.execute(stores[1]!.db);
          assert.deepEqual(v.rows, [{ version: MIGRATIONS.length }]);
        }
      } finally {
        for (const s of stores) await s.close();
        f.cleanup();
      }
    });
  });
}

describe('PostgreSQL going away and coming back', { skip: pgMissing }, () => {
  test('queries answer metadata_unavailable (no hang), caches stop vouching, and both recover', async () => {
    // A cluster of its own: this test stops it.
    const own = await startPostgres();
    try {
      const url = await createDatabase(own.adminUrl);
      const store = await openPostgresStore({ url });
      try {
        await store.db.insertInto('users').values(user('a')).execute();
        own.halt();
        const t0 = performance.now();
        const err = await store.db.selectFrom('users').selectAll().execute().then(
          () => undefined,
          (e: unknown) => e,
        );
        assert.ok(err instanceof AppError && err.code === 'metadata_unavailable', `metadata_unavailable, got ${String(err)}`);
        assert.ok(performance.now() - t0 < 10_000, 'answered, not hung');
        // Without the notice connection a change could go unheard: no two reads agree.
        await sleep(1000);
        assert.notEqual(store.version(), store.version());
        own.start();
        const t1 = performance.now();
        let rows: unknown[] | undefined;
        while (!rows && performance.now() - t1 < 15_000) {
          rows = await store.db.selectFrom('users').selectAll().execute().catch(() => undefined);
          if (!rows) await sleep(100);
        }
        assert.equal(rows?.length, 1, 'queries work again');
        while (store.version() !== store.version() && performance.now() - t1 < 15_000) await sleep(50);
        assert.equal(store.version(), store.version(), 'the notice connection is back: the version is stable again');
      } finally {
        await store.close();
      }
    } finally {
      own.stop();
    }
  });

  test('a connection lost while a transaction holds it between statements fails that transaction, not the process', async () => {
    // The pool listens for errors of its idle connections only: one that a transaction holds
    // and loses between two statements (no query on it) emitted 'error' with no listener, and
    // Node ended the process (a database restarting took servers down, now and then).
    const url = await createDatabase(adminUrl!);
    const store = await openPostgresStore({ url });
    try {
      const err = await store.db
        .transaction()
        .execute(async (trx) => {
          const { rows } = await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(trx);
          await sql`SELECT pg_terminate_backend(${rows[0]!.pid})`.execute(store.db);
          // The connection's end arrives while no statement is on it.
          await sleep(300);
          await sql`SELECT 1`.execute(trx);
        })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      assert.ok(err instanceof AppError && err.code === 'metadata_unavailable', `metadata_unavailable, got ${String(err)}`);
      const { rows } = await sql<{ one: number }>`SELECT 1 AS one`.execute(store.db);
      assert.equal(rows[0]!.one, 1, 'the pool serves again');
    } finally {
      await store.close();
    }
  });

  test('a database that cannot be used stops the start with one line naming the setting', async () => {
    const bad = new URL(adminUrl!);
    bad.password = 'wrong';
    await assert.rejects(openPostgresStore({ url: bad.toString() }), (e: Error) => /^ALGOHOST_DATABASE_URL \(.*\*\*\*.*\): the database refused the user name or password/.test(e.message) && !e.message.includes('wrong'));
    const missing = new URL(adminUrl!);
    missing.pathname = '/nosuchdb';
    await assert.rejects(openPostgresStore({ url: missing.toString() }), /ALGOHOST_DATABASE_URL .*database "nosuchdb" does not exist; create it/);
    const closed = new URL(adminUrl!);
    closed.port = '1';
    await assert.rejects(openPostgresStore({ url: closed.toString() }), /ALGOHOST_DATABASE_URL .*: nothing answers at that address/);
  });
});
