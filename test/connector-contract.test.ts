/**
 * One contract, every connector (issue 4): hosted data, objstore over the S3 protocol
 * (s3rver on loopback), filehost over WebDAV (rclone on loopback) and filehost over Dropbox's
 * HTTP API (a local stand-in that follows Dropbox's public documentation: the real service
 * cannot be reached from here). Each backend runs the same cases over real HTTP; a case a
 * backend cannot support is skipped with its reason.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { Readable } from 'node:stream';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { connectAccount, dataPath } from './helpers/connectors.ts';
import { S3RVER_KEY, startS3 } from './helpers/s3.ts';
import { rcloneMissing, startWebDav } from './helpers/webdav.ts';
import { startDropboxStandIn } from './helpers/dropboxStandIn.ts';

const PAGE = 3;
const DROPBOX_TOKEN = 'sl.contract-test-token';
const LIMIT = 8 * 1024 * 1024;

interface Backend {
  name: string;
  skip?: string;
  /** Why files may be written where no directory was made (object storage), if so. */
  implicitDirectories?: string;
  /** Prepares the backend for user `alice` and answers the base URI the cases work under. */
  setup(s: TestServer, key: string): Promise<string>;
  stop(): Promise<void>;
}

function s3Backend(): Backend {
  let stop = async () => {};
  return {
    name: 'objstore (S3 protocol, s3rver)',
    implicitDirectories: 'object storage has no real directories: a key\'s prefixes exist as soon as the key does',
    async setup(s, key) {
      const s3 = await startS3(['contract']);
      stop = s3.stop;
      await connectAccount(s, 'alice', key, { label: 'store', protocol: 'objstore', writeable: true, cred_data: { endpoint: s3.endpoint, ...S3RVER_KEY, force_path_style: true } });
      return 'objstore://contract';
    },
    stop: () => stop(),
  };
}

function webdavBackend(): Backend {
  let stop = async () => {};
  return {
    name: 'filehost (WebDAV, rclone)',
    ...(rcloneMissing() ? { skip: rcloneMissing()! } : {}),
    async setup(s, key) {
      const dav = await startWebDav({ user: 'alice', pass: 'dav-secret' });
      stop = dav.stop;
      await connectAccount(s, 'alice', key, { label: 'dav', protocol: 'filehost', provider: 'webdav', writeable: true, cred_data: { url: dav.url, username: 'alice', password: 'dav-secret' } });
      return 'filehost+dav://';
    },
    stop: () => stop(),
  };
}

function dropboxBackend(): Backend {
  return {
    name: 'filehost (Dropbox HTTP API, local stand-in)',
    async setup(s, key) {
      await connectAccount(s, 'alice', key, { label: 'box', protocol: 'filehost', provider: 'dropbox', writeable: true, cred_data: { access_token: DROPBOX_TOKEN } });
      return 'dropbox+box://';
    },
    stop: async () => {},
  };
}

function hostedBackend(): Backend {
  return {
    name: 'hosted data',
    async setup(s, key) {
      const r = await api(s.url, key)('/v1/data/.my', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'contract' });
      assert.equal(r.status, 200);
      return 'data://.my/contract';
    },
    stop: async () => {},
  };
}

function runSuite(backend: Backend, env: () => Record<string, string>): void {
  describe(backend.name, { skip: backend.skip ?? false }, () => {
    let s: TestServer;
    let call: ReturnType<typeof api>;
    let base: string;
    const at = (rel: string) => dataPath(rel === '' ? base : base.endsWith('://') ? base + rel : `${base}/${rel}`);
    const put = (rel: string, body: string | ReadableStream, headers: Record<string, string> = {}) =>
      call(at(rel), { method: 'PUT', body, headers, ...(body instanceof ReadableStream ? { duplex: 'half' } : {}) } as RequestInit);
    const mkdir = (parent: string, name: string) => call(at(parent), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name }) });
    const okJson = async (res: Promise<Response>) => {
      const r = await res;
      const body = await json(r);
      assert.equal(r.status, 200, JSON.stringify(body));
      return body;
    };

    before(async () => {
      s = await startServer({ hosted: { pageSize: PAGE }, connected: { pageSize: PAGE }, env: { ALGOHOST_CONNECTOR_NETWORK: 'any', ALGOHOST_MAX_UPLOAD_BYTES: String(LIMIT), ...env() } });
      const key = await s.user('alice');
      call = api(s.url, key);
      base = await backend.setup(s, key);
    });
    after(async () => {
      await s?.close();
      await backend.stop();
    });

    test('a file goes in and comes back: bytes, headers, content type by name', async () => {
      const uri = await okJson(put('hello.txt', 'hello, world'));
      assert.match(uri.result, /hello\.txt$/);
      let r = await call(at('hello.txt'));
      assert.equal(r.status, 200);
      assert.equal(await r.text(), 'hello, world');
      assert.equal(r.headers.get('x-data-type'), 'file');
      assert.match(r.headers.get('content-type') ?? '', /^text\/plain/);
      assert.ok(r.headers.get('etag'), 'an ETag');
      r = await call(at('hello.txt'), { method: 'HEAD' });
      assert.equal(r.status, 200);
      assert.equal(r.headers.get('content-length'), '12');
      await okJson(put('doc.json', '{"a":[1,2]}'));
      r = await call(at('doc.json'));
      assert.match(r.headers.get('content-type') ?? '', /^application\/json/);
      assert.deepEqual(await r.json(), { a: [1, 2] });
      // Replacing keeps one file with the new bytes.
      await okJson(put('hello.txt', 'bye'));
      assert.equal(await (await call(at('hello.txt'))).text(), 'bye');
    });

    test('ranges and conditional requests', async () => {
      await okJson(put('range.txt', '0123456789'));
      let r = await call(at('range.txt'), { headers: { range: 'bytes=2-5' } });
      assert.equal(r.status, 206);
      assert.equal(await r.text(), '2345');
      assert.equal(r.headers.get('content-range'), 'bytes 2-5/10');
      r = await call(at('range.txt'), { headers: { range: 'bytes=7-' } });
      assert.equal(await r.text(), '789');
      r = await call(at('range.txt'), { headers: { range: 'bytes=20-30' } });
      assert.equal(r.status, 416);
      await r.arrayBuffer();
      const etag = (await call(at('range.txt'), { method: 'HEAD' })).headers.get('etag')!;
      r = await call(at('range.txt'), { headers: { 'if-none-match': etag } });
      assert.equal(r.status, 304);
    });

    test('a multi-MiB body is streamed in (chunked) and out intact', async () => {
      const size = 3 * 1024 * 1024 + 123;
      const bytes = crypto.randomBytes(size);
      const chunks = Array.from({ length: Math.ceil(size / 65536) }, (_, i) => bytes.subarray(i * 65536, (i + 1) * 65536));
      const stream = Readable.toWeb(Readable.from(chunks)) as ReadableStream;
      await okJson(put('big.bin', stream));
      const r = await call(at('big.bin'));
      assert.equal(r.status, 200);
      const back = Buffer.from(await r.arrayBuffer());
      assert.equal(back.length, size);
      assert.equal(crypto.createHash('sha256').update(back).digest('hex'), crypto.createHash('sha256').update(bytes).digest('hex'));
    });

    test('a body over the upload limit is refused and leaves nothing behind', async () => {
      const chunk = Buffer.alloc(1024 * 1024, 1);
      const stream = Readable.toWeb(Readable.from(Array.from({ length: LIMIT / chunk.length + 1 }, () => chunk))) as ReadableStream;
      const r = await put('too-big.bin', stream).catch((err: Error) => err);
      if (r instanceof Response) {
        assert.equal(r.status, 413);
        assert.equal((await json(r)).error.code, 'payload_too_large');
      } // else: the server answered 413 and closed while the body was still being sent
      const head = await call(at('too-big.bin'), { method: 'HEAD' });
      assert.equal(head.status, 404);
    });

    test('directories: make, list, exists; duplicates and missing parents are errors', async () => {
      const made = await okJson(mkdir('', 'folder'));
      assert.match(made.result, /folder$/);
      let r = await call(at('folder'), { method: 'HEAD' });
      assert.equal(r.status, 200);
      assert.equal(r.headers.get('x-data-type'), 'directory');
      r = await mkdir('', 'folder');
      assert.equal(r.status, 409);
      assert.equal((await json(r)).error.code, 'already_exists');
      await okJson(put('folder/inner.txt', 'inner'));
      const listing = await okJson(call(at('folder')));
      assert.deepEqual(listing.files.map((f: { filename: string; size: number }) => [f.filename, f.size]), [['inner.txt', 5]]);
      assert.ok(!Number.isNaN(Date.parse(listing.files[0].last_modified)), 'an ISO timestamp');
      assert.equal(listing.folders, undefined, 'empty arrays are left out');
      // A file cannot replace a directory.
      r = await put('folder', 'x');
      assert.equal(r.status, 409);
      assert.equal((await json(r)).error.code, 'type_conflict');
    });

    test('no file or directory is made under a missing directory', { skip: backend.implicitDirectories ?? false }, async () => {
      let r = await mkdir('no-such-parent', 'x');
      assert.equal(r.status, 404);
      await r.arrayBuffer();
      r = await put('no-such-parent/x.txt', 'x');
      assert.equal(r.status, 404);
      assert.equal((await json(r)).error.code, 'not_found');
      assert.equal((await call(at('no-such-parent'), { method: 'HEAD' })).status, 404);
    });

    test('a file is not a directory: nothing is made under it', async () => {
      await okJson(put('plain.txt', 'plain'));
      let r = await put('plain.txt/under.txt', 'x');
      assert.equal(r.status, 409);
      assert.equal((await json(r)).error.code, 'type_conflict');
      r = await mkdir('plain.txt', 'sub');
      assert.equal(r.status, 409);
      await r.arrayBuffer();
    });

    test('missing paths are 404 with a message, on GET and HEAD', async () => {
      let r = await call(at('nothing-here.txt'));
      assert.equal(r.status, 404);
      const body = await json(r);
      assert.equal(body.error.code, 'not_found');
      assert.match(body.error.message, /nothing-here\.txt/);
      r = await call(at('nothing-here.txt'), { method: 'HEAD' });
      assert.equal(r.status, 404);
      assert.match(r.headers.get('x-error-message') ?? '', /nothing-here\.txt/);
    });

    test('paging: every entry exactly once, folders and files never in the same page, markers bound to their listing', async () => {
      await okJson(mkdir('', 'paged'));
      const folders = ['d1', 'd2', 'd3', 'd4'];
      const files = ['a.txt', 'b.txt', 'c.txt', 'e f.txt', 'g%h.txt', 'ü.txt', 'z.txt'];
      for (const f of folders) await okJson(mkdir('paged', f));
      for (const f of files) await okJson(put(`paged/${f}`, f));
      const seenFolders: string[] = [];
      const seenFiles: string[] = [];
      let marker: string | undefined;
      let pages = 0;
      let firstMarker: string | undefined;
      do {
        const page = await okJson(call(at('paged') + (marker ? `?marker=${encodeURIComponent(marker)}` : '')));
        pages++;
        assert.ok(!(page.folders && page.files), 'a page holds folders or files, not both');
        // The Python CLI reads a file's size and date from the first page of its directory.
        if (pages === 1) assert.ok(page.files?.length, `the first page holds files: ${JSON.stringify(page)}`);
        const n = (page.folders?.length ?? 0) + (page.files?.length ?? 0);
        assert.ok(n <= PAGE, `at most ${PAGE} entries per page, got ${n}`);
        for (const f of page.folders ?? []) seenFolders.push(f.name);
        for (const f of page.files ?? []) seenFiles.push(f.filename);
        marker = page.marker;
        firstMarker ??= marker;
      } while (marker && pages < 20);
      assert.deepEqual(seenFolders.sort(), folders);
      assert.deepEqual(seenFiles.sort(), [...files].sort());
      assert.ok(firstMarker, 'more than one page');
      // A marker is good for its own listing only, and cannot be forged.
      let r = await call(at('folder') + `?marker=${encodeURIComponent(firstMarker!)}`);
      assert.equal(r.status, 400);
      assert.equal((await json(r)).error.code, 'invalid_marker');
      r = await call(at('paged') + `?marker=${encodeURIComponent(firstMarker!.slice(0, -2) + 'xx')}`);
      assert.equal(r.status, 400);
      await r.arrayBuffer();
    });

    test('deletes: a file; a non-empty directory only with force, counting its files', async () => {
      await okJson(mkdir('', 'doomed'));
      await okJson(mkdir('doomed', 'sub'));
      await okJson(put('doomed/one.txt', '1'));
      await okJson(put('doomed/sub/two.txt', '2'));
      await okJson(put('doomed/sub/three.txt', '3'));
      let r = await call(at('doomed/one.txt'), { method: 'DELETE' });
      assert.deepEqual(await json(r), { result: { deleted: 1 } });
      r = await call(at('doomed/one.txt'), { method: 'HEAD' });
      assert.equal(r.status, 404);
      r = await call(at('doomed'), { method: 'DELETE' });
      assert.equal(r.status, 409);
      assert.equal((await json(r)).error.code, 'directory_not_empty');
      assert.equal((await call(at('doomed/sub/two.txt'), { method: 'HEAD' })).status, 200, 'nothing deleted by the refused request');
      // A made directory holding one file is not empty either (on S3 its marker object and the file share a listing).
      await okJson(mkdir('', 'kept'));
      await okJson(put('kept/f.txt', 'keep me'));
      r = await call(at('kept'), { method: 'DELETE' });
      assert.equal(r.status, 409);
      await r.arrayBuffer();
      assert.equal(await (await call(at('kept/f.txt'))).text(), 'keep me');
      r = await call(at('doomed') + '?force=true', { method: 'DELETE' });
      assert.deepEqual(await json(r), { result: { deleted: 2 } });
      r = await call(at('doomed'), { method: 'HEAD' });
      assert.equal(r.status, 404);
      r = await call(at('doomed'), { method: 'DELETE' });
      assert.equal(r.status, 404);
      await r.arrayBuffer();
    });
  });
}

// The stand-in runs for the whole file: the server finds Dropbox where its config says.
let dropbox: { apiUrl: string; contentUrl: string; stop(): Promise<void> } | undefined;
before(async () => {
  dropbox = await startDropboxStandIn({ token: DROPBOX_TOKEN });
});
after(async () => dropbox?.stop());
const dropboxEnv = (): Record<string, string> => (dropbox ? { ALGOHOST_DROPBOX_API_URL: dropbox.apiUrl, ALGOHOST_DROPBOX_CONTENT_URL: dropbox.contentUrl } : {});

for (const backend of [hostedBackend(), s3Backend(), webdavBackend(), dropboxBackend()]) runSuite(backend, dropboxEnv);
