import http from 'node:http';
import net from 'node:net';
import tls from 'node:tls';
import { Readable, type Writable } from 'node:stream';

/**
 * The HTTP transport of the S3 client for large reads of hosted file contents (docs/data.md,
 * "Reading from S3"). The SDK builds, signs, retries and interprets the request as for any
 * other; this handler only carries it: one HTTP/1.1 GET on a connection of its own, the answer
 * read with Node's `onread` straight into 64 KiB buffers from a shared pool, and the body's
 * chunks handed back to the pool once a socket they were piped into has taken them.
 *
 * Why: relaying a file from S3 to a client, Node's default reading allocates fresh memory for
 * every 64 KiB that arrives, and on virtual machines where touching fresh pages is dear that
 * costs several times the relay itself (bench:data measured 0.45-0.9 s of CPU per 100 MiB
 * through the SDK's own transport, about 0.15 s with this one). Buffers are recycled only where
 * that is provably safe: through `pipe()` into a socket or an HTTP response, whose write
 * callback fires once the kernel holds the bytes. Any other consumer keeps its chunks, and the
 * pool simply allocates new ones.
 */

/** The parts of the SDK's request (an `HttpRequest` of @smithy/protocol-http) this handler reads. */
export interface SdkHttpRequest {
  method: string;
  protocol: string;
  hostname: string;
  port?: number;
  path: string;
  query?: Record<string, string | Array<string> | null>;
  headers: Record<string, string>;
  body?: unknown;
}

/** The SDK's `HttpResponse` (structurally). */
export interface SdkHttpResponse {
  statusCode: number;
  reason?: string;
  headers: Record<string, string>;
  body: Readable;
}

export interface PooledReadsOptions {
  /** Time allowed to open the connection (and the TLS session), ms. */
  connectionTimeoutMs?: number;
  /** Socket inactivity limit once connected, ms. */
  socketTimeoutMs?: number;
  /** Extra TLS settings for https endpoints (tests pass their own CA here). */
  tls?: tls.ConnectionOptions;
}

/**
 * One read from the socket at most; also the size of every pooled buffer. Larger than Node's
 * 64 KiB so that a relay that falls behind catches up in fewer, larger reads: each read costs
 * about 2 KiB of short-lived objects in the stream and socket machinery, whatever its size.
 */
export const POOLED_CHUNK = 256 * 1024;
/** Buffers kept for reuse, shared by all transfers: 4 MiB at most. */
const POOL_MAX = 16;
/** A response head larger than this is not S3's. */
const MAX_HEAD = 64 * 1024;

const free: Buffer[] = [];
/** Each chunk handed out, to the pool buffer it is a view of. */
const owners = new WeakMap<Buffer, Buffer>();

function takeBuffer(): Buffer {
  return free.pop() ?? Buffer.allocUnsafeSlow(POOLED_CHUNK);
}

function release(chunk: Buffer): void {
  const base = owners.get(chunk);
  if (!base) return;
  owners.delete(chunk);
  if (free.length < POOL_MAX) free.push(base);
}

/** Buffers waiting in the pool (for tests and the benchmark's notes). */
export function pooledBuffersFree(): number {
  return free.length;
}

/** Whether `dest` calls a write's callback only once it no longer needs the chunk. */
function takesOwnership(dest: Writable): boolean {
  return dest instanceof http.ServerResponse || dest instanceof net.Socket;
}

/**
 * A response body whose chunks are views of pooled buffers. Piped into a socket or an HTTP
 * response it writes each chunk itself and recycles it from the write's callback; read any
 * other way it is an ordinary Readable whose chunks are never reused.
 */
export class PooledBody extends Readable {
  private resumeSource: (() => void) | undefined;
  private recycling = false;

  constructor() {
    super({ highWaterMark: 4 * POOLED_CHUNK });
    // A store can fail the body before anyone reads it (the SDK attaches its reader later):
    // the reader still sees the error (destroyed), and the process does not die of it.
    this.on('error', () => undefined);
  }

  /** Called by the connection: what to do when the consumer wants more. */
  setSource(resume: () => void): void {
    this.resumeSource = resume;
  }

  override _read(): void {
    this.resumeSource?.();
  }

  override _destroy(err: Error | null, callback: (error?: Error | null) => void): void {
    this.emit('abortSource', err);
    callback(err);
  }

  override pipe<T extends NodeJS.WritableStream>(destination: T, options?: { end?: boolean }): T {
    const dest = destination as unknown as Writable;
    if (this.recycling || !takesOwnership(dest)) return super.pipe(destination, options);
    this.recycling = true;
    const end = options?.end !== false;
    let waiting = false;
    const onData = (chunk: Buffer) => {
      const more = dest.write(chunk, () => release(chunk));
      if (!more && !waiting) {
        waiting = true;
        this.pause();
        dest.once('drain', onDrain);
      }
    };
    const onDrain = () => {
      waiting = false;
      this.resume();
    };
    const onEnd = () => {
      cleanup();
      if (end) dest.end();
    };
    // The destination went away (the client disconnected): stop, as Readable.pipe does; the
    // owner of both (fastify, pipeline) destroys this body.
    const onClose = () => {
      cleanup();
      this.pause();
    };
    const cleanup = () => {
      this.off('data', onData);
      this.off('end', onEnd);
      dest.off('drain', onDrain);
      dest.off('close', onClose);
      dest.off('error', onClose);
    };
    this.on('data', onData);
    this.once('end', onEnd);
    dest.once('close', onClose);
    dest.once('error', onClose);
    dest.emit('pipe', this);
    return destination;
  }
}

function queryString(query: SdkHttpRequest['query']): string {
  const parts: string[] = [];
  for (const [key, value] of Object.entries(query ?? {})) {
    const k = encodeQuery(key);
    if (value === null) parts.push(k);
    else for (const v of Array.isArray(value) ? value : [value]) parts.push(`${k}=${encodeQuery(v)}`);
  }
  return parts.length ? `?${parts.join('&')}` : '';
}

/** RFC 3986 unreserved characters stay; everything else is escaped (as the SDK does). */
function encodeQuery(s: string): string {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

function codedError(message: string, code: string): Error {
  return Object.assign(new Error(message), { code });
}

/** How the body's end is found (RFC 9112 §6.3). */
type Framing = { kind: 'length'; left: number } | { kind: 'close' } | { kind: 'chunked' };

/**
 * The S3 client's `requestHandler` for large GETs: `new S3Client({ requestHandler: new
 * PooledReadHandler() })`. Every answer comes on a fresh connection that closes after it
 * (`Connection: close`), which is why it is meant for reads large enough for a connection not
 * to matter (the blob store uses it from 1 MiB).
 */
export class PooledReadHandler {
  readonly metadata = { handlerProtocol: 'http/1.1' };

  constructor(private readonly options: PooledReadsOptions = {}) {}

  updateHttpClientConfig(): void {}

  httpHandlerConfigs(): Record<string, never> {
    return {};
  }

  destroy(): void {}

  handle(request: SdkHttpRequest, handlerOptions: { abortSignal?: AbortSignal; requestTimeout?: number } = {}): Promise<{ response: SdkHttpResponse }> {
    if (request.method !== 'GET' || (request.body !== undefined && request.body !== null && request.body !== '')) {
      return Promise.reject(new Error(`the pooled read transport carries GET requests without a body, not ${request.method}`));
    }
    const signal = handlerOptions.abortSignal;
    if (signal?.aborted) return Promise.reject(abortError(signal));

    const secure = request.protocol === 'https:';
    const port = request.port ?? (secure ? 443 : 80);
    const head = [`GET ${request.path}${queryString(request.query)} HTTP/1.1`];
    let hasHost = false;
    for (const [name, value] of Object.entries(request.headers)) {
      if (/[\r\n]/.test(name) || /[\r\n]/.test(value)) return Promise.reject(new Error(`header ${JSON.stringify(name)} holds a line break`));
      const lower = name.toLowerCase();
      if (lower === 'connection') continue;
      if (lower === 'host') hasHost = true;
      head.push(`${name}: ${value}`);
    }
    if (!hasHost) head.push(`host: ${request.hostname}${request.port ? `:${request.port}` : ''}`);
    head.push('connection: close', '', '');
    const requestHead = head.join('\r\n');

    return new Promise((resolve, reject) => {
      const body = new PooledBody();
      let settled = false;
      /** The whole body arrived: the connection has nothing more to say. */
      let finished = false;
      let headBytes: Buffer[] = [];
      let headLength = 0;
      let framing: Framing | undefined;
      let chunkState: ChunkedDecoder | undefined;

      const fail = (err: Error) => {
        if (finished) return;
        cleanup();
        socket.destroy();
        if (!settled) {
          settled = true;
          reject(err);
        } else if (!body.destroyed) {
          body.destroy(err);
        }
      };
      const onAbort = () => fail(abortError(signal!));
      signal?.addEventListener('abort', onAbort, { once: true });
      const connectTimer = setTimeout(
        () => fail(codedError(`no connection to ${request.hostname}:${port} within ${this.options.connectionTimeoutMs ?? 10_000} ms`, 'ETIMEDOUT')),
        this.options.connectionTimeoutMs ?? 10_000,
      );
      const cleanup = () => {
        clearTimeout(connectTimer);
        signal?.removeEventListener('abort', onAbort);
      };

      const finishBody = () => {
        finished = true;
        cleanup();
        body.push(null);
        socket.destroy();
      };

      /** A piece of the body as it arrived: `chunk` is a view of the pool buffer `base`, or a copy. */
      const deliver = (chunk: Buffer, base: Buffer | undefined): boolean => {
        if (chunk.length === 0) {
          if (base) release(track(base, base));
          return true;
        }
        if (base) owners.set(chunk, base);
        return body.push(chunk);
      };

      const onHead = (raw: Buffer): number | undefined => {
        const end = raw.indexOf('\r\n\r\n');
        if (end < 0) {
          if (raw.length > MAX_HEAD) {
            fail(new Error(`the store's answer head is larger than ${MAX_HEAD} bytes`));
          }
          return undefined;
        }
        const lines = raw.subarray(0, end).toString('latin1').split('\r\n');
        const status = /^HTTP\/1\.[01] (\d{3})(?: (.*))?$/.exec(lines[0] ?? '');
        if (!status) {
          fail(new Error(`the store did not answer in HTTP/1.1 (${JSON.stringify((lines[0] ?? '').slice(0, 60))})`));
          return undefined;
        }
        const statusCode = Number(status[1]);
        const headers: Record<string, string> = {};
        for (const line of lines.slice(1)) {
          const colon = line.indexOf(':');
          if (colon <= 0) continue;
          const name = line.slice(0, colon).trim().toLowerCase();
          const value = line.slice(colon + 1).trim();
          headers[name] = name in headers ? `${headers[name]}, ${value}` : value;
        }
        if (/\bchunked\b/i.test(headers['transfer-encoding'] ?? '')) {
          framing = { kind: 'chunked' };
          chunkState = new ChunkedDecoder();
        } else if (headers['content-length'] !== undefined) {
          const left = Number(headers['content-length']);
          if (!Number.isSafeInteger(left) || left < 0) {
            fail(new Error(`the store sent Content-Length ${JSON.stringify(headers['content-length'])}`));
            return undefined;
          }
          framing = { kind: 'length', left };
        } else if (statusCode === 204 || statusCode === 304) {
          framing = { kind: 'length', left: 0 };
        } else {
          framing = { kind: 'close' };
        }
        clearTimeout(connectTimer);
        settled = true;
        resolve({ response: { statusCode, ...(status[2] ? { reason: status[2] } : {}), headers, body } });
        return end + 4;
      };

      /** The body's bytes in `chunk` (a view of `base`, which this call owns). */
      const onBody = (chunk: Buffer, base: Buffer): boolean => {
        const f = framing!;
        if (f.kind === 'length') {
          if (chunk.length > f.left) {
            fail(new Error(`the store sent more than the ${f.left} bytes it announced`));
            return false;
          }
          f.left -= chunk.length;
          const more = deliver(chunk, base);
          if (f.left === 0) {
            finishBody();
            return false;
          }
          return more;
        }
        if (f.kind === 'close') return deliver(chunk, base);
        // Chunked: rare for S3 (error documents of some servers); the data is copied out.
        let more = true;
        try {
          for (const piece of chunkState!.feed(chunk)) more = deliver(Buffer.from(piece), undefined) && more;
        } catch (err) {
          fail(err as Error);
          return false;
        } finally {
          release(track(base, base));
        }
        if (chunkState!.done) {
          finishBody();
          return false;
        }
        return more;
      };

      const onread = {
        buffer: takeBuffer,
        callback: (n: number, buf: Buffer): boolean => {
          if (framing === undefined) {
            // Still reading the head: collect a copy of these bytes; the pool buffer goes back.
            headBytes.push(Buffer.from(buf.subarray(0, n)));
            headLength += n;
            if (free.length < POOL_MAX) free.push(buf);
            const raw = headBytes.length === 1 ? headBytes[0]! : Buffer.concat(headBytes, headLength);
            const bodyStart = onHead(raw);
            if (bodyStart === undefined) return !socket.destroyed;
            headBytes = [];
            const rest = raw.subarray(bodyStart);
            if (rest.length === 0) {
              // (onHead set the framing; TypeScript cannot see through the call.)
              const f = framing as Framing | undefined;
              if (f?.kind === 'length' && f.left === 0) {
                finishBody();
                return false;
              }
              return true;
            }
            const copy = takeBuffer();
            rest.copy(copy);
            return onBody(copy.subarray(0, rest.length), copy);
          }
          return onBody(buf.subarray(0, n), buf);
        },
      };

      const connectOptions = { host: request.hostname, port, onread } as net.NetConnectOpts & tls.ConnectionOptions;
      const socket: net.Socket = secure
        ? tls.connect({
            ...this.options.tls,
            ...connectOptions,
            ...(net.isIP(request.hostname) ? {} : { servername: request.hostname }),
            ALPNProtocols: ['http/1.1'],
          })
        : net.connect(connectOptions);
      socket.once(secure ? 'secureConnect' : 'connect', () => {
        clearTimeout(connectTimer);
        const idle = handlerOptions.requestTimeout ?? this.options.socketTimeoutMs;
        if (idle) socket.setTimeout(idle, () => fail(codedError(`the store sent nothing for ${idle} ms`, 'ETIMEDOUT')));
        socket.write(requestHead);
      });
      socket.on('error', (err) => fail(err));
      socket.on('end', () => {
        if (finished) return;
        if (framing === undefined) fail(codedError('the store closed the connection before answering', 'ECONNRESET'));
        else if (framing.kind === 'close') finishBody();
        else fail(codedError(`the store closed the connection ${framing.kind === 'length' ? `${framing.left} bytes short of the answer` : 'in the middle of the answer'}`, 'ECONNRESET'));
      });
      body.setSource(() => socket.resume());
      body.on('abortSource', () => {
        finished = true;
        cleanup();
        socket.destroy();
      });
    });
  }
}

/** Marks a whole pool buffer as handed out, so that `release` takes it back. */
function track(view: Buffer, base: Buffer): Buffer {
  owners.set(view, base);
  return view;
}

function abortError(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  if (reason instanceof Error) return reason;
  return Object.assign(new Error('the request was aborted'), { name: 'AbortError' });
}

/** Decodes `Transfer-Encoding: chunked` (RFC 9112 §7.1) as bytes arrive; trailers are skipped. */
class ChunkedDecoder {
  done = false;
  private line = '';
  /** Data bytes left in the current chunk, then its CRLF (2). */
  private left = 0;
  private state: 'size' | 'data' | 'crlf' | 'trailer' = 'size';

  *feed(input: Buffer): Generator<Buffer> {
    let i = 0;
    while (i < input.length && !this.done) {
      if (this.state === 'data') {
        const take = Math.min(this.left, input.length - i);
        yield input.subarray(i, i + take);
        i += take;
        this.left -= take;
        if (this.left === 0) {
          this.state = 'crlf';
          this.left = 2;
        }
        continue;
      }
      if (this.state === 'crlf') {
        i++;
        if (--this.left === 0) this.state = 'size';
        continue;
      }
      const nl = input.indexOf(10, i);
      const end = nl < 0 ? input.length : nl;
      this.line += input.subarray(i, end).toString('latin1');
      if (this.line.length > 4096) throw new Error('a chunk-size line of the answer is too long');
      i = nl < 0 ? input.length : nl + 1;
      if (nl < 0) continue;
      const line = this.line.replace(/\r$/, '');
      this.line = '';
      if (this.state === 'trailer') {
        if (line === '') this.done = true;
        continue;
      }
      const size = parseInt(line.split(';')[0]!.trim(), 16);
      if (!Number.isSafeInteger(size) || size < 0 || !/^[0-9a-f]+$/i.test(line.split(';')[0]!.trim())) {
        throw new Error(`the store sent a bad chunk size ${JSON.stringify(line.slice(0, 40))}`);
      }
      if (size === 0) this.state = 'trailer';
      else {
        this.state = 'data';
        this.left = size;
      }
    }
  }
}
