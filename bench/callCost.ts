/**
 * What one feature costs a warm call, measured in this process without HTTP (whose noise on a
 * shared machine is larger than the effect), as bench/usageCost.ts measures usage: a home with
 * the echo published (bench/echoHome.ts), then two CallServices on the same releases, each with
 * a worker pool of its own (one warm worker each), the feature off in one and on in the other.
 * Rounds of sequential warm calls alternate between the two, the order swapped every round;
 * each round's CPU (process.cpuUsage) and wall time per call are paired with the other's.
 * bench/metricsCallCost.ts and bench/limitsCallCost.ts are its two uses.
 */
import { CallService } from '../src/algorithms/calls.ts';
import type { Limits } from '../src/limits/limits.ts';
import { NO_METRICS, type Metrics } from '../src/metrics.ts';
import { AlgorithmRuntime } from '../src/runtime/runtime.ts';
import { argOf } from './baseTree.ts';
import type { Bench } from './common.ts';
import { fmt } from './common.ts';
import { openEchoHome } from './echoHome.ts';
import { median } from './load.ts';

const ROUNDS = Number(argOf('--rounds') ?? 20);
const CALLS = Number(argOf('--calls') ?? 8000);
const INPUT = Buffer.from('hello, algohost', 'utf8');

/** One side: its name, its metrics and limits (none by default). */
export interface Variant {
  name: string;
  metrics?: Metrics;
  limits?: Limits;
}

/** Runs the off/on rounds; answers the table's lines, and the lines `more` adds once done. */
export async function callCost(bench: Bench, off: Variant, on: Variant, more: () => Promise<string[]> = async () => []): Promise<void> {
  const { services, principal, request, close } = await openEchoHome(bench, INPUT);
  const runtimes: AlgorithmRuntime[] = [];
  try {
    const sides = [off, on].map((v) => {
      const metrics = v.metrics ?? NO_METRICS;
      const runtime = new AlgorithmRuntime(services.artifacts, { ...services.runtime.options, metrics });
      runtimes.push(runtime);
      return { ...v, metrics, calls: new CallService(services.releases, runtime, false, undefined, v.limits, metrics) };
    });
    for (const { calls } of sides) {
      const r = await calls.call(principal, request);
      if (r.outcome.kind !== 'result') throw new Error(`the echo answered ${r.outcome.kind}`);
    }
    const cpu = new Map<string, number[]>(sides.map(({ name }) => [name, []]));
    const wall = new Map<string, number[]>(sides.map(({ name }) => [name, []]));
    for (let round = 0; round <= ROUNDS; round++) {
      for (const { name, calls, metrics } of round % 2 === 0 ? sides : [...sides].reverse()) {
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
    const ratio = (m: Map<string, number[]>) => median(m.get(on.name)!.map((x, i) => x / m.get(off.name)![i]!));
    const diff = (m: Map<string, number[]>) => median(m.get(on.name)!.map((x, i) => x - m.get(off.name)![i]!));
    const lines = [
      `| Warm call in process (calls.call, ${CALLS} sequential calls per round, ${ROUNDS} rounds; SQLite) | CPU µs per call | wall µs per call |`,
      '|---|---:|---:|',
      ...sides.map(({ name }) => `| ${name} | ${fmt(median(cpu.get(name)!), 1)} | ${fmt(median(wall.get(name)!), 1)} |`),
      `| on − off, paired median | ${fmt(diff(cpu), 2)} | ${fmt(diff(wall), 2)} |`,
      `| on ÷ off, paired median | ${fmt(ratio(cpu), 3)} | ${fmt(ratio(wall), 3)} |`,
      '',
      ...(await more()),
      `per round, CPU on ÷ off: ${cpu.get(on.name)!.map((x, i) => fmt(x / cpu.get(off.name)![i]!, 2)).join(', ')}`,
      `per round, wall on ÷ off: ${wall.get(on.name)!.map((x, i) => fmt(x / wall.get(off.name)![i]!, 2)).join(', ')}`,
    ];
    process.stdout.write(lines.join('\n') + '\n');
  } finally {
    for (const r of runtimes) await r.close();
    await close();
  }
}
