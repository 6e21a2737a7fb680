/**
 * Many tenants on shared workers (`npm run bench:tenants`; issue 24, docs/limits.md "Fair
 * shares"). 50 callers (users, each with a key of their own) call a set of algorithms that
 * sleep 5–50 ms, on one server whose pool is full; one of them floods.
 *
 * Phases, against one server (bench/tenantsServer.ts, a child process), repeated and
 * alternated:
 *   capacity  the 49 well-behaved callers each keep one call in flight: the calls a second
 *             the server completes with this mix (C), measured first
 *   quiet     the 49 well-behaved callers, each sending at random (Poisson) at LOAD × C / 49
 *             a second: the same-run baseline
 *   flood     the same, while the 50th sends at FLOOD × its fair share (C / 50) a second
 * Reported: the well-behaved callers' p50 and p99 in the flood phases over the quiet ones
 * (target: p99 ≤ 2×), and how the flooder was answered (target: 429 `queue_full`, never a
 * timeout or a 503). With `--rev REV` (or `--base DIR`; bench/baseTree.ts) the same phases run
 * against that tree's server afterwards, as a reference (e.g. the commit before fair shares).
 *
 * The algorithms are a marketplace's catalogue (issue 24): 200 (`--algorithms`), half Node and
 * half Python, sleeping 5–50 ms, of Zipf popularity (s = 1.1), on a pool of 20 warm workers at
 * most (`--workers`; 4 per version), so that the long tail starts cold as it would
 * (bench/catalog.ts measures those cold starts); `pick` draws an algorithm by popularity.
 *
 * The per-caller bound of the pool is the number of workers by default (`--per-caller`): with
 * it a flood of 10 shares reaches its bound within a phase even where a shared machine's noise
 * leaves a small capacity (the flood's excess over what it is served is 0.1 × C a second).
 *
 *   npm run bench:tenants [-- --workers 8 --load 0.9 --flood 10 --seconds 20 --reps 2 --per-caller N --rev REV]
 *
 * BENCH_QUICK=1 shortens every phase (for checking the script, not for numbers). The results
 * go to stdout and to docs/performance.md between the bench:tenants markers.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { loadConfig } from '../src/config.ts';
import { createServices } from '../src/services.ts';
import { release } from '../test/helpers/algorithms.ts';
import { api } from '../test/helpers/server.ts';
import { argOf, baseTree, numArg } from './baseTree.ts';
import { catalogFiles, codeVersion, createBench, fmt, noiseMeter, picker, QUICK, sleep, waitForQuiet, writeReport, zipfCatalog } from './common.ts';
import { median, percentile } from './load.ts';
import { spawnServer, type ServerProc } from './procs.ts';

const bench = createBench('tenants');
const { log } = bench;
const CALLERS = 50;
const WORKERS = numArg('--workers', 20);
const PER_VERSION = numArg('--per-version', 4);
const ALGORITHMS = QUICK ? 20 : numArg('--algorithms', 200);
const ZIPF_S = 1.1;
/** The well-behaved callers' load, a fraction of the capacity measured. */
const LOAD = numArg('--load', 0.9);
/** The flooder's rate, in fair shares of the capacity (C / CALLERS). */
const FLOOD = numArg('--flood', 10);
const SECONDS = QUICK ? 4 : numArg('--seconds', 20);
const REPS = QUICK ? 1 : numArg('--reps', 2);
/** A caller's calls waiting at most (ALGOHOST_QUEUE_PER_CALLER): low enough that a flood on a slow machine reaches it within a phase. */
const PER_CALLER = numArg('--per-caller', WORKERS);
const QUEUE = numArg('--queue', 1000);
/** A call not answered in this long is counted as timed out. */
const CALL_TIMEOUT_MS = 60_000;
const SECTION = '## Tenants';
const HOME = path.join(bench.work, 'home');

// ---- the algorithms ------------------------------------------------------------------------

/** The catalogue. */
const MIX = zipfCatalog(ALGORITHMS, ZIPF_S);
const pick = picker(MIX);

// ---- setup ---------------------------------------------------------------------------------

/** The callers' keys, made on the home before the server starts; caller 0 owns the algorithms. */
async function createUsers(): Promise<string[]> {
  const services = await createServices(loadConfig({ home: HOME, port: '0', host: '127.0.0.1', demo: false }, {}));
  try {
    const keys: string[] = [];
    for (let i = 0; i < CALLERS; i++) keys.push((await services.users.create(`caller${String(i).padStart(2, '0')}`)).apiKey);
    return keys;
  } finally {
    await services.close();
  }
}

async function startServer(label: string, tree?: string): Promise<ServerProc> {
  const args = ['bench/tenantsServer.ts', HOME, '--workers', String(WORKERS), '--per-version', String(PER_VERSION), '--queue', String(QUEUE), '--per-caller', String(PER_CALLER)];
  if (tree) args.push('--tree', tree);
  const server = await spawnServer(label, { args, logFile: path.join(bench.work, `${label.replace(/\W+/g, '-')}.log`) });
  bench.procs.push(server);
  return server;
}

// ---- load ----------------------------------------------------------------------------------

interface Outcome {
  flood: boolean;
  status: number;
  code: string | undefined;
  ms: number;
}

async function callOnce(base: string, key: string, flood: boolean): Promise<Outcome> {
  const a = pick();
  const t0 = performance.now();
  try {
    const r = await fetch(`${base}/v1/algo/caller00/${a.name}`, {
      method: 'POST',
      headers: { authorization: `Simple ${key}`, 'content-type': 'text/plain' },
      body: 'x',
      signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
    });
    const text = await r.text();
    let code: string | undefined;
    if (r.status !== 200) {
      try {
        code = (JSON.parse(text) as { error?: { code?: string } }).error?.code;
      } catch {
        code = undefined;
      }
    } else if (text.includes('"error"')) code = 'algorithm_error';
    return { flood, status: r.status, code, ms: performance.now() - t0 };
  } catch (err) {
    const timeout = (err as Error).name === 'TimeoutError';
    return { flood, status: 0, code: timeout ? 'timeout' : `client: ${(err as Error).message}`, ms: performance.now() - t0 };
  }
}

/**
 * Calls a second a server completes with this mix: the well-behaved callers each keeping one
 * call in flight (49 in all: every worker busy, and no caller past its own bound).
 */
async function capacity(base: string, keys: string[]): Promise<number> {
  const ms = QUICK ? 2000 : 5000;
  const end = performance.now() + ms;
  let done = 0;
  await Promise.all(
    keys.slice(1).map(async (key) => {
      while (performance.now() < end) if ((await callOnce(base, key, false)).status === 200) done++;
    }),
  );
  return done / (ms / 1000);
}

/** Open-loop Poisson arrivals at `rate` a second for `ms`, each call recorded. */
async function poisson(base: string, key: string, rate: number, ms: number, flood: boolean, out: Outcome[]): Promise<void> {
  const end = performance.now() + ms;
  const calls: Promise<void>[] = [];
  for (let at = performance.now(); ; ) {
    at += (-Math.log(1 - Math.random()) / rate) * 1000;
    if (at >= end) break;
    const wait = at - performance.now();
    if (wait > 0) await sleep(wait);
    calls.push(callOnce(base, key, flood).then((o) => void out.push(o)));
  }
  await Promise.all(calls);
}

async function phase(base: string, keys: string[], cap: number, flood: boolean): Promise<Outcome[]> {
  const out: Outcome[] = [];
  const each = (LOAD * cap) / (CALLERS - 1);
  const runs = keys.slice(1).map((k) => poisson(base, k, each, SECONDS * 1000, false, out));
  if (flood) runs.push(poisson(base, keys[0]!, (FLOOD * cap) / CALLERS, SECONDS * 1000, true, out));
  await Promise.all(runs);
  return out;
}

interface Side {
  label: string;
  capacity: number;
  quiet: Outcome[][];
  flood: Outcome[][];
}

async function measure(label: string, keys: string[], tree?: string): Promise<Side> {
  const server = await startServer(label, tree);
  const base = `http://127.0.0.1:${server.port}`;
  try {
    // Warm every algorithm's workers, untimed.
    await capacity(base, keys);
    const cap = await capacity(base, keys);
    log(`${label}: capacity ${fmt(cap, 0)} calls/s with ${WORKERS} workers`);
    const side: Side = { label, capacity: cap, quiet: [], flood: [] };
    for (let rep = 0; rep < REPS; rep++) {
      for (const flood of rep % 2 === 0 ? [false, true] : [true, false]) {
        const out = await phase(base, keys, cap, flood);
        (flood ? side.flood : side.quiet).push(out);
        const ok = out.filter((o) => !o.flood && o.status === 200).map((o) => o.ms);
        log(`${label}, ${flood ? 'flood' : 'quiet'} ${rep + 1}/${REPS}: well-behaved p50 ${fmt(percentile(ok, 50), 0)} ms, p99 ${fmt(percentile(ok, 99), 0)} ms (${ok.length} calls)`);
        // Let the flood's queue drain before the next phase.
        await sleep(2000);
      }
    }
    return side;
  } finally {
    stoppedCpu += server.cpu();
    await server.stop();
  }
}

/** CPU seconds of the servers already stopped (for the noise line). */
let stoppedCpu = 0;

// ---- report --------------------------------------------------------------------------------

function summary(side: Side) {
  const calls = (runs: Outcome[][]) => runs.flat().filter((o) => !o.flood);
  const ms = (runs: Outcome[][]) => calls(runs).filter((o) => o.status === 200 && o.code === undefined).map((o) => o.ms);
  const quiet = ms(side.quiet);
  const flood = ms(side.flood);
  const q = { p50: percentile(quiet, 50), p99: percentile(quiet, 99) };
  const f = { p50: percentile(flood, 50), p99: percentile(flood, 99) };
  const perRep = (runs: Outcome[][]) => runs.map((r) => fmt(percentile(r.filter((o) => !o.flood && o.status === 200).map((o) => o.ms), 99), 0)).join(', ');
  const failed = [...calls(side.quiet), ...calls(side.flood)].filter((o) => o.status !== 200 || o.code !== undefined);
  const flooder = side.flood.flat().filter((o) => o.flood);
  const count = (p: (o: Outcome) => boolean) => flooder.filter(p).length;
  const answers = {
    total: flooder.length,
    ok: count((o) => o.status === 200 && o.code === undefined),
    queueFull: count((o) => o.status === 429 && o.code === 'queue_full'),
    busy: count((o) => o.status === 503),
    timeouts: count((o) => o.code === 'timeout'),
    other: 0,
  };
  answers.other = answers.total - answers.ok - answers.queueFull - answers.busy - answers.timeouts;
  const floodOk = flooder.filter((o) => o.status === 200).map((o) => o.ms);
  const refusedMs = flooder.filter((o) => o.status === 429).map((o) => o.ms);
  return { q, f, perRepQuiet: perRep(side.quiet), perRepFlood: perRep(side.flood), failed, answers, floodOkP50: median(floodOk), refusedP99: percentile(refusedMs, 99), quietCalls: quiet.length, floodCalls: flood.length };
}

async function main(): Promise<void> {
  const t0 = performance.now();
  const load0 = os.loadavg()[0]!;
  fs.mkdirSync(HOME, { recursive: true });
  const keys = await createUsers();
  {
    // Publish with a server of this tree (the algorithms are the home's, whichever tree runs later).
    const server = await startServer('publish');
    const owner = api(`http://127.0.0.1:${server.port}`, keys[0]!);
    for (const a of MIX) await release(owner, 'caller00', a.name, catalogFiles(a), { settings: { language: a.runner === 'node' ? 'javascript' : 'python3' } });
    await server.stop();
  }
  const idleAtStart = await waitForQuiet(QUICK ? 2000 : 60_000, log);
  const noise = noiseMeter(() => stoppedCpu + bench.procs.reduce((a, p) => a + p.cpu(), 0) + process.cpuUsage().user / 1e6 + process.cpuUsage().system / 1e6);
  const sides: Side[] = [await measure('ours', keys)];
  const withBase = argOf('--rev') !== undefined || argOf('--base') !== undefined;
  if (withBase) sides.push(await measure(`base (${argOf('--rev') ?? path.basename(argOf('--base')!)})`, keys, baseTree()));
  const seconds = (performance.now() - t0) / 1000;

  const lines: string[] = [];
  for (const side of sides) {
    const s = summary(side);
    const ratio50 = s.f.p50 / s.q.p50;
    const ratio99 = s.f.p99 / s.q.p99;
    const a = s.answers;
    lines.push(
      `**${side.label}** (capacity measured: ${fmt(side.capacity, 0)} calls/s):`,
      '',
      '| The 49 well-behaved callers | no flood | with the flood | ratio | target | result |',
      '|---|---:|---:|---:|---|---|',
      `| p50 | ${fmt(s.q.p50, 0)} ms | ${fmt(s.f.p50, 0)} ms | ${fmt(ratio50, 2)} × | | |`,
      `| p99 | ${fmt(s.q.p99, 0)} ms | ${fmt(s.f.p99, 0)} ms | ${fmt(ratio99, 2)} × | ≤ 2 × | ${ratio99 <= 2 ? 'PASS' : '**FAIL**'} |`,
      `| calls (each phase ${SECONDS} s × ${REPS}) | ${s.quietCalls} | ${s.floodCalls} | | | |`,
      `| p99 per phase | ${s.perRepQuiet} | ${s.perRepFlood} | | | |`,
      `| not answered 200 | ${s.failed.filter((o) => side.quiet.flat().includes(o)).length} | ${s.failed.filter((o) => side.flood.flat().includes(o)).length} | | 0 | ${s.failed.length === 0 ? 'PASS' : '**FAIL**'} |`,
      '',
      `The flooder (${fmt((FLOOD * side.capacity) / CALLERS, 0)} calls/s, ${FLOOD} × a fair share): ${a.total} calls, ${a.ok} answered 200 (p50 ${fmt(s.floodOkP50, 0)} ms), ` +
        `${a.queueFull} refused 429 \`queue_full\` (p99 ${fmt(s.refusedP99, 0)} ms to the refusal), ${a.busy} 503, ${a.timeouts} timed out (${CALL_TIMEOUT_MS / 1000} s), ${a.other} other. ` +
        `Target: 429s, no timeouts: ${a.queueFull > 0 && a.timeouts === 0 && a.busy === 0 ? 'PASS' : '**FAIL**'}.`,
      '',
    );
  }
  writeReport({
    name: 'tenants',
    section: SECTION,
    heading: '### Tenants (`npm run bench:tenants`)',
    lines,
    setup: [
      `- **Setup:** one server (bench/tenantsServer.ts), ${WORKERS} warm workers at most (${PER_VERSION} per version), pre-started workers as by default, queue ${QUEUE} in all and ${PER_CALLER} per caller; ${CALLERS} users with a key each; ` +
        `${MIX.length} algorithms (half Node, half Python, sleeping 5–50 ms) of Zipf popularity (s = ${ZIPF_S}), each call picking one by popularity: the long tail starts cold.`,
      `- **Load:** 49 well-behaved callers, each sending open-loop (Poisson) at ${fmt(LOAD * 100, 0)} % of the measured capacity ÷ 49; in the flood phases the 50th caller sends at ${FLOOD} × capacity ÷ ${CALLERS}. ` +
        `Quiet and flood phases of ${SECONDS} s alternate, ${REPS} of each (order rotated), 2 s apart; percentiles pooled over a side's phases; latency from the request to the end of the answer (fetch, keep-alive).`,
    ],
    code: `${codeVersion()}${withBase ? `; the reference tree from ${argOf('--rev') ?? argOf('--base')}` : ''}`,
    run: { seconds, load0, idleAtStart, noise: noise() },
    log,
  });
}

await bench.run(main);
