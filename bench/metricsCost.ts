/**
 * What the metrics add to one warm call, in CPU, measured alone (no server, no workers), so
 * that a loaded machine's noise does not hide it: the counting a warm call does with metrics on
 * (the HTTP request on the direct path, the call's outcome and run time, the wait for a worker,
 * and the clock reads around them), against the same with NO_METRICS.
 *
 *   node --import ./bin/loader.mjs bench/metricsCost.ts [--calls N] [--reps N]
 *
 * Prints ns per call (median of the repetitions) for both; writes nothing to docs/. Compare
 * with the server's CPU µs per warm call in docs/performance.md.
 */
import { NO_METRICS, PromMetrics, type Metrics } from '../src/metrics.ts';
import { argOf } from './baseTree.ts';
import { median } from './load.ts';

const CALLS = Number(argOf('--calls') ?? 1_000_000);
const REPS = Number(argOf('--reps') ?? 7);

/** What one warm call counts, as the call path does it (directCalls.ts, pool.ts, calls.ts). */
function oneCall(m: Metrics, i: number): void {
  const began = performance.now();
  const asked = performance.now();
  m.workerWait((performance.now() - asked) / 1000);
  m.call(i % 50 === 0 ? 'algorithm_error' : 'success', 0.0001);
  m.http('/v1/algo/*', 'POST', 200, (performance.now() - began) / 1000);
}

function run(m: Metrics): number {
  const t0 = process.cpuUsage();
  for (let i = 0; i < CALLS; i++) oneCall(m, i);
  const d = process.cpuUsage(t0);
  return ((d.user + d.system) * 1000) / CALLS;
}

const on = new PromMetrics();
const offs: number[] = [];
const ons: number[] = [];
run(NO_METRICS);
run(on);
for (let r = 0; r < REPS; r++) {
  offs.push(run(NO_METRICS));
  ons.push(run(on));
}
const off = median(offs);
const with_ = median(ons);
process.stdout.write(`per warm call, CPU ns (median of ${REPS} × ${CALLS.toLocaleString('en')}): metrics off ${off.toFixed(0)}, on ${with_.toFixed(0)}, added ${(with_ - off).toFixed(0)}\n`);
// The scrape agrees with what was counted.
const body = (await on.scrape()).body;
const calls = /algohost_calls_total\{outcome="success"\} (\d+)/.exec(body);
if (!calls || Number(calls[1]) === 0) throw new Error('nothing counted');
process.exit(0);
