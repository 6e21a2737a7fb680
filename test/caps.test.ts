/**
 * What one user can hold (issue 36; docs/security.md "What one user can hold"): a user at a cap
 * is refused in our envelope with a code naming it, while another user's requests and /health
 * answer as before. Runs on every configuration: one node (SQLite), PostgreSQL + S3, and the
 * cluster, where a user's streams are counted on both API nodes together (the balancer hands
 * connections to each in turn, so a cap counted per node would let an eleventh stream in).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { SharedLimitStore } from '../src/limits/shared.ts';

/** The default per-user cap (ALGOHOST_MAX_STREAMS_PER_USER), tested as shipped. */
const PER_USER = 10;
/** A small node-wide cap (ALGOHOST_MAX_STREAMS), so that two users can fill it. */
const PER_NODE = 12;

let s: TestServer;
const keys: Record<string, string> = {};

before(async () => {
  s = await startServer({ env: { ALGOHOST_MAX_STREAMS: String(PER_NODE) } });
  for (const name of ['alice', 'bob', 'carol']) {
    keys[name] = await s.user(name);
    const mk = await api(s.url, keys[name])('/v1/data/.my', { method: 'POST', body: JSON.stringify({ name: 'caps' }), headers: { 'content-type': 'application/json' } });
    assert.equal(mk.status, 200, await mk.text());
  }
});
after(() => s.close());

interface Stream {
  status: number;
  res: Response;
  close(): void;
}

/** Opens a live event stream of `user` at `base` (the balancer unless told): the answer's head, and a way to close it. */
async function open(user: string, base = s.url): Promise<Stream> {
  const controller = new AbortController();
  const res = await fetch(`${base}/v1/users/${user}/events`, { headers: { authorization: `Simple ${keys[user]}` }, signal: controller.signal });
  return {
    status: res.status,
    res,
    close: () => controller.abort(),
  };
}

/** Every stream closed is given back: this node's count, and on PostgreSQL every node's in the database. */
async function allGivenBack(): Promise<void> {
  await until('every stream of this node closed', () => s.services.users.streams.open() === 0);
  if (s.services.store.dialect !== 'postgres') return;
  const shared = new SharedLimitStore(s.services.store);
  for (const name of Object.keys(keys)) {
    const { id } = await s.services.users.require(name);
    await until(`${name}'s streams given back on every node`, async () => (await shared.inFlight(`streams:u${id}`)) === 0);
  }
}

async function until(what: string, check: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) assert.fail(`waited ${ms} ms for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Another user's business goes on: a file written and read, and the node's health. */
async function othersUnaffected(who: string): Promise<void> {
  const call = api(s.url, keys[who]);
  const put = await call(`/v1/data/.my/caps/note.txt`, { method: 'PUT', body: 'still here' });
  assert.equal(put.status, 200, await put.text());
  const got = await call(`/v1/data/.my/caps/note.txt`);
  assert.equal(got.status, 200);
  assert.equal(await got.text(), 'still here');
  for (const base of new Set([s.url, s.node])) {
    const health = await fetch(`${base}/health`);
    const text = await health.text();
    assert.equal(health.status, 200, `${base}/health: ${text}`);
  }
}

describe('live event streams', () => {
  test(`a user holds at most ${PER_USER} at once, on every node together; one more is refused 429 too_many_streams, and others go on`, async () => {
    const held: Stream[] = [];
    try {
      for (let i = 0; i < PER_USER; i++) {
        const st = await open('alice');
        held.push(st);
        assert.equal(st.status, 200, `stream ${i + 1}: ${st.status}`);
      }
      // Twice over: under test:cluster the two go to different API nodes.
      for (let i = 0; i < 2; i++) {
        const over = await open('alice');
        assert.equal(over.status, 429, `stream ${PER_USER + 1 + i} was let in`);
        const body = await json(over.res);
        assert.equal(body.error.code, 'too_many_streams');
        assert.equal(body.error.limit, PER_USER);
        assert.match(body.error.message, /ALGOHOST_MAX_STREAMS_PER_USER/);
        assert.equal(over.res.headers.get('retry-after'), '5');
      }
      // Another user streams, writes and reads, and /health answers, while alice holds her cap.
      const bobs = await open('bob');
      held.push(bobs);
      assert.equal(bobs.status, 200);
      await othersUnaffected('bob');

      // Closing one of alice's frees its slot, once the server has seen it close.
      held.shift()!.close();
      let again: Stream | undefined;
      await until('a slot given back', async () => {
        const st = await open('alice');
        if (st.status === 200) again = st;
        else await st.res.body?.cancel();
        return again !== undefined;
      });
      held.push(again!);
      const over = await open('alice');
      assert.equal(over.status, 429, 'the freed slot was given twice');
      await over.res.body?.cancel();
    } finally {
      for (const st of held) st.close();
    }
    // Every slot is given back when its stream ends.
    await allGivenBack();
  });

  test(`a node holds at most ${PER_NODE} at once, every user's together; one more is 503 server_busy, and /health still answers`, async () => {
    const held: Stream[] = [];
    try {
      // On this process's node itself: the node-wide cap is each node's own.
      for (const [user, n] of [['alice', PER_USER], ['bob', PER_NODE - PER_USER]] as const) {
        for (let i = 0; i < n; i++) {
          const st = await open(user, s.node);
          held.push(st);
          assert.equal(st.status, 200, `${user}'s stream ${i + 1}: ${st.status}`);
        }
      }
      const over = await open('carol', s.node);
      assert.equal(over.status, 503);
      const body = await json(over.res);
      assert.equal(body.error.code, 'server_busy');
      assert.match(body.error.message, /ALGOHOST_MAX_STREAMS\)/);
      assert.ok(over.res.headers.get('retry-after'));
      await othersUnaffected('carol');
    } finally {
      for (const st of held) st.close();
    }
    await allGivenBack();
    // And with them closed, carol streams.
    const st = await open('carol', s.node);
    st.close();
    assert.equal(st.status, 200);
  });
});
