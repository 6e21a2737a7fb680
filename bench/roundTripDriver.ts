/**
 * A process of bench/roundTrip.ts and bench/coldStart.ts: starts one warm echo worker with the
 * Worker class of the tree ROOT (this checkout or a base), then on each message `{ calls }`
 * makes that many sequential calls and answers `{ p50, cpuUs }` (its own CPU µs per call,
 * process.cpuUsage); on `{ cold: true }` it starts a fresh worker, calls it once, stops it, and
 * answers `{ readyMs, firstMs }` (Worker.start to its ready frame, and to the first answer).
 *
 *   node --import ./bin/loader.mjs bench/roundTripDriver.ts ROOT RUNNER DIR ENTRY sandboxed|unsandboxed
 */
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Worker as WorkerClass } from '../src/runtime/worker.ts';
import { DEFAULT_LIMITS } from '../src/runtime/sandbox.ts';

const [root, runner, dir, entry, mode] = process.argv.slice(2) as [string, 'node' | 'python', string, string, string];
const { Worker } = (await import(pathToFileURL(path.join(root, 'src/runtime/worker.ts')).href)) as { Worker: typeof WorkerClass };
const INPUT = Buffer.from('hello, algohost', 'utf8');


const spec = { runner, algoDir: dir, entry, network: false, limits: DEFAULT_LIMITS, unsandboxed: mode === 'unsandboxed' };

async function cold(): Promise<{ readyMs: number; firstMs: number }> {
  const t0 = performance.now();
  const w = await Worker.start(spec, { startTimeoutMs: 30_000 });
  const readyMs = performance.now() - t0;
  const o = await w.call('text', INPUT, 30_000);
  const firstMs = performance.now() - t0;
  if (o.kind !== 'result') throw new Error(`the cold echo answered ${o.kind}`);
  await w.stop();
  // Let the stopped worker's teardown (its cgroup's removal, the reaping) finish before the
  // next measurement, whichever process makes it.
  await new Promise((r) => setTimeout(r, 200));
  return { readyMs, firstMs };
}

process.on('message', (m: { calls: number; cold?: boolean }) => {
  void (async () => {
    if (m.cold) return process.send!(await cold());
    const lat: number[] = [];
    const c0 = process.cpuUsage();
    for (let i = 0; i < m.calls; i++) {
      const t = performance.now();
      const o = await worker.call('text', INPUT, 30_000);
      lat.push(performance.now() - t);
      if (o.kind !== 'result') throw new Error(`the echo answered ${o.kind}`);
    }
    const c = process.cpuUsage(c0);
    lat.sort((a, b) => a - b);
    process.send!({ p50: lat[Math.ceil(lat.length / 2) - 1], cpuUs: (c.user + c.system) / m.calls });
  })();
});
const worker = await Worker.start(spec, { startTimeoutMs: 30_000 });
process.on('disconnect', () => void worker.stop().then(() => process.exit(0)));
process.send!({ ready: true });
