import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { canRead, type ReadAcl } from '../src/data/acl.ts';
import { FULL_PERMISSIONS } from '../src/auth/permissions.ts';
import type { Principal } from '../src/auth/principal.ts';

let s: TestServer;
const keys: Record<string, string | undefined> = {};

const COLLECTIONS: Record<ReadAcl, string[]> = { private: [], my_algorithms: ['algo://.my/*'], public: ['user://*'] };

async function createKey(owner: string, ownerKey: string, name: string, permissions: object): Promise<string> {
  const res = await api(s.url, ownerKey)(`/v1/users/${owner}/keys`, {
    method: 'POST',
    body: JSON.stringify({ name, permissions }),
    headers: { 'content-type': 'application/json' },
  });
  assert.equal(res.status, 201);
  return (await json(res)).api_key;
}

before(async () => {
  s = await startServer();
  const owner = await s.user('alice');
  keys.owner = owner;
  keys.other = await s.user('bob');
  keys.none = undefined;
  keys.noData = await createKey('alice', owner, 'nodata', { allow_data: false, allow_data_write: false });
  keys.readOnly = await createKey('alice', owner, 'readonly', { allow_data_write: false });
});
after(() => s.close());

type Actor = 'owner' | 'other' | 'none' | 'noData' | 'readOnly';
const ACTORS: Actor[] = ['owner', 'other', 'none', 'noData', 'readOnly'];

/** One fresh collection of each ACL, each with a sub-directory and a file, per test case. */
async function setup(tag: string): Promise<void> {
  const call = api(s.url, keys.owner);
  for (const [acl, read] of Object.entries(COLLECTIONS)) {
    const coll = `${acl}-${tag}`;
    const mk = await call('/v1/data/.my', { method: 'POST', body: JSON.stringify({ name: coll, acl: { read } }), headers: { 'content-type': 'application/json' } });
    assert.equal(mk.status, 200);
    await call(`/v1/data/.my/${coll}`, { method: 'POST', body: 'sub', headers: { 'content-type': 'text/plain' } });
    await call(`/v1/data/.my/${coll}/file.txt`, { method: 'PUT', body: 'secret' });
  }
}

interface Op {
  name: string;
  write: boolean;
  run: (call: ReturnType<typeof api>, coll: string) => Promise<Response>;
}

const OPS: Op[] = [
  { name: 'GET file', write: false, run: (c, coll) => c(`/v1/data/alice/${coll}/file.txt`) },
  { name: 'HEAD file', write: false, run: (c, coll) => c(`/v1/data/alice/${coll}/file.txt`, { method: 'HEAD' }) },
  { name: 'list directory', write: false, run: (c, coll) => c(`/v1/connector/data/alice/${coll}`) },
  { name: 'list with acl', write: false, run: (c, coll) => c(`/v1/data/alice/${coll}?acl=true`) },
  { name: 'HEAD directory', write: false, run: (c, coll) => c(`/v1/data/alice/${coll}/sub`, { method: 'HEAD' }) },
  { name: 'PUT file', write: true, run: (c, coll) => c(`/v1/data/alice/${coll}/new.txt`, { method: 'PUT', body: 'x' }) },
  { name: 'replace file', write: true, run: (c, coll) => c(`/v1/data/alice/${coll}/file.txt`, { method: 'PUT', body: 'x' }) },
  { name: 'mkdir', write: true, run: (c, coll) => c(`/v1/data/alice/${coll}`, { method: 'POST', body: 'made', headers: { 'content-type': 'text/plain' } }) },
  { name: 'PATCH acl', write: true, run: (c, coll) => c(`/v1/data/alice/${coll}`, { method: 'PATCH', body: '{"acl":{"read":["user://*"]}}', headers: { 'content-type': 'application/json' } }) },
  { name: 'DELETE file', write: true, run: (c, coll) => c(`/v1/data/alice/${coll}/file.txt`, { method: 'DELETE' }) },
  { name: 'DELETE directory', write: true, run: (c, coll) => c(`/v1/data/alice/${coll}/sub`, { method: 'DELETE' }) },
  { name: 'DELETE collection', write: true, run: (c, coll) => c(`/v1/data/alice/${coll}?force=true`, { method: 'DELETE' }) },
];

/** The expected status and code: the rule table of docs/data.md. */
function expected(actor: Actor, acl: ReadAcl, op: Op): [number, string | null] {
  if (actor === 'none') return [401, 'auth_required'];
  if (actor === 'noData') return [403, 'key_permission_denied'];
  if (actor === 'owner') return [200, null];
  if (actor === 'readOnly') return op.write ? [403, 'key_permission_denied'] : [200, null];
  // another user
  if (op.write) return [403, 'write_denied'];
  return acl === 'public' ? [200, null] : [404, 'not_found'];
}

describe('ACL matrix: every actor, every ACL, every data route', () => {
  let tag = 0;
  for (const actor of ACTORS) {
    for (const op of OPS) {
      test(`${actor}: ${op.name}`, async () => {
        const t = `t${tag++}`;
        await setup(t);
        const call = api(s.url, keys[actor]);
        for (const acl of Object.keys(COLLECTIONS) as ReadAcl[]) {
          const res = await op.run(call, `${acl}-${t}`);
          const [status, code] = expected(actor, acl, op);
          assert.equal(res.status, status, `${actor} ${op.name} on ${acl}`);
          if (code && op.name.startsWith('HEAD')) {
            assert.ok(res.headers.get('x-error-message'), 'HEAD errors carry X-Error-Message');
          } else if (code) {
            assert.equal((await json(res)).error.code, code, `${actor} ${op.name} on ${acl}`);
          }
          if (actor === 'other' && acl === 'public' && op.name === 'GET file') assert.equal(await res.text(), 'secret');
        }
        // A refused write changed nothing: the owner still finds the file as it was.
        if (op.write && actor !== 'owner') {
          for (const acl of Object.keys(COLLECTIONS)) {
            const get = await api(s.url, keys.owner)(`/v1/data/.my/${acl}-${t}/file.txt`);
            assert.equal(await get.text(), 'secret');
          }
        }
      });
    }
  }

  test('another user sees only public collections at the root, and may list them', async () => {
    await setup('root');
    const root = await json(await api(s.url, keys.other)('/v1/data/alice'));
    const names: string[] = root.folders.map((f: { name: string }) => f.name);
    assert.ok(names.includes('public-root'));
    assert.ok(!names.includes('private-root'));
    assert.ok(!names.includes('my_algorithms-root'));
    const own = await json(await api(s.url, keys.owner)('/v1/data/.my'));
    assert.ok(own.folders.some((f: { name: string }) => f.name === 'private-root'), 'the owner sees all');
  });

  test('a collection made private stops being readable at once', async () => {
    await setup('flip');
    const other = api(s.url, keys.other);
    assert.equal((await other('/v1/data/alice/public-flip/file.txt')).status, 200);
    await api(s.url, keys.owner)('/v1/data/.my/public-flip', { method: 'PATCH', body: '{"acl":{"read":[]}}', headers: { 'content-type': 'application/json' } });
    assert.equal((await other('/v1/data/alice/public-flip/file.txt')).status, 404);
  });
});

describe('ACL evaluation takes the calling algorithm into account', () => {
  const principal = (username: string, algorithmOwner?: string): Principal => ({
    userId: 1,
    username,
    keyId: 'k',
    permissions: FULL_PERMISSIONS,
    ...(algorithmOwner ? { algorithm: { owner: algorithmOwner, name: 'Algo' } } : {}),
  });

  const table: [string, Principal, ReadAcl, boolean][] = [
    ['the owner, private', principal('alice'), 'private', true],
    ['an algorithm the owner calls (acts as the owner), private', principal('alice', 'bob'), 'private', true],
    ['bob calling alice\'s algorithm, my_algorithms', principal('bob', 'alice'), 'my_algorithms', true],
    ['bob calling alice\'s algorithm, private', principal('bob', 'alice'), 'private', false],
    ['bob calling his own algorithm, my_algorithms', principal('bob', 'bob'), 'my_algorithms', false],
    ['bob directly, my_algorithms', principal('bob'), 'my_algorithms', false],
    ['bob directly, public', principal('bob'), 'public', true],
    ['bob calling carol\'s algorithm, public', principal('bob', 'carol'), 'public', true],
    ['case-insensitive owner', principal('ALICE'), 'private', true],
  ];
  for (const [what, p, acl, allowed] of table) {
    test(what, () => assert.equal(canRead(p, 'alice', acl), allowed));
  }
});
