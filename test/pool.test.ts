import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DEFAULT_LIMITS, probeSandbox, type SandboxSpec } from '../src/runtime/sandbox.ts';
import { Worker } from '../src/runtime/worker.ts';
import { WorkerPool } from '../src/runtime/pool.ts';
import { ExecutorBusyError } from '../src/runtime/contract.ts';

const support = probeSandbox();
const skip = support.available ? false : `bubblewrap unavailable: ${support.reason}`;
const root = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-pool-'));
const pools: WorkerPool[] = [];
after(async () => {
  await Promise.all(pools.map((p) => p.close()));
  fs.rmSync(root, { recursive: true, force: true });
});

/**
 * Each version answers its own name and the worker's pid, after sleeping `ms` from the input;
 * `loadMs`: its module waits that long when it is loaded (a slow start).
 */
function version(name: string, loadMs = 0): SandboxSpec {
  const dir = path.join(root, name);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(
    path.join(dir, 'index.mjs'),
    `export async function apply(ms) { await new Promise((r) => setTimeout(r, ms)); return { v: ${JSON.stringify(name)}, pid: process.pid + ':' + process.ppid + ':' + STARTED }; }
     const STARTED = Math.random();
     ${loadMs > 0 ? `await new Promise((r) => setTimeout(r, ${loadMs}));` : ''}`,
  );
  return { runner: 'node', algoDir: dir, entry: 'index.mjs', network: false, limits: DEFAULT_LIMITS };
}

function pool(options: Partial<ConstructorParameters<typeof WorkerPool>[0]> = {}): WorkerPool {
  const p = new WorkerPool({ maxWorkers: 2, maxPerVersion: 2, idleMs: 60_000, maxQueue: 10, queueTimeoutMs: 10_000, ...options });
  pools.push(p);
  return p;
}

async function run(p: WorkerPool, key: string, spec: SandboxSpec, ms = 0): Promise<{ v: string; pid: string }> {
  return p.with(key, () => Worker.start(spec), async (w) => {
    const o = await w.call('json', Buffer.from(String(ms)), 10_000);
    assert.equal(o.kind, 'result');
    return JSON.parse(o.kind === 'result' ? o.body.toString() : 'null');
  });
}

describe('worker pool', { skip }, () => {
  test('a warm worker is reused; a new version never gets an old version\'s worker', async () => {
    const p = pool();
    const a = version('a');
    const b = version('b');
    const first = await run(p, 'a', a);
    const second = await run(p, 'a', a);
    assert.equal(second.pid, first.pid, 'the same warm worker answered');
    const other = await run(p, 'b', b);
    assert.equal(other.v, 'b');
    assert.notEqual(other.pid, first.pid);
    assert.deepEqual(p.stats(), { total: 2, idle: 2, waiting: 0 });
  });

  test('grows to the per-version limit, then queues; the queue is bounded in size and time', async () => {
    const p = pool({ maxWorkers: 4, maxPerVersion: 2, maxQueue: 1, queueTimeoutMs: 300 });
    const a = version('q');
    const busy = [run(p, 'q', a, 1500), run(p, 'q', a, 1500)];
    await new Promise((r) => setTimeout(r, 100));
    const queued = run(p, 'q', a, 0).catch((e: unknown) => e);
    await new Promise((r) => setTimeout(r, 50));
    const refused = await run(p, 'q', a, 0).catch((e: unknown) => e);
    assert.ok(refused instanceof ExecutorBusyError && refused.reason === 'queue_full');
    const timedOut = await queued;
    assert.ok(timedOut instanceof ExecutorBusyError && timedOut.reason === 'queue_timeout');
    const pids = new Set((await Promise.all(busy)).map((r) => r.pid));
    assert.equal(pids.size, 2, 'two workers of one version ran at once');
    assert.equal(p.stats().total, 2);
  });

  test('at the global limit, the idle worker whose restarts cost least makes room: a slow start is kept over a fast one used as seldom', async () => {
    const p = pool({ maxWorkers: 2, maxPerVersion: 2 });
    // `slow` takes 1.5 s more to start than the others (its module waits at load).
    const slow = version('slow', 1500);
    const [fast, other] = [version('fast'), version('other')];
    const s1 = await run(p, 'slow', slow);
    const f1 = await run(p, 'fast', fast);
    await run(p, 'other', other); // evicts fast (least recently used would have been slow)
    assert.equal(p.stats().total, 2);
    assert.equal((await run(p, 'slow', slow)).pid, s1.pid, 'the slow start stayed warm');
    const f2 = await run(p, 'fast', fast);
    assert.notEqual(f2.pid, f1.pid, 'the fast start was stopped and started again');
  });

  test('among versions as cheap to start, the one called least makes room, however recently', async () => {
    const p = pool({ maxWorkers: 2, maxPerVersion: 2 });
    // Both wait as long at load: their start times are alike, whatever the machine's noise adds.
    const [busy, rare, next] = [version('busy', 300), version('rare', 300), version('next', 300)];
    const b1 = await run(p, 'busy', busy);
    for (let i = 0; i < 6; i++) await run(p, 'busy', busy);
    const r1 = await run(p, 'rare', rare); // the most recently used, called once
    await run(p, 'next', next);
    assert.equal((await run(p, 'busy', busy)).pid, b1.pid, 'the busy version stayed warm');
    assert.notEqual((await run(p, 'rare', rare)).pid, r1.pid, 'the rarely called one was stopped');
  });

  test('a waiting call gets the worker freed by another version', async () => {
    const p = pool({ maxWorkers: 1, maxPerVersion: 1 });
    const [m, n] = [version('m'), version('n')];
    const slow = run(p, 'm', m, 800);
    await new Promise((r) => setTimeout(r, 100));
    const waiting = run(p, 'n', n, 0);
    assert.equal(p.stats().waiting, 1);
    assert.equal((await slow).v, 'm');
    assert.equal((await waiting).v, 'n');
  });

  test('idle workers are stopped after the idle time; a dead worker is replaced', async () => {
    const p = pool({ idleMs: 200 });
    const i = version('idle');
    await run(p, 'idle', i);
    assert.equal(p.stats().total, 1);
    for (let t = 0; t < 40 && p.stats().total > 0; t++) await new Promise((r) => setTimeout(r, 50));
    assert.equal(p.stats().total, 0, 'the idle worker was stopped');

    const d = version('dies');
    const before = await run(p, 'dies', d);
    await p.with('dies', () => Worker.start(d), async (w) => {
      const o = await w.call('json', Buffer.from('5000'), 100); // times out: the worker is killed
      assert.equal(o.kind, 'timeout');
    });
    assert.equal(p.stats().total, 0, 'the dead worker was not kept');
    const after = await run(p, 'dies', d);
    assert.notEqual(after.pid, before.pid);
  });

  test('a worker that died while idle is never handed out', async () => {
    const p = pool();
    const dir = path.join(root, 'exits');
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, 'index.mjs'), `export function apply() { setTimeout(() => process.exit(3), 10); return process.pid + ':' + Math.random(); }`);
    const spec: SandboxSpec = { runner: 'node', algoDir: dir, entry: 'index.mjs', network: false, limits: DEFAULT_LIMITS };
    const once = () =>
      p.with('exits', () => Worker.start(spec), async (w) => {
        const o = await w.call('json', Buffer.from('1'), 5000);
        assert.equal(o.kind, 'result');
        return o.kind === 'result' ? o.body.toString() : '';
      });
    const first = await once();
    await new Promise((r) => setTimeout(r, 300));
    const second = await once();
    assert.notEqual(second, first);
  });
});
