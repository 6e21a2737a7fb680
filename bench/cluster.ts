/**
 * Cluster benchmark (`npm run bench:cluster`): the targets of issue 14, each against a baseline
 * measured in the same run, on real processes over loopback: Debian's nats-server with
 * JetStream, a throwaway PostgreSQL, s3rver, an API node (`serve --role api`), worker nodes
 * (`algohost worker`), and, as the baseline for the hop, an all-in-one `algohost serve` on the
 * same PostgreSQL and S3.
 *
 *   1. capacity: calls/s of an algorithm that holds its slot for 20 ms (a sleep), at a
 *      saturating load (32 connections), with 2 worker nodes over 1      >= 1.8 x
 *   2. the hop: warm echo p50 at 1 connection through API node -> NATS -> worker, minus the
 *      same call to the all-in-one server                                 <= 0.5 ms
 *   3. async: 10,000 `output=void` calls accepted, then drained: 0 lost (every request has its
 *      answer), 0 duplicated (each answer is its own input's; attempts add up to 10,000)
 *
 * Phases 1 and 2 alternate their sides over several rounds (medians reported, ratios paired
 * per round). The results go to stdout and to docs/performance.md between the bench:cluster
 * markers. BENCH_QUICK=1 shortens every phase (for checking the script, not for numbers).
 * BENCH_PHASES=capacity,hop,async runs only those phases (and writes nothing to the docs).
 */
import crypto from 'node:crypto';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { release } from '../test/helpers/algorithms.ts';
import { natsUnavailable, startNats } from '../test/helpers/nats.ts';
import { createDatabase, pgQuery, postgresAvailable, startPostgres } from '../test/helpers/postgres.ts';
import { BIN, childEnv, NODE, runCli, startServerProcess, within, type ServerProcess } from '../test/helpers/process.ts';
import { S3RVER_KEY, startS3 } from '../test/helpers/s3.ts';
import { api } from '../test/helpers/server.ts';
import { connect, type ConnectionOptions } from '@nats-io/transport-node';
import { natsOptions } from '../src/cluster/nats.ts';
import { median, percentile, rawRequest, runLoad, timed } from './load.ts';
import { codeVersion, commandLine, createBench, docMarkers, fmt, machineBase, noiseMeter, pct, perRep, QUICK, runLines, sleep, table, verdict, waitForQuiet, writeDocBlock, type Row } from './common.ts';
import { processCpuNs, treeCpuAll } from './procTree.ts';

const bench = createBench('cluster');
const ROUNDS = QUICK ? 1 : 3;
const BUS = process.env.BENCH_BUS === 'plain' ? 'plain' : 'secure';
const HOP_ROUNDS = QUICK ? 1 : 5;
const CAPACITY_MS = QUICK ? 1500 : 6000;
const LATENCY_MS = QUICK ? 1000 : 4000;
const ASYNC_CALLS = QUICK ? 500 : 10_000;
const CONNECTIONS = 32;
const PHASES = new Set((process.env.BENCH_PHASES ?? 'capacity,hop,async').split(','));
const ALL = ['capacity', 'hop', 'async'].every((p) => PHASES.has(p));

interface WorkerProc {
  child: ChildProcess;
  stop(): Promise<void>;
}

async function startWorker(env: Record<string, string>, home: string): Promise<WorkerProc> {
  const child = spawn(NODE, [BIN, 'worker', '--home', home], { env: childEnv(env), stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  await within(
    new Promise<void>((resolve, reject) => {
      child.stderr!.setEncoding('utf8').on('data', (s: string) => {
        err += s;
        if (err.includes('algohost worker is ready')) resolve();
      });
      void exited.then(() => reject(new Error(`the worker exited before it was ready:\n${err}`)));
    }),
    30_000,
    'the worker did not start',
  );
  return {
    child,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await within(exited, 60_000, 'the worker did not stop');
    },
  };
}

/** What was started, stopped in reverse order whatever happens. */
const stops: (() => Promise<void>)[] = [];

await bench.run(async () => {
  try {
    await main();
  } finally {
    for (const stop of stops.reverse()) await stop().catch((err: unknown) => bench.log(`stopping: ${(err as Error).message}`));
  }
});

async function main(): Promise<void> {
  const missing = natsUnavailable() ?? postgresAvailable();
  if (missing) throw new Error(missing);
  const t0 = performance.now();
  const load0 = os.loadavg()[0]!;
  fs.mkdirSync(bench.work, { recursive: true });
  const homes: string[] = [];
  const home = () => {
    const h = fs.mkdtempSync(path.join(bench.work, 'home-'));
    homes.push(h);
    return h;
  };

  bench.log('starting PostgreSQL, s3rver and nats-server');
  // The bus as docs/cluster.md says to run it: TLS, a user per role, every message sealed
  // (BENCH_BUS=plain: no TLS and no users, the seal alone, to tell their costs apart).
  const [pg, s3, nats] = await Promise.all([startPostgres(), startS3(['bench']), startNats({ secure: BUS === 'secure' })]);
  stops.push(async () => pg.stop(), () => s3.stop(), () => nats.stop());
  const env = {
    ALGOHOST_DATABASE_URL: await createDatabase(pg.adminUrl, 'cluster'),
    ALGOHOST_BLOBS: `s3://bench/c?endpoint=${encodeURIComponent(s3.endpoint)}&force_path_style=true`,
    AWS_ACCESS_KEY_ID: S3RVER_KEY.access_key_id,
    AWS_SECRET_ACCESS_KEY: S3RVER_KEY.secret_access_key,
    ALGOHOST_NATS_URL: nats.urlFor('api'),
    ...(nats.ca ? { ALGOHOST_NATS_CA: nats.ca } : {}),
    ALGOHOST_CLUSTER_SECRET: crypto.randomBytes(32).toString('hex'),
    ALGOHOST_LOG_LEVEL: 'error',
  };
  /** Each worker node a name and a NATS user of its own. */
  const workerEnv = () => ({ ...env, ...nats.nextWorker() });
  const servers: ServerProcess[] = [];
  stops.push(async () => void (await Promise.all(servers.map((s) => s.kill()))));
  const apiNode = await startServerProcess({ home: home(), env, args: ['--role', 'api'], timeoutMs: 60_000 });
  servers.push(apiNode);
  const single = await startServerProcess({ home: home(), env, timeoutMs: 60_000 });
  servers.push(single);
  const workers: WorkerProc[] = [];
  stops.push(async () => void (await Promise.all(workers.map((w) => w.stop()))));
  workers.push(await startWorker(workerEnv(), home()));
  const created = await runCli(['user', 'create', 'bench'], home(), 30_000, env);
  if (created.code !== 0) throw new Error(created.stderr);
  const key = (JSON.parse(created.stdout) as { api_key: string }).api_key;
  const viaApi = api(apiNode.url, key);
  const js = { language: 'javascript' };
  await release(viaApi, 'bench', 'Sleep', { 'src/index.js': 'export async function apply(input) { await new Promise((r) => setTimeout(r, 20)); return input; }\n' }, { settings: js });
  await release(viaApi, 'bench', 'Echo', { 'src/index.js': 'export function apply(input) { return input; }\n' }, { settings: js });

  const port = (url: string) => Number(new URL(url).port);
  const auth = { Authorization: `Simple ${key}`, 'Content-Type': 'text/plain' };
  const sleepReq = [rawRequest(port(apiNode.url), 'POST', '/v1/algo/bench/Sleep', auth, Buffer.from('x'))];
  const echoReq = (url: string) => [rawRequest(port(url), 'POST', '/v1/algo/bench/Echo', auth, Buffer.from('x'))];

  const idleAtStart = await waitForQuiet(30_000, bench.log);
  const pids = () => [process.pid, ...servers.map((s) => s.pid), ...workers.map((w) => w.child.pid!), nats.pid];
  const noise = noiseMeter(() => pids().reduce((n, p) => n + treeCpuAll(p), 0));

  // 1. Capacity with one worker node, then two, alternating.
  const capacity = { one: [] as number[], two: [] as number[] };
  const warm = async () => void (await runLoad(port(apiNode.url), sleepReq, CONNECTIONS, 1000));
  for (let round = 0; round < (PHASES.has('capacity') ? ROUNDS : 0); round++) {
    for (const side of round % 2 === 0 ? (['one', 'two'] as const) : (['two', 'one'] as const)) {
      const want = side === 'one' ? 1 : 2;
      while (workers.length > want) await workers.pop()!.stop();
      while (workers.length < want) workers.push(await startWorker(workerEnv(), home()));
      await sleep(1500); // a beat or two: the API node hears of the change
      await warm();
      const r = await runLoad(port(apiNode.url), sleepReq, CONNECTIONS, CAPACITY_MS);
      if (r.errors > 0) throw new Error(`${r.errors} calls failed in the capacity run (${side} worker node(s))`);
      capacity[side].push(r.rate);
      bench.log(`capacity, ${want} worker node(s): ${fmt(r.rate)} calls/s`);
    }
  }
  const capacityRatios = capacity.two.map((x, i) => x / capacity.one[i]!);
  while (workers.length < 2) workers.push(await startWorker(workerEnv(), home()));

  // 2. The hop: warm echo at 1 connection, through the API node and to the all-in-one server.
  const hop = { cluster: [] as number[], single: [] as number[] };
  const urls = { cluster: apiNode.url, single: single.url };
  // CPU µs per call of the process the client talks to (the API node, or the all-in-one server).
  const cpuPerCall = { cluster: [] as number[], single: [] as number[] };
  // Every side warmed alike: their JIT and their sandboxes settle before the rounds.
  for (const url of Object.values(urls)) await runLoad(port(url), echoReq(url), 1, QUICK ? 1000 : 3000);
  const sides = ['cluster', 'single'] as const;
  for (let round = 0; round < (PHASES.has('hop') ? HOP_ROUNDS : 0); round++) {
    // Each round starts one side further on, so no side always comes first.
    for (const side of sides.map((_, i) => sides[(i + round) % sides.length]!)) {
      const url = urls[side];
      const latencies: number[] = [];
      const pid = { cluster: apiNode.pid, single: single.pid }[side];
      const cpu0 = processCpuNs(pid);
      const r = await runLoad(port(url), echoReq(url), 1, LATENCY_MS, { latencies });
      cpuPerCall[side].push((processCpuNs(pid) - cpu0) / 1000 / Math.max(1, r.completed));
      if (r.errors > 0) throw new Error(`${r.errors} echo calls failed (${side})`);
      hop[side].push(median(latencies));
      bench.log(`warm echo p50, ${side}: ${fmt(median(latencies), 3)} ms (p99 ${fmt(percentile(latencies, 99), 3)} ms)`);
    }
  }
  const hopDiffs = hop.cluster.map((x, i) => x - hop.single[i]!);
  // The floor of any hop through NATS here: a bare request-reply between two processes (this one
  // and a responder of a few lines), through the same nats-server (TLS, the API nodes' user, on a
  // subject it may use), no algohost code on either side.
  const floorOptions = JSON.stringify(natsOptions(nats.urlFor('api'), { creds: undefined, ca: nats.ca, cert: undefined, key: undefined }, 'bench floor', 'api'));
  const FLOOR_SUBJECT = 'algohost.v1.parts.benchfloor';
  const floor: number[] = [];
  if (PHASES.has('hop')) {
    const responder = spawn(
      NODE,
      [
        '--input-type=module',
        '-e',
        `import { connect } from '@nats-io/transport-node';
const nc = await connect(${floorOptions});
nc.subscribe('${FLOOR_SUBJECT}', { callback: (_e, m) => void m.respond(m.data) });
await nc.flush();
process.stdout.write('ready');`,
      ],
      { cwd: path.resolve(import.meta.dirname, '..'), env: childEnv(), stdio: ['ignore', 'pipe', 'inherit'] },
    );
    stops.push(async () => void responder.kill('SIGKILL'));
    await within(new Promise((resolve) => responder.stdout!.once('data', resolve)), 30_000, 'the NATS responder did not start');
    const a = await connect(JSON.parse(floorOptions) as ConnectionOptions);
    const payload = new Uint8Array(200);
    for (let i = 0; i < 2000; i++) await a.request(FLOOR_SUBJECT, payload, { timeout: 5000 });
    for (let i = 0; i < (QUICK ? 2000 : 10_000); i++) {
      const t = performance.now();
      await a.request(FLOOR_SUBJECT, payload, { timeout: 5000 });
      floor.push(performance.now() - t);
    }
    await a.close();
    responder.kill('SIGKILL');
    bench.log(`bare NATS request-reply between two processes, p50: ${fmt(median(floor), 3)} ms`);
  }

  // 3. Async: accept them all, then wait for every answer.
  bench.log(`async: accepting ${ASYNC_CALLS} output=void calls`);
  const ids = new Map<string, number>();
  const acceptStart = performance.now();
  let next = PHASES.has('async') ? 0 : ASYNC_CALLS;
  const agent = new (await import('node:http')).Agent({ keepAlive: true, maxSockets: CONNECTIONS });
  await Promise.all(
    Array.from({ length: CONNECTIONS }, async () => {
      while (next < ASYNC_CALLS) {
        const i = next++;
        const r = await timed(port(apiNode.url), 'POST', '/v1/algo/bench/Echo?output=void', { headers: { ...auth, 'Content-Type': 'application/json' }, body: Buffer.from(String(i)), agent, keep: true });
        if (r.status !== 200) throw new Error(`async call ${i} was refused: ${r.status} ${r.body?.toString()}`);
        ids.set((JSON.parse(r.body!.toString()) as { request_id: string }).request_id, i);
      }
    }),
  );
  agent.destroy();
  const acceptS = (performance.now() - acceptStart) / 1000;
  bench.log(`async: accepted in ${fmt(acceptS)} s; draining`);
  const drainDeadline = Date.now() + (QUICK ? 120_000 : 900_000);
  let done = 0;
  while (PHASES.has('async') && Date.now() < drainDeadline) {
    done = Number((await pgQuery<{ n: string }>(env.ALGOHOST_DATABASE_URL, "SELECT count(*) AS n FROM async_requests WHERE status = 'done'"))[0]!.n);
    if (done >= ASYNC_CALLS) break;
    await sleep(250);
  }
  const drainS = (performance.now() - acceptStart) / 1000;
  const rows = await pgQuery<{ id: string; attempts: number; response: string }>(env.ALGOHOST_DATABASE_URL, "SELECT id, attempts, response FROM async_requests WHERE status = 'done'");
  let wrong = 0;
  let attempts = 0;
  const seen = new Set<string>();
  for (const r of rows) {
    const i = ids.get(r.id);
    if (i === undefined || seen.has(r.id)) continue;
    seen.add(r.id);
    attempts += r.attempts;
    if ((JSON.parse(r.response) as { result?: unknown }).result !== i) wrong++;
  }
  const lost = ASYNC_CALLS - seen.size;
  const duplicated = attempts - seen.size;
  bench.log(`async: ${seen.size} answered in ${fmt(drainS)} s after the first was sent; ${lost} lost, ${wrong} wrong, ${duplicated} run twice`);

  const noiseLine = noise();
  const capRatio = median(capacityRatios);
  const hopDiff = median(hopDiffs);
  const rowsOut: Row[] = [
    {
      measure: `calls/s, 20 ms sleep, ${CONNECTIONS} connections: 2 worker nodes vs 1`,
      ours: fmt(median(capacity.two)),
      base: fmt(median(capacity.one)),
      ratio: `${fmt(capRatio, 2)} ×`,
      target: '≥ 1.8 ×',
      result: verdict(capRatio >= 1.8),
    },
    {
      measure: 'warm echo p50, 1 connection: API node → NATS → worker vs all-in-one (ms)',
      ours: fmt(median(hop.cluster), 3),
      base: fmt(median(hop.single), 3),
      ratio: `+${fmt(hopDiff, 3)} ms`,
      target: '≤ +0.5 ms',
      result: verdict(hopDiff <= 0.5),
    },
    {
      measure: 'for reference: CPU µs per warm call of the process the client talks to, API node vs all-in-one server',
      ours: fmt(median(cpuPerCall.cluster), 0),
      base: fmt(median(cpuPerCall.single), 0),
      ratio: `${fmt(median(cpuPerCall.cluster) / Math.max(1e-9, median(cpuPerCall.single)), 2)} ×`,
      target: '—',
      result: '—',
    },
    {
      measure: 'for reference: a bare NATS request-reply p50 between two processes here (the floor of one hop, ms)',
      ours: fmt(median(floor), 3),
      base: '—',
      ratio: `${pct(median(floor) / Math.max(1e-9, hopDiff))} of the hop's cost`,
      target: '—',
      result: '—',
    },
    {
      measure: `async: ${ASYNC_CALLS} output=void calls, lost / wrong / run twice`,
      ours: `${lost} / ${wrong} / ${duplicated}`,
      base: '—',
      ratio: `accepted in ${fmt(acceptS)} s, all answered after ${fmt(drainS)} s`,
      target: '0 lost, 0 duplicated',
      result: verdict(lost === 0 && wrong === 0 && duplicated === 0),
    },
  ];
  const { begin, end } = docMarkers('cluster');
  const block = [
    begin,
    '### Cluster (`npm run bench:cluster`)',
    '',
    table(rowsOut, 'Baseline (same run)', 'Ratio'),
    '',
    `- **Code:** ${codeVersion()}.`,
    `- **Machine:** ${machineBase()}; nats-server, PostgreSQL 15, s3rver, one API node, worker nodes and the all-in-one server all on this machine, over loopback.`,
    commandLine('cluster', `: ${ROUNDS} round(s) of ${CAPACITY_MS / 1000} s per capacity side, ${HOP_ROUNDS} of ${LATENCY_MS / 1000} s per latency side, sides rotating; ratios paired per round`),
    ...runLines({ seconds: (performance.now() - t0) / 1000, load0, load1: os.loadavg()[0]!, idleAtStart, noise: noiseLine }),
    `- **Every round:** ${perRep('calls/s with 1 worker node', capacity.one)}; ${perRep('with 2', capacity.two)}; ${perRep('p50 ms through the cluster', hop.cluster.map((x) => x * 1000)).replace('p50 ms', 'p50 µs')}; ${perRep('all-in-one, µs', hop.single.map((x) => x * 1000))}.`,
    end,
  ].join('\n');
  process.stdout.write(block + '\n');
  if (ALL) writeDocBlock(block, { begin, end, initial: '# Performance\n', section: '## Cluster' });
}
