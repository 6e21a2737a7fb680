import { AsyncLocalStorage } from 'node:async_hooks';
import crypto from 'node:crypto';

/*
 * Traces (docs/traces.md): every request's W3C trace context, taken from its `traceparent`
 * header or made, carried through the API node, across NATS to the worker, into the SDK
 * requests of a running algorithm, into async calls, builds and event deliveries; and its
 * spans exported over OTLP/HTTP when OTEL_EXPORTER_OTLP_ENDPOINT is set.
 *
 * Below the domain: imports nothing of algohost. Off (the default), a span is only its ids: no
 * OpenTelemetry code is loaded (tracingExport.ts is imported only when exporting), no
 * AsyncLocalStorage is entered (see `keeping`), and a request costs a traceparent parsed or
 * made and a child logger's two bindings.
 */

export type { AttributeValue, Attributes, ExportSettings, Span, SpanKind, TraceContext, Tracer } from './tracingTypes.ts';
import type { Attributes, ExportSettings, Span, SpanKind, TraceContext, Tracer } from './tracingTypes.ts';

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

// ---- the current span of this async flow --------------------------------------------------------

/**
 * The span the code running now belongs to, when exporting: set for each HTTP request (app.ts),
 * each async call, build, delivery and trigger run; what they start (a call, an event's row)
 * is its child.
 */
const current = new AsyncLocalStorage<Span>();

/**
 * Whether the current span is kept at all: only once a tracer exports. On Node 20 an
 * AsyncLocalStorage, once entered, runs a hook for every promise and async resource the
 * process makes (about 0.13 µs each, measured: 10–20 % of a warm call's CPU), so with tracing
 * off none is entered, and the context goes where it must by hand: a request's span on its
 * IncomingMessage (requestSpan), in its logger's bindings, in the CallRequest, in a job.
 */
let keeping = false;

export function currentSpan(): Span | undefined {
  return keeping ? current.getStore() : undefined;
}

/** The traceparent of the span running now, for a row whose work continues the trace later; null outside spans (and when not exporting). */
export function currentTraceparent(): string | null {
  const span = currentSpan();
  return span === undefined ? null : traceparentOf(span);
}

/** Runs `fn` with `span` as the current span (when spans are exported; otherwise just runs it). */
export function withSpan<A extends unknown[], R>(span: Span, fn: (...args: A) => R, ...args: A): R {
  return keeping ? current.run(span, fn, ...args) : fn(...args);
}

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

/**
 * Runs `fn` outside any request's span: for what lives longer than the request that happens to
 * start it (a worker process, a connection), whose callbacks would otherwise log as that request.
 */
export function outsideSpans<R>(fn: () => R): R {
  return current.exit(fn);
}

// ---- spans when not exporting -------------------------------------------------------------------

/** A span that records nothing: the ids it carries on. */
class IdSpan implements Span {
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
  keeping = true;
  const { OtelTracer } = await import('./tracingExport.ts');
  return OtelTracer.open(settings, resource, { newTraceId, newSpanId });
}
