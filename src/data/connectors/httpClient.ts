import http from 'node:http';
import https from 'node:https';
import type net from 'node:net';
import type { Readable } from 'node:stream';

/**
 * The HTTP client of the providers that speak plain HTTP (WebDAV, Dropbox). It is node:http
 * rather than fetch on purpose: on Node 20, fetch (undici) pulls a streamed request body far
 * ahead of the socket, so a 200 MiB upload grew the server's memory by about as much
 * (test/connector-memory.test.ts measures it); node:http's pipe waits for the socket.
 */
export interface HttpRequest {
  method: string;
  headers?: Record<string, string>;
  /**
   * Sent as is. A Readable is streamed with backpressure; its error, or its closing before
   * its end, aborts the request. It is never destroyed here: it belongs to the caller (it may
   * be the client's own upload, whose socket still has to carry our answer).
   */
  body?: string | Buffer | Readable;
  /** Aborts the request and its answer's body. */
  signal: AbortSignal;
  /** Resolves host names for new connections (the address rule's, src/addressRule.ts, to refuse what it refuses). */
  lookup?: net.LookupFunction;
}

export interface HttpAnswer {
  status: number;
  /** 2xx. */
  ok: boolean;
  /** A response header (lower-case name), joined if repeated. */
  header(name: string): string | undefined;
  /** The answer's bytes, streamed. Destroy it to stop the download. */
  body: Readable;
  /** The whole answer as text, at most `max` bytes (the rest is dropped). */
  text(max?: number): Promise<string>;
  /** Drops the answer's bytes (and, with keep-alive, lets the connection be reused). */
  discard(): void;
}

/** How long an idle kept-alive connection stays open (undici's default, too, is a few seconds). */
const IDLE_SOCKET_MS = 4000;

/**
 * Keep-alive, with idle connections closed after a few seconds: a server that never closes
 * idle connections itself would otherwise hold one per account forever (and wait on it in its
 * own shutdown). The Agent destroys a free socket whose timeout fires.
 */
function idleClosing<A extends http.Agent>(agent: A): A {
  // Typed as returning void and taking a Duplex; Node's implementation answers whether it
  // kept the socket, and the socket is a net.Socket.
  const keep = agent.keepSocketAlive.bind(agent) as unknown as (socket: net.Socket) => boolean;
  const reuse = agent.reuseSocket.bind(agent);
  agent.keepSocketAlive = ((socket: net.Socket) => {
    const kept = keep(socket);
    if (kept) socket.setTimeout(IDLE_SOCKET_MS);
    return kept;
  }) as unknown as typeof agent.keepSocketAlive;
  agent.reuseSocket = (socket, req) => {
    (socket as net.Socket).setTimeout(0);
    reuse(socket, req);
  };
  return agent;
}

const agents = {
  'http:': idleClosing(new http.Agent({ keepAlive: true, maxSockets: 64 })),
  'https:': idleClosing(new https.Agent({ keepAlive: true, maxSockets: 64 })),
};

/** One request; resolves when the answer's headers arrive (whatever the status). */
export function httpRequest(url: string | URL, init: HttpRequest): Promise<HttpAnswer> {
  const target = typeof url === 'string' ? new URL(url) : url;
  const protocol = target.protocol;
  if (protocol !== 'http:' && protocol !== 'https:') return Promise.reject(new Error(`unsupported protocol ${protocol}`));
  const transport = protocol === 'https:' ? https : http;
  return new Promise<HttpAnswer>((resolve, reject) => {
    const headers: Record<string, string> = { ...init.headers };
    if (typeof init.body === 'string' || Buffer.isBuffer(init.body)) headers['content-length'] = String(Buffer.byteLength(init.body));
    const req = transport.request(target, { method: init.method, headers, agent: agents[protocol], signal: init.signal, ...(init.lookup ? { lookup: init.lookup } : {}) });
    req.once('error', reject);
    req.once('response', (res) => {
      const status = res.statusCode ?? 0;
      resolve({
        status,
        ok: status >= 200 && status < 300,
        header: (name) => {
          const v = res.headers[name.toLowerCase()];
          return Array.isArray(v) ? v.join(', ') : v;
        },
        body: res,
        text: (max = 1024 * 1024) => readText(res, max),
        discard: () => {
          // A small answer is drained so its connection can be reused; a large one is cut.
          const length = Number(res.headers['content-length'] ?? NaN);
          if (Number.isFinite(length) && length <= 64 * 1024) res.resume();
          else res.destroy();
        },
      });
    });
    const body = init.body;
    if (body === undefined || typeof body === 'string' || Buffer.isBuffer(body)) {
      req.end(body);
    } else {
      // A body that fails or stops early destroys the request: the server sees a broken
      // upload, never a short one that looks complete.
      const fail = (err?: Error) => req.destroy(err ?? new Error('the body stopped before its end'));
      const onClose = () => body.readableEnded || fail();
      body.once('error', fail).once('close', onClose);
      req.once('close', () => {
        body.unpipe(req);
        body.off('error', fail).off('close', onClose);
      });
      body.pipe(req);
    }
  });
}

async function readText(res: Readable, max: number): Promise<string> {
  const parts: Buffer[] = [];
  let length = 0;
  for await (const chunk of res as AsyncIterable<Buffer>) {
    parts.push(chunk);
    length += chunk.length;
    if (length >= max) break; // leaving the loop destroys the rest of the answer
  }
  return Buffer.concat(parts).subarray(0, max).toString('utf8');
}
