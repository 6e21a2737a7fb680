/**
 * What the rest of the client asks of HTTP: one `send(request) → response` (Transport), two
 * implementations of it. NodeTransport (http.ts, over node:http) is the default in Node;
 * FetchTransport (fetchTransport.ts, over the global fetch) serves browsers. Nothing here
 * uses Node, not even its types: this file, and everything but http.ts, pack.ts, env.ts and
 * index.ts, goes into the browser entry (browser.ts), which must also typecheck for a page
 * without @types/node.
 */
import { AlgohostError, ApiError } from './errors.ts';
import type { ErrorEnvelope } from './types.ts';

/** The server's default address (docs/configuration.md: 127.0.0.1, port 8080). */
export const DEFAULT_BASE_URL = 'http://127.0.0.1:8080';

/** Per-request options every method of the client takes. */
export interface RequestOptions {
  /** Aborts the request (and a body still streaming); the promise rejects with the signal's reason. */
  signal?: AbortSignal;
  /**
   * Gives up after this many milliseconds with a NetworkError `request_timeout`. It covers
   * the whole exchange, a streamed body included. Default: the client's (none unless set);
   * 0: none, whatever the client's.
   */
  timeoutMs?: number;
}

export type QueryValue = string | number | boolean | undefined;

/**
 * A request body: bytes (sent with their length), a Blob (a browser's File too), or a stream
 * (a web ReadableStream, or any async iterable of bytes, a Node Readable included).
 */
export type RequestBody = Uint8Array | Blob | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>;

export interface HttpRequest extends RequestOptions {
  method: string;
  /** Path below the base address, already percent-encoded (`/v1/...`). */
  path: string;
  query?: Record<string, QueryValue>;
  /** Lower-case names. */
  headers?: Record<string, string>;
  body?: RequestBody;
}

/**
 * What bytes and body streams are where the client runs: Buffers and Node Readables in Node
 * (NodePlatform, in http.ts), Uint8Arrays and web ReadableStreams in a browser. The client's
 * classes are generic over it, so `client.file(uri).get()` is a Buffer in Node and a
 * Uint8Array in the browser entry.
 */
export interface Platform {
  bytes: Uint8Array;
  stream: unknown;
}

export interface WebPlatform extends Platform {
  bytes: Uint8Array;
  stream: ReadableStream<Uint8Array>;
}

/** An answer whose body has not been read yet. Read it (or discard or cancel it) exactly once. */
export interface HttpResponse<P extends Platform = Platform> {
  readonly status: number;
  /** 2xx. */
  readonly ok: boolean;
  /** A header's value (several joined with `, `), by name in any case. */
  header(name: string): string | undefined;
  bytes(): Promise<P['bytes']>;
  /** UTF-8 (a byte order mark is kept, as it is in the bytes). */
  text(): Promise<string>;
  /** Parsed JSON; AlgohostError `invalid_response` when it is not JSON. */
  json<T>(): Promise<T>;
  /** The body as it arrives; errors as the request's would (abort reason, timeout). */
  stream(): P['stream'];
  /** An answer whose body is not wanted and small (HEAD, 204, errors): read and dropped. */
  discard(): void;
  /** A body not wanted that may be large: stops it. */
  cancel(): void;
}

export interface Transport<P extends Platform = Platform> {
  /** The base address, without a trailing slash. */
  readonly baseUrl: string;
  /** Sends a request; resolves when the answer's headers arrive, whatever its status. */
  send(req: HttpRequest): Promise<HttpResponse<P>>;
  /** Bytes of this platform's kind from base64 (binary call results in the envelope). */
  bytesFromBase64(text: string): P['bytes'];
}

/** The base address checked: http(s), without a trailing slash. */
export function checkBaseUrl(baseUrl: string, relativeTo?: string): URL {
  let base: URL;
  try {
    base = new URL(baseUrl, relativeTo);
  } catch {
    throw new AlgohostError(`the API address must be http:// or https://, got "${baseUrl}"`, 'invalid_base_url');
  }
  if (base.protocol !== 'http:' && base.protocol !== 'https:') {
    throw new AlgohostError(`the API address must be http:// or https://, got "${baseUrl}"`, 'invalid_base_url');
  }
  return base;
}

/** The address of a request: the base, the path, the query parameters that are set. */
export function requestUrl(baseUrl: string, path: string, query: Record<string, QueryValue> = {}): URL {
  const url = new URL(baseUrl + path);
  for (const [k, v] of Object.entries(query)) if (v !== undefined) url.searchParams.set(k, String(v));
  return url;
}

/** JSON text parsed, or the AlgohostError `invalid_response` that says what came instead. */
export function parseJson<T>(status: number, text: string): T {
  try {
    return JSON.parse(text) as T;
  } catch {
    throw new AlgohostError(`the server answered ${status} with a body that is not JSON: ${text.slice(0, 200)}`, 'invalid_response');
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
    // Read defensively: something other than our server may have answered.
    const e = (JSON.parse(text) as { error?: { [K in keyof ErrorEnvelope['error']]?: unknown } }).error;
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

/** A transport with what every method needs on top: error statuses thrown, JSON answers read. */
export class Http<P extends Platform = Platform> {
  constructor(readonly transport: Transport<P>) {}

  get baseUrl(): string {
    return this.transport.baseUrl;
  }

  send(req: HttpRequest): Promise<HttpResponse<P>> {
    return this.transport.send(req);
  }

  /** Sends; an error status becomes an ApiError. */
  async ok(req: HttpRequest): Promise<HttpResponse<P>> {
    const res = await this.transport.send(req);
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

const encoder = new TextEncoder();

/** UTF-8 bytes of a string. */
export const utf8 = (text: string): Uint8Array => encoder.encode(text);

/** A JSON request body, ready for `send`; `T` names the wire record it is. */
export function jsonBody<T>(value: T): { body: Uint8Array; headers: Record<string, string> } {
  return { body: utf8(JSON.stringify(value)), headers: { 'content-type': 'application/json' } };
}
