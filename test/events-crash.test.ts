/**
 * Events survive kill -9 (issue 23; docs/events.md "Webhooks", "Triggers"): server processes
 * on one home (SQLite; PostgreSQL + S3 under test:shared) are killed with SIGKILL
 *
 * - right after uploads were acknowledged, with some of their deliveries in flight (held by a
 *   receiver that does not answer) and others not yet sent: after a restart every acknowledged
 *   upload's event is delivered, the held ones again under the same `webhook-id`;
 * - while its trigger runs are under way, with a second API node beside it on shared backends
 *   (on one machine, the server restarted): that node takes them once their lease runs out;
 *   each event has exactly one run, which ends once, with its output written.
 */
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { api, json, tempHome } from './helpers/server.ts';
import { release } from './helpers/algorithms.ts';
import { runCli, startServerProcess, WAIT_MS, type ServerProcess } from './helpers/process.ts';
import { HOME_FILES_ONLY, SHARED, shareBackends } from './helpers/backends.ts';
import Database from 'better-sqlite3';
import path from 'node:path';

const ENV = { ALGOHOST_CONNECTOR_NETWORK: 'any' };
const homes: string[] = [];
const running = new Set<ServerProcess>();

after(async () => {
  for (const s of running) await s.kill('SIGKILL').catch(() => undefined);
  for (const h of homes) fs.rmSync(h, { recursive: true, force: true });
});

async function start(home: string): Promise<ServerProcess> {
  const s = await startServerProcess({ home, env: ENV, timeoutMs: 60_000 });
  running.add(s);
  return s;
}

async function killHard(s: ServerProcess): Promise<void> {
  await s.kill('SIGKILL');
  running.delete(s);
}

async function until<T>(what: string, fn: () => Promise<T | undefined>, ms = 60_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > end) assert.fail(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const postJson = (call: ReturnType<typeof api>, path: string, body: unknown) => call(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

async function setUp(): Promise<{ home: string; server: ServerProcess; key: string }> {
  const home = tempHome('algohost-events-crash-');
  homes.push(home);
  const server = await start(home);
  const created = await runCli(['user', 'create', 'alice'], home, WAIT_MS);
  assert.equal(created.code, 0, created.stderr);
  const key = (JSON.parse(created.stdout) as { api_key: string }).api_key;
  for (const name of ['in', 'out']) assert.equal((await postJson(api(server.url, key), '/v1/data/.my', { name })).status, 200);
  return { home, server, key };
}

test('a server killed with deliveries in flight and others not yet sent: after a restart every event is delivered, the held ones under the same webhook-id', async () => {
  const { home, server, key } = await setUp();
  // Holds every request until `answering`; then answers 200.
  let answering = false;
  const got: { id: string; subject: string; answered: boolean }[] = [];
  const receiver = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8').on('data', (c: string) => (body += c));
    req.on('end', () => {
      const subject = (JSON.parse(body) as { subject: string }).subject;
      got.push({ id: String(req.headers['webhook-id']), subject, answered: answering });
      if (answering) res.writeHead(200).end('ok');
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  try {
    const alice = api(server.url, key);
    const sub = await postJson(alice, '/v1/users/alice/subscriptions', { url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`, types: ['data.file.created'] });
    assert.equal(sub.status, 201);
    const n = 40;
    const acknowledged = await Promise.all(
      Array.from({ length: n }, async (_, i) => {
        const r = await alice(`/v1/data/.my/in/f${i}`, { method: 'PUT', body: `file ${i}` });
        assert.equal(r.status, 200);
        return `data://alice/in/f${i}`;
      }),
    );
    // Some deliveries are held open by the receiver; the dispatcher sends 16 at a time, so the
    // rest are waiting their turn when the server dies.
    await until('a delivery in flight', async () => (got.length > 0 ? true : undefined));
    await killHard(server);
    const held = new Map(got.map((g) => [g.subject, g.id]));
    assert.ok(held.size < n, `some deliveries were not sent before the kill (${held.size} of ${n} were)`);
    answering = true;
    const again = await start(home);
    try {
      await until(
        'every acknowledged upload delivered',
        async () => {
          const delivered = new Set(got.filter((g) => g.answered).map((g) => g.subject));
          return acknowledged.every((s) => delivered.has(s)) ? true : undefined;
        },
        90_000,
      );
      // One webhook-id per event: what was held is sent again under its id.
      for (const [subject, id] of held) {
        assert.ok(got.some((g) => g.answered && g.subject === subject && g.id === id), `${subject} sent again as ${id}`);
      }
      const ids = new Map<string, Set<string>>();
      for (const g of got) ids.set(g.subject, (ids.get(g.subject) ?? new Set()).add(g.id));
      assert.ok([...ids.values()].every((s) => s.size === 1), 'each event has one webhook-id across attempts');
      const duplicates = got.filter((g) => g.answered).length - n;
      assert.ok(duplicates >= 0);
    } finally {
      await killHard(again);
    }
  } finally {
    receiver.closeAllConnections();
    await new Promise<void>((r) => receiver.close(() => r()));
  }
});

test('the dispatcher\'s bookkeeping lost (as a power cut may lose it: its commits do not wait for the disk): the deliveries are made again from the outbox, under the same webhook-ids', { skip: HOME_FILES_ONLY }, async () => {
  const { home, server, key } = await setUp();
  const got: { id: string; subject: string }[] = [];
  const receiver = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8').on('data', (c: string) => (body += c));
    req.on('end', () => {
      got.push({ id: String(req.headers['webhook-id']), subject: (JSON.parse(body) as { subject: string }).subject });
      res.writeHead(200).end('ok');
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  try {
    const alice = api(server.url, key);
    const sub = await postJson(alice, '/v1/users/alice/subscriptions', { url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`, types: ['data.file.created'] });
    assert.equal(sub.status, 201);
    const n = 5;
    for (let i = 0; i < n; i++) assert.equal((await alice(`/v1/data/.my/in/g${i}`, { method: 'PUT', body: `file ${i}` })).status, 200);
    await until('every upload delivered', async () => (new Set(got.map((g) => g.subject)).size === n ? true : undefined));
    await killHard(server);
    const first = new Map(got.map((g) => [g.subject, g.id]));
    // What the dispatcher wrote is gone, the outbox (written with the uploads) is not.
    const db = new Database(path.join(home, 'metadata.sqlite'));
    try {
      db.prepare('DELETE FROM delivery_attempts').run();
      assert.equal(db.prepare('DELETE FROM deliveries').run().changes, n);
      db.prepare("UPDATE meta SET value = '0' WHERE key = 'webhooks.cursor'").run();
    } finally {
      db.close();
    }
    got.length = 0;
    const again = await start(home);
    try {
      await until('every upload delivered again', async () => (new Set(got.map((g) => g.subject)).size === n ? true : undefined));
      for (const g of got) assert.equal(g.id, first.get(g.subject), `${g.subject}: sent again under its first webhook-id`);
    } finally {
      await killHard(again);
    }
  } finally {
    receiver.closeAllConnections();
    await new Promise<void>((r) => receiver.close(() => r()));
  }
});

test('trigger runs under way on a node killed beside another: each event has one run, which ends once, with its output', async () => {
  const { home, server, key } = await setUp();
  const alice = api(server.url, key);
  // Long enough for the runs to be under way still once a second node has started beside it
  // (a server on PostgreSQL takes some seconds to start on a busy machine).
  const runMs = SHARED ? 20_000 : 6_000;
  await release(alice, 'alice', 'Slow', { 'src/index.js': `export async function apply(x) { await new Promise((r) => setTimeout(r, ${runMs})); return String(x).toUpperCase(); }\n` }, { settings: { language: 'javascript' } });
  const made = await postJson(alice, '/v1/users/alice/triggers', { types: ['data.file.created'], path: 'data://.my/in/**', algorithm: 'alice/Slow', input: '{{name}}', output: 'data://.my/out/{{name}}', timeout: runMs / 1000 + 2 });
  const trigger = (await json(made)) as { id: string };
  assert.equal(made.status, 201, JSON.stringify(trigger));
  const completed: { event: string; request: string }[] = [];
  const receiver = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8').on('data', (c: string) => (body += c));
    req.on('end', () => {
      const e = JSON.parse(body) as { id: string; data: { request_id: string } };
      completed.push({ event: e.id, request: e.data.request_id });
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
  const sub = await postJson(alice, '/v1/users/alice/subscriptions', { url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`, types: ['call.completed'] });
  assert.equal(sub.status, 201);
  const n = 4;
  for (let i = 0; i < n; i++) assert.equal((await alice(`/v1/data/.my/in/t${i}`, { method: 'PUT', body: 'x' })).status, 200);
  type Run = { event_id: string; subject: string; status: string; attempts: number };
  const runsOf = async (call: ReturnType<typeof api>) => ((await json(await call(`/v1/users/alice/triggers/${trigger.id}/runs`))) as { results: Run[] }).results;
  // The first node has taken them all (it runs 8 at once): running now, on it alone.
  await until('runs under way', async () => {
    const r = await runsOf(alice);
    return r.length === n && r.every((x) => x.status === 'running') ? r : undefined;
  });
  // On shared backends another API node runs beside it; one machine has one server per home,
  // which comes back after the kill.
  let second: ServerProcess | undefined;
  if (SHARED) {
    const other = tempHome('algohost-events-crash-2-');
    homes.push(other);
    await shareBackends(home, other);
    second = await start(other);
  }
  try {
    // Still under way (the other node cannot take what is leased): killed mid-run.
    const underWay = (await runsOf(alice)).filter((x) => x.status === 'running');
    assert.equal(underWay.length, n, 'every run still under way when its node is killed');
    await killHard(server);
    second ??= await start(home);
    const b = api(second.url, key);
    const all = await until(
      'every run ended',
      async () => {
        const r = await runsOf(b);
        return r.length >= n && r.every((x) => x.status === 'succeeded' || x.status === 'failed') ? r : undefined;
      },
      150_000,
    );
    assert.equal(all.length, n, 'one run per event');
    assert.equal(new Set(all.map((r) => r.event_id)).size, n);
    assert.deepEqual(all.map((r) => r.status), Array(n).fill('succeeded'), JSON.stringify(all));
    // Those the killed node held were started again by the other.
    for (const u of underWay) assert.ok(all.find((r) => r.event_id === u.event_id)!.attempts >= 2, `${u.subject} started again`);
    for (let i = 0; i < n; i++) assert.equal(await (await b(`/v1/data/.my/out/t${i}`)).text(), `T${i}`);
    // Ended once: one call.completed per run (a webhook counts them).
    await until('every call.completed delivered', async () => (new Set(completed.map((c) => c.event)).size >= n ? true : undefined));
    await new Promise((r) => setTimeout(r, 2000));
    assert.equal(new Set(completed.map((c) => c.event)).size, n, 'one call.completed per run');
    assert.equal(new Set(completed.map((c) => c.request)).size, n);
  } finally {
    if (second) await killHard(second);
    await new Promise<void>((r) => receiver.close(() => r()));
  }
});
