/**
 * What usage recording (src/algorithms/usage.ts) costs a warm call, measured in this process
 * without HTTP (whose noise on a shared machine is larger than the effect): a home with the
 * echo published, then two CallServices on the same releases and worker pool, one counting
 * calls in a UsageRecorder, one not counting. Rounds of sequential warm calls (about a second
 * each by default) alternate between the two, the order swapped every round; each round's CPU
 * (process.cpuUsage: this process, all threads) and wall time per call are paired with the
 * other's. A counting round ends with a flush, timed with it, as a server flushes every second
 * while calls come: its cost, and that of the hot-path caches it empties (a flush is a write,
 * and the next call reads its key and target again), are in those rounds' figures. Also times
 * record() alone.
 *
 *   node --import ./bin/loader.mjs bench/usageCost.ts [--rounds N] [--calls N]
 */
import { CallService } from '../src/algorithms/calls.ts';
import { UsageRecorder } from '../src/algorithms/usage.ts';
import { argOf } from './baseTree.ts';
import { createBench, fmt } from './common.ts';
import { openEchoHome } from './echoHome.ts';
import { median } from './load.ts';

const bench = createBench('usageCost');
const ROUNDS = Number(argOf('--rounds') ?? 20);
const CALLS = Number(argOf('--calls') ?? 8000);
const INPUT = Buffer.from('hello, algohost', 'utf8');
const ON = 'counting, one flush per round';

async function main(): Promise<void> {
  const { services, principal, request, close } = await openEchoHome(bench, INPUT);
  // Flushed by hand at the end of each counting round, never by its timer.
  const counting = new UsageRecorder(services.store, { flushIntervalMs: 3_600_000 });
  try {
    const variants: [string, CallService][] = [
      ['not counting', new CallService(services.releases, services.runtime, false)],
      [ON, new CallService(services.releases, services.runtime, false, counting)],
    ];
    for (const [, calls] of variants) {
      const r = await calls.call(principal, request);
      if (r.outcome.kind !== 'result') throw new Error(`the echo answered ${r.outcome.kind}`);
    }
    const cpu = new Map<string, number[]>(variants.map(([n]) => [n, []]));
    const wall = new Map<string, number[]>(variants.map(([n]) => [n, []]));
    const flushes: { cpu: number; wall: number }[] = [];
    for (let round = 0; round <= ROUNDS; round++) {
      const order = round % 2 === 0 ? variants : [...variants].reverse();
      for (const [name, calls] of order) {
        const c0 = process.cpuUsage();
        const t0 = performance.now();
        for (let i = 0; i < CALLS; i++) await calls.call(principal, request);
        if (name === ON) {
          const fc = process.cpuUsage();
          const ft = performance.now();
          await counting.flush();
          const f = process.cpuUsage(fc);
          if (round > 0) flushes.push({ cpu: f.user + f.system, wall: (performance.now() - ft) * 1000 });
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
    const [off, on] = variants.map(([n]) => n) as [string, string];
    const ratio = (m: Map<string, number[]>) => median(m.get(on)!.map((x, i) => x / m.get(off)![i]!));
    const diff = (m: Map<string, number[]>) => median(m.get(on)!.map((x, i) => x - m.get(off)![i]!));

    // record() alone, on the target the calls resolve to.
    const target = await services.releases.resolveCall(principal, 'bench', 'Echo', undefined);
    const outcome = (await variants[0]![1].call(principal, request)).outcome;
    const alone = new UsageRecorder(services.store, { flushIntervalMs: 3_600_000 });
    const perRecord: number[] = [];
    for (let r = 0; r < 7; r++) {
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < 1_000_000; i++) alone.record(principal.userId, target, outcome, INPUT.length);
      perRecord.push(Number(process.hrtime.bigint() - t0) / 1_000_000);
    }
    await alone.close();

    const lines = [
      `| Warm call in process (calls.call, ${CALLS} sequential calls per round, ${ROUNDS} rounds; SQLite) | CPU µs per call | wall µs per call |`,
      '|---|---:|---:|',
      ...variants.map(([n]) => `| ${n} | ${fmt(median(cpu.get(n)!), 1)} | ${fmt(median(wall.get(n)!), 1)} |`),
      `| counting − not counting, paired median | ${fmt(diff(cpu), 2)} | ${fmt(diff(wall), 2)} |`,
      `| counting ÷ not counting, paired median | ${fmt(ratio(cpu), 3)} | ${fmt(ratio(wall), 3)} |`,
      '',
      `UsageRecorder.record() alone: ${fmt(median(perRecord), 1)} ns per call (median of 7 × 1,000,000)`,
      `a counting round: ${fmt((median(wall.get(on)!) * CALLS) / 1e6, 2)} s of calls and its flush; the flush alone: CPU ${fmt(median(flushes.map((f) => f.cpu)), 0)} µs, wall ${fmt(median(flushes.map((f) => f.wall)), 0)} µs (medians)`,
      `per round, CPU counting ÷ not: ${cpu.get(on)!.map((x, i) => fmt(x / cpu.get(off)![i]!, 2)).join(', ')}`,
    ];
    process.stdout.write(lines.join('\n') + '\n');
  } finally {
    await counting.close();
    await close();
  }
}

await bench.run(main);
