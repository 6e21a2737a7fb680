import type { IncomingMessage, Server } from 'node:http';
import type { Socket } from 'node:net';
import proxyAddr from '@fastify/proxy-addr';
import { addressKey } from '../auth/sessions.ts';

/** How long a connection may take to send its first request head before it counts as slow. */
export const SLOW_HEAD_MS = 2_000;
/** Slow connections (no whole head after SLOW_HEAD_MS) one client address may hold at once. */
export const SLOW_PER_CLIENT = 16;
/** Longest a client may take to send a request's head (Node's default is 60 s, and slow clients stretch it). */
export const HEADERS_TIMEOUT_MS = 30_000;

/**
 * Caps the connections each client address holds open while trickling a request head
 * ("slowloris": a client opens many connections and sends a header line now and then into each,
 * holding the server's sockets for as long as the header timeout allows). A connection whose
 * first head has not arrived after SLOW_HEAD_MS counts as slow until it does, or closes; a slow
 * connection beyond SLOW_PER_CLIENT of the same address is closed then. A client opening many
 * connections at once and sending its requests (the CLI's `cp -c 64`) is never slow, whatever
 * their number. IPv6 clients count by /64 (a host has a whole prefix to draw addresses from). A
 * trusted proxy (ALGOHOST_TRUST_PROXY) is not capped: every client behind it shares its address,
 * and a proxy sends heads whole.
 */
export function capHeaderPhase(server: Server, trustProxy: false | string[], perClient = SLOW_PER_CLIENT, slowMs = SLOW_HEAD_MS): void {
  const trusted = trustProxy ? proxyAddr.compile(trustProxy) : undefined;
  const slow = new Map<string, number>();
  const watched = new WeakMap<Socket, { key: string; timer: NodeJS.Timeout; slow: boolean }>();
  const done = (socket: Socket) => {
    const w = watched.get(socket);
    if (w === undefined) return;
    watched.delete(socket);
    clearTimeout(w.timer);
    if (!w.slow) return;
    const n = (slow.get(w.key) ?? 1) - 1;
    if (n > 0) slow.set(w.key, n);
    else slow.delete(w.key);
  };
  server.headersTimeout = HEADERS_TIMEOUT_MS;
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress;
    if (address === undefined || (trusted && trusted(address, 0))) return;
    const key = addressKey(address);
    const timer = setTimeout(() => {
      const w = watched.get(socket);
      if (!w) return;
      const n = (slow.get(key) ?? 0) + 1;
      if (n > perClient) {
        done(socket);
        socket.destroy();
        return;
      }
      w.slow = true;
      slow.set(key, n);
    }, slowMs);
    timer.unref();
    watched.set(socket, { key, timer, slow: false });
    socket.once('close', () => done(socket));
  });
  // 'request' comes once a head has been read: the connection is past the phase capped here.
  server.on('request', (req: IncomingMessage) => done(req.socket));
}
