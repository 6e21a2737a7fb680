import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { api, startServer, type TestServer } from './helpers/server.ts';

let s: TestServer;
let call: ReturnType<typeof api>;

/** Version v is `size(v)` bytes of the single byte v: a mix of two versions is detectable. */
const size = (v: number) => 256 * 1024 + v * 4099;
const version = (v: number) => Buffer.alloc(size(v), v);

before(async () => {
  s = await startServer();
  call = api(s.url, await s.user('alice'));
  await call('/v1/data/.my', { method: 'POST', body: 'c', headers: { 'content-type': 'text/plain' } });
  assert.equal((await call('/v1/data/.my/c/f.bin', { method: 'PUT', body: version(1) })).status, 200);
});
after(() => s.close());

test('readers racing with replacements see one whole version, never a mix', async () => {
  const VERSIONS = 12;
  let writing = true;
  const seen = new Set<number>();
  const writer = (async () => {
    for (let v = 2; v <= VERSIONS; v++) {
      const res = await call('/v1/data/.my/c/f.bin', { method: 'PUT', body: version(v) });
      assert.equal(res.status, 200);
    }
    writing = false;
  })();
  const reader = async () => {
    let reads = 0;
    while ((writing || reads < 5) && reads < 500) {
      const res = await call('/v1/data/.my/c/f.bin');
      assert.equal(res.status, 200, 'a file being replaced never disappears');
      const body = Buffer.from(await res.arrayBuffer());
      const v = body[0]!;
      assert.equal(body.length, size(v), `length matches version ${v}`);
      assert.equal(Number(res.headers.get('content-length')), size(v), 'header and body agree');
      assert.ok(body.every((b) => b === v), `every byte belongs to version ${v}`);
      seen.add(v);
      reads++;
    }
  };
  await Promise.all([writer, reader(), reader(), reader(), reader()]);
  assert.ok(seen.size >= 2, `readers saw several versions (${[...seen].join(',')})`);
  const final = Buffer.from(await (await call('/v1/data/.my/c/f.bin')).arrayBuffer());
  assert.deepEqual(final, version(VERSIONS));
  // Every replaced version's contents were released: one blob on disk, nothing pending.
  const blobs: string[] = [];
  for await (const id of s.services.blobs.list()) blobs.push(id);
  assert.equal(blobs.length, 1);
  assert.deepEqual(await s.services.store.db.selectFrom('pending_blobs').selectAll().execute(), []);
});
