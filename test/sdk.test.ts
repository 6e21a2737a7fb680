/**
 * The in-algorithm SDK: algorithms reading and writing data and calling other algorithms, as
 * their caller, through the control channel, with the data ACL rules of docs/data.md.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { callAlgo, release } from './helpers/algorithms.ts';
import { ByteBudget, InternalRequests, MAX_SDK_BODY } from '../src/algorithms/hostRequests.ts';
import { FULL_PERMISSIONS } from '../src/auth/permissions.ts';

let s: TestServer;
let alice: ReturnType<typeof api>;
let bob: ReturnType<typeof api>;
let carol: ReturnType<typeof api>;

const js = { language: 'javascript' };

/** Reads the data URI it is given, as text. */
const READER = `export async function apply(uri, ctx) { return await ctx.client.file(uri).getString(); }\n`;

before(async () => {
  s = await startServer();
  alice = api(s.url, await s.user('alice'));
  bob = api(s.url, await s.user('bob'));
  carol = api(s.url, await s.user('carol'));
  const mk = async (who: typeof alice, name: string, acl?: string[]) => {
    const r = await who('/v1/data/.my', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name, ...(acl ? { acl: { read: acl } } : {}) }) });
    assert.equal(r.status, 200, await r.text());
  };
  await mk(alice, 'private', []);
  await mk(alice, 'algos', ['algo://.my/*']);
  await mk(alice, 'open', ['user://*']);
  for (const c of ['private', 'algos', 'open']) {
    const r = await alice(`/v1/data/.my/${c}/note.txt`, { method: 'PUT', body: `alice ${c}` });
    assert.equal(r.status, 200);
  }
  await release(alice, 'alice', 'Reader', { 'src/index.js': READER }, { settings: js });
  await release(carol, 'carol', 'Reader', { 'src/index.js': READER }, { settings: js });
  await release(
    alice,
    'alice',
    'Writer',
    {
      'src/index.js': `export async function apply(input, ctx) {
  const c = ctx.client;
  const dir = c.dir('data://.my/written');
  if (!(await dir.exists())) await dir.create();
  await c.file('data://.my/written/out.json').put({ got: input });
  await c.file('data://.my/written/raw.bin').put(Buffer.from([1, 2, 3]));
  const names = [];
  for await (const e of dir.list()) names.push(e.type + ':' + e.name);
  const back = await c.file('data://.my/written/out.json').getJson();
  const bytes = await c.file('data://.my/written/raw.bin').get();
  const exists = [await c.file('data://.my/written/raw.bin').exists(), await c.file('data://.my/written/none').exists()];
  await c.file('data://.my/written/raw.bin').delete();
  return { names: names.sort(), back, bytes: [...bytes], exists, after: await c.file('data://.my/written/raw.bin').exists() };
}
`,
    },
    { settings: js },
  );
  await release(alice, 'alice', 'Twice', { 'src/index.js': "export const apply = (n) => n * 2;\n" }, { settings: js });
  await release(
    alice,
    'alice',
    'Pipeline',
    {
      'src/index.js': `export async function apply(input, ctx) {
  const r = await ctx.client.algo(input.ref).pipe(input.value, input.options);
  return { result: r.result, content_type: r.metadata.content_type };
}
`,
    },
    { settings: js },
  );
  await release(
    alice,
    'alice',
    'Recurse',
    {
      'src/index.js': `export async function apply(n, ctx) {
  try {
    return await globalThis.algohost.client().algo('alice/Recurse').pipe(n + 1).then((r) => r.result);
  } catch (e) {
    return { depth: n, error: e.message, code: e.code };
  }
}
`,
    },
    { settings: js },
  );
  await release(alice, 'alice', 'Sleepy', { 'src/index.js': 'export const apply = (ms) => new Promise((r) => setTimeout(() => r(`slept ${ms}`), ms));\n' }, { settings: js });
  await release(
    alice,
    'alice',
    'Lonely',
    { 'src/index.js': "export async function apply(x, ctx) { try { await ctx.client.algo('alice/Twice').pipe(1); return 'called'; } catch (e) { return e.message; } }\n" },
    { settings: { ...js, pipeline_enabled: false } },
  );
});
after(() => s.close());

const result = async (r: Response) => {
  const body = await json(r);
  assert.equal(r.status, 200, JSON.stringify(body));
  return body.result ?? { error: body.error };
};

describe('data from inside an algorithm', () => {
  test('.my is the caller: files land in the caller\'s space, every operation works', async () => {
    const out = await result(await callAlgo(bob, 'alice/Writer', '{"x":1}', 'application/json'));
    assert.deepEqual(out, { names: ['file:out.json', 'file:raw.bin'], back: { got: { x: 1 } }, bytes: [1, 2, 3], exists: [true, false], after: false });
    // In bob's space, not alice's.
    assert.deepEqual(await json(await bob('/v1/data/.my/written/out.json')), { got: { x: 1 } });
    assert.equal((await alice('/v1/data/.my/written/out.json')).status, 404);
  });

  test('a private collection is readable by algorithms its owner calls, and nobody else\'s', async () => {
    assert.equal(await result(await callAlgo(alice, 'alice/Reader', 'data://alice/private/note.txt')), 'alice private');
    const viaBob = await result(await callAlgo(bob, 'alice/Reader', 'data://alice/private/note.txt'));
    assert.match(viaBob.error.message, /does not exist/);
  });

  test('algo://.my/* collections: readable by the owner\'s algorithms whoever calls, not by the caller directly or others\' algorithms', async () => {
    assert.equal(await result(await callAlgo(bob, 'alice/Reader', 'data://alice/algos/note.txt')), 'alice algos');
    assert.equal((await bob('/v1/data/alice/algos/note.txt')).status, 404);
    const viaCarol = await result(await callAlgo(bob, 'carol/Reader', 'data://alice/algos/note.txt'));
    assert.match(viaCarol.error.message, /does not exist/);
    assert.equal(await result(await callAlgo(bob, 'carol/Reader', 'data://alice/open/note.txt')), 'alice open');
  });

  test('the caller key\'s permissions apply: a key without allow_data cannot read through an algorithm', async () => {
    const r = await bob('/v1/users/bob/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'nodata', permissions: { allow_data: false, allow_data_write: false } }) });
    const noData = api(s.url, (await json(r)).api_key);
    const out = await result(await callAlgo(noData, 'alice/Reader', 'data://alice/open/note.txt'));
    assert.match(out.error.message, /allow_data/);
  });
});

describe('calling algorithms from algorithms', () => {
  test('a nested call: text, JSON and binary results come back decoded', async () => {
    let out = await result(await callAlgo(bob, 'alice/Pipeline', JSON.stringify({ ref: 'alice/Twice/0.1.x', value: 21 }), 'application/json'));
    assert.deepEqual(out, { result: 42, content_type: 'json' });
    out = await result(await callAlgo(bob, 'alice/Pipeline', JSON.stringify({ ref: 'algo://alice/Reader', value: 'data://alice/open/note.txt' }), 'application/json'));
    assert.deepEqual(out, { result: 'alice open', content_type: 'text' });
  });

  test('a nested error surfaces as an exception in the caller', async () => {
    const out = await result(await callAlgo(bob, 'alice/Pipeline', JSON.stringify({ ref: 'alice/Missing', value: 1 }), 'application/json'));
    assert.equal(out.error.message, 'algorithm algo://alice/Missing not found');
  });

  test('nesting is limited in depth', async () => {
    const out = await result(await callAlgo(bob, 'alice/Recurse', '1', 'application/json'));
    assert.equal(out.depth, 5, JSON.stringify(out));
    assert.equal(out.code, 'call_depth_exceeded');
    assert.match(out.error, /at most 5 deep/);
  });

  test('a nested call gets at most what is left of its parent\'s time', async () => {
    const started = Date.now();
    const body = await json(await callAlgo(bob, 'alice/Pipeline', JSON.stringify({ ref: 'alice/Sleepy', value: 10_000, options: { timeout: 60 } }), 'application/json', '?timeout=1.5'));
    const took = Date.now() - started;
    // The child times out within the parent's 1.5 s, and the parent sees that as an error.
    assert.ok(took < 8_000, `took ${took} ms`);
    const message = body.result?.error ?? body.error?.message;
    assert.match(String(message ?? JSON.stringify(body)), /timed out/);
  });

  test('pipeline_enabled off: the algorithm may not call others', async () => {
    assert.match(await result(await callAlgo(bob, 'alice/Lonely', 'x')), /pipeline_enabled setting is off/);
  });
});

describe('what the SDK holds in the server', () => {
  test('a file over 64 MiB is refused before it is read', async () => {
    assert.equal((await alice('/v1/data/.my/open/big.bin', { method: 'PUT', body: Buffer.alloc(MAX_SDK_BODY + 1) })).status, 200);
    const out = await result(await callAlgo(bob, 'alice/Reader', 'data://alice/open/big.bin'));
    assert.match(out.error.message, /reads at most 67108864 bytes/);
  });

  test('a call has at most 8 requests in flight; more at once are refused, and it may go on after', async () => {
    await release(
      alice,
      'alice',
      'Burst',
      {
        'src/index.js': `export async function apply(n, ctx) {
  const c = ctx.client;
  const all = await Promise.allSettled(Array.from({ length: n }, () => c.algo('alice/Sleepy').pipe(200)));
  const errors = [...new Set(all.filter((r) => r.status === 'rejected').map((r) => r.reason.message))];
  return { ok: all.filter((r) => r.status === 'fulfilled').length, errors, again: await c.file('data://.my/none').exists() };
}
`,
      },
      { settings: js },
    );
    // Sent in one burst, the requests reach the server while the first ones still sleep: the
    // first 8 are served, the rest refused at once.
    const out = await result(await callAlgo(bob, 'alice/Burst', '20', 'application/json'));
    assert.equal(out.ok, 8, JSON.stringify(out));
    assert.equal(out.errors.length, 1, JSON.stringify(out));
    assert.match(out.errors[0], /at most 8 requests at once/);
    assert.equal(out.again, false);
  });

  test('the byte budget: first come first served, waits end at the deadline, gives back what it took', async () => {
    const b = new ByteBudget(100);
    assert.equal(await b.take(60, Date.now() + 1000), true);
    const order: string[] = [];
    const second = b.take(50, Date.now() + 5000).then((ok) => order.push(`second ${ok}`));
    const third = b.take(10, Date.now() + 5000).then((ok) => order.push(`third ${ok}`));
    assert.equal(await b.take(90, Date.now() + 50), false, 'no room within 50 ms');
    b.give(60);
    await Promise.all([second, third]);
    // The small request did not overtake the one that waited first.
    assert.deepEqual(order, ['second true', 'third true']);
    b.give(50);
    b.give(10);
    assert.equal(await b.take(100, Date.now()), true, 'everything was given back');
  });
});

describe('what the SDK may reach', () => {
  test('dot segments cannot climb out of calls and data into key or algorithm management', async () => {
    await release(
      alice,
      'alice',
      'Climber',
      {
        'src/index.js': `export async function apply(user, ctx) {
  const tries = [
    () => ctx.client.algo('../users/' + user + '/keys').pipe({ name: 'pwned' }),
    () => ctx.client.algo('%2e%2e/users/' + user + '/keys').pipe({ name: 'pwned' }),
    () => ctx.client.file('data://x/../../../users/' + user + '/keys').getString(),
    () => ctx.client.file('data://x/%2E%2E/%2e%2e/%2e./algorithms/' + user).getString(),
    () => ctx.client.file('data://x/..%2F..%2Fusers/' + user + '/keys').getString(),
  ];
  const out = [];
  for (const t of tries) {
    try { out.push('allowed: ' + String(await t()).slice(0, 80)); } catch (e) { out.push(e.message); }
  }
  return out;
}
`,
      },
      { settings: js },
    );
    const keysBefore = (await json(await bob('/v1/users/bob/keys'))).results.length;
    const out = (await json(await callAlgo(bob, 'alice/Climber', '"bob"', 'application/json'))).result as string[];
    assert.equal(out.length, 5);
    // Refused, either by the SDK gate or (for what the SDK percent-encodes itself) as a path
    // that names no algorithm or file.
    for (const line of out) assert.doesNotMatch(line, /^allowed/, line);
    assert.match(out[0]!, /is not available to algorithms/);
    assert.match(out[2]!, /is not available to algorithms/);
    assert.equal((await json(await bob('/v1/users/bob/keys'))).results.length, keysBefore, 'no key was made');
  });

  test('only calls and data, never management; an outside request cannot pose as an algorithm', async () => {
    const internal = new InternalRequests();
    const seen: string[] = [];
    internal.gateway = async (_id, r) => {
      seen.push(`${r.method} ${r.url} ${JSON.stringify(r.headers)}`);
      return { status: 200, headers: {}, body: Buffer.alloc(0) };
    };
    const handler = internal.handler({ principal: { userId: 1, username: 'x', keyId: 'k', permissions: { ...FULL_PERMISSIONS } }, depth: 1, deadline: Date.now() + 1000, pipelineEnabled: true });
    for (const url of ['/v1/users/x/keys', '/v1/algorithms/x', '/health', 'v1/data/x', '/v1/datax']) {
      const r = await handler({ method: 'GET', url }, Buffer.alloc(0));
      assert.equal(r.header.status, 400, url);
    }
    assert.equal((await handler({ method: 'TRACE', url: '/v1/data/.my' }, Buffer.alloc(0))).header.status, 400);
    const ok = await handler({ method: 'GET', url: '/v1/data/.my/c', headers: { accept: 'application/json', authorization: 'Simple stolen', 'x-algohost-internal': 'forged' } }, Buffer.alloc(0));
    assert.equal(ok.header.status, 200);
    // Only the allowed headers pass; the identity comes from the server, not the algorithm. A
    // read is sized (HEAD) before it is made.
    assert.deepEqual(seen, ['HEAD /v1/data/.my/c {"accept":"application/json"}', 'GET /v1/data/.my/c {"accept":"application/json"}']);

    const forged = await fetch(`${s.url}/v1/data/.my`, { headers: { 'x-algohost-internal': 'guess' } });
    assert.equal(forged.status, 401);
  });
});

describe('the Python SDK', () => {
  before(async () => {
    await release(
      alice,
      'alice',
      'PyWriter',
      {
        'src/PyWriter.py': `import Algorithmia
import algohost

client = Algorithmia.client()


def apply(input):
    d = client.dir('data://.my/py')
    if not d.exists():
        d.create()
    client.file('data://.my/py/in.json').putJson(input)
    client.file('data://.my/py/raw.bin').put(bytes([0, 1, 255]))
    print('wrote two files')
    names = sorted(e.path.rsplit('/', 1)[1] for e in d.list())
    nested = client.algo('alice/Twice/0.1.x').pipe(input['n']).result
    try:
        client.algo('alice/Missing').pipe(1)
        missing = None
    except algohost.AlgohostError as e:
        missing = e.message
    try:
        client.file('data://alice/private/note.txt').getString()
        private = 'readable'
    except algohost.AlgohostError as e:
        private = e.status
    return {
        'names': names,
        'json': client.file('data://.my/py/in.json').getJson(),
        'bytes': list(client.file('data://.my/py/raw.bin').getBytes()),
        'exists': [client.file('data://.my/py/raw.bin').exists(), client.file('data://.my/py/nope').exists()],
        'nested': nested,
        'missing': missing,
        'private': private,
    }
`,
      },
      { settings: { language: 'python3' } },
    );
  });

  test('data, nested calls and errors from Python, as the caller', async () => {
    const r = await callAlgo(bob, 'alice/PyWriter', '{"n": 4}', 'application/json');
    const body = await json(r);
    assert.deepEqual(body.result, {
      names: ['in.json', 'raw.bin'],
      json: { n: 4 },
      bytes: [0, 1, 255],
      exists: [true, false],
      nested: 8,
      missing: 'algorithm algo://alice/Missing not found',
      private: 404,
    }, JSON.stringify(body));
    assert.deepEqual(await json(await bob('/v1/data/.my/py/in.json')), { n: 4 });
    // Called by its owner, the private collection is readable.
    const mine = await json(await callAlgo(alice, 'alice/PyWriter', '{"n": 1}', 'application/json', '?stdout=true'));
    assert.equal(mine.result.private, 'readable');
    assert.equal(mine.metadata.stdout, 'wrote two files\n');
  });
});
