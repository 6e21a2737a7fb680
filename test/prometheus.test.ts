/**
 * A real Prometheus (Debian's `prometheus`) scrapes every node of a test cluster (two API
 * nodes, two worker nodes: test/helpers/cluster.ts), and its PromQL answers show that every
 * target is up and that the calls made here were counted, per node (docs/metrics.md).
 * Runs under `npm run test:cluster`; skips, saying why, without the binary.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { callAlgo, release } from './helpers/algorithms.ts';
import { CLUSTER } from './helpers/backends.ts';
import { sleep } from './helpers/process.ts';
import { listenMetrics } from '../src/http/metrics.ts';

const PROMETHEUS = '/usr/bin/prometheus';
const skip = !CLUSTER
  ? 'scrapes a cluster: runs in test:cluster'
  : !fs.existsSync(PROMETHEUS)
    ? `no ${PROMETHEUS} to scrape with (apt-get install prometheus; .ci/run installs it)`
    : false;

const TOKEN = crypto.randomBytes(24).toString('hex');
/** How long Prometheus has to see everything (it scrapes every second). */
const WAIT_MS = 90_000;

let s: TestServer | undefined;
let listener: Awaited<ReturnType<typeof listenMetrics>> | undefined;
let prometheus: ChildProcess | undefined;
let dir: string | undefined;

/** A port free a moment ago on loopback (Prometheus takes no port 0). */
async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** `host:port` of a metrics URL a node printed. */
function target(url: string): string {
  return new URL(url).host;
}

before(async () => {
  if (skip) return;
  s = await startServer({ env: { ALGOHOST_METRICS_ADDR: '127.0.0.1:0', ALGOHOST_METRICS_TOKEN: TOKEN } });
  // The in-process API node's listener, as `algohost serve` starts it (main.ts).
  listener = await listenMetrics(s.services.metrics, s.services.config.metricsAddr!, console);
});

after(async () => {
  if (prometheus?.pid !== undefined && prometheus.exitCode === null) {
    const exited = new Promise((resolve) => prometheus!.once('exit', resolve));
    process.kill(prometheus.pid, 'SIGKILL');
    await exited;
  }
  listener?.close();
  await s?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test('a real Prometheus sees every node up, and the calls counted per node', { skip }, async () => {
  const cluster = s!.cluster!;
  assert.ok(cluster.second, 'the second API node');
  const second = cluster.second;
  // Every node says where its metrics are in its ready line.
  const workerTargets = cluster.workers.map((w, i) => {
    const m = /metrics at (http:\/\/\S+)/.exec(w.output());
    assert.ok(m, `worker ${i}'s ready line names its metrics listener:\n${w.output()}`);
    return target(m[1]!);
  });
  const m2 = /metrics: (http:\/\/\S+\/metrics)/.exec(second.stderr());
  assert.ok(m2, `the second API node's ready lines name its metrics listener:\n${second.stderr()}`);
  const nodes: Record<string, string> = { 'api-1': target(listener!.url), 'api-2': target(m2[1]!), 'worker-1': workerTargets[0]!, 'worker-2': workerTargets[1]! };

  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-prometheus-'));
  const config = [
    'global:',
    '  scrape_interval: 1s',
    '  scrape_timeout: 1s',
    'scrape_configs:',
    '  - job_name: algohost',
    '    static_configs:',
    ...Object.entries(nodes).flatMap(([node, t]) => [`      - targets: ['${t}']`, `        labels: { node: '${node}' }`]),
    // The public port of the first API node, with the token (Prometheus's own Bearer support).
    '  - job_name: algohost-public',
    '    authorization:',
    `      credentials: '${TOKEN}'`,
    '    static_configs:',
    `      - targets: ['${new URL(s!.node).host}']`,
    "        labels: { node: 'api-1' }",
    '',
  ].join('\n');
  fs.writeFileSync(path.join(dir, 'prometheus.yml'), config);
  const port = await freePort();
  let output = '';
  prometheus = spawn(PROMETHEUS, ['--config.file', path.join(dir, 'prometheus.yml'), '--storage.tsdb.path', path.join(dir, 'data'), '--web.listen-address', `127.0.0.1:${port}`, '--log.level', 'warn'], { stdio: ['ignore', 'pipe', 'pipe'] });
  for (const stream of [prometheus.stdout!, prometheus.stderr!]) stream.setEncoding('utf8').on('data', (t: string) => (output += t));

  // Calls while Prometheus starts: 3 on the first API node, 2 on the second, straight to each.
  const key = await s!.user('alice');
  await release(api(s!.url, key), 'alice', 'Echo', { 'src/index.js': 'export const apply = (input) => input;\n' }, { settings: { language: 'javascript' } });
  const calls: Record<string, number> = { 'api-1': 3, 'api-2': 2 };
  for (const [node, base] of [['api-1', s!.node], ['api-2', second.url]] as const) {
    for (let i = 0; i < calls[node]!; i++) assert.equal((await json(await callAlgo(api(base, key), 'alice/Echo', `${node}-${i}`))).result, `${node}-${i}`);
  }

  const query = async (promql: string): Promise<{ metric: Record<string, string>; value: [number, string] }[]> => {
    const res = await fetch(`http://127.0.0.1:${port}/api/v1/query?query=${encodeURIComponent(promql)}`);
    const body = await json(res);
    assert.equal(body.status, 'success', JSON.stringify(body));
    return body.data.result;
  };
  const byNode = (result: { metric: Record<string, string>; value: [number, string] }[]) => Object.fromEntries(result.map((r) => [r.metric.node!, Number(r.value[1])]));

  let up: Record<string, number> = {};
  let counted: Record<string, number> = {};
  let ran: Record<string, number> = {};
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    assert.equal(prometheus.exitCode, null, `prometheus exited:\n${output}`);
    try {
      up = byNode(await query('sum by (node) (up{job="algohost"})'));
      counted = byNode(await query('sum by (node) (algohost_calls_total{job="algohost", outcome="success"})'));
      ran = byNode(await query('sum by (node) (algohost_worker_wait_seconds_count{job="algohost"})'));
      const publicUp = await query('up{job="algohost-public"}');
      const done =
        Object.keys(nodes).every((n) => up[n] === 1) &&
        publicUp[0]?.value[1] === '1' &&
        counted['api-1'] === 3 &&
        counted['api-2'] === 2 &&
        (ran['worker-1'] ?? 0) + (ran['worker-2'] ?? 0) === 5;
      if (done) break;
    } catch (err) {
      // Not answering yet (still starting): asked again below.
      if (!(err instanceof TypeError)) throw err;
    }
    if (Date.now() > deadline) {
      assert.fail(`within ${WAIT_MS / 1000} s Prometheus saw up ${JSON.stringify(up)}, calls ${JSON.stringify(counted)}, worker runs ${JSON.stringify(ran)}; its log:\n${output}`);
    }
    await sleep(500);
  }
  // Every target up; the calls counted where they were made, and run on the workers (all five,
  // between them as the API nodes chose): none counted twice, none lost.
  assert.deepEqual(up, { 'api-1': 1, 'api-2': 1, 'worker-1': 1, 'worker-2': 1 });
  // (Worker nodes show the series at 0: calls are counted where CallService runs, once.)
  assert.deepEqual(counted, { 'api-1': 3, 'api-2': 2, 'worker-1': 0, 'worker-2': 0 });
  assert.equal((ran['worker-1'] ?? 0) + (ran['worker-2'] ?? 0), 5);
  // The first calls started workers (cold starts, by runtime), and they are warm now.
  assert.ok(Number((await query('sum(algohost_worker_cold_starts_total{job="algohost", runtime="node"})'))[0]!.value[1]) >= 1);
  assert.ok(Number((await query('sum(algohost_workers{job="algohost", state="idle"})'))[0]?.value[1] ?? 0) >= 1);
  // Over the public port with the token, the same node's count.
  assert.equal(Number((await query('sum(algohost_calls_total{job="algohost-public", outcome="success"})'))[0]!.value[1]), 3);
  // The cluster's own: NATS round trips measured on every node, JetStream's queue from the API nodes.
  assert.equal((await query('algohost_nats_rtt_seconds{job="algohost"}')).length, 4);
  assert.deepEqual(Object.keys(byNode(await query('sum by (node) (algohost_async_queue_calls{job="algohost"})'))).sort(), ['api-1', 'api-2']);
});
