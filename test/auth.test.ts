import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { API_KEY_PATTERN } from '../src/auth/apiKeys.ts';

let s: TestServer;
let aliceKey: string;

before(async () => {
  s = await startServer();
  aliceKey = await s.user('alice');
});
after(() => s.close());

const jsonInit = (method: string, body: unknown): RequestInit => ({
  method,
  body: JSON.stringify(body),
  headers: { 'content-type': 'application/json' },
});

describe('authentication', () => {
  test('a new user key has the documented form', () => {
    assert.match(aliceKey, API_KEY_PATTERN);
    assert.equal(aliceKey.length, 28);
  });

  for (const [form, header] of [
    ['Simple', (k: string) => `Simple ${k}`],
    ['bare', (k: string) => k],
    ['Bearer', (k: string) => `Bearer ${k}`],
    ['lower-case scheme', (k: string) => `simple ${k}`],
  ] as const) {
    test(`accepts the ${form} header form`, async () => {
      const res = await fetch(`${s.url}/v1/data/.my`, { headers: { authorization: header(aliceKey) } });
      assert.equal(res.status, 200);
    });
  }

  test('no key: 401 "authorization required" with envelope and X-Error-Message', async () => {
    const res = await fetch(`${s.url}/v1/data/.my`);
    assert.equal(res.status, 401);
    assert.equal(res.headers.get('x-error-message'), 'authorization required');
    assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
    const body = await json(res);
    assert.equal(body.error.code, 'auth_required');
    assert.equal(body.error.message, 'authorization required');
  });

  test('unknown, malformed and wrongly-shaped keys: 401 invalid_api_key', async () => {
    for (const header of ['Simple simAAAAAAAAAAAAAAAAAAAAAAAAA', 'Simple nope', `Simple ${aliceKey}x`]) {
      const res = await fetch(`${s.url}/v1/data/.my`, { headers: { authorization: header } });
      assert.equal(res.status, 401, header);
      assert.equal((await json(res)).error.code, 'invalid_api_key');
    }
  });

  test('the message speaks of the key\'s shape only when the shape is wrong', async () => {
    const message = async (key: string) => (await json(await fetch(`${s.url}/v1/data/.my`, { headers: { authorization: `Simple ${key}` } }))).error.message as string;
    // Shaped like a key, but no key of this server: nothing about the shape.
    const unknown = await message('simAAAAAAAAAAAAAAAAAAAAAAAAA');
    assert.doesNotMatch(unknown, /28 characters|starting with/);
    assert.match(unknown, /^API key not recognised: no key of this server/);
    // Shaped wrong: says how, and what a key looks like.
    assert.equal(await message(`${aliceKey}x`), 'API key not recognised: it has 29 characters; keys are 28 characters starting with "sim"');
    assert.equal(await message('nope'), 'API key not recognised: it has 4 characters; keys are 28 characters starting with "sim"');
    assert.equal(await message(`xyz${aliceKey.slice(3)}`), 'API key not recognised: it does not start with "sim"; keys are 28 characters starting with "sim"');
    // `Authorization: Simple $KEY` with KEY unset.
    assert.match(await message(''), /^API key not recognised: the Authorization header has "Simple" but no key after it \(is the variable holding the key set\?\)/);
    assert.equal(await message(`${aliceKey.slice(0, 27)}-`), 'API key not recognised: it holds characters other than letters and digits; keys are 28 characters starting with "sim"');
  });

  test('an unknown scheme is refused with a message saying what to send', async () => {
    const res = await fetch(`${s.url}/v1/data/.my`, { headers: { authorization: `Basic a b` } });
    assert.equal(res.status, 401);
    const body = await json(res);
    assert.equal(body.error.code, 'invalid_authorization');
    assert.match(body.error.message, /Simple/);
  });

  test('HEAD without a key: 401 with X-Error-Message and no body', async () => {
    const res = await fetch(`${s.url}/v1/data/.my`, { method: 'HEAD' });
    assert.equal(res.status, 401);
    assert.equal(res.headers.get('x-error-message'), 'authorization required');
    assert.equal(await res.text(), '');
  });
});

describe('key management over HTTP', () => {
  const keysUrl = '/v1/users/alice/keys';

  test('lists the default key with all permissions, never the secret', async () => {
    const res = await api(s.url, aliceKey)(keysUrl);
    assert.equal(res.status, 200);
    const body = await json(res);
    assert.equal(body.marker, null);
    assert.equal(body.next_link, null);
    const def = body.results.find((k: { name: string }) => k.name === 'default-key');
    assert.ok(def, 'default-key is listed');
    assert.deepEqual(def.permissions, {
      allow_algo: true,
      algo_acl: ['algo://*'],
      allow_web_algo: true,
      referer_host: null,
      allow_data: true,
      allow_data_write: true,
      allow_algo_management: true,
    });
    assert.equal(JSON.stringify(body).includes(aliceKey), false, 'the key itself is never listed');
    assert.equal(def.prefix, aliceKey.slice(0, 8));
  });

  test('create, read, update and revoke a key; revocation works at once', async () => {
    const call = api(s.url, aliceKey);
    const created = await call(keysUrl, jsonInit('POST', { name: 'reader', permissions: { allow_data_write: false } }));
    assert.equal(created.status, 201);
    const rec = await json(created);
    assert.match(rec.api_key, API_KEY_PATTERN);
    assert.equal(rec.permissions.allow_data_write, false);
    assert.equal(rec.permissions.allow_data, true);

    const reader = api(s.url, rec.api_key);
    assert.equal((await reader('/v1/data/.my')).status, 200);
    const denied = await reader('/v1/data/.my', jsonInit('POST', { name: 'x' }));
    assert.equal(denied.status, 403);
    assert.equal((await json(denied)).error.code, 'key_permission_denied');

    const got = await json(await call(`${keysUrl}/${rec.id}`));
    assert.equal(got.name, 'reader');
    assert.equal(got.api_key, undefined);

    const patched = await call(`${keysUrl}/${rec.id}`, jsonInit('PATCH', { name: 'reader2', permissions: { allow_data: false } }));
    assert.equal(patched.status, 200);
    const p = await json(patched);
    assert.equal(p.name, 'reader2');
    assert.equal(p.permissions.allow_data, false);
    assert.equal((await reader('/v1/data/.my')).status, 403, 'a changed permission applies to the next request');

    const del = await call(`${keysUrl}/${rec.id}`, { method: 'DELETE' });
    assert.equal(del.status, 204);
    const after = await reader('/v1/data/.my');
    assert.equal(after.status, 401);
    assert.equal((await json(after)).error.code, 'api_key_revoked');
    assert.equal((await call(`${keysUrl}/${rec.id}`)).status, 404);
    assert.equal((await call(`${keysUrl}/${rec.id}`, { method: 'DELETE' })).status, 404);
  });

  test('a key cannot grant more than it has, nor manage keys without the permission', async () => {
    const call = api(s.url, aliceKey);
    const limited = await json(
      await call(keysUrl, jsonInit('POST', { name: 'limited', permissions: { allow_data_write: false, algo_acl: ['algo://alice/*'] } })),
    );
    const lim = api(s.url, limited.api_key);
    const up = await lim(keysUrl, jsonInit('POST', { name: 'escalate', permissions: { allow_data_write: true } }));
    assert.equal(up.status, 403);
    const upBody = await json(up);
    assert.equal(upBody.error.code, 'permission_escalation');
    assert.match(upBody.error.message, /allow_data_write/);
    // Without naming permissions, a new key inherits the acting key's, not full ones.
    const child = await json(await lim(keysUrl, jsonInit('POST', { name: 'child' })));
    assert.equal(child.permissions.allow_data_write, false);
    assert.deepEqual(child.permissions.algo_acl, ['algo://alice/*']);
    const wider = await lim(keysUrl, jsonInit('POST', { name: 'wider', permissions: { algo_acl: ['algo://*'] } }));
    assert.equal(wider.status, 403);
    const narrower = await lim(keysUrl, jsonInit('POST', { name: 'narrower', permissions: { algo_acl: ['algo://alice/Hello/*'] } }));
    assert.equal(narrower.status, 201);

    const noMgmt = await json(await call(keysUrl, jsonInit('POST', { name: 'nomgmt', permissions: { allow_algo_management: false } })));
    const res = await api(s.url, noMgmt.api_key)(keysUrl);
    assert.equal(res.status, 403);
    assert.equal((await json(res)).error.code, 'key_permission_denied');
  });

  test('a weaker key cannot change or revoke a stronger one (no lock-out by a leaked key)', async () => {
    const call = api(s.url, aliceKey);
    const weak = await json(await call(keysUrl, jsonInit('POST', { name: 'weak', permissions: { allow_data: false, allow_data_write: false, allow_algo: false, allow_web_algo: false } })));
    const weaker = await json(await call(keysUrl, jsonInit('POST', { name: 'weaker', permissions: { allow_data: false, allow_data_write: false, allow_algo: false, allow_web_algo: false } })));
    const list = (await json(await call(keysUrl))).results as { id: string; name: string }[];
    const def = list.find((k) => k.name === 'default-key')!;
    const w = api(s.url, weak.api_key);
    const patch = await w(`${keysUrl}/${def.id}`, jsonInit('PATCH', { permissions: { allow_data: false } }));
    assert.equal(patch.status, 403);
    assert.equal((await json(patch)).error.code, 'permission_escalation');
    const del = await w(`${keysUrl}/${def.id}`, { method: 'DELETE' });
    assert.equal(del.status, 403);
    assert.equal((await call('/v1/data/.my')).status, 200, 'the default key still works, unchanged');
    assert.equal((await w(`${keysUrl}/${weaker.id}`, { method: 'DELETE' })).status, 204, 'an equal or weaker key may be revoked');
  });

  test('another user cannot see or manage my keys', async () => {
    const bobKey = await s.user('bob');
    const res = await api(s.url, bobKey)(keysUrl);
    assert.equal(res.status, 403);
    assert.equal((await json(res)).error.code, 'forbidden');
  });

  test('bad key requests are refused with clear codes', async () => {
    const call = api(s.url, aliceKey);
    const cases: [unknown, string][] = [
      [{ name: '' }, 'invalid_key_name'],
      [{}, 'invalid_key_name'],
      [{ name: 'ok', permissions: { allow_data: 'yes' } }, 'invalid_permissions'],
      [{ name: 'ok', permissions: { allow_everything: true } }, 'invalid_permissions'],
      [{ name: 'ok', permissions: { algo_acl: ['http://x'] } }, 'invalid_permissions'],
      [{ name: 'ok', permissions: { referer_host: 'not a host' } }, 'invalid_permissions'],
      [{ name: 'ok', extra: 1 }, 'invalid_body'],
      [{ name: 'default-key' }, 'already_exists'],
    ];
    for (const [body, code] of cases) {
      const res = await call(keysUrl, jsonInit('POST', body));
      assert.equal((await json(res)).error.code, code, JSON.stringify(body));
      assert.ok(res.status >= 400 && res.status < 500);
    }
    const bad = await call(keysUrl, { method: 'POST', body: '{"name":', headers: { 'content-type': 'application/json' } });
    assert.equal(bad.status, 400);
    assert.equal((await json(bad)).error.code, 'invalid_json');
    const names = (await json(await call(keysUrl))).results.map((k: { name: string }) => k.name);
    assert.equal(names.includes('ok'), false, 'no refused request created a key');
  });
});

describe('routes outside the API', () => {
  test('deprecated unversioned routes answer 410 naming the /v1 route', async () => {
    const a = await fetch(`${s.url}/api/connector/data/.my/x`);
    assert.equal(a.status, 410);
    const ab = await json(a);
    assert.equal(ab.error.code, 'deprecated_route');
    assert.match(ab.error.message, /\/v1\/connector\/data\/\.my\/x/);
    const d = await fetch(`${s.url}/data/.my/coll`, { method: 'PUT', body: 'x' });
    assert.equal(d.status, 410);
    assert.match((await json(d)).error.message, /\/v1\/data\/\.my\/coll/);
  });

  test('an unknown route is a JSON 404', async () => {
    const res = await fetch(`${s.url}/v2/nothing`);
    assert.equal(res.status, 404);
    assert.equal((await json(res)).error.code, 'route_not_found');
  });
});
