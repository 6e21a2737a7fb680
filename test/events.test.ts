/**
 * Events (issue 23; docs/events.md): the outbox written with each change to hosted data, and
 * the live stream of a user's events (`GET /v1/users/:user/events`, Server-Sent Events) with
 * its filters, Last-Event-ID resumption and retention; another user sees nothing of them. Runs
 * on every configuration: one node (SQLite), PostgreSQL + S3 (test:shared), the cluster.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { sweepEvents } from '../src/events/feed.ts';
import { callAlgo, compile, createAlgorithm, publish, upload } from './helpers/algorithms.ts';

let s: TestServer;
let alice: ReturnType<typeof api>;
let aliceKey: string;
let bob: ReturnType<typeof api>;
let bobKey: string;

before(async () => {
  s = await startServer();
  aliceKey = await s.user('alice');
  bobKey = await s.user('bob');
  alice = api(s.url, aliceKey);
  bob = api(s.url, bobKey);
});
after(() => s.close());

interface CloudEventJson {
  specversion: string;
  id: string;
  source: string;
  type: string;
  subject: string;
  time: string;
  datacontenttype: string;
  sequence: string;
  data: Record<string, unknown>;
}

/** A live stream read as an EventSource would: each message's id and its CloudEvent. */
async function stream(user: string, key: string, query = '', headers: Record<string, string> = {}) {
  const controller = new AbortController();
  const res = await fetch(`${s.url}/v1/users/${user}/events${query}`, { headers: { authorization: `Simple ${key}`, ...headers }, signal: controller.signal });
  const events: { id: string; event: CloudEventJson }[] = [];
  const comments: string[] = [];
  let done: Promise<void> = Promise.resolve();
  if (res.status === 200) {
    done = (async () => {
      const decoder = new TextDecoder();
      let text = '';
      try {
        for await (const chunk of res.body!) {
          text += decoder.decode(chunk as Uint8Array, { stream: true });
          let at: number;
          while ((at = text.indexOf('\n\n')) >= 0) {
            const block = text.slice(0, at);
            text = text.slice(at + 2);
            let id = '';
            let data = '';
            for (const line of block.split('\n')) {
              if (line.startsWith(':')) comments.push(line);
              else if (line.startsWith('id: ')) id = line.slice(4);
              else if (line.startsWith('data: ')) data += line.slice(6);
            }
            if (data) events.push({ id, event: JSON.parse(data) as CloudEventJson });
          }
        }
      } catch {
        // Aborted.
      }
    })();
  }
  return {
    res,
    events,
    comments,
    async until(n: number, ms = 10_000) {
      const end = Date.now() + ms;
      while (events.length < n && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
      return events;
    },
    async close() {
      controller.abort();
      await done;
    },
  };
}

const put = (call: ReturnType<typeof api>, path: string, body: string) => call(`/v1/data/${path}`, { method: 'PUT', body });
const mkdir = (call: ReturnType<typeof api>, parent: string, name: string) =>
  call(`/v1/data/${parent}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name }) });

describe('events of hosted data, live', () => {
  test('each change to hosted data is one CloudEvent on its owner\'s stream, in order, with what changed and who changed it', async () => {
    const st = await stream('alice', aliceKey);
    assert.equal(st.res.status, 200);
    assert.match(st.res.headers.get('content-type') ?? '', /^text\/event-stream/);
    assert.equal(st.res.headers.get('cache-control'), 'no-cache, no-transform');
    assert.equal(st.res.headers.get('x-accel-buffering'), 'no');
    try {
      assert.equal((await mkdir(alice, '.my', 'inbox')).status, 200);
      assert.equal((await put(alice, '.my/inbox/a.txt', 'hello')).status, 200);
      assert.equal((await put(alice, '.my/inbox/a.txt', 'hello again')).status, 200);
      assert.equal((await alice('/v1/data/.my/inbox/a.txt', { method: 'DELETE' })).status, 200);
      const got = await st.until(4);
      assert.deepEqual(
        got.map((e) => [e.event.type, e.event.subject]),
        [
          ['data.directory.created', 'data://alice/inbox'],
          ['data.file.created', 'data://alice/inbox/a.txt'],
          ['data.file.updated', 'data://alice/inbox/a.txt'],
          ['data.file.deleted', 'data://alice/inbox/a.txt'],
        ],
      );
      const created = got[1]!.event;
      assert.equal(created.specversion, '1.0');
      assert.equal(created.id, got[1]!.id, "the message's id is the event's");
      assert.match(created.id, /^evt_[0-9a-f]{24}$/);
      assert.equal(created.source, '/v1/users/alice');
      assert.equal(created.datacontenttype, 'application/json');
      assert.ok(Math.abs(Date.parse(created.time) - Date.now()) < 60_000, created.time);
      assert.deepEqual(Object.keys(created.data).sort(), ['by', 'content_type', 'etag', 'size']);
      assert.equal(created.data.size, 5);
      assert.equal(created.data.by, 'alice');
      assert.equal(created.data.content_type, 'text/plain; charset=utf-8');
      // The ETag the file is served with.
      assert.equal((await alice('/v1/data/.my/inbox/missing-now.txt', { method: 'HEAD' })).status, 404);
      assert.equal(got[2]!.event.data.size, 11);
      assert.notEqual(got[2]!.event.data.etag, created.data.etag);
      // The user's own sequence, consecutive, ordering as text as it does as a number.
      const seqs = got.map((e) => e.event.sequence);
      assert.ok(seqs.every((q) => /^\d{20}$/.test(q)), seqs.join());
      for (let i = 1; i < seqs.length; i++) assert.equal(Number(seqs[i]), Number(seqs[i - 1]) + 1);
      assert.equal(new Set(got.map((e) => e.id)).size, 4);
    } finally {
      await st.close();
    }
  });

  test('an upload\'s ETag in its event is the one the file is served with', async () => {
    const st = await stream('alice', aliceKey, '?types=data.file.created');
    try {
      await mkdir(alice, '.my', 'tags');
      await put(alice, '.my/tags/t.json', '{"a":1}');
      const [e] = await st.until(1);
      const head = await alice('/v1/data/.my/tags/t.json', { method: 'HEAD' });
      assert.equal(e!.event.data.etag, head.headers.get('etag'));
      assert.equal(e!.event.data.content_type, 'application/json');
    } finally {
      await st.close();
    }
  });

  test('filters: types (a * within a segment) and a path (** across segments); only what matches comes', async () => {
    const st = await stream('alice', aliceKey, `?types=${encodeURIComponent('data.file.*')}&path=${encodeURIComponent('data://.my/filtered/in/**')}`);
    try {
      await mkdir(alice, '.my', 'filtered');
      await mkdir(alice, '.my/filtered', 'in');
      await mkdir(alice, '.my/filtered/in', 'deep');
      await put(alice, '.my/filtered/out.txt', 'no');
      await put(alice, '.my/filtered/in/deep/yes.txt', 'yes');
      await put(alice, '.my/filtered/in/yes2.txt', 'yes');
      const got = await st.until(2);
      await new Promise((r) => setTimeout(r, 300));
      assert.deepEqual(
        st.events.map((e) => e.event.subject),
        ['data://alice/filtered/in/deep/yes.txt', 'data://alice/filtered/in/yes2.txt'],
      );
      assert.equal(got.length, 2);
    } finally {
      await st.close();
    }
  });

  test('a recursive delete tells of every file and directory it removed', async () => {
    await mkdir(alice, '.my', 'tree');
    await mkdir(alice, '.my/tree', 'sub');
    await put(alice, '.my/tree/sub/1.txt', '1');
    await put(alice, '.my/tree/2.txt', '2');
    const st = await stream('alice', aliceKey, `?path=${encodeURIComponent('data://alice/tree/**')}`);
    try {
      assert.equal((await alice('/v1/data/.my/tree?force=true', { method: 'DELETE' })).status, 200);
      const got = await st.until(4);
      assert.deepEqual(
        got.map((e) => `${e.event.type} ${e.event.subject}`).sort(),
        ['data.directory.deleted data://alice/tree', 'data.directory.deleted data://alice/tree/sub', 'data.file.deleted data://alice/tree/2.txt', 'data.file.deleted data://alice/tree/sub/1.txt'],
      );
      // Files first, then the directories, deepest first.
      assert.equal(got.at(-1)!.event.subject, 'data://alice/tree');
    } finally {
      await st.close();
    }
  });

  test('Last-Event-ID resumes after that event: what was missed, in order, once, then live', async () => {
    const first = await stream('alice', aliceKey);
    await mkdir(alice, '.my', 'resume');
    const [seen] = await first.until(1);
    await first.close();
    for (const n of [1, 2, 3]) await put(alice, `.my/resume/${n}.txt`, String(n));
    const again = await stream('alice', aliceKey, '', { 'last-event-id': seen!.id });
    try {
      const got = await again.until(3);
      assert.deepEqual(
        got.map((e) => e.event.subject),
        ['data://alice/resume/1.txt', 'data://alice/resume/2.txt', 'data://alice/resume/3.txt'],
      );
      await put(alice, '.my/resume/4.txt', '4');
      await again.until(4);
      await new Promise((r) => setTimeout(r, 300));
      assert.deepEqual(
        again.events.map((e) => e.event.subject),
        ['data://alice/resume/1.txt', 'data://alice/resume/2.txt', 'data://alice/resume/3.txt', 'data://alice/resume/4.txt'],
      );
      assert.equal(Number(again.events[0]!.event.sequence), Number(seen!.event.sequence) + 1);
    } finally {
      await again.close();
    }
    // The same through the query string, for clients that cannot set the header.
    const byQuery = await stream('alice', aliceKey, `?last_event_id=${seen!.id}`);
    try {
      assert.equal((await byQuery.until(4)).length, 4);
    } finally {
      await byQuery.close();
    }
  });

  test('a change made as soon as the stream has answered is on it (from now on starts before the answer)', async () => {
    await mkdir(alice, '.my', 'inbox');
    for (let i = 0; i < 8; i++) {
      const st = await stream('alice', aliceKey, '?types=data.file.created&path=data://.my/inbox/at-once-*');
      try {
        assert.equal((await put(alice, `.my/inbox/at-once-${i}`, 'x')).status, 200);
        const got = await st.until(1, 10_000);
        assert.equal(got[0]?.event.subject, `data://alice/inbox/at-once-${i}`, `round ${i}`);
      } finally {
        await st.close();
      }
    }
  });

  test('a quiet stream gets a keep-alive comment every 15 s, so that proxies do not close it', async () => {
    // A user no other test writes for: nothing but comments comes.
    const key = await s.user('quiet');
    const st = await stream('quiet', key);
    try {
      assert.equal(st.res.status, 200);
      const end = Date.now() + 30_000;
      while (!st.comments.includes(': keep-alive') && Date.now() < end) await new Promise((r) => setTimeout(r, 100));
      assert.ok(st.comments.includes(': keep-alive'), `comments within 30 s: ${JSON.stringify(st.comments)}`);
      assert.equal(st.events.length, 0);
    } finally {
      await st.close();
    }
  });

  test('a resume point not kept (expired, or never one of yours) answers 410 event_expired; a malformed one 400', async () => {
    const gone = await stream('alice', aliceKey, '', { 'last-event-id': 'evt_000000000000000000000000' });
    assert.equal(gone.res.status, 410);
    const body = await json(gone.res);
    assert.equal(body.error.code, 'event_expired');
    assert.match(body.error.message, /ALGOHOST_EVENT_RETENTION_H/);
    const bad = await stream('alice', aliceKey, '', { 'last-event-id': 'not an id' });
    assert.equal(bad.res.status, 400);
    assert.equal((await json(bad.res)).error.code, 'invalid_query');
    // Events past the retention window are removed; resuming after one of them is refused.
    const st = await stream('alice', aliceKey);
    await mkdir(alice, '.my', 'expiring');
    const [old] = await st.until(1);
    await st.close();
    assert.ok((await sweepEvents(s.services.store, Date.now() + 1000)) >= 1);
    const late = await stream('alice', aliceKey, '', { 'last-event-id': old!.id });
    assert.equal(late.res.status, 410);
    await late.res.body?.cancel();
  });
});

describe('events of algorithms and async calls', () => {
  test('a build that succeeds or fails, a version published, and an async call ended each tell their user; a caller hears of their own call only', async () => {
    const owner = await stream('alice', aliceKey, `?types=${encodeURIComponent('algorithm.**')}`);
    const caller = await stream('bob', bobKey, '?types=call.completed');
    try {
      await createAlgorithm(alice, 'alice', 'Evented', { language: 'javascript', algorithm_callability: 'public' });
      assert.equal((await upload(alice, 'alice', 'Evented', { 'src/index.js': "exports.apply = (x) => x === 'big' ? 'x'.repeat(70000) : x === 'fail' ? (() => { throw new Error('asked to') })() : 'hi ' + x;\n" })).status, 200);
      const hash = await compile(alice, 'alice', 'Evented');
      const version = await publish(alice, 'alice', 'Evented', { version_type: 'minor' });
      // A source that cannot build: its package.json is not JSON.
      assert.equal((await upload(alice, 'alice', 'Evented', { 'src/index.js': 'exports.apply = () => 1;\n', 'package.json': '{ not json' })).status, 200);
      const failed = await alice('/v1/algorithms/alice/Evented/compile', { method: 'POST' });
      assert.equal((await json(failed)).compilation?.successful, false);
      const got = await owner.until(3, 60_000);
      assert.deepEqual(
        got.map((e) => e.event.type),
        ['algorithm.build.succeeded', 'algorithm.version.published', 'algorithm.build.failed'],
      );
      assert.equal(got[0]!.event.subject, `algo://alice/Evented/${hash}`);
      assert.deepEqual({ ...got[0]!.event.data, duration_ms: 0 }, { algorithm: 'alice/Evented', build: hash, language: 'javascript', duration_ms: 0 });
      assert.equal(got[1]!.event.subject, `algo://alice/Evented/${version}`);
      assert.equal(got[1]!.event.data.build, hash);
      assert.equal(got[1]!.event.data.by, 'alice');
      assert.equal(got[2]!.event.data.algorithm, 'alice/Evented');

      // bob calls alice's algorithm without waiting: the events are his, not alice's.
      const ids: string[] = [];
      for (const input of ['bob', 'fail', 'big']) {
        const r = await json(await callAlgo(bob, `alice/Evented/${version}`, JSON.stringify(input), 'application/json', '?output=void'));
        ids.push(r.request_id as string);
      }
      const calls = await caller.until(3, 60_000);
      const byId = new Map(calls.map((e) => [e.event.data.request_id as string, e.event]));
      const [ok, bad, big] = ids.map((id) => byId.get(id)!) as [CloudEventJson, CloudEventJson, CloudEventJson];
      assert.equal(ok.subject, `algo://alice/Evented/${version}`);
      assert.equal(ok.source, '/v1/users/bob');
      assert.equal(ok.data.status, 'succeeded');
      assert.equal(ok.data.http_status, 200);
      assert.equal((ok.data.envelope as { result: string }).result, 'hi bob');
      assert.equal(typeof ok.data.duration_ms, 'number');
      assert.equal(bad.data.status, 'failed');
      assert.match((bad.data.envelope as { error: { message: string } }).error.message, /asked to/);
      // Past 64 KiB, the envelope is where GET /v1/requests/:id has it.
      assert.equal(big.data.envelope, undefined);
      assert.equal(big.data.envelope_url, `/v1/requests/${ids[2]}`);
      assert.equal((await bob(big.data.envelope_url as string)).status, 200);
      await new Promise((r) => setTimeout(r, 300));
      assert.ok(!owner.events.some((e) => e.event.type === 'call.completed'), "alice heard of bob's calls");
    } finally {
      await owner.close();
      await caller.close();
    }
  });
});

describe('a build its server died running', () => {
  test('is failed by the next sweep, and its owner told, in the same transaction', async () => {
    await createAlgorithm(alice, 'alice', 'Orphan', { language: 'javascript' });
    const algo = await s.services.store.db.selectFrom('algorithms').select('id').where('name', '=', 'Orphan').executeTakeFirstOrThrow();
    const hash = 'f'.repeat(40);
    await s.services.store.db
      .insertInto('builds')
      .values({ algorithm_id: algo.id, hash, status: 'building', language: 'javascript', runner: null, entry: null, logs: '', started_at: Date.now() - 5000, finished_at: null, holder: 'a-server-long-gone' })
      .execute();
    const st = await stream('alice', aliceKey, '?types=algorithm.build.failed');
    try {
      await s.services.builds.failInterrupted();
      const [e] = await st.until(1);
      assert.equal(e!.event.subject, `algo://alice/Orphan/${hash}`);
      assert.ok((e!.event.data.duration_ms as number) >= 5000);
      const row = await s.services.store.db.selectFrom('builds').select('status').where('hash', '=', hash).executeTakeFirstOrThrow();
      assert.equal(row.status, 'failed');
    } finally {
      await st.close();
    }
  });
});

describe('events are their user\'s alone', () => {
  test("another user's stream, and a key that may not manage, are refused; bob's stream hears nothing of alice's changes", async () => {
    const other = await stream('alice', bobKey);
    assert.equal(other.res.status, 403);
    assert.equal((await json(other.res)).error.code, 'forbidden');
    const nobody = await stream('nobody-at-all', bobKey);
    assert.equal(nobody.res.status, 403);
    await nobody.res.body?.cancel();
    // A key without allow_algo_management.
    const created = await json(await alice('/v1/users/alice/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'reader', permissions: { allow_algo_management: false } }) }));
    const limited = await stream('alice', created.api_key ?? created.key);
    assert.equal(limited.res.status, 403);
    assert.equal((await json(limited.res)).error.code, 'key_permission_denied');

    const bobs = await stream('bob', bobKey);
    try {
      await mkdir(alice, '.my', 'private');
      await put(alice, '.my/private/secret.txt', 'secret');
      await mkdir(bob, '.my', 'bobs');
      const got = await bobs.until(1);
      await new Promise((r) => setTimeout(r, 300));
      assert.deepEqual(
        bobs.events.map((e) => e.event.subject),
        ['data://bob/bobs'],
      );
      assert.equal(got[0]!.event.source, '/v1/users/bob');
      // A path filter naming another user's data is refused, not silently empty.
      const theirs = await stream('bob', bobKey, `?path=${encodeURIComponent('data://alice/**')}`);
      assert.equal(theirs.res.status, 400);
      assert.match((await json(theirs.res)).error.message, /your own data/);
    } finally {
      await bobs.close();
    }
  });

  test('bad filters are refused with what is wrong', async () => {
    for (const [query, pattern] of [
      ['?types=no.such.type', /matches no event type/],
      ['?types=DATA', /not an event type/],
      ['?path=nonsense', /not a data URI pattern/],
    ] as const) {
      const st = await stream('alice', aliceKey, query);
      assert.equal(st.res.status, 400, query);
      assert.match((await json(st.res)).error.message, pattern);
    }
  });
});

describe('the outbox', () => {
  test('a change that fails writes no event; every change that stands wrote exactly one', async () => {
    const count = async () => Number((await s.services.store.db.selectFrom('events').innerJoin('users', 'users.id', 'events.user_id').select((eb) => eb.fn.countAll().as('n')).where('users.username', '=', 'alice').executeTakeFirst())?.n ?? 0);
    await mkdir(alice, '.my', 'outbox');
    const before = await count();
    // A file where a directory is: refused inside the transaction that would write its event.
    await mkdir(alice, '.my/outbox', 'd');
    const conflict = await put(alice, '.my/outbox/d', 'x');
    assert.equal(conflict.status, 409);
    const again = await mkdir(alice, '.my/outbox', 'd');
    assert.equal(again.status, 409);
    assert.equal(await count(), before + 1, 'only the directory that was made has an event');
  });
});
