/**
 * Call limits (issue 24; docs/limits.md): the token bucket and the limiter on a clock the
 * tests move, then over real HTTP: the operator's defaults, a user's own values set with the
 * admin command, 429 with Retry-After and the RateLimit fields, GET /v1/users/:user/limits,
 * a concurrency limit against calls really under way, and calls with output=void.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { TokenBucket } from '../src/limits/bucket.ts';
import { CallLimiter, LimitError, resolveLimits } from '../src/limits/limits.ts';
import { writeUserLimits } from '../src/limits/userLimits.ts';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { callAlgo, release } from './helpers/algorithms.ts';
import { runCli as cli } from './helpers/process.ts';

const CLUSTER = process.env.ALGOHOST_TEST_BACKENDS === 'cluster';

describe('the bucket and the limiter', () => {
  test('a bucket gives its burst, then one token per 60/rate seconds; Retry-After rounds up', () => {
    const b = new TokenBucket(60, 3, 0);
    assert.deepEqual([b.take(0), b.take(0), b.take(0), b.take(0)], [true, true, true, false]);
    assert.equal(b.retryAfterS(0), 1);
    assert.equal(b.take(999), false);
    assert.equal(b.take(1000), true);
    // Refills to the burst, no further.
    assert.equal(b.remaining(3_600_000), 3);
    const slow = new TokenBucket(6, 1, 0);
    slow.take(0);
    assert.equal(slow.retryAfterS(0), 10);
    assert.equal(slow.retryAfterS(9_500), 1);
  });

  test('a user\'s own values over the operator\'s; 0 is no limit; the burst follows the rate when not given', () => {
    const operator = { callsPerMin: 600, burst: 50, concurrency: 4 };
    assert.deepEqual(resolveLimits(operator, null), operator);
    assert.deepEqual(resolveLimits(operator, { calls_per_min: 60, burst: null, concurrency: null }), { callsPerMin: 60, burst: 3, concurrency: 4 });
    assert.deepEqual(resolveLimits(operator, { calls_per_min: null, burst: 5, concurrency: 0 }), { callsPerMin: 600, burst: 5, concurrency: 0 });
    assert.deepEqual(resolveLimits(operator, { calls_per_min: 0, burst: null, concurrency: null }), { callsPerMin: 0, burst: 0, concurrency: 4 });
  });

  test('the limiter: rate per user, concurrency held until released (once), nothing taken by a refusal', async () => {
    let now = 0;
    const limiter = new CallLimiter(() => now);
    // One process's limiter answers at once, never with a promise.
    const l = {
      admit: (...args: Parameters<CallLimiter['admit']>) => {
        const r = limiter.admit(...args);
        assert.equal(typeof r, 'function', 'admitted at once');
        return r as () => void;
      },
      state: (scope: string, limits: Parameters<CallLimiter['state']>[1]) => limiter.state(scope, limits),
    };
    const limits = { callsPerMin: 60, burst: 2, concurrency: 1 };
    const release = l.admit(1, limits);
    // Concurrency: a second call at once is refused, and takes no token.
    assert.throws(() => l.admit(1, limits), (e: unknown) => e instanceof LimitError && e.code === 'concurrency_limited');
    assert.equal((await l.state('u1', limits)).remaining, 1);
    // Another user is not held by this one.
    l.admit(2, limits)();
    release();
    release();
    assert.equal((await l.state('u1', limits)).in_flight, 0);
    l.admit(1, limits)();
    const refused = (() => {
      try {
        l.admit(1, limits);
      } catch (e) {
        return e as LimitError;
      }
      return undefined;
    })();
    assert.ok(refused instanceof LimitError);
    assert.equal(refused.code, 'rate_limited');
    assert.equal(refused.status, 429);
    assert.deepEqual(refused.headers, [
      ['retry-after', '1'],
      ['ratelimit-policy', '"calls";q=60;w=60'],
      ['ratelimit', '"calls";r=0;t=1'],
    ]);
    // Calls that hold no concurrent call (queued ones) still take a token.
    now += 1000;
    l.admit(1, { ...limits, concurrency: 1 }, false);
    assert.equal((await l.state('u1', limits)).remaining, 0);
  });
});

describe('limits over HTTP', () => {
  let s: TestServer;
  let alice: ReturnType<typeof api>;
  let bob: ReturnType<typeof api>;
  let now = Date.now();

  const ALGO = `
export async function apply(input) {
  if (typeof input === 'string' && input.startsWith('sleep ')) await new Promise((r) => setTimeout(r, Number(input.slice(6))));
  return input;
}
`;

  before(async () => {
    s = await startServer({ env: { ALGOHOST_LIMIT_CALLS_PER_MIN: '60', ALGOHOST_LIMIT_BURST: '3', ALGOHOST_LIMIT_CONCURRENCY: '2' }, now: () => now });
    alice = api(s.url, await s.user('alice'));
    bob = api(s.url, await s.user('bob'));
    await release(alice, 'alice', 'Echo', { 'src/index.js': ALGO }, { settings: { language: 'javascript' } });
  });
  after(() => s.close());

  test('the burst, then 429 rate_limited with Retry-After and the RateLimit fields; a second later, one more', { skip: CLUSTER && 'drives the limits\' clock of this process, which the second API node does not share (the next describe holds two nodes to one limit)' }, async () => {
    now += 3_600_000;
    // Admitted answers carry the fields too: what is left after this call, and the seconds
    // until the bucket is full again (until the next token, when none is left). The first
    // through the direct path, the second through fastify's (the web route), the third direct.
    const seen: (string | null)[][] = [];
    for (const call of [() => callAlgo(alice, 'alice/Echo', 'hi'), () => alice('/v1/web/algo/alice/Echo', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'hi' }), () => callAlgo(alice, 'alice/Echo', 'hi')]) {
      const ok = await call();
      assert.equal(ok.status, 200);
      seen.push([ok.headers.get('ratelimit-policy'), ok.headers.get('ratelimit')]);
    }
    assert.deepEqual(seen, [
      ['"calls";q=60;w=60', '"calls";r=2;t=1'],
      ['"calls";q=60;w=60', '"calls";r=1;t=2'],
      ['"calls";q=60;w=60', '"calls";r=0;t=1'],
    ]);
    const r = await callAlgo(alice, 'alice/Echo', 'hi');
    assert.equal(r.status, 429);
    assert.equal(r.headers.get('retry-after'), '1');
    assert.equal(r.headers.get('ratelimit-policy'), '"calls";q=60;w=60');
    assert.equal(r.headers.get('ratelimit'), '"calls";r=0;t=1');
    const body = await json(r);
    assert.equal(body.error.code, 'rate_limited');
    assert.equal(body.error.limit, 'calls_per_min');
    assert.match(body.error.message, /60 calls a minute/);
    // Another user has a bucket of their own.
    assert.equal((await callAlgo(bob, 'alice/Echo', 'hi')).status, 200);
    const { compute, storage, requests, ...limits } = await json(await alice('/v1/users/alice/limits'));
    assert.deepEqual(limits, { calls_per_min: 60, burst: 3, concurrency: 2, remaining: 0, reset_s: 3, in_flight: 0, share: 1, key: null });
    // No rate of every request unless the operator or the user's own limits give one.
    assert.deepEqual(requests, { requests_per_min: null, request_burst: null, remaining: null, reset_s: null });
    assert.equal(compute.seconds_per_month, null);
    assert.equal(compute.remaining_s, null);
    assert.deepEqual(storage, { bytes: null, used_bytes: 0, remaining_bytes: null });
    now += 1000;
    assert.equal((await callAlgo(alice, 'alice/Echo', 'hi')).status, 200);
    assert.equal((await alice('/v1/users/bob/limits')).status, 403);
  });

  test('a user\'s own values, set with the store as the admin command does, hold from the next call', { skip: CLUSTER && 'drives the limits\' clock of this process, which the second API node does not share (the next describe holds two nodes to one limit)' }, async () => {
    now += 3_600_000;
    const user = await s.services.users.require('bob');
    await writeUserLimits(s.services.store, user.id, { calls_per_min: 120, burst: 1 });
    assert.equal((await callAlgo(bob, 'alice/Echo', 'hi')).status, 200);
    const r = await callAlgo(bob, 'alice/Echo', 'hi');
    assert.equal(r.status, 429);
    assert.equal(r.headers.get('ratelimit-policy'), '"calls";q=120;w=60');
    now += 500;
    assert.equal((await callAlgo(bob, 'alice/Echo', 'hi')).status, 200);
    // No limit for bob (0), whatever the operator's default.
    await writeUserLimits(s.services.store, user.id, { calls_per_min: 0 });
    for (let i = 0; i < 8; i++) assert.equal((await callAlgo(bob, 'alice/Echo', 'hi')).status, 200);
    const limits = await json(await bob('/v1/users/bob/limits'));
    assert.equal(limits.calls_per_min, null);
    assert.equal(limits.remaining, null);
    await writeUserLimits(s.services.store, user.id, {}, true);
  });

  test('concurrency: a third call while two are under way is 429 concurrency_limited; queued calls (output=void) are not held to it', { skip: CLUSTER && 'drives the limits\' clock of this process, which the second API node does not share (the next describe holds two nodes to one limit)' }, async () => {
    now += 3_600_000;
    const slow = [callAlgo(alice, 'alice/Echo', 'sleep 1500'), callAlgo(alice, 'alice/Echo', 'sleep 1500')];
    // Both are under way once the server counts them.
    const end = Date.now() + 10_000;
    while ((await json(await alice('/v1/users/alice/limits'))).in_flight < 2 && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    const r = await callAlgo(alice, 'alice/Echo', 'hi');
    assert.equal(r.status, 429);
    const body = await json(r);
    assert.equal(body.error.code, 'concurrency_limited');
    assert.equal(body.error.limit, 'concurrency');
    const queued = await callAlgo(alice, 'alice/Echo', 'hi', 'text/plain', '?output=void');
    assert.equal(queued.status, 200, JSON.stringify(await queued.clone().text()));
    for (const p of slow) assert.equal((await p).status, 200);
    assert.equal((await json(await alice('/v1/users/alice/limits'))).in_flight, 0);
    // The queued call took the burst's last token (2 + 1); a second later there is one more.
    assert.equal((await callAlgo(alice, 'alice/Echo', 'hi')).status, 429);
    now += 1000;
    assert.equal((await callAlgo(alice, 'alice/Echo', 'hi')).status, 200);
  });

  test('a key\'s own limits, in its permissions: calls with it are held to them and to the user\'s; it hands out no key without them', { skip: CLUSTER && 'drives the limits\' clock of this process, which the second API node does not share (the next describe holds two nodes to one limit)' }, async () => {
    now += 3_600_000;
    const made = await alice('/v1/users/alice/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'slow', permissions: { limits: { calls_per_min: 6, burst: 1, concurrency: 1 } } }) });
    const key = await json(made);
    assert.equal(made.status, 201, JSON.stringify(key));
    assert.deepEqual(key.permissions.limits, { calls_per_min: 6, burst: 1, concurrency: 1 });
    const slow = api(s.url, key.api_key);
    assert.equal((await callAlgo(slow, 'alice/Echo', 'hi')).status, 200);
    const r = await callAlgo(slow, 'alice/Echo', 'hi');
    assert.equal(r.status, 429);
    assert.equal(r.headers.get('retry-after'), '10');
    assert.equal(r.headers.get('ratelimit-policy'), '"calls";q=6;w=60');
    const body = await json(r);
    assert.equal(body.error.scope, 'key');
    assert.match(body.error.message, /this key may make 6 calls a minute/);
    // The user's other keys are not held to it; the key's refusal took nothing from the user.
    assert.equal((await callAlgo(alice, 'alice/Echo', 'hi')).status, 200);
    const limits = await json(await slow('/v1/users/alice/limits'));
    const { compute: _c, storage: _s, requests: _r, ...own } = limits.key;
    assert.deepEqual(own, { calls_per_min: 6, burst: 1, concurrency: 1, remaining: 0, reset_s: 10, in_flight: 0 });
    assert.equal(limits.remaining, 1, 'the user\'s bucket: 3, less the two calls that went through');
    // Bad limits are refused, naming what is wrong.
    const bad = await alice('/v1/users/alice/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'bad', permissions: { limits: { calls_per_min: 0 } } }) });
    assert.equal(bad.status, 400);
    assert.match((await json(bad)).error.message, /limits.calls_per_min must be a whole number from 1/);
    // A key that may manage keys, held to a limit, hands out none without it or above it.
    const manager = await json(await alice('/v1/users/alice/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'manager', permissions: { limits: { calls_per_min: 30 } } }) }));
    const asManager = api(s.url, manager.api_key);
    const higher = await asManager('/v1/users/alice/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'higher', permissions: { limits: { calls_per_min: 60 } } }) });
    assert.equal(higher.status, 403);
    assert.match((await json(higher)).error.message, /limits.calls_per_min/);
    const unlimited = await asManager('/v1/users/alice/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'free', permissions: { limits: null } }) });
    assert.equal(unlimited.status, 403);
    const inherits = await asManager('/v1/users/alice/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'child' }) });
    assert.equal(inherits.status, 201);
    assert.deepEqual((await json(inherits)).permissions.limits, { calls_per_min: 30 });
  });

  test('algohost user limits: shows, sets (default, 0), clears; refuses a bad number', { timeout: 400_000 }, async () => {
    // The command reads the operator's defaults from the environment, as the server does.
    const env = { ALGOHOST_LIMIT_CALLS_PER_MIN: '60', ALGOHOST_LIMIT_BURST: '3', ALGOHOST_LIMIT_CONCURRENCY: '2' };
    // Each run opens the store (PostgreSQL in the shared configurations) on a loaded machine: a minute each.
    const runCli = (args: string[], home: string) => cli(args, home, 60_000, env);
    const set = await runCli(['user', 'limits', 'alice', '--calls-per-min', '30', '--concurrency', '0'], s.home);
    assert.equal(set.code, 0, set.stderr);
    const quotas = { compute_seconds_per_month: null, storage_bytes: null };
    const requests = { requests_per_min: null, request_burst: null };
    const own = { ...quotas, share: null, ...requests };
    const force = { ...quotas, share: 1, ...requests };
    const { used, ...set1 } = JSON.parse(set.stdout);
    assert.deepEqual(set1, { username: 'alice', own: { calls_per_min: 30, burst: null, concurrency: 0, ...own }, in_force: { calls_per_min: 30, burst: 2, concurrency: null, ...force } });
    assert.equal(typeof used.compute_seconds_this_month, 'number');
    const back = await runCli(['user', 'limits', 'alice', '--calls-per-min', 'default'], s.home);
    assert.deepEqual(JSON.parse(back.stdout).in_force, { calls_per_min: 60, burst: 3, concurrency: null, ...force });
    const cleared = await runCli(['user', 'limits', 'alice', '--clear'], s.home);
    assert.deepEqual(JSON.parse(cleared.stdout).own, { calls_per_min: null, burst: null, concurrency: null, ...own });
    const shown = await runCli(['user', 'limits', 'alice'], s.home);
    assert.deepEqual(JSON.parse(shown.stdout).in_force, { calls_per_min: 60, burst: 3, concurrency: 2, ...force });
    // The quotas: a user's own, and 0 for none.
    const quota = await runCli(['user', 'limits', 'alice', '--compute-seconds-per-month', '3600', '--storage-bytes', '0'], s.home);
    assert.equal(quota.code, 0, quota.stderr);
    assert.deepEqual(JSON.parse(quota.stdout).own, { calls_per_min: null, burst: null, concurrency: null, compute_seconds_per_month: 3600, storage_bytes: 0, share: null, ...requests });
    assert.deepEqual(JSON.parse(quota.stdout).in_force, { calls_per_min: 60, burst: 3, concurrency: 2, compute_seconds_per_month: 3600, storage_bytes: null, share: 1, ...requests });
    // Every request's rate: her own, the burst three seconds' worth when not given.
    const reqs = await runCli(['user', 'limits', 'alice', '--requests-per-min', '120'], s.home);
    assert.equal(reqs.code, 0, reqs.stderr);
    assert.equal(JSON.parse(reqs.stdout).own.requests_per_min, 120);
    assert.deepEqual([JSON.parse(reqs.stdout).in_force.requests_per_min, JSON.parse(reqs.stdout).in_force.request_burst], [120, 6]);
    assert.equal((await runCli(['user', 'limits', 'alice', '--requests-per-min', 'default'], s.home)).code, 0);
    // A share of her own (the operator's default from the environment otherwise), and back.
    const shared = await cli(['user', 'limits', 'alice', '--share', '4'], s.home, 60_000, { ...env, ALGOHOST_LIMIT_SHARE: '2' });
    assert.equal(shared.code, 0, shared.stderr);
    assert.equal(JSON.parse(shared.stdout).own.share, 4);
    assert.equal(JSON.parse(shared.stdout).in_force.share, 4);
    const byDefault = await cli(['user', 'limits', 'alice', '--share', 'default'], s.home, 60_000, { ...env, ALGOHOST_LIMIT_SHARE: '2' });
    assert.equal(JSON.parse(byDefault.stdout).own.share, null);
    assert.equal(JSON.parse(byDefault.stdout).in_force.share, 2);
    for (const share of ['0', '1001', 'lots']) {
      const refused = await runCli(['user', 'limits', 'alice', '--share', share], s.home);
      assert.notEqual(refused.code, 0);
      assert.match(refused.stderr, /--share takes a whole number from 1 to 1000/);
    }
    const bad = await runCli(['user', 'limits', 'alice', '--burst', 'lots'], s.home);
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /--burst takes a whole number/);
  });
});

/**
 * One user's limits on every API node at once: under test:cluster the requests go to two API
 * nodes in turn (a balancer in front), which take from one bucket and count calls under way in
 * the shared database (src/limits/shared.ts); on one server, its own limiter. Real clocks.
 */
describe('limits across API nodes', () => {
  let s: TestServer;
  let carol: ReturnType<typeof api>;
  before(async () => {
    s = await startServer();
    carol = api(s.url, await s.user('carol'));
    await release(carol, 'carol', 'Wait', { 'src/index.js': 'exports.apply = async (ms) => { await new Promise((r) => setTimeout(r, Number(ms))); return ms; };\n' }, { settings: { language: 'javascript' } });
  });
  after(() => s.close());

  test('a burst of calls at once, over both nodes: no more are admitted than the bucket holds (and refills meanwhile)', async () => {
    const user = await s.services.users.require('carol');
    await writeUserLimits(s.services.store, user.id, { calls_per_min: 60, burst: 4, concurrency: 0 });
    try {
      const t0 = Date.now();
      const answers = await Promise.all(Array.from({ length: 16 }, () => callAlgo(carol, 'carol/Wait', '1', 'application/json')));
      const elapsedS = (Date.now() - t0) / 1000;
      const ok = answers.filter((r) => r.status === 200).length;
      assert.ok(answers.every((r) => r.status === 200 || r.status === 429), answers.map((r) => r.status).join(' '));
      // The burst, plus one a second for as long as the calls took.
      assert.ok(ok <= 4 + Math.ceil(elapsedS), `${ok} admitted in ${elapsedS} s`);
      assert.ok(ok >= 4, `the burst is given: ${ok}`);
      const refused = answers.find((r) => r.status === 429)!;
      assert.equal((await json(refused)).error.code, 'rate_limited');
    } finally {
      await writeUserLimits(s.services.store, user.id, {}, true);
    }
  });

  test('every request, over both nodes: past the user\'s requests a minute, 429 before the body is read (a refused upload stores nothing); another user is not held', async () => {
    const user = await s.services.users.require('carol');
    const frank = api(s.url, await s.user('frank'));
    assert.ok([200, 201, 409].includes((await carol('/v1/data/.my', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'reqs' }) })).status));
    await writeUserLimits(s.services.store, user.id, { requests_per_min: 60, request_burst: 4 });
    try {
      const state = (await json(await carol('/v1/users/carol/limits'))).requests;
      assert.equal(state.requests_per_min, 60);
      assert.equal(state.request_burst, 4);
      assert.ok(state.remaining <= 3, JSON.stringify(state));
      const t0 = Date.now();
      const answers = await Promise.all(Array.from({ length: 16 }, (_, i) => carol(`/v1/data/.my/reqs/f${i}`, { method: 'PUT', body: `file ${i}` })));
      const elapsedS = (Date.now() - t0) / 1000;
      const ok = answers.filter((r) => r.status === 200);
      assert.ok(answers.every((r) => r.status === 200 || r.status === 429), answers.map((r) => r.status).join(' '));
      assert.ok(ok.length <= 3 + Math.ceil(elapsedS), `${ok.length} admitted in ${elapsedS} s`);
      const refused = answers.find((r) => r.status === 429)!;
      assert.equal(refused.headers.get('ratelimit-policy'), '"requests";q=60;w=60');
      assert.ok(Number(refused.headers.get('retry-after')) >= 1);
      const body = await json(refused);
      assert.equal(body.error.code, 'rate_limited');
      assert.equal(body.error.limit, 'requests_per_min');
      // Another user's requests meanwhile: not held.
      const other = await frank('/v1/data/.my');
      assert.equal(other.status, 200);
      await writeUserLimits(s.services.store, user.id, {}, true);
      // Exactly the admitted uploads are stored: a refused one left nothing.
      const listing = await json(await carol('/v1/data/.my/reqs'));
      assert.equal(listing.files?.length ?? 0, ok.length);
    } finally {
      await writeUserLimits(s.services.store, user.id, {}, true);
    }
  });

  test('calls at once, over both nodes: two under way, the rest refused until they end', async () => {
    const user = await s.services.users.require('carol');
    await writeUserLimits(s.services.store, user.id, { calls_per_min: 0, concurrency: 2 });
    try {
      const answers = await Promise.all(Array.from({ length: 6 }, () => callAlgo(carol, 'carol/Wait', '1500', 'application/json')));
      const codes = answers.map((r) => r.status);
      assert.equal(codes.filter((c) => c === 200).length, 2, codes.join(' '));
      assert.equal(codes.filter((c) => c === 429).length, 4, codes.join(' '));
      assert.equal((await json(answers.find((r) => r.status === 429)!)).error.code, 'concurrency_limited');
      // All given back: two more run.
      const again = await Promise.all([callAlgo(carol, 'carol/Wait', '1', 'application/json'), callAlgo(carol, 'carol/Wait', '1', 'application/json')]);
      assert.deepEqual(again.map((r) => r.status), [200, 200]);
      assert.equal((await json(await carol('/v1/users/carol/limits'))).in_flight, 0);
    } finally {
      await writeUserLimits(s.services.store, user.id, {}, true);
    }
  });

  test('an owner\'s cap on an algorithm, over both nodes: two under way, the rest refused, any caller\'s; an async run waits for a slot', async () => {
    await release(carol, 'carol', 'Capped', { 'src/index.js': 'exports.apply = async (ms) => { await new Promise((r) => setTimeout(r, Number(ms))); return ms; };\n' }, { settings: { language: 'javascript', max_concurrency: 2 } });
    const dave = api(s.url, await s.user('dave'));
    const answers = await Promise.all(Array.from({ length: 6 }, (_, i) => callAlgo(i % 2 === 0 ? carol : dave, 'carol/Capped', '1500', 'application/json')));
    const codes = answers.map((r) => r.status);
    assert.equal(codes.filter((c) => c === 200).length, 2, codes.join(' '));
    assert.equal(codes.filter((c) => c === 429).length, 4, codes.join(' '));
    const refused = await json(answers.find((r) => r.status === 429)!);
    assert.equal(refused.error.code, 'concurrency_limited');
    assert.equal(refused.error.scope, 'algorithm');
    // At the cap, an async call is accepted and runs once a slot is free (on whichever node took it).
    const slow = Promise.all([callAlgo(carol, 'carol/Capped', '1000', 'application/json'), callAlgo(dave, 'carol/Capped', '1000', 'application/json')]);
    await new Promise((r) => setTimeout(r, 200));
    const accepted = await json(await callAlgo(dave, 'carol/Capped', '1', 'application/json', '?output=void'));
    assert.equal(accepted.async, true, JSON.stringify(accepted));
    assert.deepEqual((await slow).map((r) => r.status), [200, 200]);
    const end = Date.now() + 30_000;
    let done: { status?: string; http_status?: number } = {};
    while (Date.now() < end && done.status !== 'done') {
      done = await json(await dave(`/v1/requests/${accepted.request_id}`));
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(done.http_status, 200, JSON.stringify(done));
    // All given back: two more run at once.
    const again = await Promise.all([callAlgo(carol, 'carol/Capped', '1', 'application/json'), callAlgo(dave, 'carol/Capped', '1', 'application/json')]);
    assert.deepEqual(again.map((r) => r.status), [200, 200]);
  });
});
