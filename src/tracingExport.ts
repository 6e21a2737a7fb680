import { Worker } from 'node:worker_threads';
import { ROOT_CONTEXT, SpanKind as OtelKind } from '@opentelemetry/api';
import { SamplingDecision, TraceIdRatioBasedSampler } from '@opentelemetry/sdk-trace-base';
import { IdSpan, type AttributeValue, type Attributes, type ExportSettings, type Span, type SpanKind, type TraceContext, type Tracer } from './tracingTypes.ts';

/*
 * Spans exported over OTLP/HTTP (JSON) with the OpenTelemetry JS SDK (docs/traces.md). Loaded
 * by tracing.ts's openTracer only when OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT) is
 * set: a node that does not export never loads this module or the SDK.
 *
 * The sampler decides here, on the event loop, as a span starts (deciderOf: the SDK's samplers'
 * decisions). A finished span is a small record, posted with others to a thread of its own
 * (tracingThread.mjs), which writes spans as OTLP/JSON, batches them as the SDK's batch span
 * processor would (OTEL_BSP_*) and sends each batch with the SDK's OTLP/HTTP transport (its
 * retries, timeout, compression and OTEL_EXPORTER_OTLP_* settings). The SDK's span, batch
 * processor and serialiser are not used: together they cost a loaded server ~25 µs a span
 * (docs/traces.md, "Cost").
 *
 * No global provider, context manager or propagator is registered: algohost carries the
 * context itself, by hand (tracing.ts: no AsyncLocalStorage, the traceparent on each hop), and
 * gives each span its parent explicitly, so nothing else in the process is instrumented behind
 * its back.
 */

const KINDS: Record<SpanKind, OtelKind> = {
  internal: OtelKind.INTERNAL,
  server: OtelKind.SERVER,
  client: OtelKind.CLIENT,
  producer: OtelKind.PRODUCER,
  consumer: OtelKind.CONSUMER,
};

/** Attributes as a flat list of keys and values (a later value of a key wins): what a span collects. */
function pairs(attributes: Attributes | undefined): (string | AttributeValue)[] {
  const out: (string | AttributeValue)[] = [];
  if (attributes !== undefined) for (const k in attributes) if (attributes[k] !== undefined) out.push(k, attributes[k]);
  return out;
}

/** Whether a span starting with this parent (none: a trace we begin) in this trace is recorded. */
type Decide = (parent: TraceContext | undefined, traceId: string) => boolean;

/**
 * What the sampler that OTEL_TRACES_SAMPLER names decides (by default, parentbased_always_on: a
 * caller's sampled flag followed, a trace we begin recorded). parentbased_* is the SDK's
 * ParentBasedSampler with its defaults (a parent's sampled flag decides, whether it is remote or
 * not; the root sampler decides a root span), always_on and always_off need no sampler at all,
 * and a trace id's ratio is the SDK's TraceIdRatioBasedSampler. Decided without the SDK's
 * Context, which a ParentBasedSampler reads the parent from: making one cost ~1.5 µs a span.
 */
function deciderOf({ name, ratio }: ExportSettings['sampler']): Decide {
  const byRatio = new TraceIdRatioBasedSampler(ratio);
  const root: Decide = name.endsWith('always_off')
    ? () => false
    : name.endsWith('traceidratio')
      ? (_parent, traceId) => byRatio.shouldSample(ROOT_CONTEXT, traceId).decision === SamplingDecision.RECORD_AND_SAMPLED
      : () => true;
  return name.startsWith('parentbased_') ? (parent, traceId) => (parent === undefined ? root(undefined, traceId) : parent.sampled) : root;
}

/** Now, in ms since the epoch with the monotonic clock's precision (as the SDK's own spans take it). */
const nowMs = () => performance.timeOrigin + performance.now();

/**
 * A finished span as it crosses to the export thread: name, kind (the API's), trace id, span
 * id, parent span id (null: a root), start and end (ms since the epoch), the failure's message
 * (null: not failed), attributes as keys and values in turn (a later value of a key wins).
 * tracingThread.mjs writes it as OTLP/JSON.
 */
type SpanRecord = [string, OtelKind, string, string, string | null, number, number, string | null, (string | AttributeValue)[]];

/**
 * A span recorded for export. The SDK's own span checks every attribute against limits, keeps
 * events and links, and goes through its tracer's context lookups, its id generator and its span
 * processors' start hooks (~13 µs to start and ~10 µs to end one on the warm path), where
 * algohost sets a few known attributes and nothing else. They are collected as a list of keys and
 * values, the cheapest to add to (an object grown key by key, at one call site for every key,
 * cost ~0.2 µs a key) and to post to the export thread.
 */
class RecordedSpan implements Span {
  readonly recording = true;
  readonly sampled = true;
  route: string | undefined = undefined;
  private failed: string | null = null;
  private ended = false;

  constructor(
    private readonly owner: OtelTracer,
    private name: string,
    private readonly kind: OtelKind,
    readonly traceId: string,
    readonly spanId: string,
    private readonly parent: TraceContext | undefined,
    private readonly attributes: (string | AttributeValue)[],
    private readonly startMs: number,
  ) {}

  set(key: string, value: AttributeValue | undefined): void {
    if (value !== undefined && !this.ended) this.attributes.push(key, value);
  }

  fail(message: string): void {
    if (!this.ended) this.failed = message;
  }

  rename(name: string): void {
    if (!this.ended) this.name = name;
  }

  end(): void {
    if (this.ended) return;
    this.ended = true;
    this.owner.finished([this.name, this.kind, this.traceId, this.spanId, this.parent === undefined ? null : this.parent.spanId, this.startMs, Math.max(nowMs(), this.startMs), this.failed, this.attributes]);
  }
}

/** Makers of W3C trace and span ids. */
export interface SpanIds {
  newTraceId(): string;
  newSpanId(): string;
}

/** Spans posted to the export thread at most this many at a time (nor more than a request's), and at most this long after one ends. */
const POST_BATCH = 256;
const POST_AFTER_MS = 50;
/** How long a stop waits for the last spans to be sent. */
const CLOSE_TIMEOUT_MS = 15_000;

export class OtelTracer implements Tracer {
  readonly exporting = true;
  /** Spans dropped because the export thread was behind by the queue's size (OTEL_BSP_MAX_QUEUE_SIZE), gone, or closing. */
  dropped = 0;
  /** Spans ended since the last post. */
  private pending: SpanRecord[] = [];
  /** Spans posted that the thread has not yet sent (or given up on). */
  private posted = 0;
  private timer: NodeJS.Timeout | undefined;
  private closing: Promise<void> | undefined;
  private gone = false;

  private constructor(
    private readonly thread: Worker,
    private readonly maxQueue: number,
    private readonly postBatch: number,
    private readonly decide: Decide,
    private readonly ids: SpanIds,
  ) {
    thread.on('message', (m: { taken?: number }) => {
      if (m.taken !== undefined) this.posted -= m.taken;
    });
    // The thread failing (it should not) costs its spans, never the node: later spans are dropped.
    thread.on('error', () => (this.gone = true));
    thread.on('exit', () => (this.gone = true));
    // An idle thread does not hold the process open; close() sends what is left.
    thread.unref();
  }

  /** `ids`: how trace and span ids are made (tracing.ts's, which this module does not import: it imports this one). */
  static open(settings: ExportSettings, resource: Attributes, ids: SpanIds): OtelTracer {
    const thread = new Worker(new URL('./tracingThread.mjs', import.meta.url), {
      workerData: {
        url: settings.url,
        headers: settings.headers,
        scheduleDelayMs: settings.scheduleDelayMs,
        maxQueueSize: settings.maxQueueSize,
        maxExportBatchSize: settings.maxExportBatchSize,
        exportTimeoutMs: settings.exportTimeoutMs,
        // The node's Resource: its attributes as keys and values in turn (a later value of a key wins).
        resource: ['service.name', settings.serviceName, ...pairs(resource)],
      },
      // None of the process's flags (a TypeScript loader, a profiler's); its environment, as the SDK's
      // OTLP/HTTP transport reads OTEL_EXPORTER_OTLP_* settings (timeout, compression, certificates) there.
      execArgv: [],
    });
    return new OtelTracer(thread, settings.maxQueueSize, Math.min(POST_BATCH, settings.maxExportBatchSize), deciderOf(settings.sampler), ids);
  }

  start(name: string, kind: SpanKind, parent: TraceContext | undefined, attributes?: Attributes, startTime?: number): Span {
    const traceId = parent?.traceId ?? this.ids.newTraceId();
    // Not sampled: recorded nowhere, its ids carried on (its children are not sampled either, by default).
    if (!this.decide(parent, traceId)) return new IdSpan(traceId, this.ids.newSpanId(), false);
    return new RecordedSpan(this, name, KINDS[kind], traceId, this.ids.newSpanId(), parent, pairs(attributes), startTime ?? nowMs());
  }

  /**
   * A span has ended: kept for the next post to the export thread, or dropped (and counted) if a
   * queue's worth of spans already wait here or in messages the thread has not sent yet
   * (OTEL_BSP_MAX_QUEUE_SIZE: the collector is slow or away), or once the thread is gone or
   * closing.
   */
  finished(record: SpanRecord): void {
    if (this.gone || this.closing !== undefined || this.posted + this.pending.length >= this.maxQueue) {
      this.dropped++;
      return;
    }
    this.pending.push(record);
    if (this.pending.length >= this.postBatch) this.post();
    else if (this.timer === undefined) {
      this.timer = setTimeout(() => this.post(), POST_AFTER_MS);
      this.timer.unref();
    }
  }

  private post(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    if (this.pending.length === 0 || this.gone) return;
    const spans = this.pending;
    this.pending = [];
    this.posted += spans.length;
    this.thread.postMessage({ spans });
  }

  /** Sends what is left; an export that fails (the collector away, too many at once) loses those spans, never the stop. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      this.post();
      if (!this.gone) {
        const closed = new Promise<void>((resolve) => {
          const done = () => resolve();
          this.thread.on('message', (m: { closed?: boolean }) => m.closed === true && done());
          this.thread.once('exit', done);
          setTimeout(done, CLOSE_TIMEOUT_MS).unref();
        });
        this.thread.postMessage({ close: true });
        await closed;
      }
      await this.thread.terminate();
    })();
    return this.closing;
  }
}
