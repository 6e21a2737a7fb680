/**
 * Algorithm-call benchmark (`npm run bench:algo`): the algorithm targets of DESIGN.md
 * "Performance targets", each against a baseline measured in the same run:
 *
 *   1. floor: a bare node:http server forwarding each request body to ONE warm child
 *      (`/usr/bin/node bench/floorChild.mjs`) over a pipe and back (bench/floorServer.ts);
 *      for throughput with one request in the pipe at a time (--serial), as our workers take
 *      one call at a time; the pipelined floor (frames of concurrent requests queued in the
 *      pipe) is measured and reported too (docs/performance.md says why it is not the judge)
 *   2. warm echo calls to our server: throughput at 64 connections  >= 50 % of the floor's
 *                                      p50 latency at 1 connection    <= 1.5 x the floor's
 *   3. cold start of a sandboxed worker (Worker.start to the first call's answer), p50:
 *      Node <= 100 ms, Python <= 60 ms; baseline: the bare interpreter starting and exiting
 *   4. RSS of an idle warm worker's whole process tree, Node and Python
 *   5. the first call over HTTP of a freshly published version (end-to-end cold call)
 *   6. the server heap a GC cannot free after warm calls (a regression guard: it must stay flat)
 *
 * Our server runs as a child process (bench/algoServer.ts: createServices + buildApp, log
 * level silent) twice on one home: with the default pool (4 workers per version) and with
 * maxPerVersion 1 (one worker, like the floor's one child). The floors run as child processes
 * too (bench/floorServer.ts, pipelined and --serial), all started the same way; the load
 * generator (bench/load.ts) and the cold-start and memory measurements run here. Runs are
 * interleaved and repeated; medians are reported, and the warm-call ratios are paired (ours
 * over the floor within each round, then the median). The results go to stdout and to
 * docs/performance.md between the bench:algo markers (text outside them is kept).
 *
 * Beside them, the same default-pool server with tracing exported (BENCH_OTLP: spans over OTLP/HTTP
 * to a sink in this process, docs/traces.md) against it with tracing off, in the same rounds
 * (target: ≥ 90 % of its throughput).
 *
 * BENCH_ONLY=costs compares, the same way, the default server against it with Prometheus metrics
 * counted and against it with call limits that never refuse (targets: ≥ 97 % of its throughput
 * each), with an A/A pair for the noise floor, each variant run by `--procs` servers (default 3)
 * whose figures are averaged per round; its block goes between the bench:algo-costs markers.
 * BENCH_ONLY=tracing runs that comparison alone, short: tracing off, tracing exported and, with
 * `--rev REV` (or `--base DIR`), the server of another tree (before traces: what "off" must
 * cost nothing against), throughput and latency interleaved; its block goes to
 * docs/performance.md between the bench:algo-tracing markers.
 * BENCH_QUICK=1 shortens every phase (for checking the script, not for numbers).
 * BENCH_PROFILE=1 measures nothing: it profiles our server (V8 CPU profiler) under the warm
 * echo load at 64 connections and at 1 connection and prints where its time goes; the
 * profiles stay in bench/.work/profiles/.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Writable } from 'node:stream';
import { loadConfig } from '../src/config.ts';
import { createWorkerCgroup } from '../src/runtime/cgroup.ts';
import { DEFAULT_LIMITS, probeSandbox, sandboxCommand, workerMemoryBytes, type SandboxSpec } from '../src/runtime/sandbox.ts';
import type { RunnerKind } from '../src/runtime/contract.ts';
import { seccompProgram } from '../src/runtime/seccomp.ts';
import { Worker } from '../src/runtime/worker.ts';
import { createServices } from '../src/services.ts';
import { compile, publish, release, upload } from '../test/helpers/algorithms.ts';
import { api } from '../test/helpers/server.ts';
import {
  codeVersion,
  commandLine,
  createBench,
  DOC,
  docMarkers,
  fmt,
  interleaved,
  machineBase,
  mib,
  noiseMeter,
  pct,
  perRep,
  QUICK,
  runLines,
  sleep,
  table,
  verdict,
  WORK_ROOT,
  waitForQuiet,
  writeDocBlock,
  type Row,
} from './common.ts';
import { summarize, type ProfileSummary } from './cpuProfile.ts';
import { median, percentile, rawRequest, runLoad, timed } from './load.ts';
import { childrenOf, descendants, procMem, treeCpu, treeCpuAll, treeMem, type ProcMem } from './procTree.ts';
import { REPO, spawnServer, type ServerProc } from './procs.ts';
import { argOf, baseTree, numArg } from './baseTree.ts';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

const PROFILE = ['1', 'tracing', 'metrics', 'limits'].includes(process.env.BENCH_PROFILE ?? '');
/**
 * BENCH_PROFILE=tracing (metrics, limits): the default pool profiled with tracing off and
 * exported (without and with metrics, limits), rather than the two pools.
 */
const PROFILE_WHAT = process.env.BENCH_PROFILE === '1' ? undefined : process.env.BENCH_PROFILE;
const TRACING_ONLY = process.env.BENCH_ONLY === 'tracing';
const COSTS_ONLY = process.env.BENCH_ONLY === 'costs';
const CONNECTIONS = 64;
const RATE_REPS = QUICK ? 1 : 8;
const RATE_MS = QUICK ? 1000 : 1500;
const RATE_WARMUP_MS = QUICK ? 500 : 2000;
const LAT_REPS = QUICK ? 1 : 12;
const LAT_MS = QUICK ? 500 : 400;
const COLD_STARTS = QUICK ? 3 : 20;
const RSS_REPS = QUICK ? 1 : 3;
const COLD_CALLS = QUICK ? 2 : 7;
const IDLE_BEFORE_RSS_MS = 500;
const QUIET_MAX_MS = QUICK ? 0 : 30_000;
const PROFILE_MS = 5000;

const TARGET = { throughput: 0.5, p50: 1.5, coldNodeMs: 100, coldPythonMs: 60, tracingExported: 0.9, metricsOn: 0.97, limitsOn: 0.97 };

const bench = createBench('algo');
const { log, procs } = bench;
const WORK = bench.work;
const HOME = path.join(WORK, 'home');
const SECTION = '## Algorithm calls';
const { begin: BEGIN, end: END } = docMarkers('algo');

const OWNER = 'bench';
const ECHO_JS = 'export function apply(input) { return input; }\n';
const ECHO_PY = 'def apply(input):\n    return input\n';
const INPUT = Buffer.from('hello, algohost', 'utf8');
const NODE = '/usr/bin/node';
const PYTHON = '/usr/bin/python3';
const CALL_TIMEOUT_MS = 30_000;

// ---- setup ---------------------------------------------------------------------------------

interface Published {
  apiKey: string;
  call: ReturnType<typeof api>;
  /** Build directory and entry of the Node and Python echo versions (for the cold starts). */
  builds: Record<RunnerKind, { dir: string; entry: string }>;
}

async function createUser(): Promise<string> {
  const services = await createServices(loadConfig({ home: HOME, port: '0', host: '127.0.0.1', demo: false }, {}));
  try {
    return (await services.users.create(OWNER)).apiKey;
  } finally {
    await services.close();
  }
}

/** Where the server put a build: HOME/algorithms/<algorithm>/builds/<hash>. */
function buildDir(hash: string): string {
  const root = path.join(HOME, 'algorithms');
  for (const d of fs.readdirSync(root)) {
    const dir = path.join(root, d, 'builds', hash);
    if (fs.existsSync(dir)) return dir;
  }
  throw new Error(`no build directory for ${hash} under ${root}`);
}

async function publishEchoes(server: ServerProc, apiKey: string): Promise<Published> {
  const call = api(`http://127.0.0.1:${server.port}`, apiKey);
  const js = await release(call, OWNER, 'Echo', { 'src/Echo.js': ECHO_JS }, { settings: { language: 'javascript' } });
  const py = await release(call, OWNER, 'EchoPy', { 'src/EchoPy.py': ECHO_PY }, { settings: { language: 'python3' } });
  return {
    apiKey,
    call,
    builds: { node: { dir: buildDir(js.hash), entry: 'src/Echo.js' }, python: { dir: buildDir(py.hash), entry: 'src/EchoPy.py' } },
  };
}

// ---- warm calls ----------------------------------------------------------------------------

interface Target {
  label: string;
  proc: ServerProc;
  requests: Buffer[];
  /** Checks one answer's body. */
  check(body: Buffer): boolean;
}

function ourTarget(label: string, proc: ServerProc, apiKey: string, algo: string): Target {
  const headers = { Authorization: `Simple ${apiKey}`, 'Content-Type': 'text/plain' };
  return {
    label,
    proc,
    requests: [rawRequest(proc.port, 'POST', `/v1/algo/${OWNER}/${algo}`, headers, INPUT)],
    check: (body) => {
      const r = JSON.parse(body.toString('utf8')) as { result?: unknown };
      return r.result === INPUT.toString('utf8');
    },
  };
}

function floorTarget(label: string, proc: ServerProc, apiKey: string): Target {
  // The floor ignores path and headers; it gets the same request, byte for byte in size.
  const headers = { Authorization: `Simple ${apiKey}`, 'Content-Type': 'text/plain' };
  return { label, proc, requests: [rawRequest(proc.port, 'POST', `/v1/algo/${OWNER}/Echo`, headers, INPUT)], check: (body) => body.equals(INPUT) };
}

async function checkTarget(t: Target): Promise<void> {
  const head = t.requests[0]!.toString('latin1');
  const pathLine = head.slice(0, head.indexOf('\r\n')).split(' ')[1]!;
  const headers: Record<string, string> = {};
  for (const line of head.slice(head.indexOf('\r\n') + 2, head.indexOf('\r\n\r\n')).split('\r\n')) {
    const [k, v] = [line.slice(0, line.indexOf(':')), line.slice(line.indexOf(':') + 1).trim()];
    if (!/^(host|content-length)$/i.test(k)) headers[k] = v;
  }
  const r = await timed(t.proc.port, 'POST', pathLine, { headers, body: INPUT, keep: true });
  if (r.status !== 200 || !t.check(r.body!)) throw new Error(`${t.label}: the echo answered ${r.status}: ${r.body!.toString().slice(0, 300)}`);
}

interface Rate {
  rate: number;
  requests: number;
  /** CPU µs per request: the server process, and its descendants (workers or the floor's child). */
  serverUs: number;
  childUs: number;
}

async function rateRun(t: Target, ms: number): Promise<Rate> {
  const c0 = treeCpu(t.proc.pid);
  const r = await runLoad(t.proc.port, t.requests, CONNECTIONS, ms);
  const c1 = treeCpu(t.proc.pid);
  if (r.errors > 0) throw new Error(`${t.label}: ${r.errors} of ${r.completed} calls did not answer 200`);
  return { rate: r.rate, requests: r.completed, serverUs: ((c1.self - c0.self) * 1e6) / r.completed, childUs: ((c1.children - c0.children) * 1e6) / r.completed };
}

interface Latency {
  p50: number;
  p99: number;
  requests: number;
}

async function latencyRun(t: Target, ms: number): Promise<Latency> {
  const latencies: number[] = [];
  const r = await runLoad(t.proc.port, t.requests, 1, ms, { latencies });
  if (r.errors > 0) throw new Error(`${t.label}: ${r.errors} of ${r.completed} calls did not answer 200`);
  return { p50: percentile(latencies, 50), p99: percentile(latencies, 99), requests: latencies.length };
}

/** Sequential calls on one warm worker in this process: the worker round trip without HTTP. */
async function directRun(w: Worker, ms: number): Promise<Latency> {
  const latencies: number[] = [];
  const deadline = performance.now() + ms;
  while (performance.now() < deadline) {
    const t0 = performance.now();
    const o = await w.call('text', INPUT, CALL_TIMEOUT_MS);
    latencies.push(performance.now() - t0);
    if (o.kind !== 'result' || !o.body.equals(INPUT)) throw new Error(`direct worker call: ${o.kind}`);
  }
  return { p50: percentile(latencies, 50), p99: percentile(latencies, 99), requests: latencies.length };
}

/** The sandboxed interpreters under a server, by kind: "4 node, 1 python3". */
function workersOf(pid: number): string {
  const counts = new Map<string, number>();
  for (const p of descendants(pid)) {
    const m = procMem(p);
    if (m && m.comm !== 'bwrap' && m.comm !== 'bash' && m.comm !== 'prlimit') counts.set(m.comm, (counts.get(m.comm) ?? 0) + 1);
  }
  return [...counts].map(([comm, n]) => `${n} ${comm}`).join(', ') || 'none';
}

// ---- cold starts ---------------------------------------------------------------------------

function specFor(runner: RunnerKind, build: { dir: string; entry: string }, unsandboxed: boolean): SandboxSpec {
  return { runner, algoDir: build.dir, entry: build.entry, network: false, limits: DEFAULT_LIMITS, unsandboxed };
}

/** Time from spawn to exit of a bare command, checked for exit code 0. */
function runToExit(file: string, args: string[]): Promise<number> {
  const t0 = performance.now();
  return exitOf(spawn(file, args, { stdio: ['ignore', 'ignore', 'pipe'] }), `${file} ${args.join(' ')}`).then(() => performance.now() - t0);
}

function exitOf(child: ChildProcess, what: string): Promise<void> {
  return new Promise((resolve, reject) => {
    let stderr = '';
    child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    child.once('error', reject);
    child.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`${what} exited with ${code}: ${stderr.slice(0, 500)}`))));
  });
}

/**
 * `argv` in the worker's own sandbox, started the way spawnSandbox (src/runtime/sandbox.ts)
 * starts a worker: a cgroup of its own with the worker's limits (where the host has cgroups,
 * removed after the exit), the worker's command line from sandboxCommand(spec) with the runner
 * replaced by `argv`, the seccomp program fed to bwrap on fd 4 and its options on the next.
 * Timed from before the cgroup is made to the exit (the cgroup's removal is not waited for, as
 * in the server).
 */
async function runInSandbox(spec: SandboxSpec, argv: string[]): Promise<number> {
  const t0 = performance.now();
  const group = createWorkerCgroup(undefined, { memoryBytes: workerMemoryBytes(spec.limits), maxPids: spec.limits.maxPids });
  try {
    const { file, args, options, optionsFd } = sandboxCommand(spec, group?.procsFiles ?? []);
    const seccomp = spec.seccomp === false ? undefined : seccompProgram();
    const child = spawn(file, [...args.slice(0, args.lastIndexOf('--') + 1), ...argv], {
      stdio: ['ignore', 'ignore', 'pipe', 'pipe', ...(seccomp ? (['pipe'] as const) : []), 'pipe'],
      env: {},
      cwd: '/',
      detached: true,
    });
    const optionsPipe = child.stdio[optionsFd] as Writable;
    optionsPipe.on('error', () => undefined);
    optionsPipe.end(options);
    if (seccomp) {
      const pipe = child.stdio[4] as Writable;
      pipe.on('error', () => undefined);
      pipe.end(seccomp);
    }
    await exitOf(child, `sandboxed ${argv.join(' ')}`);
    return performance.now() - t0;
  } finally {
    void group?.remove();
  }
}

interface ColdWorker {
  /** Worker.start until its `ready` frame. */
  readyMs: number;
  /** Worker.start until the first call's answer. */
  totalMs: number;
}

async function coldWorker(spec: SandboxSpec): Promise<ColdWorker> {
  const t0 = performance.now();
  const w = await Worker.start(spec, { startTimeoutMs: CALL_TIMEOUT_MS });
  const readyMs = performance.now() - t0;
  const o = await w.call('text', INPUT, CALL_TIMEOUT_MS);
  const totalMs = performance.now() - t0;
  if (o.kind !== 'result' || !o.body.equals(INPUT)) throw new Error(`cold ${spec.runner} worker answered ${o.kind}${w.loadError ? `: ${w.loadError.message}` : ''}`);
  await w.stop();
  return { readyMs, totalMs };
}

type ColdKind = 'node' | 'python' | 'node-sandboxed' | 'python-sandboxed' | 'sandbox-true' | 'node-worker' | 'python-worker';

interface ColdResults {
  plain: Map<ColdKind, number[]>;
  workers: Record<RunnerKind, ColdWorker[]>;
}

async function coldStarts(builds: Published['builds'], unsandboxed: boolean): Promise<ColdResults> {
  const specs = { node: specFor('node', builds.node, unsandboxed), python: specFor('python', builds.python, unsandboxed) };
  const bareNode = [NODE, '-e', '0'];
  const barePython = [PYTHON, '-I', '-c', 'pass'];
  const workers: Record<RunnerKind, ColdWorker[]> = { node: [], python: [] };
  const kinds: ColdKind[] = ['node', 'python', 'node-worker', 'python-worker'];
  if (!unsandboxed) kinds.push('sandbox-true', 'node-sandboxed', 'python-sandboxed');
  const run = async (k: ColdKind): Promise<number> => {
    const sb = runInSandbox;
    switch (k) {
      case 'node':
        return runToExit(bareNode[0]!, bareNode.slice(1));
      case 'python':
        return runToExit(barePython[0]!, barePython.slice(1));
      case 'sandbox-true':
        return sb(specs.node, ['/usr/bin/true']);
      case 'node-sandboxed':
        return sb(specs.node, bareNode);
      case 'python-sandboxed':
        return sb(specs.python, barePython);
      case 'node-worker':
      case 'python-worker': {
        const runner: RunnerKind = k === 'node-worker' ? 'node' : 'python';
        const r = await coldWorker(specs[runner]);
        workers[runner].push(r);
        return r.totalMs;
      }
    }
  };
  // One untimed round: the page cache and the dynamic linker's caches warm for everyone.
  for (const k of kinds) await run(k);
  const plain = await interleaved(COLD_STARTS, kinds, (k) => run(k));
  return { plain, workers };
}

// ---- memory of idle workers ----------------------------------------------------------------

interface TreeMem {
  rss: number;
  pss: number;
  procs: ProcMem[];
}

const sumTree = (procs: ProcMem[]): TreeMem => ({ rss: procs.reduce((n, p) => n + p.rss, 0), pss: procs.reduce((n, p) => n + p.pss, 0), procs });

/** A warm worker after one call, idle for a moment: its whole process tree. */
async function idleWorkerMem(spec: SandboxSpec): Promise<TreeMem> {
  const before = new Set(childrenOf(process.pid));
  const w = await Worker.start(spec, { startTimeoutMs: CALL_TIMEOUT_MS });
  try {
    const o = await w.call('text', INPUT, CALL_TIMEOUT_MS);
    if (o.kind !== 'result') throw new Error(`${spec.runner} worker answered ${o.kind}`);
    await sleep(IDLE_BEFORE_RSS_MS);
    const roots = childrenOf(process.pid).filter((p) => !before.has(p));
    if (roots.length !== 1) throw new Error(`expected one new child process for the worker, found ${roots.length}`);
    return sumTree(treeMem(roots[0]!));
  } finally {
    await w.stop();
  }
}

/** The bare interpreter, idle (sleeping): the baseline for a worker's memory. */
async function idleBareMem(argv: string[]): Promise<TreeMem> {
  const child = spawn(argv[0]!, argv.slice(1), { stdio: 'ignore' });
  try {
    await sleep(IDLE_BEFORE_RSS_MS);
    const m = procMem(child.pid!);
    if (!m) throw new Error(`${argv[0]} is gone`);
    return sumTree([m]);
  } finally {
    child.kill('SIGKILL');
  }
}

interface MemResults {
  worker: Record<RunnerKind, TreeMem[]>;
  bare: Record<RunnerKind, TreeMem[]>;
}

async function memory(builds: Published['builds'], unsandboxed: boolean): Promise<MemResults> {
  const out: MemResults = { worker: { node: [], python: [] }, bare: { node: [], python: [] } };
  for (let i = 0; i < RSS_REPS; i++) {
    for (const runner of ['node', 'python'] as const) {
      out.worker[runner].push(await idleWorkerMem(specFor(runner, builds[runner], unsandboxed)));
    }
    out.bare.node.push(await idleBareMem([NODE, '-e', 'setInterval(() => {}, 1e9)']));
    out.bare.python.push(await idleBareMem([PYTHON, '-I', '-c', 'import time; time.sleep(1e9)']));
  }
  return out;
}

// ---- cold calls over HTTP ------------------------------------------------------------------

interface ColdCall {
  /** The first call of a freshly published version (no worker for it yet). */
  coldMs: number;
  /** The call right after it (warm worker), same kind of request (a new connection). */
  warmMs: number;
  /** Upload + compile + publish, for reference. */
  publishMs: number;
}

async function coldCalls(server: ServerProc, pub: Published): Promise<Record<RunnerKind, ColdCall[]>> {
  const out: Record<RunnerKind, ColdCall[]> = { node: [], python: [] };
  const headers = { authorization: `Simple ${pub.apiKey}`, 'content-type': 'text/plain' };
  const one = async (runner: RunnerKind, round: number): Promise<ColdCall> => {
    const name = runner === 'node' ? 'Echo' : 'EchoPy';
    const files: Record<string, string> = runner === 'node' ? { 'src/Echo.js': `${ECHO_JS}// round ${round}\n` } : { 'src/EchoPy.py': `${ECHO_PY}# round ${round}\n` };
    const t0 = performance.now();
    const up = await upload(pub.call, OWNER, name, files);
    if (up.status !== 200) throw new Error(`upload ${name}: ${up.status} ${await up.text()}`);
    await compile(pub.call, OWNER, name);
    await publish(pub.call, OWNER, name);
    const publishMs = performance.now() - t0;
    const path = `/v1/algo/${OWNER}/${name}`;
    const cold = await timed(server.port, 'POST', path, { headers, body: INPUT, keep: true });
    const warm = await timed(server.port, 'POST', path, { headers, body: INPUT, keep: true });
    for (const r of [cold, warm]) {
      const body = JSON.parse(r.body!.toString()) as { result?: unknown };
      if (r.status !== 200 || body.result !== INPUT.toString()) throw new Error(`${name}: the call after publishing answered ${r.status}: ${r.body!.toString().slice(0, 300)}`);
    }
    return { coldMs: cold.ms, warmMs: warm.ms, publishMs };
  };
  await interleaved(COLD_CALLS, ['node', 'python'] as RunnerKind[], async (runner, round) => {
    out[runner].push(await one(runner, round));
  });
  return out;
}

// ---- report --------------------------------------------------------------------------------

const resultsTable = (rows: Row[]) => table(rows, 'Baseline', 'Ours / baseline');

function machine(): string {
  let py = 'python3 unknown';
  let bwrap = 'bwrap unknown';
  try {
    py = execFileSync(PYTHON, ['--version'], { encoding: 'utf8' }).trim();
    bwrap = `bubblewrap ${execFileSync('/usr/bin/bwrap', ['--version'], { encoding: 'utf8' }).trim().split(/\s+/).pop()}`;
  } catch {
    // leave them unknown
  }
  const sysNode = (() => {
    try {
      return execFileSync(NODE, ['--version'], { encoding: 'utf8' }).trim();
    } catch {
      return 'unknown';
    }
  })();
  return `${machineBase()} (server), ${NODE} ${sysNode} (workers, floor child) · ${py} · ${bwrap}`;
}

// ---- profile mode --------------------------------------------------------------------------

async function profileMode(apiKey: string): Promise<void> {
  // Kept after the run (bench/.work/ is not in git): open them in Chrome's DevTools or speedscope.
  const prof = path.join(WORK_ROOT, 'profiles');
  fs.mkdirSync(prof, { recursive: true });
  const out: string[] = [];
  const sink = PROFILE_WHAT === 'tracing' ? await otlpSink() : undefined;
  const variants: [string, string[], string, Record<string, string>][] = sink
    ? [
        ['tracing off', [], 'traces-off', {}],
        ['tracing exported', [], 'traces-on', { BENCH_OTLP: sink.url }],
      ]
    : PROFILE_WHAT === 'metrics' || PROFILE_WHAT === 'limits'
    ? [
        [`${PROFILE_WHAT} off`, [], `${PROFILE_WHAT}-off`, {}],
        [`${PROFILE_WHAT} on`, [], `${PROFILE_WHAT}-on`, PROFILE_WHAT === 'metrics' ? { BENCH_METRICS: '1' } : { BENCH_LIMITS: '1' }],
      ]
    : [
        ['default pool (4 per version)', [], 'pool4', {}],
        ['maxPerVersion 1', ['--per-version', '1'], 'pool1', {}],
      ];
  for (const [label, extra, name, env] of variants) {
    const file = path.join(prof, name);
    const server = await spawnServer(`ours, ${label}, profiled`, { args: ['bench/algoServer.ts', HOME, ...extra, '--profile-to', file], env, logFile: path.join(WORK, 'profiled.log') });
    procs.push(server);
    const t = ourTarget(label, server, apiKey, 'Echo');
    await checkTarget(t);
    await runLoad(server.port, t.requests, CONNECTIONS, RATE_WARMUP_MS);
    for (const [what, conns, ms] of [
      [`${CONNECTIONS} connections`, CONNECTIONS, PROFILE_MS],
      ['1 connection', 1, PROFILE_MS / 2],
    ] as const) {
      const target = `${file}-${conns}.cpuprofile`;
      process.kill(server.pid, 'SIGUSR2');
      await sleep(200);
      const c0 = treeCpu(server.pid);
      const latencies: number[] = [];
      const r = await runLoad(server.port, t.requests, conns, ms, { latencies });
      const c1 = treeCpu(server.pid);
      process.kill(server.pid, 'SIGUSR2');
      for (let i = 0; i < 100 && !fs.existsSync(file); i++) await sleep(100);
      fs.renameSync(file, target);
      const s = summarize(target, REPO);
      const perCall = (ms: number) => `${fmt((ms * 1000) / r.completed, 1)} µs`;
      out.push(
        `### ${label}, ${what}: ${fmt(r.rate, 0)} calls/s, p50 ${fmt(percentile(latencies, 50), 3)} ms; ` +
          `server CPU ${fmt(((c1.self - c0.self) * 1e6) / r.completed, 0)} µs/call, workers ${fmt(((c1.children - c0.children) * 1e6) / r.completed, 0)} µs/call (from /proc)`,
        `profile: ${fmt(s.totalMs, 0)} ms sampled, idle ${fmt(s.idleMs, 0)} ms; per call, busy: ${perCall(s.totalMs - s.idleMs)}`,
        '',
        summaryTable('busy time by phase of the call', s.byPhase, perCall),
        '',
        summaryTable('self time by module', s.byModule, perCall),
        '',
        summaryTable('our functions, inclusive (synchronous callees)', s.ours, perCall),
        '',
        summaryTable('top functions, self time', s.topSelf, perCall),
        '',
      );
      log(`profiled ${label}, ${what} (${target})`);
    }
    await server.stop();
  }
  await sink?.close();
  process.stdout.write(out.join('\n') + '\n');
}

function summaryTable(title: string, rows: ProfileSummary['byModule'], perCall: (ms: number) => string): string {
  return [`| ${title} | ms | per call |`, '|---|---:|---:|', ...rows.map((r) => `| ${r.name.replace(/\|/g, '\\|')} | ${fmt(r.ms, 0)} | ${perCall(r.ms)} |`)].join('\n');
}

// ---- main ----------------------------------------------------------------------------------

// ---- tracing ------------------------------------------------------------------------------

/**
 * An OTLP/HTTP receiver standing in for a collector (docs/traces.md): takes POST /v1/traces
 * and counts the spans in each JSON body (their `"spanId"` fields), answering 200 at once.
 */
async function otlpSink(): Promise<{ url: string; spans(): number; requests(): number; close(): Promise<void> }> {
  let spans = 0;
  let requests = 0;
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8').on('data', (c: string) => (body += c));
    req.on('end', () => {
      requests++;
      for (let i = body.indexOf('"spanId"'); i >= 0; i = body.indexOf('"spanId"', i + 8)) spans++;
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, spans: () => spans, requests: () => requests, close: () => new Promise<void>((r) => server.close(() => r())) };
}

/** The tracing block's markers in docs/performance.md (its command is bench:algo's, with BENCH_ONLY=tracing). */
const TRACING = {
  begin: '<!-- bench:algo-tracing:begin (generated by `BENCH_ONLY=tracing npm run bench:algo`; edit outside these markers) -->',
  end: '<!-- bench:algo-tracing:end -->',
};

/** Servers of the same home compared in interleaved rounds (BENCH_ONLY=tracing, =costs): throughput at CONNECTIONS, then p50 at one connection. */
async function compareRounds(targets: Target[], rateRounds: number, beforeRates?: () => void) {
  for (const t of targets) await checkTarget(t);
  const idleAtStart = await waitForQuiet(QUIET_MAX_MS, log);
  const noiseSince = noiseMeter(() => treeCpuAll(process.pid));
  log(`warm-up: ${RATE_WARMUP_MS / 1000} s at ${CONNECTIONS} connections per server`);
  for (const t of targets) await runLoad(t.proc.port, t.requests, CONNECTIONS, RATE_WARMUP_MS);
  beforeRates?.();
  log(`throughput: ${CONNECTIONS} connections, ${rateRounds} x ${RATE_MS / 1000} s per server, interleaved`);
  const rates = await interleaved(rateRounds, targets, (t) => rateRun(t, RATE_MS));
  log(`latency: 1 connection, ${LAT_REPS} x ${LAT_MS / 1000} s per server, interleaved`);
  const lats = await interleaved(LAT_REPS, targets, (t) => latencyRun(t, LAT_MS));
  return { rates, lats, idleAtStart, noiseSince };
}

/** A comparison's block for docs/performance.md between `markers`, its per-round figures after the table; printed and written. */
function writeComparison(o: {
  markers: { begin: string; end: string };
  title: string;
  section: string;
  command: string;
  started: number;
  load0: number;
  idleAtStart: number;
  noise: ReturnType<ReturnType<typeof noiseMeter>>;
  extra: string[];
  rows: Row[];
  targets: Target[];
  rates: Map<Target, Rate[]>;
  lats: Map<Target, Latency[]>;
}): void {
  const seconds = (performance.now() - o.started) / 1000;
  const block = [
    o.markers.begin,
    '',
    o.title,
    '',
    ...runLines({ seconds, load0: o.load0, load1: os.loadavg()[0]!, idleAtStart: o.idleAtStart, noise: o.noise }),
    `- **Machine:** ${machine()}.`,
    `- **Code:** ${codeVersion()}.`,
    `- **Command:** \`${o.command}\`${QUICK ? ' with BENCH_QUICK=1 (shortened: not for quoting)' : ''}.`,
    ...o.extra,
    '',
    resultsTable(o.rows),
    '',
    'Every server is `bench/algoServer.ts` (default pool, pino silent) on one home, the same echo; paired ratios (within each round, then the median), rounds interleaved with the order rotated.',
    '',
    '```',
    ...o.targets.map((t) => perRep(`calls/s ${t.label}`, o.rates.get(t)!.map((x) => x.rate))),
    ...o.targets.map((t) => perRep(`p50 ms ${t.label}`, o.lats.get(t)!.map((x) => x.p50), 3)),
    ...o.targets.map((t) => perRep(`server CPU µs per call ${t.label}`, o.rates.get(t)!.map((x) => x.serverUs), 0)),
    '```',
    '',
    o.markers.end,
  ].join('\n');
  process.stdout.write('\n' + block + '\n');
  writeDocBlock(block, { begin: o.markers.begin, end: o.markers.end, initial: '# Performance\n', section: o.section });
  log(`wrote ${path.relative(REPO, DOC)} (${fmt(seconds, 0)} s)`);
}

/**
 * Several server processes per variant (BENCH_ONLY=costs, =tracing: `--procs`): two processes of
 * one code differ here by ~5 % (JIT decisions, memory placement, which CPU the scheduler
 * favours), more than the few % these comparisons measure, and that luck stays with a process
 * for its life. A variant's figure in a round is the mean of its processes', so one process's
 * luck counts for 1/PROCS of it.
 */
const PROCS = QUICK ? 1 : numArg('--procs', 3);

/** `n` servers of one variant, as targets labelled `label #i`. */
async function spawnGroup(apiKey: string, serverArgs: string[], what: string, label: string, env: Record<string, string>, n = PROCS): Promise<Target[]> {
  const members: Target[] = [];
  for (let i = 1; i <= n; i++) {
    const name = n === 1 ? what : `${what} #${i}`;
    const proc = await spawnServer(name, { args: serverArgs, env, logFile: path.join(WORK, `${name.replace(/\W+/g, '-')}.log`) });
    procs.push(proc);
    members.push(ourTarget(n === 1 ? label : `${label} #${i}`, proc, apiKey, 'Echo'));
  }
  return members;
}

/** Pools groups of servers measured in the same rounds: per round, the mean of the members' figures, as one target's. */
function pooler(procRates: Map<Target, Rate[]>, procLats: Map<Target, Latency[]>) {
  const mean = (xs: number[]) => xs.reduce((a, x) => a + x, 0) / xs.length;
  const rates = new Map<Target, Rate[]>();
  const lats = new Map<Target, Latency[]>();
  const pooled = (label: string, members: Target[]): Target => {
    const t: Target = { ...members[0]!, label };
    rates.set(
      t,
      procRates.get(members[0]!)!.map((_, i) => {
        const rs = members.map((x) => procRates.get(x)![i]!);
        return { rate: mean(rs.map((r) => r.rate)), requests: rs.reduce((a, r) => a + r.requests, 0), serverUs: mean(rs.map((r) => r.serverUs)), childUs: mean(rs.map((r) => r.childUs)) };
      }),
    );
    lats.set(
      t,
      procLats.get(members[0]!)!.map((_, i) => {
        const ls = members.map((x) => procLats.get(x)![i]!);
        return { p50: mean(ls.map((l) => l.p50)), p99: mean(ls.map((l) => l.p99)), requests: ls.reduce((a, l) => a + l.requests, 0) };
      }),
    );
    return t;
  };
  return { rates, lats, pooled };
}

/** BENCH_ONLY=tracing: tracing off vs exported (and another tree's server, with --rev/--base), short. */
async function tracingMode(apiKey: string, serverArgs: string[]): Promise<void> {
  const ROUNDS = QUICK ? 1 : numArg('--rounds', RATE_REPS);
  const started = performance.now();
  const load0 = os.loadavg()[0]!;
  const sink = await otlpSink();
  const withBase = argOf('--rev') !== undefined || argOf('--base') !== undefined;
  const base = withBase ? baseTree() : undefined;
  const offs = await spawnGroup(apiKey, serverArgs, 'tracing off', 'tracing off (default)', {});
  const ons = await spawnGroup(apiKey, serverArgs, 'tracing exported', 'tracing exported (OTLP/HTTP JSON to a sink in the bench process)', { BENCH_OTLP: sink.url });
  const tenths = await spawnGroup(apiKey, serverArgs, 'tracing exported, 1 in 10', 'tracing exported, one trace in ten (OTEL_TRACES_SAMPLER=parentbased_traceidratio, 0.1)', { BENCH_OTLP: sink.url, BENCH_OTLP_RATIO: '0.1' });
  const baseP = base ? await spawnServer('base', { args: [path.join(base, 'bench/algoServer.ts'), HOME], logFile: path.join(WORK, 'tracing-base.log') }) : undefined;
  if (baseP) procs.push(baseP);
  const bases = baseP ? [ourTarget(`before traces (${argOf('--rev') ?? argOf('--base')})`, baseP, apiKey, 'Echo')] : [];
  let spans0 = 0;
  const { rates: procRates, lats: procLats, idleAtStart, noiseSince } = await compareRounds([...offs, ...ons, ...tenths, ...bases], ROUNDS, () => (spans0 = sink.spans()));
  const { rates, lats, pooled } = pooler(procRates, procLats);
  const of = (members: Target[]) => pooled(members.length === 1 ? members[0]!.label : `${members[0]!.label.replace(/ #1$/, '')}, mean of ${members.length} servers`, members);
  const tOff = of(offs);
  const tOn = of(ons);
  const tTenth = of(tenths);
  const tBase = baseP ? of(bases) : undefined;
  const targets = [tOff, tOn, tTenth, ...(tBase ? [tBase] : [])];
  // The last batches (sent every 5 s by default).
  await sleep(6000);
  const exported = sink.spans() - spans0;
  const calls = rates.get(tOn)!.reduce((a, x) => a + x.requests, 0) + lats.get(tOn)!.reduce((a, x) => a + x.requests, 0);
  // (requests are summed over a variant's servers: the calls the servers keeping every trace took.)
  const noise = noiseSince();
  const m = median;
  const rateRatio = (a: Target, b: Target) => m(rates.get(a)!.map((x, i) => x.rate / rates.get(b)![i]!.rate));
  const p50Ratio = (a: Target, b: Target) => m(lats.get(a)!.map((x, i) => x.p50 / lats.get(b)![i]!.p50));
  const cpu = (t: Target) => m(rates.get(t)!.map((x) => x.serverUs));
  const rows: Row[] = [
    {
      measure: `Warm echo calls/s, ${CONNECTIONS} keep-alive connections (median of ${ROUNDS} × ${RATE_MS / 1000} s), default pool: tracing exported vs tracing off`,
      ours: fmt(m(rates.get(tOn)!.map((x) => x.rate)), 0),
      base: fmt(m(rates.get(tOff)!.map((x) => x.rate)), 0),
      ratio: pct(rateRatio(tOn, tOff), 1),
      target: '≥ 90 %',
      result: verdict(rateRatio(tOn, tOff) >= TARGET.tracingExported),
    },
    {
      measure: 'same, one trace in ten exported (parentbased_traceidratio 0.1) vs tracing off',
      ours: fmt(m(rates.get(tTenth)!.map((x) => x.rate)), 0),
      base: fmt(m(rates.get(tOff)!.map((x) => x.rate)), 0),
      ratio: pct(rateRatio(tTenth, tOff), 1),
      target: '≥ 90 %',
      result: verdict(rateRatio(tTenth, tOff) >= TARGET.tracingExported),
    },
    {
      measure: `Warm echo p50 latency at 1 connection, ms (median of ${LAT_REPS} × ${LAT_MS / 1000} s): tracing exported vs off`,
      ours: fmt(m(lats.get(tOn)!.map((x) => x.p50)), 3),
      base: fmt(m(lats.get(tOff)!.map((x) => x.p50)), 3),
      ratio: `${fmt(p50Ratio(tOn, tOff), 2)} ×`,
      target: '—',
      result: '—',
    },
    {
      measure: 'Server process CPU µs per call at 64 connections: tracing exported vs off',
      ours: fmt(cpu(tOn), 0),
      base: fmt(cpu(tOff), 0),
      ratio: `${fmt(cpu(tOn) / cpu(tOff), 2)} ×`,
      target: '—',
      result: '—',
    },
    {
      measure: 'same, one trace in ten exported vs off',
      ours: fmt(cpu(tTenth), 0),
      base: fmt(cpu(tOff), 0),
      ratio: `${fmt(cpu(tTenth) / cpu(tOff), 2)} ×`,
      target: '—',
      result: '—',
    },
    ...(tBase
      ? [
          {
            measure: `Warm echo calls/s, 64 connections: tracing off vs the tree before traces (${argOf('--rev') ?? argOf('--base')})`,
            ours: fmt(m(rates.get(tOff)!.map((x) => x.rate)), 0),
            base: fmt(m(rates.get(tBase)!.map((x) => x.rate)), 0),
            ratio: pct(rateRatio(tOff, tBase), 1),
            target: 'within noise',
            result: '—',
          },
          {
            measure: 'p50 latency at 1 connection: tracing off vs before traces',
            ours: fmt(m(lats.get(tOff)!.map((x) => x.p50)), 3),
            base: fmt(m(lats.get(tBase)!.map((x) => x.p50)), 3),
            ratio: `${fmt(p50Ratio(tOff, tBase), 2)} ×`,
            target: 'within noise',
            result: '—',
          },
          {
            measure: 'Server process CPU µs per call at 64 connections: tracing off vs before traces',
            ours: fmt(cpu(tOff), 0),
            base: fmt(cpu(tBase), 0),
            ratio: `${fmt(cpu(tOff) / cpu(tBase), 2)} ×`,
            target: '—',
            result: '—',
          },
        ]
      : []),
  ];
  await sink.close();
  writeComparison({
    markers: TRACING,
    title: '### Tracing (`BENCH_ONLY=tracing npm run bench:algo`) — latest run',
    section: '## Traces (issue 25)',
    command: `BENCH_ONLY=tracing npm run bench:algo${withBase || argOf('--rounds') ? ' --' : ''}${withBase ? ` ${argOf('--rev') ? `--rev ${argOf('--rev')}` : `--base ${argOf('--base')}`}` : ''}${argOf('--rounds') ? ` --rounds ${ROUNDS}` : ''}`,
    started,
    load0,
    idleAtStart,
    noise,
    extra: [
      `- **Servers:** ${PROCS} process${PROCS === 1 ? '' : 'es'} per variant${tBase ? ' (one of the other tree)' : ''}, all started before the first round; every round runs each server once, in an order rotated round to round, and a variant's figure in a round is the mean of its servers'. The per-round lines below are those means.`,
      `- **Spans received by the sink:** ${fmt(exported, 0)} from the servers exporting, for ${fmt(calls, 0)} timed calls of the ones keeping every trace (a warm call on one machine makes one span: the request's; a span is dropped when 2,048 already wait to be sent, OTEL_BSP_MAX_QUEUE_SIZE).`,
    ],
    rows,
    targets,
    rates,
    lats,
  });
}

/** The costs block's markers in docs/performance.md (BENCH_ONLY=costs). */
const COSTS = {
  begin: '<!-- bench:algo-costs:begin (generated by `BENCH_ONLY=costs npm run bench:algo`; edit outside these markers) -->',
  end: '<!-- bench:algo-costs:end -->',
};

/**
 * BENCH_ONLY=costs: what the warm path pays for Prometheus metrics (issue 25: ≤ 3 %) and for
 * call limits that never refuse (issue 24: ≤ 3 %), end to end, each against the same server
 * with neither, in the same interleaved rounds as the tracing comparison.
 */
async function costsMode(apiKey: string, serverArgs: string[]): Promise<void> {
  const started = performance.now();
  const load0 = os.loadavg()[0]!;
  // More rounds than the tracing comparison's: a 3 % difference in rounds whose rate varies by a third on a shared machine.
  const ROUNDS = QUICK ? 1 : numArg('--rounds', 16);
  const variants: { label: string; env: Record<string, string>; target: number | undefined; what: string }[] = [
    { label: 'neither (the default: no metrics address or token, no limits)', env: {}, target: undefined, what: 'neither' },
    // A second group of the same code: how far two groups of one configuration differ here (the noise floor).
    { label: 'neither again (A/A: the same code and settings)', env: {}, target: undefined, what: 'neither again (A/A)' },
    { label: 'metrics on (BENCH_METRICS=1: prom-client, as with ALGOHOST_METRICS_ADDR)', env: { BENCH_METRICS: '1' }, target: TARGET.metricsOn, what: 'metrics on' },
    { label: 'limits on (BENCH_LIMITS=1: a rate, a burst and a concurrency per user that never refuse)', env: { BENCH_LIMITS: '1' }, target: TARGET.limitsOn, what: 'limits on' },
  ];
  const groups: { v: (typeof variants)[number]; members: Target[] }[] = [];
  for (const v of variants) groups.push({ v, members: await spawnGroup(apiKey, serverArgs, `costs ${v.what}`, v.label, v.env) });
  const { rates: procRates, lats: procLats, idleAtStart, noiseSince } = await compareRounds(
    groups.flatMap((g) => g.members),
    ROUNDS,
  );
  const noise = noiseSince();
  // Each variant as one target: per round, the mean of its processes' figures.
  const { rates, lats, pooled } = pooler(procRates, procLats);
  const byVariant = new Map(groups.map(({ v, members }) => [v, pooled(PROCS === 1 ? v.label : `${v.label}, mean of ${PROCS} servers`, members)]));
  // The baseline of metrics and limits: both groups of neither, 2 × PROCS servers (the A/A row
  // compares the two groups, to show how far apart two groups of one code land).
  const tOff = pooled(`neither, both groups: mean of ${2 * PROCS} servers`, [...groups[0]!.members, ...groups[1]!.members]);
  const m = median;
  const rateRatio = (a: Target, b: Target) => m(rates.get(a)!.map((x, i) => x.rate / rates.get(b)![i]!.rate));
  const cpuRatio = (a: Target, b: Target) => m(rates.get(a)!.map((x, i) => x.serverUs / rates.get(b)![i]!.serverUs));
  const p50Ratio = (a: Target, b: Target) => m(lats.get(a)!.map((x, i) => x.p50 / lats.get(b)![i]!.p50));
  const rows: Row[] = variants.slice(1).flatMap((v, i) => {
    const t = byVariant.get(v)!;
    // The A/A group against the first group; the others against both.
    const [b, bWhat] = i === 0 ? [byVariant.get(variants[0]!)!, 'neither'] : [tOff, `neither (both groups, ${2 * PROCS} servers)`];
    return [
      {
        measure: `Warm echo calls/s, ${CONNECTIONS} keep-alive connections (median of ${ROUNDS} rounds × ${RATE_MS / 1000} s per server, ${PROCS} server${PROCS === 1 ? '' : 's'} per variant): ${v.what} vs ${bWhat}`,
        ours: fmt(m(rates.get(t)!.map((x) => x.rate)), 0),
        base: fmt(m(rates.get(b)!.map((x) => x.rate)), 0),
        ratio: pct(rateRatio(t, b), 1),
        target: v.target === undefined ? '— (the noise floor)' : `≥ ${fmt(v.target * 100, 0)} %`,
        result: v.target === undefined ? '—' : verdict(rateRatio(t, b) >= v.target),
      },
      {
        measure: `same, server process CPU µs per call (paired ratio)`,
        ours: fmt(m(rates.get(t)!.map((x) => x.serverUs)), 0),
        base: fmt(m(rates.get(b)!.map((x) => x.serverUs)), 0),
        ratio: `${fmt(cpuRatio(t, b), 3)} ×`,
        target: '—',
        result: '—',
      },
      {
        measure: `Warm echo p50 latency at 1 connection, ms (median of ${LAT_REPS} × ${LAT_MS / 1000} s per server): ${v.what} vs ${bWhat}`,
        ours: fmt(m(lats.get(t)!.map((x) => x.p50)), 3),
        base: fmt(m(lats.get(b)!.map((x) => x.p50)), 3),
        ratio: `${fmt(p50Ratio(t, b), 2)} ×`,
        target: '—',
        result: '—',
      },
    ];
  });
  const targets = variants.map((v) => byVariant.get(v)!);
  const args = [argOf('--rounds') ? `--rounds ${ROUNDS}` : '', argOf('--procs') ? `--procs ${PROCS}` : ''].filter(Boolean).join(' ');
  writeComparison({
    markers: COSTS,
    title: '### Metrics and limits on the warm path (`BENCH_ONLY=costs npm run bench:algo`) — latest run',
    section: '## Metrics (issue 25)',
    command: `BENCH_ONLY=costs npm run bench:algo${args ? ` -- ${args}` : ''}`,
    started,
    load0,
    idleAtStart,
    noise,
    extra: [
      `- **Servers:** ${PROCS} processes per variant, all started before the first round; every round runs each of the ${PROCS * variants.length} servers once, in an order rotated round to round, and a variant's figure in a round is the mean of its servers'. The per-round lines below are those means.`,
    ],
    rows,
    targets,
    rates,
    lats,
  });
}

async function main(): Promise<void> {
  const started = performance.now();
  const load0 = os.loadavg()[0]!;
  fs.mkdirSync(HOME, { recursive: true });
  const sandbox = probeSandbox();
  const unsandboxed = !sandbox.available;
  if (unsandboxed) log(`WARNING: bubblewrap does not work here (${sandbox.reason}); workers run unsandboxed and the figures are not the targets'`);

  const apiKey = await createUser();
  const serverArgs = ['bench/algoServer.ts', HOME];
  const ours4 = await spawnServer('ours (default pool)', { args: serverArgs, logFile: path.join(WORK, 'ours4.log') });
  procs.push(ours4);
  log('publishing the echo algorithms (JavaScript and Python)');
  const pub = await publishEchoes(ours4, apiKey);

  if (PROFILE) {
    await ours4.stop();
    await profileMode(apiKey);
    return;
  }
  if (TRACING_ONLY) {
    await ours4.stop();
    await tracingMode(apiKey, serverArgs);
    return;
  }
  if (COSTS_ONLY) {
    await ours4.stop();
    await costsMode(apiKey, serverArgs);
    return;
  }

  const ours1 = await spawnServer('ours (maxPerVersion 1)', { args: [...serverArgs, '--per-version', '1'], logFile: path.join(WORK, 'ours1.log') });
  procs.push(ours1);
  const floorP = await spawnServer('floor', { args: ['bench/floorServer.ts'], logFile: path.join(WORK, 'floor.log') });
  procs.push(floorP);
  const floorS = await spawnServer('floor (serial)', { args: ['bench/floorServer.ts', '--serial'], logFile: path.join(WORK, 'floor-serial.log') });
  procs.push(floorS);

  // The default pool again, with its spans exported to a sink in this process (docs/traces.md).
  const sink = await otlpSink();
  const oursT = await spawnServer('ours (tracing exported)', { args: serverArgs, env: { BENCH_OTLP: sink.url }, logFile: path.join(WORK, 'ours-traced.log') });
  procs.push(oursT);

  const floor = floorTarget('floor: bare node:http + one child over a pipe', floorP, apiKey);
  const floorSerial = floorTarget('floor, one request in the pipe at a time (--serial)', floorS, apiKey);
  const our4 = ourTarget('ours, default pool (up to 4 workers per version)', ours4, apiKey, 'Echo');
  const our1 = ourTarget('ours, maxPerVersion 1 (one worker)', ours1, apiKey, 'Echo');
  const ourPy = ourTarget('ours, Python echo, default pool', ours4, apiKey, 'EchoPy');
  const ourT = ourTarget('ours, default pool, tracing exported (OTLP/HTTP to a sink in the bench process)', oursT, apiKey, 'Echo');
  for (const t of [floor, floorSerial, our4, our1, ourPy, ourT]) await checkTarget(t);

  const idleAtStart = await waitForQuiet(QUIET_MAX_MS, log);
  // This process and everything under it: the servers, their workers, the floors' children, and
  // every process that ran and exited (cold starts, baselines, builds), through cutime/cstime.
  const noiseSince = noiseMeter(() => treeCpuAll(process.pid));

  const rateTargets = [floor, floorSerial, our4, our1, ourT];
  log(`warm-up: ${RATE_WARMUP_MS / 1000} s at ${CONNECTIONS} connections per server`);
  for (const t of rateTargets) await runLoad(t.proc.port, t.requests, CONNECTIONS, RATE_WARMUP_MS);
  const workers4 = workersOf(ours4.pid);
  log(`throughput: ${CONNECTIONS} connections, ${RATE_REPS} x ${RATE_MS / 1000} s per server, interleaved`);
  const rates = await interleaved(RATE_REPS, rateTargets, (t) => rateRun(t, RATE_MS));

  log(`server heap retained by warm calls: one untimed ${RATE_MS / 1000} s run at ${CONNECTIONS} connections per server, inside a memory window`);
  const retained = new Map<Target, { calls: number; bytes: number }>();
  for (const t of [floor, our4, our1]) {
    const { result, window } = await t.proc.measureMemory(() => runLoad(t.proc.port, t.requests, CONNECTIONS, RATE_MS));
    retained.set(t, { calls: result.completed, bytes: window.afterGc.heapUsed - window.start.heapUsed });
  }

  log(`latency: 1 connection, ${LAT_REPS} x ${LAT_MS / 1000} s per server, interleaved`);
  const direct = await Worker.start(specFor('node', pub.builds.node, unsandboxed), { startTimeoutMs: CALL_TIMEOUT_MS });
  const directTarget: Target = { label: 'direct', proc: ours4, requests: [], check: () => true };
  await directRun(direct, 300);
  const latTargets = [floor, our4, our1, ourPy, directTarget];
  const lats = await interleaved(LAT_REPS, latTargets, (t) => (t === directTarget ? directRun(direct, LAT_MS) : latencyRun(t, LAT_MS)));
  await direct.stop();

  log(`cold starts: ${COLD_STARTS} rounds of every kind, interleaved`);
  const cold = await coldStarts(pub.builds, unsandboxed);
  log(`memory of idle warm workers: ${RSS_REPS} of each`);
  const mem = await memory(pub.builds, unsandboxed);
  log(`cold calls over HTTP: ${COLD_CALLS} fresh versions of each language (server with maxPerVersion 1)`);
  const coldHttp = await coldCalls(ours1, pub);

  const noise = noiseSince();
  await sink.close();

  // ---- figures
  const m = median;
  const rate = (t: Target) => m(rates.get(t)!.map((x) => x.rate));
  const p50 = (t: Target) => m(lats.get(t)!.map((x) => x.p50));
  const p99 = (t: Target) => m(lats.get(t)!.map((x) => x.p99));
  // Ratios are paired: ours / baseline within each round (measured next to each other), then the median over the rounds.
  const rateRatio = (a: Target, b: Target) => m(rates.get(a)!.map((x, i) => x.rate / rates.get(b)![i]!.rate));
  const p50Ratio = (a: Target, b: Target) => m(lats.get(a)!.map((x, i) => x.p50 / lats.get(b)![i]!.p50));
  const coldP50 = (k: ColdKind) => m(cold.plain.get(k) ?? []);
  const workerReady = (r: RunnerKind) => m(cold.workers[r].map((x) => x.readyMs));
  const coldCall = (r: RunnerKind) => m(coldHttp[r].map((x) => x.coldMs));
  const warmCall = (r: RunnerKind) => m(coldHttp[r].map((x) => x.warmMs));
  const memMed = (xs: TreeMem[], f: (t: TreeMem) => number) => m(xs.map(f));

  // Throughput rows: judged against the serial floor (one call at a time, as a worker), the pipelined one for reference.
  const rateRow = (measure: string, ours: Target, base: Target, judged: boolean): Row => ({
    measure,
    ours: fmt(rate(ours), 0),
    base: fmt(rate(base), 0),
    ratio: pct(rateRatio(ours, base), 1),
    target: judged ? '≥ 50 %' : '—',
    result: judged ? verdict(rateRatio(ours, base) >= TARGET.throughput) : '—',
  });

  const rows: Row[] = [
    rateRow(
      `Warm echo calls/s, ${CONNECTIONS} keep-alive connections (median of ${RATE_REPS} × ${RATE_MS / 1000} s): default pool (up to 4 workers per version; after the warm-up: ${workers4}) vs the floor, one request in its child's pipe at a time (one call at a time, as a worker)`,
      our4,
      floorSerial,
      true,
    ),
    rateRow('same, maxPerVersion 1 (one worker, like the floor\'s one child)', our1, floorSerial, true),
    {
      measure: 'same, default pool with tracing exported (OTEL_EXPORTER_OTLP_ENDPOINT: spans over OTLP/HTTP to a sink in the bench process) vs tracing off (the default pool above)',
      ours: fmt(rate(ourT), 0),
      base: fmt(rate(our4), 0),
      ratio: pct(rateRatio(ourT, our4), 1),
      target: '≥ 90 %',
      result: verdict(rateRatio(ourT, our4) >= TARGET.tracingExported),
    },
    rateRow('same, default pool vs the pipelined floor (the frames of concurrent requests queued in its pipe, answered in batches; reference, see the analysis)', our4, floor, false),
    rateRow('same, maxPerVersion 1 vs the pipelined floor (reference)', our1, floor, false),
    {
      measure: `Warm echo p50 latency at 1 connection, ms (median of ${LAT_REPS} × ${LAT_MS / 1000} s): default pool vs the floor`,
      ours: fmt(p50(our4), 3),
      base: fmt(p50(floor), 3),
      ratio: `${fmt(p50Ratio(our4, floor), 2)} ×`,
      target: '≤ 1.5 ×',
      result: verdict(p50Ratio(our4, floor) <= TARGET.p50),
    },
    {
      measure: 'same, maxPerVersion 1',
      ours: fmt(p50(our1), 3),
      base: fmt(p50(floor), 3),
      ratio: `${fmt(p50Ratio(our1, floor), 2)} ×`,
      target: '≤ 1.5 ×',
      result: verdict(p50Ratio(our1, floor) <= TARGET.p50),
    },
    {
      measure: 'same, Python echo (default pool; reference)',
      ours: fmt(p50(ourPy), 3),
      base: fmt(p50(floor), 3),
      ratio: `${fmt(p50Ratio(ourPy, floor), 2)} ×`,
      target: '—',
      result: '—',
    },
    {
      measure: `Cold start, Node: Worker.start to the first call's answer, p50 ms (${COLD_STARTS} starts) vs \`${NODE} -e 0\``,
      ours: fmt(coldP50('node-worker'), 1),
      base: fmt(coldP50('node'), 1),
      ratio: `${fmt(coldP50('node-worker') / coldP50('node'), 2)} ×`,
      target: '≤ 100 ms',
      result: verdict(coldP50('node-worker') <= TARGET.coldNodeMs),
    },
    {
      measure: `Cold start, Python: same, vs \`${PYTHON} -I -c pass\``,
      ours: fmt(coldP50('python-worker'), 1),
      base: fmt(coldP50('python'), 1),
      ratio: `${fmt(coldP50('python-worker') / coldP50('python'), 2)} ×`,
      target: '≤ 60 ms',
      result: verdict(coldP50('python-worker') <= TARGET.coldPythonMs),
    },
    {
      measure: `Cold call over HTTP, Node: first call of a freshly published version, p50 ms (${COLD_CALLS} versions) vs the warm call right after it`,
      ours: fmt(coldCall('node'), 1),
      base: fmt(warmCall('node'), 1),
      ratio: `${fmt(coldCall('node') / warmCall('node'), 1)} ×`,
      target: '≤ 100 ms',
      result: verdict(coldCall('node') <= TARGET.coldNodeMs),
    },
    {
      measure: 'Cold call over HTTP, Python: same',
      ours: fmt(coldCall('python'), 1),
      base: fmt(warmCall('python'), 1),
      ratio: `${fmt(coldCall('python') / warmCall('python'), 1)} ×`,
      target: '≤ 60 ms',
      result: verdict(coldCall('python') <= TARGET.coldPythonMs),
    },
    ...[our4, our1].map((t) => {
      const kib = (u: Target) => retained.get(u)!.bytes / 1024 / (retained.get(u)!.calls / 1000);
      return {
        measure: `Server heap retained after a forced GC, KiB per 1,000 warm calls (one untimed ${RATE_MS / 1000} s run at ${CONNECTIONS} connections, ${fmt(retained.get(t)!.calls, 0)} calls): ${t === our4 ? 'default pool' : 'maxPerVersion 1'} vs the floor`,
        ours: fmt(kib(t), 1),
        base: fmt(kib(floor), 1),
        ratio: '—',
        target: 'flat (no target in DESIGN.md)',
        result: kib(t) > 100 ? '**grows with the calls**' : 'flat',
      };
    }),
    ...(['node', 'python'] as const).map((r) => ({
      measure: `Idle warm ${r === 'node' ? 'Node' : 'Python'} worker, RSS of its process tree, MiB (median of ${RSS_REPS}) vs the bare interpreter idle`,
      ours: mib(memMed(mem.worker[r], (t) => t.rss)),
      base: mib(memMed(mem.bare[r], (t) => t.rss)),
      ratio: `${fmt(memMed(mem.worker[r], (t) => t.rss) / memMed(mem.bare[r], (t) => t.rss), 2)} ×`,
      target: '—',
      result: '—',
    })),
    ...(['node', 'python'] as const).map((r) => ({
      measure: `same, ${r === 'node' ? 'Node' : 'Python'}, PSS (shared pages divided among their users)`,
      ours: mib(memMed(mem.worker[r], (t) => t.pss)),
      base: mib(memMed(mem.bare[r], (t) => t.pss)),
      ratio: `${fmt(memMed(mem.worker[r], (t) => t.pss) / memMed(mem.bare[r], (t) => t.pss), 2)} ×`,
      target: '—',
      result: '—',
    })),
  ];

  const cpuRows = [
    '| Server | Calls/s | Server process, CPU µs per call | Its children (workers / the floor\'s child), CPU µs per call | Total |',
    '|---|---:|---:|---:|---:|',
    ...rateTargets.map((t) => {
      const s = m(rates.get(t)!.map((x) => x.serverUs));
      const c = m(rates.get(t)!.map((x) => x.childUs));
      return `| ${t.label} | ${fmt(rate(t), 0)} | ${fmt(s, 0)} | ${fmt(c, 0)} | ${fmt(s + c, 0)} |`;
    }),
  ];

  const latRows = [
    '| Path | p50 ms | p99 ms | Calls per round |',
    '|---|---:|---:|---:|',
    ...latTargets.map(
      (t) =>
        `| ${t === directTarget ? 'Worker.call on a warm Node worker in the benchmark process (no HTTP, no server): the worker round trip' : t.label} | ${fmt(p50(t), 3)} | ${fmt(p99(t), 3)} | ${fmt(m(lats.get(t)!.map((x) => x.requests)), 0)} |`,
    ),
  ];

  const coldKinds: [ColdKind, string][] = [
    ['node', `\`${NODE} -e 0\`, to exit`],
    ['python', `\`${PYTHON} -I -c pass\`, to exit`],
    ['sandbox-true', 'the worker\'s sandbox (its cgroup, bash, prlimit, bwrap with the seccomp filter) running `/usr/bin/true`, to exit'],
    ['node-sandboxed', `the same sandbox running \`${NODE} -e 0\``],
    ['python-sandboxed', `the same sandbox (with Python's address-space limit) running \`${PYTHON} -I -c pass\``],
    ['node-worker', 'Node worker: Worker.start to the first call\'s answer'],
    ['python-worker', 'Python worker: same'],
  ];
  const coldRows = [
    '| Start | p50 ms | p90 ms | min ms |',
    '|---|---:|---:|---:|',
    ...coldKinds
      .filter(([k]) => cold.plain.has(k))
      .map(([k, what]) => {
        const xs = cold.plain.get(k)!;
        return `| ${what} | ${fmt(percentile(xs, 50), 1)} | ${fmt(percentile(xs, 90), 1)} | ${fmt(Math.min(...xs), 1)} |`;
      }),
    ...(['node', 'python'] as const).map((r) => `| ${r === 'node' ? 'Node' : 'Python'} worker: Worker.start to its \`ready\` frame (part of the above) | ${fmt(workerReady(r), 1)} | ${fmt(percentile(cold.workers[r].map((x) => x.readyMs), 90), 1)} | ${fmt(Math.min(...cold.workers[r].map((x) => x.readyMs)), 1)} |`),
  ];

  const memRows = [
    '| Process (first sample) | RSS MiB | PSS MiB |',
    '|---|---:|---:|',
    ...(['node', 'python'] as const).flatMap((r) =>
      mem.worker[r][0]!.procs.map((p) => `| ${r} worker: ${p.comm} (pid ${p.pid}, parent ${p.ppid}) | ${mib(p.rss)} | ${mib(p.pss)} |`),
    ),
  ];

  const seconds = (performance.now() - started) / 1000;
  const load1 = os.loadavg()[0]!;
  const block = [
    BEGIN,
    '',
    '### Algorithm-call benchmark — latest run',
    '',
    ...runLines({ seconds, load0, load1, idleAtStart, noise }),
    `- **Machine:** ${machine()}.`,
    `- **Sandbox:** ${unsandboxed ? `NONE: ${sandbox.reason} (the figures do not judge the targets)` : 'bubblewrap, as in production (every worker and every sandboxed baseline)'}.`,
    `- **Code:** ${codeVersion()}.`,
    commandLine('algo', ' (`unset NODE_EXTRA_CA_CERTS` first, where it is set)'),
    '',
    resultsTable(rows),
    '',
    'Values are medians over the rounds; the throughput and latency ratios are paired: ours ÷ baseline within each round (the two measured one after the other), then the median over the rounds, ' +
      'which is steadier on this shared VM than the ratio of the medians.',
    '',
    'CPU time per call during the throughput runs (user + system from /proc/PID/stat of the server process and of its live descendants; medians of the same repetitions):',
    '',
    cpuRows.join('\n'),
    '',
    'Latency at 1 connection, every path measured (medians over the rounds of each round\'s p50 and p99):',
    '',
    latRows.join('\n'),
    '',
    `Cold starts, ${COLD_STARTS} of each kind, interleaved (after one untimed round of each):`,
    '',
    coldRows.join('\n'),
    '',
    'The processes of an idle warm worker (the first sample; the outer bwrap is what our spawn started: bash and prlimit exec into it):',
    '',
    memRows.join('\n'),
    '',
    '<details><summary>Every repetition</summary>',
    '',
    '```',
    ...rateTargets.map((t) => perRep(`calls/s ${t.label}`, rates.get(t)!.map((x) => x.rate))),
    ...latTargets.map((t) => perRep(`p50 ms ${t === directTarget ? 'direct Worker.call' : t.label}`, lats.get(t)!.map((x) => x.p50), 3)),
    ...[our4, our1].map((t) => perRep(`calls/s ratio to the serial floor, per round, ${t.label}`, rates.get(t)!.map((x, i) => (100 * x.rate) / rates.get(floorSerial)![i]!.rate), 1)),
    ...[our4, our1].map((t) => perRep(`calls/s ratio to the pipelined floor, per round, ${t.label}`, rates.get(t)!.map((x, i) => (100 * x.rate) / rates.get(floor)![i]!.rate), 1)),
    ...[our4, our1].map((t) => perRep(`p50 ratio to the floor, per round, ${t.label}`, lats.get(t)!.map((x, i) => x.p50 / lats.get(floor)![i]!.p50), 2)),
    ...coldKinds.filter(([k]) => cold.plain.has(k)).map(([k]) => perRep(`cold ms ${k}`, cold.plain.get(k)!, 1)),
    ...(['node', 'python'] as const).map((r) => perRep(`cold call over HTTP ms ${r}`, coldHttp[r].map((x) => x.coldMs), 1)),
    ...(['node', 'python'] as const).map((r) => perRep(`warm call after it ms ${r}`, coldHttp[r].map((x) => x.warmMs), 1)),
    ...[floor, our4, our1].map((t) => `heap retained ${t.label}: ${fmt(retained.get(t)!.bytes / 1024, 0)} KiB after ${fmt(retained.get(t)!.calls, 0)} calls`),
    ...(['node', 'python'] as const).map((r) => perRep(`upload + compile + publish ms ${r}`, coldHttp[r].map((x) => x.publishMs), 0)),
    ...(['node', 'python'] as const).map((r) => perRep(`idle worker tree RSS MiB ${r}`, mem.worker[r].map((x) => x.rss / 2 ** 20), 1)),
    ...(['node', 'python'] as const).map((r) => perRep(`bare interpreter RSS MiB ${r}`, mem.bare[r].map((x) => x.rss / 2 ** 20), 1)),
    '```',
    '',
    '</details>',
    '',
    '#### Method',
    '',
    '- Four servers run as child processes, started the same way (`node --expose-gc --import ./bin/loader.mjs --import bench/memProbe.ts …`, as in the data benchmark): ' +
      'ours twice on one home (`bench/algoServer.ts`: `createServices` + `buildApp` from src/, pino at level silent, sandboxed workers), once with the default pool ' +
      '(`DEFAULT_POOL`: up to 4 workers per version, 16 in all, idle 5 min) and once with `runtime: { pool: { ...DEFAULT_POOL, maxPerVersion: 1 } }`; ' +
      'and the floor `bench/floorServer.ts` twice: plain `node:http` forwarding each request body as a length-prefixed frame to one warm child, ' +
      `\`${NODE} bench/floorChild.mjs\`, over its stdin and answering with what comes back on its stdout (200, text/plain). The floor writes each frame as soon as its body ` +
      'is in (frames of concurrent requests follow each other in the pipe, answers come back in order); `--serial` keeps one frame in the pipe at a time, as our workers take one call at a time: ' +
      'the throughput target is judged against it, the pipelined one is reported (see "Algorithm calls — analysis", point 1). At 1 connection the two are the same; latency is measured against the pipelined one.',
    '- A fifth server, ours with the default pool and `BENCH_OTLP` (tracing exported: `OTEL_EXPORTER_OTLP_ENDPOINT` pointed at an OTLP/HTTP sink in this process that counts the spans and answers 200), takes part in the throughput rounds only: the cost of exporting, judged against the default pool with tracing off (docs/traces.md).',
    `- The algorithm: \`${ECHO_JS.trim()}\` (JavaScript, \`src/Echo.js\`), created, uploaded as tar.gz, compiled and published over HTTP as the tests do; ` +
      `the input \`${INPUT.toString()}\` (${INPUT.length} bytes, text/plain) with an API key; ours answers the JSON envelope, the floor the bytes. Every answer must be 200 (and one of each is checked in full).`,
    `- **Throughput:** ${CONNECTIONS} keep-alive connections, one call in flight per connection, by the raw-socket client of bench/load.ts (this process), ` +
      `${RATE_WARMUP_MS / 1000} s warm-up per server, then ${RATE_REPS} × ${RATE_MS / 1000} s per server, interleaved with the order rotated every round. ` +
      `**Latency:** the same client on 1 connection, ${LAT_REPS} × ${LAT_MS / 1000} s per server, interleaved, latency from writing a request to the end of its response; ` +
      'the direct `Worker.call` row calls a warm worker started in this process in a loop (no HTTP).',
    `- **Cold starts:** in this process, with the echo builds the server made: \`Worker.start(spec)\` (src/runtime/worker.ts; sandboxed by bubblewrap, DEFAULT_LIMITS), ` +
      'then one call, timed until its answer; the worker is then stopped. The baselines are spawned with `child_process.spawn` and timed until they exit; the sandboxed ones are started ' +
      'as spawnSandbox starts a worker (a cgroup of its own where the host has them, the worker\'s command line from `sandboxCommand(spec)` with the runner replaced, the seccomp program on fd 4). ' +
      `${COLD_STARTS} rounds, each kind once per round, order rotated, after one untimed round.`,
    `- **Memory:** a worker started in this process, one call, then ${IDLE_BEFORE_RSS_MS} ms idle; its process tree is found through the ppid field of /proc/*/stat ` +
      'starting from the one new child of this process; VmRSS from /proc/PID/status and Pss from /proc/PID/smaps_rollup, summed over the tree. The baseline is the bare interpreter sleeping ' +
      `(\`${NODE} -e "setInterval(() => {}, 1e9)"\`, \`${PYTHON} -I -c "import time; time.sleep(1e9)"\`), measured the same way. RSS counts shared pages (libraries, the node binary) in every process; PSS divides them.`,
    `- **Heap retained:** \`bench/memProbe.ts\` (preloaded into every server) forces a GC, the load runs ${RATE_MS / 1000} s at ${CONNECTIONS} connections (untimed, outside the timed rounds), ` +
      'the probe forces a GC again: the heapUsed difference is what the calls left behind that a GC cannot free.',
    `- **Cold calls over HTTP:** against the server with maxPerVersion 1 (the default pool otherwise; it keeps each new version's worker, and ${COLD_CALLS} × 2 of them stay below the 16 workers allowed, so no eviction runs inside a timed call), ${COLD_CALLS} rounds: upload a changed source (a comment naming the round, so a new build hash and no worker for it), ` +
      'compile, publish (untimed), then one call timed from the request to the end of the response (node:http, a new connection), then the same call again (warm worker) as the baseline.',
    '',
    END,
  ].join('\n');

  process.stdout.write('\n' + resultsTable(rows) + '\n\n' + cpuRows.join('\n') + '\n\n' + latRows.join('\n') + '\n\n' + coldRows.join('\n') + '\n\n' + memRows.join('\n') + '\n\n');
  writeDocBlock(block, { begin: BEGIN, end: END, initial: '# Performance\n', section: SECTION });
  log(`wrote ${path.relative(REPO, DOC)} (${fmt(seconds, 0)} s)`);
}

await bench.run(main);
