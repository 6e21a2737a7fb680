import { ROOT_CONTEXT, SpanKind as OtelKind, SpanStatusCode, trace, TraceFlags, type HrTime, type SpanContext, type SpanStatus } from '@opentelemetry/api';
import { AlwaysOffSampler, AlwaysOnSampler, BatchSpanProcessor, ParentBasedSampler, SamplingDecision, TraceIdRatioBasedSampler, type ReadableSpan, type Sampler, type SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes, type Resource } from '@opentelemetry/resources';
import { IdSpan, type AttributeValue, type Attributes, type ExportSettings, type Span, type SpanKind, type TraceContext, type Tracer } from './tracingTypes.ts';

/*
 * Spans exported over OTLP/HTTP (JSON) with the OpenTelemetry JS SDK (docs/traces.md). Loaded
 * by tracing.ts's openTracer only when OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT) is
 * set: a node that does not export never loads this module or the SDK.
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

function clean(attributes: Attributes | undefined): Record<string, AttributeValue> | undefined {
  if (attributes === undefined) return undefined;
  const out: Record<string, AttributeValue> = {};
  for (const k in attributes) if (attributes[k] !== undefined) out[k] = attributes[k];
  return out;
}

/** The SDK's sampler that OTEL_TRACES_SAMPLER names (by default: a caller's sampled flag followed, a trace we begin recorded). */
function samplerOf({ name, ratio }: ExportSettings['sampler']): Sampler {
  const root = name.endsWith('always_off') ? new AlwaysOffSampler() : name.endsWith('traceidratio') ? new TraceIdRatioBasedSampler(ratio) : new AlwaysOnSampler();
  return name.startsWith('parentbased_') ? new ParentBasedSampler({ root }) : root;
}

/** A time (ms since the epoch, fractional) as OpenTelemetry's [seconds, nanoseconds]. */
function hrTime(ms: number): HrTime {
  const seconds = Math.floor(ms / 1000);
  return [seconds, Math.round((ms - seconds * 1000) * 1e6)];
}

/** Now, in ms since the epoch with the monotonic clock's precision (as the SDK's own spans take it). */
const nowMs = () => performance.timeOrigin + performance.now();

const SCOPE = { name: 'algohost' };
const UNSET: SpanStatus = { code: SpanStatusCode.UNSET };

/**
 * A span recorded for export: what the SDK's processor and exporter read of a span
 * (ReadableSpan), made here rather than by the SDK's tracer. The SDK's own span checks every
 * attribute against limits, keeps events and links, and goes through its tracer's context
 * lookups, its id generator and its span processors' start hooks: ~13 µs to start and ~10 µs
 * to end one on the warm path (BENCH_PROFILE=tracing npm run bench:algo), where algohost sets a
 * few known attributes and nothing else. Its export (batching, OTLP JSON, the HTTP send) is
 * still the SDK's.
 */
class RecordedSpan implements Span, ReadableSpan {
  readonly recording = true;
  readonly sampled = true;
  route: string | undefined = undefined;
  readonly attributes: Record<string, AttributeValue> = {};
  status: SpanStatus = UNSET;
  endTime: HrTime = [0, 0];
  duration: HrTime = [0, 0];
  ended = false;
  readonly links = [];
  readonly events = [];
  readonly droppedAttributesCount = 0;
  readonly droppedEventsCount = 0;
  readonly droppedLinksCount = 0;
  readonly instrumentationScope = SCOPE;
  readonly startTime: HrTime;
  private readonly context: SpanContext;

  constructor(
    private readonly owner: OtelTracer,
    public name: string,
    readonly kind: OtelKind,
    readonly traceId: string,
    readonly spanId: string,
    readonly parentSpanContext: SpanContext | undefined,
    attributes: Attributes | undefined,
    private readonly startMs: number,
  ) {
    this.context = { traceId, spanId, traceFlags: TraceFlags.SAMPLED };
    this.startTime = hrTime(startMs);
    if (attributes !== undefined) for (const k in attributes) if (attributes[k] !== undefined) this.attributes[k] = attributes[k];
  }

  get resource(): Resource {
    return this.owner.resource;
  }

  spanContext(): SpanContext {
    return this.context;
  }

  set(key: string, value: AttributeValue | undefined): void {
    if (value !== undefined && !this.ended) this.attributes[key] = value;
  }

  fail(message: string): void {
    if (!this.ended) this.status = { code: SpanStatusCode.ERROR, message };
  }

  rename(name: string): void {
    if (!this.ended) this.name = name;
  }

  end(): void {
    if (this.ended) return;
    this.ended = true;
    const end = Math.max(nowMs(), this.startMs);
    this.endTime = hrTime(end);
    this.duration = hrTime(end - this.startMs);
    this.owner.processor.onEnd(this);
  }
}

/** Makers of W3C trace and span ids. */
export interface SpanIds {
  newTraceId(): string;
  newSpanId(): string;
}

export class OtelTracer implements Tracer {
  readonly exporting = true;

  private constructor(
    readonly processor: SpanProcessor,
    readonly resource: Resource,
    private readonly sampler: Sampler,
    private readonly ids: SpanIds,
  ) {}

  /** `ids`: how trace and span ids are made (tracing.ts's, which this module does not import: it imports this one). */
  static open(settings: ExportSettings, resource: Attributes, ids: SpanIds): OtelTracer {
    const exporter = new OTLPTraceExporter({ url: settings.url, headers: settings.headers });
    const processor = new BatchSpanProcessor(exporter, { scheduledDelayMillis: settings.scheduleDelayMs });
    return new OtelTracer(processor, resourceFromAttributes({ 'service.name': settings.serviceName, ...clean(resource) }), samplerOf(settings.sampler), ids);
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
    return new RecordedSpan(this, name, otelKind, traceId, this.ids.newSpanId(), parentContext, attributes, startTime ?? nowMs());
  }

  /** Sends what is left; an export that fails (the collector away, too many at once) loses those spans, never the stop. */
  async close(): Promise<void> {
    await this.processor.shutdown().catch(() => undefined);
  }
}
