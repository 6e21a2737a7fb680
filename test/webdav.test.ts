/**
 * The WebDAV provider of connected storage against a real server (rclone serve webdav on
 * loopback), plus small local servers for what rclone never does: ignore Range, stall, answer
 * XML of other shapes. Network only to 127.0.0.1.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { inspect } from 'node:util';
import { WebDavStorage } from '../src/data/connectors/webdav.ts';
import { RemoteError, type RemotePage } from '../src/data/connectors/remote.ts';
import { rcloneMissing, startWebDav, type WebDavServer } from './helpers/webdav.ts';

const USER = 'alice';
const PASS = 'dav-Pa55-w0rd';
const signal = () => AbortSignal.timeout(10_000);

async function remoteError(p: Promise<unknown>): Promise<RemoteError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof RemoteError, `expected a RemoteError, got ${inspect(err)}`);
    return err;
  }
  assert.fail('expected a rejection');
}

async function bytes(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

const sha = (b: Buffer) => crypto.createHash('sha256').update(b).digest('hex');
const byteOrder = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));

/** A body that sends `chunks` pieces of 64 KiB, then fails (with `error`, or just closes) as a client going away would. */
function failingBody(chunks: number, error?: Error): Readable {
  let sent = 0;
  return new Readable({
    read() {
      if (sent++ < chunks) setImmediate(() => this.push(crypto.randomBytes(64 * 1024)));
      else setImmediate(() => this.destroy(error));
    },
  });
}

describe('WebDavStorage against rclone serve webdav', { skip: rcloneMissing() }, () => {
  let dav: WebDavServer;
  let store: WebDavStorage;
  const disk = (...p: string[]) => path.join(dav.root, ...p);
  const put = (rel: string, content: string | Buffer) => {
    fs.mkdirSync(path.dirname(disk(rel)), { recursive: true });
    fs.writeFileSync(disk(rel), content);
  };

  before(async () => {
    dav = await startWebDav({ user: USER, pass: PASS });
    store = new WebDavStorage({ url: dav.url, username: USER, password: PASS });
  });
  after(() => dav?.stop());

  test('stat: a file, a directory, the root, nothing', async () => {
    put('stat/hello.txt', 'hello world');
    fs.mkdirSync(disk('stat', 'sub'));
    const f = await store.stat(['stat', 'hello.txt'], signal());
    assert.ok(f?.kind === 'file');
    assert.equal(f.size, 11);
    assert.ok(Math.abs(f.modified - fs.statSync(disk('stat', 'hello.txt')).mtimeMs) < 2000, `modified ${f.modified}`);
    assert.match(f.etag, /.+/);
    assert.match(f.contentType ?? '', /^text\/plain/);
    assert.deepEqual(await store.stat(['stat', 'sub'], signal()), { kind: 'dir' });
    assert.deepEqual(await store.stat([], signal()), { kind: 'dir' });
    assert.equal(await store.stat(['stat', 'nope'], signal()), undefined);
    assert.equal(await store.stat(['stat', 'hello.txt', 'below'], signal()), undefined);
    put('stat/hello.txt', 'hello again, longer');
    const changed = await store.stat(['stat', 'hello.txt'], signal());
    assert.ok(changed?.kind === 'file');
    assert.notEqual(changed.etag, f.etag);
  });

  test('list pages: every entry exactly once, files first, byte order, tokens repeatable', async () => {
    const folders = ['b dir', 'a%dir', 'ü dir', 'Z#dir'];
    // '😀' (U+1F600) sorts after 'ｚ' (U+FF5A) in byte order but before it in UTF-16 order.
    const files = ['a b.txt', '100%.txt', 'x#y.txt', 'q?.txt', 'ünï cödé.txt', '😀.txt', 'ｚ.txt', 'z.txt', "it's (1).txt", '+plus&amp;.txt', 'self'];
    for (const d of folders) fs.mkdirSync(disk('paged', d), { recursive: true });
    files.forEach((f, i) => put(path.join('paged', f), 'x'.repeat(i + 1)));
    const expected = [...[...files].sort(byteOrder).map((n) => `f:${n}`), ...[...folders].sort(byteOrder).map((n) => `d:${n}`)];

    const seen: string[] = [];
    const pages: { token: string | undefined; page: RemotePage }[] = [];
    let token: string | undefined;
    for (let i = 0; i < 50; i++) {
      const page = await store.list(['paged'], token, 3, signal());
      assert.ok(page.folders.length + page.files.length <= 3);
      pages.push({ token, page });
      seen.push(...page.files.map((f) => `f:${f.name}`), ...page.folders.map((n) => `d:${n}`));
      for (const f of page.files) assert.equal(f.size, files.indexOf(f.name) + 1, f.name);
      token = page.next;
      if (!token) break;
    }
    assert.deepEqual(seen, expected);
    assert.equal(pages.length, Math.ceil(expected.length / 3));
    for (const { token: t, page } of pages) assert.deepEqual(await store.list(['paged'], t, 3, signal()), page);

    // `next` exactly when more remain: a page holding the last entries has none.
    const all = await store.list(['paged'], undefined, expected.length, signal());
    assert.equal(all.next, undefined);
    assert.equal(all.folders.length + all.files.length, expected.length);
    const short = await store.list(['paged'], undefined, expected.length - 1, signal());
    assert.ok(short.next);
    const rest = await store.list(['paged'], short.next, 100, signal());
    assert.deepEqual(rest, { folders: [rest.folders[0]], files: [] });
    assert.equal(`d:${rest.folders[0]}`, expected.at(-1));

    assert.deepEqual(await store.list(['paged', 'b dir'], undefined, 10, signal()), { folders: [], files: [] });
  });

  test('list: a token survives its entry being deleted; a larger directory pages fully', async () => {
    for (let i = 0; i < 120; i++) put(`many/f${String(i).padStart(3, '0')}.bin`, '');
    const first = await store.list(['many'], undefined, 7, signal());
    assert.equal(first.files.at(-1)?.name, 'f006.bin');
    fs.rmSync(disk('many', 'f006.bin'));
    const second = await store.list(['many'], first.next, 7, signal());
    assert.equal(second.files[0]?.name, 'f007.bin');

    const names = new Set<string>();
    let token: string | undefined;
    let pagesRead = 0;
    do {
      const page = await store.list(['many'], token, 7, signal());
      for (const f of page.files) {
        assert.ok(!names.has(f.name), `${f.name} twice`);
        names.add(f.name);
      }
      token = page.next;
    } while (token && ++pagesRead < 100);
    assert.equal(names.size, 119);
  });

  test('list: a missing directory, a file, a forged token', async () => {
    put('lists/file.txt', 'x');
    assert.equal((await remoteError(store.list(['lists', 'nope'], undefined, 10, signal()))).kind, 'not_found');
    assert.equal((await remoteError(store.list(['lists', 'file.txt'], undefined, 10, signal()))).kind, 'conflict');
    assert.equal((await remoteError(store.list(['lists'], 'not a token!', 10, signal()))).kind, 'invalid');
  });

  test('read: whole files and ranges', async () => {
    const content = crypto.randomBytes(1000);
    put('read/data.bin', content);
    const p = ['read', 'data.bin'];
    assert.deepEqual(await bytes(await store.read(p, undefined, signal())), content);
    assert.deepEqual(await bytes(await store.read(p, { start: 0, end: 0 }, signal())), content.subarray(0, 1));
    assert.deepEqual(await bytes(await store.read(p, { start: 10, end: 19 }, signal())), content.subarray(10, 20));
    assert.deepEqual(await bytes(await store.read(p, { start: 999, end: 999 }, signal())), content.subarray(999));
    // Past the end, HTTP answers what there is.
    assert.deepEqual(await bytes(await store.read(p, { start: 990, end: 5000 }, signal())), content.subarray(990));
    assert.equal((await remoteError(store.read(p, { start: 2000, end: 2010 }, signal()))).kind, 'invalid');
    assert.equal((await remoteError(store.read(['read', 'nope.bin'], undefined, signal()))).kind, 'not_found');
  });

  test('read: cancelling the signal stops a download midway', async () => {
    put('read/big.bin', crypto.randomBytes(16 * 1024 * 1024));
    const ac = new AbortController();
    const stream = await store.read(['read', 'big.bin'], undefined, ac.signal);
    let received = 0;
    const err = await remoteError(
      (async () => {
        for await (const chunk of stream) {
          received += (chunk as Buffer).length;
          ac.abort();
        }
      })(),
    );
    assert.equal(err.kind, 'unreachable');
    assert.ok(received < 16 * 1024 * 1024, `received ${received}`);
  });

  test('write: a few MiB streamed, read back identical, no temporary file left', async () => {
    fs.mkdirSync(disk('up'));
    const chunks = Array.from({ length: 64 }, () => crypto.randomBytes(64 * 1024));
    const whole = Buffer.concat(chunks);
    await store.write(['up', 'big file.bin'], Readable.from(chunks), signal());
    assert.equal(sha(fs.readFileSync(disk('up', 'big file.bin'))), sha(whole));
    assert.equal(sha(await bytes(await store.read(['up', 'big file.bin'], undefined, signal()))), sha(whole));
    await store.write(['up', 'big file.bin'], Readable.from([Buffer.from('small now')]), signal());
    assert.equal(fs.readFileSync(disk('up', 'big file.bin'), 'utf8'), 'small now');
    assert.deepEqual(fs.readdirSync(disk('up')), ['big file.bin']);
  });

  test('write: a body that errors midway leaves neither a truncated file nor a damaged one', async () => {
    put('aborted/keep.txt', 'old content');
    const boom = new Error('the client went away');
    const err = await store.write(['aborted', 'new.bin'], failingBody(16, boom), signal()).then(() => undefined, (e: unknown) => e);
    assert.equal(err, boom);
    const err2 = await store.write(['aborted', 'keep.txt'], failingBody(16, boom), signal()).then(() => undefined, (e: unknown) => e);
    assert.equal(err2, boom);
    const closed = await store.write(['aborted', 'closed.bin'], failingBody(16), signal()).then(() => undefined, (e: unknown) => e);
    assert.ok(closed instanceof Error && !(closed instanceof RemoteError), inspect(closed));
    assert.match(closed.message, /stopped before its end/);
    assert.equal(fs.readFileSync(disk('aborted', 'keep.txt'), 'utf8'), 'old content');
    assert.equal(await store.stat(['aborted', 'new.bin'], signal()), undefined);
    // The temporary uploads are gone by the time write has failed.
    assert.deepEqual(fs.readdirSync(disk('aborted')), ['keep.txt']);
  });

  test('write: a body that stalls ends with the signal; a directory in the way stays', async () => {
    fs.mkdirSync(disk('stall', 'dir'), { recursive: true });
    put('stall/dir/inside.txt', 'precious');
    const stalled = new Readable({ read() {} });
    stalled.push(Buffer.alloc(1024));
    const started = Date.now();
    assert.equal((await remoteError(store.write(['stall', 'never.bin'], stalled, AbortSignal.timeout(300)))).kind, 'timeout');
    assert.ok(Date.now() - started < 5000);
    assert.equal(await store.stat(['stall', 'never.bin'], signal()), undefined);
    const err = await remoteError(store.write(['stall', 'dir'], Readable.from([Buffer.from('x')]), signal()));
    assert.equal(err.kind, 'conflict');
    assert.equal(fs.readFileSync(disk('stall', 'dir', 'inside.txt'), 'utf8'), 'precious');
  });

  test('mkdir: creates, refuses where a file is or the parent is missing', async () => {
    put('mk/file.txt', 'x');
    await store.mkdir(['mk', 'new dir'], signal());
    assert.ok(fs.statSync(disk('mk', 'new dir')).isDirectory());
    assert.equal((await remoteError(store.mkdir(['mk', 'file.txt'], signal()))).kind, 'conflict');
    assert.equal((await remoteError(store.mkdir(['mk', 'nope', 'child'], signal()))).kind, 'conflict');
    assert.equal((await remoteError(store.mkdir([], signal()))).kind, 'conflict');
  });

  test('deleteFile: deletes a file, never a directory', async () => {
    put('delf/a.txt', 'x');
    put('delf/dir/b.txt', 'x');
    await store.deleteFile(['delf', 'a.txt'], signal());
    assert.equal(fs.existsSync(disk('delf', 'a.txt')), false);
    assert.equal((await remoteError(store.deleteFile(['delf', 'a.txt'], signal()))).kind, 'not_found');
    assert.equal((await remoteError(store.deleteFile(['delf', 'dir'], signal()))).kind, 'conflict');
    assert.ok(fs.existsSync(disk('delf', 'dir', 'b.txt')));
  });

  test('deleteDir: counts the files of the whole tree, then deletes it', async () => {
    for (const f of ['a.txt', 'b.txt', 'c d.txt', 'sub/d.txt', 'sub/e.txt', 'sub/deeper/f.txt']) put(`deld/tree/${f}`, 'x');
    fs.mkdirSync(disk('deld', 'tree', 'empty'));
    put('deld/file.txt', 'x');
    assert.equal(await store.deleteDir(['deld', 'tree'], signal()), 6);
    assert.equal(fs.existsSync(disk('deld', 'tree')), false);
    assert.equal((await remoteError(store.deleteDir(['deld', 'tree'], signal()))).kind, 'not_found');
    assert.equal((await remoteError(store.deleteDir(['deld', 'file.txt'], signal()))).kind, 'conflict');
    assert.ok(fs.existsSync(disk('deld', 'file.txt')));
  });

  test('credentials: a wrong password is denied without the password in the error; URL credentials work', async () => {
    const wrong = 'Wr0ng-s3cret-pw';
    const err = await remoteError(new WebDavStorage({ url: dav.url, username: USER, password: wrong }).list([], undefined, 10, signal()));
    assert.equal(err.kind, 'denied');
    const shown = inspect(err, { depth: 10 }) + err.message;
    for (const secret of [wrong, Buffer.from(`${USER}:${wrong}`).toString('base64'), 'Basic']) assert.ok(!shown.includes(secret), shown);
    assert.equal((await remoteError(new WebDavStorage({ url: dav.url }).list([], undefined, 10, signal()))).kind, 'denied');
    fs.mkdirSync(disk('creds'));
    const inUrl = dav.url.replace('http://', `http://${USER}:${encodeURIComponent(PASS)}@`);
    assert.ok((await new WebDavStorage({ url: inUrl }).list([], undefined, 1000, signal())).folders.includes('creds'));
  });

  test('an account rooted below the server root, with or without a trailing slash', async () => {
    put('base dir/inner/x y.txt', 'hello');
    for (const url of [`${dav.url}base%20dir`, `${dav.url}base%20dir/`]) {
      const sub = new WebDavStorage({ url, username: USER, password: PASS });
      assert.deepEqual(await sub.list([], undefined, 10, signal()), { folders: ['inner'], files: [] });
      const page = await sub.list(['inner'], undefined, 10, signal());
      assert.deepEqual(page.files.map((f) => f.name), ['x y.txt']);
      assert.equal(((await sub.stat(['inner', 'x y.txt'], signal())) as { size: number }).size, 5);
    }
  });
});

describe('WebDavStorage and servers that fail or misbehave', () => {
  let server: http.Server;
  let url = '';
  let handle: (req: http.IncomingMessage, res: http.ServerResponse) => void = (_req, res) => res.end();

  before(async () => {
    server = http.createServer((req, res) => handle(req, res));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    url = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/dav`;
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  test('a closed port is unreachable', async () => {
    const probe = net.createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const port = (probe.address() as net.AddressInfo).port;
    await new Promise((resolve) => probe.close(resolve));
    const err = await remoteError(new WebDavStorage({ url: `http://127.0.0.1:${port}/`, password: 'x' }).list([], undefined, 10, signal()));
    assert.equal(err.kind, 'unreachable');
  });

  test('a server that accepts and never answers times out with the signal', async () => {
    const sockets = new Set<net.Socket>();
    const silent = net.createServer((socket) => sockets.add(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      const started = Date.now();
      const store = new WebDavStorage({ url: `http://127.0.0.1:${(silent.address() as net.AddressInfo).port}/` });
      assert.equal((await remoteError(store.list([], undefined, 10, AbortSignal.timeout(300)))).kind, 'timeout');
      assert.ok(Date.now() - started < 5000);
    } finally {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  test('a download that stalls midway ends with the signal', async () => {
    handle = (_req, res) => {
      res.writeHead(200, { 'content-length': '1000' });
      res.write(Buffer.alloc(100));
    };
    const stream = await new WebDavStorage({ url }).read(['x'], undefined, AbortSignal.timeout(300));
    assert.equal((await remoteError(bytes(stream))).kind, 'timeout');
  });

  test('a server that ignores Range: the provider trims; a wrong Content-Range is refused', async () => {
    const content = Buffer.from('0123456789abcdefghij');
    handle = (_req, res) => res.end(content);
    assert.equal((await bytes(await new WebDavStorage({ url }).read(['x'], { start: 5, end: 9 }, signal()))).toString(), '56789');
    handle = (_req, res) => {
      res.writeHead(206, { 'content-range': 'bytes 0-4/20' });
      res.end(content.subarray(0, 5));
    };
    assert.equal((await remoteError(new WebDavStorage({ url }).read(['x'], { start: 5, end: 9 }, signal()))).kind, 'bad_answer');
  });

  test('multistatus of another shape, sent a few bytes at a time: default namespace, absolute URLs, entities, CDATA', async () => {
    const base = `${url.replace('/dav', '')}/dav/d%C3%AEr`;
    const xml = `<?xml version="1.0"?><!-- a comment --><multistatus xmlns="DAV:" xmlns:x="urn:other">
      <response><href>${base}/</href><propstat><prop><resourcetype><collection/></resourcetype></prop><status>HTTP/1.1 200 OK</status></propstat></response>
      <response><href>/dav/d%C3%AEr/a%20%26%20b.txt</href><propstat><prop><getcontentlength>42</getcontentlength><x:href>/elsewhere</x:href></prop><status>HTTP/1.1 200 OK</status></propstat>
        <propstat><prop><resourcetype><collection/></resourcetype></prop><status>HTTP/1.1 404 Not Found</status></propstat></response>
      <response><href><![CDATA[${base}/sub%20dir]]></href><propstat><prop><resourcetype><collection/></resourcetype></prop><status>HTTP/1.1 200 OK</status></propstat></response>
      <response><href>${base}/gone.txt</href><status>HTTP/1.1 404 Not Found</status></response>
      <response><href>${base}/sub%20dir/deeper.txt</href><propstat><prop/><status>HTTP/1.1 200 OK</status></propstat></response>
      <response><href>${base}/q&amp;a%3F.txt</href><propstat><prop><getcontentlength>7</getcontentlength></prop><status>HTTP/1.1 200 OK</status></propstat></response>
    </multistatus>`;
    handle = (req, res) => {
      assert.equal(req.method, 'PROPFIND');
      res.writeHead(207, { 'content-type': 'application/xml' });
      const body = Buffer.from(xml);
      let at = 0;
      const next = () => (at < body.length ? res.write(body.subarray(at, (at += 7)), () => setImmediate(next)) : res.end());
      next();
    };
    const page = await new WebDavStorage({ url }).list(['dîr'], undefined, 10, signal());
    assert.deepEqual(page.folders, ['sub dir']);
    assert.deepEqual(page.files.map((f) => [f.name, f.size]), [['a & b.txt', 42], ['q&a?.txt', 7]]);
  });

  test('a server out of space answers before reading the body: too_large, and the upload is abandoned', async () => {
    // A raw server: answers 507 at the first bytes, then stops reading, as a proxy might.
    const full = net.createServer((socket) => {
      socket.once('data', () => {
        socket.write('HTTP/1.1 507 Insufficient Storage\r\ncontent-length: 0\r\n\r\n');
        socket.pause();
      });
    });
    await new Promise<void>((resolve) => full.listen(0, '127.0.0.1', resolve));
    try {
      const total = 256; // chunks of 256 KiB: 64 MiB, far more than socket buffers hold
      let pulled = 0;
      const body = new Readable({
        read() {
          if (pulled++ < total) this.push(Buffer.alloc(256 * 1024));
          else this.push(null);
        },
      });
      const store = new WebDavStorage({ url: `http://127.0.0.1:${(full.address() as net.AddressInfo).port}/` });
      assert.equal((await remoteError(store.write(['full.bin'], body, signal()))).kind, 'too_large');
      // The rest of the body is not read (undici would drain it to its end), and the body is
      // left to its owner, who still has a client to answer.
      await sleep(300);
      assert.ok(pulled < total, `pulled ${pulled} of ${total} chunks`);
      assert.equal(body.destroyed, false);
    } finally {
      full.close();
    }
  });

  test('answers we cannot use are bad answers; redirects are not followed', async () => {
    const store = new WebDavStorage({ url });
    handle = (_req, res) => {
      res.writeHead(207, { 'content-type': 'application/xml' });
      res.end('<?xml version="1.0"?><d:multistatus xmlns:d="DAV:"><d:response><d:href>/dav/x</d:href>');
    };
    assert.equal((await remoteError(store.list([], undefined, 10, signal()))).kind, 'bad_answer');
    handle = (_req, res) => res.writeHead(207).end('<html><body>not xml</body></html>');
    assert.equal((await remoteError(store.list([], undefined, 10, signal()))).kind, 'bad_answer');
    handle = (_req, res) => res.writeHead(500).end();
    assert.equal((await remoteError(store.stat(['x'], signal()))).kind, 'bad_answer');
    let followed = false;
    handle = (req, res) => {
      if (req.url === '/elsewhere') followed = true;
      res.writeHead(301, { location: '/elsewhere' }).end();
    };
    const err = await remoteError(store.stat(['x'], signal()));
    assert.equal(err.kind, 'bad_answer');
    assert.match(err.message, /redirect/);
    assert.equal(followed, false);
  });
});
