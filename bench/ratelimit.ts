/**
 * Rate-limit accuracy across API nodes (`npm run bench:ratelimit`; issue 24, "Performance":
 * at most 5 % over the configured rate over 60 s, with two API nodes; docs/limits.md "Across
 * API nodes").
 *
 * A shared deployment on real processes over loopback: a throwaway PostgreSQL, s3rver, and two
 * `algohost serve` nodes, each with a home of its own, on the same database and bucket. One
 * user per setting, with limits of their own written as the admin command `algohost user limits
 * NAME --calls-per-min N --burst N` writes them, calls an echo algorithm through both nodes, each client
 * alternating between them, CLIENTS clients paced to offer OFFER × the rate in all, for
 * SECONDS. Every answer is counted: 200 (admitted) or 429 `rate_limited`; anything else is
 * reported (and fails the run).
 *
 *   allowed   = burst + rate × elapsed, elapsed from the first request's start to the last
 *               answer's end (what one bucket would have admitted at most in that time)
 *   accuracy  = admitted / allowed             target ≤ 1.05
 *   slack     = 1 − admitted / allowed          what the design gives up (tokens a node took
 *                                               and did not spend are lost), not a target
 *
 * Settings: 600 calls a minute with a burst of 10 (a node takes 3 tokens at a time), 2,400
 * with a burst of 40 (10 at a time) and 6,000 with a burst of 100 (25 at a time).
 * The three settings and the capacity take about 4 minutes, with 40 s to start and up to 30 s of
 * waiting for the shared machine to be quiet. Also reported: each node's share of the admitted calls,
 * the admitted calls per 10 s window, the latency of the 429s and of the 200s, and the nodes'
 * capacity for the echo with no limit (a setting near it measures the machine, not the limiter).
 *
 * Then the compute quota across the same two nodes: a user with COMPUTE.quotaS compute seconds a
 * month calls an algorithm that sleeps COMPUTE.sleepMs from COMPUTE.clients clients, each
 * alternating between the nodes in a closed loop until refused (429 `compute_quota_exceeded`).
 * A call is checked as it starts and each node sees the others' seconds a flush (1 s) and a
 * refresh (1 s) late (docs/limits.md, "Compute seconds per month"), so the month ends over the
 * quota; reported: by how much, against what that design allows (the calls under way when it is
 * reached, plus what the other node used in the two seconds it cannot see yet).
 *
 *   npm run bench:ratelimit [-- --seconds 60 --offer 4 --clients 32]
 *
 * BENCH_QUICK=1 shortens each setting to 10 s (for checking the script, not for numbers). The
 * results go to stdout and to docs/performance.md between the bench:ratelimit markers.
 */
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { loadConfig } from '../src/config.ts';
import { writeUserLimits } from '../src/limits/userLimits.ts';
import { createServices } from '../src/services.ts';
import { release } from '../test/helpers/algorithms.ts';
import { createDatabase, postgresAvailable, startPostgres } from '../test/helpers/postgres.ts';
import { S3RVER_KEY, startS3 } from '../test/helpers/s3.ts';
import { api } from '../test/helpers/server.ts';
import { numArg } from './baseTree.ts';
import { createBench, fmt, noiseMeter, pct, QUICK, sleep, verdict, waitForQuiet, writeReport } from './common.ts';
import { percentile, timed } from './load.ts';
import { treeCpuAll } from './procTree.ts';
import { spawnServer, type ServerProc } from './procs.ts';

const bench = createBench('ratelimit');
const { log } = bench;
const SECONDS = QUICK ? 10 : numArg('--seconds', 60);
/** The load offered, in multiples of the rate. */
const OFFER = numArg('--offer', 4);
/** Concurrent clients, each alternating between the nodes, each paced to OFFER × rate ÷ CLIENTS. */
const CLIENTS = numArg('--clients', 32);
const TARGET = 1.05;
const WINDOW_S = 10;
/** How long the nodes' capacity is measured. */
const CAPACITY_S = QUICK ? 3 : 10;
const SECTION = '## Rate limits';

interface Setting {
  user: string;
  perMin: number;
  burst: number;
}
const SETTINGS: Setting[] = [
  { user: 'rate600', perMin: 600, burst: 10 },
  { user: 'rate2400', perMin: 2400, burst: 40 },
  { user: 'rate6000', perMin: 6000, burst: 100 },
];

/** The compute quota's phase (above). */
const COMPUTE = { user: 'compute', quotaS: QUICK ? 10 : 60, sleepMs: 100, clients: 16 };
/** The usage flush and the quota's refresh of what other nodes counted (src/algorithms/usage.ts, src/limits/compute.ts). */
const SEEN_LATE_S = 2;

// ---- setup ---------------------------------------------------------------------------------

/**
 * The users (`owner`, who publishes Echo and has no limits, and one per setting) and their
 * limits, written to the shared store as the admin commands `algohost user create` and
 * `algohost user limits NAME --calls-per-min N --burst N` write them; the keys, by user.
 */
async function createUsers(env: Record<string, string>): Promise<Map<string, string>> {
  const home = path.join(bench.work, 'admin');
  fs.mkdirSync(home, { recursive: true });
  const services = await createServices(loadConfig({ home, port: '0', host: '127.0.0.1', demo: false }, env));
  try {
    const keys = new Map<string, string>();
    for (const name of ['owner', ...SETTINGS.map((s) => s.user), COMPUTE.user]) keys.set(name, (await services.users.create(name)).apiKey);
    const computeUser = await services.users.require(COMPUTE.user);
    const quota = await writeUserLimits(services.store, computeUser.id, { compute_seconds_per_month: COMPUTE.quotaS });
    if (services.limits.quotasOf({ userId: computeUser.id, limits: quota }).computeSecondsPerMonth !== COMPUTE.quotaS) throw new Error(`${COMPUTE.user}'s quota is not in force`);
    for (const s of SETTINGS) {
      const user = await services.users.require(s.user);
      const own = await writeUserLimits(services.store, user.id, { calls_per_min: s.perMin, burst: s.burst });
      const inForce = services.limits.of({ userId: user.id, limits: own });
      if (inForce.callsPerMin !== s.perMin || inForce.burst !== s.burst) throw new Error(`${s.user}'s limits in force: ${JSON.stringify(inForce)}`);
    }
    return keys;
  } finally {
    await services.close();
  }
}

async function startNode(label: string, env: Record<string, string>): Promise<ServerProc> {
  const home = path.join(bench.work, label);
  fs.mkdirSync(home, { recursive: true });
  const server = await spawnServer(label, {
    args: ['src/cli/algohost.ts', 'serve', '--port', '0', '--host', '127.0.0.1', '--no-demo', '--home', home],
    env,
    logFile: path.join(bench.work, `${label}.log`),
  });
  bench.procs.push(server);
  return server;
}

/** The postmaster's pid (its tree is every backend), for the noise line. */
function postmasterPid(dir: string): number | undefined {
  try {
    return Number(fs.readFileSync(path.join(dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]);
  } catch {
    return undefined;
  }
}

// ---- load ----------------------------------------------------------------------------------

interface Answer {
  node: number;
  status: number;
  /** error.code of a refusal, `algorithm_error` for a 200 carrying an error, `client: …` when no answer came. */
  code: string | undefined;
  start: number;
  end: number;
}

/** What `offer` calls, and how: by default Echo with `x`, CLIENTS clients, for the whole time. */
interface Calls {
  algorithm?: string;
  input?: string;
  clients?: number;
  /** Each client stops at its first 429. */
  untilRefused?: boolean;
}

/**
 * `clients` clients, client c sending at start + (c + k × clients) / offered s for k = 0, 1, …
 * (at once when its previous answer came later), to node (c + k) mod 2, for `seconds`.
 * `offered` Infinity: each client sends as soon as its previous answer came (closed loop).
 */
async function offer(ports: number[], key: string, offered: number, seconds: number, { algorithm = 'Echo', input = 'x', clients = CLIENTS, untilRefused = false }: Calls = {}): Promise<Answer[]> {
  const agents = ports.map(() => new http.Agent({ keepAlive: true, maxSockets: clients }));
  const headers = { authorization: `Simple ${key}`, 'content-type': 'text/plain' };
  const body = Buffer.from(input);
  const answers: Answer[] = [];
  const t0 = performance.now() + 100;
  const end = t0 + seconds * 1000;
  try {
    await Promise.all(
      Array.from({ length: clients }, async (_, c) => {
        for (let k = 0; ; k++) {
          const at = t0 + ((c + k * clients) / offered) * 1000;
          if (at >= end || performance.now() >= end) break;
          const wait = at - performance.now();
          if (wait > 0) await sleep(wait);
          const node = (c + k) % 2;
          const start = performance.now();
          try {
            const r = await timed(ports[node]!, 'POST', `/v1/algo/owner/${algorithm}`, { headers, body, agent: agents[node], keep: true });
            const text = r.body!.toString();
            let code: string | undefined;
            if (r.status !== 200) code = errorCode(text);
            else if (text.includes('"error"')) code = 'algorithm_error';
            answers.push({ node, status: r.status, code, start, end: performance.now() });
            if (untilRefused && r.status === 429) break;
          } catch (err) {
            answers.push({ node, status: 0, code: `client: ${(err as Error).message}`, start, end: performance.now() });
          }
        }
      }),
    );
  } finally {
    for (const a of agents) a.destroy();
  }
  return answers;
}

function errorCode(text: string): string | undefined {
  try {
    return (JSON.parse(text) as { error?: { code?: string } }).error?.code;
  } catch {
    return undefined;
  }
}

// ---- one setting ---------------------------------------------------------------------------

interface Result {
  setting: Setting;
  offered: number;
  sent: number;
  elapsedS: number;
  admitted: number;
  refused: number;
  other: Answer[];
  allowed: number;
  perNode: { sent: number; admitted: number }[];
  windows: number[];
  ms429: number[];
  ms200: number[];
}

async function measure(setting: Setting, ports: number[], key: string): Promise<Result> {
  const offered = (OFFER * setting.perMin) / 60;
  log(`${setting.user}: ${setting.perMin} calls a minute, burst ${setting.burst}; offering ${fmt(offered, 0)} calls/s for ${SECONDS} s over ${CLIENTS} clients`);
  const answers = await offer(ports, key, offered, SECONDS);
  const first = Math.min(...answers.map((a) => a.start));
  const last = Math.max(...answers.map((a) => a.end));
  const elapsedS = (last - first) / 1000;
  const ok = answers.filter((a) => a.status === 200 && a.code === undefined);
  const refused = answers.filter((a) => a.status === 429 && a.code === 'rate_limited');
  const windows: number[] = [];
  for (const a of ok) {
    const w = Math.floor((a.end - first) / 1000 / WINDOW_S);
    windows[w] = (windows[w] ?? 0) + 1;
  }
  const r: Result = {
    setting,
    offered,
    sent: answers.length,
    elapsedS,
    admitted: ok.length,
    refused: refused.length,
    other: answers.filter((a) => !ok.includes(a) && !refused.includes(a)),
    allowed: setting.burst + (setting.perMin / 60) * elapsedS,
    perNode: ports.map((_, n) => ({ sent: answers.filter((a) => a.node === n).length, admitted: ok.filter((a) => a.node === n).length })),
    windows: Array.from(windows, (n) => n ?? 0),
    ms429: refused.map((a) => a.end - a.start),
    ms200: ok.map((a) => a.end - a.start),
  };
  log(`${setting.user}: ${r.admitted} admitted of ${r.sent} in ${fmt(elapsedS, 2)} s; allowed ${fmt(r.allowed, 1)}: ${fmt(r.admitted / r.allowed, 3)} × (${r.other.length} other answers)`);
  return r;
}

// ---- the compute quota ---------------------------------------------------------------------

interface ComputeResult {
  admitted: number;
  refused: number;
  other: Answer[];
  elapsedS: number;
  /** compute.used_s as node A answers it once both nodes' counts are in the store. */
  usedS: number;
  /** The user's compute seconds a second while the calls ran (both nodes). */
  rate: number;
}

/** The user's compute.used_s as a node answers it, read twice: the first read starts the refresh of what the other node flushed. */
async function usedSeconds(port: number, key: string): Promise<number> {
  let used = NaN;
  for (let i = 0; i < 2; i++) {
    const r = await timed(port, 'GET', `/v1/users/${COMPUTE.user}/limits`, { headers: { authorization: `Simple ${key}` }, keep: true });
    if (r.status !== 200) throw new Error(`GET …/limits: ${r.status} ${r.body?.toString()}`);
    used = (JSON.parse(r.body!.toString()) as { compute: { used_s: number } }).compute.used_s;
    await sleep(1500);
  }
  return used;
}

async function measureCompute(ports: number[], key: string): Promise<ComputeResult> {
  log(`${COMPUTE.user}: ${COMPUTE.quotaS} compute seconds a month; ${COMPUTE.clients} clients calling a ${COMPUTE.sleepMs} ms algorithm through both nodes until refused`);
  // Each client back to back until refused (120 s at most).
  const answers = await offer(ports, key, Infinity, 120, { algorithm: 'Sleep', input: String(COMPUTE.sleepMs), clients: COMPUTE.clients, untilRefused: true });
  const first = Math.min(...answers.map((a) => a.start));
  const last = Math.max(...answers.map((a) => a.end));
  const ok = answers.filter((a) => a.status === 200 && a.code === undefined);
  const refused = answers.filter((a) => a.status === 429 && a.code === 'compute_quota_exceeded');
  // Both nodes' counts flushed (every second) before the store is read.
  await sleep(SEEN_LATE_S * 1000);
  const usedS = await usedSeconds(ports[0]!, key);
  const lastAdmitted = Math.max(...ok.map((a) => a.end));
  const r: ComputeResult = { admitted: ok.length, refused: refused.length, other: answers.filter((a) => !ok.includes(a) && !refused.includes(a)), elapsedS: (last - first) / 1000, usedS, rate: usedS / ((lastAdmitted - first) / 1000) };
  log(`${COMPUTE.user}: ${r.admitted} admitted, ${r.refused} refused, used ${fmt(usedS, 1)} s of ${COMPUTE.quotaS} (${r.other.length} other answers)`);
  return r;
}

function computeReport(r: ComputeResult): string[] {
  const over = r.usedS - COMPUTE.quotaS;
  const underWay = (COMPUTE.clients * COMPUTE.sleepMs) / 1000;
  // What the design allows: the calls under way when the quota is reached, and the other node's
  // seconds of the last flush and refresh (half the user's rate, the clients alternating).
  const allowed = underWay + (r.rate / 2) * SEEN_LATE_S;
  return [
    '',
    '**The compute quota across the two nodes:**',
    '',
    "| quota | used (store) | over | over ÷ quota | the design's bound (calls under way + the other node's last 2 s) | within it | admitted | refused (429 `compute_quota_exceeded`) | other |",
    '|---:|---:|---:|---:|---:|---|---:|---:|---:|',
    `| ${COMPUTE.quotaS} s | ${fmt(r.usedS, 1)} s | ${fmt(over, 1)} s | ${pct(over / COMPUTE.quotaS, 1)} | ${fmt(allowed, 1)} s (${fmt(underWay, 1)} + ${fmt(r.rate / 2, 1)} × ${SEEN_LATE_S}) | ${verdict(over <= allowed && r.other.length === 0)} | ${r.admitted} | ${r.refused} | ${r.other.length} |`,
    '',
    `- ${COMPUTE.clients} clients calling an algorithm that sleeps ${COMPUTE.sleepMs} ms, back to back, alternating between the nodes, until each was refused; ` +
      `the user spent ${fmt(r.rate, 1)} compute seconds a second while they ran (${fmt(r.elapsedS, 1)} s in all). The month ends over the quota by about ${fmt(over / Math.max(r.rate, 1e-9), 2)} s of the user's spending: ` +
      'a constant of the design, not a share of the quota (on a quota of hours, a fraction of a per cent).',
  ];
}

// ---- report --------------------------------------------------------------------------------

function report(results: Result[], capacity: number): string[] {
  const lines = [
    '| Setting | offered | sent | admitted (200) | refused (429 `rate_limited`) | other | allowed (burst + rate × elapsed) | admitted ÷ allowed | target | result | not given (slack) |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|',
  ];
  for (const r of results) {
    const ratio = r.admitted / r.allowed;
    lines.push(
      `| ${fmt(r.setting.perMin, 0)}/min, burst ${r.setting.burst}, ${fmt(r.elapsedS, 2)} s | ${fmt(r.sent / r.elapsedS, 0)} calls/s (${fmt(r.sent / r.elapsedS / (r.setting.perMin / 60), 1)} × the rate) | ${r.sent} | ${r.admitted} | ${r.refused} | ${r.other.length} | ${fmt(r.allowed, 1)} | ${fmt(ratio, 3)} | ≤ ${fmt(TARGET, 2)} | ${verdict(ratio <= TARGET && r.other.length === 0)} | ${pct(Math.max(0, 1 - ratio), 1)} |`,
    );
  }
  lines.push(
    '',
    `- **Capacity:** with no limit in the way, the two nodes answered ${fmt(capacity, 0)} Echo calls/s (the owner's, ${CLIENTS} clients in a closed loop, ${CAPACITY_S} s, just before the settings). ` +
      'A setting whose rate comes near that is bound by the machine as much as by the limiter: what it did not admit is then not the limiter\'s slack alone.',
  );
  for (const r of results) {
    const perWindow = (r.setting.perMin / 60) * WINDOW_S;
    const lastS = r.elapsedS - (r.windows.length - 1) * WINDOW_S;
    const others = new Map<string, number>();
    for (const a of r.other) others.set(`${a.status} ${a.code ?? ''}`.trim(), (others.get(`${a.status} ${a.code ?? ''}`.trim()) ?? 0) + 1);
    lines.push(
      `- **${fmt(r.setting.perMin, 0)}/min** (the rate is ${pct(r.setting.perMin / 60 / capacity)} of the capacity)**:** admitted by node A ${r.perNode[0]!.admitted} (${pct(r.perNode[0]!.admitted / Math.max(1, r.admitted))}) of ${r.perNode[0]!.sent} sent to it, by node B ${r.perNode[1]!.admitted} (${pct(r.perNode[1]!.admitted / Math.max(1, r.admitted))}) of ${r.perNode[1]!.sent}; ` +
        `admitted per ${WINDOW_S} s window (the rate gives ${fmt(perWindow, 0)} a window, the burst once): ${r.windows.join(', ')}${lastS < WINDOW_S - 0.05 ? ` (the last window ${fmt(lastS, 2)} s)` : ''}; ` +
        `429 answered in p50 ${fmt(percentile(r.ms429, 50), 1)} ms, p99 ${fmt(percentile(r.ms429, 99), 1)} ms; 200 in p50 ${fmt(percentile(r.ms200, 50), 1)} ms, p99 ${fmt(percentile(r.ms200, 99), 1)} ms` +
        (others.size > 0 ? `; other answers: ${[...others].map(([k, n]) => `${n} × ${k}`).join(', ')}` : '') +
        '.',
    );
  }
  lines.push('');
  return lines;
}

// ---- main ----------------------------------------------------------------------------------

async function main(): Promise<void> {
  const missing = postgresAvailable();
  if (missing) throw new Error(missing);
  const t0 = performance.now();
  const load0 = os.loadavg()[0]!;
  fs.mkdirSync(bench.work, { recursive: true });

  log('starting PostgreSQL and s3rver');
  const [pg, s3] = await Promise.all([startPostgres(), startS3(['bench'])]);
  bench.defer(() => pg.stop());
  bench.defer(() => s3.stop());
  const env = {
    ALGOHOST_DATABASE_URL: await createDatabase(pg.adminUrl, 'ratelimit'),
    ALGOHOST_BLOBS: `s3://bench/r?endpoint=${encodeURIComponent(s3.endpoint)}&force_path_style=true`,
    AWS_ACCESS_KEY_ID: S3RVER_KEY.access_key_id,
    AWS_SECRET_ACCESS_KEY: S3RVER_KEY.secret_access_key,
    ALGOHOST_LOG_LEVEL: 'error',
  };
  log('starting two API nodes on them');
  const nodes = await Promise.all([startNode('node-a', env), startNode('node-b', env)]);
  const ports = nodes.map((n) => n.port);

  const keys = await createUsers(env);
  const ownerKey = keys.get('owner')!;
  await release(api(`http://127.0.0.1:${ports[0]}`, ownerKey), 'owner', 'Echo', { 'src/index.js': 'export function apply(input) { return input; }\n' }, { settings: { language: 'javascript' } });
  await release(api(`http://127.0.0.1:${ports[0]}`, ownerKey), 'owner', 'Sleep', { 'src/index.js': 'export async function apply(input) { await new Promise((r) => setTimeout(r, Number(input))); return input; }\n' }, { settings: { language: 'javascript' } });
  // Warm both nodes' workers for Echo (the owner has no limits): CLIENTS clients, closed loop, untimed.
  await offer(ports, ownerKey, Infinity, QUICK ? 2 : 5);

  const idleAtStart = await waitForQuiet(QUICK ? 2000 : 30_000, log);
  const pgPid = postmasterPid(pg.dir);
  const ours = () => [process.pid, ...nodes.map((n) => n.pid), s3.pid, ...(pgPid ? [pgPid] : [])].reduce((n, p) => n + treeCpuAll(p), 0);
  const noise = noiseMeter(ours);
  // What the two nodes serve with no limit in the way (the owner's calls, closed loop): a
  // setting whose rate comes near it measures the machine as much as the limiter.
  const cap = await offer(ports, ownerKey, Infinity, CAPACITY_S);
  const capacity = cap.filter((a) => a.status === 200 && a.code === undefined).length / ((Math.max(...cap.map((a) => a.end)) - Math.min(...cap.map((a) => a.start))) / 1000);
  if (cap.some((a) => a.status !== 200)) throw new Error(`the owner's calls were refused: ${cap.find((a) => a.status !== 200)!.status}`);
  log(`capacity: ${fmt(capacity, 0)} calls/s through both nodes, no limits, ${CLIENTS} clients`);
  await sleep(1000);
  const results: Result[] = [];
  for (const s of SETTINGS) {
    results.push(await measure(s, ports, keys.get(s.user)!));
    await sleep(1000);
  }
  const compute = await measureCompute(ports, keys.get(COMPUTE.user)!);
  const noiseLine = noise();
  const seconds = (performance.now() - t0) / 1000;

  writeReport({
    name: 'ratelimit',
    section: SECTION,
    heading: '### Rate limits across two API nodes (`npm run bench:ratelimit`)',
    lines: [...report(results, capacity), ...computeReport(compute)],
    setup: [
      '- **Setup:** a shared deployment on loopback: a throwaway PostgreSQL 15 (test/helpers/postgres.ts), s3rver, and two `algohost serve` nodes (A and B), each with its own home, on the same database and bucket; the limits on the database (src/limits/shared.ts: a node takes a quarter second of the rate at a time, within the burst, and drops what it has not spent in 1 s). ' +
        `One user per setting, with limits of their own written to the store as \`algohost user limits NAME --calls-per-min N --burst N\` writes them, calling an echo algorithm (Node) of another user's, warmed on both nodes beforehand.`,
      `- **Load:** ${CLIENTS} clients (node:http, keep-alive), each alternating between the nodes and paced so that together they send ${OFFER} × the rate (a client whose answer comes late sends its next at once), for ${SECONDS} s per setting, one setting after the other. ` +
        'Allowed = burst + rate × elapsed, elapsed from the first request\'s start to the last answer\'s end (the most one bucket could admit in that time); every answer counted by its status and `error.code`.',
    ],
    run: { seconds, load0, idleAtStart, noise: noiseLine },
    log,
  });
}

await bench.run(main);
