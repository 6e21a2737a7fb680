import type { IncomingMessage, Server } from 'node:http';
import type { Socket } from 'node:net';
import proxyAddr from '@fastify/proxy-addr';
import { addressKey } from '../auth/sessions.ts';

/** Connections one client address may have open that have not yet sent a whole request head. */
export const HEADER_PHASE_PER_CLIENT = 32;
/** Longest a client may take to send a request's head (Node's default is 60 s, and slow clients stretch it). */
export const HEADERS_TIMEOUT_MS = 30_000;

/**
 * Caps the connections each client address holds open without having sent a whole request head
 * ("slowloris": a client opens many connections and trickles a header into each, holding the
 * server's sockets for as long as the header timeout allows). A connection counts from when it
 * is accepted until its first request's head has been read, or it closes; one more than
 * HEADER_PHASE_PER_CLIENT from the same address is closed at once. IPv6 clients count by /64
 * (a host has a whole prefix to draw addresses from). A trusted proxy (ALGOHOST_TRUST_PROXY) is
 * not capped: every client behind it shares its address, and a proxy sends heads whole.
 */
export function capHeaderPhase(server: Server, trustProxy: false | string[], perClient = HEADER_PHASE_PER_CLIENT): void {
  const trusted = trustProxy ? proxyAddr.compile(trustProxy) : undefined;
  const pending = new Map<string, number>();
  const waiting = new WeakMap<Socket, string>();
  const done = (socket: Socket) => {
    const key = waiting.get(socket);
    if (key === undefined) return;
    waiting.delete(socket);
    const n = (pending.get(key) ?? 1) - 1;
    if (n > 0) pending.set(key, n);
    else pending.delete(key);
  };
  server.headersTimeout = HEADERS_TIMEOUT_MS;
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress;
    if (address === undefined || (trusted && trusted(address, 0))) return;
    const key = addressKey(address);
    const n = (pending.get(key) ?? 0) + 1;
    if (n > perClient) {
      socket.destroy();
      return;
    }
    pending.set(key, n);
    waiting.set(socket, key);
    socket.once('close', () => done(socket));
  });
  // 'request' comes once a head has been read: the connection is past the phase capped here.
  server.on('request', (req: IncomingMessage) => done(req.socket));
}
