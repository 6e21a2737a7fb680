// The export thread of a node that exports spans (tracingExport.ts starts it): the spans its
// event loop recorded, written as OTLP/JSON, put into OTLP/HTTP requests and sent with the
// OpenTelemetry SDK's OTLP/HTTP transport (@opentelemetry/otlp-exporter-base: its retries
// with backoff, its timeout, compression and the OTEL_EXPORTER_OTLP_* settings it reads from the
// environment). Batching follows the SDK's batch span processor (OTEL_BSP_*): a request when a
// batch's worth of spans waits (maxExportBatchSize), or scheduleDelayMs after the first waits;
// one request at a time, each given up after exportTimeoutMs.
//
// Plain JavaScript, not TypeScript: a worker thread does not inherit the TypeScript loader that
// bin/algohost.mjs registers on the main thread (bin/loader.mjs), and this file needs nothing of algohost's.
//
// Messages in (from tracingExport.ts):
//   { spans: SpanRecord[] }  finished spans (the record's fields: tracingExport.ts's SpanRecord)
//   { close: true }          send what is left, then answer { closed: true }
// Messages out:
//   { taken: n }             n spans were sent, or given up on (the sender's queue bound)
//   { closed: true }
import fs from 'node:fs';
import os from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { convertLegacyHttpOptions, createOtlpHttpExportDelegate } from '@opentelemetry/otlp-exporter-base/node-http';

/** @type {{ url: string, headers: Record<string, string>, scheduleDelayMs: number, maxQueueSize: number, maxExportBatchSize: number, exportTimeoutMs: number, resource: (string | number | boolean)[] }} */
const settings = workerData;

// This thread runs at a lower priority than the event loop's (nice 10 more, on Linux, where a
// thread has a priority of its own): its work can wait, and on a machine whose CPUs are all
// busy, it then gives way to calls (the event loop, the workers) rather than contending with them.
try {
  const tid = Number(fs.readlinkSync('/proc/thread-self').split('/').pop());
  os.setPriority(tid, Math.min(19, os.getPriority(tid) + 10));
} catch {
  // Not Linux, or not allowed: the process's priority.
}

// ---- OTLP/JSON ----------------------------------------------------------------------------------
//
// OTLP/JSON is the protobuf JSON mapping of the OTLP messages: trace and span ids as hex, times
// as decimal strings of nanoseconds, enums as numbers. A span is written field for field as the
// SDK's own JSON serialiser (@opentelemetry/otlp-transformer) writes one of its ReadableSpans,
// straight to text rather than through an object per field (traces.test.ts compares the two).

/** `{"key":"<key>","value":{`, made once per attribute key (algohost's own: a few dozen). */
const keyTexts = new Map();
/** @param {string} key */
function keyText(key) {
  let text = keyTexts.get(key);
  if (text === undefined) {
    text = `{"key":${JSON.stringify(key)},"value":{`;
    if (keyTexts.size < 1024) keyTexts.set(key, text);
  }
  return text;
}

/** An attribute's value as OTLP's AnyValue, after keyText (closing both objects). @param {string | number | boolean} value */
function valueText(value) {
  if (typeof value === 'string') return `"stringValue":${JSON.stringify(value)}}}`;
  if (typeof value === 'boolean') return value ? '"boolValue":true}}' : '"boolValue":false}}';
  // An integer is an int64, as the SDK writes it, unless it is past int64's range.
  if (Number.isInteger(value) && Math.abs(value) < 2 ** 63) return `"intValue":${value}}}`;
  if (Number.isFinite(value)) return `"doubleValue":${value}}}`;
  // NaN and the infinities as the protobuf JSON mapping writes them (JSON has no such numbers;
  // the SDK's JSON.stringify makes them null).
  return `"doubleValue":"${value}"}}`;
}

/** Attributes given as keys and values in turn, as OTLP's KeyValue list without its brackets: a later value of a key wins. @param {(string | number | boolean)[]} pairs */
function attributesText(pairs) {
  let text = '';
  for (let i = 0; i < pairs.length; i += 2) {
    const key = pairs[i];
    let later = false;
    for (let j = i + 2; j < pairs.length && !later; j += 2) later = pairs[j] === key;
    if (!later) text += (text === '' ? '' : ',') + keyText(String(key)) + valueText(pairs[i + 1]);
  }
  return text;
}

/** A time in ms since the epoch (fractional) as OTLP's fixed64 nanoseconds, a decimal string. @param {number} ms */
function nanosText(ms) {
  const whole = Math.floor(ms);
  const ns = Math.round((ms - whole) * 1e6);
  if (ns >= 1e6) return `${whole + 1}000000`;
  const fraction = String(ns);
  return String(whole) + '000000'.slice(fraction.length) + fraction;
}

// OTLP's span flags: the W3C trace flags (sampled) with "has is-remote" set, and "is remote" for
// a span with a parent (algohost gives every span its parent's context explicitly, as the SDK
// sees a parent from another process): 0x100 and 0x200.
const ROOT_FLAGS = 0x101;
const CHILD_FLAGS = 0x301;

/** A record of tracingExport.ts (its SpanRecord) as one OTLP/JSON Span. @param {[string, number, string, string, string | null, number, number, string | null, (string | number | boolean)[]]} r */
function spanText(r) {
  const [name, kind, traceId, spanId, parent, startMs, endMs, failed, pairs] = r;
  return (
    `{"traceId":"${traceId}","spanId":"${spanId}"${parent === null ? '' : `,"parentSpanId":"${parent}"`},"name":${JSON.stringify(name)},` +
    // OTLP's SpanKind counts from UNSPECIFIED (0): the API's values plus one.
    `"kind":${kind + 1},"startTimeUnixNano":"${nanosText(startMs)}","endTimeUnixNano":"${nanosText(endMs)}","attributes":[${attributesText(pairs)}],` +
    `"status":${failed === null ? '{"code":0}' : `{"code":2,"message":${JSON.stringify(failed)}}`},"flags":${parent === null ? ROOT_FLAGS : CHILD_FLAGS}}`
  );
}

// ---- batches and requests -----------------------------------------------------------------------

// An ExportTraceServiceRequest of one resource (this node) and one scope (algohost), as the SDK's
// JSON serialiser writes it; a batch's spans go between the two.
const HEAD = Buffer.from(`{"resourceSpans":[{"resource":{"attributes":[${attributesText(settings.resource)}],"droppedAttributesCount":0},"scopeSpans":[{"scope":{"name":"algohost"},"spans":[`);
const TAIL = Buffer.from(']}]}]}');

/**
 * One request's body, written span by span as records arrive: a span's text lives only while
 * it is copied in, so that what waits for the next request is one buffer, not thousands of
 * strings for the garbage collector to keep and move.
 */
class Batch {
  count = 0;
  // ~1 KB a span; grown (doubled) as needed.
  #buf = Buffer.allocUnsafe(64 * 1024);
  #at = HEAD.copy(this.#buf, 0);

  /** @param {Parameters<typeof spanText>[0]} record */
  add(record) {
    const text = (this.count === 0 ? '' : ',') + spanText(record);
    // A UTF-16 code unit is at most 3 bytes of UTF-8; room for the tail too.
    const need = this.#at + text.length * 3 + TAIL.length;
    if (need > this.#buf.length) {
      const bigger = Buffer.allocUnsafe(Math.max(need, this.#buf.length * 2));
      this.#buf.copy(bigger, 0, 0, this.#at);
      this.#buf = bigger;
    }
    this.#at += this.#buf.write(text, this.#at);
    this.count++;
  }

  /** The request's body. */
  body() {
    const end = this.#at + TAIL.copy(this.#buf, this.#at);
    return this.#buf.subarray(0, end);
  }
}

const serializer = {
  /** @param {{ body: Buffer, count: number }} request */
  serializeRequest: (request) => request.body,
  /** A collector's answer (a partial success names the spans it rejected): read as the SDK reads it, nothing if unreadable. @param {Uint8Array} data */
  deserializeResponse: (data) => {
    if (data.length === 0) return {};
    try {
      return JSON.parse(Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('utf8'));
    } catch {
      return {};
    }
  },
};

const delegate = createOtlpHttpExportDelegate(
  convertLegacyHttpOptions({ url: settings.url, headers: settings.headers }, 'TRACES', 'v1/traces', { 'Content-Type': 'application/json' }),
  serializer,
  'otlp_http_span_exporter',
  { name: 'span', countItems: (/** @type {{ count: number }} */ request) => request.count },
);

/** Whole batches waiting to be sent, oldest first; the one being filled. */
/** @type {{ body: Buffer, count: number }[]} */
let ready = [];
let filling = new Batch();
let exporting = false;
let closing = false;
/** @type {NodeJS.Timeout | undefined} */
let timer;

/** Ends the batch being filled (if it has spans) and queues it. */
function seal() {
  if (filling.count === 0) return;
  ready.push({ body: filling.body(), count: filling.count });
  filling = new Batch();
}

/** Sends a whole batch now, or sets the timer for the one being filled. */
function schedule() {
  if (exporting) return;
  if (ready.length > 0) exportBatch();
  else if (filling.count > 0) timer ??= setTimeout(() => {
    timer = undefined;
    seal();
    exportBatch();
  }, settings.scheduleDelayMs);
}

/** Sends the oldest whole batch as one request. */
function exportBatch() {
  if (exporting) return;
  const request = ready.shift();
  if (request === undefined) return;
  exporting = true;
  let settled = false;
  /** @param {{ code: number }} result  ExportResultCode: 0 success, 1 failed */
  const done = (result) => {
    if (settled) return;
    settled = true;
    clearTimeout(guard);
    exporting = false;
    parentPort.postMessage({ taken: request.count });
    if (!closing) return schedule();
    // Closing: a failed request (the collector away) ends the close, as the SDK's processor
    // gives up at its first failed batch; the spans left are lost, never the stop.
    if (result.code !== 0) {
      parentPort.postMessage({ taken: ready.reduce((n, r) => n + r.count, 0) });
      ready = [];
    }
    finishClose();
  };
  // A request that takes longer than this is given up on (it may still arrive).
  const guard = setTimeout(() => done({ code: 1 }), settings.exportTimeoutMs);
  delegate.export(request, done);
}

function finishClose() {
  if (exporting) return;
  if (ready.length > 0) return exportBatch();
  // The transport waits for every request still on its way.
  const closed = () => parentPort.postMessage({ closed: true });
  delegate.shutdown().then(closed, closed);
}

parentPort.on('message', (m) => {
  if (m.spans !== undefined) {
    for (const r of m.spans) {
      filling.add(r);
      if (filling.count >= settings.maxExportBatchSize) seal();
    }
    if (!closing) schedule();
  } else if (m.close === true) {
    closing = true;
    clearTimeout(timer);
    timer = undefined;
    seal();
    finishClose();
  }
});
