/**
 * Quotas (issue 24; docs/limits.md): compute seconds per calendar month, per user and per key,
 * counted from the usage records, across a month's end on the clock the test moves; the meter
 * against a real store. Calls go to this process's own API node (`s.node`), whose clock the
 * test moves (under test:cluster the other API node keeps the real time).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { ComputeMeter, monthBounds, utcMonth } from '../src/limits/compute.ts';
import { writeUserLimits } from '../src/limits/userLimits.ts';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { callAlgo, release } from './helpers/algorithms.ts';

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
});
