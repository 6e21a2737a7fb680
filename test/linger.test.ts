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
import { LINGER_IDLE_MS } from '../src/http/linger.ts';

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

test('after the refusal the server ends its side, and closes once the client has been idle for a while', async () => {
  const socket = net.connect(Number(new URL(s.url).port), '127.0.0.1');
  let text = '';
  socket.setEncoding('utf8').on('data', (d: string) => (text += d));
  const ended = new Promise<number>((resolve) => socket.once('end', () => resolve(Date.now())));
  const closed = new Promise<number>((resolve) => socket.once('close', () => resolve(Date.now())));
  socket.on('error', () => undefined);
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
  socket.write(`POST /v1/algo/alice/Nothing HTTP/1.1\r\nHost: x\r\nAuthorization: Simple ${key}\r\nContent-Type: application/octet-stream\r\nContent-Length: ${20 * 1024 * 1024}\r\n\r\n`);
  // Half the body, then nothing: the server answered at the headers and is only discarding now.
  socket.write(Buffer.alloc(1024 * 1024, 1));
  const endedAt = await ended;
  assert.match(text, /^HTTP\/1\.1 413 /);
  assert.match(text, /payload_too_large/);
  // Still open for reading our bytes, the server closes after LINGER_IDLE_MS of silence (not at once, not never).
  socket.write(Buffer.alloc(64 * 1024, 1));
  const closedAt = await closed;
  assert.ok(closedAt - endedAt < LINGER_IDLE_MS + 3000, `closed ${closedAt - endedAt} ms after its answer`);
});
