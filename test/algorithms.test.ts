import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { compile, publish, upload } from './helpers/algorithms.ts';

let s: TestServer;
let alice: ReturnType<typeof api>;
let bob: ReturnType<typeof api>;

const send = (call: ReturnType<typeof api>, method: string, path: string, body?: unknown) =>
  call(path, { method, body: body === undefined ? undefined : JSON.stringify(body), headers: body === undefined ? {} : { 'content-type': 'application/json' } });

before(async () => {
  s = await startServer();
  alice = api(s.url, await s.user('alice'));
  bob = api(s.url, await s.user('bob'));
});
after(() => s.close());

describe('algorithm records (management API)', () => {
  test('create answers 201 with the original API\'s object; a missing language defaults to python3', async () => {
    const res = await send(alice, 'POST', '/v1/algorithms/alice', { name: 'Hello', details: { label: 'Hello!' }, settings: { algorithm_environment: 'python38' } });
    assert.equal(res.status, 201);
    const a = await json(res);
    assert.equal(a.name, 'Hello');
    assert.equal(a.resource_type, 'algorithm');
    assert.equal(a.self_link, `${s.url}/v1/algorithms/alice/Hello`);
    assert.equal(typeof a.id, 'string');
    assert.deepEqual(a.details, { label: 'Hello!', summary: '', tagline: '' });
    assert.equal(a.settings.language, 'python3');
    assert.equal(a.settings.algorithm_environment, 'python38');
    assert.equal(a.settings.source_visibility, 'closed');
    assert.equal(a.settings.network_access, 'isolated');
  });

  test('language aliases of the original service', async () => {
    for (const [lang, want] of [['python3-1', 'python3'], ['nodejs', 'javascript'], ['JavaScript', 'javascript'], ['typescript', 'typescript']] as const) {
      const name = `L_${lang.replace(/\W/g, '_')}`;
      const a = await json(await send(alice, 'POST', '/v1/algorithms/alice', { name, settings: { language: lang } }));
      assert.equal(a.settings.language, want, lang);
    }
  });

  test('names are unique per owner without regard to case', async () => {
    const res = await send(alice, 'POST', '/v1/algorithms/alice', { name: 'HELLO' });
    assert.equal(res.status, 409);
    assert.equal((await json(res)).error.code, 'already_exists');
    assert.equal((await send(bob, 'POST', '/v1/algorithms/bob', { name: 'Hello' })).status, 201, 'another owner may use the name');
  });

  test('bad requests are refused and create nothing', async () => {
    const cases: [unknown, string][] = [
      [{ name: '9lives' }, 'invalid_algorithm_name'],
      [{ name: 'a-b' }, 'invalid_algorithm_name'],
      [{}, 'invalid_algorithm_name'],
      [{ name: 'X1', settings: { language: 'cobol' } }, 'invalid_body'],
      [{ name: 'X2', settings: { network_access: 'some' } }, 'invalid_body'],
      [{ name: 'X3', settings: { royalty_microcredits: -1 } }, 'invalid_body'],
      [{ name: 'X4', settings: { colour: 'red' } }, 'invalid_body'],
      [{ name: 'X5', details: { label: 5 } }, 'invalid_body'],
      [{ name: 'X6', extra: true }, 'invalid_body'],
    ];
    for (const [body, code] of cases) {
      const res = await send(alice, 'POST', '/v1/algorithms/alice', body);
      assert.equal(res.status, 400, JSON.stringify(body));
      assert.equal((await json(res)).error.code, code, JSON.stringify(body));
    }
    const list = await json(await alice('/v1/users/alice/algorithms'));
    assert.equal(list.results.some((a: { name: string }) => /^X\d$/.test(a.name)), false);
  });

  test('only the owner, with a managing key, creates and changes algorithms', async () => {
    const res = await send(bob, 'POST', '/v1/algorithms/alice', { name: 'Intruder' });
    assert.equal(res.status, 403);
    assert.equal((await json(res)).error.code, 'forbidden');
    const created = await json(await send(alice, 'POST', '/v1/users/alice/keys', { name: 'nomgmt', permissions: { allow_algo_management: false } }));
    const limited = api(s.url, created.api_key);
    const denied = await send(limited, 'POST', '/v1/algorithms/alice', { name: 'Nope' });
    assert.equal(denied.status, 403);
    assert.equal((await json(denied)).error.code, 'key_permission_denied');
    assert.equal((await send(bob, 'PUT', '/v1/algorithms/alice/Hello', { details: { label: 'x' } })).status, 403);
    assert.equal((await send(bob, 'DELETE', '/v1/algorithms/alice/Hello')).status, 403);
  });

  test('private algorithms are invisible to others; a missing one says "No such algorithm"', async () => {
    await send(alice, 'POST', '/v1/algorithms/alice', { name: 'Secret', settings: { algorithm_callability: 'private' } });
    assert.equal((await alice('/v1/algorithms/alice/Secret')).status, 200);
    for (const path of ['/v1/algorithms/alice/Secret', '/v1/algorithms/alice/Missing']) {
      const res = await bob(path);
      assert.equal(res.status, 404);
      const body = await json(res);
      assert.equal(body.error.code, 'algorithm_not_found');
      assert.match(body.error.message, /No such algorithm/);
    }
    const listed = async () => (await json(await bob('/v1/users/alice/algorithms'))).results.map((a: { name: string }) => a.name);
    // Public, but with nothing to call yet: the owner's work in progress, out of others' sight.
    assert.equal((await bob('/v1/algorithms/alice/Hello')).status, 404, 'an algorithm never published is not shown to others');
    assert.ok(!(await listed()).includes('Hello'));
    // Every build failed: still nothing to call, still out of sight.
    await send(alice, 'POST', '/v1/algorithms/alice', { name: 'Broken' });
    assert.equal((await upload(alice, 'alice', 'Broken', { 'src/Broken.py': 'def apply(input:\n' })).status, 200);
    const failed = await json(await send(alice, 'POST', '/v1/algorithms/alice/Broken/compile'));
    assert.equal(failed.compilation.successful, false);
    assert.equal((await bob('/v1/algorithms/alice/Broken')).status, 404);
    assert.ok(!(await listed()).includes('Broken'));
    // Published: visible.
    await compile(alice, 'alice', 'Hello');
    await publish(alice, 'alice', 'Hello');
    assert.equal((await bob('/v1/algorithms/alice/Hello')).status, 200, 'a public algorithm with a public version is visible');
    const seen = await listed();
    assert.ok(seen.includes('Hello'));
    assert.ok(!seen.includes('Secret'));
    assert.ok(!seen.includes('Broken'));
  });

  test('update merges details and settings; renaming is refused; delete answers 204', async () => {
    await send(alice, 'POST', '/v1/algorithms/alice', { name: 'Edit', details: { summary: 'old', tagline: 't' } });
    const res = await send(alice, 'PUT', '/v1/algorithms/alice/edit', {
      details: { summary: 'new' },
      settings: { source_visibility: 'open' },
      version_info: { sample_input: '"x"' },
    });
    assert.equal(res.status, 200);
    const a = await json(res);
    assert.deepEqual(a.details, { label: 'Edit', summary: 'new', tagline: 't' });
    assert.equal(a.settings.source_visibility, 'open');
    assert.equal(a.settings.language, 'python3', 'settings not sent keep their value');
    const rename = await send(alice, 'PUT', '/v1/algorithms/alice/Edit', { name: 'Other' });
    assert.equal(rename.status, 400);
    const del = await send(alice, 'DELETE', '/v1/algorithms/alice/Edit');
    assert.equal(del.status, 204);
    assert.equal(await del.text(), '');
    assert.equal((await alice('/v1/algorithms/alice/Edit')).status, 404);
    assert.equal((await send(alice, 'DELETE', '/v1/algorithms/alice/Edit')).status, 404);
  });

  test('an owner\'s list pages with marker and next_link, null at the end', async () => {
    const owner = api(s.url, await s.user('carol'));
    for (let i = 0; i < 105; i++) {
      assert.equal((await send(owner, 'POST', '/v1/algorithms/carol', { name: `A${String(i).padStart(3, '0')}` })).status, 201);
    }
    const first = await json(await owner('/v1/users/carol/algorithms'));
    assert.equal(first.results.length, 100);
    assert.ok(first.marker);
    assert.ok(first.next_link.startsWith(`${s.url}/v1/users/carol/algorithms?marker=`));
    const second = await json(await owner(first.next_link.slice(s.url.length)));
    assert.equal(second.results.length, 5);
    assert.equal(second.marker, null);
    assert.equal(second.next_link, null);
    const names = [...first.results, ...second.results].map((a: { name: string }) => a.name);
    assert.equal(new Set(names).size, 105);
    const weird = await owner(`/v1/users/carol/algorithms?marker=x.${encodeURIComponent('é'.repeat(22))}`);
    assert.equal(weird.status, 400);
    const forged = await owner('/v1/users/carol/algorithms?marker=nope');
    assert.equal(forged.status, 400);
    assert.equal((await json(forged)).error.code, 'invalid_marker');
  });

  test('paging another owner\'s list never reveals a private name, not even in a marker', async () => {
    const owner = api(s.url, await s.user('dave'));
    for (let i = 0; i < 101; i++) {
      const name = `P${String(i).padStart(3, '0')}`;
      const settings = i === 99 ? { algorithm_callability: 'private' } : {};
      assert.equal((await send(owner, 'POST', '/v1/algorithms/dave', { name, settings })).status, 201);
    }
    // Others see only algorithms with a public version: give each one.
    const names = Array.from({ length: 101 }, (_, i) => `P${String(i).padStart(3, '0')}`);
    for (let i = 0; i < names.length; i += 4) {
      await Promise.all(
        names.slice(i, i + 4).map(async (name) => {
          await compile(owner, 'dave', name);
          await publish(owner, 'dave', name, {}, { algorithm_callability: 'public' });
        }),
      );
    }
    const seen = await json(await bob('/v1/users/dave/algorithms'));
    assert.equal(seen.results.length, 100, 'a full page of visible algorithms');
    assert.equal(seen.marker, null, 'nothing visible remains');
    assert.equal(seen.results.some((a: { name: string }) => a.name === 'P099'), false);
    assert.equal(JSON.stringify(seen).toLowerCase().includes('p099'), false);
    const own = await json(await owner('/v1/users/dave/algorithms'));
    assert.equal(own.results.length, 100);
    assert.ok(own.marker, 'the owner has a second page');
  });
});
