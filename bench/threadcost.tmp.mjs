// The export thread's work, run on the main thread so --cpu-prof sees it: N span records through
// the SDK's BatchSpanProcessor + OTLPTraceExporter to a sink process.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { SpanStatusCode, TraceFlags } from '@opentelemetry/api';
import { BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
const N = Number(process.argv[2] ?? 100000);
const SINK = `let spans=0;require('node:http').createServer((req,res)=>{let n=0;req.on('data',c=>n+=c.length);req.on('end',()=>{spans++;res.writeHead(200,{'content-type':'application/json'}).end('{}')})}).listen(0,'127.0.0.1',function(){process.stdout.write('port '+this.address().port+'\\n')});`;
const sink = spawn(process.execPath, ['-e', SINK], { stdio: ['pipe', 'pipe', 'inherit'] });
process.once('exit', () => sink.kill());
const port = Number((await new Promise((r) => createInterface({ input: sink.stdout }).once('line', r))).split(' ')[1]);
const resource = resourceFromAttributes({ 'service.name': 'algohost', 'host.name': 'x', 'algohost.role': 'all' });
const exporter = new OTLPTraceExporter({ url: `http://127.0.0.1:${port}/v1/traces` });
const processor = new BatchSpanProcessor(exporter, { scheduledDelayMillis: 10, maxQueueSize: 10_000_000, maxExportBatchSize: 512, exportTimeoutMillis: 30000 });
const SCOPE = { name: 'algohost' };
function hrTime(ms) { const s = Math.floor(ms / 1000); return [s, Math.round((ms - s * 1000) * 1e6)]; }
function readable(r) {
  const [name, kind, traceId, spanId, parentSpanId, parentSampled, startMs, endMs, failed, attributes] = r;
  const context = { traceId, spanId, traceFlags: TraceFlags.SAMPLED };
  return { name, kind, spanContext: () => context,
    parentSpanContext: parentSpanId === null ? undefined : { traceId, spanId: parentSpanId, traceFlags: parentSampled ? 1 : 0, isRemote: true },
    startTime: hrTime(startMs), endTime: hrTime(endMs), duration: hrTime(endMs - startMs),
    status: failed === null ? { code: SpanStatusCode.UNSET } : { code: SpanStatusCode.ERROR, message: failed },
    attributes, links: [], events: [], ended: true, resource, instrumentationScope: SCOPE,
    droppedAttributesCount: 0, droppedEventsCount: 0, droppedLinksCount: 0 };
}
const hex = (n) => Array.from({ length: n }, () => Math.floor(Math.random() * 16).toString(16)).join('');
const recs = [];
for (let i = 0; i < 1000; i++) recs.push(['POST /v1/algo/:owner/:algo/*', 2, hex(32), hex(16), hex(16), true, Date.now(), Date.now() + 1.2, null,
  { 'http.request.method': 'POST', 'http.route': '/v1/algo/:owner/:algo/*', 'http.response.status_code': 200, 'algohost.algorithm': 'bench/Echo', 'algohost.version': '0.1.0', 'algohost.build': 'f00dfeedf00dfeed', 'algohost.depth': 1, 'algohost.input_bytes': 15, 'algohost.wait_ms': 0.01 }]);
const clone = process.argv[3] === 'clone';
const c0 = process.cpuUsage(); const t0 = performance.now();
for (let i = 0; i < N; i += 64) {
  let batch = recs.slice(i % 1000, (i % 1000) + 64);
  if (clone) batch = structuredClone(batch);
  for (const r of batch) processor.onEnd(readable(r));
  if ((i & 511) === 0) await new Promise((r) => setTimeout(r, 1));
}
await processor.shutdown().catch((e) => console.log("shutdown:", e.message));
const c = process.cpuUsage(c0); const t = performance.now() - t0;
console.log(`${N} spans: cpu ${((c.user + c.system) / N).toFixed(2)} µs/span (user ${(c.user / N).toFixed(2)}, sys ${(c.system / N).toFixed(2)}), wall ${(t * 1000 / N).toFixed(2)} µs/span`);
process.exit(0);
