/**
 * Usage (issue 15; docs/usage.md): every call that ran is counted per day, caller, version and
 * outcome, with the algorithm's compute time, bytes in and out; `GET /v1/users/:user/usage`
 * answers it as a caller and as an owner (without who called). Real server, real sandboxed
 * calls: the figures are compared with what the calls themselves answered.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { api, json, startServer, tempHome, type TestServer } from './helpers/server.ts';
import { callAlgo, release } from './helpers/algorithms.ts';
import { CLUSTER, SHARED } from './helpers/backends.ts';
import { openSqliteStore } from '../src/store/sqliteStore.ts';
import { UsageRecorder, usageRange, utcDay } from '../src/algorithms/usage.ts';
import type { UsageReport as Report } from '../client/src/types.ts';
import type { CallTarget } from '../src/algorithms/releases.ts';
import type { Outcome } from '../src/runtime/contract.ts';

type Call = ReturnType<typeof api>;

/** Echoes, fails, sleeps, loops, or calls itself through the SDK, by its input. */
const KINDS = `
export async function apply(input, ctx) {
  if (input && typeof input === 'object' && 'nested' in input) {
    const r = await ctx.client.algo('alice/Kinds').pipe(input.nested);
    return { inner: r.result };
  }
  if (typeof input !== 'string') return input;
  switch (input) {
    case 'fail': throw new Error('boom');
    case 'slow': await new Promise((r) => setTimeout(r, 40)); return 'slow';
    case 'loop': for (;;) {}
    default: return input;
  }
}
`;

let s: TestServer;
let alice: Call;
let bob: Call;
let aliceVersion: string;

before(async () => {
  s = await startServer();
  alice = api(s.url, await s.user('alice'));
  bob = api(s.url, await s.user('bob'));
  aliceVersion = (await release(alice, 'alice', 'Kinds', { 'src/index.js': KINDS }, { settings: { language: 'javascript' } })).version;
});
after(() => s?.close());

/**
 * GET /v1/users/:user/usage. On one server a read shows every call made before it (it flushes
 * first); in a cluster, calls that went to the other API node arrive with its next flush (~1 s):
 * there the read is repeated until `ready` holds (at most 10 s).
 */
async function usageOf(who: Call, user: string, ready: (r: Report) => boolean, query = ''): Promise<Report> {
  const until = Date.now() + 10_000;
  for (;;) {
    const r = await who(`/v1/users/${user}/usage${query}`);
    assert.equal(r.status, 200, await r.clone().text());
    assert.match(r.headers.get('content-type') ?? '', /^application\/json/);
    const body = (await json(r)) as Report;
    if (ready(body) || !CLUSTER || Date.now() > until) return body;
    await new Promise((res) => setTimeout(res, 200));
  }
}

/** What a call answered: its envelope's duration, and the result's bytes (0 for an error). */
async function call(who: Call, ref: string, body: string | Buffer, type: string, query = ''): Promise<{ duration: number; ok: boolean; result: unknown }> {
  const r = await callAlgo(who, ref, body, type, query);
  assert.equal(r.status, 200);
  const env = await json(r);
  assert.equal(typeof env.metadata?.duration, 'number', JSON.stringify(env));
  return { duration: env.metadata.duration as number, ok: 'result' in env, result: env.result ?? env.error };
}

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
const near = (actual: number, expected: number, within: number, what: string) =>
  assert.ok(Math.abs(actual - expected) <= within, `${what}: ${actual}, expected ${expected} ± ${within}`);

describe('recording', () => {
  let bobCalls: { duration: number; bytesIn: number; bytesOut: number; kind: 'ok' | 'error' | 'timeout' }[] = [];
  let aliceOwn: number[] = [];

  before(async () => {
    const calls: typeof bobCalls = [];
    const text = Buffer.from('héllo wörld', 'utf8');
    for (let i = 0; i < 3; i++) {
      const c = await call(bob, 'alice/Kinds', text, 'text/plain');
      assert.equal(c.result, 'héllo wörld');
      calls.push({ duration: c.duration, bytesIn: text.length, bytesOut: text.length, kind: 'ok' });
    }
    for (let i = 0; i < 2; i++) {
      const c = await call(bob, 'alice/Kinds', 'slow', 'text/plain');
      assert.equal(c.result, 'slow');
      assert.ok(c.duration >= 0.035, `slow took ${c.duration} s`);
      calls.push({ duration: c.duration, bytesIn: 4, bytesOut: 4, kind: 'ok' });
    }
    // JSON out as the runner writes it: compact, the same text as sent.
    const doc = '{"a":[1,2,{"b":null}],"c":"d"}';
    const j = await call(bob, 'alice/Kinds', doc, 'application/json');
    assert.deepEqual(j.result, JSON.parse(doc));
    calls.push({ duration: j.duration, bytesIn: doc.length, bytesOut: doc.length, kind: 'ok' });
    const bytes = Buffer.from(Array.from({ length: 300 }, (_, i) => i % 256));
    const b = await call(bob, 'alice/Kinds', bytes, 'application/octet-stream');
    assert.deepEqual(Buffer.from(b.result as string, 'base64'), bytes);
    calls.push({ duration: b.duration, bytesIn: 300, bytesOut: 300, kind: 'ok' });
    for (let i = 0; i < 2; i++) {
      const c = await call(bob, 'alice/Kinds', 'fail', 'text/plain');
      assert.equal(c.ok, false);
      calls.push({ duration: c.duration, bytesIn: 4, bytesOut: 0, kind: 'error' });
    }
    const t = await call(bob, 'alice/Kinds', 'loop', 'text/plain', '?timeout=1');
    assert.equal((t.result as { error_type: string }).error_type, 'TimeoutError');
    calls.push({ duration: t.duration, bytesIn: 4, bytesOut: 0, kind: 'timeout' });
    bobCalls = calls;
    // The owner calls it too (as a caller, and seen as an owner).
    aliceOwn = [(await call(alice, 'alice/Kinds', 'mine', 'text/plain')).duration];
  });

  test('a caller sees each call: counted, durations summed, bytes exact, outcomes split', async () => {
    const expected = {
      calls: bobCalls.length,
      seconds: sum(bobCalls.map((c) => c.duration)),
      bytes_in: sum(bobCalls.map((c) => c.bytesIn)),
      bytes_out: sum(bobCalls.map((c) => c.bytesOut)),
      errors: bobCalls.filter((c) => c.kind === 'error').length,
      timeouts: bobCalls.filter((c) => c.kind === 'timeout').length,
    };
    const r = await usageOf(bob, 'bob', (x) => x.as_caller.total.calls === expected.calls);
    assert.equal(r.user, 'bob');
    assert.equal(r.to, utcDay(Date.now()));
    const t = r.as_caller.total;
    assert.equal(t.calls, 10);
    assert.equal(t.calls, expected.calls);
    assert.equal(t.bytes_in, expected.bytes_in);
    assert.equal(t.bytes_out, expected.bytes_out);
    assert.equal(t.errors, 2);
    assert.equal(t.timeouts, 1);
    // Whole milliseconds in the table, each outcome's sum rounded once: within 1.5 ms.
    near(t.seconds, expected.seconds, 0.0016, 'seconds');
    // One row per day and version (the test may straddle midnight UTC), adding up to the total.
    assert.ok(r.as_caller.days.length >= 1 && r.as_caller.days.length <= 2, JSON.stringify(r.as_caller.days));
    for (const d of r.as_caller.days) {
      assert.equal(d.algorithm, 'alice/Kinds');
      assert.equal(d.version, aliceVersion);
      assert.match(d.day, /^\d{4}-\d{2}-\d{2}$/);
    }
    assert.equal(sum(r.as_caller.days.map((d) => d.calls)), t.calls);
    assert.equal(sum(r.as_caller.days.map((d) => d.bytes_out)), t.bytes_out);
    // Bob owns no algorithm: nobody's calls are his as an owner.
    assert.deepEqual(r.as_owner, { total: { calls: 0, seconds: 0, bytes_in: 0, bytes_out: 0, errors: 0, timeouts: 0 }, days: [] });
  });

  test("an owner sees the calls to their algorithms, not who made them; a caller's own calls apart", async () => {
    const all = bobCalls.length + aliceOwn.length;
    const r = await usageOf(alice, 'alice', (x) => x.as_owner.total.calls === all && x.as_caller.total.calls === aliceOwn.length);
    assert.equal(r.as_caller.total.calls, 1);
    assert.equal(r.as_caller.total.bytes_in, 4);
    assert.equal(r.as_caller.total.bytes_out, 4);
    near(r.as_caller.total.seconds, aliceOwn[0]!, 0.0006, "alice's own call");
    const o = r.as_owner.total;
    assert.equal(o.calls, all);
    assert.equal(o.errors, 2);
    assert.equal(o.timeouts, 1);
    assert.equal(o.bytes_in, sum(bobCalls.map((c) => c.bytesIn)) + 4);
    near(o.seconds, sum(bobCalls.map((c) => c.duration)) + aliceOwn[0]!, 0.0021, 'seconds as owner');
    for (const d of r.as_owner.days) assert.deepEqual(Object.keys(d).sort(), ['algorithm', 'bytes_in', 'bytes_out', 'calls', 'day', 'errors', 'seconds', 'timeouts', 'version']);
    assert.ok(!JSON.stringify(r).includes('bob'), 'the callers are not named');
  });

  test('a nested call counts for the caller, as a call of the inner algorithm', async () => {
    const carol = api(s.url, await s.user('carol'));
    const outer = await call(carol, 'alice/Kinds', '{"nested":"inside"}', 'application/json');
    assert.deepEqual(outer.result, { inner: 'inside' });
    const r = await usageOf(carol, 'carol', (x) => x.as_caller.total.calls === 2);
    assert.equal(r.as_caller.total.calls, 2, JSON.stringify(r.as_caller));
    // The outer call's input and output (JSON), and the inner one's (the SDK sends a string as text).
    assert.equal(r.as_caller.total.bytes_in, '{"nested":"inside"}'.length + 'inside'.length);
    assert.equal(r.as_caller.total.bytes_out, '{"inner":"inside"}'.length + 'inside'.length);
    assert.deepEqual(r.as_caller.days.map((d) => d.calls), [2], 'both calls are of alice/Kinds, on one row');
    // The inner call runs within the outer one's time.
    assert.ok(r.as_caller.total.seconds <= 2 * outer.duration + 0.002, `${r.as_caller.total.seconds} vs outer ${outer.duration}`);
  });

  test('a call with output=void is counted once it has run', async () => {
    const dave = api(s.url, await s.user('dave'));
    const r = await callAlgo(dave, 'alice/Kinds', 'later', 'text/plain', '?output=void');
    const accepted = await json(r);
    assert.equal(accepted.async, true, JSON.stringify(accepted));
    const until = Date.now() + 20_000;
    for (;;) {
      const done = await json(await dave(`/v1/requests/${accepted.request_id as string}`));
      if (done.status === 'done') break;
      assert.ok(Date.now() < until, 'the async call did not finish');
      await new Promise((res) => setTimeout(res, 50));
    }
    const u = await usageOf(dave, 'dave', (x) => x.as_caller.total.calls === 1);
    assert.equal(u.as_caller.total.calls, 1);
    assert.equal(u.as_caller.total.bytes_in, 5);
    assert.equal(u.as_caller.total.bytes_out, 5);
  });

  test('calls that never ran are not counted', async () => {
    const erin = api(s.url, await s.user('erin'));
    const missing = await json(await callAlgo(erin, 'alice/Nope', 'x'));
    assert.equal(missing.error?.error_type, 'EntityNotFoundError');
    const badVersion = await json(await callAlgo(erin, 'alice/Kinds/9.9.9', 'x'));
    assert.ok(badVersion.error, JSON.stringify(badVersion));
    const r = await usageOf(erin, 'erin', () => true);
    assert.equal(r.as_caller.total.calls, 0);
  });
});

describe('GET /v1/users/:user/usage', () => {
  test("another user's usage, or a name that is not a user, is refused", async () => {
    const other = await bob('/v1/users/alice/usage');
    assert.equal(other.status, 403);
    assert.equal((await json(other)).error.code, 'forbidden');
    const nobody = await bob('/v1/users/nobody_here/usage');
    assert.equal(nobody.status, 403);
    assert.equal((await json(nobody)).error.code, 'forbidden');
    const anonymous = await fetch(`${s.url}/v1/users/bob/usage`);
    assert.equal(anonymous.status, 401);
    // Case does not matter in user names.
    assert.equal((await bob('/v1/users/BOB/usage')).status, 200);
  });

  test('a key that may not manage the account may not read its usage', async () => {
    const made = await bob('/v1/users/bob/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'calls-only', permissions: { allow_algo_management: false } }) });
    assert.equal(made.status, 201);
    const narrow = api(s.url, (await json(made)).api_key as string);
    const r = await narrow('/v1/users/bob/usage');
    assert.equal(r.status, 403);
    assert.equal((await json(r)).error.code, 'key_permission_denied');
  });

  test('the range: last 30 days by default, validated, at most 366 days', async () => {
    const today = utcDay(Date.now());
    const r = await json(await bob('/v1/users/bob/usage'));
    assert.equal(r.to, today);
    assert.equal(r.from, utcDay(Date.now() - 29 * 86_400_000));
    const one = await json(await bob(`/v1/users/bob/usage?from=${today}`));
    assert.deepEqual([one.from, one.to], [today, today]);
    // A range with no calls in it.
    const old = await json(await bob('/v1/users/bob/usage?from=2020-01-01&to=2020-12-31'));
    assert.deepEqual([old.from, old.to, old.as_caller.total.calls, old.as_caller.days], ['2020-01-01', '2020-12-31', 0, []]);
    assert.equal((await bob('/v1/users/bob/usage?from=2020-01-01&to=2020-12-31')).status, 200, '366 days (a leap year) is allowed');
    for (const [query, says] of [
      ['?from=2021-01-01&to=2022-01-02', /367 days; ask for 366 at most/],
      ['?from=2024-02-30', /from must be a date as YYYY-MM-DD/],
      ['?to=2024-13-01', /to must be a date as YYYY-MM-DD/],
      ['?from=yesterday', /from must be a date/],
      ['?from=2024-1-01', /from must be a date/],
      ['?from=2024-05-02&to=2024-05-01', /from \(2024-05-02\) is after to \(2024-05-01\)/],
      ['?from=2024-05-01&from=2024-05-02', /from may be given once/],
    ] as const) {
      const bad = await bob(`/v1/users/bob/usage${query}`);
      assert.equal(bad.status, 400, query);
      const body = await json(bad);
      assert.equal(body.error.code, 'invalid_query', query);
      assert.match(body.error.message, says, query);
    }
  });

  test('usageRange on its own: defaults and the edges of the cap', () => {
    const now = Date.UTC(2024, 2, 1, 23, 59, 59);
    assert.deepEqual(usageRange({}, now), { from: '2024-02-01', to: '2024-03-01' });
    assert.deepEqual(usageRange({ to: '2024-01-10' }, now), { from: '2023-12-12', to: '2024-01-10' });
    assert.deepEqual(usageRange({ from: '2023-03-02' }, now), { from: '2023-03-02', to: '2024-03-01' });
    assert.throws(() => usageRange({ from: '2023-03-01' }, now), /367 days/);
  });
});

describe('durability', () => {
  test('what a server has not written yet is written when it closes, and read after a restart', async () => {
    const home = tempHome('algohost-usage-');
    // Never flushed on a timer here: only closing writes.
    const first = await startServer({ home, usage: { flushIntervalMs: 3_600_000 } });
    let closed = false;
    try {
      const owner = api(first.url, await first.user('olga'));
      await release(owner, 'olga', 'Echo', { 'src/index.js': 'export const apply = (x) => x;\n' }, { settings: { language: 'javascript' } });
      const pat = await first.user('pat');
      // To this process's own API node (in a cluster the other node flushes on its own timer).
      const patHere = api(first.node, pat);
      const durations: number[] = [];
      for (let i = 0; i < 4; i++) durations.push((await call(patHere, 'olga/Echo', `call ${i}`, 'text/plain')).duration);
      const rows = await first.services.store.db.selectFrom('usage').selectAll().execute();
      assert.deepEqual(rows, [], 'nothing written before closing');
      await first.app.close();
      await first.services.close();
      await first.cluster?.close();
      closed = true;

      const second = await startServer({ home });
      try {
        const r = await usageOf(api(second.url, pat), 'pat', (x) => x.as_caller.total.calls === 4);
        assert.equal(r.as_caller.total.calls, 4);
        assert.equal(r.as_caller.total.bytes_in, 4 * 'call 0'.length);
        assert.equal(r.as_caller.total.bytes_out, 4 * 'call 0'.length);
        near(r.as_caller.total.seconds, sum(durations), 0.0006, 'seconds');
        assert.equal(r.as_caller.days[0]?.algorithm, 'olga/Echo');
      } finally {
        await second.close();
      }
    } finally {
      if (!closed) await first.close();
      fs.rmSync(home, { recursive: true, force: true });
    }
  });

  test('a flush that fails keeps the sums, and the next one writes them once', { skip: SHARED ? 'locks the SQLite file of a store' : false }, async () => {
    const dir = tempHome('algohost-usage-store-');
    const file = path.join(dir, 'metadata.sqlite');
    const store = await openSqliteStore(file, { busyTimeoutMs: 20 });
    const usage = new UsageRecorder(store, { flushIntervalMs: 3_600_000 });
    const lock = new Database(file);
    // The caller is a user of this store (calls of a user deleted since are dropped; below).
    lock.prepare("INSERT INTO users (id, username, username_lc, created_at) VALUES (7, 'seven', 'seven', 0)").run();
    try {
      const target = (await s.services.releases.resolveCall({ userId: 0, username: 'alice', keyId: 'test', permissions: { allow_algo: true, algo_acl: ['algo://*'], allow_web_algo: false, referer_host: null, allow_data: false, allow_data_write: false, allow_algo_management: false } }, 'alice', 'Kinds', undefined)) satisfies CallTarget;
      const ok = (ms: number, bytes: number): Outcome => ({ kind: 'result', contentType: 'text', body: Buffer.alloc(bytes), stdout: '', stdoutTruncated: false, durationMs: ms });
      const rows = () => lock.prepare('SELECT day, caller_id, owner, name, version, outcome, calls, duration_ms, bytes_in, bytes_out FROM usage').all();
      for (let i = 0; i < 3; i++) usage.record(7, target, ok(1.25, 10), 3);
      usage.record(7, target, { kind: 'timeout', stdout: '', stdoutTruncated: false, durationMs: 1000 }, 5);

      lock.exec('BEGIN IMMEDIATE');
      await assert.rejects(usage.flush(), /locked|busy/i);
      usage.record(7, target, ok(1.25, 10), 3);
      await assert.rejects(usage.flush(), /locked|busy/i);
      lock.exec('ROLLBACK');
      assert.deepEqual(rows(), []);

      await usage.flush();
      const day = utcDay(Date.now());
      const base = { day, caller_id: 7, owner: 'alice', name: 'Kinds', version: aliceVersion };
      // 4 × 1.25 ms = 5 ms; the timeout's 1000 ms apart.
      assert.deepEqual(rows(), [
        { ...base, outcome: 'ok', calls: 4, duration_ms: 5, bytes_in: 12, bytes_out: 40 },
        { ...base, outcome: 'timeout', calls: 1, duration_ms: 1000, bytes_in: 5, bytes_out: 0 },
      ]);
      await usage.flush();
      assert.equal((rows() as { calls: number }[]).reduce((n, r) => n + r.calls, 0), 5, 'a second flush adds nothing');
      // Fractions of a millisecond are carried, not dropped: 0.4 + 0.4 + 0.4 ms is 1 ms.
      for (let i = 0; i < 3; i++) {
        usage.record(7, target, ok(0.4, 1), 1);
        await usage.flush();
      }
      await usage.close();
      const okRow = (rows() as { outcome: string; calls: number; duration_ms: number; bytes_in: number }[]).find((r) => r.outcome === 'ok')!;
      assert.deepEqual([okRow.calls, okRow.duration_ms, okRow.bytes_in], [7, 6, 15]);

      // A user deleted while their calls are still in a node's memory: deleting removed their
      // rows, and the next flush drops those calls instead of writing them back.
      const later = new UsageRecorder(store, { flushIntervalMs: 3_600_000 });
      later.record(7, target, ok(2, 1), 1);
      lock.prepare('INSERT INTO users (id, username, username_lc, created_at) VALUES (8, ?, ?, 0)').run('eight', 'eight');
      later.record(8, target, ok(2, 1), 1);
      lock.prepare('DELETE FROM usage WHERE caller_id = 7').run();
      lock.prepare('DELETE FROM users WHERE id = 7').run();
      await later.flush();
      assert.deepEqual((rows() as { caller_id: number; calls: number }[]).map((r) => [r.caller_id, r.calls]), [[8, 1]]);
      await later.close();
    } finally {
      lock.close();
      await store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
