/**
 * Connected accounts (issue 4, first part): the per-user API, validation per provider,
 * one default per protocol, and credentials that go in and never come out, encrypted at rest.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { CredentialBox } from '../src/data/accounts/credentials.ts';

let s: TestServer;
let alice: ReturnType<typeof api>;
let bob: ReturnType<typeof api>;

const SECRET = 'wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY';
const post = (who: typeof alice, body: unknown) => who('/v1/users/alice/connectors', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
const s3 = (label: string, extra: Record<string, unknown> = {}) => ({
  label,
  protocol: 'objstore',
  cred_data: { endpoint: 'http://127.0.0.1:9000', region: 'us-east-1', access_key_id: 'AKIAEXAMPLE', secret_access_key: SECRET, force_path_style: true },
  ...extra,
});

before(async () => {
  s = await startServer();
  alice = api(s.url, await s.user('alice'));
  bob = api(s.url, await s.user('bob'));
});
after(() => s.close());

test('create, list, get, change and delete; secrets never come back', async () => {
  let r = await post(alice, s3('minio', { path: 'reports/*' }));
  assert.equal(r.status, 201);
  const created = await json(r);
  assert.deepEqual(
    { ...created, created_at: undefined, updated_at: undefined },
    {
      label: 'minio',
      protocol: 'objstore',
      provider: 's3',
      is_default: true,
      path: 'reports/*',
      writeable: false,
      cred_data: { endpoint: 'http://127.0.0.1:9000', region: 'us-east-1', force_path_style: true },
      created_at: undefined,
      updated_at: undefined,
    },
  );
  r = await post(alice, { label: 'box', protocol: 'filehost', provider: 'webdav', cred_data: { url: 'http://127.0.0.1:8081/dav', username: 'u', password: 'hunter2-secret' }, writeable: true });
  assert.equal(r.status, 201);
  const list = await json(await alice('/v1/users/alice/connectors'));
  assert.deepEqual(list.results.map((a: { label: string; is_default: boolean }) => [a.label, a.is_default]), [['box', true], ['minio', true]]);
  const text = JSON.stringify(list) + JSON.stringify(await json(await alice('/v1/users/alice/connectors/MINIO')));
  assert.ok(!text.includes(SECRET) && !text.includes('hunter2-secret') && !text.includes('AKIAEXAMPLE'), 'no secret in any answer');

  // Changing the endpoint keeps the stored secrets (merged), and the account works as before.
  r = await alice('/v1/users/alice/connectors/minio', { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ cred_data: { endpoint: 'http://127.0.0.1:9001' }, writeable: true }) });
  assert.equal(r.status, 200);
  const changed = await json(r);
  assert.equal(changed.cred_data.endpoint, 'http://127.0.0.1:9001');
  assert.equal(changed.writeable, true);
  const account = await s.services.accounts.resolve((await s.services.users.require('alice')).id, 'objstore', undefined);
  assert.equal(account.credentials.secret_access_key, SECRET);
  assert.equal(account.credentials.endpoint, 'http://127.0.0.1:9001');

  assert.equal((await alice('/v1/users/alice/connectors/box', { method: 'DELETE' })).status, 204);
  assert.equal((await alice('/v1/users/alice/connectors/box')).status, 404);
});

test('credentials are encrypted at rest, bound to their account', async () => {
  if (s.services.store.dialect === 'sqlite') {
    const raw = fs.readFileSync(path.join(s.home, 'metadata.sqlite'));
    const wal = fs.existsSync(path.join(s.home, 'metadata.sqlite-wal')) ? fs.readFileSync(path.join(s.home, 'metadata.sqlite-wal')) : Buffer.alloc(0);
    assert.ok(!raw.includes(SECRET) && !wal.includes(SECRET), 'the secret is not in the database file in the clear');
  } else {
    // PostgreSQL: what the server reads back is all there is to look at.
    assert.equal((await post(alice, s3('sealed'))).status, 201);
    const rows = await s.services.store.db.selectFrom('connectors').selectAll().execute();
    assert.ok(rows.length > 0 && !JSON.stringify(rows).includes(SECRET), 'the secret is not in the database in the clear');
    assert.equal((await alice('/v1/users/alice/connectors/sealed', { method: 'DELETE' })).status, 204);
  }
  const box = new CredentialBox(Buffer.alloc(32, 7));
  const sealed = box.seal({ k: 'v' }, 'connector:1:a');
  assert.deepEqual(box.open(sealed, 'connector:1:a'), { k: 'v' });
  assert.throws(() => box.open(sealed, 'connector:2:a'), 'a sealed value does not open on another account');
  assert.throws(() => new CredentialBox(Buffer.alloc(32, 8)).open(sealed, 'connector:1:a'), 'nor with another key');
});

test('one default per protocol: a new default takes over', async () => {
  assert.equal((await post(alice, s3('second'))).status, 201);
  let list = await json(await alice('/v1/users/alice/connectors'));
  assert.deepEqual(list.results.filter((a: { protocol: string }) => a.protocol === 'objstore').map((a: { label: string; is_default: boolean }) => [a.label, a.is_default]), [['minio', true], ['second', false]]);
  assert.equal((await post(alice, s3('third', { is_default: true }))).status, 201);
  list = await json(await alice('/v1/users/alice/connectors'));
  assert.deepEqual(list.results.filter((a: { is_default: boolean; protocol: string }) => a.protocol === 'objstore' && a.is_default).map((a: { label: string }) => a.label), ['third']);
  const r = await alice('/v1/users/alice/connectors/second', { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: '{"is_default":true}' });
  assert.equal((await json(r)).is_default, true);
  list = await json(await alice('/v1/users/alice/connectors'));
  assert.deepEqual(list.results.filter((a: { is_default: boolean; protocol: string }) => a.protocol === 'objstore' && a.is_default).map((a: { label: string }) => a.label), ['second']);
});

test('bad input: a clear 400 naming the field, nothing stored', async () => {
  const before = (await json(await alice('/v1/users/alice/connectors'))).results.length;
  const cases: Array<[unknown, RegExp]> = [
    [{ ...s3('x'), label: 'no spaces' }, /label must be/],
    [{ ...s3('x'), label: 'under_score' }, /label must be/],
    [{ ...s3('x'), protocol: 's3' }, /protocol must be/],
    [{ ...s3('x'), provider: 'webdav' }, /provider for objstore must be "s3"/],
    [{ ...s3('x'), cred_data: { access_key_id: 'a' } }, /secret_access_key is required/],
    [{ ...s3('x'), cred_data: { access_key_id: 'a', secret_access_key: 'b', endpoint: 'ftp://x' } }, /endpoint must be an http/],
    [{ ...s3('x'), cred_data: { access_key_id: 'a', secret_access_key: 'b', bogus: 1 } }, /unknown cred_data field "bogus"/],
    [{ ...s3('x'), path: '../*' }, /path must be/],
    [{ ...s3('x'), path: 'no-star' }, /path must be/],
    [{ ...s3('x'), writeable: 'yes' }, /writeable must be true or false/],
    [{ label: 'd', protocol: 'filehost', provider: 'dropbox', cred_data: {} }, /access_token is required/],
    [{ ...s3('x'), extra: 1 }, /unknown field "extra"/],
  ];
  for (const [body, message] of cases) {
    const r = await post(alice, body);
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.match((await json(r)).error.message, message);
  }
  const dup = await post(alice, s3('MINIO'));
  assert.equal(dup.status, 409);
  const rename = await alice('/v1/users/alice/connectors/minio', { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: '{"protocol":"filehost"}' });
  assert.equal(rename.status, 400);
  assert.equal((await json(await alice('/v1/users/alice/connectors'))).results.length, before);
});

test('only their owner manages them, with a managing key', async () => {
  assert.equal((await bob('/v1/users/alice/connectors')).status, 403);
  assert.equal((await post(bob, s3('mine'))).status, 403);
  const r = await alice('/v1/users/alice/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'weak', permissions: { allow_algo_management: false } }) });
  const weak = api(s.url, (await json(r)).api_key);
  const denied = await weak('/v1/users/alice/connectors');
  assert.equal(denied.status, 403);
  assert.match((await json(denied)).error.message, /allow_algo_management/);
});
