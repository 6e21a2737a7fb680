/**
 * Cold starts under a catalogue (`npm run bench:catalog`; issue 24, docs/limits.md "Cold
 * starts"): 200 algorithms (half Node, half Python, each sleeping 5–50 ms) of Zipf popularity
 * (s = 1.1) on one server whose warm workers hold about 20 (ALGOHOST_WORKERS), with pre-started
 * workers (ALGOHOST_PRESTART=2) against none (0), in the same run:
 *
 *   phases   the cold call split by phase, per language, in this process with the runtime's
 *            own classes: the sandbox alone (bubblewrap running /usr/bin/true), the runtime's
 *            start in it (a spare's `spare` frame, less the sandbox), the load of the build (its
 *            files linked in and the `load` frame answered), the first answer; and a worker
 *            started for its build (ready, first answer) as before
 *   alone    cold calls over HTTP one at a time, each of an algorithm not yet called on that
 *            server (every server starts without workers), a pause between them for the spares
 *            to be replaced; then each called again, warm (the same-run baseline of a call).
 *            Before them the server makes SERVER_WARMUP warm calls (--server-warmup, 2000): a
 *            server that has been serving, its code optimised, as a cold call finds it in use
 *   mix      CLIENTS closed-loop clients calling algorithms drawn by popularity for SECONDS:
 *            p50 and p99 of all calls, of the cold ones (X-Cold-Start) and of the warm ones
 *
 * Servers with and without spares alternate, REPS of each. Targets: a cold call's p50 ≤ 10 ms
 * (alone, per language), and the mix's p50 and p99 better with spares than without.
 *
 *   npm run bench:catalog [-- --algorithms 200 --workers 20 --clients 8 --seconds 20 --reps 2 --server-warmup 2000]
 *
 * BENCH_QUICK=1 shortens every phase (for checking the script, not for numbers). The results
 * go to stdout and to docs/performance.md between the bench:catalog markers.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { loadConfig } from '../src/config.ts';
import { createServices } from '../src/services.ts';
import { DEFAULT_LIMITS, probeSandbox } from '../src/runtime/sandbox.ts';
import { linkTree, scanTree } from '../src/runtime/spares.ts';
import { Worker } from '../src/runtime/worker.ts';
import type { RunnerKind } from '../src/runtime/contract.ts';
import { release } from '../test/helpers/algorithms.ts';
import { api } from '../test/helpers/server.ts';
import { numArg } from './baseTree.ts';
import { catalogFiles, createBench, fmt, noiseMeter, picker, QUICK, sleep, waitForQuiet, writeReport, zipfCatalog, type CatalogAlgo } from './common.ts';
import { median, percentile } from './load.ts';
import { spawnServer, type ServerProc } from './procs.ts';

const bench = createBench('catalog');
const { log } = bench;
const ALGORITHMS = QUICK ? 20 : numArg('--algorithms', 200);
const WORKERS = numArg('--workers', 20);
const CLIENTS = numArg('--clients', 8);
const SECONDS = QUICK ? 4 : numArg('--seconds', 20);
const REPS = QUICK ? 1 : numArg('--reps', 2);
/** Cold calls one at a time per language and server. */
const ALONE = QUICK ? 3 : numArg('--alone', 10);
/** Warm calls a server makes before its cold calls alone are measured (a server that has been serving). */
const SERVER_WARMUP = QUICK ? 200 : numArg('--server-warmup', 2000);
/** Rounds of the in-process phase split per language. */
const ROUNDS = QUICK ? 3 : numArg('--rounds', 10);
const ZIPF_S = 1.1;
const SECTION = '## Cold starts';
const HOME = path.join(bench.work, 'home');

// ---- the catalogue --------------------------------------------------------------------------

type Algo = CatalogAlgo;

const CATALOG = zipfCatalog(ALGORITHMS, ZIPF_S);
const pick = picker(CATALOG);
/** Echo algorithms for the cold calls alone (no sleep: what is measured is the platform's), ALONE per language. */
const ECHOES: Algo[] = Array.from({ length: 2 * ALONE }, (_, i) => ({ name: `E${String(i).padStart(3, '0')}`, runner: i % 2 === 0 ? 'node' : 'python', sleepMs: 0, weight: 0 }));

const files = catalogFiles;

// ---- servers --------------------------------------------------------------------------------

async function startServer(label: string, prestart: number): Promise<ServerProc> {
  const args = ['bench/tenantsServer.ts', HOME, '--workers', String(WORKERS), '--per-version', '4', '--queue', '1000', '--per-caller', '1000', '--prestart', String(prestart)];
  const server = await spawnServer(label, { args, logFile: path.join(bench.work, `${label.replace(/\W+/g, '-')}.log`) });
  bench.procs.push(server);
  return server;
}

interface Call {
  ms: number;
  cold: boolean;
  ok: boolean;
  runner: RunnerKind;
}

async function callOnce(base: string, key: string, a: Algo): Promise<Call> {
  const t0 = performance.now();
  const r = await fetch(`${base}/v1/algo/owner/${a.name}`, { method: 'POST', headers: { authorization: `Simple ${key}`, 'content-type': 'text/plain' }, body: 'x' });
  const body = await r.text();
  return { ms: performance.now() - t0, cold: r.headers.get('x-cold-start') === 'true', ok: r.status === 200 && !body.includes('"error"'), runner: a.runner };
}

interface Side {
  alone: Call[];
  warm: Call[];
  mix: Call[];
}

/** One server's phases: the cold calls alone (and again warm), then the mix. */
async function phases(label: string, prestart: number, key: string, side: Side, stopped: { cpu: number }): Promise<void> {
  const server = await startServer(label, prestart);
  const base = `http://127.0.0.1:${server.port}`;
  try {
    // The first call of each language starts its spares: not counted. Then warm calls, as a
    // server that has been serving has made (its own code compiled by V8's optimising tiers):
    // a cold call is a server's everyday work in a catalogue, not its first (a server just
    // started runs its request path in the interpreter, ~3 ms of a call here).
    const first = (['node', 'python'] as const).map((runner) => CATALOG.find((a) => a.runner === runner)!);
    for (const a of first) await callOnce(base, key, a);
    for (let i = 0; i < SERVER_WARMUP; i++) await callOnce(base, key, first[i % 2]!);
    await sleep(1000);
    for (const a of ECHOES) {
      side.alone.push(await callOnce(base, key, a));
      // Time for the spare taken to be replaced (a server's spares come back within ~0.3 s here).
      await sleep(500);
    }
    for (const a of ECHOES) side.warm.push(await callOnce(base, key, a));
    const end = performance.now() + SECONDS * 1000;
    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        while (performance.now() < end) side.mix.push(await callOnce(base, key, pick()));
      }),
    );
  } finally {
    stopped.cpu += server.cpu();
    await server.stop();
    bench.procs.splice(bench.procs.indexOf(server), 1);
  }
}

// ---- the phase split, in this process --------------------------------------------------------

interface Split {
  sandbox: number[];
  runtime: number[];
  load: number[];
  first: number[];
  readyBefore: number[];
  firstBefore: number[];
}

async function split(runner: RunnerKind): Promise<Split> {
  const out: Split = { sandbox: [], runtime: [], load: [], first: [], readyBefore: [], firstBefore: [] };
  const build = path.join(bench.work, `split-${runner}`);
  const a: Algo = { name: 'Split', runner, sleepMs: 0, weight: 1 };
  fs.mkdirSync(path.join(build, 'src'), { recursive: true });
  const entry = Object.keys(files(a))[0]!;
  fs.writeFileSync(path.join(build, entry), runner === 'node' ? 'export function apply(input) { return input; }\n' : 'def apply(input):\n    return input\n');
  const tree = scanTree(build)!;
  const limits = DEFAULT_LIMITS;
  for (let i = 0; i < ROUNDS; i++) {
    let t = performance.now();
    probeSandbox();
    out.sandbox.push(performance.now() - t);

    const dir = fs.mkdtempSync(path.join(bench.work, 'spare-'));
    t = performance.now();
    const spare = await Worker.spare({ runner, algoDir: dir, entry: '', network: false, limits, spare: true });
    out.runtime.push(performance.now() - t - out.sandbox.at(-1)!);
    // As the server gives a spare its build (Spares.take): the load and the call written at
    // once; the load's share ends when the runner's `ready` is read (Worker.loadedAt).
    t = performance.now();
    await linkTree(tree, build, dir);
    spare.loadAhead(entry, 30_000);
    await spare.call('text', Buffer.from('x'), 30_000);
    const answered = performance.now();
    out.load.push(spare.loadedAt! - t);
    out.first.push(answered - spare.loadedAt!);
    await spare.stop();
    fs.rmSync(dir, { recursive: true, force: true });

    t = performance.now();
    const w = await Worker.start({ runner, algoDir: build, entry, network: false, limits });
    out.readyBefore.push(performance.now() - t);
    t = performance.now();
    await w.call('text', Buffer.from('x'), 30_000);
    out.firstBefore.push(performance.now() - t);
    await w.stop();
  }
  return out;
}

// ---- the report -----------------------------------------------------------------------------

const p = (xs: number[], q: number) => (xs.length === 0 ? NaN : q === 50 ? median(xs) : percentile(xs, q));
const ms = (x: number) => `${fmt(x, x < 20 ? 1 : 0)} ms`;

async function main(): Promise<void> {
  const t0 = performance.now();
  const load0 = os.loadavg()[0]!;
  fs.mkdirSync(HOME, { recursive: true });
  let key: string;
  {
    const services = await createServices(loadConfig({ home: HOME, port: '0', host: '127.0.0.1', demo: false }, {}));
    try {
      key = (await services.users.create('owner')).apiKey;
    } finally {
      await services.close();
    }
    const server = await startServer('publish', 0);
    const owner = api(`http://127.0.0.1:${server.port}`, key);
    log(`publishing ${CATALOG.length} algorithms`);
    for (const a of [...CATALOG, ...ECHOES]) await release(owner, 'owner', a.name, files(a), { settings: { language: a.runner === 'node' ? 'javascript' : 'python3' } });
    await server.stop();
    bench.procs.splice(bench.procs.indexOf(server), 1);
  }
  const idleAtStart = await waitForQuiet(QUICK ? 2000 : 60_000, log);
  const stopped = { cpu: 0 };
  const noise = noiseMeter(() => stopped.cpu + bench.procs.reduce((a, s) => a + s.cpu(), 0) + process.cpuUsage().user / 1e6 + process.cpuUsage().system / 1e6);

  const splits = { node: await split('node'), python: await split('python') };
  const on: Side = { alone: [], warm: [], mix: [] };
  const off: Side = { alone: [], warm: [], mix: [] };
  for (let rep = 0; rep < REPS; rep++) {
    // Alternated, the order rotated each round.
    const order: [string, number, Side][] = rep % 2 === 0 ? [['pre-started', 2, on], ['none', 0, off]] : [['none', 0, off], ['pre-started', 2, on]];
    for (const [label, prestart, side] of order) {
      log(`round ${rep + 1}: ${label}`);
      await phases(`${label}-${rep}`, prestart, key, side, stopped);
    }
  }
  const seconds = (performance.now() - t0) / 1000;

  const lines: string[] = [
    '**The cold call by phase**, in one process with the runtime\'s own classes (an echo algorithm; medians of ' + ROUNDS + ' rounds; a start for its build split as sandbox + runtime start, both as a spare\'s, + the rest):',
    '',
    '| | sandbox | runtime start | load of the build | first answer | cold call (what a caller waits) |',
    '|---|---:|---:|---:|---:|---:|',
  ];
  for (const runner of ['node', 'python'] as const) {
    const s = splits[runner];
    lines.push(
      `| ${runner}, started for its build (before) | ${ms(median(s.sandbox))} | ${ms(median(s.runtime))} | ${ms(median(s.readyBefore) - median(s.sandbox) - median(s.runtime))} | ${ms(median(s.firstBefore))} | ${ms(median(s.readyBefore) + median(s.firstBefore))} |`,
      `| ${runner}, on a pre-started worker | before the call | before the call | ${ms(median(s.load))} | ${ms(median(s.first))} | ${ms(median(s.load) + median(s.first))} |`,
    );
  }
  lines.push('', `**Cold calls alone over HTTP** (${ALONE} echo algorithms per language, each called first on a server that has not run it but has made ${SERVER_WARMUP} warm calls before, one at a time, 0.5 s apart; p50 / p99), against warm calls of the same algorithms, same run:`, '');
  lines.push('| | pre-started: cold | none: cold | warm | target | result |', '|---|---:|---:|---:|---|---|');
  for (const runner of ['node', 'python'] as const) {
    const cold = (side: Side) => side.alone.filter((c) => c.runner === runner && c.cold).map((c) => c.ms);
    const warm = [...on.warm, ...off.warm].filter((c) => c.runner === runner && !c.cold).map((c) => c.ms);
    const p50 = p(cold(on), 50);
    lines.push(`| ${runner} | ${ms(p50)} / ${ms(p(cold(on), 99))} | ${ms(p(cold(off), 50))} / ${ms(p(cold(off), 99))} | ${ms(p(warm, 50))} | p50 ≤ 10 ms | ${p50 <= 10 ? 'PASS' : '**FAIL**'} |`);
  }
  lines.push('', `**The mix** (${CLIENTS} clients, closed loop, ${SECONDS} s × ${REPS} per side):`, '');
  lines.push('| | calls | cold | p50 all | p99 all | p50 cold | p99 cold | p50 warm | failed |', '|---|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const [label, side] of [['pre-started', on], ['none', off]] as const) {
    const all = side.mix.map((c) => c.ms);
    const cold = side.mix.filter((c) => c.cold).map((c) => c.ms);
    const warm = side.mix.filter((c) => !c.cold).map((c) => c.ms);
    lines.push(`| ${label} | ${side.mix.length} | ${fmt((cold.length / side.mix.length) * 100, 1)} % | ${ms(p(all, 50))} | ${ms(p(all, 99))} | ${ms(p(cold, 50))} | ${ms(p(cold, 99))} | ${ms(p(warm, 50))} | ${side.mix.filter((c) => !c.ok).length} |`);
  }
  writeReport({
    name: 'catalog',
    section: SECTION,
    heading: '### Cold starts under a catalogue (`npm run bench:catalog`)',
    lines: [...lines, ''],
    setup: [
      `- **Setup:** ${CATALOG.length} algorithms (half Node, half Python, sleeping 5–50 ms), Zipf popularity s = ${ZIPF_S}; one server (bench/tenantsServer.ts), ${WORKERS} warm workers at most (4 per version); ALGOHOST_PRESTART=2 against 0, alternated, ${REPS} of each.`,
    ],
    run: { seconds, load0, idleAtStart, noise: noise() },
    log,
  });
}

await bench.run(main);
