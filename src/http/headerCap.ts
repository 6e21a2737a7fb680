import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import proxyAddr from '@fastify/proxy-addr';
import { addressKey } from '../auth/sessions.ts';

/** How long a connection may take to send its first request head before it counts as slow. */
export const SLOW_HEAD_MS = 2_000;
/** Slow connections (no whole head after SLOW_HEAD_MS) one client address may hold at once. */
export const SLOW_PER_CLIENT = 16;
/** Longest a client may take to send a request's head (Node's default is 60 s, and slow clients stretch it). */
export const HEADERS_TIMEOUT_MS = 30_000;

/** Where a connection is: sending a head, waiting for (or sending) an answer, or idle between requests. */
interface Watched {
  key: string;
  phase: 'head' | 'request' | 'idle';
  /** Requests read and not yet answered (more than one when a client pipelines). */
  inFlight: number;
  /** When its current head began (its first byte, or the connection for the first head). */
  since: number;
  /** Bytes it had sent when its last answer was finished: more, and its next head has begun. */
  readAtIdle: number;
  slow: boolean;
}

/**
 * Caps the connections each client address holds open while trickling a request head
 * ("slowloris": a client opens many connections and sends a header line now and then into each,
 * holding the server's sockets for as long as the header timeout allows). A connection counts as
 * slow while a head of its has been arriving for more than SLOW_HEAD_MS: its first, from when it
 * connected, or a later one on a kept-alive connection, from its first byte (an idle kept-alive
 * connection is not slow: it has sent nothing). A slow connection beyond SLOW_PER_CLIENT of the
 * same address is closed. A client opening many connections at once and sending its requests
 * (the CLI's `cp -c 64`) is never slow, whatever their number. IPv6 clients count by /64 (a host
 * has a whole prefix to draw addresses from). A trusted proxy (ALGOHOST_TRUST_PROXY) is not
 * capped: every client behind it shares its address, and a proxy sends heads whole.
 *
 * One timer sweeps every watched connection each SLOW_HEAD_MS / 2 (so a head is found slow
 * between SLOW_HEAD_MS and 1.5 × it), running only while there are connections.
 */
export function capHeaderPhase(server: Server, trustProxy: false | string[], perClient = SLOW_PER_CLIENT, slowMs = SLOW_HEAD_MS): void {
  const trusted = trustProxy ? proxyAddr.compile(trustProxy) : undefined;
  const slow = new Map<string, number>();
  const watched = new Map<Socket, Watched>();
  let sweeper: NodeJS.Timeout | undefined;
  const unslow = (w: Watched) => {
    if (!w.slow) return;
    w.slow = false;
    const n = (slow.get(w.key) ?? 1) - 1;
    if (n > 0) slow.set(w.key, n);
    else slow.delete(w.key);
  };
  const forget = (socket: Socket) => {
    const w = watched.get(socket);
    if (w === undefined) return;
    watched.delete(socket);
    unslow(w);
    if (watched.size === 0) {
      clearInterval(sweeper);
      sweeper = undefined;
    }
  };
  const sweep = () => {
    const now = Date.now();
    for (const [socket, w] of watched) {
      if (w.phase === 'idle' && socket.bytesRead > w.readAtIdle) {
        w.phase = 'head';
        w.since = now;
      }
      if (w.phase !== 'head' || w.slow || now - w.since < slowMs) continue;
      const n = (slow.get(w.key) ?? 0) + 1;
      if (n > perClient) {
        forget(socket);
        socket.destroy();
        continue;
      }
      w.slow = true;
      slow.set(w.key, n);
    }
  };
  server.headersTimeout = HEADERS_TIMEOUT_MS;
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress;
    if (address === undefined || (trusted && trusted(address, 0))) return;
    watched.set(socket, { key: addressKey(address), phase: 'head', since: Date.now(), readAtIdle: 0, inFlight: 0, slow: false });
    if (sweeper === undefined) {
      sweeper = setInterval(sweep, Math.max(1, Math.floor(slowMs / 2)));
      sweeper.unref();
    }
    socket.once('close', () => forget(socket));
  });
  // 'request' comes once a head has been read: the connection is past the phase capped here,
  // until its answer is sent and it waits for the next one.
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const w = watched.get(req.socket);
    if (w === undefined) return;
    unslow(w);
    w.phase = 'request';
    w.inFlight++;
    res.once('close', () => {
      if (--w.inFlight > 0 || watched.get(req.socket) !== w) return;
      w.phase = 'idle';
      w.readAtIdle = req.socket.bytesRead;
    });
  });
}
