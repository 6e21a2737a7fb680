import crypto from 'node:crypto';
import type { ErrorCode } from '../errors.ts';
import { errorDocument } from '../http/answers.ts';
import type { Principal } from '../auth/principal.ts';
import type { HostHandler } from '../runtime/contract.ts';
import { parseTraceparent, traceparentOf, type Span } from '../tracing.ts';

/** Nested calls deeper than this are refused (a loop of algorithms calling each other). */
export const MAX_CALL_DEPTH = 5;
/** Largest body an algorithm may send or receive through the SDK (one frame). */
export const MAX_SDK_BODY = 64 * 1024 * 1024;
/** File bytes read through the SDK held in the server at once, all calls together. */
export const SDK_READ_BUDGET = 256 * 1024 * 1024;

/**
 * Bytes that may be held at once: a reader waits for its share (until its call's deadline),
 * so many algorithms reading big files at once queue instead of exhausting the server.
 */
export class ByteBudget {
  private used = 0;
  private readonly waiting: Array<{ n: number; grant: () => void }> = [];

  constructor(readonly total: number) {}

  take(n: number, deadline: number): Promise<boolean> {
    const want = Math.min(n, this.total);
    if (this.waiting.length === 0 && this.used + want <= this.total) {
      this.used += want;
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const entry = {
        n: want,
        grant: () => {
          clearTimeout(timer);
          resolve(true);
        },
      };
      const timer = setTimeout(() => {
        this.waiting.splice(this.waiting.indexOf(entry), 1);
        resolve(false);
      }, Math.max(0, deadline - Date.now()));
      this.waiting.push(entry);
    });
  }

  give(n: number): void {
    this.used -= Math.min(n, this.total);
    while (this.waiting.length > 0 && this.used + this.waiting[0]!.n <= this.total) {
      const next = this.waiting.shift()!;
      this.used += next.n;
      next.grant();
    }
  }
}

/**
 * Who an algorithm acts as while it runs: the caller (`.my` is the caller's space, with the
 * caller key's permissions), through this algorithm (data ACLs for "my algorithms" see it),
 * at this depth of nesting, until the call's deadline.
 */
export interface CallContext {
  principal: Principal;
  depth: number;
  /** Date.now() by which the call must be answered: nested calls get what is left. */
  deadline: number;
  /** `pipeline_enabled`: whether this algorithm may call others. */
  pipelineEnabled: boolean;
}

/** What the SDK may reach: calls and data, never key or algorithm management. */
const ALLOWED_PATHS = [/^\/v1\/algo\//, /^\/v1\/data(\/|$)/, /^\/v1\/connector\//];
/** The routes those paths match (checked again after routing: app.ts). */
export const SDK_ROUTES: ReadonlySet<string> = new Set(['/v1/algo/*', '/v1/data', '/v1/data/*', '/v1/connector/*']);

/**
 * A path the router will see as written: no `.` or `..` segment, raw or percent-encoded (the
 * HTTP layer resolves them, so `/v1/algo/../users/x/keys` would reach key management), and no
 * encoded slash or backslash that could change where segments split.
 */
function plainPath(url: string): boolean {
  const path = url.split('?')[0]!;
  for (const segment of path.split('/')) {
    let decoded: string;
    try {
      decoded = decodeURIComponent(segment);
    } catch {
      return false;
    }
    if (decoded === '.' || decoded === '..' || decoded.includes('/') || decoded.includes('\\')) return false;
  }
  return true;
}
const ALLOWED_METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE']);
const FORWARDED_HEADERS = ['content-type', 'accept', 'range', 'if-none-match', 'if-range'];

export interface GatewayRequest {
  method: string;
  /** Path and query, e.g. `/v1/data/.my/c/x.txt?acl=true`. */
  url: string;
  headers: Record<string, string>;
  body: Buffer;
}

export interface GatewayResponse {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

/** Runs a request through the HTTP API itself, as `internalId` (see InternalRequests). */
export type Gateway = (internalId: string, request: GatewayRequest) => Promise<GatewayResponse>;

/**
 * Requests made from inside algorithms go through the same routes, checks and errors as any
 * client's. They carry no key: each gets a one-time random id the server registers with the
 * call's context just before and forgets right after. The id travels in a header only the
 * server writes; the algorithm never sees it.
 */
export class InternalRequests {
  private readonly live = new Map<string, CallContext>();
  private readonly budget = new ByteBudget(SDK_READ_BUDGET);
  gateway: Gateway | undefined;

  lookup(id: string): CallContext | undefined {
    return this.live.get(id);
  }

  /**
   * The handler that serves one call's SDK requests, in the call's trace (`span`): the request's
   * own traceparent (the runner gives the run's, docs/traces.md) is kept, and one without gets
   * the call's. Each goes through the HTTP API (the gateway) with it as its `traceparent`
   * header, so its own server span, its log lines and its changes' events continue the trace.
   */
  handler(ctx: CallContext, span?: Span): HostHandler {
    return this.serve(ctx, span === undefined ? undefined : traceparentOf(span));
  }

  private serve(ctx: CallContext, traceparent: string | undefined): HostHandler {
    return async (header, body) => {
      const method = typeof header.method === 'string' ? header.method.toUpperCase() : '';
      const url = typeof header.url === 'string' ? header.url : '';
      if (!ALLOWED_METHODS.has(method)) return refuse(`method ${method.slice(0, 20)} is not available to algorithms`);
      if (!url.startsWith('/') || !plainPath(url) || !ALLOWED_PATHS.some((p) => p.test(url))) {
        return refuse(`${url.slice(0, 100)} is not available to algorithms (only /v1/algo, /v1/data and /v1/connector)`);
      }
      if (body.length > MAX_SDK_BODY) return refuse('the request body is too large');
      const headers: Record<string, string> = {};
      const given = (typeof header.headers === 'object' && header.headers !== null ? header.headers : {}) as Record<string, unknown>;
      for (const name of FORWARDED_HEADERS) {
        const v = given[name];
        if (typeof v === 'string') headers[name] = v.slice(0, 1000);
      }
      const givenTrace = given.traceparent;
      if (parseTraceparent(givenTrace) !== undefined) headers.traceparent = givenTrace as string;
      else if (traceparent !== undefined) headers.traceparent = traceparent;
      const gateway = this.gateway;
      if (!gateway) return refuse('the server is not ready for requests from algorithms');
      const run = async (m: string, h: Record<string, string>, b: Buffer): Promise<GatewayResponse> => {
        const id = crypto.randomBytes(24).toString('base64url');
        this.live.set(id, ctx);
        try {
          return await gateway(id, { method: m, url, headers: h, body: b });
        } finally {
          this.live.delete(id);
        }
      };
      // A file read is sized first: too large is refused before a byte is read, and what is
      // read counts against the server-wide budget until the answer has left for the sandbox.
      let reserved = 0;
      if (method === 'GET' && !url.startsWith('/v1/algo/')) {
        const head = await run('HEAD', headers, Buffer.alloc(0));
        let size = head.headers['x-data-type'] === 'file' ? Number(head.headers['content-length'] ?? 0) : 0;
        if (size > MAX_SDK_BODY && headers.range === undefined) return tooLarge(size);
        if (size > 0) {
          size = Math.min(size, MAX_SDK_BODY);
          if (!(await this.budget.take(size, ctx.deadline))) return refuse('the server is busy reading files for other algorithms; try again');
          reserved = size;
        }
      }
      try {
        const r = await run(method, headers, body);
        if (r.body.length > MAX_SDK_BODY) {
          this.budget.give(reserved);
          return tooLarge(r.body.length);
        }
        const held = reserved;
        reserved = 0;
        return { header: { status: r.status, headers: r.headers }, body: r.body, done: () => this.budget.give(held) };
      } catch (err) {
        this.budget.give(reserved);
        throw err;
      }
    };
  }
}

/** An answer in the API's error envelope, for what the SDK gate itself refuses. */
function errorAnswer(status: number, code: ErrorCode, message: string) {
  return Promise.resolve({ header: { status, headers: { 'content-type': 'application/json' } }, body: Buffer.from(errorDocument(code, message)) });
}

function tooLarge(size: number) {
  return errorAnswer(413, 'payload_too_large', `the file is ${size} bytes; an algorithm reads at most ${MAX_SDK_BODY} bytes at once through the SDK`);
}

function refuse(message: string) {
  return errorAnswer(400, 'invalid_path', message);
}
