/**
 * The client SDK's data API (client/src/file.ts, dir.ts) against a real server: every kind of
 * put and get, streams both ways, listings across pages, ACLs, deletes and their errors; all
 * of it over both transports (node:http, and fetch as in a browser), each with its own server.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { HOME_FILES_ONLY } from './helpers/backends.ts';
import { startServer, type TestServer } from './helpers/server.ts';
import { rejects } from './helpers/rejects.ts';
import { TRANSPORTS, bytesOf, makeClient, type AnyClient } from './helpers/clients.ts';
import { ACLS, AlgohostError, ApiError, aclLevel, type DataEntry } from '../client/src/index.ts';

let s: TestServer;
let alice: AnyClient;
let bob: AnyClient;
let aliceKey: string;

async function collect<T>(iter: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of iter) out.push(x);
  return out;
}

for (const kind of TRANSPORTS) describe(`over the ${kind} transport`, () => {
  before(async () => {
    // Three entries a page: paging is exercised with a handful of files.
    s = await startServer({ hosted: { pageSize: 3 } });
    aliceKey = await s.user('alice');
    alice = makeClient(kind, { baseUrl: s.url, apiKey: aliceKey });
    bob = makeClient(kind, { baseUrl: s.url, apiKey: await s.user('bob') });
    assert.equal(await alice.dir('data://.my/c').create(), 'data://alice/c');
  });
  after(() => s.close());

  /**
   * Alice's client for uploads that must stream: fetch sends a stream as it is read only when
   * told to (browsers do it over HTTP/2 alone), and gathers it into a Blob otherwise.
   */
  const streaming = () => (kind === 'node' ? alice : makeClient(kind, { baseUrl: s.url, apiKey: aliceKey }, { streamingUploads: true }));

  describe('files', () => {
    test('put and get every kind of content', async () => {
      const f = (name: string) => alice.file(`data://.my/c/${name}`);
      assert.equal(await f('a.txt').put('héllo'), 'data://alice/c/a.txt');
      assert.equal(await f('a.txt').text(), 'héllo');
      const bytes = Buffer.from([0, 1, 2, 254, 255]);
      await f('b.bin').put(bytes);
      assert.deepEqual(bytesOf(kind, await f('b.bin').get()), bytes);
      assert.deepEqual(bytesOf(kind, await f('b.bin').buffer()), bytes);
      await f('u8.bin').put(new Uint8Array([7, 8, 9]).subarray(1));
      assert.deepEqual(bytesOf(kind, await f('u8.bin').buffer()), Buffer.from([8, 9]));
      await f('ab.bin').put(new Uint8Array([5, 6]).buffer);
      assert.deepEqual(bytesOf(kind, await f('ab.bin').buffer()), Buffer.from([5, 6]));
      await f('o.json').put({ a: [1, { b: null }] });
      assert.deepEqual(await f('o.json').json(), { a: [1, { b: null }] });
      await f('n.json').put(42);
      assert.equal(await f('n.json').json(), 42);
      await f('s.json').putJson('a string');
      assert.equal(await f('s.json').text(), '"a string"');
      assert.equal(await f('s.json').json(), 'a string');
      await f('node.txt').put(Readable.from([Buffer.from('node '), Buffer.from('stream')]));
      assert.equal(await f('node.txt').text(), 'node stream');
      await f('web.txt').put(new Blob(['web ', 'stream']).stream());
      assert.equal(await f('web.txt').text(), 'web stream');
      await f('blob.txt').put(new Blob(['a blob']));
      assert.equal(await f('blob.txt').text(), 'a blob');
      await f('gen.txt').put((async function* () {
        yield new TextEncoder().encode('async ');
        yield new TextEncoder().encode('iterable');
      })());
      assert.equal(await f('gen.txt').text(), 'async iterable');
      await f('a.txt').put('replaced');
      assert.equal(await f('a.txt').text(), 'replaced');
      const notJson = await rejects(f('a.txt').json(), AlgohostError);
      assert.equal(notJson.code, 'invalid_json');
    });

    test('names with spaces, #, ?, % and non-ASCII survive the round trip', async () => {
      const name = 'a b#c?d%20é+.txt';
      assert.equal(await alice.dir('data://.my/c').file(name).put('odd'), `data://alice/c/${name}`);
      assert.equal(await alice.file(`data://.my/c/${name}`).text(), 'odd');
      const names = (await collect(alice.dir('data://.my/c').files())).map((e) => e.name);
      assert.ok(names.includes(name), names.join(', '));
      assert.equal(await alice.file(`.my/c/${name}`).text(), 'odd', 'no scheme: hosted data');
    });

    test('a multi-MiB put streams (the server has bytes before the body ends) and reads back intact', { skip: HOME_FILES_ONLY }, async () => {
      const size = 24 * 1024 * 1024;
      const chunk = 1024 * 1024;
      const sent = crypto.createHash('sha256');
      const tmp = path.join(s.home, 'data', 'tmp');
      const uploading = () => fs.readdirSync(tmp).some((n) => fs.statSync(path.join(tmp, n)).size >= 8 * chunk);
      async function* body() {
        for (let i = 0; i < size / chunk; i++) {
          const block = crypto.createHash('sha512').update(String(i)).digest();
          const data = Buffer.alloc(chunk);
          for (let o = 0; o < chunk; o += block.length) block.copy(data, o);
          if (i === size / chunk - 1) {
            // A client that gathered the body before sending would never get here: wait for
            // the server to hold a good part of the upload already.
            for (let t = 0; !uploading(); t++) {
              if (t > 200) throw new Error('the server received nothing while the body was still being produced');
              await sleep(25);
            }
          }
          sent.update(data);
          yield data;
        }
      }
      const file = streaming().file('data://.my/c/big.bin');
      await file.put(Readable.from(body()), { size });
      const stat = await file.stat();
      assert.equal(stat.size, size);
      assert.match(stat.etag ?? '', /.+/);
      assert.ok(stat.lastModified instanceof Date && !Number.isNaN(stat.lastModified.getTime()));
      const got = crypto.createHash('sha256');
      let chunks = 0;
      // A Node Readable, or a web ReadableStream (async iterable in Node too).
      for await (const c of (await file.stream()) as AsyncIterable<Uint8Array>) {
        got.update(c);
        chunks++;
      }
      assert.equal(got.digest('hex'), sent.digest('hex'));
      assert.ok(chunks > 1, 'the download came in pieces');
      // Ranges: a slice, and the tail.
      const head = bytesOf(kind, await file.buffer({ range: { start: 10, end: 19 } }));
      const whole = bytesOf(kind, await file.buffer());
      assert.deepEqual(head, whole.subarray(10, 20));
      assert.deepEqual(bytesOf(kind, await file.buffer({ range: { start: size - 5 } })), whole.subarray(size - 5));
    });

    test('a refused stream upload rejects at once and releases its source; a failing source rejects with its error', async () => {
      let produced = 0;
      let released = false;
      const endless = new Readable({
        read() {
          produced++;
          this.push(Buffer.alloc(1024 * 1024));
        },
        destroy(err, cb) {
          released = true;
          cb(err);
        },
      });
      const err = await rejects(streaming().file('data://.my/nowhere/x.bin').put(endless), ApiError);
      assert.equal(err.code, 'not_found');
      assert.ok(released, 'the source stream was destroyed');
      assert.ok(produced < 64, `the source stopped early (${produced} MiB read)`);
      const missing = fs.createReadStream(path.join(s.home, 'no-such-file'));
      await assert.rejects(streaming().file('data://.my/c/from-missing.bin').put(missing), (e: NodeJS.ErrnoException) => e.code === 'ENOENT');
      assert.equal(await alice.file('data://.my/c/from-missing.bin').exists(), false);
    });

    test('exists, stat, delete, and the server\'s errors', async () => {
      const file = alice.file('data://.my/c/gone.txt');
      await file.put('x');
      assert.equal(await file.exists(), true);
      assert.equal(await alice.file('data://.my/c').exists(), false, 'a directory is not a file');
      assert.equal(await file.delete(), 1);
      assert.equal(await file.exists(), false);
      let err = await rejects(file.text(), ApiError);
      assert.equal(err.status, 404);
      assert.equal(err.code, 'not_found');
      assert.match(err.message, /gone\.txt/);
      assert.match(err.requestId ?? '', /^req-/);
      err = await rejects(file.stat(), ApiError);
      assert.equal(err.code, 'not_found', 'a HEAD failure still carries the code');
      assert.match(err.message, /gone\.txt/);
      err = await rejects(file.delete(), ApiError);
      assert.equal(err.code, 'not_found');
      err = await rejects(alice.file('data://.my/nowhere/x.txt').put('x'), ApiError);
      assert.equal(err.code, 'not_found');
      err = await rejects(bob.file('data://alice/c/a.txt').put('mine'), ApiError);
      assert.equal(err.code, 'write_denied');
      assert.equal(err.status, 403);
      const conflict = await rejects(alice.file('data://.my/c').text(), AlgohostError);
      assert.equal(conflict.code, 'type_conflict');
      err = await rejects(alice.file('objstore+nothere://bucket/x.txt').text(), ApiError);
      assert.equal(err.code, 'unknown_connector', 'connected accounts go to /v1/connector/<name>');
    });
  });

  describe('directories', () => {
    test('create, exists, and errors', async () => {
      const d = alice.dir('data://.my/c/sub');
      assert.equal(await d.exists(), false);
      assert.equal(await d.create(), 'data://alice/c/sub');
      assert.equal(await d.exists(), true);
      assert.equal(await alice.dir('data://.my/c/a.txt').exists(), false, 'a file is not a directory');
      const again = await rejects(d.create(), ApiError);
      assert.equal(again.code, 'already_exists');
      assert.equal(again.status, 409);
      await rejects(alice.dir('data://').create(), AlgohostError);
      const listed = await rejects(alice.dir('data://.my/c/a.txt').page(), AlgohostError);
      assert.equal(listed.code, 'type_conflict');
    });

    test('list follows the marker through every page; files() and dirs(); page()', async () => {
      const d = alice.dir('data://.my/many');
      await d.create();
      const dirs = ['d1', 'd2', 'd3', 'd4'];
      const files = ['f1.txt', 'f2.txt', 'f3.txt', 'f4.txt', 'f5.txt', 'f6.txt', 'f7.txt'];
      for (const n of dirs) await d.dir(n).create();
      for (const [i, n] of files.entries()) await d.file(n).put('x'.repeat(i));
      const first = await d.page();
      assert.deepEqual(first.files?.map((f) => f.filename), ['f1.txt', 'f2.txt', 'f3.txt'], 'file pages come first');
      assert.equal(first.folders, undefined);
      assert.ok(first.marker, 'a first page of three has a marker');
      const entries: DataEntry[] = await collect(d.list());
      assert.deepEqual(entries.map((e) => `${e.type}:${e.name}`), [...files.map((n) => `file:${n}`), ...dirs.map((n) => `dir:${n}`)]);
      const f3 = entries.find((e) => e.name === 'f3.txt');
      assert.ok(f3?.type === 'file');
      assert.equal(f3.size, 2);
      assert.equal(f3.uri, 'data://.my/many/f3.txt');
      assert.ok(Math.abs(f3.lastModified.getTime() - Date.now()) < 60_000);
      assert.deepEqual((await collect(d.files())).map((e) => e.name), files);
      assert.deepEqual((await collect(d.dirs())).map((e) => e.uri), dirs.map((n) => `data://.my/many/${n}`));
      const roots = (await collect(alice.dir('data://.my').dirs())).map((e) => e.name);
      assert.deepEqual(roots, ['c', 'many']);

      await d.dir('d1').file('inner.txt').put('in');
      const notEmpty = await rejects(d.delete(), ApiError);
      assert.equal(notEmpty.code, 'directory_not_empty');
      assert.equal(await d.exists(), true, 'a refused delete changes nothing');
      assert.equal(await d.delete({ force: true }), files.length + 1);
      assert.equal(await d.exists(), false);
      assert.equal(await alice.dir('data://.my/c/sub').delete(), 0, 'an empty directory needs no force');
    });

    test('ACLs: set at creation, read, changed; they decide what others read', async () => {
      const pub = alice.dir('data://.my/pub');
      await pub.create({ acl: 'public' });
      assert.deepEqual(await pub.getAcl(), ACLS.public);
      await pub.file('hello.txt').put('for everyone');
      assert.equal(await bob.file('data://alice/pub/hello.txt').text(), 'for everyone');
      await pub.setAcl('private');
      assert.deepEqual(await pub.getAcl(), { read: [] });
      assert.equal(aclLevel(await pub.getAcl()), 'private');
      const hidden = await rejects(bob.file('data://alice/pub/hello.txt').text(), ApiError);
      assert.equal(hidden.code, 'not_found');
      assert.equal(await bob.file('data://alice/pub/hello.txt').exists(), false);
      await pub.setAcl({ read: ['user://*'] });
      assert.equal(await bob.file('data://alice/pub/hello.txt').exists(), true);
      const dflt = alice.dir('data://.my/dflt');
      await dflt.create();
      assert.equal(aclLevel(await dflt.getAcl()), 'my_algorithms');
      const bad = await rejects(dflt.setAcl({ read: ['user://bob'] }), ApiError);
      assert.equal(bad.code, 'invalid_acl');
      assert.equal(aclLevel({ read: ['user://bob'] }), undefined);
    });
  });
});
