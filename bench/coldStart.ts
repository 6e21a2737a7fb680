/**
 * Cold starts of an echo worker, sandboxed as in production: Worker.start until its `ready`
 * frame and until the first call's answer, for this tree and (`--base DIR` / `--rev REV`,
 * bench/baseTree.ts) the base tree's worker.ts and runner, each from a process of its own
 * (bench/roundTripDriver.ts), one start of each per round, interleaved; medians and the
 * paired ratios.
 *
 *   node --import ./bin/loader.mjs bench/coldStart.ts [--runner node|python] [--rounds N] [--base DIR | --rev REV]
 */
import { fork, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { argOf, baseTree } from './baseTree.ts';
import { createBench, fmt, interleaved } from './common.ts';
import { median } from './load.ts';
import { REPO } from './procs.ts';

const bench = createBench('coldStart');
const ROUNDS = Number(argOf('--rounds') ?? 20);
const RUNNER = (argOf('--runner') ?? 'python') as 'node' | 'python';

interface Cold {
  readyMs: number;
  firstMs: number;
}

async function driver(root: string, dir: string, entry: string): Promise<{ child: ChildProcess; cold(): Promise<Cold> }> {
  const child = fork(path.join(REPO, 'bench/roundTripDriver.ts'), [root, RUNNER, dir, entry, 'sandboxed'], { execArgv: ['--import', new URL('../bin/loader.mjs', import.meta.url).href], cwd: REPO, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const next = () => new Promise<Record<string, number>>((resolve) => child.once('message', resolve));
  await next();
  return {
    child,
    async cold() {
      child.send({ cold: true });
      const r = await next();
      return { readyMs: r.readyMs!, firstMs: r.firstMs! };
    },
  };
}

async function main(): Promise<void> {
  const dir = path.join(bench.work, 'echo');
  fs.mkdirSync(dir, { recursive: true });
  const entry = RUNNER === 'node' ? 'echo.mjs' : 'echo.py';
  fs.writeFileSync(path.join(dir, entry), RUNNER === 'node' ? 'export function apply(input) { return input; }\n' : 'def apply(input):\n    return input\n');
  const trees: [string, string][] = [['this tree', REPO]];
  if (argOf('--base') !== undefined || argOf('--rev') !== undefined) {
    const root = baseTree();
    trees.push([`base (${path.basename(root)})`, root]);
  }
  const drivers = await Promise.all(trees.map(([, root]) => driver(root, dir, entry)));
  try {
    for (const d of drivers) await d.cold();
    const results = await interleaved(ROUNDS, drivers, (d) => d.cold());
    const lines = [`| ${RUNNER} worker, cold | ready, p50 ms | first answer, p50 ms |`, '|---|---:|---:|'];
    drivers.forEach((d, i) => {
      const r = results.get(d)!;
      lines.push(`| ${trees[i]![0]} | ${fmt(median(r.map((x) => x.readyMs)), 1)} | ${fmt(median(r.map((x) => x.firstMs)), 1)} |`);
    });
    if (drivers.length === 2) {
      const [a, b] = drivers.map((d) => results.get(d)!);
      const ratio = (f: (x: Cold) => number) => fmt(median(a!.map((x, i) => f(x) / f(b![i]!))), 3);
      lines.push('', `this tree ÷ base, paired medians: ready ${ratio((x) => x.readyMs)}, first answer ${ratio((x) => x.firstMs)}`);
    }
    process.stdout.write(lines.join('\n') + '\n');
  } finally {
    for (const d of drivers) d.child.disconnect();
  }
}

await bench.run(main);
