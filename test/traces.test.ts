/**
 * Traces (issue 25; docs/traces.md): a caller's W3C traceparent is continued (or one made),
 * carried through the API node, across NATS to the worker, into the algorithm's SDK requests,
 * async calls, builds and webhook deliveries; spans are exported over OTLP/HTTP (JSON) to a
 * receiver on loopback, which checks their parent/child chain; log lines carry the trace id.
 *
 * Under test:cluster the server is two API nodes behind a balancer and two worker nodes, every
 * one of them exporting to the same receiver: the chain then crosses processes and NATS.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { api, json, startServer, tempHome, type TestServer } from './helpers/server.ts';
import { callAlgo, release, upload } from './helpers/algorithms.ts';
import { startServerProcess } from './helpers/process.ts';
import { CLUSTER } from './helpers/backends.ts';
import { newSpanId, newTraceId, openTracer, parseTraceparent, type ExportSettings } from '../src/tracing.ts';
import type { OtelTracer } from '../src/tracingExport.ts';

interface ExportedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  /** OTLP's SpanKind: 1 internal, 2 server, 3 client, 4 producer, 5 consumer. */
  kind: number;
  attributes: Record<string, unknown>;
  /** The exporting node's resource attributes. */
  resource: Record<string, unknown>;
  status: number;
}

const SERVER = 2;
const CLIENT = 3;
const CONSUMER = 5;

type OtlpValue = { stringValue?: string; intValue?: string | number; doubleValue?: number; boolValue?: boolean };
function attrs(list: Array<{ key: string; value: OtlpValue }> | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const { key, value } of list ?? []) out[key] = value.stringValue ?? (value.intValue !== undefined ? Number(value.intValue) : undefined) ?? value.doubleValue ?? value.boolValue;
  return out;
}

/** An OTLP/HTTP receiver: takes POST /v1/traces with a JSON body (ExportTraceServiceRequest) and keeps every span; answers after `answerAfterMs`. */
async function otlpReceiver(answerAfterMs = 0) {
  const spans: ExportedSpan[] = [];
  const bodies: string[] = [];
  const contentTypes = new Set<string>();
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8').on('data', (c: string) => (body += c));
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/v1/traces') return void res.writeHead(404).end();
      contentTypes.add(String(req.headers['content-type']));
      bodies.push(body);
      // eslint-disable-next-line @typescript-eslint/no-explicit-any -- OTLP JSON, read field by field
      const doc = JSON.parse(body) as any;
      for (const rs of doc.resourceSpans ?? []) {
        const resource = attrs(rs.resource?.attributes);
        for (const ss of rs.scopeSpans ?? []) {
          for (const sp of ss.spans ?? []) {
            spans.push({ traceId: sp.traceId, spanId: sp.spanId, parentSpanId: sp.parentSpanId ?? '', name: sp.name, kind: sp.kind, attributes: attrs(sp.attributes), resource, status: sp.status?.code ?? 0 });
          }
        }
      }
      const answer = () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      if (answerAfterMs > 0) setTimeout(answer, answerAfterMs);
      else answer();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    spans,
    bodies,
    contentTypes,
    /** The spans of `traceId` once `done` says they are all there (batches come every 100 ms). */
    async until(traceId: string, done: (spans: ExportedSpan[]) => boolean, ms = 20_000): Promise<ExportedSpan[]> {
      const end = Date.now() + ms;
      for (;;) {
        const mine = spans.filter((s) => s.traceId === traceId);
        if (done(mine)) return mine;
        if (Date.now() > end) throw new Error(`the spans of trace ${traceId} did not all arrive; got:\n${mine.map((s) => `${s.name} ${s.spanId} <- ${s.parentSpanId}`).join('\n')}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

/** A caller's own trace: its traceparent and ids. */
function callerTrace() {
  const traceId = crypto.randomBytes(16).toString('hex');
  const spanId = crypto.randomBytes(8).toString('hex');
  return { traceId, spanId, header: `00-${traceId}-${spanId}-01` };
}

/** A webhook endpoint on loopback that records the headers it gets. */
async function hookReceiver() {
  const got: http.IncomingHttpHeaders[] = [];
  /** Each delivery's event (type, subject) and the traceparent it came with. */
  const events: { type: string; subject: string; traceparent: string }[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8').on('data', (c: string) => (body += c));
    req.on('end', () => {
      got.push(req.headers);
      const e = JSON.parse(body) as { type: string; subject: string };
      events.push({ type: e.type, subject: e.subject, traceparent: String(req.headers.traceparent) });
      res.writeHead(200).end('ok');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, got, events, close: () => new Promise<void>((r) => server.close(() => r())) };
}

/**
 * The webhook delivery of the event `type` about `subject` (received by `hook` within 20 s):
 * the span it names in its traceparent, as exported, which must be in `traceId`.
 */
async function deliverySpan(hook: Awaited<ReturnType<typeof hookReceiver>>, type: string, subject: RegExp, traceId: string): Promise<ExportedSpan> {
  const end = Date.now() + 20_000;
  let got: { traceparent: string } | undefined;
  while (!(got = hook.events.find((e) => e.type === type && subject.test(e.subject))) && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
  assert.ok(got, `a delivery of ${type} ${subject}; got ${JSON.stringify(hook.events)}`);
  const sent = parseTraceparent(got.traceparent);
  assert.ok(sent, got.traceparent);
  assert.equal(sent.traceId, traceId, `the delivery of ${type} ${subject} is in the trace of the change that made it`);
  const spans = await otlp.until(traceId, (t) => t.some((x) => x.spanId === sent.spanId));
  return spans.find((x) => x.spanId === sent.spanId)!;
}

/** Runs `fn` with a webhook subscription of alice's for `types`, deleted after. */
async function subscribed(types: string[], fn: (hook: Awaited<ReturnType<typeof hookReceiver>>) => Promise<void>): Promise<void> {
  const hook = await hookReceiver();
  const sub = await json(await alice('/v1/users/alice/subscriptions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ url: hook.url, types }) }));
  assert.ok(sub.id, JSON.stringify(sub));
  try {
    await fn(hook);
  } finally {
    await alice(`/v1/users/alice/subscriptions/${sub.id}`, { method: 'DELETE' });
    await hook.close();
  }
}

/** An algorithm that writes its input to a file through the SDK, and reads it back. */
const SDK_ALGO = `export async function apply(input, ctx) {
  await ctx.client.file('data://.my/traced/in.txt').put(String(input));
  return 'wrote ' + (await ctx.client.file('data://.my/traced/in.txt').getString());
}
`;
/** The same in Python, through the runner's own SDK (algohost.py). */
const SDK_PY = `import algohost

def apply(input):
    client = algohost.client()
    client.file('data://.my/traced/py.txt').put(str(input))
    return 'wrote ' + client.file('data://.my/traced/py.txt').getString()
`;

const byId = (spans: ExportedSpan[]) => new Map(spans.map((s) => [s.spanId, s]));

let otlp: Awaited<ReturnType<typeof otlpReceiver>>;
let s: TestServer;
let alice: ReturnType<typeof api>;

before(async () => {
  otlp = await otlpReceiver();
  s = await startServer({
    env: { OTEL_EXPORTER_OTLP_ENDPOINT: otlp.url, OTEL_BSP_SCHEDULE_DELAY: '100', OTEL_SERVICE_NAME: 'algohost-test', ALGOHOST_CONNECTOR_NETWORK: 'any', ALGOHOST_LOG_LEVEL: 'debug' },
    webhooks: { schedule: [0, 100, 200], timeoutMs: 2000 },
  });
  alice = api(s.url, await s.user('alice'));
  await alice('/v1/data/.my', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'traced' }) });
  await release(alice, 'alice', 'Traced', { 'src/index.js': SDK_ALGO }, { settings: { language: 'javascript' } });
});
after(async () => {
  await s?.close();
  await otlp?.close();
});

describe('traces exported over OTLP/HTTP', () => {
  test('a call continues the caller\'s trace: HTTP server span → (on a cluster: call → run on a worker) → the SDK requests\' server spans', async () => {
    const caller = callerTrace();
    const r = await callAlgo(alice, 'alice/Traced', 'hello', 'text/plain');
    assert.equal(r.status, 200);
    const traced = await alice('/v1/algo/alice/Traced', { method: 'POST', headers: { 'content-type': 'text/plain', traceparent: caller.header }, body: 'traced' });
    const body = await json(traced);
    assert.equal(body.result, 'wrote traced', JSON.stringify(body));

    // The request's span, (on a cluster) the call's and the run's, and three SDK requests (the put; a HEAD and a GET for the read).
    // The request's span ends last (once its answer is sent), so it may come in a later batch than the others.
    const isRequest = (x: ExportedSpan) => x.kind === SERVER && x.attributes['algohost.sdk'] === undefined && x.name === 'POST /v1/algo/*';
    const spans = await otlp.until(caller.traceId, (t) => t.filter((x) => x.attributes['algohost.sdk'] === true).length >= 3 && (!CLUSTER || t.some((x) => x.name === 'run')) && t.some(isRequest));
    const ids = byId(spans);
    const request = spans.find(isRequest);
    assert.ok(request, `no server span for the request in ${spans.map((x) => x.name).join(', ')}`);
    assert.equal(request.parentSpanId, caller.spanId, 'the server span is the caller\'s span\'s child');
    assert.equal(request.attributes['http.route'], '/v1/algo/*');
    assert.equal(request.attributes['http.response.status_code'], 200);
    assert.equal(request.resource['service.name'], 'algohost-test');

    // The span the SDK requests are children of: the run on the worker node, or, on one machine, the request's own.
    let parentOfSdk: ExportedSpan;
    if (CLUSTER) {
      const call = spans.find((x) => x.name === 'call alice/Traced');
      assert.ok(call);
      assert.equal(call.kind, CLIENT);
      assert.equal(call.parentSpanId, request.spanId);
      assert.equal(call.attributes['algohost.outcome'], 'result');
      assert.equal(call.attributes['algohost.algorithm'], 'alice/Traced');
      const run = spans.find((x) => x.name === 'run');
      assert.ok(run);
      assert.equal(run.kind, SERVER);
      assert.equal(run.parentSpanId, call.spanId, 'the run is the call\'s child');
      assert.equal(typeof run.attributes['algohost.worker_wait_ms'], 'number');
      // Exported by a worker node, another process than the API node that made the call.
      assert.equal(run.resource['algohost.role'], 'worker');
      assert.equal(call.resource['algohost.role'], 'api');
      assert.notEqual(run.resource['service.instance.id'], call.resource['service.instance.id']);
      parentOfSdk = run;
    } else {
      // One machine: the request's span is the call's; no span of their own for the dispatch and the run.
      assert.equal(request.resource['algohost.role'], 'all');
      assert.equal(request.attributes['algohost.algorithm'], 'alice/Traced');
      assert.equal(request.attributes['algohost.outcome'], 'result');
      assert.equal(typeof request.attributes['algohost.worker_wait_ms'], 'number');
      assert.equal(spans.some((x) => x.name === 'run' || x.name.startsWith('call ')), false);
      parentOfSdk = request;
    }

    // The algorithm's SDK requests, handled back on an API node, are the call's children.
    const sdk = spans.filter((x) => x.attributes['algohost.sdk'] === true);
    for (const x of sdk) {
      assert.equal(x.kind, SERVER);
      assert.equal(x.parentSpanId, parentOfSdk.spanId, `${x.name}'s parent is the ${parentOfSdk.name}`);
      assert.match(x.name, /^(PUT|GET|HEAD) \/v1\/connector\/\*$/);
    }
    // Every span but the first has its parent in the trace: one chain, nothing orphaned.
    for (const x of spans) if (x !== request) assert.ok(ids.has(x.parentSpanId), `${x.name}'s parent ${x.parentSpanId} is in the trace`);
    assert.deepEqual([...otlp.contentTypes], ['application/json']);
  });

  test('a Python algorithm\'s SDK requests carry the call\'s trace too', async () => {
    await release(alice, 'alice', 'TracedPy', { 'src/TracedPy.py': SDK_PY }, { settings: { language: 'python3' } });
    const caller = callerTrace();
    const body = await json(await alice('/v1/algo/alice/TracedPy', { method: 'POST', headers: { 'content-type': 'text/plain', traceparent: caller.header }, body: 'snake' }));
    assert.equal(body.result, 'wrote snake', JSON.stringify(body));
    const spans = await otlp.until(caller.traceId, (t) => t.filter((x) => x.attributes['algohost.sdk'] === true).length >= 3 && (!CLUSTER || t.some((x) => x.name === 'run')));
    const parent = CLUSTER ? spans.find((x) => x.name === 'run')! : spans.find((x) => x.parentSpanId === caller.spanId)!;
    const sdk = spans.filter((x) => x.attributes['algohost.sdk'] === true);
    for (const x of sdk) assert.equal(x.parentSpanId, parent.spanId, `${x.name}'s parent is the ${parent.name}`);
  });

  test('a request without a traceparent starts a trace of its own', async () => {
    const before = new Set(otlp.spans.map((x) => x.traceId));
    const r = await alice('/v1/algorithms/alice/Traced');
    assert.equal(r.status, 200);
    const end = Date.now() + 10_000;
    let mine: ExportedSpan | undefined;
    while (!mine && Date.now() < end) {
      mine = otlp.spans.find((x) => !before.has(x.traceId) && x.name === 'GET /v1/algorithms/:owner/:name');
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(mine, 'the request was traced');
    assert.equal(mine.parentSpanId, '');
    assert.match(mine.traceId, /^[0-9a-f]{32}$/);
  });

  test('an async call (output=void) runs in the caller\'s trace', async () => {
    const caller = callerTrace();
    const r = await alice('/v1/algo/alice/Traced?output=void', { method: 'POST', headers: { 'content-type': 'text/plain', traceparent: caller.header }, body: 'later' });
    const accepted = await json(r);
    assert.equal(accepted.async, true, JSON.stringify(accepted));
    const spans = await otlp.until(caller.traceId, (t) => t.some((x) => x.name === 'async alice/Traced') && t.filter((x) => x.attributes['algohost.sdk'] === true).length >= 3 && (!CLUSTER || t.some((x) => x.name === 'run')));
    const ids = byId(spans);
    const request = spans.find((x) => x.parentSpanId === caller.spanId)!;
    const consumer = spans.find((x) => x.name === 'async alice/Traced')!;
    assert.equal(consumer.kind, CONSUMER);
    assert.equal(consumer.parentSpanId, request.spanId, 'the async run is the accepting request\'s child');
    assert.equal(consumer.attributes['algohost.request_id'], accepted.request_id);
    if (CLUSTER) {
      const call = spans.find((x) => x.name === 'call alice/Traced')!;
      assert.equal(call.parentSpanId, consumer.spanId);
      assert.equal(ids.get(spans.find((x) => x.name === 'run')!.parentSpanId), call);
    } else assert.equal(consumer.attributes['algohost.outcome'], 'result');
    // Its SDK requests are in the trace too, under the run.
    for (const x of spans.filter((y) => y.attributes['algohost.sdk'] === true)) assert.ok(ids.has(x.parentSpanId));
  });

  test('a build is a span of the compile request\'s trace', async () => {
    await upload(alice, 'alice', 'Traced', { 'src/index.js': SDK_ALGO.replace("'wrote '", "'wrote: '") });
    const caller = callerTrace();
    const r = await alice('/v1/algorithms/alice/Traced/compile', { method: 'POST', headers: { traceparent: caller.header } });
    assert.equal(r.status, 200, await r.text());
    const spans = await otlp.until(caller.traceId, (t) => t.some((x) => x.name === 'build alice/Traced') && t.some((x) => x.kind === SERVER));
    const request = spans.find((x) => x.kind === SERVER)!;
    assert.equal(request.parentSpanId, caller.spanId);
    const build = spans.find((x) => x.name === 'build alice/Traced')!;
    assert.equal(build.parentSpanId, request.spanId);
    assert.equal(build.attributes['algohost.result'], 'succeeded');
  });

  test('a webhook delivery carries a traceparent of the upload\'s trace, and is a client span in it', async () => {
    const hook = await hookReceiver();
    try {
      const sub = await json(await alice('/v1/users/alice/subscriptions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ url: hook.url, types: ['data.file.created'] }) }));
      assert.ok(sub.id, JSON.stringify(sub));
      const caller = callerTrace();
      const put = await alice('/v1/data/.my/traced/hooked.txt', { method: 'PUT', headers: { 'content-type': 'text/plain', traceparent: caller.header }, body: 'x' });
      assert.equal(put.status, 200);
      const end = Date.now() + 20_000;
      while (hook.got.length === 0 && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
      assert.equal(hook.got.length >= 1, true, 'the delivery arrived');
      const sent = parseTraceparent(hook.got[0]!.traceparent);
      assert.ok(sent, `the delivery's traceparent: ${hook.got[0]!.traceparent}`);
      assert.equal(sent.traceId, caller.traceId, 'the delivery is in the upload\'s trace');
      const spans = await otlp.until(caller.traceId, (t) => t.some((x) => x.name === 'webhook delivery'));
      const delivery = spans.find((x) => x.name === 'webhook delivery')!;
      assert.equal(delivery.kind, CLIENT);
      assert.equal(delivery.spanId, sent.spanId, 'the receiver\'s parent is the delivery\'s span');
      const upload = spans.find((x) => x.kind === SERVER && x.parentSpanId === caller.spanId)!;
      assert.equal(delivery.parentSpanId, upload.spanId, 'the delivery is the upload\'s child');
      assert.equal(delivery.attributes['http.response.status_code'], 200);
      await alice(`/v1/users/alice/subscriptions/${sub.id}`, { method: 'DELETE' });
    } finally {
      await hook.close();
    }
  });

  test('the events of an algorithm\'s SDK writes, a trigger\'s run and its call continue their traces', async () => {
    await subscribed(['data.file.*', 'call.completed'], async (hook) => {
      const trigger = await json(
        await alice('/v1/users/alice/triggers', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ types: ['data.file.created'], path: 'data://.my/traced/trig/**', algorithm: 'alice/Traced', input: '{{name}}', output: 'data://.my/traced/trigout/{{name}}' }),
        }),
      );
      assert.ok(trigger.id, JSON.stringify(trigger));
      try {
        assert.equal((await alice('/v1/data/.my/traced', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'trig' }) })).status, 200);
        const caller = callerTrace();
        const put = await alice('/v1/data/.my/traced/trig/t1.txt', { method: 'PUT', headers: { 'content-type': 'text/plain', traceparent: caller.header }, body: 'x' });
        assert.equal(put.status, 200);
        const upload = (await otlp.until(caller.traceId, (t) => t.some((x) => x.kind === SERVER && x.parentSpanId === caller.spanId))).find((x) => x.parentSpanId === caller.spanId)!;
        // The trigger's run is the upload's child (the event's traceparent).
        const run = (await otlp.until(caller.traceId, (t) => t.some((x) => x.name === 'trigger run'))).find((x) => x.name === 'trigger run')!;
        assert.equal(run.kind, CONSUMER);
        assert.equal(run.parentSpanId, upload.spanId, 'the trigger run is the upload\'s child');
        // Its output's event: the trigger run's (its principal carries the run's trace).
        assert.equal((await deliverySpan(hook, 'data.file.created', /\/traced\/trigout\/t1\.txt$/, caller.traceId)).parentSpanId, run.spanId, 'the output\'s event continues the trigger run');
        // Its call.completed: the trigger run's.
        assert.equal((await deliverySpan(hook, 'call.completed', /alice\/Traced/, caller.traceId)).parentSpanId, run.spanId, 'call.completed continues the trigger run');
        // What the algorithm wrote through the SDK: the SDK request's (its own server span, in the run's trace).
        const sdkWrite = await deliverySpan(hook, 'data.file.updated', /\/traced\/in\.txt$/, caller.traceId);
        const sdkPut = (await otlp.until(caller.traceId, (t) => t.some((x) => x.spanId === sdkWrite.parentSpanId))).find((x) => x.spanId === sdkWrite.parentSpanId)!;
        assert.equal(sdkPut.attributes['algohost.sdk'], true, `the SDK write's event is the SDK request's child, not ${sdkPut.name}'s`);
        assert.equal(sdkPut.name, 'PUT /v1/connector/*');
      } finally {
        await alice(`/v1/users/alice/triggers/${trigger.id}`, { method: 'DELETE' });
      }
    });
  });

  test('an async call\'s call.completed and a build\'s event continue the async run\'s and the build\'s spans', async () => {
    await subscribed(['call.completed', 'algorithm.build.succeeded'], async (hook) => {
      const caller = callerTrace();
      const accepted = await json(await alice('/v1/algo/alice/Traced?output=void', { method: 'POST', headers: { 'content-type': 'text/plain', traceparent: caller.header }, body: 'evented' }));
      assert.equal(accepted.async, true, JSON.stringify(accepted));
      const consumer = (await otlp.until(caller.traceId, (t) => t.some((x) => x.name === 'async alice/Traced'))).find((x) => x.name === 'async alice/Traced')!;
      assert.equal((await deliverySpan(hook, 'call.completed', /alice\/Traced/, caller.traceId)).parentSpanId, consumer.spanId, 'call.completed continues the async run');

      await upload(alice, 'alice', 'Traced', { 'src/index.js': SDK_ALGO.replace("'wrote '", "'wrote (evented) '") });
      const compiler = callerTrace();
      const r = await alice('/v1/algorithms/alice/Traced/compile', { method: 'POST', headers: { traceparent: compiler.header } });
      assert.equal(r.status, 200, await r.text());
      const build = (await otlp.until(compiler.traceId, (t) => t.some((x) => x.name === 'build alice/Traced'))).find((x) => x.name === 'build alice/Traced')!;
      assert.equal((await deliverySpan(hook, 'algorithm.build.succeeded', /^algo:\/\/alice\/Traced\//, compiler.traceId)).parentSpanId, build.spanId, 'the build\'s event continues the build');
    });
  });

  test('on the cluster, the worker node and the other API node log the trace id of the calls they serve', { skip: !CLUSTER && 'only under test:cluster (the in-process node of the other runs logs nowhere)' }, async () => {
    const worked = new Map<string, string>();
    // Enough calls that both API nodes (the balancer alternates) and a worker have served some.
    for (let i = 0; i < 4; i++) {
      const caller = callerTrace();
      const r = await alice('/v1/algo/alice/Traced', { method: 'POST', headers: { 'content-type': 'text/plain', traceparent: caller.header }, body: `n${i}` });
      assert.equal(r.status, 200);
      worked.set(caller.traceId, `n${i}`);
    }
    const lines = (text: string) =>
      text
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Record<string, unknown>);
    const end = Date.now() + 5000;
    let workerLines: Record<string, unknown>[] = [];
    while (Date.now() < end) {
      workerLines = s.cluster!.workers.flatMap((w) => lines(w.output())).filter((l) => l.msg === 'ran a job' && worked.has(String(l.trace_id)));
      if (workerLines.length === worked.size) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(workerLines.length, worked.size, 'each call\'s job is logged on its worker with the call\'s trace id');
    const second = lines(s.cluster!.second!.stdout()).filter((l) => worked.has(String(l.trace_id)));
    assert.ok(second.some((l) => l.msg === 'incoming request'), 'the other API node logs its requests with their trace id');
    assert.ok(second.some((l) => l.msg === 'request completed'));
  });
});

describe('the export thread', () => {
  const settings = (url: string, o: Partial<ExportSettings> = {}): ExportSettings => ({
    url: `${url}/v1/traces`,
    headers: {},
    serviceName: 'export-thread-test',
    // Never by the timer: only a batch filling, or the close, sends.
    scheduleDelayMs: 600_000,
    maxQueueSize: 2048,
    maxExportBatchSize: 512,
    exportTimeoutMs: 30_000,
    sampler: { name: 'parentbased_always_on', ratio: 1 },
    ...o,
  });

  test('every span ended before the close is sent, with its parent, kind, status, attributes and the node\'s resource', async () => {
    const r = await otlpReceiver();
    try {
      const tracer = await openTracer(settings(r.url), { 'algohost.role': 'all' });
      const caller = { traceId: newTraceId(), spanId: newSpanId(), sampled: true };
      const made: { spanId: string; parent: string; name: string }[] = [];
      // 1,500 spans: two batches fill and go while spans are made, the rest only at the close.
      for (let i = 0; i < 750; i++) {
        const request = tracer.start('HTTP', 'server', caller, { 'http.request.method': 'POST', absent: undefined });
        const call = tracer.start('call alice/Echo', 'client', request, { 'algohost.depth': i });
        if (i % 2 === 1) call.fail('the worker is gone');
        call.end();
        request.rename('POST /v1/algo/*');
        request.set('http.response.status_code', 200);
        request.end();
        // Ended spans are final.
        request.set('http.response.status_code', 500);
        made.push({ spanId: request.spanId, parent: caller.spanId, name: 'POST /v1/algo/*' }, { spanId: call.spanId, parent: request.spanId, name: 'call alice/Echo' });
        if (i % 100 === 99) await new Promise((res) => setImmediate(res));
      }
      await tracer.close();
      const got = byId(r.spans);
      assert.equal(r.spans.length, 1500, 'every span made, once');
      for (const m of made) {
        const sp = got.get(m.spanId);
        assert.ok(sp, `span ${m.spanId} arrived`);
        assert.equal(sp.traceId, caller.traceId);
        assert.equal(sp.parentSpanId, m.parent);
        assert.equal(sp.name, m.name);
      }
      const requests = r.spans.filter((x) => x.kind === SERVER);
      const calls = r.spans.filter((x) => x.kind === CLIENT);
      assert.equal(requests.length, 750);
      assert.ok(requests.every((x) => x.attributes['http.response.status_code'] === 200 && x.attributes['http.request.method'] === 'POST' && !('absent' in x.attributes)));
      assert.equal(calls.filter((x) => x.status === 2).length, 375, 'failed spans have status ERROR');
      assert.equal(calls.filter((x) => x.status === 0).length, 375, 'the others UNSET');
      assert.ok(r.spans.every((x) => x.resource['service.name'] === 'export-thread-test' && x.resource['algohost.role'] === 'all'));
      // After the close, nothing more is sent: dropped and counted.
      tracer.start('late', 'internal', undefined).end();
      assert.equal((tracer as OtelTracer).dropped, 1);
    } finally {
      await r.close();
    }
  });

  test('a request is the OTLP/JSON the SDK\'s own serialiser writes for the same spans', async () => {
    const r = await otlpReceiver();
    try {
      const tracer = await openTracer(settings(r.url), { 'algohost.role': 'all', 'host.name': 'h\u00e9' });
      const caller = { traceId: newTraceId(), spanId: newSpanId(), sampled: true };
      const started = Date.now() - 5.25;
      // Every kind of value an attribute takes, strings that need escaping, a key set twice (the later wins).
      const values = { s: 'a "quoted" \\ line\nand \u2028, \u00e9, \ud83d\ude00', lone: '\ud800', i: 42, neg: -7, big: 2 ** 53, d: 0.125, tiny: 1e-7, nan: NaN, inf: -Infinity, t: true, f: false, twice: 'first' };
      const root = tracer.start('HTTP', 'server', undefined, values, started);
      root.set('twice', 'second');
      root.rename('POST /v1/algo/*');
      const child = tracer.start('call alice/Echo', 'client', caller, { 'algohost.depth': 1 });
      child.fail('the worker "w1" is gone');
      child.end();
      root.end();
      await tracer.close();
      assert.equal(r.bodies.length, 1);
      // eslint-disable-next-line @typescript-eslint/no-explicit-any -- OTLP JSON
      const ours = JSON.parse(r.bodies[0]!) as any;
      const sent = ours.resourceSpans[0].scopeSpans[0].spans as { spanId: string; startTimeUnixNano: string; endTimeUnixNano: string }[];
      assert.equal(sent.length, 2);
      // The same spans as the SDK's ReadableSpans, with the times the text gave (checked apart below).
      const { JsonTraceSerializer } = await import('@opentelemetry/otlp-transformer');
      const { resourceFromAttributes } = await import('@opentelemetry/resources');
      const resource = resourceFromAttributes({ 'service.name': 'export-thread-test', 'algohost.role': 'all', 'host.name': 'h\u00e9' });
      const hr = (nanos: string): [number, number] => [Number(nanos.slice(0, -9)), Number(nanos.slice(-9))];
      const readable = (sp: (typeof sent)[number], name: string, kind: number, parent: { traceId: string; spanId: string } | undefined, traceId: string, attributes: Record<string, unknown>, status: { code: number; message?: string }) => ({
        name,
        kind,
        spanContext: () => ({ traceId, spanId: sp.spanId, traceFlags: 1 }),
        parentSpanContext: parent && { traceId, spanId: parent.spanId, traceFlags: 1, isRemote: true },
        startTime: hr(sp.startTimeUnixNano),
        endTime: hr(sp.endTimeUnixNano),
        duration: [0, 0],
        status,
        attributes,
        links: [],
        events: [],
        ended: true,
        resource,
        instrumentationScope: { name: 'algohost' },
        droppedAttributesCount: 0,
        droppedEventsCount: 0,
        droppedLinksCount: 0,
      });
      const rootSent = sent.find((x) => x.spanId === root.spanId)!;
      const childSent = sent.find((x) => x.spanId === child.spanId)!;
      const sdk = JSON.parse(
        new TextDecoder().decode(
          JsonTraceSerializer.serializeRequest([
            readable(childSent, 'call alice/Echo', 2, caller, caller.traceId, { 'algohost.depth': 1 }, { code: 2, message: 'the worker "w1" is gone' }),
            readable(rootSent, 'POST /v1/algo/*', 1, undefined, root.traceId, { ...values, twice: 'second' }, { code: 0 }),
            // eslint-disable-next-line @typescript-eslint/no-explicit-any -- the SDK's ReadableSpan, field for field
          ] as any),
        ),
      );
      // Fields the SDK writes at their default values (zero counts, empty lists) are the same as absent in OTLP/JSON.
      const meaningful = (v: unknown): unknown => {
        if (Array.isArray(v)) return v.map(meaningful);
        if (v === null || typeof v !== 'object') return v;
        const out: Record<string, unknown> = {};
        for (const [k, x] of Object.entries(v)) if (x !== undefined && x !== 0 && !(Array.isArray(x) && x.length === 0)) out[k] = meaningful(x);
        return out;
      };
      // NaN and the infinities: JSON.stringify makes them null, which no collector reads as a number; ours are the protobuf JSON mapping's strings.
      const sdkRoot = sdk.resourceSpans[0].scopeSpans[0].spans[1];
      for (const a of sdkRoot.attributes) if (a.key === 'nan' || a.key === 'inf') a.value.doubleValue = a.key === 'nan' ? 'NaN' : '-Infinity';
      assert.deepEqual(meaningful(ours), meaningful(sdk));
      // Times: the given start to the nanosecond the float holds, the end after it.
      assert.equal(rootSent.startTimeUnixNano.slice(0, -6), String(Math.floor(started)));
      assert.ok(Math.abs(Number(rootSent.startTimeUnixNano.slice(-6)) - (started % 1) * 1e6) <= 1);
      assert.ok(BigInt(rootSent.endTimeUnixNano) > BigInt(rootSent.startTimeUnixNano) + 5_000_000n);
      assert.ok(BigInt(childSent.endTimeUnixNano) >= BigInt(childSent.startTimeUnixNano));
    } finally {
      await r.close();
    }
  });

  test('batches sent by the timer and by filling, while a slow collector holds the one before, lose and repeat nothing', async () => {
    const r = await otlpReceiver(25);
    try {
      // A batch of 100 fills every other post (the event loop posts 64 at a time); what is left
      // of it waits for the timer, which comes while the collector still holds the request before.
      const tracer = (await openTracer(settings(r.url, { scheduleDelayMs: 20, maxExportBatchSize: 100, maxQueueSize: 100_000 }))) as OtelTracer;
      const made = new Set<string>();
      for (let i = 0; i < 40; i++) {
        for (let j = 0; j < 64; j++) {
          const span = tracer.start('HTTP', 'server', undefined, { i, j });
          span.end();
          made.add(span.spanId);
        }
        await new Promise((res) => setTimeout(res, i % 8 === 7 ? 30 : 2));
      }
      await tracer.close();
      assert.equal(tracer.dropped, 0);
      assert.equal(r.spans.length, made.size, 'as many spans arrived as were made');
      assert.deepEqual(new Set(r.spans.map((x) => x.spanId)), made, 'each of them');
      assert.ok(r.bodies.length >= 26, `at least a request per 100 spans: ${r.bodies.length}`);
      assert.ok(r.bodies.every((b) => (JSON.parse(b) as { resourceSpans: { scopeSpans: { spans: unknown[] }[] }[] }).resourceSpans[0]!.scopeSpans[0]!.spans.length <= 100), 'no request holds more than a batch');
    } finally {
      await r.close();
    }
  });

  test('each OTEL_TRACES_SAMPLER decides as the SDK\'s sampler of that name', async () => {
    const { AlwaysOffSampler, AlwaysOnSampler, ParentBasedSampler, SamplingDecision, TraceIdRatioBasedSampler } = await import('@opentelemetry/sdk-trace-base');
    const { ROOT_CONTEXT, SpanKind, trace } = await import('@opentelemetry/api');
    const names = ['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'] as const;
    for (const name of names) {
      const ratio = 0.3;
      const root = name.endsWith('always_off') ? new AlwaysOffSampler() : name.endsWith('traceidratio') ? new TraceIdRatioBasedSampler(ratio) : new AlwaysOnSampler();
      const sdk = name.startsWith('parentbased_') ? new ParentBasedSampler({ root }) : root;
      const tracer = await openTracer(settings('http://127.0.0.1:9', { sampler: { name, ratio } }));
      try {
        let recorded = 0;
        for (let i = 0; i < 600; i++) {
          // Roots, and children of sampled and of unsampled parents from a caller.
          const parent = i % 3 === 0 ? undefined : { traceId: newTraceId(), spanId: newSpanId(), sampled: i % 3 === 1 };
          const traceId = parent?.traceId;
          const span = tracer.start('HTTP', 'server', parent);
          const context = parent === undefined ? ROOT_CONTEXT : trace.setSpanContext(ROOT_CONTEXT, { traceId: parent.traceId, spanId: parent.spanId, traceFlags: parent.sampled ? 1 : 0, isRemote: true });
          const expected = sdk.shouldSample(context, traceId ?? span.traceId, 'HTTP', SpanKind.SERVER, {}, []).decision === SamplingDecision.RECORD_AND_SAMPLED;
          assert.equal(span.recording, expected, `${name}, ${parent === undefined ? 'a root' : parent.sampled ? 'a sampled parent' : 'an unsampled parent'}`);
          assert.equal(span.sampled, expected);
          if (expected) recorded++;
        }
        if (name.endsWith('traceidratio')) assert.ok(recorded > 0 && recorded < 600, `${name} records some, not all: ${recorded}`);
      } finally {
        await tracer.close();
      }
    }
  });

  test('the export thread runs at a lower priority than the event loop (Linux: nice 10 more)', { skip: process.platform !== 'linux' }, async () => {
    const nice = (tid: string) => Number(fs.readFileSync(`/proc/self/task/${tid}/stat`, 'utf8').split(') ')[1]!.split(' ')[16]);
    const mine = nice(String(process.pid));
    const before = new Set(fs.readdirSync('/proc/self/task'));
    const tracer = await openTracer(settings('http://127.0.0.1:9'));
    try {
      let niced: string[] = [];
      for (let i = 0; i < 100 && niced.length === 0; i++) {
        await new Promise((res) => setTimeout(res, 20));
        niced = fs.readdirSync('/proc/self/task').filter((t) => !before.has(t) && nice(t) === Math.min(19, mine + 10));
      }
      assert.equal(niced.length, 1, 'one new thread, at nice +10');
      assert.equal(nice(String(process.pid)), mine, 'the event loop keeps its priority');
    } finally {
      await tracer.close();
    }
  });

  test('spans past the queue\'s size are dropped on the event loop, not queued without bound', async () => {
    const r = await otlpReceiver();
    try {
      const tracer = (await openTracer(settings(r.url, { maxQueueSize: 100, maxExportBatchSize: 50 }))) as OtelTracer;
      // A loop that never yields: the thread cannot say it took any, so past 100 waiting, spans are dropped.
      for (let i = 0; i < 1000; i++) tracer.start('HTTP', 'server', undefined).end();
      assert.equal(tracer.dropped, 900);
      await tracer.close();
      assert.equal(r.spans.length, 100, 'the 100 kept are sent');
    } finally {
      await r.close();
    }
  });
});

describe('log lines carry the trace id', () => {
  test('every line of a request on `algohost serve` carries its trace_id, continued from the caller, without exporting', async () => {
    // A server of its own that exports nothing: the trace context is carried all the same.
    const server = await startServerProcess({ home: tempHome(), env: { ALGOHOST_LOG_LEVEL: 'info' } });
    try {
      const caller = callerTrace();
      const r = await fetch(`${server.url}/v1/algorithms/nobody/Nothing`, { headers: { authorization: 'Simple simNOTAKEYNOTAKEYNOTAKEY12345', traceparent: caller.header } });
      assert.equal(r.status, 401);
      const other = await fetch(`${server.url}/health`);
      assert.equal(other.status, 200);
      await server.waitFor('stdout', /request completed[\s\S]*request completed/);
      const lines = server
        .stdout()
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      const mine = lines.filter((l) => l.reqId !== undefined && lines.some((m) => m.reqId === l.reqId && m.req && (m.req as { url: string }).url === '/v1/algorithms/nobody/Nothing'));
      assert.ok(mine.length >= 2, `the request's lines: ${JSON.stringify(mine)}`);
      for (const l of mine) {
        assert.equal(l.trace_id, caller.traceId, `${l.msg} carries the caller's trace id`);
        // Not exporting, the caller's span is the parent of whatever comes next.
        assert.equal(l.span_id, caller.spanId);
      }
      // A request without a traceparent gets a trace of its own.
      const health = lines.filter((l) => l.req && (l.req as { url: string }).url === '/health');
      assert.match(String(health[0]?.trace_id), /^[0-9a-f]{32}$/);
      assert.notEqual(health[0]?.trace_id, caller.traceId);
      // Lines outside any request (the start) carry none.
      assert.ok(lines.some((l) => l.trace_id === undefined));
    } finally {
      await server.kill();
    }
  });
});
