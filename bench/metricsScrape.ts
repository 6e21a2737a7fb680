/**
 * How long a scrape of a node's metrics takes (issue 25: "a scrape of a node with 200 algorithms
 * warm answers in ≤ 50 ms"), over HTTP from the node's metrics listener.
 *
 *   node --import ./bin/loader.mjs bench/metricsScrape.ts [--algorithms N] [--scrapes N]
 *
 * The node: a real PromMetrics with the gauges services.ts registers, read from a real
 * WorkerPool holding N idle warm workers of N versions (stand-in workers: a scrape reads the
 * pool's lists, not the processes, and 200 real sandboxed workers would need ~9 GiB), every
 * counter and histogram series a busy node has (every route of the app, four statuses each,
 * every outcome, both runtimes) and prom-client's process metrics.
 * Prints the p50, p95 and max of the scrapes and the size of one; writes nothing to docs/.
 */
import http from 'node:http';
import { PromMetrics } from '../src/metrics.ts';
import { listenMetrics } from '../src/http/metrics.ts';
import { WorkerPool, DEFAULT_POOL } from '../src/runtime/pool.ts';
import type { Worker } from '../src/runtime/worker.ts';
import { argOf } from './baseTree.ts';
import { percentile } from './load.ts';

const ALGORITHMS = Number(argOf('--algorithms') ?? 200);
const SCRAPES = Number(argOf('--scrapes') ?? 200);

const metrics = new PromMetrics();
const pool = new WorkerPool({ ...DEFAULT_POOL, maxWorkers: ALGORITHMS, maxPerVersion: 1 }, metrics);
// N versions, one warm idle worker each.
const standIn = () => ({ dead: false, stop: async () => undefined }) as unknown as Worker;
await Promise.all(Array.from({ length: ALGORITHMS }, (_, i) => pool.with(`version-${i}`, async () => standIn(), async () => undefined)));
const s = pool.stats();
if (s.idle !== ALGORITHMS) throw new Error(`expected ${ALGORITHMS} idle workers, got ${s.idle}`);
metrics.gauge('algohost_workers', 'workers', ['state'], () => [
  { labels: { state: 'idle' }, value: pool.stats().idle },
  { labels: { state: 'busy' }, value: pool.stats().total - pool.stats().idle },
]);
metrics.gauge('algohost_worker_free_slots', 'free', [], () => pool.load().free);
metrics.gauge('algohost_pool_queue_depth', 'queue', [], () => pool.stats().waiting);

// Every series a busy node has: the app's routes (about 90 pattern-and-method pairs: 53 routes
// in src/http, the data routes' 4 patterns × 7 methods, git's), each having answered 4 statuses.
for (let i = 0; i < 90; i++) for (const status of [200, 400, 401, 404]) metrics.http(`/v1/route-${i}/:owner/:name`, 'GET', status, 0.001);
for (const outcome of ['success', 'algorithm_error', 'timeout', 'out_of_memory', 'crashed', 'busy'] as const) metrics.call(outcome, 0.01);
for (const runtime of ['node', 'python']) metrics.coldStart(runtime, 0.08, true);
metrics.build(true, 12);
metrics.build(false, 3);

const server = await listenMetrics(metrics, { host: '127.0.0.1', port: 0 }, console);
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
const scrape = () =>
  new Promise<{ ms: number; bytes: number }>((resolve, reject) => {
    const t0 = performance.now();
    http
      .get(server.url, { agent }, (res) => {
        let bytes = 0;
        res.on('data', (c: Buffer) => (bytes += c.length));
        res.on('end', () => (res.statusCode === 200 ? resolve({ ms: performance.now() - t0, bytes }) : reject(new Error(`status ${res.statusCode}`))));
      })
      .on('error', reject);
  });

for (let i = 0; i < 10; i++) await scrape(); // warm-up
const times: number[] = [];
let size = 0;
for (let i = 0; i < SCRAPES; i++) {
  const r = await scrape();
  times.push(r.ms);
  size = r.bytes;
}
times.sort((a, b) => a - b);
const series = (await metrics.scrape()).body.split('\n').filter((l) => l !== '' && !l.startsWith('#')).length;
process.stdout.write(
  `metrics scrape, ${ALGORITHMS} versions warm, ${series} samples, ${(size / 1024).toFixed(0)} KiB: ` +
    `p50 ${percentile(times, 50).toFixed(2)} ms, p95 ${percentile(times, 95).toFixed(2)} ms, max ${times[times.length - 1]!.toFixed(2)} ms (${SCRAPES} scrapes; target ≤ 50 ms)\n`,
);
server.close();
agent.destroy();
await pool.close();
process.exit(0);
