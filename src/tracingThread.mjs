// The export thread of a node that exports spans (tracingExport.ts starts it): the OpenTelemetry
// SDK's batch span processor and OTLP/HTTP (JSON) exporter, fed with the spans the node's event
// loop recorded. Serialising spans into OTLP JSON and sending them is most of what exporting
// costs (~10 µs a span here); done here, it is not done between two requests on the event loop.
//
// Plain JavaScript, not TypeScript: a worker thread does not inherit the TypeScript loader that
// bin/algohost.mjs registers on the main thread (bin/loader.mjs), and this file needs nothing of algohost's.
//
// Messages in (from tracingExport.ts):
//   { spans: SpanRecord[] }  finished spans (the record's fields: tracingExport.ts's SpanRecord)
//   { close: true }          send what is left, then answer { closed: true }
// Messages out:
//   { taken: n }             n spans were handed to the batch processor (the sender's queue bound)
//   { closed: true }
import { parentPort, workerData } from 'node:worker_threads';
import { SpanStatusCode, TraceFlags } from '@opentelemetry/api';
import { BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';

/** @type {{ url: string, headers: Record<string, string>, scheduleDelayMs: number, maxQueueSize: number, maxExportBatchSize: number, exportTimeoutMs: number, resource: Record<string, string | number | boolean> }} */
const settings = workerData;
const resource = resourceFromAttributes(settings.resource);
const exporter = new OTLPTraceExporter({ url: settings.url, headers: settings.headers });
const processor = new BatchSpanProcessor(exporter, {
  scheduledDelayMillis: settings.scheduleDelayMs,
  maxQueueSize: settings.maxQueueSize,
  maxExportBatchSize: settings.maxExportBatchSize,
  exportTimeoutMillis: settings.exportTimeoutMs,
});
const SCOPE = { name: 'algohost' };
const SAMPLED = { traceFlags: TraceFlags.SAMPLED };

/** A time in ms since the epoch (fractional) as OpenTelemetry's [seconds, nanoseconds]. */
function hrTime(ms) {
  const seconds = Math.floor(ms / 1000);
  return [seconds, Math.round((ms - seconds * 1000) * 1e6)];
}

/** A record of tracingExport.ts as the SDK's ReadableSpan (what its exporter reads). */
function readable(r) {
  const [name, kind, traceId, spanId, parentSpanId, parentSampled, startMs, endMs, failed, pairs] = r;
  const attributes = {};
  for (let i = 0; i < pairs.length; i += 2) attributes[pairs[i]] = pairs[i + 1];
  const context = { traceId, spanId, ...SAMPLED };
  return {
    name,
    kind,
    spanContext: () => context,
    parentSpanContext: parentSpanId === null ? undefined : { traceId, spanId: parentSpanId, traceFlags: parentSampled ? TraceFlags.SAMPLED : TraceFlags.NONE, isRemote: true },
    startTime: hrTime(startMs),
    endTime: hrTime(endMs),
    duration: hrTime(endMs - startMs),
    status: failed === null ? { code: SpanStatusCode.UNSET } : { code: SpanStatusCode.ERROR, message: failed },
    attributes,
    links: [],
    events: [],
    ended: true,
    resource,
    instrumentationScope: SCOPE,
    droppedAttributesCount: 0,
    droppedEventsCount: 0,
    droppedLinksCount: 0,
  };
}

parentPort.on('message', (m) => {
  if (m.spans !== undefined) {
    for (const r of m.spans) processor.onEnd(readable(r));
    parentPort.postMessage({ taken: m.spans.length });
  } else if (m.close === true) {
    // An export that fails (the collector away, more batches at once than the exporter sends
    // concurrently) loses those spans, never the stop. The processor's shutdown gives up at the
    // first failed batch without waiting for the others: the exporter's own waits for every
    // request still on its way, before the thread is ended.
    const done = () => parentPort.postMessage({ closed: true });
    processor
      .shutdown()
      .catch(() => undefined)
      .then(() => exporter.shutdown())
      .then(done, done);
  }
});
