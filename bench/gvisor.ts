/**
 * What gVisor (ALGOHOST_SANDBOX=gvisor) costs against bubblewrap, each measured in the same run,
 * interleaved, through the same Worker and pool code the server uses:
 * - the cold start of a sandboxed echo worker (Python and Node), no network: Worker.start until
 *   `ready`, and until the first call's answer;
 * - a warm call on a live worker of each.
 * The machine is noisy: the ratios against the same run's bubblewrap are what to read.
 *
 *   node --import ./bin/loader.mjs bench/gvisor.ts [--rounds N]
 */
import fs from 'node:fs';
import path from 'node:path';
import { argOf } from './baseTree.ts';
import { createBench, fmt, interleaved } from './common.ts';
import { median } from './load.ts';
import { Worker } from '../src/runtime/worker.ts';
import { DEFAULT_LIMITS, probeSandbox, type SandboxSpec } from '../src/runtime/sandbox.ts';
import { probeGvisor, RUNSC } from '../src/runtime/gvisor.ts';

const bench = createBench('gvisor');
const ROUNDS = Number(argOf('--rounds') ?? 15);
const WARM_CALLS = Number(argOf('--warm') ?? 300);

type Kind = 'bubblewrap' | 'gvisor';
const KINDS: Kind[] = ['bubblewrap', 'gvisor'];

function spec(kind: Kind, runner: 'node' | 'python', dir: string): SandboxSpec {
  const entry = runner === 'node' ? 'echo.mjs' : 'echo.py';
  return { runner, algoDir: dir, entry, network: false, limits: DEFAULT_LIMITS, ...(kind === 'gvisor' ? { gvisor: { runsc: RUNSC } } : {}) };
}

async function cold(s: SandboxSpec): Promise<{ ready: number; first: number }> {
  const t0 = performance.now();
  const w = await Worker.start(s);
  const ready = performance.now() - t0;
  const o = await w.call('json', Buffer.from('"x"'), 10_000);
  const first = performance.now() - t0;
  if (o.kind !== 'result') throw new Error(JSON.stringify(o));
  await w.stop();
  return { ready, first };
}

const p = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;

async function main(): Promise<void> {
  if (!probeSandbox().available) throw new Error('no bubblewrap here');
  const g = probeGvisor();
  if (!g.available) throw new Error(`no gVisor here: ${g.reason}`);
  const dir = path.join(bench.work, 'echo');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'echo.mjs'), 'export function apply(input) { return input; }\n');
  fs.writeFileSync(path.join(dir, 'echo.py'), 'def apply(input):\n    return input\n');
  const out: string[] = [`Rounds: ${ROUNDS} cold starts and ${WARM_CALLS} warm calls per sandbox and runtime, interleaved; medians (p50).`, ''];
  out.push('| cold start, no network | bubblewrap: ready / first answer, ms | gvisor: ready / first answer, ms | first answer: gvisor − bubblewrap, ms | ratio |', '|---|---:|---:|---:|---:|');
  const warmRows: string[] = [];
  for (const runner of ['python', 'node'] as const) {
    for (const k of KINDS) await cold(spec(k, runner, dir)); // the page cache, runsc's binary
    bench.log(`${runner}: ${ROUNDS} rounds of cold starts`);
    const results = await interleaved(ROUNDS, KINDS, (k) => cold(spec(k, runner, dir)));
    const m = (k: Kind, f: 'ready' | 'first') => median(results.get(k)!.map((x) => x[f]));
    const [b, v] = [m('bubblewrap', 'first'), m('gvisor', 'first')];
    out.push(`| ${runner} | ${fmt(m('bubblewrap', 'ready'))} / ${fmt(b)} | ${fmt(m('gvisor', 'ready'))} / ${fmt(v)} | +${fmt(v - b)} | ${fmt(v / b, 1)}× |`);

    bench.log(`${runner}: ${WARM_CALLS} warm calls each`);
    const workers = new Map<Kind, Worker>();
    for (const k of KINDS) workers.set(k, await Worker.start(spec(k, runner, dir)));
    for (const w of workers.values()) for (let i = 0; i < 20; i++) await w.call('json', Buffer.from('"x"'), 10_000);
    const warm = await interleaved(WARM_CALLS, KINDS, async (k) => {
      const t0 = performance.now();
      const o = await workers.get(k)!.call('json', Buffer.from('"x"'), 10_000);
      if (o.kind !== 'result') throw new Error(JSON.stringify(o));
      return performance.now() - t0;
    });
    for (const w of workers.values()) await w.stop();
    const wb = warm.get('bubblewrap')!;
    const wg = warm.get('gvisor')!;
    warmRows.push(`| ${runner} | ${fmt(median(wb), 3)} / ${fmt(p(wb, 0.95), 3)} | ${fmt(median(wg), 3)} / ${fmt(p(wg, 0.95), 3)} | +${fmt(median(wg) - median(wb), 3)} | ${fmt(median(wg) / median(wb), 1)}× |`);
  }
  out.push('', '| warm call (echo) | bubblewrap: p50 / p95, ms | gvisor: p50 / p95, ms | p50: gvisor − bubblewrap, ms | ratio |', '|---|---:|---:|---:|---:|', ...warmRows, '');
  process.stdout.write(out.join('\n') + '\n');
}

void bench.run(main);
