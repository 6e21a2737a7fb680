/**
 * Fair shares among callers waiting (issue 24; docs/limits.md, "Fair shares"): the FairQueue
 * itself, and the worker pool serving waiting calls from it (with stand-in workers: what is
 * tested is the order in which the pool hands out its workers; real sandboxes are in
 * fair-shares.test.ts).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DeadlineHeap, FairQueue, MAX_WEIGHT } from '../src/fairQueue.ts';
import { WorkerPool } from '../src/runtime/pool.ts';
import { ExecutorBusyError } from '../src/runtime/contract.ts';
import type { Worker } from '../src/runtime/worker.ts';

const item = (caller: string, n: number) => ({ caller, n, settled: undefined as boolean | undefined });
const order = (q: FairQueue<ReturnType<typeof item>>) => {
  const out: string[] = [];
  for (let i = q.take(() => true); i; i = q.take(() => true)) out.push(`${i.caller}${i.n}`);
  return out;
};

test('callers are served in turns, each in their own order: a flood waits behind itself', () => {
  const q = new FairQueue<ReturnType<typeof item>>(1000, 1000);
  for (let i = 0; i < 5; i++) q.push(item('m', i));
  q.push(item('a', 0));
  q.push(item('a', 1));
  q.push(item('b', 0));
  assert.equal(q.length, 8);
  assert.equal(q.callers, 3);
  assert.deepEqual(order(q), ['m0', 'a0', 'b0', 'm1', 'a1', 'm2', 'm3', 'm4']);
  assert.equal(q.length, 0);
  assert.equal(q.callers, 0);
});

test('a newcomer joins the turns at the back, and is served within one round', () => {
  const q = new FairQueue<ReturnType<typeof item>>(1000, 1000);
  for (let i = 0; i < 100; i++) q.push(item('m', i));
  for (let i = 0; i < 100; i++) q.push(item('n', i));
  assert.equal(q.take(() => true)!.caller, 'm');
  q.push(item('a', 0));
  // n's turn (it was waiting), then m's, then a's: behind one call of each caller already waiting, not 199.
  assert.deepEqual([q.take(() => true), q.take(() => true), q.take(() => true)].map((i) => `${i!.caller}${i!.n}`), ['n0', 'm1', 'a0']);
});

test('a caller whose oldest item cannot be served is passed over and keeps its turn; its later items wait behind it', () => {
  const q = new FairQueue<ReturnType<typeof item>>(1000, 1000);
  q.push(item('m', 0));
  q.push(item('m', 1));
  q.push(item('a', 0));
  // m's oldest cannot be served now (say, its version is at its limit): a is served.
  assert.equal(q.take((i) => !(i.caller === 'm' && i.n === 0))!.caller, 'a');
  // m kept its place, and its second item did not jump its first.
  assert.deepEqual(order(q), ['m0', 'm1']);
});

test('bounds: one caller\'s own, then everyone\'s; a refused item is not queued', () => {
  const q = new FairQueue<ReturnType<typeof item>>(5, 3);
  for (let i = 0; i < 3; i++) assert.equal(q.push(item('m', i)), undefined);
  assert.equal(q.push(item('m', 3)), 'caller_queue_full');
  assert.equal(q.push(item('a', 0)), undefined);
  assert.equal(q.push(item('b', 0)), undefined);
  assert.equal(q.push(item('c', 0)), 'queue_full');
  assert.equal(q.length, 5);
  assert.equal(q.waiting('m'), 3);
  q.take(() => true);
  assert.equal(q.waiting('m'), 2);
  assert.equal(q.push(item('m', 4)), undefined);
});

test('an item removed from the middle is skipped, counted out at once, and never served', () => {
  const q = new FairQueue<ReturnType<typeof item>>(100, 100);
  const items = [0, 1, 2, 3].map((n) => item('m', n));
  for (const i of items) q.push(i);
  q.push(item('a', 0));
  assert.equal(q.remove(items[1]!), true);
  assert.equal(q.remove(items[1]!), false);
  assert.equal(q.waiting('m'), 3);
  assert.deepEqual(order(q), ['m0', 'a0', 'm2', 'm3']);
  // Everything removed: the caller leaves the turns.
  const only = item('z', 0);
  q.push(only);
  q.remove(only);
  assert.equal(q.callers, 0);
  assert.equal(q.take(() => true), undefined);
});

test('drain gives back every item waiting', () => {
  const q = new FairQueue<ReturnType<typeof item>>(100, 100);
  for (let i = 0; i < 3; i++) q.push(item('m', i));
  q.push(item('a', 0));
  assert.equal(q.drain().length, 4);
  assert.equal(q.length, 0);
});

test('many items through one caller\'s line: its storage is reclaimed, the order kept', () => {
  const q = new FairQueue<ReturnType<typeof item>>(1_000_000, 1_000_000);
  let next = 0;
  let seen = 0;
  for (let round = 0; round < 50; round++) {
    for (let i = 0; i < 100; i++) q.push(item('m', next++));
    for (let i = 0; i < 90; i++) assert.equal(q.take(() => true)!.n, seen++);
  }
  assert.equal(q.length, 500);
});

test('takeKeyed: in turn order, the first caller with an item of a key given, its oldest of that key', () => {
  const k = (caller: string, n: number, key: string) => ({ caller, n, key, settled: undefined as boolean | undefined });
  const q = new FairQueue<ReturnType<typeof k>>(100, 100);
  q.push(k('m', 0, 'x'));
  q.push(k('m', 1, 'y'));
  q.push(k('m', 2, 'y'));
  q.push(k('a', 0, 'y'));
  const idle = new Map([['y', 1]]);
  // m's turn: its oldest y (behind its x), not a's.
  assert.equal(q.takeKeyed(idle, () => true)!.n, 1);
  // Now a's turn.
  assert.equal(q.takeKeyed(idle, () => true)!.caller, 'a');
  assert.equal(q.takeKeyed(new Map([['z', 1]]), () => true), undefined);
  // The rest in order; x was never jumped by anything but a y.
  assert.deepEqual([q.take(() => true)!.n, q.take(() => true)!.n], [0, 2]);
  assert.equal(q.length, 0);
});

test('shares: a caller of weight 3 is served three items a turn where one of weight 1 is served one, while both wait', () => {
  const w = (caller: string, n: number, weight?: number) => ({ caller, n, weight, settled: undefined as boolean | undefined });
  const q = new FairQueue<ReturnType<typeof w>>(1000, 1000);
  for (let i = 0; i < 8; i++) q.push(w('p', i, 3));
  for (let i = 0; i < 8; i++) q.push(w('f', i));
  const out: string[] = [];
  for (let i = q.take(() => true); i; i = q.take(() => true)) out.push(`${i.caller}${i.n}`);
  // Three of p's a turn, one of f's, until p has none left; each in their own order.
  assert.deepEqual(out, ['p0', 'p1', 'p2', 'f0', 'p3', 'p4', 'p5', 'f1', 'p6', 'p7', 'f2', 'f3', 'f4', 'f5', 'f6', 'f7']);
});

test('shares: a turn cut short keeps its place; a newcomer waits at most one turn of each caller before it; the latest item says the share', () => {
  const w = (caller: string, n: number, weight?: number) => ({ caller, n, weight, settled: undefined as boolean | undefined });
  const q = new FairQueue<ReturnType<typeof w>>(1000, 1000);
  for (let i = 0; i < 6; i++) q.push(w('p', i, 3));
  q.push(w('f', 0));
  assert.equal(q.take(() => true)!.n, 0);
  // p's next cannot be served now (its version at its limit, say): f is served; p keeps its turn
  // (two of its three left).
  assert.equal(q.take((i) => i.caller !== 'p')!.caller, 'f');
  q.push(w('a', 0));
  assert.deepEqual([1, 2, 3].map(() => { const i = q.take(() => true)!; return `${i.caller}${i.n}`; }), ['p1', 'p2', 'a0']);
  // p queues again with a share of 1: from now on one a turn.
  q.push(w('p', 6, 1));
  q.push(w('a', 1));
  assert.deepEqual([1, 2, 3, 4].map(() => { const i = q.take(() => true)!; return `${i.caller}${i.n}`; }), ['p3', 'a1', 'p4', 'p5']);
});

test('shares: an item without a weight (an async call found queued at a restart) leaves its caller\'s share as it is', () => {
  const w = (caller: string, n: number, weight?: number) => ({ caller, n, weight, settled: undefined as boolean | undefined });
  const q = new FairQueue<ReturnType<typeof w>>(1000, 1000);
  for (let i = 0; i < 3; i++) q.push(w('p', i, 2));
  q.push(w('p', 3));
  q.push(w('f', 0));
  q.push(w('f', 1));
  const out: string[] = [];
  for (let i = q.take(() => true); i; i = q.take(() => true)) out.push(`${i.caller}${i.n}`);
  assert.deepEqual(out, ['p0', 'p1', 'f0', 'p2', 'p3', 'f1']);
});

test('shares: a weight is a whole number from 1 to MAX_WEIGHT (anything else is read as the nearest)', () => {
  const w = (caller: string, n: number, weight?: number) => ({ caller, n, weight, settled: undefined as boolean | undefined });
  for (const [given, turn] of [[0, 1], [-5, 1], [Number.NaN, 1], [2.7, 2], [MAX_WEIGHT + 50, MAX_WEIGHT]] as const) {
    const q = new FairQueue<ReturnType<typeof w>>(5000, 5000);
    for (let i = 0; i < MAX_WEIGHT + 2; i++) q.push(w('p', i, given));
    q.push(w('f', 0));
    let before = 0;
    while (q.take(() => true)!.caller === 'p') before++;
    assert.equal(before, turn, `weight ${given}`);
  }
});

test('the deadline heap gives the earliest deadline not settled', () => {
  const h = new DeadlineHeap<{ deadline: number; settled?: boolean }>();
  const xs = [5, 3, 9, 1, 7, 2, 8].map((deadline) => ({ deadline, settled: false }));
  for (const x of xs) h.push(x);
  xs[3]!.settled = true; // 1
  assert.equal(h.peek()!.deadline, 2);
  const out: number[] = [];
  for (let x = h.pop(); x; x = h.pop()) out.push(x.deadline);
  assert.deepEqual(out, [2, 3, 5, 7, 8, 9]);
});

// The pool, with stand-in workers: calls that hold their worker until told to go.
const fake = () => ({ dead: false, stop: async () => undefined }) as unknown as Worker;

function harness(options: { maxWorkers?: number; maxPerVersion?: number; maxQueue?: number; maxQueuePerCaller?: number } = {}) {
  const pool = new WorkerPool({ maxWorkers: 1, maxPerVersion: 1, idleMs: 600_000, maxQueue: 100, maxQueuePerCaller: 100, queueTimeoutMs: 60_000, ...options });
  const started: string[] = [];
  const finish = new Map<string, () => void>();
  const outcomes = new Map<string, string>();
  const call = (caller: string, id: string, key = 'v1', weight?: number) =>
    pool
      .with(key, async () => fake(), () => new Promise<void>((r) => { started.push(id); finish.set(id, r); }), 0, Infinity, caller, weight)
      .then(() => outcomes.set(id, 'ok'), (e: unknown) => outcomes.set(id, e instanceof ExecutorBusyError ? e.reason : String(e)));
  const settle = () => new Promise((r) => setImmediate(r));
  const done = async (id: string) => {
    finish.get(id)!();
    for (let i = 0; i < 5; i++) await settle();
  };
  return { pool, started, outcomes, call, done, settle };
}

test('the pool: a flooding caller\'s calls wait behind their own; the others are served at the next turns', async () => {
  const h = harness();
  for (let i = 0; i < 20; i++) void h.call('mallory', `m${i}`);
  await h.settle();
  void h.call('alice', 'a0');
  void h.call('bob', 'b0');
  await h.settle();
  assert.deepEqual(h.started, ['m0']);
  assert.equal(h.pool.waitingFor('mallory'), 19);
  await h.done('m0');
  // Not m1..m19 first (first come, first served): mallory's next, then alice's and bob's, in turns.
  assert.deepEqual(h.started, ['m0', 'm1']);
  await h.done('m1');
  await h.done('a0');
  await h.done('b0');
  assert.deepEqual(h.started, ['m0', 'm1', 'a0', 'b0', 'm2']);
  await h.pool.close();
});

test('the pool: past a caller\'s own bound their calls are refused at once (caller_queue_full) while others still queue; past the total, queue_full', async () => {
  const h = harness({ maxQueue: 5, maxQueuePerCaller: 3 });
  for (let i = 0; i < 6; i++) void h.call('mallory', `m${i}`);
  await h.settle();
  await h.settle();
  // One running, three waiting, two refused at once (not after a wait).
  assert.equal(h.outcomes.get('m4'), 'caller_queue_full');
  assert.equal(h.outcomes.get('m5'), 'caller_queue_full');
  void h.call('alice', 'a0');
  void h.call('bob', 'b0');
  void h.call('carol', 'c0');
  await h.settle();
  await h.settle();
  assert.equal(h.outcomes.get('a0'), undefined, 'alice waits');
  assert.equal(h.outcomes.get('c0'), 'queue_full');
  await h.done('m0');
  await h.done('m1');
  assert.deepEqual(h.started, ['m0', 'm1', 'a0']);
  await h.done('a0');
  await h.done('b0');
  await h.done('m2');
  assert.deepEqual(h.started, ['m0', 'm1', 'a0', 'b0', 'm2', 'm3']);
  await h.pool.close();
});

test('the pool: a worker freed serves its version first, but the caller whose turn it is is passed over at most maxWorkers times, then gets a worker started for them', async () => {
  const h = harness({ maxWorkers: 1, maxPerVersion: 1 });
  for (let i = 0; i < 4; i++) void h.call('mallory', `m${i}`, 'hot');
  await h.settle();
  void h.call('alice', 'a0', 'cold');
  await h.settle();
  await h.done('m0');
  // mallory's turn: her next call takes the warm worker.
  assert.deepEqual(h.started, ['m0', 'm1']);
  await h.done('m1');
  // alice's turn, but her version has no worker: mallory's warm call goes first, once (maxWorkers).
  assert.deepEqual(h.started, ['m0', 'm1', 'm2']);
  await h.done('m2');
  // Then alice: the idle worker of `hot` is stopped, and one of `cold` started for her.
  assert.deepEqual(h.started, ['m0', 'm1', 'm2', 'a0']);
  await h.done('a0');
  await h.done('m3');
  assert.equal(h.outcomes.get('m3'), 'ok');
  await h.pool.close();
});

test('the pool: with workers of several versions busy, a freed worker goes on serving its version (no cold start) while turns allow', async () => {
  let starts = 0;
  const pool = new WorkerPool({ maxWorkers: 2, maxPerVersion: 2, idleMs: 600_000, maxQueue: 100, maxQueuePerCaller: 100, queueTimeoutMs: 60_000 });
  const finish: (() => void)[] = [];
  const call = (caller: string, key: string) =>
    pool.with(key, async () => (starts++, fake()), () => new Promise<void>((r) => finish.push(r)), 0, Infinity, caller);
  const all = [call('a', 'x'), call('b', 'y')];
  await new Promise((r) => setImmediate(r));
  // Two callers, each alternating versions: strict turns would stop a worker and start another at every switch.
  for (let i = 0; i < 3; i++) all.push(call('a', 'y'), call('b', 'x'), call('a', 'x'), call('b', 'y'));
  for (let i = 0; i < 14; i++) {
    for (let t = 0; t < 5; t++) await new Promise((r) => setImmediate(r));
    finish.shift()?.();
  }
  await Promise.all(all);
  assert.ok(starts <= 6, `${starts} workers started for 14 calls of two versions on two workers`);
  await pool.close();
});

test('the pool: one caller\'s calls of several versions: a freed worker serves their next call of its version, not only their oldest', async () => {
  let starts = 0;
  const pool = new WorkerPool({ maxWorkers: 2, maxPerVersion: 2, idleMs: 600_000, maxQueue: 100, maxQueuePerCaller: 100, queueTimeoutMs: 60_000 });
  const finish: (() => void)[] = [];
  const call = (key: string) => pool.with(key, async () => (starts++, fake()), () => new Promise<void>((r) => finish.push(r)), 0, Infinity, 'a');
  const all = [call('x'), call('y')];
  await new Promise((r) => setImmediate(r));
  for (let i = 0; i < 6; i++) all.push(call('x'), call('y'));
  // The call started last ends first: the worker freed is often not of the caller's oldest call's version.
  for (let i = 0; i < 14; i++) {
    for (let t = 0; t < 5; t++) await new Promise((r) => setImmediate(r));
    finish.pop()?.();
  }
  await Promise.all(all);
  // Two, and one more x once no y waits (an idle y worker is stopped for it: there is room for a second x).
  assert.ok(starts <= 3, `${starts} workers started for 14 calls of two versions on two workers`);
  await pool.close();
});

test('the pool: a caller of share 3 gets three of every four workers freed while another of share 1 waits too', async () => {
  const h = harness();
  void h.call('bob', 'b');
  await h.settle();
  for (let i = 0; i < 8; i++) void h.call('paid', `p${i}`, 'v1', 3);
  for (let i = 0; i < 8; i++) void h.call('free', `f${i}`);
  await h.settle();
  assert.deepEqual(h.started, ['b']);
  await h.done('b');
  for (let i = 0; i < 8; i++) await h.done(h.started.at(-1)!);
  assert.deepEqual(h.started.slice(1), ['p0', 'p1', 'p2', 'f0', 'p3', 'p4', 'p5', 'f1', 'p6']);
  await h.pool.close();
});

test('the pool: prewarm starts a worker of a new version where the version it follows has one, into room nobody waits for; its first call takes it warm', async () => {
  const h = harness({ maxWorkers: 3, maxPerVersion: 2 });
  let starts = 0;
  const start = async () => {
    starts++;
    return fake();
  };
  // v1 has no worker: its next version is not warmed.
  assert.equal(h.pool.prewarm('v2', 'v1', start), false);
  void h.call('a', 'a0', 'v1');
  await h.settle();
  // v1's worker is busy: it counts.
  assert.equal(h.pool.prewarm('v2', 'v1', start), true);
  await h.settle();
  assert.equal(starts, 1);
  assert.deepEqual(h.pool.load().warm, { v2: 1 });
  // Once is enough.
  assert.equal(h.pool.prewarm('v2', 'v1', start), false);
  // Its first call takes it: nothing is started for it.
  let more = 0;
  await h.pool.with('v2', async () => { more++; return fake(); }, async () => undefined);
  assert.equal(more, 0);
  // Full (v1 busy, v2 idle, one more: three), no room without stopping a worker: nothing.
  void h.call('b', 'b0', 'v3');
  await h.settle();
  assert.equal(h.pool.prewarm('v4', 'v3', start), false);
  await h.done('a0');
  await h.done('b0');
  await h.pool.close();
});

test('the pool: prewarm does not take room a waiting call needs', async () => {
  const h = harness({ maxWorkers: 2, maxPerVersion: 1 });
  void h.call('a', 'a0', 'v1');
  void h.call('a', 'a1', 'v1');
  await h.settle();
  // a1 waits (v1 is at its own limit); the pool has room for one more worker, but a waiting call comes first.
  assert.equal(h.pool.waitingFor('a'), 1);
  assert.equal(h.pool.prewarm('v2', 'v1', async () => fake()), false);
  await h.done('a0');
  await h.done('a1');
  await h.pool.close();
});

test('the pool: a waiting call\'s deadline still turns it away (one timer), and it leaves its caller\'s line', async () => {
  const pool = new WorkerPool({ maxWorkers: 1, maxPerVersion: 1, idleMs: 600_000, maxQueue: 100, maxQueuePerCaller: 100, queueTimeoutMs: 60_000 });
  let release!: () => void;
  const first = pool.with('v1', async () => fake(), () => new Promise<void>((r) => (release = r)), 0, Infinity, 'm');
  await new Promise((r) => setImmediate(r));
  const waits = pool.with('v1', async () => fake(), async () => 'ran', 0, 20, 'm');
  await assert.rejects(waits, (e: unknown) => e instanceof ExecutorBusyError && e.reason === 'queue_timeout');
  assert.equal(pool.waitingFor('m'), 0);
  assert.equal(pool.stats().waiting, 0);
  release();
  await first;
  await pool.close();
});
