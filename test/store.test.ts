/** The metadata store's version: what hot-path caches are checked against on every request. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { openSqliteStore } from '../src/store/sqliteStore.ts';
import { VersionedCache } from '../src/store/versionedCache.ts';

test('the version changes on our writes and on commits of another process, not on reads', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-store-'));
  const file = path.join(dir, 'metadata.sqlite');
  const store = await openSqliteStore(file);
  try {
    const v0 = store.version();
    await store.db.selectFrom('users').selectAll().execute();
    assert.equal(store.version(), v0, 'a read changes nothing');
    await store.db.insertInto('users').values({ username: 'a', username_lc: 'a', created_at: 1 }).execute();
    const v1 = store.version();
    assert.notEqual(v1, v0, 'our own write');
    // Another connection, as the admin CLI in another process would be.
    const other = new Database(file);
    other.prepare("INSERT INTO users (username, username_lc, created_at) VALUES ('b', 'b', 2)").run();
    other.close();
    assert.notEqual(store.version(), v1, "another connection's commit");

    // Every commit of another connection is seen, also across checkpoints that restart the WAL,
    // and nothing else changes the version.
    assert.doesNotMatch(store.version(), /:d/, 'read from the WAL index header, not through PRAGMA data_version');
    const seen = new Set([store.version()]);
    const more = new Database(file);
    for (let i = 0; i < 40; i++) {
      if (i % 10 === 5) more.pragma(`wal_checkpoint(${i % 20 === 5 ? 'TRUNCATE' : 'PASSIVE'})`);
      const before = store.version();
      assert.equal(store.version(), before, `read twice, no commit between (${i})`);
      more.prepare('INSERT INTO users (username, username_lc, created_at) VALUES (?, ?, ?)').run(`u${i}`, `u${i}`, i);
      const after = store.version();
      assert.notEqual(after, before, `commit ${i} of another connection`);
      assert.ok(!seen.has(after), `commit ${i}: a new version, not an earlier one`);
      seen.add(after);
    }
    more.prepare('DELETE FROM users WHERE username_lc LIKE ?').run('u%');
    more.close();

    // The cache reads again after a change, and not before.
    const cache = new VersionedCache(store);
    let loads = 0;
    const count = () => cache.get('n', async () => (++loads, (await store.db.selectFrom('users').selectAll().execute()).length));
    assert.equal(await count(), 2);
    assert.equal(await count(), 2);
    assert.equal(loads, 1);
    await store.db.deleteFrom('users').where('username', '=', 'a').execute();
    assert.equal(await count(), 1);
    assert.equal(loads, 2);
    // Nothing read inside a write transaction is kept (it may be rolled back).
    let inside = 0;
    await assert.rejects(
      store.write(async (trx) => {
        await trx.insertInto('users').values({ username: 'c', username_lc: 'c', created_at: 3 }).execute();
        const seen = await cache.get('inside', async () => (++inside, (await trx.selectFrom('users').selectAll().execute()).length));
        assert.equal(seen, 2, 'inside: sees its own row');
        throw new Error('roll back');
      }),
    );
    const after = await cache.get('inside', async () => (++inside, (await store.db.selectFrom('users').selectAll().execute()).length));
    assert.equal(after, 1, 'the rolled-back row is not served from the cache');
    assert.equal(inside, 2);
  } finally {
    await store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("reading the version keeps SQLite's lock on the WAL index (no descriptor of that file is closed under it)", async (t) => {
  if (!fs.existsSync('/proc/locks')) return t.skip('no /proc/locks on this system');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-store-'));
  const file = path.join(dir, 'metadata.sqlite');
  const store = await openSqliteStore(file);
  try {
    // A POSIX lock of this process on the -shm file's inode: SQLite's mark that a connection uses it.
    const ino = fs.statSync(`${file}-shm`).ino;
    const held = () => fs.readFileSync('/proc/locks', 'utf8').split('\n').some((l) => {
      const f = l.trim().split(/\s+/);
      return f[1] === 'POSIX' && f[4] === String(process.pid) && f[5]?.split(':')[2] === String(ino);
    });
    assert.ok(held(), 'SQLite holds its lock once the store is open');
    for (let i = 0; i < 100; i++) store.version();
    await store.db.insertInto('users').values({ username: 'a', username_lc: 'a', created_at: 1 }).execute();
    store.version();
    assert.ok(held(), 'still held after reads of the version and a write');
  } finally {
    await store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
