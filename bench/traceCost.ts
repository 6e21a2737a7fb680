/**
 * What traces add to one warm call, in CPU, measured alone (no server, no workers), so that a
 * loaded machine's noise does not hide it (as bench/metricsCost.ts does for metrics):
 *
 *   - off (the default): what every request and call does with tracing off: the caller's
 *     traceparent parsed (or a trace made), the span put on the request, the job's traceparent
 *     made, the request logger's bindings (no AsyncLocalStorage: see src/tracing.ts);
 *   - exported: the same with an exporting tracer (the OpenTelemetry SDK, OTLP/HTTP JSON): the
 *     spans of a warm call (one machine: the request's, which takes the call's attributes; an
 *     API node: the request's and the dispatch's) with their attributes, and their export: every span is sent before the clock stops
 *     (the tracer is closed, which flushes), so serialising and sending count too; the sink (the
 *     collector) is a process of its own. The export queue (OTEL_BSP_MAX_QUEUE_SIZE) is made big enough that it
 *     drops nothing (calls here come far faster than a server's), and batches are sent every
 *     10 ms rather than 5 s, so they keep up: every span's export is paid within the run.
 *   - exported with one trace in ten sampled (OTEL_TRACES_SAMPLER=parentbased_traceidratio,
 *     OTEL_TRACES_SAMPLER_ARG=0.1).
 *
 *   node --import ./bin/loader.mjs bench/traceCost.ts [--calls N] [--reps N]
 *
 * Prints CPU ns per call, the whole process's and its event loop's thread's (exporting runs on a thread of
 * its own: tracingExport.ts), median of the repetitions; writes nothing to docs/. Compare with the
 * server's CPU µs per warm call in docs/performance.md.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { createInterface } from 'node:readline';
import { NO_TRACING, openTracer, parseTraceparent, requestSpan, setRequestSpan, traceBindings, traceparentOf, type ExportSettings, type Tracer } from '../src/tracing.ts';
import { argOf } from './baseTree.ts';
import { median } from './load.ts';

const CALLS = Number(argOf('--calls') ?? 100_000);
// Every span made is exported (none dropped by the queues, made big enough here): the whole
// cost of exporting is counted, not the cost of dropping.
const QUEUE = { maxQueueSize: 100_000_000, maxExportBatchSize: 2048, exportTimeoutMs: 30_000 };
const REPS = Number(argOf('--reps') ?? 7);
const CALLER = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

/**
 * The collector: an OTLP/HTTP sink in a process of its own (its work is not this process's),
 * counting the spans it gets; asked for the count over its stdin/stdout.
 */
const SINK = `
let spans = 0;
const server = require('node:http').createServer((req, res) => {
  let body = '';
  req.setEncoding('utf8').on('data', (c) => (body += c));
  req.on('end', () => {
    for (let i = body.indexOf('"spanId"'); i >= 0; i = body.indexOf('"spanId"', i + 8)) spans++;
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  });
});
server.listen(0, '127.0.0.1', () => process.stdout.write('port ' + server.address().port + '\\n'));
process.stdin.setEncoding('utf8').on('data', () => process.stdout.write('spans ' + spans + '\\n'));
`;
const sink = spawn(process.execPath, ['-e', SINK], { stdio: ['pipe', 'pipe', 'inherit'] });
// Never left behind, whatever stops this process.
process.once('exit', () => sink.kill());
const lines = createInterface({ input: sink.stdout! });
const nextLine = () => new Promise<string>((r) => lines.once('line', r));
const port = Number((await nextLine()).split(' ')[1]);
const url = `http://127.0.0.1:${port}/v1/traces`;
async function spansReceived(): Promise<number> {
  const line = nextLine();
  sink.stdin!.write('?\n');
  return Number((await line).split(' ')[1]);
}

const CALL = { algorithm: 'bench/Echo', version: '0.1.0', build: 'f00dfeedf00dfeed' };

/**
 * One warm call's tracing, as app.ts, calls.ts and runtime.ts do it: on one machine (`api`
 * false) the request's span takes the call's and the wait's attributes; an API node
 * (`api` true) makes a client span for the dispatch too (the worker node's run span is the
 * worker's cost, not counted here).
 */
const REQ = {};

function oneCall(tracer: Tracer, header: string | undefined, apiNode: boolean): void {
  const request = tracer.start('HTTP', 'server', parseTraceparent(header));
  setRequestSpan(REQ, request);
  if (request.recording) request.set('http.request.method', 'POST');
  {
    request.route = '/v1/algo/*';
    const own = tracer.exporting && apiNode;
    const within = requestSpan(REQ);
    const call = own ? tracer.start('call bench/Echo', 'client', within) : (within ?? NO_TRACING.start('', 'client', undefined));
    if (call.recording) {
      call.set('algohost.algorithm', CALL.algorithm);
      call.set('algohost.version', CALL.version);
      call.set('algohost.build', CALL.build);
      call.set('algohost.depth', 1);
      call.set('algohost.input_bytes', 15);
    }
    traceparentOf(call);
    if (call.recording) {
      if (!own) call.set('algohost.worker_wait_ms', 0.01);
      call.set('algohost.outcome', 'result');
      call.set('algohost.duration_ms', 0.02);
    }
    if (own) call.end();
    // The request logger's bindings (made when the request logs: fastify's child logger, the direct path's when it logs).
    traceBindings(request);
  }
  if (request.recording) {
    request.rename('POST /v1/algo/*');
    request.set('http.route', '/v1/algo/*');
    request.set('http.response.status_code', 200);
  }
  request.end();
}

type Sampler = ExportSettings['sampler'];

/** CPU seconds this thread (the event loop's) has used: /proc/thread-self/stat's utime + stime (Linux; 10 ms ticks). */
function threadCpu(): number {
  const f = fs.readFileSync('/proc/thread-self/stat', 'utf8');
  const after = f.slice(f.lastIndexOf(')') + 2).split(' ');
  return (Number(after[11]) + Number(after[12])) / 100;
}

async function run(sampler: Sampler | undefined, header: string | undefined, apiNode: boolean): Promise<{ ns: number; loopNs: number; spans: number }> {
  const tracer = sampler ? await openTracer({ url, headers: {}, serviceName: 'bench', scheduleDelayMs: 10, ...QUEUE, sampler }) : NO_TRACING;
  const before = await spansReceived();
  const t0 = process.cpuUsage();
  const l0 = threadCpu();
  for (let i = 0; i < CALLS; i++) {
    oneCall(tracer, header, apiNode);
    // Let the posts to the export thread run as they would between requests.
    if (i % 64 === 63) await new Promise((r) => setImmediate(r));
    if (i % 1024 === 1023) {
      await new Promise((r) => setTimeout(r, 0));
      // The export thread works beside this loop, not inside it: wait (idle, costing no CPU)
      // until the collector has nearly all spans made so far, as a server's calls, far slower
      // than this loop's, would let it; else spans pile up past what a close can send.
      if (tracer.exporting) while ((await spansReceived()) - before < (i + 1) * (apiNode ? 2 : 1) * (sampler?.ratio ?? 1) - 8192) await new Promise((r) => setTimeout(r, 5));
    }
  }
  await tracer.close();
  const d = process.cpuUsage(t0);
  return { ns: ((d.user + d.system) * 1000) / CALLS, loopNs: ((threadCpu() - l0) * 1e9) / CALLS, spans: (await spansReceived()) - before };
}

const ALL: Sampler = { name: 'parentbased_always_on', ratio: 1 };
const TENTH: Sampler = { name: 'parentbased_traceidratio', ratio: 0.1 };
const variants: [string, Sampler | undefined, string | undefined, boolean][] = [
  ['off, no traceparent (a trace made)', undefined, undefined, false],
  ["off, the caller's traceparent", undefined, CALLER, false],
  ['exported, every trace (the default sampler), one machine: 1 span per call', ALL, undefined, false],
  ["exported, every trace, the caller's traceparent (sampled), one machine", ALL, CALLER, false],
  ['exported, every trace, an API node: 2 spans per call (request, dispatch)', ALL, undefined, true],
  ['exported, parentbased_traceidratio 0.1, one machine', TENTH, undefined, false],
];
const results = new Map<string, { ns: number; loopNs: number; spans: number }[]>(variants.map(([n]) => [n, []]));
// Tracing off first, every repetition: once a tracer exports, the OpenTelemetry SDK is loaded
// and its export thread runs, which a node that does not export never has.
for (const group of [variants.filter(([, s]) => s === undefined), variants.filter(([, s]) => s !== undefined)]) {
  for (const [, sampler, h, a] of group) await run(sampler, h, a);
  for (let r = 0; r < REPS; r++) {
    for (const [name, sampler, h, a] of r % 2 === 0 ? group : [...group].reverse()) results.get(name)!.push(await run(sampler, h, a));
  }
}
process.stdout.write(
  `CPU ns per warm call's tracing (median of ${REPS} × ${CALLS.toLocaleString('en')} calls): this process (all threads), of which the event loop's thread (what a server's throughput is bound by); spans the sink received per call:\n`,
);
for (const [name] of variants) {
  const rs = results.get(name)!;
  process.stdout.write(`  ${name}: ${median(rs.map((x) => x.ns)).toFixed(0)} ns, event loop ${median(rs.map((x) => x.loopNs)).toFixed(0)} ns; ${(median(rs.map((x) => x.spans)) / CALLS).toFixed(2)} spans\n`);
}
sink.kill();
process.exit(0);
