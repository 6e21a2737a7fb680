/**
 * DropboxStorage against a local stand-in for Dropbox's HTTP API (test/helpers/dropboxStandIn.ts,
 * following Dropbox's public documentation: the real service cannot be reached from here), over
 * real HTTP on 127.0.0.1. The provider's chunk size is made small so that upload sessions run.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { Readable } from 'node:stream';
import { after, before, describe, test } from 'node:test';
import { DropboxStorage, type DropboxOptions } from '../src/data/connectors/dropbox.ts';
import { RemoteError, type RemoteErrorKind, type RemotePage } from '../src/data/connectors/remote.ts';
import { startDropboxStandIn, type DropboxStandIn } from './helpers/dropboxStandIn.ts';
import { NODE, childEnv, spawnUntilFirstLine } from './helpers/process.ts';

const TOKEN = 'sl.u.test-token-7Hq2';
const CHUNK = 64 * 1024;
let box: DropboxStandIn;
let storage: DropboxStorage;

before(async () => {
  box = await startDropboxStandIn({ token: TOKEN });
  storage = provider();
});
after(() => box.stop());

function provider(options: Partial<DropboxOptions> = {}): DropboxStorage {
  return new DropboxStorage({ accessToken: TOKEN, apiUrl: box.apiUrl, contentUrl: box.contentUrl, chunkSize: CHUNK, ...options });
}

const signal = () => AbortSignal.timeout(15_000);
const sha256 = (data: Buffer) => crypto.createHash('sha256').update(data).digest('hex');
const onDisk = (...segments: string[]) => path.join(box.root, ...segments);

async function bytesOf(stream: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const chunk of stream) parts.push(chunk as Buffer);
  return Buffer.concat(parts);
}

/** A body that arrives in uneven pieces, like a client's upload. */
function body(data: Buffer, piece = 10_000): Readable {
  return Readable.from((function* () {
    for (let at = 0; at < data.length; at += piece) yield data.subarray(at, at + piece);
  })());
}

/** The endpoints the stand-in was asked for while `fn` ran. */
async function callsDuring(fn: () => Promise<unknown>): Promise<string[]> {
  const from = box.calls.length;
  await fn();
  return box.calls.slice(from);
}

async function failsWith(promise: Promise<unknown>, kind: RemoteErrorKind): Promise<RemoteError> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof RemoteError, `expected a RemoteError, got ${String(err)}`);
    assert.equal(err.kind, kind, `expected ${kind}, got ${err.kind}: ${err.message}`);
    return err;
  }
  assert.fail(`expected ${kind}, but it succeeded`);
}

describe('stat', () => {
  test('answers the root without asking Dropbox', async () => {
    assert.deepEqual(await callsDuring(async () => assert.deepEqual(await storage.stat([], signal()), { kind: 'dir' })), []);
  });

  test('files, folders, missing paths; case-insensitive like Dropbox; etag is the content_hash', async () => {
    await storage.write(['stat', 'A.txt'], body(Buffer.from('hello')), signal());
    const found = await storage.stat(['stat', 'A.txt'], signal());
    assert.ok(found?.kind === 'file');
    assert.equal(found.size, 5);
    // server_modified has whole seconds.
    assert.equal(found.modified, Math.floor(fs.statSync(onDisk('stat', 'A.txt')).mtimeMs / 1000) * 1000);
    // Dropbox's documented content hash; for less than 4 MiB, the hash of one block's hash.
    assert.equal(found.etag, crypto.createHash('sha256').update(crypto.createHash('sha256').update('hello').digest()).digest('hex'));
    assert.deepEqual(await storage.stat(['STAT', 'a.TXT'], signal()), found);
    assert.deepEqual(await storage.stat(['stat'], signal()), { kind: 'dir' });
    assert.equal(await storage.stat(['stat', 'missing.txt'], signal()), undefined);
    assert.equal(await storage.stat(['stat', 'A.txt', 'under-a-file'], signal()), undefined);

    await storage.write(['stat', 'A.txt'], body(Buffer.from('hellO')), signal());
    assert.notEqual((await storage.stat(['stat', 'A.txt'], signal()) as { etag: string }).etag, found.etag);
  });

  test('a malformed path is invalid', async () => {
    await failsWith(storage.stat(['stat', '..'], signal()), 'invalid');
  });
});

describe('list', () => {
  const folders = ['f0', 'f1', 'f2', 'f3'];
  const files = Array.from({ length: 13 }, (_, i) => `file-${String(i).padStart(2, '0')}.bin`);

  before(() => {
    for (const f of folders) fs.mkdirSync(onDisk('many', f), { recursive: true });
    files.forEach((f, i) => fs.writeFileSync(onDisk('many', f), Buffer.alloc(i, 1)));
  });

  test('pages with a small limit hold every entry exactly once, and every token repeats its page', async () => {
    const pages: { token: string | undefined; page: RemotePage }[] = [];
    let token: string | undefined;
    do {
      const page = await storage.list(['many'], token, 5, signal());
      pages.push({ token, page });
      token = page.next;
    } while (token !== undefined && pages.length < 20);
    assert.ok(pages.length >= 4, `17 entries in pages of 5 take 4 pages, got ${pages.length}`);
    for (const { page } of pages) assert.ok(page.folders.length + page.files.length <= 5);
    assert.deepEqual(pages.flatMap((p) => p.page.folders).sort(), folders);
    assert.deepEqual(pages.flatMap((p) => p.page.files.map((f) => f.name)).sort(), files);
    for (const f of pages.flatMap((p) => p.page.files)) {
      assert.equal(f.size, files.indexOf(f.name));
      assert.ok(Math.abs(f.modified - Date.now()) < 60_000);
    }
    for (const { token: t, page } of pages) assert.deepEqual(await storage.list(['many'], t, 5, signal()), page);
    assert.equal(pages.at(-1)?.page.next, undefined);
  });

  test('the root, a missing folder, a file', async () => {
    assert.ok((await storage.list([], undefined, 100, signal())).folders.includes('many'));
    await failsWith(storage.list(['nowhere'], undefined, 10, signal()), 'not_found');
    await failsWith(storage.list(['many', 'file-01.bin'], undefined, 10, signal()), 'conflict');
  });
});

describe('read', () => {
  const data = crypto.randomBytes(100_000);
  before(() => fs.writeFileSync(onDisk('big.bin'), data));

  test('whole files and ranges', async () => {
    assert.ok((await bytesOf(await storage.read(['big.bin'], undefined, signal()))).equals(data));
    assert.ok((await bytesOf(await storage.read(['big.bin'], { start: 1000, end: 1999 }, signal()))).equals(data.subarray(1000, 2000)));
    assert.ok((await bytesOf(await storage.read(['big.bin'], { start: 99_999, end: 99_999 }, signal()))).equals(data.subarray(99_999)));
  });

  test('a server that ignores Range: the range is cut out of the whole answer', async () => {
    box.quirks.ignoreRange = true;
    try {
      assert.ok((await bytesOf(await storage.read(['big.bin'], { start: 70_000, end: 70_009 }, signal()))).equals(data.subarray(70_000, 70_010)));
    } finally {
      box.quirks.ignoreRange = false;
    }
  });

  test('a missing file, a folder', async () => {
    await failsWith(storage.read(['nothing.bin'], undefined, signal()), 'not_found');
    await failsWith(storage.read(['many'], undefined, signal()), 'conflict');
  });
});

describe('write', () => {
  test('a body that fits in one chunk is one upload', async () => {
    const data = crypto.randomBytes(CHUNK);
    assert.deepEqual(await callsDuring(() => storage.write(['w', 'one.bin'], body(data), signal())), ['files/upload']);
    assert.ok(fs.readFileSync(onDisk('w', 'one.bin')).equals(data));
    assert.deepEqual(await callsDuring(() => storage.write(['w', 'empty.bin'], body(Buffer.alloc(0)), signal())), ['files/upload']);
    assert.equal(fs.statSync(onDisk('w', 'empty.bin')).size, 0);
  });

  test('a larger body streams through an upload session, replacing what was there', async () => {
    fs.mkdirSync(onDisk('w'), { recursive: true });
    fs.writeFileSync(onDisk('w', 'large.bin'), 'old');
    const data = crypto.randomBytes(3 * CHUNK + CHUNK / 2);
    const calls = await callsDuring(() => storage.write(['w', 'large.bin'], body(data), signal()));
    assert.deepEqual(calls, ['files/upload_session/start', 'files/upload_session/append_v2', 'files/upload_session/append_v2', 'files/upload_session/append_v2', 'files/upload_session/finish']);
    assert.equal(sha256(fs.readFileSync(onDisk('w', 'large.bin'))), sha256(data));
    assert.equal(sha256(await bytesOf(await storage.read(['w', 'large.bin'], undefined, signal()))), sha256(data));
  });

  test('a rate-limited chunk is sent again whole', async () => {
    const data = crypto.randomBytes(2 * CHUNK + 123);
    box.failNext({ endpoint: 'files/upload_session/append_v2', retryAfter: 0 });
    const calls = await callsDuring(() => storage.write(['w', 'retried.bin'], body(data), signal()));
    assert.equal(calls.filter((c) => c === 'files/upload_session/append_v2').length, 3);
    assert.equal(sha256(fs.readFileSync(onDisk('w', 'retried.bin'))), sha256(data));
  });

  test('a body that errors commits nothing and the body\'s error comes back', async () => {
    fs.writeFileSync(onDisk('w', 'kept.bin'), 'before');
    const failing = (bytes: number) => Readable.from((async function* () {
      yield crypto.randomBytes(bytes);
      throw new Error('the client went away');
    })());
    for (const bytes of [100, 2 * CHUNK + 5]) {
      let error: unknown;
      const calls = await callsDuring(() => storage.write(['w', 'kept.bin'], failing(bytes), signal()).catch((err: unknown) => { error = err; }));
      assert.equal((error as Error | undefined)?.message, 'the client went away');
      assert.ok(!calls.includes('files/upload_session/finish') && !calls.includes('files/upload'), calls.join());
      assert.equal(fs.readFileSync(onDisk('w', 'kept.bin'), 'utf8'), 'before');
    }
  });

  test('a cancelled write stops, whether it waits on the client or on Dropbox, and commits nothing', { timeout: 20_000 }, async () => {
    // The client goes quiet inside the first chunk (nothing sent yet), then inside a streamed one.
    for (const bytes of [100, CHUNK + 100]) {
      let pushed = false;
      const stalled = new Readable({
        read() {
          if (!pushed) this.push(crypto.randomBytes(bytes));
          pushed = true;
        },
      });
      const started = Date.now();
      await failsWith(storage.write(['w', 'cancelled.bin'], stalled, AbortSignal.timeout(300)), 'timeout');
      assert.ok(Date.now() - started < 5000);
      assert.equal(fs.existsSync(onDisk('w', 'cancelled.bin')), false);
    }
  });

  test('names beyond ASCII go through the Dropbox-API-Arg header escaped', async () => {
    const name = 'Ünïcødé 日本語 ✓.txt';
    await storage.write(['w', name], body(Buffer.from('ü')), signal());
    assert.equal(fs.readFileSync(onDisk('w', name), 'utf8'), 'ü');
    assert.ok((await storage.list(['w'], undefined, 100, signal())).files.some((f) => f.name === name));
    assert.equal((await bytesOf(await storage.read(['w', name], undefined, signal()))).toString(), 'ü');
  });
});

describe('mkdir and deletes', () => {
  test('mkdir, and a conflict when something is there', async () => {
    await storage.mkdir(['made'], signal());
    assert.ok(fs.statSync(onDisk('made')).isDirectory());
    await failsWith(storage.mkdir(['MADE'], signal()), 'conflict');
    fs.writeFileSync(onDisk('made', 'f.txt'), 'x');
    await failsWith(storage.mkdir(['made', 'f.txt'], signal()), 'conflict');
  });

  test('deleteFile removes a file, never a folder', async () => {
    fs.mkdirSync(onDisk('del', 'folder'), { recursive: true });
    fs.writeFileSync(onDisk('del', 'file.txt'), 'x');
    await storage.deleteFile(['del', 'file.txt'], signal());
    assert.equal(fs.existsSync(onDisk('del', 'file.txt')), false);
    await failsWith(storage.deleteFile(['del', 'file.txt'], signal()), 'not_found');
    await failsWith(storage.deleteFile(['del', 'folder'], signal()), 'conflict');
    assert.ok(fs.existsSync(onDisk('del', 'folder')));
  });

  test('deleteDir answers how many files the tree held, paging through it', async () => {
    for (const f of ['tree/a.txt', 'tree/sub/b.txt', 'tree/sub/deeper/c.txt', 'tree/sub/deeper/d.txt']) {
      fs.mkdirSync(path.dirname(onDisk(f)), { recursive: true });
      fs.writeFileSync(onDisk(f), f);
    }
    fs.mkdirSync(onDisk('tree', 'empty'));
    box.quirks.pageCap = 2; // Dropbox's limit is approximate: fewer entries than asked for is allowed
    let count = 0;
    try {
      const calls = await callsDuring(async () => { count = await storage.deleteDir(['tree'], signal()); });
      assert.ok(calls.filter((c) => c === 'files/list_folder/continue').length >= 2, calls.join());
    } finally {
      delete box.quirks.pageCap;
    }
    assert.equal(count, 4);
    assert.equal(fs.existsSync(onDisk('tree')), false);
    await failsWith(storage.deleteDir(['tree'], signal()), 'not_found');
    fs.writeFileSync(onDisk('plain.txt'), 'x');
    await failsWith(storage.deleteDir(['plain.txt'], signal()), 'conflict');
    assert.ok(fs.existsSync(onDisk('plain.txt')));
    await failsWith(storage.deleteDir([], signal()), 'invalid');
  });
});

describe('failures', () => {
  test('a bad token is denied, and the token is in no message', async () => {
    const secret = 'sl.u.WRONG-secret-4242';
    const wrong = provider({ accessToken: secret });
    for (const attempt of [wrong.stat(['x'], signal()), wrong.list([], undefined, 10, signal()), wrong.write(['x'], body(Buffer.from('x')), signal())]) {
      const err = await failsWith(attempt, 'denied');
      assert.ok(!err.message.includes(secret) && !err.message.includes('WRONG'), err.message);
    }
  });

  test('a closed port is unreachable', async () => {
    const server = net.createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as net.AddressInfo).port;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const closed = provider({ apiUrl: `http://127.0.0.1:${port}`, contentUrl: `http://127.0.0.1:${port}` });
    const err = await failsWith(closed.stat(['x'], signal()), 'unreachable');
    assert.ok(!err.message.includes(TOKEN));
    await failsWith(closed.read(['x'], undefined, signal()), 'unreachable');
  });

  test('429 is retried after Retry-After', async () => {
    box.failNext({ status: 429, retryAfter: 1 });
    const started = Date.now();
    const calls = await callsDuring(async () => assert.deepEqual(await storage.stat(['many'], signal()), { kind: 'dir' }));
    assert.ok(Date.now() - started >= 950, `waited ${Date.now() - started} ms`);
    assert.deepEqual(calls, ['files/get_metadata', 'files/get_metadata']);
    box.failNext({ status: 503, retryAfter: 0 });
    assert.deepEqual(await storage.stat(['many'], signal()), { kind: 'dir' });
  });

  test('retries are bounded, capped, and end with the signal', async () => {
    box.failNext({ count: 3, retryAfter: 0 });
    const bounded = provider({ maxRetries: 2 });
    assert.equal((await callsDuring(() => failsWith(bounded.stat(['many'], signal()), 'bad_answer'))).length, 3);
    assert.deepEqual(await bounded.stat(['many'], signal()), { kind: 'dir' }); // all three refusals were used

    box.failNext({ retryAfter: 60 });
    const started = Date.now();
    const err = await failsWith(provider({ maxRetryWaitMs: 2000 }).stat(['many'], signal()), 'bad_answer');
    assert.match(err.message, /60 s/);
    assert.ok(Date.now() - started < 1000);

    box.failNext({ retryAfter: 5 });
    const waited = Date.now();
    await failsWith(storage.stat(['many'], AbortSignal.timeout(200)), 'timeout');
    assert.ok(Date.now() - waited < 2000);
  });
});

test('the stand-in runs as its own process, printing where it listens', async () => {
  const helper = path.join(import.meta.dirname, 'helpers', 'dropboxStandIn.ts');
  const started = await spawnUntilFirstLine(NODE, ['--import', 'tsx', helper, '--token', TOKEN], { what: 'the stand-in', env: childEnv() });
  try {
    const where = JSON.parse(started.line) as { apiUrl: string; contentUrl: string; root: string };
    fs.writeFileSync(path.join(where.root, 'here.txt'), 'x');
    const remote = new DropboxStorage({ accessToken: TOKEN, apiUrl: where.apiUrl, contentUrl: where.contentUrl });
    assert.deepEqual((await remote.list([], undefined, 10, signal())).files.map((f) => f.name), ['here.txt']);
  } finally {
    await started.stop();
  }
});
