/**
 * The Node transport, the default in Node. It uses node:http(s) rather than fetch: Node's
 * fetch gives up on an answer whose headers take more than 300 s (undici's headersTimeout),
 * and an algorithm call may legitimately run for 3000 s. node:http also streams request
 * bodies of any size without buffering them, and hands response bodies over as Node streams.
 * Browsers use FetchTransport (fetchTransport.ts) instead.
 */
import http from 'node:http';
import https from 'node:https';
import { Readable } from 'node:stream';
import type { ReadableStream as NodeWebStream } from 'node:stream/web';
import { AlgohostError, NetworkError } from './errors.ts';
import { checkBaseUrl, parseJson, requestUrl, type HttpRequest, type HttpResponse, type Platform, type Transport } from './transport.ts';

/** Bytes and body streams in Node: Buffers and Readables. */
export interface NodePlatform extends Platform {
  bytes: Buffer;
  stream: Readable;
}

export interface NodeTransportOptions {
  baseUrl: string;
  apiKey: string | undefined;
  timeoutMs: number | undefined;
  agent: http.Agent | undefined;
  userAgent: string;
}

/** A request body as a Node Readable; bytes are sent as they are, not through here. */
function asReadable(body: Exclude<HttpRequest['body'], Uint8Array | undefined>): Readable {
  if (body instanceof Readable) return body;
  if (body instanceof ReadableStream) return Readable.fromWeb(body as NodeWebStream<Uint8Array>);
  if (body instanceof Blob) return Readable.fromWeb(body.stream() as NodeWebStream<Uint8Array>);
  return Readable.from(body, { objectMode: false });
}

/** An answer of node:http whose body has not been read yet. */
export class NodeResponse implements HttpResponse<NodePlatform> {
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

  async bytes(): Promise<Buffer> {
    const chunks: Buffer[] = [];
    for await (const chunk of this.body) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks);
  }

  /** Same as bytes(). */
  buffer(): Promise<Buffer> {
    return this.bytes();
  }

  async text(): Promise<string> {
    return (await this.bytes()).toString('utf8');
  }

  async json<T>(): Promise<T> {
    return parseJson<T>(this.status, await this.text());
  }

  stream(): Readable {
    return this.body;
  }

  /** Lets the connection be reused without reading what is left. */
  discard(): void {
    this.body.resume();
  }

  cancel(): void {
    this.body.destroy();
  }
}

export class NodeTransport implements Transport<NodePlatform> {
  private readonly base: URL;

  constructor(private readonly options: NodeTransportOptions) {
    this.base = checkBaseUrl(options.baseUrl);
  }

  /** The base address the client talks to, without a trailing slash. */
  get baseUrl(): string {
    return this.base.href.replace(/\/+$/, '');
  }

  bytesFromBase64(text: string): Buffer {
    return Buffer.from(text, 'base64');
  }

  /** Sends a request; resolves when the answer's headers arrive, whatever its status. */
  send(req: HttpRequest): Promise<NodeResponse> {
    const url = requestUrl(this.baseUrl, req.path, req.query);
    const headers: Record<string, string> = { 'user-agent': this.options.userAgent, ...req.headers };
    if (this.options.apiKey !== undefined) headers.authorization = `Simple ${this.options.apiKey}`;
    const body = req.body;
    const bytes = body instanceof Uint8Array ? body : undefined;
    if (bytes) headers['content-length'] = String(bytes.byteLength);

    const controller = new AbortController();
    const timeoutMs = req.timeoutMs ?? this.options.timeoutMs;
    const timer = !timeoutMs ? undefined : setTimeout(() => {
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

    return new Promise<NodeResponse>((resolve, reject) => {
      if (controller.signal.aborted) {
        cleanup();
        return reject(controller.signal.reason);
      }
      const mod = url.protocol === 'https:' ? https : http;
      let answered = false;
      const source = body === undefined || body instanceof Uint8Array ? undefined : asReadable(body);
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
        resolve(new NodeResponse(res.statusCode ?? 0, res.headers, body));
      });
      request.on('error', (err) => {
        if (answered) return;
        cleanup();
        source?.destroy();
        reject(sourceError ?? failure(err));
      });
      if (!source) {
        request.end(bytes);
        return;
      }
      source.on('error', (err) => {
        // The caller's stream failed (a missing file...): that error, not a network one.
        sourceError = err;
        request.destroy(err);
      });
      source.pipe(request);
    });
  }
}
