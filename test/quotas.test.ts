/**
 * Quotas (issue 24; docs/limits.md): compute seconds per calendar month, per user and per key,
 * counted from the usage records, across a month's end on the clock the test moves; the meter
 * against a real store; hosted bytes stored, refused before the body is stored (declared) or
 * cut off leaving nothing (chunked), the stored total held to the files' rows. Calls go to this process's own API node (`s.node`), whose clock the
 * test moves (under test:cluster the other API node keeps the real time).
 */
import http from 'node:http';
import { Readable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ComputeMeter, monthBounds, utcMonth } from '../src/limits/compute.ts';
import { writeUserLimits } from '../src/limits/userLimits.ts';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { callAlgo, release } from './helpers/algorithms.ts';
import { CLUSTER } from './helpers/backends.ts';
import { PassThrough } from 'node:stream';
import { main } from '../src/cli/algo/main.ts';
import Database from 'better-sqlite3';
import { MIGRATIONS } from '../src/store/migrations.ts';

/** `algo ARGS` in-process, as `key` against `url`: its exit code and what it printed. */
async function algo(url: string, key: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.setEncoding('utf8').on('data', (t: string) => (out += t));
  stderr.setEncoding('utf8').on('data', (t: string) => (err += t));
  const code = await main(args, { HOME: '/nonexistent', ALGOHOST_API: url, ALGOHOST_API_KEY: key }, { stdin: new PassThrough(), stdout, stderr });
  return { code, stdout: out, stderr: err };
}

const ALGO = `
export async function apply(input) {
  if (typeof input === 'string' && input.startsWith('sleep ')) await new Promise((r) => setTimeout(r, Number(input.slice(6))));
  return input;
}
`;

/** 23:00 UTC on the last day of November 2026: an hour before December. */
const NOV_30_23H = Date.UTC(2026, 10, 30, 23, 0, 0);
const DEC_1 = Date.UTC(2026, 11, 1);

describe('compute seconds per month', () => {
  let s: TestServer;
  let alice: ReturnType<typeof api>;
  let bob: ReturnType<typeof api>;
  let now = NOV_30_23H;

  before(async () => {
    s = await startServer({ env: { ALGOHOST_LIMIT_COMPUTE_SECONDS_PER_MONTH: '1' }, now: () => now });
    alice = api(s.node, await s.user('alice'));
    bob = api(s.node, await s.user('bob'));
    await release(alice, 'alice', 'Echo', { 'src/index.js': ALGO }, { settings: { language: 'javascript' } });
  });
  after(() => s.close());

  test('months and their bounds are UTC calendar months', () => {
    assert.equal(utcMonth(NOV_30_23H), '2026-11');
    assert.deepEqual(monthBounds(NOV_30_23H), { start: Date.UTC(2026, 10, 1), end: DEC_1 });
    assert.deepEqual(monthBounds(Date.UTC(2026, 11, 31, 23, 59, 59)), { start: DEC_1, end: Date.UTC(2027, 0, 1) });
  });

  test('the meter: counted in memory, written by a flush, read back by another process\'s meter; a new month starts at 0', async () => {
    let t = NOV_30_23H;
    const user = await s.services.users.create('meter');
    const a = new ComputeMeter(s.services.store.db, () => t);
    const b = new ComputeMeter(s.services.store.db, () => t);
    assert.equal(a.needsLoad(user.user.id), true);
    await a.load(user.user.id);
    assert.deepEqual(a.used(user.user.id, 'k1'), { user: 0, key: 0 });
    a.record(user.user.id, 'k1', 400.4);
    a.record(user.user.id, undefined, 100);
    assert.deepEqual(a.used(user.user.id, 'k1'), { user: 500.4, key: 400.4 });
    const batch = a.batch();
    assert.deepEqual(batch.rows, [
      { user_id: user.user.id, month: '2026-11', key_id: '', ms: 500 },
      { user_id: user.user.id, month: '2026-11', key_id: 'k1', ms: 400 },
    ]);
    await s.services.store.write((trx) => a.write(trx, batch.rows));
    batch.commit();
    // What was written is no longer pending, and is counted once (what is left, under half a
    // millisecond, is dropped with the user's pending count).
    assert.deepEqual(a.used(user.user.id, 'k1'), { user: 500, key: 400 });
    a.record(user.user.id, 'k1', 10);
    assert.deepEqual(a.used(user.user.id, 'k1'), { user: 510, key: 410 });
    await b.load(user.user.id);
    assert.deepEqual(b.used(user.user.id, 'k1'), { user: 500, key: 400 });
    // December: nothing used yet, once read.
    t = DEC_1;
    assert.equal(b.needsLoad(user.user.id), true);
    await b.load(user.user.id);
    assert.deepEqual(b.used(user.user.id, 'k1'), { user: 0, key: 0 });
  });

  test('a call past the month\'s quota is 429 compute_quota_exceeded until the first of next month (UTC), with Retry-After and the RateLimit fields', { timeout: 60_000 }, async () => {
    now = NOV_30_23H;
    // Under the quota when it starts: a call under way is not cut off, and takes the month past it.
    const first = await callAlgo(alice, 'alice/Echo', 'sleep 1100');
    assert.equal(first.status, 200);
    assert.ok((await json(first)).metadata.duration >= 1);
    const r = await callAlgo(alice, 'alice/Echo', 'hi');
    assert.equal(r.status, 429);
    assert.equal(r.headers.get('retry-after'), '3600');
    assert.equal(r.headers.get('ratelimit-policy'), `"compute";q=1;w=${30 * 86_400}`);
    assert.equal(r.headers.get('ratelimit'), '"compute";r=0;t=3600');
    const body = await json(r);
    assert.equal(body.error.code, 'compute_quota_exceeded');
    assert.equal(body.error.limit, 'compute_seconds_per_month');
    assert.equal(body.error.scope, 'user');
    assert.equal(body.error.resets_at, '2026-12-01T00:00:00.000Z');
    assert.match(body.error.message, /of the 1 compute seconds you may use this month/);
    // Queued calls are refused too (they would spend the same seconds).
    assert.equal((await callAlgo(alice, 'alice/Echo', 'hi', 'text/plain', '?output=void')).status, 429);
    // Another user has a month of their own.
    assert.equal((await callAlgo(bob, 'alice/Echo', 'hi')).status, 200);
    const limits = await json(await alice('/v1/users/alice/limits'));
    assert.equal(limits.compute.seconds_per_month, 1);
    assert.ok(limits.compute.used_s >= 1, JSON.stringify(limits.compute));
    assert.equal(limits.compute.remaining_s, 0);
    assert.equal(limits.compute.period_start, '2026-11-01T00:00:00.000Z');
    assert.equal(limits.compute.resets_at, '2026-12-01T00:00:00.000Z');
    assert.equal(limits.compute.reset_s, 3600);
    // The written count agrees (the usage flush wrote it with the usage rows).
    await s.services.usage.flush();
    const row = await s.services.store.db.selectFrom('compute_months').select('ms').where('user_id', '=', (await s.services.users.require('alice')).id).where('month', '=', '2026-11').where('key_id', '=', '').executeTakeFirstOrThrow();
    assert.ok(Number(row.ms) >= 1000);
    // The first of December: the quota starts again.
    now = DEC_1 + 1000;
    assert.equal((await callAlgo(alice, 'alice/Echo', 'hi')).status, 200);
    const december = await json(await alice('/v1/users/alice/limits'));
    assert.ok(december.compute.used_s < 1, JSON.stringify(december.compute));
    assert.equal(december.compute.period_start, '2026-12-01T00:00:00.000Z');
  });

  test('a user\'s own quota (as the admin command sets it) holds from their next call; 0 is none', { timeout: 60_000 }, async () => {
    now = Date.UTC(2027, 0, 10);
    const user = await s.services.users.require('alice');
    await writeUserLimits(s.services.store, user.id, { compute_seconds_per_month: 0 });
    assert.equal((await callAlgo(alice, 'alice/Echo', 'sleep 1100')).status, 200);
    assert.equal((await callAlgo(alice, 'alice/Echo', 'hi')).status, 200);
    assert.equal((await json(await alice('/v1/users/alice/limits'))).compute.seconds_per_month, null);
    await writeUserLimits(s.services.store, user.id, { compute_seconds_per_month: 1 });
    const r = await callAlgo(alice, 'alice/Echo', 'hi');
    assert.equal(r.status, 429);
    assert.equal((await json(r)).error.code, 'compute_quota_exceeded');
    await writeUserLimits(s.services.store, user.id, {}, true);
  });

  test('a key held below its user: its own month is counted apart, and refused alone (scope key)', { timeout: 60_000 }, async () => {
    now = Date.UTC(2027, 1, 10);
    const user = await s.services.users.require('bob');
    await writeUserLimits(s.services.store, user.id, { compute_seconds_per_month: 100 });
    const made = await bob('/v1/users/bob/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'batch', permissions: { limits: { compute_seconds_per_month: 1 } } }) });
    const key = await json(made);
    assert.equal(made.status, 201, JSON.stringify(key));
    assert.deepEqual(key.permissions.limits, { compute_seconds_per_month: 1 });
    const batch = api(s.node, key.api_key);
    assert.equal((await callAlgo(batch, 'alice/Echo', 'sleep 1100')).status, 200);
    const r = await callAlgo(batch, 'alice/Echo', 'hi');
    assert.equal(r.status, 429);
    const body = await json(r);
    assert.equal(body.error.code, 'compute_quota_exceeded');
    assert.equal(body.error.scope, 'key');
    assert.match(body.error.message, /calls with this key have used/);
    // The user's other keys go on; the key's seconds count in the user's month too.
    assert.equal((await callAlgo(bob, 'alice/Echo', 'hi')).status, 200);
    const limits = await json(await batch('/v1/users/bob/limits'));
    assert.equal(limits.compute.seconds_per_month, 100);
    assert.ok(limits.compute.used_s >= 1);
    assert.equal(limits.key.compute.seconds_per_month, 1);
    assert.ok(limits.key.compute.used_s >= 1);
    assert.equal(limits.key.compute.remaining_s, 0);
    // A key held to a quota hands out no key without it or above it.
    const manager = await json(await bob('/v1/users/bob/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'manager', permissions: { limits: { compute_seconds_per_month: 10 } } }) }));
    const higher = await api(s.node, manager.api_key)('/v1/users/bob/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'higher', permissions: { limits: { compute_seconds_per_month: 11 } } }) });
    assert.equal(higher.status, 403);
    assert.match((await json(higher)).error.message, /limits.compute_seconds_per_month/);
    await writeUserLimits(s.services.store, user.id, {}, true);
  });

  test('a trigger\'s run is held to the quota too: refused, the run fails with the 429', { timeout: 120_000, skip: CLUSTER && 'the run may be claimed by the other API node, whose clock the test does not move' }, async () => {
    now = Date.UTC(2027, 2, 10);
    assert.equal((await callAlgo(alice, 'alice/Echo', 'sleep 1100')).status, 200);
    assert.equal((await alice('/v1/data/.my', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'inbox' }) })).status, 200);
    const made = await alice('/v1/users/alice/triggers', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ types: ['data.file.created'], path: 'data://.my/inbox/**', algorithm: 'alice/Echo', input: '{{name}}' }) });
    const trigger = await json(made);
    assert.equal(made.status, 201, JSON.stringify(trigger));
    assert.equal((await alice('/v1/data/.my/inbox/a.txt', { method: 'PUT', body: 'a' })).status, 200);
    const end = Date.now() + 60_000;
    let run: { status: string; http_status: number | null; error: string | null } | undefined;
    while (Date.now() < end) {
      run = ((await json(await alice(`/v1/users/alice/triggers/${trigger.id}/runs`))).results as (typeof run)[])[0];
      if (run && (run.status === 'succeeded' || run.status === 'failed')) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(run?.status, 'failed', JSON.stringify(run));
    assert.equal(run?.http_status, 429);
    assert.match(run?.error ?? '', /compute seconds you may use this month/);
  });

  test('a trigger\'s run is held to its user\'s own quota, not the operator\'s: given more, it runs', { timeout: 120_000, skip: CLUSTER && 'the run may be claimed by the other API node, whose clock the test does not move' }, async () => {
    // Alice has used the operator's second this month (the test above); a quota of her own, larger, holds for her triggers' runs as for her calls.
    const user = await s.services.users.require('alice');
    await writeUserLimits(s.services.store, user.id, { compute_seconds_per_month: 3600 });
    try {
      assert.equal((await callAlgo(alice, 'alice/Echo', 'x')).status, 200);
      const runs = async () => (await json(await alice('/v1/users/alice/triggers'))).results as { id: string }[];
      const trigger = (await runs())[0]!;
      const before = new Set(((await json(await alice(`/v1/users/alice/triggers/${trigger.id}/runs`))).results as { id: string }[]).map((r) => r.id));
      assert.equal((await alice('/v1/data/.my/inbox/b.txt', { method: 'PUT', body: 'b' })).status, 200);
      let run: { id: string; status: string; http_status: number | null; error: string | null } | undefined;
      for (const end = Date.now() + 60_000; Date.now() < end; await new Promise((r) => setTimeout(r, 50))) {
        run = ((await json(await alice(`/v1/users/alice/triggers/${trigger.id}/runs`))).results as (typeof run & object)[]).find((r) => !before.has(r.id));
        if (run && (run.status === 'succeeded' || run.status === 'failed')) break;
      }
      assert.equal(run?.status, 'succeeded', JSON.stringify(run));
    } finally {
      await writeUserLimits(s.services.store, user.id, {}, true);
    }
  });
});

test('the quotas\' migration back-fills compute per user and month from the usage rows and the bytes stored from the files (SQLite)', () => {
  const db = new Database(':memory:');
  db.pragma('foreign_keys = ON');
  const step = MIGRATIONS.findIndex((m) => m.sqlite.includes('CREATE TABLE compute_months'));
  assert.ok(step > 0);
  for (const m of MIGRATIONS.slice(0, step)) db.exec(m.sqlite);
  db.prepare("INSERT INTO users (id, username, username_lc, created_at) VALUES (1, 'a', 'a', 0), (2, 'b', 'b', 0)").run();
  const file = db.prepare("INSERT INTO nodes (owner_id, dir, name, kind, blob_id, size, created_at, modified_at) VALUES (?, ?, ?, ?, ?, ?, 0, 0)");
  file.run(1, '', 'docs', 'dir', null, 0);
  file.run(1, 'docs', 'x', 'file', 'b1', 300);
  file.run(1, 'docs', 'y', 'file', 'b2', 200);
  file.run(2, '', 'docs', 'dir', null, 0);
  const use = db.prepare("INSERT INTO usage (day, caller_id, owner_id, owner, name, version, outcome, calls, duration_ms, bytes_in, bytes_out) VALUES (?, ?, 1, 'a', 'A', '1.0.0', ?, 1, ?, 0, 0)");
  use.run('2026-10-31', 1, 'ok', 1000);
  use.run('2026-11-01', 1, 'ok', 250);
  use.run('2026-11-02', 1, 'error', 50);
  use.run('2026-11-02', 99, 'ok', 7); // a caller deleted since
  db.exec(MIGRATIONS[step]!.sqlite);
  assert.deepEqual(db.prepare('SELECT user_id, month, key_id, ms FROM compute_months ORDER BY user_id, month').all(), [
    { user_id: 1, month: '2026-10', key_id: '', ms: 1000 },
    { user_id: 1, month: '2026-11', key_id: '', ms: 300 },
  ]);
  assert.deepEqual(db.prepare('SELECT user_id, bytes FROM user_storage ORDER BY user_id').all(), [{ user_id: 1, bytes: 500 }]);
  db.close();
});

describe('hosted bytes stored', () => {
  let s: TestServer;
  let carol: ReturnType<typeof api>;
  let carolKey: string;
  let carolId: number;
  const QUOTA = 1000;

  before(async () => {
    s = await startServer({ env: { ALGOHOST_LIMIT_STORAGE_BYTES: String(QUOTA) } });
    carolKey = await s.user('carol');
    carol = api(s.url, carolKey);
    carolId = (await s.services.users.require('carol')).id;
    assert.equal((await carol('/v1/data/.my', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'docs' }) })).status, 200);
  });
  after(() => s.close());

  const put = (call: ReturnType<typeof api>, name: string, body: string | Buffer) => call(`/v1/data/.my/docs/${name}`, { method: 'PUT', body });
  /** The stored total, and what the files' rows add up to: the two must agree. */
  const stored = async () => {
    const files = await s.services.store.db.selectFrom('nodes').select((e) => e.fn.sum<number | string>('size').as('n')).where('owner_id', '=', carolId).where('kind', '=', 'file').executeTakeFirst();
    const total = await s.services.hosted.storedBytes(carolId);
    assert.equal(total, Number(files?.n ?? 0), 'user_storage agrees with the files');
    return total;
  };
  const blobCount = async () => {
    let n = 0;
    for await (const _ of s.services.blobs.list()) n++;
    return n;
  };

  test('uploads, replacements and deletes keep the stored total; GET …/limits shows it', async () => {
    assert.equal((await put(carol, 'a.txt', 'x'.repeat(300))).status, 200);
    assert.equal((await put(carol, 'b.txt', 'y'.repeat(200))).status, 200);
    assert.equal(await stored(), 500);
    // Replaced by a larger file: the difference.
    assert.equal((await put(carol, 'a.txt', 'x'.repeat(400))).status, 200);
    assert.equal(await stored(), 600);
    assert.equal((await carol('/v1/data/.my/docs/b.txt', { method: 'DELETE' })).status, 200);
    assert.equal(await stored(), 400);
    const limits = await json(await carol('/v1/users/carol/limits'));
    assert.deepEqual(limits.storage, { bytes: QUOTA, used_bytes: 400, remaining_bytes: 600 });
  });

  test('a declared body past the quota is refused 413 storage_quota_exceeded before it is read', async () => {
    const before = await stored();
    // Content-Length says 700 bytes; only 10 are sent, and the answer comes without the rest.
    const { hostname, port } = new URL(s.url);
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = http.request({ host: hostname, port, method: 'PUT', path: '/v1/data/.my/docs/big.txt', headers: { authorization: `Simple ${carolKey}`, 'content-length': '700' } }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      });
      req.on('error', reject);
      // The rest never comes: a server that waits for it has not refused the upload up front.
      req.setTimeout(20_000, () => req.destroy(new Error('no answer before the whole body was sent: the upload was not refused up front')));
      req.write('z'.repeat(10));
    });
    assert.equal(answer.status, 413);
    const body = JSON.parse(answer.body);
    assert.equal(body.error.code, 'storage_quota_exceeded');
    assert.equal(body.error.limit, 'storage_bytes');
    assert.equal(body.error.remaining_bytes, 600);
    assert.match(body.error.message, /may come to 1000 bytes; 400 are stored/);
    assert.equal((await carol('/v1/data/.my/docs/big.txt')).status, 404);
    assert.equal(await stored(), before);
  });

  test('a body of no declared length is read until past the quota, then refused, and nothing of it is kept', async () => {
    const before = await stored();
    const blobs = await blobCount();
    const chunks = Array.from({ length: 10 }, () => Buffer.alloc(100, 'q'));
    const r = await carol('/v1/data/.my/docs/chunked.txt', { method: 'PUT', body: Readable.toWeb(Readable.from(chunks)) as ReadableStream, duplex: 'half' } as RequestInit);
    assert.equal(r.status, 413);
    assert.equal((await json(r)).error.code, 'storage_quota_exceeded');
    assert.equal((await carol('/v1/data/.my/docs/chunked.txt')).status, 404);
    assert.equal(await stored(), before);
    assert.equal(await blobCount(), blobs, 'no blob left behind');
    const pending = await s.services.store.db.selectFrom('pending_blobs').select('blob_id').execute();
    assert.deepEqual(pending, []);
    // What fits is taken: up to the quota exactly.
    assert.equal((await put(carol, 'fits.txt', 'f'.repeat(QUOTA - before))).status, 200);
    assert.equal(await stored(), QUOTA);
    assert.equal((await put(carol, 'one-more.txt', 'o')).status, 413);
    // Over the quota (lowered since), a file may still be replaced by one no larger.
    await writeUserLimits(s.services.store, carolId, { storage_bytes: 300 });
    assert.equal((await put(carol, 'fits.txt', 'f')).status, 200);
    assert.equal((await put(carol, 'fits.txt', 'ff')).status, 413, 'still over: growing is refused');
    await writeUserLimits(s.services.store, carolId, {}, true);
  });

  test('algo usage prints the usage and the limits with what is left; a key that may only call sees its limits', async () => {
    const used = await stored();
    const shown = await algo(s.url, carolKey, ['usage']);
    assert.equal(shown.code, 0, shown.stderr);
    assert.match(shown.stdout, /Usage of carol, \d{4}-\d{2}-\d{2} to \d{4}-\d{2}-\d{2}:/);
    assert.match(shown.stdout, /as a caller +0 +0 s/);
    // The quota (1000 bytes), what is stored (under it: in bytes) and what is left.
    assert.match(shown.stdout, new RegExp(`\\nhosted bytes +1\\.00 kB +${used} B +${QUOTA - used} B\\n`));
    assert.match(shown.stdout, /compute this month +no limit +0 s/);
    assert.match(shown.stdout, /\nshare of workers +1 call a turn\n/);
    const asJson = await algo(s.url, carolKey, ['usage', '--json']);
    const parsed = JSON.parse(asJson.stdout);
    assert.deepEqual(parsed.limits.storage, { bytes: QUOTA, used_bytes: used, remaining_bytes: QUOTA - used });
    assert.equal(parsed.usage.user, 'carol');
    const caller = await json(await carol('/v1/users/carol/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'caller', permissions: { allow_algo_management: false, limits: { calls_per_min: 10 } } }) }));
    const limited = await algo(s.url, caller.api_key, ['usage', '--user', 'carol']);
    assert.equal(limited.code, 0, limited.stderr);
    assert.match(limited.stdout, /Usage: not shown/);
    assert.match(limited.stdout, /This key's own limits/);
    assert.match(limited.stdout, /calls per minute +10 \(burst 1\)/);
    // A share is the user's: the key's own table has none.
    assert.doesNotMatch(limited.stdout.split("This key's own limits")[1]!, /share/);
  });

  test('a key held to fewer bytes than its user refuses uploads with it past them; the user\'s other keys go on', async () => {
    const used = await stored();
    const made = await carol('/v1/users/carol/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'uploader', permissions: { limits: { storage_bytes: used + 10 } } }) });
    const key = await json(made);
    assert.equal(made.status, 201, JSON.stringify(key));
    const uploader = api(s.url, key.api_key);
    await writeUserLimits(s.services.store, carolId, { storage_bytes: 0 });
    assert.equal((await put(uploader, 'small.txt', 's'.repeat(10))).status, 200);
    const r = await put(uploader, 'more.txt', 'm');
    assert.equal(r.status, 413);
    const body = await json(r);
    assert.equal(body.error.scope, 'key');
    assert.equal((await put(carol, 'more.txt', 'm'.repeat(100))).status, 200, 'no quota for the user now');
    const limits = await json(await uploader('/v1/users/carol/limits'));
    assert.equal(limits.storage.bytes, null);
    assert.equal(limits.key.storage.bytes, used + 10);
    assert.equal(limits.key.storage.remaining_bytes, 0);
    await writeUserLimits(s.services.store, carolId, {}, true);
  });
});

describe('an owner\'s cap on one algorithm\'s calls under way', () => {
  let s: TestServer;
  let owner: ReturnType<typeof api>;
  let callers: ReturnType<typeof api>[];
  let algorithmId: number;

  before(async () => {
    s = await startServer();
    owner = api(s.node, await s.user('erin'));
    callers = [api(s.node, await s.user('frank')), api(s.node, await s.user('grace'))];
    await release(owner, 'erin', 'Costly', { 'src/index.js': ALGO }, { settings: { language: 'javascript', max_concurrency: 1 } });
    const user = await s.services.users.require('erin');
    algorithmId = (await s.services.store.db.selectFrom('algorithms').select('id').where('owner_id', '=', user.id).executeTakeFirstOrThrow()).id;
  });
  after(() => s.close());

  const setCap = async (max: number | null) => {
    const r = await owner('/v1/algorithms/erin/Costly', { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ settings: { max_concurrency: max } }) });
    assert.equal(r.status, 200, await r.clone().text());
    return (await json(r)).settings;
  };
  /** Waits (bounded) until this node counts `n` calls of the algorithm under way. */
  const underWay = async (n: number) => {
    const end = Date.now() + 20_000;
    while (s.services.limits.algorithms.inFlight(algorithmId) < n && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    assert.equal(s.services.limits.algorithms.inFlight(algorithmId), n);
  };

  test('past the cap, any caller\'s call is 429 concurrency_limited (scope algorithm); the owner changes it without publishing again', { timeout: 120_000 }, async () => {
    const [frank, grace] = callers as [ReturnType<typeof api>, ReturnType<typeof api>];
    assert.equal((await json(await owner('/v1/algorithms/erin/Costly'))).settings.max_concurrency, 1);
    const slow = callAlgo(frank, 'erin/Costly', 'sleep 1500');
    await underWay(1);
    const r = await callAlgo(grace, 'erin/Costly', 'hi');
    assert.equal(r.status, 429);
    assert.equal(r.headers.get('retry-after'), '1');
    const body = await json(r);
    assert.equal(body.error.code, 'concurrency_limited');
    assert.equal(body.error.scope, 'algorithm');
    assert.equal(body.error.max_concurrency, 1);
    assert.match(body.error.message, /erin\/Costly has 1 calls under way/);
    // The owner too is held to it.
    assert.equal((await callAlgo(owner, 'erin/Costly', 'hi')).status, 429);
    // Raised on the algorithm (no new version): the next call goes through.
    assert.equal((await setCap(2)).max_concurrency, 2);
    assert.equal((await callAlgo(grace, 'erin/Costly', 'hi')).status, 200);
    assert.equal((await slow).status, 200);
    await underWay(0);
    // null: no cap (and none in the answer).
    assert.equal('max_concurrency' in (await setCap(null)), false);
    const many = await Promise.all([1, 2, 3].map(() => callAlgo(grace, 'erin/Costly', 'sleep 300')));
    assert.deepEqual(many.map((m) => m.status), [200, 200, 200]);
    const bad = await owner('/v1/algorithms/erin/Costly', { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ settings: { max_concurrency: 0 } }) });
    assert.equal(bad.status, 400);
    assert.match((await json(bad)).error.message, /settings.max_concurrency must be a whole number from 1/);
  });

  test('an async call accepted while the algorithm is at its cap waits for a slot and runs', { timeout: 120_000 }, async () => {
    const [frank, grace] = callers as [ReturnType<typeof api>, ReturnType<typeof api>];
    await setCap(1);
    const slow = callAlgo(frank, 'erin/Costly', 'sleep 1500');
    await underWay(1);
    const accepted = await json(await callAlgo(grace, 'erin/Costly', 'later', 'text/plain', '?output=void'));
    assert.equal(accepted.async, true, JSON.stringify(accepted));
    assert.equal((await slow).status, 200);
    const end = Date.now() + 60_000;
    let done: { status: string; http_status?: number | null; response?: string } = { status: 'queued' };
    while (Date.now() < end) {
      done = await json(await grace(`/v1/requests/${accepted.request_id}`));
      if (done.status !== 'queued' && done.status !== 'running') break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(done.status, 'done', JSON.stringify(done));
    assert.equal(done.http_status, 200, JSON.stringify(done));
  });
});
