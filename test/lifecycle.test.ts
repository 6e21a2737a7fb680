/** Calls waiting for workers, and what deleting users and algorithms leaves behind. */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { DEFAULT_POOL } from '../src/runtime/pool.ts';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { callAlgo, release } from './helpers/algorithms.ts';
import { CLUSTER } from './helpers/backends.ts';

let s: TestServer;
let alice: ReturnType<typeof api>;

before(async () => {
  // One worker in all: a second call must wait for the first.
  s = await startServer({ runtime: { pool: { ...DEFAULT_POOL, maxWorkers: 1, maxPerVersion: 1 } } });
  alice = api(s.url, await s.user('alice'));
  await release(alice, 'alice', 'Sleepy', { 'src/index.js': 'export const apply = (ms) => new Promise((r) => setTimeout(() => r(`slept ${ms}`), ms));\n' }, { settings: { language: 'javascript' } });
});
after(() => s.close());

test('a call whose timeout runs out while it waits for a worker is a TimeoutError, and the busy worker is spared', { skip: CLUSTER && 'needs one worker in all; test:cluster has two worker nodes (cluster-protocol.test.ts tries a full one)' }, async () => {
  const first = callAlgo(alice, 'alice/Sleepy', '2500', 'application/json').then(json);
  await new Promise((r) => setTimeout(r, 300));
  const started = Date.now();
  const second = await json(await callAlgo(alice, 'alice/Sleepy', '1', 'application/json', '?timeout=0.5'));
  const waited = Date.now() - started;
  assert.equal(second.error?.error_type, 'TimeoutError', JSON.stringify(second));
  assert.ok(waited < 2000, `answered after ${waited} ms, before the first call ended`);
  assert.equal((await first).result, 'slept 2500', 'the worker of the first call was not killed');
});

test('deleting a user removes the files of their algorithms', async () => {
  const bobKey = await s.user('bob');
  // This process's own server, whose home is counted (under test:cluster, another API node keeps
  // its own files, pruned at its sweep: cluster.test.ts).
  const bob = api(s.node, bobKey);
  await release(bob, 'bob', 'Gone', { 'src/index.js': 'export const apply = (x) => x;\n' }, { settings: { language: 'javascript' } });
  const root = path.join(s.home, 'algorithms');
  const dirsBefore = fs.readdirSync(root).filter((d) => d !== '.tmp');
  assert.equal((await json(await callAlgo(bob, 'bob/Gone', 'x'))).result, 'x');
  await s.services.users.delete('bob');
  const dirsAfter = fs.readdirSync(root).filter((d) => d !== '.tmp');
  assert.equal(dirsAfter.length, dirsBefore.length - 1, `${dirsBefore} → ${dirsAfter}`);
  // Alice's algorithm is untouched.
  assert.equal((await json(await callAlgo(alice, 'alice/Sleepy', '1', 'application/json'))).result, 'slept 1');
});

test('during a drain, a call in flight keeps its SDK and finishes; new requests are turned away', async () => {
  const d = await startServer();
  const a = api(d.url, await d.user('dana'));
  await a('/v1/data/.my', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'c' }) });
  await a('/v1/data/.my/c/f.txt', { method: 'PUT', body: 'still here' });
  await release(a, 'dana', 'Late', { 'src/index.js': "export async function apply(x, ctx) { await new Promise((r) => setTimeout(r, 800)); return await ctx.client.file('data://.my/c/f.txt').getString(); }\n" }, { settings: { language: 'javascript' } });
  assert.equal((await json(await callAlgo(a, 'dana/Late', 'warm'))).result, 'still here');
  const inflight = callAlgo(a, 'dana/Late', 'x');
  await new Promise((r) => setTimeout(r, 300));
  const closing = d.app.close(); // what SIGTERM does: finish what is in flight
  // A forged internal header from outside is still refused during the drain.
  const forged = await fetch(`${d.url}/v1/data/.my`, { headers: { 'x-algohost-internal': 'guess' } }).catch(() => undefined);
  assert.notEqual(forged?.status, 200);
  const body = await json(await inflight);
  assert.equal(body.result, 'still here', JSON.stringify(body));
  await closing;
  await d.services.close();
  await d.cluster?.close();
  fs.rmSync(d.home, { recursive: true, force: true });
});
