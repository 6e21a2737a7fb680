import { Worker } from 'node:worker_threads';
import { ROOT_CONTEXT, SpanKind as OtelKind, trace, TraceFlags, type SpanContext } from '@opentelemetry/api';
import { AlwaysOffSampler, AlwaysOnSampler, ParentBasedSampler, SamplingDecision, TraceIdRatioBasedSampler, type Sampler } from '@opentelemetry/sdk-trace-base';
import { IdSpan, type AttributeValue, type Attributes, type ExportSettings, type Span, type SpanKind, type TraceContext, type Tracer } from './tracingTypes.ts';

/*
 * Spans exported over OTLP/HTTP (JSON) with the OpenTelemetry JS SDK (docs/traces.md). Loaded
 * by tracing.ts's openTracer only when OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT) is
 * set: a node that does not export never loads this module or the SDK.
 *
 * The SDK's sampler decides here, on the event loop, as a span starts; a finished span is a
 * small record, posted in batches to a thread of its own (tracingThread.mjs) where the SDK's
 * batch span processor and OTLP exporter turn it into OTLP JSON and send it. That serialising
 * was most of exporting's cost on the event loop (~10 µs a span, bench:algo's BENCH_PROFILE=
 * tracing); posting a record costs ~1–2 µs.
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

function clean(attributes: Attributes | undefined): Record<string, AttributeValue> {
  const out: Record<string, AttributeValue> = {};
  if (attributes !== undefined) for (const k in attributes) if (attributes[k] !== undefined) out[k] = attributes[k];
  return out;
}

/** Attributes as a flat list of keys and values (a later value of a key wins): what a span collects. */
function pairs(attributes: Attributes | undefined): (string | AttributeValue)[] {
  const out: (string | AttributeValue)[] = [];
  if (attributes !== undefined) for (const k in attributes) if (attributes[k] !== undefined) out.push(k, attributes[k]);
  return out;
}

/** The SDK's sampler that OTEL_TRACES_SAMPLER names (by default: a caller's sampled flag followed, a trace we begin recorded). */
function samplerOf({ name, ratio }: ExportSettings['sampler']): Sampler {
  const root = name.endsWith('always_off') ? new AlwaysOffSampler() : name.endsWith('traceidratio') ? new TraceIdRatioBasedSampler(ratio) : new AlwaysOnSampler();
  return name.startsWith('parentbased_') ? new ParentBasedSampler({ root }) : root;
}

/** Now, in ms since the epoch with the monotonic clock's precision (as the SDK's own spans take it). */
const nowMs = () => performance.timeOrigin + performance.now();

/**
 * A finished span as it crosses to the export thread (a structured clone): name, kind, trace id,
 * span id, parent span id (null: a root), the parent's sampled flag, start and end (ms since the
 * epoch), the failure's message (null: not failed), attributes as keys and values in turn (a
 * later value of a key wins). tracingThread.mjs reads it.
 */
type SpanRecord = [string, OtelKind, string, string, string | null, boolean, number, number, string | null, (string | AttributeValue)[]];

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
    const p = this.parent;
    this.owner.finished([this.name, this.kind, this.traceId, this.spanId, p === undefined ? null : p.spanId, p?.sampled ?? false, this.startMs, Math.max(nowMs(), this.startMs), this.failed, this.attributes]);
  }
}

/** Makers of W3C trace and span ids. */
export interface SpanIds {
  newTraceId(): string;
  newSpanId(): string;
}

/** Spans posted to the export thread at most this many at a time, and at most this long after one ends. */
const POST_BATCH = 64;
const POST_AFTER_MS = 50;
/** How long a stop waits for the last spans to be sent. */
const CLOSE_TIMEOUT_MS = 15_000;

export class OtelTracer implements Tracer {
  readonly exporting = true;
  /** Spans dropped because the export thread was behind by the queue's size (OTEL_BSP_MAX_QUEUE_SIZE), gone, or closing. */
  dropped = 0;
  private pending: SpanRecord[] = [];
  private posted = 0;
  private timer: NodeJS.Timeout | undefined;
  private closing: Promise<void> | undefined;
  private gone = false;

  private constructor(
    private readonly thread: Worker,
    private readonly maxQueue: number,
    private readonly sampler: Sampler,
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
        resource: { 'service.name': settings.serviceName, ...clean(resource) },
      },
      // None of the process's flags (a TypeScript loader, a profiler's); its environment, as the SDK's
      // exporter reads OTEL_EXPORTER_OTLP_* settings (timeout, compression, certificates) there.
      execArgv: [],
    });
    return new OtelTracer(thread, settings.maxQueueSize, samplerOf(settings.sampler), ids);
  }

  start(name: string, kind: SpanKind, parent: TraceContext | undefined, attributes?: Attributes, startTime?: number): Span {
    const traceId = parent?.traceId ?? this.ids.newTraceId();
    const otelKind = KINDS[kind];
    // The SDK's sampler decides, as its tracer would: given the parent's context (ParentBased
    // follows the caller's sampled flag), the trace id (TraceIdRatio), the name and kind.
    const parentContext: SpanContext | undefined = parent === undefined ? undefined : { traceId, spanId: parent.spanId, traceFlags: parent.sampled ? TraceFlags.SAMPLED : TraceFlags.NONE, isRemote: true };
    const context = parentContext === undefined ? ROOT_CONTEXT : trace.setSpanContext(ROOT_CONTEXT, parentContext);
    const decision = this.sampler.shouldSample(context, traceId, name, otelKind, {}, []).decision;
    // Not sampled: recorded nowhere, its ids carried on (its children are not sampled either, by default).
    if (decision !== SamplingDecision.RECORD_AND_SAMPLED) return new IdSpan(traceId, this.ids.newSpanId(), false);
    return new RecordedSpan(this, name, otelKind, traceId, this.ids.newSpanId(), parent, pairs(attributes), startTime ?? nowMs());
  }

  /**
   * A span has ended: kept for the next post to the export thread, or dropped if a queue's worth
   * of spans already wait here or in messages the thread has not read (then its own queue, the
   * SDK's, is full too, or soon will be).
   */
  finished(record: SpanRecord): void {
    if (this.gone || this.closing !== undefined || this.posted + this.pending.length >= this.maxQueue) {
      this.dropped++;
      return;
    }
    this.pending.push(record);
    if (this.pending.length >= POST_BATCH) this.post();
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
