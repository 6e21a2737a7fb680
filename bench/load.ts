/**
 * Client side of the data benchmark: a small keep-alive load generator on raw sockets (for
 * the request rate, where a full HTTP client would cost the client more CPU than the bare
 * server spends answering) and timed single requests on node:http (large transfers and
 * listing latency). Everything connects to 127.0.0.1 only.
 */
import http from 'node:http';
import net from 'node:net';
import { performance } from 'node:perf_hooks';

export const HOST = '127.0.0.1';

export interface LoadResult {
  /** Responses completed inside the measured window. */
  completed: number;
  /** Of those, how many were not 200. */
  errors: number;
  ms: number;
  /** completed / seconds. */
  rate: number;
}

/** A raw GET request for the load generator, with the same headers whichever server it goes to. */
export function rawGet(port: number, path: string, headers: Record<string, string> = {}): Buffer {
  const lines = [`GET ${path} HTTP/1.1`, `Host: ${HOST}:${port}`, 'Accept: */*', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)];
  return Buffer.from(lines.join('\r\n') + '\r\n\r\n', 'latin1');
}

/**
 * A raw request with a body (POST, say) for the load generator: Content-Length set, the same
 * headers whichever server it goes to.
 */
export function rawRequest(port: number, method: string, path: string, headers: Record<string, string>, body: Buffer): Buffer {
  const lines = [
    `${method} ${path} HTTP/1.1`,
    `Host: ${HOST}:${port}`,
    'Accept: */*',
    ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`),
    `Content-Length: ${body.length}`,
  ];
  return Buffer.concat([Buffer.from(lines.join('\r\n') + '\r\n\r\n', 'latin1'), body]);
}

export interface LoadOptions {
  /** When given, every completed request's latency (ms, from its write to the end of its response) is pushed here. */
  latencies?: number[];
}

/**
 * `connections` keep-alive connections, each sending one request at a time (no pipelining),
 * cycling through `requests`, for `durationMs`. Responses must carry Content-Length.
 */
export async function runLoad(port: number, requests: Buffer[], connections: number, durationMs: number, options: LoadOptions = {}): Promise<LoadResult> {
  const stats = { completed: 0, errors: 0, latencies: options.latencies };
  const t0 = performance.now();
  const deadline = t0 + durationMs;
  await Promise.all(Array.from({ length: connections }, (_, c) => oneConnection(port, requests, c, deadline, stats)));
  const ms = durationMs;
  return { completed: stats.completed, errors: stats.errors, ms, rate: stats.completed / (ms / 1000) };
}

function oneConnection(
  port: number,
  requests: Buffer[],
  first: number,
  deadline: number,
  stats: { completed: number; errors: number; latencies: number[] | undefined },
): Promise<void> {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host: HOST, port });
    sock.setNoDelay(true);
    let next = first;
    let pending: Buffer | undefined;
    let bodyLeft = -1; // -1: reading the head of a response
    let status = 0;
    let done = false;
    const fail = (err: Error) => {
      if (done) return;
      done = true;
      sock.destroy();
      reject(err);
    };
    let sentAt = 0;
    const send = () => {
      sentAt = performance.now();
      sock.write(requests[next++ % requests.length]!);
    };
    sock.on('connect', send);
    sock.on('error', fail);
    sock.on('close', () => fail(new Error('the server closed a keep-alive connection')));
    sock.on('data', (chunk: Buffer) => {
      if (done) return;
      const data = pending ? Buffer.concat([pending, chunk]) : chunk;
      pending = undefined;
      let off = 0;
      for (;;) {
        if (bodyLeft < 0) {
          const end = data.indexOf('\r\n\r\n', off, 'latin1');
          if (end < 0) {
            if (off < data.length) pending = data.subarray(off);
            return;
          }
          const head = data.toString('latin1', off, end);
          status = Number(head.slice(9, 12));
          const length = /\r\ncontent-length:[ \t]*(\d+)/i.exec(head);
          if (!length) return fail(new Error(`response without Content-Length: ${head.slice(0, 300)}`));
          bodyLeft = Number(length[1]);
          off = end + 4;
        }
        const take = Math.min(bodyLeft, data.length - off);
        bodyLeft -= take;
        off += take;
        if (bodyLeft > 0) return;
        bodyLeft = -1;
        const now = performance.now();
        if (now <= deadline) {
          stats.completed++;
          if (status !== 200) stats.errors++;
          stats.latencies?.push(now - sentAt);
        }
        if (now >= deadline) {
          done = true;
          sock.end();
          resolve();
          return;
        }
        send();
        if (off >= data.length) return;
      }
    });
  });
}

export interface Timed {
  status: number;
  bytes: number;
  ms: number;
  headers: http.IncomingHttpHeaders;
  body?: Buffer;
}

/**
 * One request on node:http, timed from the call to the last byte of the response. The
 * request body, when given, is written as one or a few large Buffers (the cheapest way for
 * the client to send it). With `keep`, the response body is returned too.
 */
export function timed(
  port: number,
  method: string,
  path: string,
  options: { headers?: Record<string, string>; body?: Buffer | Buffer[]; agent?: http.Agent | false; keep?: boolean } = {},
): Promise<Timed> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const headers: Record<string, string | number> = { ...options.headers };
    const parts = options.body === undefined ? [] : Array.isArray(options.body) ? options.body : [options.body];
    if (options.body !== undefined) headers['content-length'] = parts.reduce((n, b) => n + b.length, 0);
    const req = http.request({ host: HOST, port, method, path, headers, agent: options.agent ?? false }, (res) => {
      let bytes = 0;
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => {
        bytes += chunk.length;
        if (options.keep) chunks.push(chunk);
      });
      res.on('error', reject);
      res.on('end', () => {
        const ms = performance.now() - t0;
        resolve({ status: res.statusCode ?? 0, bytes, ms, headers: res.headers, ...(options.keep ? { body: Buffer.concat(chunks) } : {}) });
      });
    });
    req.on('error', reject);
    for (const part of parts) req.write(part);
    req.end();
  });
}

export function median(values: number[]): number {
  return percentile(values, 50);
}

/** Nearest-rank percentile. */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!;
}
