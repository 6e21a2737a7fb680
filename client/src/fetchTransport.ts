/**
 * The transport over the global `fetch`, for browsers (the web console) and any runtime with
 * fetch and web streams. No Node built-ins: browser.ts bundles it for the browser.
 *
 * What differs from the Node transport (http.ts), by what fetch allows:
 * - Authentication: an API key (`Authorization: Simple`) or none, the page's cookies going
 *   along (`credentials`, 'same-origin' by default), with headers of your own on every request
 *   (`X-CSRF-Token`).
 * - Uploads: bytes and Blobs (a File from an `<input>`) go as they are, streamed from disk by
 *   the browser. Other streams are gathered into a Blob first unless `streamingUploads` is on:
 *   browsers send a stream as a request body only over HTTP/2 (Chromium), and Node's fetch
 *   does so over HTTP/1.1 too.
 * - Long calls: Node's fetch gives up on an answer whose headers take over 300 s (undici's
 *   headersTimeout); in Node, calls that may run longer belong to the Node transport.
 */
import { AlgohostError, NetworkError } from './errors.ts';
import {
  DEFAULT_BASE_URL, checkBaseUrl, parseJson, requestUrl, type HttpRequest, type HttpResponse, type Transport, type WebPlatform,
} from './transport.ts';

export interface FetchTransportOptions {
  /**
   * The server's address, without `/v1` (a relative one is resolved against the page's).
   * Default: the page's origin in a browser (a console served by the server itself), else
   * DEFAULT_BASE_URL.
   */
  baseUrl?: string;
  /** An API key, sent as `Authorization: Simple <key>`. Without one, the page's cookies authenticate (a console session). */
  apiKey?: string;
  /**
   * Headers sent with every request, such as a session's `X-CSRF-Token`: an object, or a
   * function asked before each request (for a value that changes). A request's own headers
   * win over these.
   */
  headers?: Record<string, string> | (() => Record<string, string>);
  /** fetch's `credentials`: whether cookies go along. Default `same-origin`. */
  credentials?: 'omit' | 'same-origin' | 'include';
  /** Default for every request's `timeoutMs` (none unless set). */
  timeoutMs?: number;
  /**
   * Send a stream body (a web ReadableStream, an async iterable) as it is read, with fetch's
   * `duplex: 'half'`, instead of gathering it into a Blob first. Node's fetch does this over
   * any connection, Chromium over HTTP/2 only, other browsers not at all. Default false.
   */
  streamingUploads?: boolean;
  /** The fetch to use; the global one by default. */
  fetch?: typeof globalThis.fetch;
}

/** The page's address, in a browser. */
const pageHref = (): string | undefined => (globalThis as { location?: { href?: unknown } }).location?.href as string | undefined;

/** `fetch`'s failures carry the system's code in their cause (undici), or nothing (browsers). */
function systemCode(err: unknown): { code: string; message: string } {
  const e = err as { message?: unknown; code?: unknown; cause?: { message?: unknown; code?: unknown; errors?: { code?: unknown }[] } };
  const cause = e.cause;
  const code = [cause?.code, cause?.errors?.[0]?.code, e.code].find((c): c is string => typeof c === 'string');
  const message = typeof cause?.message === 'string' && cause.message ? cause.message : String(e.message ?? err);
  return { code: code ?? 'network_error', message };
}

/** Rejects as soon as `signal` aborts, with its reason. */
function abortable<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/**
 * A caller's stream as a web ReadableStream that remembers how it ended: its own error
 * (reported as itself, not as a network failure), or released early (a refusal answered
 * before the upload was complete: the source, a file or a generator, is let go).
 */
class Source {
  readonly stream: ReadableStream<Uint8Array>;
  error: unknown;
  private finished = false;
  private controller: ReadableStreamDefaultController<Uint8Array> | undefined;
  private readonly next: () => Promise<IteratorResult<Uint8Array>>;
  private readonly stop: () => Promise<unknown>;

  constructor(body: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>) {
    if (typeof ReadableStream !== 'undefined' && body instanceof ReadableStream) {
      const reader = body.getReader();
      this.next = () => reader.read() as Promise<IteratorResult<Uint8Array>>;
      this.stop = () => reader.cancel();
    } else {
      const it = (body as AsyncIterable<Uint8Array>)[Symbol.asyncIterator]();
      this.next = () => it.next();
      // A Node Readable's iterator destroys the stream on return().
      this.stop = async () => it.return?.();
    }
    this.stream = new ReadableStream<Uint8Array>({
      start: (controller) => {
        this.controller = controller;
      },
      pull: async (controller) => {
        try {
          const { done, value } = await this.next();
          if (done) {
            this.finished = true;
            controller.close();
          } else {
            controller.enqueue(value instanceof Uint8Array ? value : new TextEncoder().encode(String(value)));
          }
        } catch (err) {
          this.finished = true;
          this.error = err;
          controller.error(err);
        }
      },
      cancel: async () => {
        await this.release();
      },
    });
  }

  /** Lets the source go if it is not read to its end yet. */
  async release(): Promise<void> {
    if (this.finished) return;
    this.finished = true;
    try {
      this.controller?.error(new AlgohostError('the server answered before the upload was complete', 'upload_stopped'));
    } catch {
      // Already closed.
    }
    await this.stop().catch(() => undefined);
  }
}

/** An answer of fetch whose body has not been read yet. */
class FetchResponse implements HttpResponse<WebPlatform> {
  readonly status: number;
  readonly ok: boolean;

  constructor(
    private readonly res: Response,
    /** Stops the timer, lets the upload's source go; called once the body is done with. */
    private readonly done: () => void,
    /** What an error reading the body becomes (an abort's reason, a NetworkError). */
    private readonly failure: (err: unknown) => unknown,
  ) {
    this.status = res.status;
    this.ok = res.ok;
    if (res.body === null) done();
  }

  header(name: string): string | undefined {
    return this.res.headers.get(name) ?? undefined;
  }

  async bytes(): Promise<Uint8Array> {
    try {
      return new Uint8Array(await this.res.arrayBuffer());
    } catch (err) {
      throw this.failure(err);
    } finally {
      this.done();
    }
  }

  async text(): Promise<string> {
    // As the Node transport: a byte order mark is kept (Response.text() would drop it).
    return new TextDecoder('utf-8', { ignoreBOM: true }).decode(await this.bytes());
  }

  async json<T>(): Promise<T> {
    return parseJson<T>(this.status, await this.text());
  }

  stream(): ReadableStream<Uint8Array> {
    const body = this.res.body;
    if (body === null) {
      return new ReadableStream<Uint8Array>({
        start: (controller) => controller.close(),
      });
    }
    // Read through our own stream so that errors carry the abort reason, and the timer stops at the end.
    const reader = body.getReader();
    return new ReadableStream<Uint8Array>({
      pull: async (controller) => {
        try {
          const { done, value } = await reader.read();
          if (done) {
            this.done();
            controller.close();
          } else {
            controller.enqueue(value);
          }
        } catch (err) {
          this.done();
          controller.error(this.failure(err));
        }
      },
      cancel: async (reason) => {
        this.done();
        await reader.cancel(reason).catch(() => undefined);
      },
    });
  }

  /** Reads and drops what is left, so the connection can be reused. */
  discard(): void {
    if (this.res.body === null || this.res.bodyUsed) return;
    this.res.arrayBuffer().then(this.done, this.done);
  }

  cancel(): void {
    this.done();
    if (this.res.body !== null && !this.res.bodyUsed) this.res.body.cancel().catch(() => undefined);
  }
}

export class FetchTransport implements Transport<WebPlatform> {
  private readonly base: URL;
  private readonly fetch: typeof globalThis.fetch;

  constructor(private readonly options: FetchTransportOptions = {}) {
    const page = pageHref();
    this.base = checkBaseUrl(options.baseUrl ?? (page === undefined ? DEFAULT_BASE_URL : new URL(page).origin), page);
    const f = options.fetch ?? globalThis.fetch;
    if (typeof f !== 'function') throw new AlgohostError('there is no global fetch here: pass one as the `fetch` option', 'no_fetch');
    // Called on its own, as browsers require ("Illegal invocation" otherwise).
    this.fetch = (input, init) => f(input, init);
  }

  /** The base address the client talks to, without a trailing slash. */
  get baseUrl(): string {
    return this.base.href.replace(/\/+$/, '');
  }

  bytesFromBase64(text: string): Uint8Array {
    const binary = atob(text);
    const out = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
    return out;
  }

  async send(req: HttpRequest): Promise<HttpResponse<WebPlatform>> {
    const url = requestUrl(this.baseUrl, req.path, req.query);
    const extra = typeof this.options.headers === 'function' ? this.options.headers() : this.options.headers;
    const headers = new Headers(extra);
    for (const [k, v] of Object.entries(req.headers ?? {})) headers.set(k, v);
    if (this.options.apiKey !== undefined) headers.set('authorization', `Simple ${this.options.apiKey}`);
    // fetch sets the length of bytes and Blobs itself, and a browser refuses it from a page.
    headers.delete('content-length');

    const controller = new AbortController();
    const timeoutMs = req.timeoutMs ?? this.options.timeoutMs;
    const timer = !timeoutMs ? undefined : setTimeout(() => {
      controller.abort(new NetworkError(`no complete answer from ${url.origin} within ${timeoutMs} ms`, 'request_timeout'));
    }, timeoutMs);
    const onAbort = () => controller.abort(req.signal?.reason);
    if (req.signal?.aborted) onAbort();
    req.signal?.addEventListener('abort', onAbort, { once: true });

    const body = req.body;
    const whole = body === undefined || body instanceof Uint8Array || (typeof Blob !== 'undefined' && body instanceof Blob);
    const source = whole ? undefined : new Source(body as ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>);
    let finished = false;
    const done = () => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      req.signal?.removeEventListener('abort', onAbort);
      void source?.release();
    };
    const failure = (err: unknown): unknown => {
      if (controller.signal.aborted) return controller.signal.reason;
      // The caller's stream failed (a missing file...): that error, not a network one.
      if (source?.error !== undefined) return source.error;
      if (err instanceof AlgohostError) return err;
      const { code, message } = systemCode(err);
      return new NetworkError(`request to ${url.origin} failed: ${message}`, code, err);
    };

    try {
      let sent: Uint8Array | Blob | ReadableStream<Uint8Array> | undefined = source ? source.stream : (body as Uint8Array | Blob | undefined);
      const streaming = source !== undefined && this.options.streamingUploads === true;
      if (source && !streaming) sent = await abortable(new Response(source.stream).blob(), controller.signal);
      const init: RequestInit & { duplex?: 'half' } = {
        method: req.method,
        headers,
        body: sent as RequestInit['body'],
        signal: controller.signal,
        credentials: this.options.credentials ?? 'same-origin',
        ...(streaming ? { duplex: 'half' as const } : {}),
      };
      const res = await this.fetch(url, init);
      return new FetchResponse(res, done, failure);
    } catch (err) {
      done();
      throw failure(err);
    }
  }
}
