/**
 * What one user can hold (issue 36; docs/security.md "What one user can hold"): a user at a cap
 * is refused in our envelope with a code naming it, while another user's requests and /health
 * answer as before. Runs on every configuration: one node (SQLite), PostgreSQL + S3, and the
 * cluster, where a user's streams are counted on both API nodes together (the balancer hands
 * connections to each in turn, so a cap counted per node would let an eleventh stream in).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { SharedLimitStore } from '../src/limits/shared.ts';
import type { HeldSlots } from '../src/limits/held.ts';
import { createAlgorithm } from './helpers/algorithms.ts';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { tempHome } from './helpers/server.ts';

const GIT = fs.existsSync('/usr/lib/git-core/git-http-backend');

/** `git ARGS` in `cwd`, with a clean environment (no prompts, no user configuration). */
function git(args: string[], cwd: string): Promise<{ code: number; out: string }> {
  const env = { PATH: '/usr/bin:/bin', HOME: cwd, GIT_TERMINAL_PROMPT: '0', GIT_CONFIG_NOSYSTEM: '1', GIT_AUTHOR_NAME: 'Alice', GIT_AUTHOR_EMAIL: 'alice@example.com', GIT_COMMITTER_NAME: 'Alice', GIT_COMMITTER_EMAIL: 'alice@example.com' };
  return new Promise((resolve) => {
    execFile('/usr/bin/git', args, { cwd, env, timeout: 120_000 }, (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, out: `${stdout}${stderr}` }));
  });
}

/** The default per-user cap (ALGOHOST_MAX_STREAMS_PER_USER), tested as shipped. */
const PER_USER = 10;
/** A small node-wide cap (ALGOHOST_MAX_STREAMS), so that two users can fill it. */
const PER_NODE = 12;

let s: TestServer;
const keys: Record<string, string> = {};

before(async () => {
  s = await startServer({
    env: {
      ALGOHOST_MAX_STREAMS: String(PER_NODE),
      // 20 rather than the default 100, to hold them all quickly.
      ALGOHOST_MAX_UPLOADS_PER_USER: '20',
      // Counts of stored things, small so that the test reaches them quickly.
      ALGOHOST_MAX_KEYS_PER_USER: '3',
      ALGOHOST_MAX_CONNECTORS_PER_USER: '2',
      ALGOHOST_MAX_SUBSCRIPTIONS_PER_USER: '2',
      ALGOHOST_MAX_SESSIONS_PER_USER: '2',
      ALGOHOST_MAX_PENDING_DELIVERIES: '2',
      // Subscriptions to a loopback address that never answers (nothing here makes dave an event).
      ALGOHOST_CONNECTOR_NETWORK: 'any',
    },
  });
  for (const name of ['alice', 'bob', 'carol', 'dave', 'erin']) {
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

/** This process's slots of each kind (on SQLite the only count there is). */
const LOCAL: Record<string, () => HeldSlots | undefined> = {
  streams: () => s.services.users.streams,
  uploads: () => s.services.data.uploads,
  builds: () => s.services.builds.held,
  git: () => s.services.git.held,
};

/** What a user holds of a kind now: on PostgreSQL every node's, in the database; else this node's. */
async function holding(kind: string, user: string): Promise<number> {
  const { id } = await s.services.users.require(user);
  if (s.services.store.dialect === 'postgres') return new SharedLimitStore(s.services.store).inFlight(`${kind}:u${id}`);
  return LOCAL[kind]!()!.open(id);
}

/** A request body that sends one byte and then waits until `end` (or the request is aborted). */
function slowBody(): { body: ReadableStream<Uint8Array>; end(): void } {
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      controller = c;
      c.enqueue(new Uint8Array([0x78]));
    },
  });
  return { body, end: () => controller.close() };
}

/** A 429 in our envelope with `code`, naming its cap and setting. */
async function refused(res: Response, code: string, limit: number, setting: string): Promise<void> {
  const body = await json(res);
  assert.equal(res.status, 429, JSON.stringify(body));
  assert.equal(body.error.code, code);
  assert.equal(body.error.limit, limit);
  assert.ok(body.error.message.includes(setting), body.error.message);
  assert.equal(res.headers.get('retry-after'), '5');
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

describe('uploads in flight', () => {
  test('a user has at most 20 at once; one more is refused 429 too_many_uploads before its body, and others go on', async () => {
    const call = api(s.url, keys.alice);
    const slow = Array.from({ length: 20 }, () => slowBody());
    const answers = slow.map((b, i) =>
      call(`/v1/data/.my/caps/slow-${i}.bin`, { method: 'PUT', body: b.body, duplex: 'half' } as RequestInit),
    );
    try {
      await until('twenty uploads under way', async () => (await holding('uploads', 'alice')) === 20);
      await refused(await call('/v1/data/.my/caps/one-more.bin', { method: 'PUT', body: 'one more' }), 'too_many_uploads', 20, 'ALGOHOST_MAX_UPLOADS_PER_USER');
      await othersUnaffected('bob');
    } finally {
      for (const b of slow) b.end();
    }
    // The held uploads finish as any would, and give their slots back.
    for (const r of await Promise.all(answers)) assert.equal(r.status, 200, await r.text());
    await until('every upload given back', async () => (await holding('uploads', 'alice')) === 0);
    const after = await call('/v1/data/.my/caps/one-more.bin', { method: 'PUT', body: 'one more' });
    assert.equal(after.status, 200, await after.text());
  });
});

describe('compiles', () => {
  test('a user has at most 5 running or waiting; one more is refused 429 too_many_builds, and others go on', async () => {
    // Compiles sent to this process's node, where the algorithm's lock is held, wait behind it.
    const call = api(s.node, keys.alice);
    await createAlgorithm(call, 'alice', 'Held');
    const { id } = await s.services.store.db.selectFrom('algorithms').select('id').where('name', '=', 'Held').executeTakeFirstOrThrow();
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    let locked!: () => void;
    const isLocked = new Promise<void>((resolve) => (locked = resolve));
    const holder = s.services.builds.lock.run(id, () => {
      locked();
      return gate;
    });
    await isLocked;
    let waiting: Promise<Response>[] = [];
    try {
      waiting = Array.from({ length: 5 }, () => call('/v1/algorithms/alice/Held/compile', { method: 'POST' }));
      await until('five compiles waiting', async () => (await holding('builds', 'alice')) === 5);
      await refused(await call('/v1/algorithms/alice/Held/compile', { method: 'POST' }), 'too_many_builds', 5, 'ALGOHOST_MAX_BUILDS_PER_USER');
      if (GIT) {
        // A push at the cap is refused before its source is stored: the algorithm keeps the one it had.
        await createAlgorithm(call, 'alice', 'Pushed', { language: 'python3' });
        const sourceOf = async () => (await s.services.store.db.selectFrom('algorithms').select('source_hash').where('name', '=', 'Pushed').executeTakeFirstOrThrow()).source_hash;
        const before = await sourceOf();
        const work = tempHome('algohost-caps-git-');
        try {
          const u = new URL(s.node);
          const cloned = await git(['clone', `http://alice:${keys.alice}@${u.host}/git/alice/Pushed.git`, 'pushed'], work);
          assert.equal(cloned.code, 0, cloned.out);
          const dir = path.join(work, 'pushed');
          fs.writeFileSync(path.join(dir, 'src', 'Pushed.py'), 'def apply(input):\n    return input\n');
          assert.equal((await git(['commit', '-qam', 'change'], dir)).code, 0);
          const pushed = await git(['push', 'origin', 'master'], dir);
          assert.notEqual(pushed.code, 0, pushed.out);
          assert.match(pushed.out, /as many as one user may \(ALGOHOST_MAX_BUILDS_PER_USER\)/);
          assert.equal(await sourceOf(), before, 'the refused push stored its source');
        } finally {
          fs.rmSync(work, { recursive: true, force: true });
        }
      }
      await othersUnaffected('bob');
    } finally {
      open();
      await holder;
    }
    for (const r of await Promise.all(waiting)) {
      const body = await json(r);
      assert.equal(r.status, 200, JSON.stringify(body));
    }
    await until('every compile given back', async () => (await holding('builds', 'alice')) === 0);
  });
});

describe('git requests', () => {
  test('a user has at most 5 under way; one more is refused 429 too_many_git_requests, and others go on', { skip: !fs.existsSync('/usr/lib/git-core/git-http-backend') && 'git is not installed' }, async () => {
    // Each node keeps its own repositories (docs/deployment.md): this process's node.
    const auth = `Basic ${Buffer.from(`alice:${keys.alice}`).toString('base64')}`;
    await createAlgorithm(api(s.node, keys.alice), 'alice', 'Gitted');
    const repo = `${s.node}/git/alice/Gitted.git`;
    // Fetches whose request has not ended: each holds a git process until it does.
    const slow = Array.from({ length: 5 }, () => slowBody());
    const pending = slow.map((b) =>
      fetch(`${repo}/git-upload-pack`, { method: 'POST', headers: { authorization: auth, 'content-type': 'application/x-git-upload-pack-request' }, body: b.body, duplex: 'half' } as RequestInit).then((r) => r.arrayBuffer()),
    );
    try {
      await until('five git requests under way', async () => (await holding('git', 'alice')) === 5);
      const over = await fetch(`${repo}/info/refs?service=git-upload-pack`, { headers: { authorization: auth } });
      await refused(over, 'too_many_git_requests', 5, 'ALGOHOST_MAX_GIT_REQUESTS_PER_USER');
      await othersUnaffected('bob');
    } finally {
      for (const b of slow) b.end();
    }
    // Git answers what it was sent (one byte: not a request it takes) and ends.
    await Promise.all(pending);
    await until('every git request given back', async () => (await holding('git', 'alice')) === 0);
    const refs = await fetch(`${repo}/info/refs?service=git-upload-pack`, { headers: { authorization: auth } });
    assert.equal(refs.status, 200);
    await refs.arrayBuffer();
  });
});

describe('counts of stored things', () => {
  const post = (path: string, body: unknown) =>
    api(s.url, keys.dave)(`/v1/users/dave/${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

  /** Creates until the cap, then one more: 409 with the code, naming the setting; another user creates as before. */
  async function capped(path: string, cap: number, code: string, setting: string, body: (i: number) => unknown, had = 0): Promise<void> {
    for (let i = 0; i < cap; i++) {
      const r = await post(path, body(i));
      assert.equal(r.status, 201, `${path} ${i + 1}: ${await r.text()}`);
    }
    const over = await post(path, body(cap));
    const e = await json(over);
    assert.equal(over.status, 409, JSON.stringify(e));
    assert.equal(e.error.code, code);
    assert.equal(e.error.limit, cap + had);
    assert.ok(e.error.message.includes(setting), e.error.message);
    const other = await api(s.url, keys.carol)(`/v1/users/carol/${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body(0)) });
    assert.equal(other.status, 201, await other.text());
    await othersUnaffected('carol');
  }

  test('API keys: at most ALGOHOST_MAX_KEYS_PER_USER not revoked (the default key counts); one revoked frees a place', async () => {
    // dave has his default key: two more reach 3.
    await capped('keys', 2, 'too_many_keys', 'ALGOHOST_MAX_KEYS_PER_USER', (i) => ({ name: `k${i}` }), 1);
    const list = await json(await api(s.url, keys.dave)('/v1/users/dave/keys'));
    const k0 = (list.results ?? list).find((k: { name: string }) => k.name === 'k0');
    const del = await api(s.url, keys.dave)(`/v1/users/dave/keys/${k0.id}`, { method: 'DELETE' });
    assert.equal(del.status, 204);
    const again = await post('keys', { name: 'k9' });
    assert.equal(again.status, 201, await again.text());
  });

  test('connected accounts: at most ALGOHOST_MAX_CONNECTORS_PER_USER', async () => {
    await capped('connectors', 2, 'too_many_connectors', 'ALGOHOST_MAX_CONNECTORS_PER_USER', (i) => ({
      label: `box${i}`,
      protocol: 'objstore',
      cred_data: { endpoint: 'http://127.0.0.1:9', region: 'us-east-1', access_key_id: 'AKIAEXAMPLE', secret_access_key: 'not-a-secret-at-all-0000', force_path_style: true },
    }));
  });

  test('webhook subscriptions: at most ALGOHOST_MAX_SUBSCRIPTIONS_PER_USER', async () => {
    await capped('subscriptions', 2, 'too_many_subscriptions', 'ALGOHOST_MAX_SUBSCRIPTIONS_PER_USER', (i) => ({ url: `http://127.0.0.1:9/hook-${i}`, types: ['call.completed'] }));
  });

  test('console sessions: a sign-in past ALGOHOST_MAX_SESSIONS_PER_USER ends the oldest, never refused', async () => {
    await s.services.sessions.setPassword('dave', 'dave password 1');
    const signIn = async () => {
      const r = await fetch(`${s.url}/v1/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'dave', password: 'dave password 1' }) });
      const body = await json(r);
      assert.equal(r.status, 200, JSON.stringify(body));
      return r.headers.get('set-cookie')!.split(';')[0]!;
    };
    const alive = async (cookie: string) => {
      const r = await fetch(`${s.url}/v1/session`, { headers: { cookie } });
      await r.arrayBuffer();
      return r.status === 200;
    };
    const first = await signIn();
    const second = await signIn();
    const third = await signIn();
    assert.deepEqual([await alive(first), await alive(second), await alive(third)], [false, true, true]);
    const { id } = await s.services.users.require('dave');
    const n = await s.services.store.db.selectFrom('sessions').select((eb) => eb.fn.countAll().as('n')).where('user_id', '=', id).executeTakeFirst();
    assert.equal(Number(n?.n), 2);
  });
});

describe('webhook deliveries pending', () => {
  test('a subscription holds at most ALGOHOST_MAX_PENDING_DELIVERIES; events past it are counted as overflowed, not queued', async () => {
    const call = api(s.url, keys.erin);
    // Nothing listens there: each delivery fails and waits for its retry, pending.
    const sub = await call('/v1/users/erin/subscriptions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ url: 'http://127.0.0.1:9/hook', types: ['data.file.*'] }) });
    const created = await json(sub);
    assert.equal(sub.status, 201, JSON.stringify(created));
    const id = created.id as string;
    for (let i = 0; i < 4; i++) {
      const put = await call(`/v1/data/.my/caps/event-${i}.txt`, { method: 'PUT', body: `event ${i}` });
      assert.equal(put.status, 200, await put.text());
    }
    let seen: { overflowed: number } | undefined;
    await until('two events counted as overflowed', async () => {
      seen = await json(await call(`/v1/users/erin/subscriptions/${id}`));
      return seen!.overflowed >= 2;
    });
    assert.equal(seen!.overflowed, 2);
    const deliveries = await json(await call(`/v1/users/erin/subscriptions/${id}/deliveries`));
    assert.equal((deliveries.results as unknown[]).length, 2, JSON.stringify(deliveries));
    await othersUnaffected('bob');
    const del = await call(`/v1/users/erin/subscriptions/${id}`, { method: 'DELETE' });
    assert.equal(del.status, 204);
  });
});
