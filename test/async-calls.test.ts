/**
 * Async calls (`output=void`) and `GET /v1/requests/:id` on one server, SQLite or (test:shared)
 * PostgreSQL: the request is stored before the caller gets its id, its answer is the envelope a
 * sync call would have had, only the caller's user sees it, answers expire, and a server killed
 * with SIGKILL mid-call runs the call again when it restarts. The cluster's JetStream queue is
 * tested in test/cluster.test.ts.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { api, json, startServer, tempHome, type TestServer } from './helpers/server.ts';
import { callAlgo, release } from './helpers/algorithms.ts';
import { runCli, startServerProcess, WAIT_MS } from './helpers/process.ts';

let s: TestServer;
let alice: ReturnType<typeof api>;
let bob: ReturnType<typeof api>;

const ALGO = `
export async function apply(input) {
  if (input === 'fail') throw Object.assign(new Error('that will not do'), { error_type: 'InputError' });
  if (typeof input === 'string' && input.startsWith('sleep ')) {
    await new Promise((r) => setTimeout(r, Number(input.slice(6))));
    return 'slept';
  }
  if (input === 'print') console.log('printed');
  return input;
}
`;

before(async () => {
  s = await startServer({ env: { ALGOHOST_ASYNC_RESULT_TTL_S: '2' } });
  alice = api(s.url, await s.user('alice'));
  bob = api(s.url, await s.user('bob'));
  await release(alice, 'alice', 'Async', { 'src/index.js': ALGO }, { settings: { language: 'javascript' } });
});
after(() => s.close());

/** Polls GET /v1/requests/:id until it is done (bounded). */
async function answerOf(who: typeof alice, id: string, ms = WAIT_MS): Promise<Awaited<ReturnType<typeof json>>> {
  const until = Date.now() + ms;
  for (;;) {
    const r = await who(`/v1/requests/${id}`);
    assert.equal(r.status, 200, await r.clone().text());
    const body = await json(r);
    if (body.status === 'done') return body;
    assert.ok(Date.now() < until, `request ${id} still ${body.status} after ${ms} ms`);
    await new Promise((res) => setTimeout(res, 50));
  }
}

async function accept(who: typeof alice, input: unknown, query = '?output=void'): Promise<string> {
  const r = await callAlgo(who, 'alice/Async', JSON.stringify(input), 'application/json', query);
  assert.equal(r.status, 200);
  const body = await json(r);
  assert.equal(body.async, true);
  assert.match(body.request_id, /^req-[0-9a-f]{24}$/);
  return body.request_id;
}

describe('GET /v1/requests/:id', () => {
  test('gives the state, then the envelope a sync call would have had', async () => {
    const id = await accept(alice, 'sleep 400');
    const early = await json(await alice(`/v1/requests/${id}`));
    assert.ok(early.status === 'queued' || early.status === 'running', early.status);
    assert.equal(early.response, null);
    assert.equal(early.algorithm, 'alice/Async');
    const done = await answerOf(alice, id);
    assert.equal(done.http_status, 200);
    assert.equal(done.attempts, 1);
    assert.equal(done.response.result, 'slept');
    assert.equal(done.response.metadata.content_type, 'text');
    assert.ok(done.response.metadata.duration >= 0.4, `duration ${done.response.metadata.duration}`);
    assert.ok(Date.parse(done.finished_at) >= Date.parse(done.created_at));

    const sync = await json(await callAlgo(alice, 'alice/Async', JSON.stringify({ k: [1, 'two'] }), 'application/json'));
    const later = await answerOf(alice, await accept(alice, { k: [1, 'two'] }));
    assert.deepEqual(later.response.result, sync.result);
    assert.deepEqual(Object.keys(later.response.metadata).sort(), Object.keys(sync.metadata).sort());
  });

  test('an algorithm error, and stdout for the owner who asked, are kept as a sync call shows them', async () => {
    const failed = await answerOf(alice, await accept(alice, 'fail'));
    assert.equal(failed.response.error.error_type, 'InputError');
    assert.equal(failed.response.error.message, 'that will not do');
    const printed = await answerOf(alice, await accept(alice, 'print', '?output=void&stdout=true'));
    assert.equal(printed.response.metadata.stdout, 'printed\n');
    const notOwner = await answerOf(bob, await accept(bob, 'print', '?output=void&stdout=true'));
    assert.equal(notOwner.response.metadata.stdout, undefined);
  });

  test("only the caller's user sees a request; others, and unknown ids, get 404 request_not_found", async () => {
    const id = await accept(alice, 'mine');
    await answerOf(alice, id);
    for (const [who, rid] of [
      [bob, id],
      [alice, 'req-000000000000000000000000'],
      [alice, 'nothing'],
    ] as const) {
      const r = await who(`/v1/requests/${rid}`);
      assert.equal(r.status, 404);
      assert.equal((await json(r)).error.code, 'request_not_found');
    }
    assert.equal((await fetch(`${s.url}/v1/requests/${id}`)).status, 401);
  });

  test('an answer is dropped after its keeping time (ALGOHOST_ASYNC_RESULT_TTL_S)', async () => {
    const id = await accept(alice, 'short-lived');
    await answerOf(alice, id);
    const until = Date.now() + 10_000;
    let status = 200;
    while (status === 200 && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 250));
      status = (await alice(`/v1/requests/${id}`)).status;
    }
    assert.equal(status, 404, 'the answer outlived its keeping time');
  });

  test('a call running here is neither taken back by recovery nor started twice', async () => {
    const id = await accept(alice, 'sleep 800');
    await new Promise((r) => setTimeout(r, 300));
    // What the sweeper of a shared store runs every minute, and a second delivery of the request.
    assert.equal(await s.services.asyncCalls.recover(), 0);
    assert.equal(await s.services.asyncCalls.run(id), 'retry');
    const done = await answerOf(alice, id);
    assert.equal(done.attempts, 1);
    assert.equal(done.response.result, 'slept');
    // Once done, another delivery only says so.
    assert.equal(await s.services.asyncCalls.run(id), 'done');
  });

  test('a refused key still gets its HTTP error at once, and nothing is stored', async () => {
    const before = await s.services.store.db.selectFrom('async_requests').select(({ fn }) => fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
    const missing = await json(await callAlgo(alice, 'alice/Nope', '"x"', 'application/json', '?output=void'));
    assert.equal(missing.error.error_type, 'EntityNotFoundError');
    const bad = await callAlgo(alice, 'alice/Async/banana', '"x"', 'application/json', '?output=void');
    assert.equal(bad.status, 400);
    const after = await s.services.store.db.selectFrom('async_requests').select(({ fn }) => fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
    assert.equal(Number(after.n), Number(before.n));
  });
});

describe('a server killed mid-call', () => {
  test('runs the async call again when it restarts, and the caller sees one answer', async () => {
    const home = tempHome('algohost-async-');
    try {
      let server = await startServerProcess({ home });
      const created = await runCli(['user', 'create', 'carol'], home, WAIT_MS);
      assert.equal(created.code, 0, created.stderr);
      let carol = api(server.url, (JSON.parse(created.stdout) as { api_key: string }).api_key);
      const key = (JSON.parse(created.stdout) as { api_key: string }).api_key;
      await release(carol, 'carol', 'Slow', { 'src/index.js': ALGO }, { settings: { language: 'javascript' } });
      const r = await callAlgo(carol, 'carol/Slow', '"sleep 1500"', 'application/json', '?output=void');
      const id = (await json(r)).request_id as string;
      // Running now: killed before it can answer.
      await new Promise((res) => setTimeout(res, 500));
      assert.equal((await json(await carol(`/v1/requests/${id}`))).status, 'running');
      await server.kill('SIGKILL');
      server = await startServerProcess({ home });
      try {
        carol = api(server.url, key);
        const done = await answerOf(carol, id, 20_000);
        assert.equal(done.response.result, 'slept');
        assert.equal(done.attempts, 2);
      } finally {
        await server.kill();
      }
    } finally {
      fs.rmSync(home, { recursive: true, force: true });
    }
  });
});
