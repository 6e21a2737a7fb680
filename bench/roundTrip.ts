/**
 * The worker round trip alone, without HTTP: sequential calls to one warm child, timed (p50)
 * and charged (CPU µs per call of the calling process and of the child's process tree), for
 *
 *   - the floor's child (`/usr/bin/node bench/floorChild.mjs`, u32-prefixed frames over its
 *     stdin and stdout), called from this process: what a process boundary costs by itself;
 *   - Worker.call on an echo worker (src/runtime/worker.ts + its runner), sandboxed as in
 *     production and unsandboxed (the sandbox's share), each called from a process of its own
 *     (bench/roundTripDriver.ts);
 *   - with `--base DIR` or `--rev REV` (bench/baseTree.ts), the same sandboxed Worker.call
 *     with the base tree's worker.ts and runner, for judging a change to the round trip.
 *
 * Kinds are interleaved over rounds; medians are printed, and with a base the paired ratios.
 *
 *   node --import ./bin/loader.mjs bench/roundTrip.ts [--rounds N] [--runner node|python] [--base DIR | --rev REV]
 */
import { fork, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { probeSandbox } from '../src/runtime/sandbox.ts';
import { argOf, baseTree } from './baseTree.ts';
import { createBench, fmt, interleaved } from './common.ts';
import { median, percentile } from './load.ts';
import { treeCpuExact as treeCpu } from './procTree.ts';
import { REPO } from './procs.ts';

const bench = createBench('roundTrip');
const ROUNDS = Number(argOf('--rounds') ?? 9);
const RUNNER = (argOf('--runner') ?? 'node') as 'node' | 'python';
const CALLS = 1500;
const INPUT = Buffer.from('hello, algohost', 'utf8');

interface Sample {
  p50: number;
  /** CPU µs per call of the caller and of the child's tree. */
  caller: number;
  child: number;
}

interface Kind {
  label: string;
  run(calls: number): Promise<Sample>;
  stop(): void;
}

function floorKind(): Kind {
  const child = spawn('/usr/bin/node', [fileURLToPath(new URL('./floorChild.mjs', import.meta.url))], { stdio: ['pipe', 'pipe', 'inherit'] });
  let waiting: (() => void) | undefined;
  let buffered = 0;
  child.stdout.on('data', (chunk: Buffer) => {
    buffered += chunk.length;
    if (buffered >= 4 + INPUT.length) {
      buffered -= 4 + INPUT.length;
      waiting!();
    }
  });
  const frame = Buffer.alloc(4 + INPUT.length);
  frame.writeUInt32LE(INPUT.length, 0);
  INPUT.copy(frame, 4);
  const call = () =>
    new Promise<void>((resolve) => {
      waiting = resolve;
      child.stdin.write(frame);
    });
  return {
    label: "floor's child (/usr/bin/node bench/floorChild.mjs over stdin/stdout)",
    async run(calls) {
      const lat: number[] = [];
      const c0 = process.cpuUsage();
      const t0 = treeCpu(child.pid!);
      for (let i = 0; i < calls; i++) {
        const s = performance.now();
        await call();
        lat.push(performance.now() - s);
      }
      const c = process.cpuUsage(c0);
      const t1 = treeCpu(child.pid!);
      return { p50: percentile(lat, 50), caller: (c.user + c.system) / calls, child: ((t1.self + t1.children - t0.self - t0.children) * 1e6) / calls };
    },
    stop: () => child.kill(),
  };
}

async function driverKind(label: string, root: string, dir: string, entry: string, mode: 'sandboxed' | 'unsandboxed'): Promise<Kind> {
  const child: ChildProcess = fork(path.join(REPO, 'bench/roundTripDriver.ts'), [root, RUNNER, dir, entry, mode], { execArgv: ['--import', new URL('../bin/loader.mjs', import.meta.url).href], cwd: REPO, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const next = () => new Promise<Record<string, number>>((resolve, reject) => {
    const exited = (code: number | null) => reject(new Error(`${label}: the driver exited (${code})`));
    child.once('exit', exited);
    child.once('message', (m: Record<string, number>) => {
      child.off('exit', exited);
      resolve(m);
    });
  });
  await next();
  return {
    label,
    async run(calls) {
      const t0 = treeCpu(child.pid!);
      child.send({ calls });
      const r = await next();
      const t1 = treeCpu(child.pid!);
      return { p50: r.p50!, caller: r.cpuUs!, child: ((t1.children - t0.children) * 1e6) / calls };
    },
    stop: () => child.disconnect(),
  };
}

async function main(): Promise<void> {
  const dir = path.join(bench.work, 'echo');
  fs.mkdirSync(dir, { recursive: true });
  const entry = RUNNER === 'node' ? 'echo.mjs' : 'echo.py';
  fs.writeFileSync(path.join(dir, entry), RUNNER === 'node' ? 'export function apply(input) { return input; }\n' : 'def apply(input):\n    return input\n');
  const sandbox = probeSandbox().available;
  const kinds: Kind[] = [floorKind()];
  try {
    if (sandbox) kinds.push(await driverKind(`Worker.call, ${RUNNER} runner, sandboxed`, REPO, dir, entry, 'sandboxed'));
    kinds.push(await driverKind(`Worker.call, ${RUNNER} runner, unsandboxed`, REPO, dir, entry, 'unsandboxed'));
    const withBase = sandbox && (argOf('--base') !== undefined || argOf('--rev') !== undefined);
    if (withBase) {
      const root = baseTree();
      kinds.push(await driverKind(`base (${path.relative(REPO, root)}): Worker.call, ${RUNNER} runner, sandboxed`, root, dir, entry, 'sandboxed'));
    }
    for (const k of kinds) await k.run(500);
    const results = await interleaved(ROUNDS, kinds, (k) => k.run(CALLS));
    const lines = [
      "| Round trip | p50 ms | the caller's CPU µs per call | the child's CPU µs per call |",
      '|---|---:|---:|---:|',
      ...kinds.map((k) => {
        const r = results.get(k)!;
        return `| ${k.label} | ${fmt(median(r.map((x) => x.p50)), 3)} | ${fmt(median(r.map((x) => x.caller)), 1)} | ${fmt(median(r.map((x) => x.child)), 1)} |`;
      }),
    ];
    if (withBase) {
      const mine = results.get(kinds[1]!)!;
      const base = results.get(kinds[3]!)!;
      const ratio = (f: (x: Sample) => number) => fmt(median(mine.map((x, i) => f(x) / f(base[i]!))), 3);
      lines.push('', `new ÷ base (sandboxed), paired medians: p50 ${ratio((x) => x.p50)}, the caller's CPU ${ratio((x) => x.caller)}, the worker's CPU ${ratio((x) => x.child)}`);
    }
    process.stdout.write(lines.join('\n') + '\n');
  } finally {
    for (const k of kinds) k.stop();
  }
}

await bench.run(main);
