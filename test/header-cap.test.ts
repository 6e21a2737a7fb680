/**
 * Connections still sending their request head are capped per client address (src/http/headerCap.ts):
 * a client trickling headers into many connections cannot hold the server's sockets.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer, type TestServer } from './helpers/server.ts';
import { SLOW_HEAD_MS, SLOW_PER_CLIENT } from '../src/http/headerCap.ts';

/** Past when a slow head is found (it is looked for every SLOW_HEAD_MS / 2). */
const LATE = SLOW_HEAD_MS * 1.5 + 500;

/**
 * Waits until `count()` is `n` (bounded: on a loaded machine a sweep may come late, so a fixed
 * wait would fail for lateness, not for the cap), then one more sweep, and answers the count then:
 * a cap that closes too many shows it, one that closes none never gets there.
 */
async function settlesAt(count: () => number, n: number): Promise<number> {
  for (const end = Date.now() + LATE + 15_000; count() < n && Date.now() < end; ) await new Promise((r) => setTimeout(r, 50));
  await new Promise((r) => setTimeout(r, SLOW_HEAD_MS / 2 + 250));
  return count();
}

let s: TestServer;
before(async () => {
  s = await startServer();
});
after(() => s.close());

/** A connection from `from` that sends half a request head (or `first`) and waits; resolves once it is open, with whether the server has closed it. */
async function slow(port: number, from: string, first = 'GET /health HTTP/1.1\r\nHost: x\r\n') {
  const socket = net.connect({ host: '127.0.0.1', port, localAddress: from });
  let closed = false;
  socket.on('close', () => (closed = true));
  socket.on('error', () => undefined);
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', () => resolve());
    socket.once('error', reject);
  });
  socket.write(first);
  return { socket, closed: () => closed };
}

test(`one address holds at most ${SLOW_PER_CLIENT} connections still trickling a head after ${SLOW_HEAD_MS} ms; others, and finished heads, are not held back`, async () => {
  // The test server's own node (not a balancer in front of it: its address is the balancer's).
  const port = Number(new URL(s.node).port);
  const held: Awaited<ReturnType<typeof slow>>[] = [];
  try {
    for (let i = 0; i < SLOW_PER_CLIENT + 8; i++) held.push(await slow(port, '127.0.0.1'));
    // Nothing is closed before its head is late...
    assert.equal(held.filter((c) => c.closed()).length, 0);
    const closed = await settlesAt(() => held.filter((c) => c.closed()).length, 8);
    assert.equal(closed, 8, `${closed} of ${held.length} slow connections were closed`);
    // Another address is served meanwhile...
    const other = await slow(port, '127.0.0.2');
    await new Promise((r) => setTimeout(r, LATE));
    held.push(other);
    other.socket.write('\r\n');
    const answer = await new Promise<string>((resolve) => other.socket.once('data', (d) => resolve(d.toString())));
    assert.match(answer, /^HTTP\/1\.1 200/);
    // ...and a held connection that finishes its head is answered, and frees its place.
    const open = held.find((c) => !c.closed())!;
    open.socket.write('\r\n');
    assert.match(await new Promise<string>((resolve) => open.socket.once('data', (d) => resolve(d.toString()))), /^HTTP\/1\.1 200/);
    const again = await slow(port, '127.0.0.1');
    await new Promise((r) => setTimeout(r, LATE));
    held.push(again);
    assert.equal(again.closed(), false, 'the place a finished head freed was not given back');
  } finally {
    for (const c of held) c.socket.destroy();
  }
});

/**
 * A kept-alive connection from `from` that has had one request answered (a cheap one, refused
 * before any store is asked); then, if `trickle`, it sends half of its next head and waits.
 */
async function keptAlive(port: number, from: string, trickle: boolean) {
  const c = await slow(port, from, 'GET /v1/data/.my HTTP/1.1\r\nHost: x\r\n\r\n');
  const first = await new Promise<string>((resolve) => c.socket.once('data', (d) => resolve(d.toString())));
  assert.match(first, /^HTTP\/1\.1 401/);
  if (trickle) c.socket.write('GET /health HTTP/1.1\r\nHost: x\r\n');
  return c;
}

test(`a kept-alive connection trickling its next head counts as slow too; idle kept-alive connections do not`, async () => {
  const port = Number(new URL(s.node).port);
  const held: Awaited<ReturnType<typeof slow>>[] = [];
  try {
    const idle: Awaited<ReturnType<typeof slow>>[] = [];
    for (let i = 0; i < SLOW_PER_CLIENT + 8; i++) idle.push(await keptAlive(port, '127.0.0.4', false));
    const trickling: Awaited<ReturnType<typeof slow>>[] = [];
    for (let i = 0; i < SLOW_PER_CLIENT + 8; i++) trickling.push(await keptAlive(port, '127.0.0.3', true));
    held.push(...idle, ...trickling);
    assert.equal(await settlesAt(() => trickling.filter((c) => c.closed()).length, 8), 8, 'slow second heads were not capped at 16');
    assert.equal(idle.filter((c) => c.closed()).length, 0, 'idle kept-alive connections were closed');
    // An idle one still takes its next request whole.
    idle[0]!.socket.write('GET /v1/data/.my HTTP/1.1\r\nHost: x\r\n\r\n');
    assert.match(await new Promise<string>((resolve) => idle[0]!.socket.once('data', (d) => resolve(d.toString()))), /^HTTP\/1\.1 401/);
  } finally {
    for (const c of held) c.socket.destroy();
  }
});

test('many connections opened at once that send their heads are all answered (a client with 64 transfers in parallel is not slow)', async () => {
  const port = Number(new URL(s.node).port);
  const answers = await Promise.all(
    Array.from(
      { length: 4 * SLOW_PER_CLIENT + 16 },
      () =>
        new Promise<string>((resolve) => {
          // A request that costs the server nothing (refused before any store is asked: /health
          // would ask the database and the S3 store 80 times at once, which is not what is tried here).
          const socket = net.connect({ host: '127.0.0.1', port }, () => socket.write('GET /v1/data/.my HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
          let text = '';
          socket.on('data', (d) => (text += d.toString()));
          socket.on('close', () => resolve(text.slice(0, 12)));
          socket.on('error', () => undefined);
        }),
    ),
  );
  assert.deepEqual(new Set(answers), new Set(['HTTP/1.1 401']));
});
