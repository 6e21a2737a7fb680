/**
 * Events benchmark (`npm run bench:events`): the performance targets of issue 23, each against
 * a baseline measured in the same run, on real processes over loopback (`algohost serve` on
 * SQLite; the cluster on PostgreSQL + S3 + NATS with API nodes and a worker node, as
 * bench/cluster.ts starts them), with real webhook receivers (node:http in this process, so
 * the upload's answer and the delivery's arrival are read on one clock).
 *
 *   1. upload acknowledged -> webhook received, one subscription, sequential uploads at a
 *      modest rate: p50 <= 25 ms, p99 <= 100 ms on one node; p50 <= 50 ms in the cluster.
 *      Baseline: the same uploads with the subscription turned off (rounds alternating).
 *   2. uploads/s at a saturating concurrency (1 KiB files) with 10 subscriptions (receivers
 *      answering 200 at once) vs none, rounds alternating: >= 90 % of none.
 *   3. 10,000 uploads, a receiver failing the first attempt of 30 % of webhook-ids (500), a
 *      node killed (SIGKILL) mid-run: on one machine the server restarted on its home; in the
 *      cluster one of two API nodes killed. Every acknowledged upload's event delivered (0
 *      lost); duplicates (a webhook-id answered 2xx twice) counted.
 *   4. a trigger on a warm JavaScript algorithm, upload -> output file written (taken as the
 *      arrival of the output's data.file.created webhook): p50 <= 50 ms. Baseline: a client
 *      doing the same by hand (upload, call, PUT the result).
 *   5. 1,000 concurrent SSE streams on one node, each seeing every event of a burst of
 *      uploads; the server's RSS and heap per stream (with them open minus with none).
 *
 * The results go to stdout and to docs/performance.md between the bench:events markers.
 * BENCH_QUICK=1 shortens every phase (for checking the script, not for numbers).
 * BENCH_PHASES=latency,throughput,trigger,durability,sse,cluster runs only those (and writes
 * nothing to the docs).
 */
import crypto from 'node:crypto';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import Database from 'better-sqlite3';
import { release } from '../test/helpers/algorithms.ts';
import { natsUnavailable, startNats } from '../test/helpers/nats.ts';
import { createDatabase, pgQuery, postgresAvailable, startPostgres } from '../test/helpers/postgres.ts';
import { BIN, childEnv, NODE, runCli, startServerProcess, within, type ServerProcess } from '../test/helpers/process.ts';
import { S3RVER_KEY, startS3 } from '../test/helpers/s3.ts';
import { api } from '../test/helpers/server.ts';
import { median, percentile, timed } from './load.ts';
import { codeVersion, commandLine, createBench, docMarkers, fmt, machineBase, noiseMeter, pct, perRep, QUICK, runLines, sleep, table, verdict, waitForQuiet, writeDocBlock, type Row } from './common.ts';
import { processCpu } from './procs.ts';
import { treeCpuAll } from './procTree.ts';

const bench = createBench('events');
const PHASES = new Set((process.env.BENCH_PHASES ?? 'latency,throughput,trigger,durability,sse,cluster').split(','));
const ALL = ['latency', 'throughput', 'trigger', 'durability', 'sse', 'cluster'].every((p) => PHASES.has(p));

/** Latency: samples per side (subscription on, off), in this many rounds, sides alternating. */
const LAT_SAMPLES = QUICK ? 40 : 300;
const LAT_ROUNDS = QUICK ? 2 : 3;
/** Pause between one sample's end and the next upload: a modest rate, never saturated. */
const GAP_MS = 20;
const TP_ROUNDS = QUICK ? 1 : 3;
const TP_MS = QUICK ? 2000 : 6000;
const TP_CONCURRENCY = 16;
const TP_SUBSCRIPTIONS = 10;
const DUR_UPLOADS = QUICK ? 1000 : 10_000;
const DUR_CONCURRENCY = 8;
const FAIL_FIRST = 0.3;
const TRIG_SAMPLES = QUICK ? 20 : 200;
const TRIG_ROUNDS = QUICK ? 2 : 4;
const SSE_STREAMS = QUICK ? 100 : 1000;
const SSE_BURST = QUICK ? 20 : 100;
const SMALL = crypto.randomBytes(1024);
const USER = 'bench';

// ---- a client of one node --------------------------------------------------------------------

const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

class Node {
  constructor(
    public port: number,
    readonly key: string,
  ) {}

  static of(server: ServerProcess, key: string): Node {
    return new Node(Number(new URL(server.url).port), key);
  }

  /** PUT of a hosted file (`rel` under `.my/`); its status and latency. Rejects when the node is gone. */
  async put(rel: string, body: Buffer | string = SMALL): Promise<{ status: number; ms: number }> {
    const r = await timed(this.port, 'PUT', `/v1/data/.my/${rel}`, { headers: { Authorization: `Simple ${this.key}`, 'Content-Type': 'application/octet-stream' }, body: Buffer.from(body), agent });
    return { status: r.status, ms: r.ms };
  }

  /** A JSON request that must succeed (2xx); its parsed answer. */
  async json<T>(method: string, p: string, body?: unknown): Promise<T> {
    const r = await timed(this.port, method, p, {
      headers: { Authorization: `Simple ${this.key}`, ...(body === undefined ? {} : { 'Content-Type': 'application/json' }) },
      ...(body === undefined ? {} : { body: Buffer.from(JSON.stringify(body)) }),
      agent,
      keep: true,
    });
    const text = r.body!.toString();
    if (r.status < 200 || r.status >= 300) throw new Error(`${method} ${p}: ${r.status} ${text.slice(0, 500)}`);
    return (text === '' ? undefined : JSON.parse(text)) as T;
  }

  async mkdir(parent: string, name: string): Promise<void> {
    const r = await timed(this.port, 'POST', `/v1/data/${parent}`, { headers: { Authorization: `Simple ${this.key}`, 'Content-Type': 'application/json' }, body: Buffer.from(JSON.stringify({ name })), agent });
    if (r.status !== 200 && r.status !== 201 && r.status !== 409) throw new Error(`mkdir ${parent}/${name}: ${r.status}`);
  }

  async subscribe(url: string, pathPattern: string, types = ['data.file.created']): Promise<string> {
    return (await this.json<{ id: string }>('POST', `/v1/users/${USER}/subscriptions`, { url, types, path: pathPattern })).id;
  }

  async enable(sub: string, enabled: boolean): Promise<void> {
    await this.json('PATCH', `/v1/users/${USER}/subscriptions/${sub}`, { enabled });
  }

  deliveries(sub: string): Promise<{ results: Delivery[] }> {
    return this.json('GET', `/v1/users/${USER}/subscriptions/${sub}/deliveries?limit=200`);
  }
}

interface Delivery {
  id: string;
  attempts: { at: string; latency_ms: number }[];
}

/** Every delivery of the latest 200 of `sub`, by webhook-id: when its first attempt started (server wall clock, ms) and took. */
async function firstAttempts(node: Node, sub: string): Promise<Map<string, { at: number; latency: number }>> {
  const list = (await node.deliveries(sub)).results;
  return new Map(list.filter((d) => d.attempts.length > 0).map((d) => [d.id, { at: Date.parse(d.attempts[0]!.at), latency: d.attempts[0]!.latency_ms }]));
}

// ---- webhook receivers ---------------------------------------------------------------------

interface Arrival {
  webhookId: string;
  subject: string;
  /** The event's `time` (the server's clock when the change was made), ms. */
  eventTime: number;
  /** performance.now() when the body had arrived. */
  at: number;
  wall: number;
}

/**
 * A webhook receiver on loopback: answers 200 at once, or (with `failFirst`) 500 to the first
 * attempt of that fraction of webhook-ids (chosen by a hash of the id: random, and the same
 * whichever attempt asks). Keeps the first 2xx of each subject and counts every attempt.
 */
class Receiver {
  readonly server: http.Server;
  port = 0;
  readonly first = new Map<string, Arrival>();
  readonly attempts = new Map<string, number>();
  /** 2xx answers per webhook-id. */
  readonly oks = new Map<string, number>();
  /** webhook-ids answered 2xx per subject. */
  readonly idsOf = new Map<string, Set<string>>();
  okTotal = 0;
  failed = 0;
  private readonly waiters = new Map<string, (a: Arrival) => void>();

  constructor(private readonly failFirst = 0) {
    this.server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const at = performance.now();
        const wall = performance.timeOrigin + at;
        const id = String(req.headers['webhook-id']);
        const n = (this.attempts.get(id) ?? 0) + 1;
        this.attempts.set(id, n);
        if (n === 1 && this.failFirst > 0 && crypto.createHash('sha256').update(id).digest().readUInt32BE(0) / 2 ** 32 < this.failFirst) {
          this.failed++;
          res.writeHead(500, { 'content-type': 'text/plain' }).end('not this time');
          return;
        }
        res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
        let event: { subject?: string; time?: string };
        try {
          event = JSON.parse(Buffer.concat(chunks).toString()) as typeof event;
        } catch {
          return;
        }
        const subject = String(event.subject);
        this.okTotal++;
        this.oks.set(id, (this.oks.get(id) ?? 0) + 1);
        let ids = this.idsOf.get(subject);
        if (!ids) this.idsOf.set(subject, (ids = new Set()));
        ids.add(id);
        if (!this.first.has(subject)) {
          const arrival = { webhookId: id, subject, eventTime: Date.parse(String(event.time)), at, wall };
          this.first.set(subject, arrival);
          this.waiters.get(subject)?.(arrival);
          this.waiters.delete(subject);
        }
      });
    });
    this.server.keepAliveTimeout = 30_000;
  }

  async listen(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as { port: number }).port;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}/hook`;
  }

  /** The first 2xx delivery of `subject`, waiting at most `ms`. */
  wait(subject: string, ms = 30_000): Promise<Arrival> {
    const got = this.first.get(subject);
    if (got) return Promise.resolve(got);
    return within(new Promise<Arrival>((resolve) => this.waiters.set(subject, resolve)), ms, `no webhook for ${subject}`);
  }

  /** Webhook-ids answered 2xx more than once: the extra 2xx answers. */
  duplicates(): number {
    let n = 0;
    for (const k of this.oks.values()) n += Math.max(0, k - 1);
    return n;
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

// ---- processes -----------------------------------------------------------------------------

interface WorkerProc {
  child: ChildProcess;
  stop(): Promise<void>;
}

/** `algohost worker`, as bench/cluster.ts starts it. */
async function startWorker(env: Record<string, string>, home: string): Promise<WorkerProc> {
  const child = spawn(NODE, [BIN, 'worker', '--home', home], { env: childEnv(env), stdio: ['ignore', 'ignore', 'pipe'] });
  let err = '';
  workers.add(child);
  const exited = new Promise<void>((resolve) => child.once('exit', () => (workers.delete(child), resolve())));
  await within(
    new Promise<void>((resolve, reject) => {
      child.stderr!.setEncoding('utf8').on('data', (s: string) => {
        err += s;
        if (err.includes('algohost worker is ready')) resolve();
      });
      void exited.then(() => reject(new Error(`the worker exited before it was ready:\n${err}`)));
    }),
    60_000,
    'the worker did not start',
  );
  return {
    child,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await within(exited, 60_000, 'the worker did not stop').catch(() => child.kill('SIGKILL'));
    },
  };
}

/** What was started, stopped in reverse order whatever happens. */
const stops: (() => Promise<void>)[] = [];
const servers = new Set<ServerProcess>();
const workers = new Set<ChildProcess>();
stops.push(async () => void (await Promise.all([...servers].map((s) => s.kill('SIGKILL').catch(() => undefined)))));
// Stopped by a signal (SIGINT: common.ts exits at once): no server outlives the run.
process.once('exit', () => {
  for (const s of servers) s.child.kill('SIGKILL');
  for (const w of workers) w.kill('SIGKILL');
});
// The SSE part holds SSE_STREAMS streams of one user, to measure what each costs: past the
// caps on streams a user and a node may hold (docs/security.md "What one user can hold").
const SERVE_ENV = { ALGOHOST_CONNECTOR_NETWORK: 'any', ALGOHOST_LOG_LEVEL: 'error', ALGOHOST_MAX_STREAMS_PER_USER: '0', ALGOHOST_MAX_STREAMS: '0' };

async function serve(home: string, env: Record<string, string> = {}, args: string[] = []): Promise<ServerProcess> {
  const s = await startServerProcess({ home, env: { ...SERVE_ENV, ...env }, args, timeoutMs: 60_000 });
  servers.add(s);
  return s;
}

async function kill(s: ServerProcess): Promise<void> {
  await s.kill('SIGKILL');
  servers.delete(s);
}

async function createUser(home: string, env: Record<string, string> = {}): Promise<string> {
  const created = await runCli(['user', 'create', USER], home, 60_000, env);
  if (created.code !== 0) throw new Error(created.stderr);
  return (JSON.parse(created.stdout) as { api_key: string }).api_key;
}

async function until(what: string, ms: number, fn: () => Promise<boolean> | boolean, every = 50): Promise<void> {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error(`${what}: not within ${ms / 1000} s`);
    await sleep(every);
  }
}

// ---- 1. latency ----------------------------------------------------------------------------

interface LatencyResult {
  /** ack -> webhook, ms. */
  hook: number[];
  /** The upload's own latency with the subscription on, and off. */
  upOn: number[];
  upOff: number[];
  /** p50 per round, for the report's every-round line. */
  perRound: number[];
  /** Medians (ms) of: change (event time) -> ack; change -> the send started; the send started -> arrival; the server's own measure of the send. */
  parts: { changeToAck: number; changeToSend: number; sendToArrival: number; sendLatency: number };
}

async function latencyPhase(node: Node, rx: Receiver, sub: string, dir: string, label: string): Promise<LatencyResult> {
  const out: LatencyResult = { hook: [], upOn: [], upOff: [], perRound: [], parts: { changeToAck: NaN, changeToSend: NaN, sendToArrival: NaN, sendLatency: NaN } };
  const perRound = Math.ceil(LAT_SAMPLES / LAT_ROUNDS);
  const changeToAck: number[] = [];
  const changeToSend: number[] = [];
  const sendToArrival: number[] = [];
  const sendLatency: number[] = [];
  // Warm: the dispatcher's path, the HTTP client's connection, the JIT.
  await node.enable(sub, true);
  for (let i = 0; i < 20; i++) {
    const name = `warm-${i}`;
    if ((await node.put(`${dir}/${name}`)).status !== 200) throw new Error('warm-up upload failed');
    await rx.wait(`data://${USER}/${dir}/${name}`);
  }
  for (let round = 0; round < LAT_ROUNDS; round++) {
    for (const side of round % 2 === 0 ? (['on', 'off'] as const) : (['off', 'on'] as const)) {
      await node.enable(sub, side === 'on');
      const samples: { ackWall: number; arrival: Arrival }[] = [];
      for (let i = 0; i < perRound; i++) {
        const name = `${side}-${round}-${i}`;
        const r = await node.put(`${dir}/${name}`);
        const ack = performance.now();
        if (r.status !== 200) throw new Error(`upload ${name}: ${r.status}`);
        (side === 'on' ? out.upOn : out.upOff).push(r.ms);
        if (side === 'on') {
          const arrival = await rx.wait(`data://${USER}/${dir}/${name}`);
          out.hook.push(arrival.at - ack);
          samples.push({ ackWall: performance.timeOrigin + ack, arrival });
        }
        await sleep(GAP_MS);
      }
      if (side === 'on') {
        const lat = samples.map((s) => s.arrival.at - (s.ackWall - performance.timeOrigin));
        out.perRound.push(median(lat));
        bench.log(`${label} round ${round + 1}: ack -> webhook p50 ${fmt(median(lat), 2)} ms, p99 ${fmt(percentile(lat, 99), 2)} ms`);
        const sends = await firstAttempts(node, sub);
        for (const s of samples) {
          changeToAck.push(s.ackWall - s.arrival.eventTime);
          const send = sends.get(s.arrival.webhookId);
          if (!send) continue;
          changeToSend.push(send.at - s.arrival.eventTime);
          sendToArrival.push(s.arrival.wall - send.at);
          sendLatency.push(send.latency);
        }
      }
    }
  }
  await node.enable(sub, false);
  out.parts = { changeToAck: median(changeToAck), changeToSend: median(changeToSend), sendToArrival: median(sendToArrival), sendLatency: median(sendLatency) };
  return out;
}

// ---- 2. throughput -------------------------------------------------------------------------

/** Uploads of 1 KiB files to new paths under `dir`, `concurrency` at a time, for `ms`. */
async function uploadLoad(node: Node, dir: string, concurrency: number, ms: number): Promise<{ acked: number; rate: number }> {
  let next = 0;
  let acked = 0;
  const t0 = performance.now();
  const deadline = t0 + ms;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < deadline) {
        const r = await node.put(`${dir}/${next++}`);
        if (r.status !== 200) throw new Error(`upload in ${dir}: ${r.status}`);
        acked++;
      }
    }),
  );
  return { acked, rate: acked / ((performance.now() - t0) / 1000) };
}

// ---- 3. durability -------------------------------------------------------------------------

interface DurabilityResult {
  acked: number;
  /** Uploads that failed (the node was dying or gone): not acknowledged, not expected. */
  failedUploads: number;
  lost: number;
  duplicates: number;
  /** Events delivered under more than one webhook-id (should be none). */
  twiceByEvent: number;
  /** Delivered, but of an upload that was never acknowledged (committed as the node died). */
  unacknowledgedDelivered: number;
  firstAttemptsFailed: number;
  overflowed: number;
  uploadS: number;
  /** From the first upload until every acknowledged upload's event had arrived. */
  allDeliveredS: number;
  /** From the kill until the uploads went through again (single node: the restart). */
  outageS: number;
}

/**
 * `DUR_UPLOADS` acknowledged uploads spread over `nodes()` (in turn), `kill` called once half
 * were acknowledged; uploads that fail are given up (not acknowledged) and the next goes to
 * the next live node. Then waits until every acknowledged upload's event arrived and the
 * subscription has nothing pending, and counts.
 */
async function durabilityPhase(o: {
  label: string;
  nodes: () => Node[];
  kill: () => Promise<void>;
  rx: Receiver;
  dir: string;
  sub: string;
  pending: () => Promise<number>;
  overflowed: () => Promise<number>;
}): Promise<DurabilityResult> {
  const acked = new Set<string>();
  let taken = 0;
  let failedUploads = 0;
  let next = 0;
  let turn = 0;
  let killed: Promise<void> | undefined;
  let killedAt = 0;
  let backAt = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: DUR_CONCURRENCY }, async () => {
      while (taken < DUR_UPLOADS) {
        taken++;
        for (;;) {
          const live = o.nodes();
          if (live.length === 0) {
            await sleep(20);
            continue;
          }
          if (failedUploads > 50_000) throw new Error(`${o.label}: the uploads keep failing`);
          const node = live[turn++ % live.length]!;
          const k = next++;
          const rel = `${o.dir}/${k % 10}/${k}`;
          let ok = false;
          try {
            // A request the dying node never answers is given up, like one it refused.
            ok = (await within(node.put(rel), 30_000, 'no answer')).status === 200;
          } catch {
            ok = false;
          }
          if (ok) {
            acked.add(`data://${USER}/${rel}`);
            if (killed && backAt === 0) backAt = performance.now();
            if (!killed && acked.size >= DUR_UPLOADS / 2) {
              killedAt = performance.now();
              bench.log(`${o.label}: ${acked.size} uploads acknowledged; killing a node (SIGKILL)`);
              killed = o.kill();
            }
            break;
          }
          failedUploads++;
          await sleep(20);
        }
      }
    }),
  );
  await killed;
  const uploadS = (performance.now() - t0) / 1000;
  bench.log(`${o.label}: ${acked.size} uploads acknowledged in ${fmt(uploadS)} s (${failedUploads} failed around the kill); waiting for every delivery`);
  const missing = () => [...acked].filter((s) => !o.rx.first.has(s)).length;
  let lastLog = Date.now();
  await until(`${o.label}: every acknowledged upload's event delivered`, QUICK ? 180_000 : 900_000, async () => {
    const m = missing();
    if (Date.now() - lastLog > 10_000) {
      lastLog = Date.now();
      bench.log(`${o.label}: ${m} events still to arrive`);
    }
    return m === 0;
  }, 100).catch((err: unknown) => bench.log((err as Error).message));
  const allDeliveredS = (performance.now() - t0) / 1000;
  // Then nothing pending (a delivery whose lease died with its node is sent again: counted as a duplicate).
  await until(`${o.label}: nothing pending`, QUICK ? 120_000 : 600_000, async () => (await o.pending()) === 0, 500).catch((err: unknown) => bench.log((err as Error).message));
  await sleep(1000);
  let twiceByEvent = 0;
  let unacknowledgedDelivered = 0;
  for (const [subject, ids] of o.rx.idsOf) {
    if (!subject.startsWith(`data://${USER}/${o.dir}/`)) continue;
    if (ids.size > 1) twiceByEvent++;
    if (!acked.has(subject)) unacknowledgedDelivered++;
  }
  return {
    acked: acked.size,
    failedUploads,
    lost: missing(),
    duplicates: o.rx.duplicates(),
    twiceByEvent,
    unacknowledgedDelivered,
    firstAttemptsFailed: o.rx.failed,
    overflowed: await o.overflowed(),
    uploadS,
    allDeliveredS,
    outageS: backAt > 0 ? (backAt - killedAt) / 1000 : NaN,
  };
}

// ---- 5. SSE streams ------------------------------------------------------------------------

/** A preload for the SSE phase's server: on SIGUSR2, collect garbage and print process.memoryUsage() on stderr. */
const MEM_PROBE = `let n = 0;
process.on('SIGUSR2', () => {
  globalThis.gc?.();
  globalThis.gc?.();
  process.stderr.write('bench-mem ' + ++n + ' ' + JSON.stringify(process.memoryUsage()) + '\\n');
});
`;

interface Stream {
  req: http.ClientRequest;
  ids: Set<string>;
  /** performance.now() when it had seen `want` events. */
  doneAt: number;
}

function openStream(port: number, key: string, want: () => number, onDone: () => void): Promise<Stream> {
  return new Promise((resolve, reject) => {
    const s: Stream = { req: undefined as unknown as http.ClientRequest, ids: new Set(), doneAt: 0 };
    s.req = http.get({ host: '127.0.0.1', port, path: `/v1/users/${USER}/events?types=data.file.created`, agent: false, headers: { Authorization: `Simple ${key}`, Accept: 'text/event-stream' } }, (res) => {
      if (res.statusCode !== 200) {
        reject(new Error(`stream: ${res.statusCode}`));
        res.resume();
        return;
      }
      let buf = '';
      let connected = false;
      res.setEncoding('utf8');
      res.on('data', (text: string) => {
        buf += text;
        let cut: number;
        while ((cut = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          if (!connected && block.includes(': connected')) {
            connected = true;
            resolve(s);
          }
          const m = /^id: (.+)$/m.exec(block);
          if (m) {
            s.ids.add(m[1]!);
            if (s.doneAt === 0 && s.ids.size >= want()) {
              s.doneAt = performance.now();
              onDone();
            }
          }
        }
      });
      res.on('error', () => undefined);
    });
    s.req.on('error', reject);
  });
}

// ---- the run -------------------------------------------------------------------------------

await bench.run(async () => {
  try {
    await main();
  } finally {
    for (const stop of stops.reverse()) await stop().catch((err: unknown) => bench.log(`stopping: ${(err as Error).message}`));
    agent.destroy();
  }
});

async function main(): Promise<void> {
  const missing = natsUnavailable() ?? postgresAvailable();
  if (missing && PHASES.has('cluster')) throw new Error(missing);
  const t0 = performance.now();
  const load0 = os.loadavg()[0]!;
  fs.mkdirSync(bench.work, { recursive: true });
  const home = () => fs.mkdtempSync(path.join(bench.work, 'home-'));
  let pgPid = 0;
  const ownCpu = () => treeCpuAll(process.pid) + (pgPid ? treeCpuAll(pgPid) : 0);
  const receivers: Receiver[] = [];
  stops.push(async () => void (await Promise.all(receivers.map((r) => r.close()))));
  const receiver = async (failFirst = 0) => {
    const r = new Receiver(failFirst);
    await r.listen();
    receivers.push(r);
    return r;
  };

  // ---- one node: SQLite, `algohost serve` ----
  const singleHome = home();
  let single = await serve(singleHome);
  const key = await createUser(singleHome);
  const node = Node.of(single, key);
  for (const dir of ['lat', 'tp', 'dur', 'tin', 'tout', 'min', 'mout']) await node.mkdir('.my', dir);
  for (let i = 0; i < 10; i++) await node.mkdir('.my/dur', String(i));

  // The trigger's algorithm, built before anything is measured.
  let version = '';
  if (PHASES.has('trigger')) {
    bench.log('publishing the trigger algorithm');
    version = (await release(api(single.url, key), USER, 'Upper', { 'src/index.js': 'exports.apply = (x) => String(x).toUpperCase();\n' }, { settings: { language: 'javascript' } })).version;
  }

  const idleAtStart = await waitForQuiet(30_000, bench.log);
  const noise = noiseMeter(ownCpu);

  // 1. Latency, one node.
  let lat: LatencyResult | undefined;
  const floor: number[] = [];
  if (PHASES.has('latency')) {
    const rx = await receiver();
    const sub = await node.subscribe(rx.url, 'data://.my/lat/**');
    lat = await latencyPhase(node, rx, sub, 'lat', 'one node');
    // The floor of a delivery here: a bare POST of a CloudEvent-sized body on a kept-alive
    // loopback connection from this process to the same receiver.
    const body = Buffer.from(JSON.stringify({ subject: 'data://bench/floor/x', time: new Date().toISOString(), pad: 'x'.repeat(400) }));
    for (let i = 0; i < 100 + LAT_SAMPLES; i++) {
      const r = await timed(rx.port, 'POST', '/hook', { headers: { 'webhook-id': `msg_floor${i}`, 'content-type': 'application/json' }, body, agent });
      if (i >= 100) floor.push(r.ms);
    }
  }

  // 2. Throughput, 10 subscriptions vs none.
  const tp = { ten: [] as number[], none: [] as number[], drainS: [] as number[], deliveries: 0, cpuTen: [] as number[], cpuNone: [] as number[], cpuAllTen: [] as number[] };
  if (PHASES.has('throughput')) {
    const rxs = await Promise.all(Array.from({ length: TP_SUBSCRIPTIONS }, () => receiver()));
    const subs: string[] = [];
    for (const r of rxs) subs.push(await node.subscribe(r.url, 'data://.my/tp/**'));
    const setAll = async (on: boolean) => {
      for (const s of subs) await node.enable(s, on);
    };
    const delivered = () => rxs.reduce((n, r) => n + r.okTotal, 0);
    // Warmed up as measured, both sides: with the subscriptions on (and their deliveries
    // drained), then off. The first window with deliveries ran at 70 % of the next ones when
    // only the side without was warmed (SQLite's write-ahead log grows to its working size then).
    await node.mkdir('.my/tp', 'warm');
    await setAll(true);
    const warmBefore = delivered();
    const warm = await uploadLoad(node, 'tp/warm', TP_CONCURRENCY, 1500);
    await until('throughput: the warm-up\'s deliveries', 600_000, () => delivered() >= warmBefore + warm.acked * TP_SUBSCRIPTIONS, 20);
    await setAll(false);
    await node.mkdir('.my/tp', 'warm2');
    await uploadLoad(node, 'tp/warm2', TP_CONCURRENCY, 1500);
    for (let round = 0; round < TP_ROUNDS; round++) {
      for (const side of round % 2 === 0 ? (['ten', 'none'] as const) : (['none', 'ten'] as const)) {
        await setAll(side === 'ten');
        const dir = `${side}${round}`;
        await node.mkdir('.my/tp', dir);
        const before = delivered();
        // The server's CPU per upload (robust where the rate is not: a shared machine's other
        // work takes time from the window, not CPU from the server).
        const cpu0 = processCpu(single.pid);
        const r = await uploadLoad(node, `tp/${dir}`, TP_CONCURRENCY, TP_MS);
        const cpuMs = ((processCpu(single.pid) - cpu0) * 1000) / r.acked;
        tp[side].push(r.rate);
        (side === 'ten' ? tp.cpuTen : tp.cpuNone).push(cpuMs);
        let drain = `; server CPU ${fmt(cpuMs, 2)} ms an upload`;
        if (side === 'ten') {
          const windowEnd = performance.now();
          const want = before + r.acked * TP_SUBSCRIPTIONS;
          await until('throughput: every delivery', 600_000, () => delivered() >= want, 20);
          const s = (performance.now() - windowEnd) / 1000;
          tp.drainS.push(s);
          tp.deliveries += r.acked * TP_SUBSCRIPTIONS;
          const all = ((processCpu(single.pid) - cpu0) * 1000) / r.acked;
          tp.cpuAllTen.push(all);
          drain += ` (${fmt(all, 2)} ms with its deliveries); its ${r.acked * TP_SUBSCRIPTIONS} deliveries all arrived ${fmt(s, 2)} s after the window`;
        }
        bench.log(`throughput round ${round + 1}, ${side === 'ten' ? '10 subscriptions' : 'none'}: ${fmt(r.rate)} uploads/s${drain}`);
      }
    }
    await setAll(false);
  }

  // 4. A trigger on a warm algorithm (before the kill: on the server as first started).
  const trig = { trigger: [] as number[], hand: [] as number[], written: [] as number[], perRound: [] as number[], parts: { created: NaN, started: NaN, finished: NaN } };
  if (PHASES.has('trigger')) {
    const rx = await receiver();
    const trigger = await node.json<{ id: string }>('POST', `/v1/users/${USER}/triggers`, { types: ['data.file.created'], path: 'data://.my/tin/**', algorithm: `${USER}/Upper/${version}`, input: '{{subject}}', output: 'data://.my/tout/{{name}}' });
    await node.subscribe(rx.url, 'data://.my/tout/**');
    const byHand = async (name: string): Promise<number> => {
      const r = await node.put(`min/${name}`);
      const ack = performance.now();
      if (r.status !== 200) throw new Error(`upload min/${name}: ${r.status}`);
      const called = await timed(node.port, 'POST', `/v1/algo/${USER}/Upper/${version}`, { headers: { Authorization: `Simple ${key}`, 'Content-Type': 'text/plain' }, body: Buffer.from(`data://${USER}/min/${name}`), agent, keep: true });
      if (called.status !== 200) throw new Error(`call: ${called.status} ${called.body?.toString()}`);
      const result = (JSON.parse(called.body!.toString()) as { result: string }).result;
      const w = await node.put(`mout/${name}`, result);
      if (w.status !== 200) throw new Error(`PUT mout/${name}: ${w.status}`);
      return performance.now() - ack;
    };
    const viaTrigger = async (name: string): Promise<{ ms: number; written: number; ackWall: number }> => {
      const r = await node.put(`tin/${name}`);
      const ack = performance.now();
      if (r.status !== 200) throw new Error(`upload tin/${name}: ${r.status}`);
      const a = await rx.wait(`data://${USER}/tout/${name}`, 120_000);
      return { ms: a.at - ack, written: a.eventTime - (performance.timeOrigin + ack), ackWall: performance.timeOrigin + ack };
    };
    // Warm: the algorithm's first run starts its worker.
    for (let i = 0; i < 5; i++) {
      await viaTrigger(`warm-${i}`);
      await byHand(`warm-${i}`);
    }
    const perRound = Math.ceil(TRIG_SAMPLES / TRIG_ROUNDS);
    const acks = new Map<string, number>();
    for (let round = 0; round < TRIG_ROUNDS; round++) {
      for (const side of round % 2 === 0 ? (['trigger', 'hand'] as const) : (['hand', 'trigger'] as const)) {
        const xs: number[] = [];
        for (let i = 0; i < perRound; i++) {
          const name = `${round}-${i}`;
          if (side === 'hand') xs.push(await byHand(name));
          else {
            const t = await viaTrigger(name);
            xs.push(t.ms);
            trig.written.push(t.written);
            acks.set(`data://${USER}/tin/${name}`, t.ackWall);
          }
          await sleep(GAP_MS);
        }
        trig[side].push(...xs);
        if (side === 'trigger') trig.perRound.push(median(xs));
        bench.log(`trigger round ${round + 1}, ${side === 'trigger' ? 'by the trigger' : 'by hand'}: upload -> output written p50 ${fmt(median(xs), 2)} ms`);
      }
    }
    // Where a run's time goes: its rows' times against the upload's acknowledgement.
    const runs = await node.json<{ results: { subject: string; created_at: string; started_at: string | null; finished_at: string | null }[] }>('GET', `/v1/users/${USER}/triggers/${trigger.id}/runs?limit=200`);
    const created: number[] = [];
    const started: number[] = [];
    const finished: number[] = [];
    for (const r of runs.results) {
      const ack = acks.get(r.subject);
      if (ack === undefined || !r.started_at || !r.finished_at) continue;
      created.push(Date.parse(r.created_at) - ack);
      started.push(Date.parse(r.started_at) - ack);
      finished.push(Date.parse(r.finished_at) - ack);
    }
    trig.parts = { created: median(created), started: median(started), finished: median(finished) };
    await node.json('PATCH', `/v1/users/${USER}/triggers/${trigger.id}`, { enabled: false });
  }

  // 3. Durability, one node: killed and restarted on its home.
  let durSingle: DurabilityResult | undefined;
  if (PHASES.has('durability')) {
    const rx = await receiver(FAIL_FIRST);
    const sub = await node.subscribe(rx.url, 'data://.my/dur/**');
    let live: Node[] = [node];
    const sqlitePending = async () => {
      const db = new Database(path.join(singleHome, 'metadata.sqlite'), { readonly: true, fileMustExist: true });
      try {
        return Number((db.prepare("SELECT count(*) AS n FROM deliveries WHERE subscription_id = ? AND status = 'pending'").get(sub) as { n: number }).n);
      } finally {
        db.close();
      }
    };
    durSingle = await durabilityPhase({
      label: 'durability, one node',
      nodes: () => live,
      kill: async () => {
        live = [];
        const gone = single;
        await kill(gone);
        single = await serve(singleHome);
        node.port = Number(new URL(single.url).port);
        live = [node];
        bench.log('durability, one node: restarted on the same home');
      },
      rx,
      dir: 'dur',
      sub,
      pending: sqlitePending,
      overflowed: async () => (await node.json<{ overflowed: number }>('GET', `/v1/users/${USER}/subscriptions/${sub}`)).overflowed,
    });
    bench.log(`durability, one node: ${JSON.stringify(durSingle)}`);
  }
  await kill(single);

  // 5. 1,000 SSE streams on one node, its memory per stream.
  const sse = { streams: 0, minSeen: NaN, allSeen: false, spreadMs: NaN, rss: NaN, heap: NaN, rssAfter: NaN, heapAfter: NaN, upNone: [] as number[], upStreams: [] as number[], base: { rss: NaN, heap: NaN } };
  if (PHASES.has('sse')) {
    const probe = path.join(bench.work, 'mem-probe.mjs');
    fs.writeFileSync(probe, MEM_PROBE);
    const sseHome = home();
    const server = await serve(sseHome, { NODE_OPTIONS: `--expose-gc --import ${pathToFileURL(probe).href}` });
    const sseKey = await createUser(sseHome);
    const n = Node.of(server, sseKey);
    await n.mkdir('.my', 'sse');
    let asked = 0;
    const mem = async () => {
      const k = ++asked;
      process.kill(server.pid, 'SIGUSR2');
      const m = await server.waitFor('stderr', new RegExp(`bench-mem ${k} (\\{[^\\n]*\\})`), 30_000);
      return JSON.parse(m[1]!) as { rss: number; heapUsed: number };
    };
    const burst = async (tag: string, lat: number[]) => {
      let next = 0;
      let last = 0;
      await Promise.all(
        Array.from({ length: 4 }, async () => {
          while (next < SSE_BURST) {
            const i = next++;
            const r = await n.put(`sse/${tag}-${i}`);
            if (r.status !== 200) throw new Error(`sse upload: ${r.status}`);
            lat.push(r.ms);
            last = performance.now();
          }
        }),
      );
      return last;
    };
    let want = 0;
    let done = 0;
    // Warm the route and the feed: a few streams opened, fed and closed; a burst with none.
    want = 1;
    const warm = await Promise.all(Array.from({ length: 10 }, () => openStream(n.port, sseKey, () => want, () => done++)));
    await n.put('sse/warm');
    await until('warm streams', 30_000, () => done >= 10);
    for (const s of warm) s.req.destroy();
    done = 0;
    await burst('none', sse.upNone);
    await sleep(2000);
    const m0 = await mem();
    const m0b = await mem();
    sse.base = { rss: Math.min(m0.rss, m0b.rss), heap: Math.min(m0.heapUsed, m0b.heapUsed) };
    want = SSE_BURST;
    const streams: Stream[] = [];
    for (let i = 0; i < SSE_STREAMS; i += 100) {
      streams.push(...(await Promise.all(Array.from({ length: Math.min(100, SSE_STREAMS - i) }, () => openStream(n.port, sseKey, () => want, () => done++)))));
    }
    sse.streams = streams.length;
    bench.log(`sse: ${streams.length} streams open`);
    await sleep(2000);
    const m1 = await mem();
    sse.rss = (m1.rss - sse.base.rss) / SSE_STREAMS;
    sse.heap = (m1.heapUsed - sse.base.heap) / SSE_STREAMS;
    const last = await burst('streams', sse.upStreams);
    await until('sse: every stream saw every event', 120_000, () => done >= SSE_STREAMS).catch((err: unknown) => bench.log((err as Error).message));
    sse.minSeen = Math.min(...streams.map((s) => s.ids.size));
    sse.allSeen = streams.every((s) => s.ids.size === SSE_BURST);
    sse.spreadMs = Math.max(...streams.map((s) => s.doneAt)) - last;
    const m2 = await mem();
    sse.rssAfter = (m2.rss - sse.base.rss) / SSE_STREAMS;
    sse.heapAfter = (m2.heapUsed - sse.base.heap) / SSE_STREAMS;
    bench.log(`sse: ${streams.length} streams, the fewest events seen ${sse.minSeen} of ${SSE_BURST}; ${fmt(sse.rss / 1024)} KiB RSS, ${fmt(sse.heap / 1024)} KiB heap per stream`);
    for (const s of streams) s.req.destroy();
    await kill(server);
  }

  // ---- the cluster: PostgreSQL + S3 + NATS, API nodes and a worker node ----
  let latCluster: LatencyResult | undefined;
  let durCluster: DurabilityResult | undefined;
  if (PHASES.has('cluster')) {
    bench.log('starting PostgreSQL, s3rver and nats-server');
    const [pg, s3, nats] = await Promise.all([startPostgres(), startS3(['bench']), startNats({ secure: true })]);
    stops.push(async () => pg.stop(), () => s3.stop(), () => nats.stop());
    try {
      pgPid = Number(fs.readFileSync(path.join(pg.dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]);
    } catch {
      pgPid = 0;
    }
    const env = {
      ALGOHOST_DATABASE_URL: await createDatabase(pg.adminUrl, 'events'),
      ALGOHOST_BLOBS: `s3://bench/e?endpoint=${encodeURIComponent(s3.endpoint)}&force_path_style=true`,
      AWS_ACCESS_KEY_ID: S3RVER_KEY.access_key_id,
      AWS_SECRET_ACCESS_KEY: S3RVER_KEY.secret_access_key,
      ALGOHOST_NATS_URL: nats.urlFor('api'),
      ...(nats.ca ? { ALGOHOST_NATS_CA: nats.ca } : {}),
      ALGOHOST_CLUSTER_SECRET: crypto.randomBytes(32).toString('hex'),
    };
    const a = await serve(home(), env, ['--role', 'api']);
    const worker = await startWorker({ ...env, ...SERVE_ENV, ...nats.nextWorker() }, home());
    stops.push(() => worker.stop());
    const cKey = await createUser(home(), env);
    const nodeA = Node.of(a, cKey);
    for (const dir of ['lat', 'dur']) await nodeA.mkdir('.my', dir);
    for (let i = 0; i < 10; i++) await nodeA.mkdir('.my/dur', String(i));
    await waitForQuiet(15_000, bench.log);
    const rx = await receiver();
    const sub = await nodeA.subscribe(rx.url, 'data://.my/lat/**');
    latCluster = await latencyPhase(nodeA, rx, sub, 'lat', 'cluster');
    if (PHASES.has('durability')) {
      const b = await serve(home(), env, ['--role', 'api']);
      const nodeB = Node.of(b, cKey);
      const rxD = await receiver(FAIL_FIRST);
      const subD = await nodeA.subscribe(rxD.url, 'data://.my/dur/**');
      let live = [nodeA, nodeB];
      durCluster = await durabilityPhase({
        label: 'durability, cluster',
        nodes: () => live,
        kill: async () => {
          live = [nodeA];
          await kill(b);
        },
        rx: rxD,
        dir: 'dur',
        sub: subD,
        pending: async () => Number((await pgQuery<{ n: string }>(env.ALGOHOST_DATABASE_URL, "SELECT count(*) AS n FROM deliveries WHERE subscription_id = $1 AND status = 'pending'", [subD]))[0]!.n),
        overflowed: async () => (await nodeA.json<{ overflowed: number }>('GET', `/v1/users/${USER}/subscriptions/${subD}`)).overflowed,
      });
      bench.log(`durability, cluster: ${JSON.stringify(durCluster)}`);
    }
    await kill(a);
  }
  const noiseLine = noise();

  // ---- the report ----
  const ms = (x: number, d = 1) => fmt(x, d);
  const rows: Row[] = [];
  if (lat) {
    const p50 = median(lat.hook);
    const p99 = percentile(lat.hook, 99);
    rows.push(
      { measure: `one node: upload acknowledged → webhook received, p50 (ms), 1 subscription, ${lat.hook.length} sequential uploads; baseline: the upload itself, subscription off`, ours: ms(p50, 2), base: ms(median(lat.upOff), 2), ratio: `${fmt(p50 / median(lat.upOff), 2)} × an upload`, target: '≤ 25 ms', result: verdict(p50 <= 25) },
      { measure: 'one node: the same, p99 (ms); baseline: the upload p99, subscription off', ours: ms(p99, 2), base: ms(percentile(lat.upOff, 99), 2), ratio: `${fmt(p99 / percentile(lat.upOff, 99), 2)} ×`, target: '≤ 100 ms', result: verdict(p99 <= 100) },
      { measure: 'for reference: the upload p50 (ms) with the subscription on vs off', ours: ms(median(lat.upOn), 2), base: ms(median(lat.upOff), 2), ratio: `${fmt(median(lat.upOn) / median(lat.upOff), 2)} ×`, target: '—', result: '—' },
    );
  }
  if (latCluster) {
    const p50 = median(latCluster.hook);
    rows.push({ measure: `cluster (PostgreSQL + S3 + NATS, an API node, a worker node): upload acknowledged → webhook received, p50 (ms); baseline: the upload itself, subscription off`, ours: ms(p50, 2), base: ms(median(latCluster.upOff), 2), ratio: `${fmt(p50 / median(latCluster.upOff), 2)} × an upload; p99 ${ms(percentile(latCluster.hook, 99), 1)} ms`, target: '≤ 50 ms', result: verdict(p50 <= 50) });
  }
  if (tp.ten.length > 0) {
    const ratios = tp.ten.map((x, i) => x / tp.none[i]!);
    const r = median(ratios);
    rows.push(
      { measure: `one node: uploads/s, 1 KiB files, ${TP_CONCURRENCY} at a time: ${TP_SUBSCRIPTIONS} subscriptions vs none`, ours: fmt(median(tp.ten)), base: fmt(median(tp.none)), ratio: pct(r), target: '≥ 90 %', result: verdict(r >= 0.9) },
      { measure: `for reference: the server's CPU per upload in the window, ${TP_SUBSCRIPTIONS} subscriptions vs none (ms)`, ours: fmt(median(tp.cpuTen), 2), base: fmt(median(tp.cpuNone), 2), ratio: pct(median(tp.cpuTen) / median(tp.cpuNone)), target: '—', result: '—' },
      { measure: `for reference: the same, counting the CPU of its deliveries to the last (ms)`, ours: fmt(median(tp.cpuAllTen), 2), base: fmt(median(tp.cpuNone), 2), ratio: pct(median(tp.cpuAllTen) / median(tp.cpuNone)), target: '—', result: '—' },
      { measure: `for reference: after each ${TP_MS / 1000} s window with ${TP_SUBSCRIPTIONS} subscriptions, the last of its deliveries arrived (s after the window)`, ours: fmt(median(tp.drainS), 2), base: '—', ratio: `${fmt(tp.deliveries, 0)} deliveries in all`, target: '—', result: '—' },
    );
  }
  const durRow = (label: string, d: DurabilityResult, how: string): Row => ({
    measure: `${label}: ${fmt(d.acked, 0)} acknowledged uploads, ${pct(FAIL_FIRST)} of first attempts answered 500, ${how}: lost / duplicates`,
    ours: `${d.lost} / ${d.duplicates}`,
    base: '—',
    ratio: `${d.failedUploads} uploads failed around the kill (not acknowledged); all delivered ${fmt(d.allDeliveredS, 0)} s after the first upload (uploads took ${fmt(d.uploadS, 0)} s)`,
    target: '0 lost; duplicates reported',
    result: verdict(d.lost === 0 && d.acked === DUR_UPLOADS),
  });
  if (durSingle) rows.push(durRow('one node', durSingle, 'the server killed (SIGKILL) halfway and restarted on its home'));
  if (durCluster) rows.push(durRow('cluster', durCluster, 'one of two API nodes killed (SIGKILL) halfway'));
  if (trig.trigger.length > 0) {
    const p50 = median(trig.trigger);
    rows.push({ measure: `one node: a trigger on a warm JavaScript algorithm, upload acknowledged → output written, p50 (ms; "written" = its data.file.created webhook arrived); baseline: a client doing the same by hand (upload, call, PUT)`, ours: ms(p50, 2), base: ms(median(trig.hand), 2), ratio: `${fmt(p50 / median(trig.hand), 2)} ×; p99 ${ms(percentile(trig.trigger, 99), 1)} ms`, target: '≤ 50 ms', result: verdict(p50 <= 50) });
  }
  if (sse.streams > 0) {
    rows.push(
      { measure: `one node: ${fmt(sse.streams, 0)} concurrent SSE streams, a burst of ${SSE_BURST} uploads: events seen by the stream that saw fewest`, ours: `${sse.minSeen} of ${SSE_BURST}`, base: '—', ratio: `the last stream had them all ${fmt(sse.spreadMs, 0)} ms after the last upload's answer`, target: 'every stream sees every event', result: verdict(sse.allSeen) },
      { measure: `one node: server memory per open stream, RSS / JS heap (KiB; with ${fmt(sse.streams, 0)} open minus none, after GC)`, ours: `${fmt(sse.rss / 1024)} / ${fmt(sse.heap / 1024)}`, base: `${fmt(sse.base.rss / 1024 ** 2)} / ${fmt(sse.base.heap / 1024 ** 2)} MiB with none`, ratio: `after the burst: ${fmt(sse.rssAfter / 1024)} / ${fmt(sse.heapAfter / 1024)} KiB`, target: 'reported', result: '—' },
      { measure: `for reference: upload p50 (ms) during the burst, ${fmt(sse.streams, 0)} streams vs none`, ours: ms(median(sse.upStreams), 2), base: ms(median(sse.upNone), 2), ratio: `${fmt(median(sse.upStreams) / median(sse.upNone), 2)} ×`, target: '—', result: '—' },
    );
  }

  const parts = (l: LatencyResult) =>
    `the change (the event's time, in its transaction) → the upload's answer read by the client ${ms(l.parts.changeToAck, 1)} ms; the change → the dispatcher starting the send ${ms(l.parts.changeToSend, 1)} ms; the send's start → the body read by the receiver ${ms(l.parts.sendToArrival, 1)} ms (the server's own measure of the attempt, to its answer: ${ms(l.parts.sendLatency, 0)} ms)`;
  const details: string[] = [];
  if (lat) details.push(`- **Where the webhook's time goes, one node** (medians; server times are whole ms of the same wall clock): ${parts(lat)}. A bare POST of a similar body to the same receiver from this process, kept-alive: p50 ${ms(median(floor), 2)} ms.`);
  if (latCluster) details.push(`- **Where the webhook's time goes, cluster:** ${parts(latCluster)}.`);
  if (trig.trigger.length > 0)
    details.push(
      `- **Where the trigger's time goes** (medians, from the upload's answer): its run row made ${ms(trig.parts.created, 1)} ms, started ${ms(trig.parts.started, 1)} ms, ended (output written) ${ms(trig.parts.finished, 1)} ms; the output's event time ${ms(median(trig.written), 1)} ms; its webhook received ${ms(median(trig.trigger), 1)} ms.`,
    );
  const durDetail = (label: string, d: DurabilityResult, restarted: boolean) =>
    `- **${label}:** ${fmt(d.acked, 0)} acknowledged; ${d.firstAttemptsFailed} first attempts answered 500 and retried; ${restarted ? `uploads acknowledged again ${fmt(d.outageS, 1)} s after the kill (the restart)` : 'the other API node took every upload after the kill'}; ${d.duplicates} duplicate deliveries (a webhook-id answered 2xx twice), ${d.twiceByEvent} events delivered under two webhook-ids, ${d.unacknowledgedDelivered} delivered events of uploads whose answer the kill lost; ${d.overflowed} overflowed; every acknowledged one delivered ${fmt(d.allDeliveredS, 0)} s after the first upload.`;
  if (durSingle) details.push(durDetail('Durability, one node', durSingle, true));
  if (durCluster) details.push(durDetail('Durability, cluster', durCluster, false));
  const rounds: string[] = [];
  if (lat) rounds.push(perRep('webhook p50 ms per round, one node', lat.perRound, 2));
  if (latCluster) rounds.push(perRep('cluster', latCluster.perRound, 2));
  if (tp.ten.length > 0) rounds.push(perRep('uploads/s with 10 subscriptions', tp.ten), perRep('with none', tp.none), perRep('drained after (s)', tp.drainS, 2));
  if (trig.perRound.length > 0) rounds.push(perRep('trigger p50 ms per round', trig.perRound, 2));

  const { begin, end } = docMarkers('events');
  const block = [
    begin,
    '### Events (`npm run bench:events`) — latest run',
    '',
    table(rows, 'Baseline (same run)', 'Ratio / detail'),
    '',
    `- **Code:** ${codeVersion()}.`,
    `- **Machine:** ${machineBase()}; the servers (\`algohost serve\` on SQLite; for the cluster nats-server, PostgreSQL 15, s3rver, API nodes and a worker node), the webhook receivers (node:http) and the clients all on this machine, over loopback; \`ALGOHOST_CONNECTOR_NETWORK=any\`, log level error.`,
    commandLine('events', `: latency ${LAT_SAMPLES} samples a side in ${LAT_ROUNDS} rounds, sides alternating, ${GAP_MS} ms between samples; throughput ${TP_ROUNDS} round(s) of ${TP_MS / 1000} s a side, alternating, ${TP_CONCURRENCY} uploads at a time; durability ${fmt(DUR_UPLOADS, 0)} uploads, ${DUR_CONCURRENCY} at a time; trigger ${TRIG_SAMPLES} samples a side in ${TRIG_ROUNDS} rounds; SSE ${SSE_STREAMS} streams, ${SSE_BURST} uploads`),
    ...runLines({ seconds: (performance.now() - t0) / 1000, load0, load1: os.loadavg()[0]!, idleAtStart, noise: noiseLine }),
    ...details,
    ...(rounds.length > 0 ? [`- **Every round:** ${rounds.join('; ')}.`] : []),
    end,
  ].join('\n');
  process.stdout.write(block + '\n');
  if (ALL) writeDocBlock(block, { begin, end, initial: '# Performance\n', section: '## Events' });
}
