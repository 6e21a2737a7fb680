/**
 * Prometheus metrics (docs/metrics.md): a real server on port 0 with its metrics listener,
 * real calls, uploads and downloads, and the counters read back from the scraped text. The
 * same counts on a cluster, read by a real Prometheus: test/prometheus.test.ts.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { callAlgo, compile, release, upload } from './helpers/algorithms.ts';
import { CLUSTER } from './helpers/backends.ts';
import { parseMetrics, value, type Sample } from './helpers/metrics.ts';
import { listenMetrics } from '../src/http/metrics.ts';
import { ConfigError, loadConfig } from '../src/config.ts';

const TOKEN = crypto.randomBytes(24).toString('hex');
const ECHO = `export function apply(input) {
  if (input === 'fail') throw new Error('asked to fail');
  return input;
}
`;

let s: TestServer;
let alice: ReturnType<typeof api>;
let listener: Awaited<ReturnType<typeof listenMetrics>>;

async function scrape(): Promise<Sample[]> {
  const res = await fetch(listener.url);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
  return parseMetrics(await res.text());
}

before(async () => {
  s = await startServer({ env: { ALGOHOST_METRICS_ADDR: '127.0.0.1:0', ALGOHOST_METRICS_TOKEN: TOKEN, ALGOHOST_PRESTART_MAX_CPU: '100' } });
  // What `algohost serve` does with ALGOHOST_METRICS_ADDR (main.ts): the node's own listener.
  listener = await listenMetrics(s.services.metrics, s.services.config.metricsAddr!, console);
  alice = api(s.url, await s.user('alice'));
  await release(alice, 'alice', 'Echo', { 'src/index.js': ECHO }, { settings: { language: 'javascript' } });
});
after(async () => {
  listener?.close();
  await s?.close();
});

describe('what a node counts', { skip: CLUSTER ? 'calls are spread over two API nodes behind the balancer here: test/prometheus.test.ts counts them per node' : false }, () => {
  test('calls by outcome, with run time, worker wait and cold starts; requests by route pattern', async () => {
    const before = await scrape();
    // The first call after publishing starts a worker; the others find it warm.
    for (const input of ['a', 'b', 'c']) assert.equal((await json(await callAlgo(alice, 'alice/Echo', input))).result, input);
    const failed = await json(await callAlgo(alice, 'alice/Echo', 'fail'));
    assert.equal(failed.error.message, 'asked to fail');
    const now = await scrape();
    const delta = (name: string, labels: Record<string, string> = {}) => value(now, name, labels) - value(before, name, labels);

    assert.equal(delta('algohost_calls_total', { outcome: 'success' }), 3);
    assert.equal(delta('algohost_calls_total', { outcome: 'algorithm_error' }), 1);
    assert.equal(delta('algohost_calls_total', { outcome: 'timeout' }), 0);
    assert.equal(delta('algohost_call_run_seconds_count', { outcome: 'success' }), 3);
    assert.equal(delta('algohost_call_run_seconds_bucket', { outcome: 'success', le: '+Inf' }), 3);
    assert.ok(delta('algohost_call_run_seconds_sum', { outcome: 'success' }) > 0);
    assert.equal(delta('algohost_worker_wait_seconds_count'), 4);
    assert.equal(delta('algohost_worker_cold_starts_total', { runtime: 'node' }), 1);
    assert.equal(delta('algohost_worker_start_seconds_count', { runtime: 'node' }), 1);
    // Whichever path answered them (the direct one, here), under fastify's route pattern.
    assert.equal(delta('algohost_http_requests_total', { route: '/v1/algo/*', method: 'POST', status: '200' }), 4);
    assert.equal(delta('algohost_http_request_duration_seconds_count', { route: '/v1/algo/*', method: 'POST' }), 4);
    // Read from the pool when scraped: the worker is warm and idle now.
    assert.equal(value(now, 'algohost_workers', { state: 'idle' }), 1);
    assert.equal(value(now, 'algohost_workers', { state: 'busy' }), 0);
    assert.equal(value(now, 'algohost_pool_queue_depth'), 0);
    assert.ok(value(now, 'algohost_worker_free_slots') >= 1);
    // A Node call needed a worker: Node's spares are being kept (ALGOHOST_PRESTART, 2), ready within moments.
    const end = Date.now() + 20_000;
    let spares = value(now, 'algohost_worker_spares', { runtime: 'node' });
    while (spares < 2 && Date.now() < end) {
      await new Promise((r) => setTimeout(r, 100));
      spares = value(await scrape(), 'algohost_worker_spares', { runtime: 'node' });
    }
    assert.equal(spares, 2);
  });

  test('hosted data bytes in and out, builds by result, and no user, key or path in any label', async () => {
    const before = await scrape();
    assert.equal((await alice('/v1/data/.my', { method: 'POST', body: 'private-folder', headers: { 'content-type': 'text/plain' } })).status, 200);
    // Over 64 KiB: read as a stream (a small one, or a small range, is read whole into memory).
    const bytes = crypto.randomBytes(200_000);
    assert.equal((await alice('/v1/data/.my/private-folder/secret-name.bin', { method: 'PUT', body: bytes })).status, 200);
    const got = await alice('/v1/data/.my/private-folder/secret-name.bin');
    assert.equal(got.status, 200);
    assert.equal(Buffer.compare(Buffer.from(await got.arrayBuffer()), bytes), 0);
    // A range of it: what is served, not the file's size.
    const part = await alice('/v1/data/.my/private-folder/secret-name.bin', { headers: { range: 'bytes=0-99' } });
    assert.equal(part.status, 206);
    assert.equal((await part.arrayBuffer()).byteLength, 100);
    await assert.rejects(compile(alice, 'alice', 'Nothing'));
    // A new source (the same one again would answer the build it has).
    assert.equal((await upload(alice, 'alice', 'Echo', { 'src/index.js': `${ECHO}// again\n` })).status, 200);
    await compile(alice, 'alice', 'Echo');
    const now = await scrape();
    const delta = (name: string, labels: Record<string, string> = {}) => value(now, name, labels) - value(before, name, labels);

    assert.equal(delta('algohost_data_bytes_total', { direction: 'in' }), 200_000);
    assert.equal(delta('algohost_data_bytes_total', { direction: 'out' }), 200_100);
    assert.equal(delta('algohost_http_requests_total', { route: '/v1/data/*', method: 'PUT', status: '200' }), 1);
    assert.equal(delta('algohost_http_requests_total', { route: '/v1/data/*', method: 'GET', status: '200' }), 1);
    assert.equal(delta('algohost_http_requests_total', { route: '/v1/data/*', method: 'GET', status: '206' }), 1);
    // An algorithm that does not exist is a 404 of its route, not a series of its own.
    assert.equal(delta('algohost_http_requests_total', { route: '/v1/algorithms/:owner/:name/compile', method: 'POST', status: '404' }), 1);
    assert.equal(delta('algohost_builds_total', { result: 'succeeded' }), 1);
    assert.equal(delta('algohost_build_duration_seconds_count', { result: 'succeeded' }), 1);

    const text = (await (await fetch(listener.url)).text()).toLowerCase();
    for (const secret of ['alice', 'echo', 'private-folder', 'secret-name', 'sim']) assert.ok(!text.includes(`"${secret}`) && !text.includes(`/${secret}`), `${secret} appears in the metrics`);
    // The process's own, from prom-client.
    assert.ok(value(now, 'process_cpu_user_seconds_total') > 0);
    assert.ok(value(now, 'nodejs_heap_size_total_bytes') > 0);
    if (s.services.store.dialect === 'postgres') assert.ok(value(now, 'algohost_db_connections', { state: 'idle' }) + value(now, 'algohost_db_connections', { state: 'in_use' }) >= 1);
    else assert.ok(!now.some((x) => x.name === 'algohost_db_connections'), 'SQLite has no pool to show');
    assert.equal(value(now, 'algohost_async_queue_calls', { state: 'running' }), 0);
  });

  test('an unmatched URL counts under one route, whatever its path', async () => {
    const before = await scrape();
    for (const p of ['/nothing/1', '/nothing/2', '/v1/nothing-here']) assert.equal((await alice(p)).status, 404);
    const now = await scrape();
    assert.equal(value(now, 'algohost_http_requests_total', { route: 'unmatched', method: 'GET', status: '404' }) - value(before, 'algohost_http_requests_total', { route: 'unmatched', method: 'GET', status: '404' }), 3);
    assert.ok(!now.some((x) => Object.values(x.labels).some((v) => v.includes('nothing'))));
  });
});

describe('where the metrics are served', () => {
  test('the public port serves /metrics to the Bearer token only', async () => {
    const none = await fetch(`${s.node}/metrics`);
    assert.equal(none.status, 401);
    assert.equal(none.headers.get('www-authenticate'), 'Bearer realm="metrics"');
    assert.equal((await json(none)).error.code, 'auth_required');
    const wrong = await fetch(`${s.node}/metrics`, { headers: { authorization: `Bearer ${TOKEN.slice(1)}x` } });
    assert.equal(wrong.status, 401);
    assert.equal((await json(wrong)).error.code, 'invalid_authorization');
    // An API key is not the token.
    assert.equal((await alice('/metrics')).status, 401);
    const ok = await fetch(`${s.node}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(ok.status, 200);
    assert.ok(parseMetrics(await ok.text()).some((x) => x.name === 'algohost_calls_total'));
  });

  test('the listener serves GET /metrics and nothing else', async () => {
    const other = await fetch(listener.url.replace('/metrics', '/health'));
    assert.equal(other.status, 404);
    assert.equal((await json(other)).error.code, 'route_not_found');
    assert.equal((await fetch(listener.url, { method: 'POST' })).status, 404);
  });

  test('without a token the public port has no /metrics, and without either setting nothing is counted', async () => {
    const plain = await startServer();
    const onlyAddr = await startServer({ env: { ALGOHOST_METRICS_ADDR: '127.0.0.1:0' } });
    try {
      assert.equal(plain.services.metrics.enabled, false);
      for (const node of [plain.node, onlyAddr.node]) {
        const res = await fetch(`${node}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
        assert.equal(res.status, 404);
        assert.equal((await json(res)).error.code, 'route_not_found');
      }
      assert.equal(onlyAddr.services.metrics.enabled, true);
    } finally {
      await plain.close();
      await onlyAddr.close();
    }
  });

  test('settings: HOST:PORT, and a token long enough', () => {
    const home = { home: '/tmp/x' };
    assert.deepEqual(loadConfig(home, { ALGOHOST_METRICS_ADDR: '127.0.0.1:9464' }).metricsAddr, { host: '127.0.0.1', port: 9464 });
    assert.deepEqual(loadConfig(home, { ALGOHOST_METRICS_ADDR: '[::1]:0' }).metricsAddr, { host: '::1', port: 0 });
    for (const bad of ['9464', '127.0.0.1', 'host:port', '127.0.0.1:70000', ':9464']) assert.throws(() => loadConfig(home, { ALGOHOST_METRICS_ADDR: bad }), ConfigError, bad);
    assert.throws(() => loadConfig(home, { ALGOHOST_METRICS_TOKEN: 'short' }), /at least 32/);
    assert.throws(() => loadConfig(home, { ALGOHOST_METRICS_TOKEN: `${TOKEN} x` }), ConfigError);
    assert.equal(loadConfig(home, { ALGOHOST_METRICS_TOKEN: TOKEN }).metricsToken, TOKEN);
  });
});
