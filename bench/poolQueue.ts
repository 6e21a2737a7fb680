/**
 * The worker pool's queue under load, alone: 64 callers share one "worker" (a stand-in that
 * answers on the next turn of the event loop), so 63 of them wait in the queue at any time, as
 * at 64 connections with maxPerVersion 1. CPU µs per call of WorkerPool.with, for this tree's
 * pool.ts and, with `--base DIR` or `--rev REV` (bench/baseTree.ts), the base tree's, in
 * interleaved rounds; medians and the paired ratio.
 *
 *   node --import ./bin/loader.mjs bench/poolQueue.ts [--rounds N] [--base DIR | --rev REV]
 */
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { WorkerPool as NewPool } from '../src/runtime/pool.ts';
import type { Worker } from '../src/runtime/worker.ts';
import { argOf, baseTree } from './baseTree.ts';
import { createBench, fmt, interleaved } from './common.ts';
import { median } from './load.ts';

const bench = createBench('poolQueue');
const ROUNDS = Number(argOf('--rounds') ?? 9);
const CALLERS = 64;
const CALLS = 20_000;

type Pool = InstanceType<typeof NewPool>;

const fakeWorker = { dead: false, stop: async () => undefined } as unknown as Worker;
const work = () => new Promise<void>((r) => setImmediate(r));

async function run(pool: Pool): Promise<number> {
  let left = CALLS;
  const c0 = process.cpuUsage();
  await Promise.all(
    Array.from({ length: CALLERS }, async () => {
      while (left-- > 0) await pool.with('v1', async () => fakeWorker, work);
    }),
  );
  const c = process.cpuUsage(c0);
  return (c.user + c.system) / CALLS;
}

async function main(): Promise<void> {
  const options = { maxWorkers: 16, maxPerVersion: 1, idleMs: 600_000, maxQueue: 1000, queueTimeoutMs: 60_000 };
  const pools: [string, Pool][] = [['this tree', new NewPool(options)]];
  if (argOf('--base') !== undefined || argOf('--rev') !== undefined) {
    const root = baseTree();
    const { WorkerPool } = (await import(pathToFileURL(path.join(root, 'src/runtime/pool.ts')).href)) as { WorkerPool: typeof NewPool };
    pools.push([`base (${path.basename(root)})`, new WorkerPool(options)]);
  }
  for (const [, p] of pools) await run(p);
  const results = await interleaved(ROUNDS, pools, ([, p]) => run(p));
  for (const [label, p] of pools) process.stdout.write(`${label}: ${fmt(median(results.get(pools.find((x) => x[1] === p)!)!), 2)} CPU µs per call\n`);
  if (pools.length === 2) {
    const [a, b] = pools.map((x) => results.get(x)!);
    process.stdout.write(`this tree ÷ base, paired median: ${fmt(median(a!.map((x, i) => x / b![i]!)), 3)}\n`);
  }
  for (const [, p] of pools) await p.close();
}

await bench.run(main);
