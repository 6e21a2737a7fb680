import crypto from 'node:crypto';

/*
 * Traces (docs/traces.md): every request's W3C trace context, taken from its `traceparent`
 * header or made, carried through the API node, across NATS to the worker, into the SDK
 * requests of a running algorithm, into async calls, builds and event deliveries; and its
 * spans exported over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set.
 *
 * Below the domain: imports nothing of algohost. Off (the default), a span is only its ids: no
 * OpenTelemetry code is loaded (tracingExport.ts is imported only when exporting), and a
 * request costs a traceparent parsed or made and a child logger's two bindings. On or off, no
 * AsyncLocalStorage (below, "where the context is carried").
 */

export type { AttributeValue, Attributes, ExportSettings, Span, SpanKind, TraceContext, Tracer } from './tracingTypes.ts';
import { IdSpan, type Attributes, type ExportSettings, type Span, type SpanKind, type TraceContext, type Tracer } from './tracingTypes.ts';

// ---- ids and the traceparent header ------------------------------------------------------------

/** Random bytes taken a few at a time from a pool (crypto.randomBytes per id costs a syscall's worth). */
let pool = crypto.randomBytes(4096);
let poolAt = 0;
function randomHex(bytes: number): string {
  if (poolAt + bytes > pool.length) {
    pool = crypto.randomBytes(4096);
    poolAt = 0;
  }
  const s = pool.toString('hex', poolAt, poolAt + bytes);
  poolAt += bytes;
  return s;
}

const ZERO_SPAN = '0000000000000000';
const ZERO_TRACE = ZERO_SPAN + ZERO_SPAN;

export function newSpanId(): string {
  let id = randomHex(8);
  while (id === ZERO_SPAN) id = randomHex(8);
  return id;
}

export function newTraceId(): string {
  let id = randomHex(16);
  while (id === ZERO_TRACE) id = randomHex(16);
  return id;
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;

/**
 * A `traceparent` header's context (W3C Trace Context), or undefined for anything that is not
 * one (then a new trace is made): version `ff`, an all-zero id, version 00 with more after it.
 * A later version is read by its first four fields, as the recommendation says.
 */
export function parseTraceparent(value: unknown): TraceContext | undefined {
  if (typeof value !== 'string' || value.length < 55 || value.length > 512) return undefined;
  const m = TRACEPARENT.exec(value);
  if (!m || m[1] === 'ff' || (m[1] === '00' && m[5] !== undefined) || m[2] === ZERO_TRACE || m[3] === ZERO_SPAN) return undefined;
  return { traceId: m[2]!, spanId: m[3]!, sampled: (parseInt(m[4]!, 16) & 1) === 1 };
}

/** The `traceparent` of a span: what its children are given. */
export function traceparentOf(ctx: TraceContext): string {
  return `00-${ctx.traceId}-${ctx.spanId}-${ctx.sampled ? '01' : '00'}`;
}

// ---- where the context is carried ---------------------------------------------------------------

/*
 * There is no ambient "current span": the context goes where it must by hand (docs/traces.md,
 * "What is carried where"). A request's span is on its IncomingMessage (requestSpan), in its
 * logger's bindings, in its CallRequest (`trace`) and its job's traceparent, and on the copy of
 * its principal that its changes' events read (`Principal.traceparent`); an async run's, a
 * build's, a delivery's and a trigger run's span is handed down as an argument.
 *
 * Not an AsyncLocalStorage: on Node 20 one, once entered anywhere, keeps async hooks on for
 * the whole process, and every promise and async resource then pays about 0.13 µs. Measured
 * with spans exported (bench:algo, warm echo calls), that was most of exporting's cost: 202 µs
 * of server CPU per call sampling one trace in ten against 161 µs not exporting, when the SDK's
 * own work per span is 20–27 µs (bench/traceCost.ts).
 */

const REQUEST_SPAN = Symbol('algohost.span');

/** Gives an HTTP request its span (app.ts), for its routes and its logger. */
export function setRequestSpan(req: object, span: Span): void {
  (req as { [REQUEST_SPAN]?: Span })[REQUEST_SPAN] = span;
}

/** The span of an HTTP request (its IncomingMessage), if app.ts gave it one. */
export function requestSpan(req: object): Span | undefined {
  return (req as { [REQUEST_SPAN]?: Span })[REQUEST_SPAN];
}

/** A logger's bindings for the lines of a span: its `trace_id` and `span_id`. */
export function traceBindings(span: TraceContext): { trace_id: string; span_id: string } {
  return { trace_id: span.traceId, span_id: span.spanId };
}

// ---- spans when not exporting -------------------------------------------------------------------

/**
 * Not exporting: a child carries its parent's ids on unchanged (what a W3C participant that
 * records nothing does: the next one's parent-id is the last span recorded), and a request
 * without a parent gets a new trace, not sampled (nothing of it is recorded here).
 */
class IdTracer implements Tracer {
  readonly exporting = false;
  start(_name: string, _kind: SpanKind, parent: TraceContext | undefined): Span {
    if (parent === undefined) return new IdSpan(newTraceId(), newSpanId(), false);
    return carried(parent);
  }
  async close(): Promise<void> {}
}

/**
 * A span that only carries `ctx` on, recording nothing: for log lines of work done for a span
 * of another node (a worker node's handling of a job, before and after its run's own span).
 */
export function carried(ctx: TraceContext): Span {
  return ctx instanceof IdSpan ? ctx : new IdSpan(ctx.traceId, ctx.spanId, ctx.sampled);
}

/** The tracer of a node that exports nothing. */
export const NO_TRACING: Tracer = new IdTracer();

/** A span of `tracer` that is the one a caller's traceparent header names, or a new trace's. */
export function spanFromHeader(tracer: Tracer, header: unknown, name: string, kind: SpanKind, attributes?: Attributes): Span {
  return tracer.start(name, kind, parseTraceparent(header), attributes);
}

/**
 * The node's tracer: exporting when `settings` are given, loading the OpenTelemetry SDK then
 * (and only then). `resource`: what names this node (its role, name, instance).
 */
export async function openTracer(settings: ExportSettings | undefined, resource: Attributes = {}): Promise<Tracer> {
  if (settings === undefined) return NO_TRACING;
  const { OtelTracer } = await import('./tracingExport.ts');
  return OtelTracer.open(settings, resource, { newTraceId, newSpanId });
}
