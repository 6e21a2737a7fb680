/**
 * `Idempotency-Key` (issue 23; docs/events.md#idempotency-key) on async calls and uploads,
 * against a real server on every configuration (one node, PostgreSQL + S3, the cluster through
 * its balancer, where a retry often lands on the other API node): a retry gets the first
 * answer (`Idempotent-Replayed: true`) and nothing runs or is stored twice; another request
 * under the same key is 422, one sent while the first is under way 409, a malformed key 400;
 * keys are per user, expire after 24 h, and one held by a dead process is free again.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import algorithmia from 'algorithmia';
import { api, json, startServer, tempHome, type TestServer } from './helpers/server.ts';
import { release } from './helpers/algorithms.ts';
import { connectAccount } from './helpers/connectors.ts';
import { S3RVER_KEY, startS3, type S3Server } from './helpers/s3.ts';
import { runCli, startServerProcess, WAIT_MS } from './helpers/process.ts';
import { backendEnv } from './helpers/backends.ts';
import { KEEP_MS, sweepIdempotencyKeys } from '../src/http/idempotency.ts';
import { openMetadataStore } from '../src/store/backends.ts';
import { loadConfig } from '../src/config.ts';

let s: TestServer;
let s3: S3Server;
let alice: ReturnType<typeof api>;
let aliceKey: string;
let bob: ReturnType<typeof api>;
let aliceId: number;

/** Leaves a marker file per run (data://.my/marks/<tag>-...), so a test counts the runs; sleeps if asked. */
const MARK = `
export async function apply(input, ctx) {
  await ctx.client.file('data://.my/marks/' + input.tag + '-' + Date.now() + '-' + Math.random().toString(36).slice(2)).put('ran');
  if (input.sleep) await new Promise((r) => setTimeout(r, input.sleep));
  return input.tag;
}
`;

const newKey = () => crypto.randomUUID();

before(async () => {
  s3 = await startS3(['bkt']);
  s = await startServer({ env: { ALGOHOST_CONNECTOR_NETWORK: 'any' } });
  aliceKey = await s.user('alice');
  alice = api(s.url, aliceKey);
  bob = api(s.url, await s.user('bob'));
  aliceId = (await s.services.store.db.selectFrom('users').select('id').where('username', '=', 'alice').executeTakeFirstOrThrow()).id;
  for (const [who, name] of [
    [alice, 'marks'],
    [alice, 'inbox'],
    [bob, 'marks'],
    [bob, 'inbox'],
  ] as const) {
    const r = await who('/v1/data/.my', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name }) });
    assert.equal(r.status, 200, await r.text());
  }
  await release(alice, 'alice', 'Mark', { 'src/index.js': MARK }, { settings: { language: 'javascript' } });
  const creds = { endpoint: s3.endpoint, ...S3RVER_KEY, force_path_style: true };
  await connectAccount(s, 'alice', aliceKey, { label: 'store', protocol: 'objstore', writeable: true, cred_data: creds });
  // Nothing listens there: every write to it fails with a 5xx.
  const closed = net.createServer();
  await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
  const closedPort = (closed.address() as net.AddressInfo).port;
  await new Promise((r) => closed.close(r));
  await connectAccount(s, 'alice', aliceKey, { label: 'dead', protocol: 'objstore', writeable: true, cred_data: { ...creds, endpoint: `http://127.0.0.1:${closedPort}` } });
});
after(async () => {
  await s?.close();
  await s3?.stop();
});

/** An async call of alice/Mark with `key` (none when undefined). */
function markCall(who: typeof alice, input: Record<string, unknown>, key: string | undefined, query = '?output=void', ref = 'alice/Mark'): Promise<Response> {
  return who(`/v1/algo/${ref}${query}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { 'idempotency-key': key }) },
    body: JSON.stringify(input),
  });
}

function put(who: typeof alice, path: string, body: string, key?: string): Promise<Response> {
  return who(path, { method: 'PUT', body, headers: key === undefined ? {} : { 'idempotency-key': key } });
}

async function accepted(r: Response): Promise<string> {
  const text = await r.text();
  assert.equal(r.status, 200, text);
  const body = JSON.parse(text) as { async: boolean; request_id: string };
  assert.equal(body.async, true);
  assert.match(body.request_id, /^req-[0-9a-f]{24}$/);
  return body.request_id;
}

async function errorCode(r: Response, status: number, code: string): Promise<string> {
  const body = await json(r);
  assert.equal(r.status, status, JSON.stringify(body));
  assert.equal(body.error.code, code, JSON.stringify(body));
  return body.error.message as string;
}

/** Polls GET /v1/requests/:id until it is done (bounded). */
async function done(id: string): Promise<{ response: { result: unknown } }> {
  const until = Date.now() + WAIT_MS;
  for (;;) {
    const body = await json(await alice(`/v1/requests/${id}`));
    if (body.status === 'done') return body;
    assert.ok(Date.now() < until, `request ${id} still ${body.status}`);
    await new Promise((res) => setTimeout(res, 50));
  }
}

/** How many runs of alice/Mark left a marker with `tag`. */
async function runs(tag: string): Promise<number> {
  const page = await json(await alice('/v1/data/.my/marks'));
  return ((page.files ?? []) as { filename: string }[]).filter((f) => f.filename.startsWith(`${tag}-`)).length;
}

/** Waits a little past a run's end, then counts: a second run would have left its marker by now. */
async function settledRuns(tag: string): Promise<number> {
  await new Promise((r) => setTimeout(r, 500));
  return runs(tag);
}

async function keyRow(userId: number, key: string) {
  return s.services.store.db.selectFrom('idempotency_keys').selectAll().where('user_id', '=', userId).where('key', '=', key).executeTakeFirst();
}

async function eventsAbout(subject: string): Promise<string[]> {
  const rows = await s.services.store.db.selectFrom('events').select('type').where('subject', '=', subject).orderBy('id').execute();
  return rows.map((r) => r.type);
}

describe('async calls', () => {
  test('a retry gets the same request_id, marked replayed, and the algorithm runs once', async () => {
    const key = newKey();
    const first = await markCall(alice, { tag: 'retry' }, key);
    assert.equal(first.headers.get('idempotent-replayed'), null);
    const id = await accepted(first);
    const again = await markCall(alice, { tag: 'retry' }, key);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.equal(await accepted(again), id);
    assert.equal((await done(id)).response.result, 'retry');
    // Once the call has run, a retry still gets the same answer.
    const late = await markCall(alice, { tag: 'retry' }, key);
    assert.equal(late.headers.get('idempotent-replayed'), 'true');
    assert.equal(await accepted(late), id);
    assert.equal(await settledRuns('retry'), 1);
    const rows = await s.services.store.db.selectFrom('async_requests').select('id').where('user_id', '=', aliceId).where('id', '=', id).execute();
    assert.equal(rows.length, 1);
  });

  test('concurrent duplicates: each gets the one request_id or 409 idempotency_key_in_use, and one request runs', async () => {
    const key = newKey();
    const answers = await Promise.all(Array.from({ length: 8 }, () => markCall(alice, { tag: 'burst' }, key)));
    const ids = new Set<string>();
    for (const r of answers) {
      if (r.status === 409) await errorCode(r, 409, 'idempotency_key_in_use');
      else ids.add(await accepted(r));
    }
    assert.equal(ids.size, 1, `request ids: ${[...ids].join(', ')}`);
    await done([...ids][0]!);
    assert.equal(await settledRuns('burst'), 1);
  });

  test('the same key for another request is 422 idempotency_key_reused, and nothing runs', async () => {
    const key = newKey();
    const id = await accepted(await markCall(alice, { tag: 'first' }, key));
    // Another body, another query, another input type, another algorithm.
    await errorCode(await markCall(alice, { tag: 'other' }, key), 422, 'idempotency_key_reused');
    await errorCode(await markCall(alice, { tag: 'first' }, key, '?output=void&timeout=10'), 422, 'idempotency_key_reused');
    const asText = await alice('/v1/algo/alice/Mark?output=void', { method: 'POST', headers: { 'content-type': 'text/plain', 'idempotency-key': key }, body: JSON.stringify({ tag: 'first' }) });
    await errorCode(asText, 422, 'idempotency_key_reused');
    await errorCode(await markCall(alice, { tag: 'first' }, key, '?output=void', 'alice/Other'), 422, 'idempotency_key_reused');
    await done(id);
    assert.equal(await settledRuns('other'), 0);
    assert.equal(await runs('first'), 1);
  });

  test("a request's own 4xx is replayed; a refusal of the key's permissions (401) frees the key", async () => {
    const key = newKey();
    const bad = await markCall(alice, { tag: 'v' }, key, '?output=void', 'alice/Mark/banana');
    const message = await errorCode(bad, 400, 'invalid_version');
    const again = await markCall(alice, { tag: 'v' }, key, '?output=void', 'alice/Mark/banana');
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.equal(again.headers.get('x-error-message'), message);
    assert.equal(await errorCode(again, 400, 'invalid_version'), message);

    const made = await json(await alice('/v1/users/alice/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'nocall', permissions: { allow_algo: false } }) }));
    const weak = api(s.url, made.api_key as string);
    const other = newKey();
    await errorCode(await markCall(weak, { tag: 'perm' }, other), 401, 'algo_not_allowed');
    assert.equal(await keyRow(aliceId, other), undefined);
    // The same key, with a key that may call: it runs.
    const id = await accepted(await markCall(alice, { tag: 'perm' }, other));
    await done(id);
    assert.equal(await settledRuns('perm'), 1);
  });

  test("another user's same key is their own", async () => {
    const key = newKey();
    const mine = await accepted(await markCall(alice, { tag: 'users' }, key));
    // bob calls the same algorithm with the same key and body: his call is his own.
    const theirs = await markCall(bob, { tag: 'users' }, key);
    assert.equal(theirs.headers.get('idempotent-replayed'), null);
    const bobs = await accepted(theirs);
    assert.notEqual(bobs, mine);
    // And a body bob's key never saw under alice's key is no reuse for him.
    await accepted(await markCall(bob, { tag: 'users-2' }, newKey()));
    await done(mine);
  });

  test('a key held by a dead process is free again; one held by a live process is 409', async () => {
    const dead = newKey();
    const now = Date.now();
    await s.services.store.db
      .insertInto('idempotency_keys')
      .values({ user_id: aliceId, key: dead, fingerprint: 'pending POST /elsewhere', status: 'running', holder: 'a-process-long-gone#idem-1', response_status: null, response: null, created_at: now })
      .execute();
    const id = await accepted(await markCall(alice, { tag: 'orphan' }, dead));
    await done(id);
    assert.equal(await settledRuns('orphan'), 1);
    assert.equal((await keyRow(aliceId, dead))?.status, 'done');

    const live = newKey();
    await s.services.store.db
      .insertInto('idempotency_keys')
      .values({ user_id: aliceId, key: live, fingerprint: `pending POST /v1/algo/alice/Mark?output=void (json)`, status: 'running', holder: `${s.services.store.instance}#idem-test`, response_status: null, response: null, created_at: now })
      .execute();
    await errorCode(await markCall(alice, { tag: 'held' }, live), 409, 'idempotency_key_in_use');
    assert.equal(await settledRuns('held'), 0);
  });

  test('a request accepted by a process that died before queueing it runs when its key is replayed', async () => {
    // What a crash between the accepting transaction and the queue leaves: the request and the
    // key's answer, the request queued nowhere, its holder dead.
    const key = newKey();
    const id = `req-${crypto.randomBytes(12).toString('hex')}`;
    const body = JSON.stringify({ async: true, request_id: id });
    const input = Buffer.from(JSON.stringify({ tag: 'stranded' }));
    const { keyId } = await s.services.keys.authenticate(`Simple ${aliceKey}`);
    await s.services.store.write(async (trx) => {
      await trx
        .insertInto('async_requests')
        .values({ id, user_id: aliceId, key_id: keyId, owner: 'alice', name: 'Mark', version: null, content_type: 'json', input, timeout_s: 60, stdout: 0, status: 'queued', attempts: 0, holder: 'a-process-long-gone', response_status: null, response: null, created_at: Date.now(), started_at: null, finished_at: null })
        .execute();
      const digest = `sha-256=:${crypto.createHash('sha256').update(input).digest('base64')}:`;
      await trx
        .insertInto('idempotency_keys')
        .values({ user_id: aliceId, key, fingerprint: `${digest} POST /v1/algo/alice/Mark?output=void (json)`, status: 'done', holder: 'a-process-long-gone#idem-2', response_status: 200, response: body, created_at: Date.now() })
        .execute();
    });
    const r = await markCall(alice, { tag: 'stranded' }, key);
    assert.equal(r.headers.get('idempotent-replayed'), 'true');
    assert.equal(await accepted(r), id);
    assert.equal((await done(id)).response.result, 'stranded');
    assert.equal(await settledRuns('stranded'), 1);
  });

  test('the official npm client algorithmia@0.3.10 retries through its request function with the header', async () => {
    // Its algo().pipe() sends no headers of the caller's; client.req, which pipe() uses, does.
    const client = algorithmia.client(aliceKey, s.url) as algorithmia.Client & {
      req(path: string, method: string, data: string, headers: Record<string, string>, cb: (body: unknown, status: number) => void): void;
    };
    const key = newKey();
    const send = () =>
      new Promise<{ body: { async?: boolean; request_id?: string }; status: number }>((resolve) =>
        client.req('/v1/algo/alice/Mark?output=void', 'POST', JSON.stringify({ tag: 'npm' }), { 'Content-Type': 'application/json', 'Idempotency-Key': key }, (body, status) =>
          resolve({ body: body as { request_id?: string }, status }),
        ),
      );
    const first = await send();
    const second = await send();
    assert.equal(first.status, 200, JSON.stringify(first.body));
    assert.equal(second.status, 200);
    assert.equal(first.body.async, true);
    assert.equal(second.body.request_id, first.body.request_id);
    await done(first.body.request_id!);
    assert.equal(await settledRuns('npm'), 1);
  });
});

describe('uploads', () => {
  test('a retried upload is stored once: one data.file.created, the same ETag, the answer replayed', async () => {
    const key = newKey();
    const first = await put(alice, '/v1/data/.my/inbox/once.txt', 'hello', key);
    assert.equal(first.status, 200);
    assert.equal(first.headers.get('idempotent-replayed'), null);
    const answer = await first.text();
    assert.deepEqual(JSON.parse(answer), { result: 'data://alice/inbox/once.txt' });
    const etag = (await alice('/v1/data/.my/inbox/once.txt', { method: 'HEAD' })).headers.get('etag');
    const again = await put(alice, '/v1/data/.my/inbox/once.txt', 'hello', key);
    assert.equal(again.status, 200);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.equal(await again.text(), answer);
    assert.equal((await alice('/v1/data/.my/inbox/once.txt', { method: 'HEAD' })).headers.get('etag'), etag);
    assert.deepEqual(await eventsAbout('data://alice/inbox/once.txt'), ['data.file.created']);
    // Without a key, the same upload is a new write.
    assert.equal((await put(alice, '/v1/data/.my/inbox/once.txt', 'hello')).status, 200);
    assert.deepEqual(await eventsAbout('data://alice/inbox/once.txt'), ['data.file.created', 'data.file.updated']);
  });

  test('another body or another path under the same key is 422, and the file is left as it was', async () => {
    const key = newKey();
    assert.equal((await put(alice, '/v1/data/.my/inbox/body.txt', 'first', key)).status, 200);
    await errorCode(await put(alice, '/v1/data/.my/inbox/body.txt', 'second', key), 422, 'idempotency_key_reused');
    await errorCode(await put(alice, '/v1/data/.my/inbox/elsewhere.txt', 'first', key), 422, 'idempotency_key_reused');
    assert.equal(await (await alice('/v1/data/.my/inbox/body.txt')).text(), 'first');
    assert.equal((await alice('/v1/data/.my/inbox/elsewhere.txt')).status, 404);
    assert.deepEqual(await eventsAbout('data://alice/inbox/body.txt'), ['data.file.created']);
  });

  test('a retry while the first upload still streams is 409; once it is stored, the retry gets its answer', async () => {
    const key = newKey();
    let feed!: ReadableStreamDefaultController<Uint8Array>;
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        feed = c;
        c.enqueue(new TextEncoder().encode('slow '));
      },
    });
    const slow = alice('/v1/data/.my/inbox/slow.txt', { method: 'PUT', body, headers: { 'idempotency-key': key }, duplex: 'half' } as RequestInit);
    const until = Date.now() + WAIT_MS;
    while ((await keyRow(aliceId, key))?.status !== 'running') {
      assert.ok(Date.now() < until, 'the first upload never claimed its key');
      await new Promise((r) => setTimeout(r, 20));
    }
    await errorCode(await put(alice, '/v1/data/.my/inbox/slow.txt', 'slow upload', key), 409, 'idempotency_key_in_use');
    feed.enqueue(new TextEncoder().encode('upload'));
    feed.close();
    const first = await slow;
    assert.equal(first.status, 200, await first.clone().text());
    const retry = await put(alice, '/v1/data/.my/inbox/slow.txt', 'slow upload', key);
    assert.equal(retry.headers.get('idempotent-replayed'), 'true');
    assert.equal(await retry.text(), await first.text());
    assert.equal(await (await alice('/v1/data/.my/inbox/slow.txt')).text(), 'slow upload');
    assert.deepEqual(await eventsAbout('data://alice/inbox/slow.txt'), ['data.file.created']);
  });

  test('a malformed key is 400 invalid_idempotency_key and nothing is stored; a quoted key is the bare one', async () => {
    for (const bad of ['', 'x'.repeat(256), 'caf\u00e9', 'tab\there']) {
      await errorCode(await put(alice, '/v1/data/.my/inbox/malformed.txt', 'x', bad), 400, 'invalid_idempotency_key');
      await errorCode(await markCall(alice, { tag: 'malformed' }, bad), 400, 'invalid_idempotency_key');
    }
    assert.equal((await alice('/v1/data/.my/inbox/malformed.txt')).status, 404);
    assert.equal(await settledRuns('malformed'), 0);
    // 255 characters, and the Structured Field form of the draft, are fine.
    assert.equal((await put(alice, '/v1/data/.my/inbox/long.txt', 'x', 'k'.repeat(255))).status, 200);
    assert.equal((await put(alice, '/v1/data/.my/inbox/quoted.txt', 'q', '"quoted-key"')).status, 200);
    const bare = await put(alice, '/v1/data/.my/inbox/quoted.txt', 'q', 'quoted-key');
    assert.equal(bare.headers.get('idempotent-replayed'), 'true');
  });

  test("another user's same key is their own", async () => {
    const key = newKey();
    assert.equal((await put(alice, '/v1/data/.my/inbox/shared-key.txt', 'alice', key)).status, 200);
    const theirs = await put(bob, '/v1/data/.my/inbox/shared-key.txt', 'bob', key);
    assert.equal(theirs.status, 200);
    assert.equal(theirs.headers.get('idempotent-replayed'), null);
    assert.deepEqual(await json(theirs), { result: 'data://bob/inbox/shared-key.txt' });
    assert.equal(await (await bob('/v1/data/.my/inbox/shared-key.txt')).text(), 'bob');
  });

  test('an upload refused before its body was all in (the directory is missing) frees the key', async () => {
    const key = newKey();
    // 4 MiB: refused at once, long before the body could all be hashed.
    await errorCode(await put(alice, '/v1/data/.my/nowhere/a.txt', 'x'.repeat(4 << 20), key), 404, 'not_found');
    assert.equal(await keyRow(aliceId, key), undefined);
  });

  test('a key held by a dead process is free again', async () => {
    const key = newKey();
    await s.services.store.db
      .insertInto('idempotency_keys')
      .values({ user_id: aliceId, key, fingerprint: 'pending PUT /v1/data/.my/inbox/dead.txt', status: 'running', holder: 'a-process-long-gone#idem-3', response_status: null, response: null, created_at: Date.now() })
      .execute();
    const r = await put(alice, '/v1/data/.my/inbox/dead.txt', 'taken over', key);
    assert.equal(r.status, 200, await r.clone().text());
    assert.equal(r.headers.get('idempotent-replayed'), null);
    assert.equal((await keyRow(aliceId, key))?.status, 'done');
  });

  test('uploads to connected storage: replayed once stored; a 5xx (provider unreachable) frees the key', async () => {
    const key = newKey();
    const first = await put(alice, '/v1/connector/objstore+store/bkt/idem.txt', 'to s3', key);
    assert.equal(first.status, 200, await first.clone().text());
    const again = await put(alice, '/v1/connector/objstore+store/bkt/idem.txt', 'to s3', key);
    assert.equal(again.headers.get('idempotent-replayed'), 'true');
    assert.equal(await again.text(), await first.text());
    await errorCode(await put(alice, '/v1/connector/objstore+store/bkt/idem.txt', 'other', key), 422, 'idempotency_key_reused');

    const failing = newKey();
    const down = await put(alice, '/v1/connector/objstore+dead/bkt/idem.txt', 'nowhere', failing);
    assert.ok(down.status >= 500, `status ${down.status}`);
    assert.equal(await keyRow(aliceId, failing), undefined);
    const retried = await put(alice, '/v1/connector/objstore+dead/bkt/idem.txt', 'nowhere', failing);
    assert.ok(retried.status >= 500);
    assert.equal(retried.headers.get('idempotent-replayed'), null);
  });
});

describe('expiry', () => {
  test('an answer older than 24 h is not replayed: the retry runs again', async () => {
    const key = newKey();
    const id = await accepted(await markCall(alice, { tag: 'expired' }, key));
    await done(id);
    // The clock moved on by a day: the key's row says when it answered.
    await s.services.store.db.updateTable('idempotency_keys').set({ created_at: Date.now() - KEEP_MS - 1000 }).where('user_id', '=', aliceId).where('key', '=', key).execute();
    const later = await markCall(alice, { tag: 'expired' }, key);
    assert.equal(later.headers.get('idempotent-replayed'), null);
    const second = await accepted(later);
    assert.notEqual(second, id);
    await done(second);
    assert.equal(await settledRuns('expired'), 2);
  });

  test('the sweep removes keys past 24 h, and running ones only once their holder is dead', async () => {
    const now = Date.now();
    const fresh = newKey();
    assert.equal((await put(alice, '/v1/data/.my/inbox/sweep.txt', 'x', fresh)).status, 200);
    const liveHeld = newKey();
    const deadHeld = newKey();
    const old = now - KEEP_MS - 1;
    await s.services.store.db
      .insertInto('idempotency_keys')
      .values([
        { user_id: aliceId, key: liveHeld, fingerprint: 'pending PUT /x', status: 'running', holder: `${s.services.store.instance}#idem-live`, response_status: null, response: null, created_at: old },
        { user_id: aliceId, key: deadHeld, fingerprint: 'pending PUT /y', status: 'running', holder: 'a-process-long-gone#idem-4', response_status: null, response: null, created_at: old },
      ])
      .execute();
    await sweepIdempotencyKeys(s.services.store, now);
    assert.ok(await keyRow(aliceId, fresh), 'a key of today was swept');
    assert.ok(await keyRow(aliceId, liveHeld), 'a live process\'s key was swept');
    assert.equal(await keyRow(aliceId, deadHeld), undefined);
    // A day later, today's key goes too.
    assert.ok((await sweepIdempotencyKeys(s.services.store, now + KEEP_MS + 1000)) >= 1);
    assert.equal(await keyRow(aliceId, fresh), undefined);
    await s.services.store.db.deleteFrom('idempotency_keys').where('key', '=', liveHeld).execute();
  });
});

describe('a server killed mid-upload', () => {
  test('leaves the key free: the retry after the restart stores the file, once', async () => {
    const home = tempHome('algohost-idem-');
    let server = await startServerProcess({ home });
    // The server's store, read beside it (as the admin CLI would): when the first upload has claimed its key.
    const store = await openMetadataStore(loadConfig({ home, port: '0', demo: false }, await backendEnv(home)), { migrate: false });
    try {
      const created = await runCli(['user', 'create', 'carol'], home, WAIT_MS);
      assert.equal(created.code, 0, created.stderr);
      const carolKey = (JSON.parse(created.stdout) as { api_key: string }).api_key;
      let carol = api(server.url, carolKey);
      assert.equal((await carol('/v1/data/.my', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'inbox' })).status, 200);
      const key = newKey();
      const body = new ReadableStream<Uint8Array>({
        start(c) {
          c.enqueue(new TextEncoder().encode('half of '));
        },
      });
      const doomed = carol('/v1/data/.my/inbox/k.txt', { method: 'PUT', body, headers: { 'idempotency-key': key }, duplex: 'half' } as RequestInit).catch(() => undefined);
      const until = Date.now() + WAIT_MS;
      while ((await store.db.selectFrom('idempotency_keys').select('status').where('key', '=', key).executeTakeFirst())?.status !== 'running') {
        assert.ok(Date.now() < until, 'the first upload never claimed its key');
        await new Promise((r) => setTimeout(r, 20));
      }
      await errorCode(await put(carol, '/v1/data/.my/inbox/k.txt', 'half of it', key), 409, 'idempotency_key_in_use');
      await server.kill('SIGKILL');
      await doomed;
      server = await startServerProcess({ home });
      carol = api(server.url, carolKey);
      const retry = await put(carol, '/v1/data/.my/inbox/k.txt', 'half of it', key);
      assert.equal(retry.status, 200, await retry.clone().text());
      assert.equal(retry.headers.get('idempotent-replayed'), null);
      assert.equal(await (await carol('/v1/data/.my/inbox/k.txt')).text(), 'half of it');
      const replay = await put(carol, '/v1/data/.my/inbox/k.txt', 'half of it', key);
      assert.equal(replay.headers.get('idempotent-replayed'), 'true');
      const events = await store.db.selectFrom('events').select('type').where('subject', '=', 'data://carol/inbox/k.txt').execute();
      assert.deepEqual(events.map((e) => e.type), ['data.file.created']);
    } finally {
      await server.kill();
      await store.close();
      fs.rmSync(home, { recursive: true, force: true });
    }
  });
});
