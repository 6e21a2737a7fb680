import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { api, json, startServer, type TestServer } from './helpers/server.ts';

let s: TestServer;
let key: string;
let call: ReturnType<typeof api>;

before(async () => {
  s = await startServer();
  key = await s.user('alice');
  call = api(s.url, key);
});
after(() => s.close());

const mkdir = (parent: string, body: unknown) =>
  call(parent, { method: 'POST', body: JSON.stringify(body), headers: { 'content-type': 'application/json' } });

/** The three route families serve the same hosted data. */
const PREFIXES = ['/v1/data', '/v1/connector/data', '/api/v1/connector/data'];

describe('every data operation on every route family', () => {
  for (const [i, prefix] of PREFIXES.entries()) {
    test(prefix, async () => {
      const coll = `coll${i}`;
      const mk = await mkdir(`${prefix}/.my`, { name: coll });
      assert.equal(mk.status, 200);
      assert.deepEqual(await json(mk), { result: `data://alice/${coll}` });

      // Nested directory, created with a bare text/plain name as the TypeScript client does.
      const sub = await call(`${prefix}/.my/${coll}`, { method: 'POST', body: 'sub', headers: { 'content-type': 'text/plain' } });
      assert.equal(sub.status, 200);
      assert.deepEqual(await json(sub), { result: `data://alice/${coll}/sub` });

      const bytes = crypto.randomBytes(3000);
      const put = await call(`${prefix}/.my/${coll}/sub/blob.bin`, { method: 'PUT', body: bytes, headers: { 'content-type': 'application/json' } });
      assert.equal(put.status, 200);
      assert.deepEqual(await json(put), { result: `data://alice/${coll}/sub/blob.bin` });

      const head = await call(`${prefix}/.my/${coll}/sub/blob.bin`, { method: 'HEAD' });
      assert.equal(head.status, 200);
      assert.equal(head.headers.get('x-data-type'), 'file');
      assert.equal(head.headers.get('content-length'), '3000');
      assert.match(head.headers.get('etag') ?? '', /^"[0-9a-f]{32}"$/);

      const get = await call(`${prefix}/.my/${coll}/sub/blob.bin`);
      assert.equal(get.status, 200);
      assert.equal(get.headers.get('x-data-type'), 'file');
      assert.equal(get.headers.get('content-type'), 'application/octet-stream');
      assert.deepEqual(Buffer.from(await get.arrayBuffer()), bytes);

      const dirHead = await call(`${prefix}/.my/${coll}/sub`, { method: 'HEAD' });
      assert.equal(dirHead.status, 200);
      assert.equal(dirHead.headers.get('x-data-type'), 'directory');

      const list = await call(`${prefix}/.my/${coll}`);
      assert.equal(list.headers.get('x-data-type'), 'directory');
      assert.deepEqual(await json(list), { folders: [{ name: 'sub' }] });

      const listSub = await json(await call(`${prefix}/.my/${coll}/sub`));
      assert.equal(listSub.files.length, 1);
      assert.equal(listSub.files[0].filename, 'blob.bin');
      assert.equal(listSub.files[0].size, 3000);
      assert.match(listSub.files[0].last_modified, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      assert.equal(listSub.folders, undefined, 'empty arrays are left out');
      assert.equal(listSub.marker, undefined);

      const delFile = await call(`${prefix}/.my/${coll}/sub/blob.bin`, { method: 'DELETE' });
      assert.equal(await delFile.text(), '{"result":{"deleted":1}}');
      assert.equal((await call(`${prefix}/.my/${coll}/sub/blob.bin`, { method: 'HEAD' })).status, 404);

      const delDir = await call(`${prefix}/.my/${coll}?force=false`, { method: 'DELETE' });
      assert.equal(delDir.status, 409, 'a non-empty directory needs force');
      assert.equal((await json(delDir)).error.code, 'directory_not_empty');
      const delSub = await json(await call(`${prefix}/.my/${coll}/sub`, { method: 'DELETE' }));
      assert.deepEqual(delSub, { result: { deleted: 0 } });
      const delColl = await json(await call(`${prefix}/.my/${coll}`, { method: 'DELETE' }));
      assert.deepEqual(delColl, { result: { deleted: 0 } });
      assert.equal((await call(`${prefix}/.my/${coll}`)).status, 404);
    });
  }
});

describe('hosted data behaviour', () => {
  before(async () => {
    assert.equal((await mkdir('/v1/data/.my', { name: 'docs', acl: { read: ['user://*'] } })).status, 200);
  });

  test('the root lists the caller\'s collections; .my and the username are the same place', async () => {
    const root = await json(await call('/v1/data/'));
    assert.ok(root.folders.some((f: { name: string }) => f.name === 'docs'));
    assert.deepEqual(await json(await call('/v1/data/.my')), root);
    assert.deepEqual(await json(await call('/v1/data/alice')), root);
    assert.deepEqual(await json(await call('/v1/data/ALICE')), root, 'usernames are case-insensitive');
    assert.equal(root.files, undefined);
  });

  test('ACL: shown with acl=true, set at creation, changed with PATCH', async () => {
    const withAcl = await json(await call('/v1/data/.my/docs?acl=true'));
    assert.deepEqual(withAcl.acl, { read: ['user://*'] });
    assert.equal((await json(await call('/v1/data/.my/docs'))).acl, undefined, 'only when asked');

    await mkdir('/v1/data/.my', { name: 'dflt' });
    assert.deepEqual((await json(await call('/v1/data/.my/dflt?acl=true'))).acl, { read: ['algo://.my/*'] }, 'the default');

    for (const read of [[], ['algo://.my/*'], ['user://*']]) {
      const res = await call('/v1/data/.my/dflt', {
        method: 'PATCH',
        body: JSON.stringify({ acl: { read } }),
        headers: { 'content-type': 'application/json' },
      });
      assert.equal(res.status, 200);
      assert.deepEqual((await json(await call('/v1/data/.my/dflt?acl=True'))).acl, { read });
    }
  });

  test('PUT replaces a file and answers the full data URI; content type follows the name', async () => {
    await call('/v1/data/.my/docs/a.json', { method: 'PUT', body: '{"v":1}' });
    const res = await call('/v1/data/.my/docs/a.json', { method: 'PUT', body: '{"v":2}', headers: { 'content-type': 'text/plain' } });
    assert.deepEqual(await json(res), { result: 'data://alice/docs/a.json' });
    const get = await call('/v1/data/.my/docs/a.json');
    assert.equal(get.headers.get('content-type'), 'application/json');
    assert.deepEqual(await get.json(), { v: 2 });
    await call('/v1/data/.my/docs/n.txt', { method: 'PUT', body: 'hello' });
    assert.match((await call('/v1/data/.my/docs/n.txt')).headers.get('content-type') ?? '', /^text\/plain/);
  });

  test('Accept picks the representation the original clients ask for', async () => {
    await call('/v1/data/.my/docs/raw', { method: 'PUT', body: '[1,2]' });
    assert.equal((await call('/v1/data/.my/docs/raw')).headers.get('content-type'), 'application/octet-stream');
    assert.match((await call('/v1/data/.my/docs/raw', { headers: { accept: 'text/plain' } })).headers.get('content-type') ?? '', /^text\/plain/);
    assert.equal((await call('/v1/data/.my/docs/raw', { headers: { accept: 'application/json' } })).headers.get('content-type'), 'application/json');
  });

  test('Range, If-None-Match and If-Range', async () => {
    const body = Buffer.from('0123456789abcdef');
    await call('/v1/data/.my/docs/r.bin', { method: 'PUT', body });
    const part = await call('/v1/data/.my/docs/r.bin', { headers: { range: 'bytes=2-5' } });
    assert.equal(part.status, 206);
    assert.equal(part.headers.get('content-range'), 'bytes 2-5/16');
    assert.equal(await part.text(), '2345');
    const suffix = await call('/v1/data/.my/docs/r.bin', { headers: { range: 'bytes=-3' } });
    assert.equal(await suffix.text(), 'def');
    const open = await call('/v1/data/.my/docs/r.bin', { headers: { range: 'bytes=14-' } });
    assert.equal(await open.text(), 'ef');
    const bad = await call('/v1/data/.my/docs/r.bin', { headers: { range: 'bytes=99-' } });
    assert.equal(bad.status, 416);
    assert.equal(bad.headers.get('content-range'), 'bytes */16');
    assert.equal((await json(bad)).error.code, 'range_not_satisfiable');

    const full = await call('/v1/data/.my/docs/r.bin');
    assert.equal(full.headers.get('content-range'), null);
    const etag = full.headers.get('etag')!;
    const cached = await call('/v1/data/.my/docs/r.bin', { headers: { 'if-none-match': etag } });
    assert.equal(cached.status, 304);
    assert.equal(await cached.text(), '');
    const stale = await call('/v1/data/.my/docs/r.bin', { headers: { 'if-none-match': '"other"' } });
    assert.equal(stale.status, 200);
    const ifRange = await call('/v1/data/.my/docs/r.bin', { headers: { range: 'bytes=0-1', 'if-range': '"old"' } });
    assert.equal(ifRange.status, 200, 'a changed file is sent whole despite Range');

    await call('/v1/data/.my/docs/r.bin', { method: 'PUT', body: 'new' });
    const changed = await call('/v1/data/.my/docs/r.bin', { headers: { 'if-none-match': etag } });
    assert.equal(changed.status, 200, 'a new upload gets a new ETag');
    assert.equal(await changed.text(), 'new');
  });

  test('a missing path: 404 with X-Error-Message; HEAD has no body', async () => {
    const head = await call('/v1/data/.my/docs/missing.txt', { method: 'HEAD' });
    assert.equal(head.status, 404);
    assert.match(head.headers.get('x-error-message') ?? '', /does not exist/);
    assert.equal(await head.text(), '');
    const get = await call('/v1/data/.my/docs/missing.txt');
    assert.equal(get.status, 404);
    assert.equal((await json(get)).error.code, 'not_found');
    const dir = await call('/v1/data/.my/nope/missing.txt', { method: 'PUT', body: 'x' });
    assert.equal(dir.status, 404);
    assert.match((await json(dir)).error.message, /create it first/);
  });

  test('recursive delete answers the number of files deleted', async () => {
    await mkdir('/v1/data/.my', { name: 'tree' });
    await mkdir('/v1/data/.my/tree', { name: 'a' });
    await mkdir('/v1/data/.my/tree/a', { name: 'b' });
    for (const p of ['tree/1', 'tree/a/2', 'tree/a/b/3', 'tree/a/b/4']) {
      assert.equal((await call(`/v1/data/.my/${p}`, { method: 'PUT', body: p })).status, 200);
    }
    // A sibling whose name shares the prefix must survive.
    await mkdir('/v1/data/.my', { name: 'tree0' });
    await call('/v1/data/.my/tree0/keep', { method: 'PUT', body: 'keep' });
    const res = await call('/v1/data/.my/tree?force=true', { method: 'DELETE' });
    assert.equal(await res.text(), '{"result":{"deleted":4}}');
    assert.equal((await call('/v1/data/.my/tree')).status, 404);
    assert.equal((await call('/v1/data/.my/tree/a/b')).status, 404);
    assert.equal(await (await call('/v1/data/.my/tree0/keep')).text(), 'keep');
    const left = await s.services.store.db.selectFrom('nodes').select('name').where('dir', 'like', 'tree/%').execute();
    assert.deepEqual(left, []);
  });

  test('a failure part-way through a recursive delete answers error.deleted', async () => {
    const small = await startServer({ hosted: { deleteBatch: 3 } });
    try {
      const k = await small.user('carol');
      const c = api(small.url, k);
      await c('/v1/data/.my', { method: 'POST', body: 'big', headers: { 'content-type': 'text/plain' } });
      for (let i = 0; i < 10; i++) await c(`/v1/data/.my/big/f${i}`, { method: 'PUT', body: String(i) });
      // A real failure of the real database: a trigger refuses to delete f7.
      const { sql } = await import('kysely');
      const db = small.services.store.db;
      if (small.services.store.dialect === 'postgres') {
        await sql`CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'disk says no'; END $$`.execute(db);
        await sql`CREATE TRIGGER refuse BEFORE DELETE ON nodes FOR EACH ROW WHEN (OLD.name = 'f7') EXECUTE FUNCTION refuse()`.execute(db);
      } else {
        await sql`CREATE TRIGGER refuse BEFORE DELETE ON nodes WHEN OLD.name = 'f7' BEGIN SELECT RAISE(ABORT, 'disk says no'); END`.execute(db);
      }
      const res = await c('/v1/data/.my/big?force=true', { method: 'DELETE' });
      assert.equal(res.status, 500);
      const body = await json(res);
      assert.equal(body.error.code, 'delete_incomplete');
      assert.equal(body.error.deleted, 6, 'two batches of three went before the batch with f7');
      assert.equal(body.result, undefined);
      const left = await json(await c('/v1/data/.my/big'));
      assert.deepEqual(left.files.map((f: { filename: string }) => f.filename), ['f6', 'f7', 'f8', 'f9']);
      await (small.services.store.dialect === 'postgres' ? sql`DROP TRIGGER refuse ON nodes` : sql`DROP TRIGGER refuse`).execute(db);
      assert.equal(await (await c('/v1/data/.my/big?force=true', { method: 'DELETE' })).text(), '{"result":{"deleted":4}}');
    } finally {
      await small.close();
    }
  });

  test('names with spaces, unicode and percent-encoding round-trip; Java\'s encoded tail works', async () => {
    await mkdir('/v1/data/.my', { name: 'names' });
    const name = 'héllo wörld 100%.txt';
    const put = await call(`/v1/data/.my/names/${encodeURIComponent(name)}`, { method: 'PUT', body: 'u' });
    assert.equal(put.status, 200);
    assert.deepEqual(await json(put), { result: `data://alice/names/${name}` });
    const listed = await json(await call('/v1/data/.my/names'));
    assert.equal(listed.files[0].filename, name);
    // Java form-encodes the whole tail: "/" as %2F and space as "+".
    const java = `/v1/data/${encodeURIComponent(`.my/names/${name}`).replace(/%20/g, '+')}`;
    const get = await call(java);
    assert.equal(get.status, 200);
    assert.equal(await get.text(), 'u');
    // A literal "+" in an ordinary path stays a "+".
    await call('/v1/data/.my/names/a+b', { method: 'PUT', body: 'plus' });
    assert.equal((await json(await call('/v1/data/.my/names'))).files.some((f: { filename: string }) => f.filename === 'a+b'), true);
  });

  test('trailing slashes are tolerated', async () => {
    assert.equal((await call('/v1/data/.my/docs/')).status, 200);
    assert.equal((await call('/v1/connector/data/.my/docs/')).status, 200);
  });

  test('other connectors are not connected: a clear 404 naming the source', async () => {
    for (const p of ['/v1/data/s3+mine://bucket/a.txt', '/v1/data/s3+mine:/bucket/a.txt', '/v1/connector/Dropbox+archimedes/x', '/v1/data/objstore://b/k']) {
      const res = await call(p);
      assert.equal(res.status, 404, p);
      const body = await json(res);
      assert.equal(body.error.code, 'unknown_connector', p);
    }
    // data:// spelled out inside the path is hosted data.
    assert.equal((await call('/v1/data/data://.my/docs')).status, 200);
  });

  test('file bodies cannot run as pages in our origin', async () => {
    await call('/v1/data/.my/docs/x.html', { method: 'PUT', body: '<script>alert(1)</script>' });
    const res = await call('/v1/data/.my/docs/x.html');
    assert.match(res.headers.get('content-security-policy') ?? '', /sandbox/);
    assert.equal(res.headers.get('x-content-type-options'), 'nosniff');
  });
});
