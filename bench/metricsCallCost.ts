/**
 * What Prometheus metrics cost a warm call, measured in this process without HTTP (whose noise
 * on a shared machine is larger than the effect), as bench/usageCost.ts measures usage: a home
 * with the echo published, then two CallServices on the same releases, each with a worker pool
 * of its own (one warm worker each), one with metrics off (NO_METRICS) and one with them on
 * (a PromMetrics counting the call, its run time and the wait for a worker, as a node with
 * ALGOHOST_METRICS_ADDR does; plus the HTTP request's count the direct path adds, made here
 * after each call). Rounds of sequential warm calls alternate between the two, the order
 * swapped every round; each round's CPU (process.cpuUsage) and wall time per call are paired
 * with the other's.
 *
 *   node --import tsx bench/metricsCallCost.ts [--rounds N] [--calls N]
 *
 * Prints a table; writes nothing to docs/.
 */
import { CallService } from '../src/algorithms/calls.ts';
import { NO_METRICS, PromMetrics, type Metrics } from '../src/metrics.ts';
import { AlgorithmRuntime } from '../src/runtime/runtime.ts';
import { argOf } from './baseTree.ts';
import { createBench, fmt } from './common.ts';
import { openEchoHome } from './echoHome.ts';
import { median } from './load.ts';

const bench = createBench('metricsCallCost');
const ROUNDS = Number(argOf('--rounds') ?? 20);
const CALLS = Number(argOf('--calls') ?? 8000);
const INPUT = Buffer.from('hello, algohost', 'utf8');

async function main(): Promise<void> {
  const { services, principal, request, close } = await openEchoHome(bench, INPUT);
  const on = new PromMetrics();
  const runtimes: AlgorithmRuntime[] = [];
  try {
    const variant = (metrics: Metrics) => {
      const runtime = new AlgorithmRuntime(services.artifacts, { ...services.runtime.options, metrics });
      runtimes.push(runtime);
      return new CallService(services.releases, runtime, false, undefined, undefined, metrics);
    };
    const variants: [string, CallService, Metrics][] = [
      ['metrics off', variant(NO_METRICS), NO_METRICS],
      ['metrics on', variant(on), on],
    ];
    for (const [, calls] of variants) {
      const r = await calls.call(principal, request);
      if (r.outcome.kind !== 'result') throw new Error(`the echo answered ${r.outcome.kind}`);
    }
    const cpu = new Map<string, number[]>(variants.map(([n]) => [n, []]));
    const wall = new Map<string, number[]>(variants.map(([n]) => [n, []]));
    for (let round = 0; round <= ROUNDS; round++) {
      const order = round % 2 === 0 ? variants : [...variants].reverse();
      for (const [name, calls, metrics] of order) {
        const c0 = process.cpuUsage();
        const t0 = performance.now();
        for (let i = 0; i < CALLS; i++) {
          const began = performance.now();
          await calls.call(principal, request);
          // What the direct path adds once it has answered (directCalls.ts send()).
          metrics.http('/v1/algo/*', 'POST', 200, (performance.now() - began) / 1000);
        }
        const t = performance.now() - t0;
        const c = process.cpuUsage(c0);
        // Round 0 warms both up.
        if (round > 0) {
          cpu.get(name)!.push((c.user + c.system) / CALLS);
          wall.get(name)!.push((t * 1000) / CALLS);
        }
      }
    }
    const [offName, onName] = variants.map(([n]) => n) as [string, string];
    const ratio = (m: Map<string, number[]>) => median(m.get(onName)!.map((x, i) => x / m.get(offName)![i]!));
    const diff = (m: Map<string, number[]>) => median(m.get(onName)!.map((x, i) => x - m.get(offName)![i]!));
    const counted = /algohost_calls_total\{outcome="success"\} (\d+)/.exec((await on.scrape()).body)?.[1];
    const lines = [
      `| Warm call in process (calls.call, ${CALLS} sequential calls per round, ${ROUNDS} rounds; SQLite) | CPU µs per call | wall µs per call |`,
      '|---|---:|---:|',
      ...variants.map(([n]) => `| ${n} | ${fmt(median(cpu.get(n)!), 1)} | ${fmt(median(wall.get(n)!), 1)} |`),
      `| on − off, paired median | ${fmt(diff(cpu), 2)} | ${fmt(diff(wall), 2)} |`,
      `| on ÷ off, paired median | ${fmt(ratio(cpu), 3)} | ${fmt(ratio(wall), 3)} |`,
      '',
      `calls counted by the metrics that were on: ${counted}`,
      `per round, CPU on ÷ off: ${cpu.get(onName)!.map((x, i) => fmt(x / cpu.get(offName)![i]!, 2)).join(', ')}`,
      `per round, wall on ÷ off: ${wall.get(onName)!.map((x, i) => fmt(x / wall.get(offName)![i]!, 2)).join(', ')}`,
    ];
    process.stdout.write(lines.join('\n') + '\n');
  } finally {
    for (const r of runtimes) await r.close();
    await close();
  }
}

await bench.run(main);
