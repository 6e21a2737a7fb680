/**
 * The types of traces (tracing.ts), apart: what tracing.ts and the exporter it loads only when
 * spans are exported (tracingExport.ts) both speak, so that neither imports the other: the
 * types, and the span that records nothing (IdSpan), which both make.
 */

/** A span's identity: what a traceparent carries (W3C Trace Context, version 00). */
export interface TraceContext {
  /** 32 lowercase hex digits, not all zero. */
  readonly traceId: string;
  /** 16 lowercase hex digits, not all zero: this span's id (the parent-id of its children). */
  readonly spanId: string;
  /** The trace-flags' sampled bit: whether the caller (or we) may record it. */
  readonly sampled: boolean;
}

export type SpanKind = 'internal' | 'server' | 'client' | 'producer' | 'consumer';
export type AttributeValue = string | number | boolean;
export type Attributes = Record<string, AttributeValue | undefined>;

/** A span: its context for children, and what it records (nothing when not exporting). */
export interface Span extends TraceContext {
  /** Whether it is recorded and exported (false: attributes and names are not even made). */
  readonly recording: boolean;
  /** The route pattern of an HTTP server span, once routing has found it. */
  route: string | undefined;
  set(key: string, value: AttributeValue | undefined): void;
  /** Marks the span failed (OpenTelemetry's status ERROR), with a short description. */
  fail(message: string): void;
  rename(name: string): void;
  end(): void;
}

/** Starts spans: OpenTelemetry's when exporting, ids only when not. */
export interface Tracer {
  /** Whether spans are exported (OTEL_EXPORTER_OTLP_ENDPOINT): only then are names and attributes worth making. */
  readonly exporting: boolean;
  /** A span child of `parent` (a new trace without one). Times are Date.now() ms. */
  start(name: string, kind: SpanKind, parent: TraceContext | undefined, attributes?: Attributes, startTime?: number): Span;
  /** Sends what is left and stops exporting. */
  close(): Promise<void>;
}

/** What exporting needs (Config.traces, read in config.ts). */
export interface ExportSettings {
  /** The OTLP/HTTP traces URL (`…/v1/traces`). */
  url: string;
  headers: Record<string, string>;
  serviceName: string;
  /** How often batches are sent (OTEL_BSP_SCHEDULE_DELAY). */
  scheduleDelayMs: number;
  /** Finished spans waiting to be sent, at most (OTEL_BSP_MAX_QUEUE_SIZE): past it, spans are dropped. */
  maxQueueSize: number;
  /** Spans per export request, at most (OTEL_BSP_MAX_EXPORT_BATCH_SIZE). */
  maxExportBatchSize: number;
  /** How long one export request may take (OTEL_BSP_EXPORT_TIMEOUT). */
  exportTimeoutMs: number;
  /** OTEL_TRACES_SAMPLER and its ratio (OTEL_TRACES_SAMPLER_ARG). */
  sampler: { name: 'always_on' | 'always_off' | 'traceidratio' | 'parentbased_always_on' | 'parentbased_always_off' | 'parentbased_traceidratio'; ratio: number };
}

/** A span that records nothing: the ids it carries on (tracing off, or a trace not sampled). */
export class IdSpan implements Span {
  readonly recording = false;
  route: string | undefined = undefined;
  constructor(
    readonly traceId: string,
    readonly spanId: string,
    readonly sampled: boolean,
  ) {}
  set(): void {}
  fail(): void {}
  rename(): void {}
  end(): void {}
}
