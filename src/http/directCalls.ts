import proxyAddr from '@fastify/proxy-addr';
import type { FastifyBaseLogger } from 'fastify';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Principal } from '../auth/principal.ts';
import type { CallRequest, CallService } from '../algorithms/calls.ts';
import { bufferedBody } from './body.ts';
import type { Metrics } from '../metrics.ts';
import { errorAnswer } from './answers.ts';
import { requestSpan, traceBindings } from '../tracing.ts';
import { callAnswer, callOptions, checkedInput, JSON_UTF8, MAX_INPUT_BYTES, parseAlgoRef, readInput, type CallOptions } from './callRoutes.ts';

/*
 * The direct path of warm calls: the same answers as callRoutes.ts gives through fastify,
 * without fastify's per-request machinery. test/direct-calls.test.ts holds the two to the
 * same answers, request by request.
 */

/**
 * A plain call: `POST /v1/algo/` then only unreserved characters and slashes, at most as long
 * as the router's longest parameter; any query. Such a path means the same to fastify's
 * router (no percent-encoding, no dot segments' encodings, no `;` or `#`) and to parseAlgoRef.
 */
const PLAIN_CALL = /^\/v1\/algo\/[A-Za-z0-9._~/-]{1,1000}(?:\?|$)/;

/** What the direct path needs from the app (app.ts). */
export interface DirectCallsOptions {
  calls: CallService;
  /** keys.authenticate, as of the store's version `at`. */
  authenticate(authorization: string | undefined, at: string): Promise<Principal>;
  /** limits.admitRequest: the caller's requests a minute (throws 429); awaits nothing on one node. */
  admitRequest: (principal: Principal) => void | Promise<void>;
  /** keys.cachedPrincipal: the same principal when it is cached, without a promise. */
  cachedPrincipal(authorization: string | undefined, at: string): Principal | undefined;
  /** The store's version (MetadataStore.version). */
  version(): string;
  /** Fastify's handler, for every request this path does not answer itself. */
  fallback(req: IncomingMessage, res: ServerResponse): void;
  /** A drain has begun: nothing new is taken, answers close their connection. */
  closing(): boolean;
  /** The next request id (the one fastify's genReqId hands out). */
  requestId(): string;
  /** The app's logger (app.log): request lines and errors as fastify would log them. */
  log: FastifyBaseLogger;
  /** ALGOHOST_TRUST_PROXY: the client's address in request lines, as fastify's req.ip has it. */
  trustProxy: false | string[];
  /** Requests counted as fastify's onResponse hook counts them (app.ts), under the route fastify would have matched. */
  metrics: Metrics;
}


/**
 * Warm calls without fastify's per-request machinery (DESIGN.md's call-latency target; see
 * docs/performance.md): a plain `POST /v1/algo/OWNER/NAME[/VERSION]` from a client, with a
 * Content-Length, whose key authenticates and whose query and Content-Type are valid, is
 * answered here, with the same checks, headers, errors and log lines as through fastify.
 * Everything else goes to fastify untouched, including any request this path has doubts
 * about before it has read a byte of the body (a refused key, a bad query, `output=void`,
 * a too large input): fastify then answers it exactly as it always did.
 */
export class DirectCalls {
  /** The route pattern fastify would have matched (callRoutes.ts), for metrics and spans. */
  static readonly ROUTE = '/v1/algo/*';

  /** Requests this path answered itself (the rest went to fastify). */
  answered = 0;

  /** Whether a proxy in front is trusted (fastify's own check, compiled once). */
  private readonly trusted: ((address: string, hop: number) => boolean) | undefined;

  constructor(private readonly o: DirectCallsOptions) {
    this.trusted = o.trustProxy ? proxyAddr.compile(o.trustProxy) : undefined;
  }

  /** Whether this path may take the request (the app has already excluded internal ones). */
  static takes(req: IncomingMessage): boolean {
    // Without a key (a console session's cookie) the call goes the framework's way, which reads cookies.
    return req.method === 'POST' && req.headers.authorization !== undefined && req.headers['content-length'] !== undefined && req.headers['transfer-encoding'] === undefined && PLAIN_CALL.test(req.url ?? '');
  }

  handle(req: IncomingMessage, res: ServerResponse): void {
    this.serve(req, res).catch((err: unknown) => this.o.log.error({ err }, 'a call on the direct path failed'));
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = req.url!;
    const q = url.indexOf('?');
    let principal: Principal;
    let ref: ReturnType<typeof parseAlgoRef>;
    let options: CallOptions;
    // The key and the call's target are both read from the hot-path caches as of this version
    // of the store: one read of it per call (see VersionedCache).
    const at = this.o.version();
    try {
      principal = this.o.cachedPrincipal(req.headers.authorization, at) ?? (await this.o.authenticate(req.headers.authorization, at));
      ref = parseAlgoRef((q < 0 ? url : url.slice(0, q)).slice(9));
      options = callOptions(url, q, req.headers['content-type']);
    } catch {
      // Fastify answers it, authenticating and checking again: the same error, the same way.
      return this.o.fallback(req, res);
    }
    if (options.output === 'void' || Number(req.headers['content-length']) > MAX_INPUT_BYTES || this.o.closing()) return this.o.fallback(req, res);

    const began = performance.now();
    const log = new RequestLog(this.o.log, this.o.requestId(), req, res, this.trusted);
    try {
      // A body that came with the headers has been parsed by the time this microtask runs: it
      // is taken as it is, and a warm call's frame leaves for its worker without another turn.
      const admitted = this.o.admitRequest(principal);
      if (admitted !== undefined) await admitted;
      else await undefined;
      const input = checkedInput(bufferedBody(req, MAX_INPUT_BYTES) ?? (await readInput(req.headers, req)), options.contentType);
      // Fields one by one: `{ ...ref, … }` here cost ~10 µs per call in place (V8's object
      // spread takes a slow path for this object; timed along the call path, 2026-11-22).
      const request: CallRequest = { owner: ref.owner, name: ref.name, version: ref.version, contentType: options.contentType, input, timeoutS: options.timeoutS, stdout: options.stdout, trace: requestSpan(req) };
      const r = await this.o.calls.call(principal, request, log, at);
      const a = callAnswer(r, options);
      const head = r.rateLimit?.flat() ?? [];
      // As callRoutes.ts: whether a worker was started for this call.
      head.push('x-cold-start', r.outcome.coldStart === true ? 'true' : 'false');
      this.send(res, a.status, a.type, a.body, head, began);
    } catch (err) {
      // The answer sendError (errorHandler.ts) gives through fastify.
      const a = errorAnswer(err, log.id);
      if (a.logged !== undefined) log.error({ err: a.logged }, 'request failed');
      this.send(res, a.status, JSON_UTF8, a.body, a.headers.flat(), began);
    }
  }

  /** Headers in fastify's order: the route's, Content-Type, then the app's onSend hook's. */
  private send(res: ServerResponse, status: number, type: string, body: string | Buffer, head: string[] | undefined, began: number): void {
    this.answered++;
    const headers = head ?? [];
    headers.push('content-type', type);
    if (this.o.closing() && !headers.includes('connection')) headers.push('connection', 'close');
    headers.push('x-content-type-options', 'nosniff', 'content-length', String(typeof body === 'string' ? Buffer.byteLength(body) : body.length));
    res.writeHead(status, headers);
    res.end(body);
    this.o.metrics.http(DirectCalls.ROUTE, 'POST', status, (performance.now() - began) / 1000);
  }
}

/**
 * A request's logger on the direct path: fastify's request lines (`incoming request`,
 * `request completed`, with the request id as `reqId`) when the level logs them, and the
 * child logger made only when something is logged.
 */
class RequestLog {
  private child: FastifyBaseLogger | undefined;
  private readonly started: number;

  constructor(
    private readonly parent: FastifyBaseLogger,
    readonly id: string,
    private readonly req: IncomingMessage,
    res: ServerResponse,
    trusted: ((address: string, hop: number) => boolean) | undefined,
  ) {
    this.started = performance.now();
    if (!infoEnabled(parent)) return;
    // What fastify's req serializer reads from its request object.
    const ip = trusted ? proxyAddr(req, trusted) : req.socket.remoteAddress;
    // As fastify's req.host: a trusted proxy's X-Forwarded-Host (its last entry) over Host.
    const forwarded = req.headers['x-forwarded-host'];
    const forwardedHost = Array.isArray(forwarded) ? forwarded.join(',') : forwarded;
    const peer = req.socket.remoteAddress;
    const host = trusted && forwardedHost && peer !== undefined && trusted(peer, 0) ? forwardedHost.slice(forwardedHost.lastIndexOf(',') + 1).trim() : (req.headers.host ?? '');
    const request = { method: req.method, url: req.url, headers: req.headers, host, ip, socket: req.socket };
    this.logger().info({ req: request }, 'incoming request');
    const finished = (err?: Error) => {
      res.off('finish', finished).off('error', finished);
      const responseTime = performance.now() - this.started;
      if (err) this.logger().error({ res, err, responseTime }, 'request errored');
      else this.logger().info({ res, responseTime }, 'request completed');
    };
    res.on('finish', finished).on('error', finished);
  }

  private logger(): FastifyBaseLogger {
    // As fastify's request logger (app.ts childLoggerFactory): the request's trace in its lines.
    const span = requestSpan(this.req);
    return (this.child ??= this.parent.child(span === undefined ? { reqId: this.id } : { reqId: this.id, ...traceBindings(span) }));
  }

  warn(obj: object, msg: string): void {
    this.logger().warn(obj, msg);
  }

  error(obj: object, msg: string): void {
    this.logger().error(obj, msg);
  }
}

/** Whether the logger writes info lines (pino's check; fastify's null logger has none: it drops them anyway). */
function infoEnabled(log: FastifyBaseLogger): boolean {
  return (log as FastifyBaseLogger & { isLevelEnabled?: (level: string) => boolean }).isLevelEnabled?.('info') ?? true;
}
