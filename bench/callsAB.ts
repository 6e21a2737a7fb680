/**
 * A/B benchmark of warm algorithm calls, for judging one change to the call path at a time:
 * the server as it is in the working tree ("new") against the same server built from another
 * tree ("base": by default HEAD, exported with `git archive` into bench/.work/), both with
 * maxPerVersion 1 on one home, plus the serial floor (bench/floorServer.ts --serial) for
 * reference. Every figure is paired: new ÷ base within each round (the two measured one after
 * the other, the order rotated every round), then the median over the rounds.
 *
 *   node --import ./bin/loader.mjs bench/callsAB.ts [--base DIR | --rev REV] [--reps N] [--runner node|python] [--base-loader tsx]
 *
 * `--base-loader tsx` runs the base server through tsx's loader rather than bin/loader.mjs (with
 * `--rev HEAD` and nothing changed: what the loader alone costs a call).
 *
 * Measures warm echo throughput at 64 keep-alive connections (with CPU µs per call of each
 * server and of its workers, from /proc) and p50 latency at 1 connection. Prints a table; it
 * writes nothing to docs/.
 */
import fs from 'node:fs';
import path from 'node:path';
import { loadConfig } from '../src/config.ts';
import { createServices } from '../src/services.ts';
import { release } from '../test/helpers/algorithms.ts';
import { api } from '../test/helpers/server.ts';
import { argOf, baseTree } from './baseTree.ts';
import { createBench, fmt, interleaved, waitForQuiet } from './common.ts';
import { median, percentile, rawRequest, runLoad } from './load.ts';
import { treeCpuExact as treeCpu } from './procTree.ts';
import { REPO, spawnServer, type ServerProc } from './procs.ts';

const REPS = Number(argOf('--reps') ?? 8);
const RUNNER = argOf('--runner') ?? 'node';
const CONNECTIONS = 64;
const RATE_MS = 1500;
const LAT_MS = 400;
const INPUT = Buffer.from('hello, algohost', 'utf8');

const bench = createBench('callsAB');
const { log, procs } = bench;

interface Target {
  label: string;
  proc: ServerProc;
  request: Buffer;
}

async function main(): Promise<void> {
  const base = baseTree();
  const home = path.join(bench.work, 'home');
  fs.mkdirSync(home, { recursive: true });
  const services = await createServices(loadConfig({ home, port: '0', host: '127.0.0.1', demo: false }, {}));
  const apiKey = (await services.users.create('bench')).apiKey;
  await services.close();

  const start = async (label: string, script: string, extra: string[], loader?: 'tsx') => {
    const p = await spawnServer(label, { args: [script, ...extra], logFile: path.join(bench.work, `${label.replace(/\W+/g, '-')}.log`), ...(loader ? { loader } : {}) });
    procs.push(p);
    return p;
  };
  const newP = await start('new', 'bench/algoServer.ts', [home, '--per-version', '1']);
  const baseLoader = argOf('--base-loader');
  if (baseLoader !== undefined && baseLoader !== 'tsx') throw new Error('--base-loader: only tsx');
  const baseP = await start('base', path.join(base, 'bench/algoServer.ts'), [home, '--per-version', '1'], baseLoader);
  const floorP = await start('floor-serial', 'bench/floorServer.ts', ['--serial']);

  const call = api(`http://127.0.0.1:${newP.port}`, apiKey);
  const name = RUNNER === 'python' ? 'EchoPy' : 'Echo';
  const files: Record<string, string> = RUNNER === 'python' ? { 'src/EchoPy.py': 'def apply(input):\n    return input\n' } : { 'src/Echo.js': 'export function apply(input) { return input; }\n' };
  await release(call, 'bench', name, files, { settings: { language: RUNNER === 'python' ? 'python3' : 'javascript' } });

  const headers = { Authorization: `Simple ${apiKey}`, 'Content-Type': 'text/plain' };
  const targets: Target[] = [
    { label: `base (${path.relative(REPO, base)})`, proc: baseP, request: rawRequest(baseP.port, 'POST', `/v1/algo/bench/${name}`, headers, INPUT) },
    { label: 'new (working tree)', proc: newP, request: rawRequest(newP.port, 'POST', `/v1/algo/bench/${name}`, headers, INPUT) },
    { label: 'floor, serial', proc: floorP, request: rawRequest(floorP.port, 'POST', `/v1/algo/bench/${name}`, headers, INPUT) },
  ];
  for (const t of targets) {
    // The first call starts a worker: on a loaded machine that can take longer than one 200 ms window.
    let r = await runLoad(t.proc.port, [t.request], 1, 200);
    for (let i = 0; i < 25 && r.errors === 0 && r.completed === 0; i++) r = await runLoad(t.proc.port, [t.request], 1, 200);
    if (r.errors > 0 || r.completed === 0) throw new Error(`${t.label} does not answer 200 (${r.errors} other answers)`);
  }
  await waitForQuiet(30_000, log);
  for (const t of targets) await runLoad(t.proc.port, [t.request], CONNECTIONS, 1500);

  log(`throughput: ${REPS} x ${RATE_MS} ms at ${CONNECTIONS} connections`);
  const rates = await interleaved(REPS, targets, async (t) => {
    const c0 = treeCpu(t.proc.pid);
    const r = await runLoad(t.proc.port, [t.request], CONNECTIONS, RATE_MS);
    const c1 = treeCpu(t.proc.pid);
    if (r.errors > 0) throw new Error(`${t.label}: ${r.errors} errors`);
    return { rate: r.rate, server: ((c1.self - c0.self) * 1e6) / r.completed, child: ((c1.children - c0.children) * 1e6) / r.completed };
  });
  log(`latency: ${REPS + 4} x ${LAT_MS} ms at 1 connection`);
  const lats = await interleaved(REPS + 4, targets, async (t) => {
    const latencies: number[] = [];
    await runLoad(t.proc.port, [t.request], 1, LAT_MS, { latencies });
    return { p50: percentile(latencies, 50), p99: percentile(latencies, 99) };
  });

  const [b, n, f] = targets as [Target, Target, Target];
  const pr = (a: Target, c: Target, k: 'rate') => median(rates.get(a)!.map((x, i) => x[k] / rates.get(c)![i]![k]));
  const pl = (a: Target, c: Target) => median(lats.get(a)!.map((x, i) => x.p50 / lats.get(c)![i]!.p50));
  const lines = [
    '| Server | calls/s | ÷ serial floor | server µs/call | workers µs/call | p50 ms | p99 ms | p50 ÷ floor (serial) |',
    '|---|---:|---:|---:|---:|---:|---:|---:|',
    ...targets.map((t) => {
      const r = rates.get(t)!;
      const l = lats.get(t)!;
      return `| ${t.label} | ${fmt(median(r.map((x) => x.rate)), 0)} | ${fmt(100 * pr(t, f, 'rate'), 1)} % | ${fmt(median(r.map((x) => x.server)), 0)} | ${fmt(median(r.map((x) => x.child)), 0)} | ${fmt(median(l.map((x) => x.p50)), 3)} | ${fmt(median(l.map((x) => x.p99)), 3)} | ${fmt(pl(t, f), 2)} |`;
    }),
    '',
    `new ÷ base, paired medians over ${REPS} rounds: calls/s ${fmt(pr(n, b, 'rate'), 3)}, p50 ${fmt(pl(n, b), 3)}; ` +
      `server CPU per call ${fmt(median(rates.get(n)!.map((x, i) => x.server / rates.get(b)![i]!.server)), 3)}, workers ${fmt(median(rates.get(n)!.map((x, i) => x.child / rates.get(b)![i]!.child)), 3)}`,
    `per round, calls/s new ÷ base: ${rates.get(n)!.map((x, i) => fmt(x.rate / rates.get(b)![i]!.rate, 2)).join(', ')}`,
    `per round, p50 new ÷ base: ${lats.get(n)!.map((x, i) => fmt(x.p50 / lats.get(b)![i]!.p50, 2)).join(', ')}`,
  ];
  process.stdout.write(lines.join('\n') + '\n');
}

await bench.run(main);
