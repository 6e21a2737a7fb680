/**
 * How the console speaks to the API: the public HTTP API, same origin, authenticated by the
 * session cookie (HttpOnly: this code never sees it) plus the session's CSRF token, which lives
 * in this module's memory only: never in storage, never in a URL. (A download link carries a
 * ticket made from it for one file and one minute, which cannot be turned back into it.)
 */
import { BrowserClient } from '../../client/src/browser.ts';
import type { ErrorEnvelope, SessionInfo } from '../../client/src/types.ts';

export type { SessionInfo };

let csrf: string | undefined;
let signedOutHandler: (() => void) | undefined;

export function onSignedOut(handler: () => void): void {
  signedOutHandler = handler;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** The ApiError an error answer's body describes (its JSON envelope, else its text). */
export function errorFrom(status: number, text: string): ApiError {
  try {
    const e = (JSON.parse(text) as ErrorEnvelope).error;
    return new ApiError(status, e.code ?? `http_${status}`, e.message);
  } catch {
    return new ApiError(status, `http_${status}`, text.trim().slice(0, 300) || `the server answered HTTP ${status}`);
  }
}

export interface RequestOptions {
  method?: string;
  query?: Record<string, string | number | boolean | undefined>;
  json?: unknown;
  body?: BodyInit;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

/** Percent-encodes each segment of a path (`a b/c` → `a%20b/c`). */
export const encodePath = (p: string) => p.split('/').map(encodeURIComponent).join('/');

export function url(path: string, query: RequestOptions['query'] = {}): string {
  const u = new URL(path, location.origin);
  for (const [k, v] of Object.entries(query)) if (v !== undefined) u.searchParams.set(k, String(v));
  return u.pathname + u.search;
}

export function authHeaders(): Record<string, string> {
  return csrf ? { 'x-csrf-token': csrf } : {};
}

/**
 * The project's own client (client/src/browser.ts) over fetch: this page's origin, no API key,
 * the session's cookie and its CSRF token on every request. Pages use it for everything it
 * covers; `request` below is for the sign-in and what the client has no method for.
 */
export const client = new BrowserClient({ headers: authHeaders });

/** An error a page shows: an ended session sends the page back to the sign-in form. */
export function noticeError(err: unknown): void {
  if ((err as { code?: unknown } | null)?.code === 'no_session') {
    csrf = undefined;
    signedOutHandler?.();
  }
}

/** Sends a request; an error status becomes an ApiError (and an ended session, the sign-in page). */
export async function request(path: string, o: RequestOptions = {}): Promise<Response> {
  const headers: Record<string, string> = { ...authHeaders(), ...o.headers };
  let body = o.body;
  if (o.json !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(o.json);
  }
  const res = await fetch(url(path, o.query), { method: o.method ?? 'GET', headers, body, credentials: 'same-origin', ...(o.signal ? { signal: o.signal } : {}) });
  if (!res.ok) {
    const err = errorFrom(res.status, await res.text().catch(() => ''));
    if (path !== '/v1/session') noticeError(err);
    throw err;
  }
  return res;
}

export async function getJson<T>(path: string, o: RequestOptions = {}): Promise<T> {
  const res = await request(path, o);
  return (res.status === 204 ? undefined : await res.json()) as T;
}

export async function currentSession(): Promise<SessionInfo | undefined> {
  try {
    const info = await getJson<SessionInfo>('/v1/session');
    csrf = info.csrf_token;
    return info;
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return undefined;
    throw err;
  }
}

export async function signIn(username: string, password: string): Promise<SessionInfo> {
  const info = await getJson<SessionInfo>('/v1/session', { method: 'POST', json: { username, password } });
  csrf = info.csrf_token;
  return info;
}

export async function signOut(): Promise<void> {
  try {
    await request('/v1/session', { method: 'DELETE' });
  } finally {
    csrf = undefined;
  }
}

/**
 * An upload with progress (fetch cannot report it): XMLHttpRequest sends a File straight from
 * disk, never read whole into the page.
 */
export function upload(path: string, body: Blob, contentType: string, onProgress: (sent: number, total: number) => void, signal?: AbortSignal): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open('PUT', url(path));
    for (const [k, v] of Object.entries(authHeaders())) xhr.setRequestHeader(k, v);
    xhr.setRequestHeader('content-type', contentType);
    xhr.upload.onprogress = (e) => onProgress(e.loaded, e.lengthComputable ? e.total : body.size);
    xhr.onload = () => {
      const text = xhr.responseText;
      if (xhr.status >= 200 && xhr.status < 300) {
        try {
          resolve(JSON.parse(text));
        } catch {
          resolve(text);
        }
        return;
      }
      reject(errorFrom(xhr.status, text));
    };
    xhr.onerror = () => reject(new ApiError(0, 'network_error', 'the upload failed: the connection to the server broke'));
    xhr.onabort = () => reject(new ApiError(0, 'aborted', 'the upload was cancelled'));
    signal?.addEventListener('abort', () => xhr.abort(), { once: true });
    xhr.send(body);
  });
}

/** A person-readable size. */
export function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = -1;
  do {
    v /= 1024;
    i++;
  } while (v >= 1024 && i < units.length - 1);
  return `${v < 10 ? v.toFixed(1) : Math.round(v)} ${units[i]}`;
}
