/**
 * A version's README (GET /v1/algorithms/:owner/:name/versions/:ref/readme): kept with the
 * build when it is made, shown to whoever may see the version, cut at 256 KiB.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { json, startServer, type TestServer } from './helpers/server.ts';
import { release } from './helpers/algorithms.ts';
import { AlgohostClient } from '../client/src/index.ts';

const JS = { 'src/index.js': "export const input_types = ['text'];\nexport function apply(input) { return input; }\n", 'package.json': '{"name":"a","version":"1.0.0"}' };

let s: TestServer;
let as: (key: string) => (p: string, init?: RequestInit) => Promise<Response>;
let alice: ReturnType<typeof as>;
let bob: ReturnType<typeof as>;
let bobKey: string;

before(async () => {
  s = await startServer();
  as = (key) => (p, init = {}) => {
    const headers = new Headers(init.headers);
    headers.set('authorization', `Simple ${key}`);
    return fetch(s.url + p, { ...init, headers });
  };
  alice = as(await s.user('alice'));
  bobKey = await s.user('bob');
  bob = as(bobKey);
});
after(() => s.close());

test('the README of the published source, for anyone who may see the version', async () => {
  const readme = '# Doc\n\nIt <b>echoes</b>.\n';
  const { version } = await release(alice, 'alice', 'Doc', { ...JS, 'ReadMe.md': readme }, { settings: { language: 'javascript' } });
  for (const who of [alice, bob]) {
    const r = await who(`/v1/algorithms/alice/Doc/versions/${version}/readme`);
    assert.equal(r.status, 200);
    assert.deepEqual(await json(r), { version, readme });
  }
  // The client reads it too, and the usage report of the calls (none yet: a report all the same).
  const client = new AlgohostClient({ baseUrl: s.url, apiKey: bobKey, env: {} });
  assert.equal(await client.algo('alice/Doc').readme(version), readme);
  const usage = await client.usage('bob', { from: '2026-01-01', to: '2026-01-31' });
  assert.deepEqual(usage, await json(await bob('/v1/users/bob/usage?from=2026-01-01&to=2026-01-31')));
  assert.equal(usage.from, '2026-01-01');
  // Another source, another README; the first version keeps its own.
  const again = await release(alice, 'alice', 'Doc', { ...JS, 'README.md': 'second', 'src/index.js': JS['src/index.js'] + '//2\n' }, { create: false });
  assert.equal((await json(await bob(`/v1/algorithms/alice/Doc/versions/${again.version}/readme`))).readme, 'second');
  assert.equal((await json(await bob(`/v1/algorithms/alice/Doc/versions/${version}/readme`))).readme, readme);
});

test('no README is null; a private version is not found for others; a long one is cut', async () => {
  const { version } = await release(alice, 'alice', 'Bare', JS, { settings: { language: 'javascript' } });
  assert.equal((await json(await bob(`/v1/algorithms/alice/Bare/versions/${version}/readme`))).readme, null);

  const priv = await release(alice, 'alice', 'Hidden', { ...JS, 'README.md': 'secret plans' }, { settings: { language: 'javascript' }, publishSettings: { algorithm_callability: 'private' } });
  const refused = await bob(`/v1/algorithms/alice/Hidden/versions/${priv.version}/readme`);
  assert.equal(refused.status, 404);
  assert.doesNotMatch(await refused.text(), /secret plans/);
  assert.equal((await json(await alice(`/v1/algorithms/alice/Hidden/versions/${priv.version}/readme`))).readme, 'secret plans');

  // Windows' "Unicode" (UTF-16 with its mark) is read as text; a binary file is no README. Both
  // used to be stored as they came, which PostgreSQL refuses (a NUL in TEXT): the build failed.
  const utf16 = Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from('# Wide\n\nÜnïcode', 'utf16le')]);
  const wide = await release(alice, 'alice', 'Wide', { ...JS, 'README.md': utf16 }, { settings: { language: 'javascript' } });
  assert.equal((await json(await bob(`/v1/algorithms/alice/Wide/versions/${wide.version}/readme`))).readme, '# Wide\n\nÜnïcode');
  const bin = await release(alice, 'alice', 'Bin', { ...JS, 'README.md': Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 0, 1]) }, { settings: { language: 'javascript' } });
  assert.equal((await json(await bob(`/v1/algorithms/alice/Bin/versions/${bin.version}/readme`))).readme, null);

  const long = 'x'.repeat(300 * 1024);
  const big = await release(alice, 'alice', 'Long', { ...JS, 'README.md': long }, { settings: { language: 'javascript' } });
  const text = (await json(await alice(`/v1/algorithms/alice/Long/versions/${big.version}/readme`))).readme as string;
  assert.ok(text.startsWith('x'.repeat(256 * 1024)));
  assert.match(text, /cut here: it is longer than 256 KiB/);
  assert.ok(text.length < 256 * 1024 + 200);
});
