import { ROOT_CONTEXT, SpanKind as OtelKind, SpanStatusCode, trace, TraceFlags, type Span as OtelSpan, type Tracer as OtelApiTracer } from '@opentelemetry/api';
import { AlwaysOffSampler, AlwaysOnSampler, BasicTracerProvider, BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler, type Sampler } from '@opentelemetry/sdk-trace-base';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { resourceFromAttributes } from '@opentelemetry/resources';
import type { AttributeValue, Attributes, ExportSettings, Span, SpanKind, TraceContext, Tracer } from './tracingTypes.ts';

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

class ExportedSpan implements Span {
  readonly recording: boolean;
  readonly traceId: string;
  readonly spanId: string;
  readonly sampled: boolean;
  route: string | undefined = undefined;

  constructor(private readonly span: OtelSpan) {
    const c = span.spanContext();
    this.traceId = c.traceId;
    this.spanId = c.spanId;
    this.sampled = (c.traceFlags & TraceFlags.SAMPLED) === TraceFlags.SAMPLED;
    this.recording = span.isRecording();
  }

  set(key: string, value: AttributeValue | undefined): void {
    if (value !== undefined) this.span.setAttribute(key, value);
  }

  fail(message: string): void {
    this.span.setStatus({ code: SpanStatusCode.ERROR, message });
  }

  rename(name: string): void {
    this.span.updateName(name);
  }

  end(): void {
    this.span.end();
  }
}

export class OtelTracer implements Tracer {
  readonly exporting = true;

  private constructor(
    private readonly provider: BasicTracerProvider,
    private readonly tracer: OtelApiTracer,
  ) {}

  static open(settings: ExportSettings, resource: Attributes): OtelTracer {
    const exporter = new OTLPTraceExporter({ url: settings.url, headers: settings.headers });
    const provider = new BasicTracerProvider({
      resource: resourceFromAttributes({ 'service.name': settings.serviceName, ...clean(resource) }),
      sampler: samplerOf(settings.sampler),
      spanProcessors: [new BatchSpanProcessor(exporter, { scheduledDelayMillis: settings.scheduleDelayMs })],
    });
    return new OtelTracer(provider, provider.getTracer('algohost'));
  }

  start(name: string, kind: SpanKind, parent: TraceContext | undefined, attributes?: Attributes, startTime?: number): Span {
    const context =
      parent === undefined
        ? ROOT_CONTEXT
        : trace.setSpanContext(ROOT_CONTEXT, { traceId: parent.traceId, spanId: parent.spanId, traceFlags: parent.sampled ? TraceFlags.SAMPLED : TraceFlags.NONE, isRemote: true });
    return new ExportedSpan(this.tracer.startSpan(name, { kind: KINDS[kind], attributes: clean(attributes), ...(startTime === undefined ? {} : { startTime }) }, context));
  }

  /** Sends what is left; an export that fails (the collector away, too many at once) loses those spans, never the stop. */
  async close(): Promise<void> {
    await this.provider.shutdown().catch(() => undefined);
  }
}
