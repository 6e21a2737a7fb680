/**
 * The one place that speaks HTTP. It uses node:http(s) rather than fetch: Node's fetch gives
 * up on an answer whose headers take more than 300 s (undici's headersTimeout), and an
 * algorithm call may legitimately run for 3000 s. node:http also streams request bodies of
 * any size without buffering them, and hands response bodies over as Node streams.
 */
import http from 'node:http';
import https from 'node:https';
import { Readable } from 'node:stream';
import { AlgohostError, ApiError, NetworkError } from './errors.ts';

/** Per-request options every method of the client takes. */
export interface RequestOptions {
  /** Aborts the request (and a body still streaming); the promise rejects with the signal's reason. */
  signal?: AbortSignal;
  /**
   * Gives up after this many milliseconds with a NetworkError `request_timeout`. It covers
   * the whole exchange, a streamed body included. Default: the client's (none unless set).
   */
  timeoutMs?: number;
}

export type QueryValue = string | number | boolean | undefined;

export interface HttpRequest extends RequestOptions {
  method: string;
  /** Path below the base address, already percent-encoded (`/v1/...`). */
  path: string;
  query?: Record<string, QueryValue>;
  headers?: Record<string, string>;
  /** Bytes (sent with a Content-Length) or a stream (sent chunked unless a length is given). */
  body?: Buffer | Readable;
}

export interface TransportOptions {
  baseUrl: string;
  apiKey: string | undefined;
  timeoutMs: number | undefined;
  agent: http.Agent | undefined;
  userAgent: string;
}

/** An answer whose body has not been read yet. Read it (or discard it) exactly once. */
export class HttpResponse {
  constructor(
    readonly status: number,
    private readonly headers: http.IncomingHttpHeaders,
    /** The body as it arrives; errors as the request's would (abort reason, timeout). */
    readonly body: Readable,
  ) {}

  get ok(): boolean {
    return this.status >= 200 && this.status < 300;
  }

  header(name: string): string | undefined {
    const v = this.headers[name.toLowerCase()];
    return Array.isArray(v) ? v.join(', ') : v;
  }

  async buffer(): Promise<Buffer> {
    const chunks: Buffer[] = [];
    for await (const chunk of this.body) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks);
  }

  async text(): Promise<string> {
    return (await this.buffer()).toString('utf8');
  }

  async json<T>(): Promise<T> {
    const text = await this.text();
    try {
      return JSON.parse(text) as T;
    } catch {
      throw new AlgohostError(`the server answered ${this.status} with a body that is not JSON: ${text.slice(0, 200)}`, 'invalid_response');
    }
  }

  /** Lets the connection be reused without reading what is left. */
  discard(): void {
    this.body.resume();
  }
}

/** Header values are ASCII; the server percent-encodes the rest of its message there. */
function decodeHeader(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return value;
  }
}

/** The ApiError an error answer describes: its JSON envelope, else X-Error-Message (HEAD). */
export async function apiError(res: HttpResponse): Promise<ApiError> {
  const fallback = `http_${res.status}`;
  let message = res.header('x-error-message');
  message = message ? decodeHeader(message) : `the server answered HTTP ${res.status}`;
  let text = '';
  try {
    text = await res.text();
  } catch {
    // The body broke off; the status and header still say what happened.
  }
  try {
    const e = (JSON.parse(text) as { error?: { code?: unknown; message?: unknown; id?: unknown; deleted?: unknown } }).error;
    if (e && typeof e === 'object') {
      return new ApiError(res.status, typeof e.code === 'string' ? e.code : fallback, typeof e.message === 'string' ? e.message : message, {
        ...(typeof e.id === 'string' ? { requestId: e.id } : {}),
        ...(typeof e.deleted === 'number' ? { deleted: e.deleted } : {}),
      });
    }
  } catch {
    // Not JSON: something other than the API answered (a proxy), or a raw call's message.
    if (text.trim() && !res.header('x-error-message')) message = text.trim().slice(0, 1000);
  }
  return new ApiError(res.status, fallback, message);
}

export class Transport {
  private readonly base: URL;

  constructor(private readonly options: TransportOptions) {
    this.base = new URL(options.baseUrl);
    if (this.base.protocol !== 'http:' && this.base.protocol !== 'https:') {
      throw new AlgohostError(`the API address must be http:// or https://, got "${options.baseUrl}"`, 'invalid_base_url');
    }
  }

  /** The base address the client talks to, without a trailing slash. */
  get baseUrl(): string {
    return this.base.href.replace(/\/+$/, '');
  }

  url(path: string, query: Record<string, QueryValue> = {}): URL {
    const url = new URL(this.baseUrl + path);
    for (const [k, v] of Object.entries(query)) if (v !== undefined) url.searchParams.set(k, String(v));
    return url;
  }

  /** Sends a request; resolves when the answer's headers arrive, whatever its status. */
  send(req: HttpRequest): Promise<HttpResponse> {
    const url = this.url(req.path, req.query);
    const headers: Record<string, string> = { 'user-agent': this.options.userAgent, ...req.headers };
    if (this.options.apiKey !== undefined) headers.authorization = `Simple ${this.options.apiKey}`;
    if (Buffer.isBuffer(req.body)) headers['content-length'] = String(req.body.length);

    const controller = new AbortController();
    const timeoutMs = req.timeoutMs ?? this.options.timeoutMs;
    const timer = timeoutMs === undefined ? undefined : setTimeout(() => {
      controller.abort(new NetworkError(`no complete answer from ${url.origin} within ${timeoutMs} ms`, 'request_timeout'));
    }, timeoutMs);
    timer?.unref();
    const onAbort = () => controller.abort(req.signal?.reason);
    if (req.signal?.aborted) onAbort();
    req.signal?.addEventListener('abort', onAbort, { once: true });
    const cleanup = () => {
      clearTimeout(timer);
      req.signal?.removeEventListener('abort', onAbort);
    };
    // After an abort node reports a generic AbortError; the reason (a timeout, the caller's) says more.
    const failure = (err: unknown) => {
      if (controller.signal.aborted) return controller.signal.reason as unknown;
      if (err instanceof AlgohostError) return err;
      const e = err as NodeJS.ErrnoException;
      return new NetworkError(`request to ${url.origin} failed: ${e.message}`, e.code ?? 'network_error', err);
    };

    return new Promise<HttpResponse>((resolve, reject) => {
      if (controller.signal.aborted) {
        cleanup();
        return reject(controller.signal.reason);
      }
      const mod = url.protocol === 'https:' ? https : http;
      let answered = false;
      const source = req.body instanceof Readable ? req.body : undefined;
      let sourceError: Error | undefined;
      const request = mod.request(url, { method: req.method, headers, signal: controller.signal, ...(this.options.agent ? { agent: this.options.agent } : {}) });
      request.on('response', (res) => {
        answered = true;
        const body = new Readable({ read: () => res.resume() });
        // Re-emitted through our own stream so that body errors carry the abort reason.
        res.on('data', (chunk: Buffer) => {
          if (!body.push(chunk)) res.pause();
        });
        res.on('end', () => {
          cleanup();
          body.push(null);
          // A complete answer before the whole upload was sent (a refusal) ends the upload:
          // release the source (an open file, a generator) rather than leave it paused.
          if (source && !source.readableEnded) {
            source.unpipe(request);
            source.destroy();
            request.destroy();
          }
        });
        res.on('error', (err) => {
          cleanup();
          body.destroy(failure(err) as Error);
        });
        res.on('close', () => {
          if (!res.complete) {
            cleanup();
            body.destroy(failure(new NetworkError('the connection closed before the answer was complete', 'ECONNRESET')) as Error);
          }
        });
        body.on('close', () => {
          if (!res.complete) res.destroy();
        });
        resolve(new HttpResponse(res.statusCode ?? 0, res.headers, body));
      });
      request.on('error', (err) => {
        if (answered) return;
        cleanup();
        source?.destroy();
        reject(sourceError ?? failure(err));
      });
      const body = req.body;
      if (body === undefined || Buffer.isBuffer(body)) {
        request.end(body);
        return;
      }
      body.on('error', (err) => {
        // The caller's stream failed (a missing file...): that error, not a network one.
        sourceError = err;
        request.destroy(err);
      });
      body.pipe(request);
    });
  }

  /** Sends; an error status becomes an ApiError. */
  async ok(req: HttpRequest): Promise<HttpResponse> {
    const res = await this.send(req);
    if (!res.ok) throw await apiError(res);
    return res;
  }

  /** Sends and parses the JSON answer (undefined for 204). */
  async json<T>(req: HttpRequest): Promise<T> {
    const res = await this.ok(req);
    if (res.status === 204) {
      res.discard();
      return undefined as T;
    }
    return res.json<T>();
  }
}

/** A JSON request body, ready for `send`. */
export function jsonBody(value: unknown): { body: Buffer; headers: Record<string, string> } {
  return { body: Buffer.from(JSON.stringify(value), 'utf8'), headers: { 'content-type': 'application/json' } };
}
