/**
 * Lingering close (src/http/linger.ts): a client still sending a body the server refused gets
 * the refusal, not a reset, directly and through a load balancer in front; and the server does
 * not wait on such a client for long.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer, type TestServer } from './helpers/server.ts';
import { roundRobin } from './helpers/cluster.ts';
import { LINGER_IDLE_MS, LINGER_MS } from '../src/http/linger.ts';

let s: TestServer;
let key: string;
let balancer: Awaited<ReturnType<typeof roundRobin>>;

before(async () => {
  s = await startServer();
  key = await s.user('alice');
  balancer = await roundRobin([s.url]);
});
after(async () => {
  await balancer.close();
  await s.close();
});

test('an input over 10 MiB, sent whole, gets its 413 directly and through a TCP balancer', async () => {
  for (const base of [s.url, balancer.url]) {
    for (let i = 0; i < 3; i++) {
      const r = await fetch(`${base}/v1/algo/alice/Nothing`, {
        method: 'POST',
        headers: { authorization: `Simple ${key}`, 'content-type': 'application/octet-stream' },
        body: Buffer.alloc(10 * 1024 * 1024 + 1),
      });
      assert.equal(r.status, 413, `${base}, try ${i}`);
      assert.equal(((await r.json()) as { error: { code: string } }).error.code, 'payload_too_large');
    }
  }
});

/**
 * A client that keeps its side open after the server's refusal (half-open), sends the headers of
 * a 200 MiB upload and 1 MiB of it, then goes on sending 64 KiB every 100 ms for `sendMs`, then
 * stops. What it saw, and when the server closed, from the refusal on.
 */
async function refusedUpload(sendMs: number): Promise<{ answer: string; error: string | undefined; errorAt: number | undefined; closedAt: number }> {
  // The server's end of this connection, to see when it closes: a quiet half-open client hears
  // nothing of that until it writes again.
  const accepted: net.Socket[] = [];
  const onConnection = (c: net.Socket) => accepted.push(c);
  s.app.server.on('connection', onConnection);
  const socket = net.connect({ port: Number(new URL(s.node).port), host: '127.0.0.1', allowHalfOpen: true });
  let answer = '';
  let error: string | undefined;
  let errorAt: number | undefined;
  socket.on('data', (d: Buffer) => (answer += d.toString('utf8')));
  socket.on('error', (e) => {
    error = e.message;
    errorAt = Date.now();
  });
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
  await new Promise((r) => setImmediate(r));
  s.app.server.off('connection', onConnection);
  const server = accepted.find((c) => c.remotePort === socket.localPort);
  assert.ok(server, 'the server never saw the connection');
  const serverClosed = new Promise<number>((resolve) => (server.destroyed ? resolve(Date.now()) : server.once('close', () => resolve(Date.now()))));
  socket.write(`POST /v1/algo/alice/Nothing HTTP/1.1\r\nHost: x\r\nAuthorization: Simple ${key}\r\nContent-Type: application/octet-stream\r\nContent-Length: ${200 * 1024 * 1024}\r\n\r\n`);
  socket.write(Buffer.alloc(1024 * 1024, 1));
  await new Promise<void>((resolve) => socket.once('end', () => resolve()));
  const refusedAt = Date.now();
  const timer = setInterval(() => {
    if (Date.now() - refusedAt < sendMs && !socket.destroyed) socket.write(Buffer.alloc(64 * 1024, 1));
  }, 100);
  const closedAt = await Promise.race([serverClosed, new Promise<number>((resolve) => setTimeout(() => resolve(Infinity), sendMs + 15_000))]);
  clearInterval(timer);
  socket.destroy();
  return { answer, error, errorAt: errorAt === undefined ? undefined : errorAt - refusedAt, closedAt: closedAt - refusedAt };
}

test('after the refusal the server reads what still comes while it comes, then closes once the client has been quiet for a while', async () => {
  const r = await refusedUpload(2000);
  assert.match(r.answer, /^HTTP\/1\.1 413 /);
  assert.match(r.answer, /payload_too_large/);
  // Still read while the client sent: no reset (EPIPE, ECONNRESET) during those 2 s.
  assert.ok(r.errorAt === undefined || r.errorAt >= 2000, `the server reset the connection ${r.errorAt} ms after its answer: ${r.error}`);
  // Then quiet: closed about LINGER_IDLE_MS after the last bytes, not at once, not never.
  assert.ok(r.closedAt >= 2000 && r.closedAt < 2000 + LINGER_IDLE_MS + 2000, `closed ${r.closedAt} ms after the refusal`);
});

test('a client that never stops sending is cut off after LINGER_MS', async () => {
  const r = await refusedUpload(LINGER_MS + 5000);
  assert.match(r.answer, /^HTTP\/1\.1 413 /);
  assert.ok(r.closedAt >= LINGER_MS - 500 && r.closedAt < LINGER_MS + 2000, `closed ${r.closedAt} ms after the refusal`);
});
