/**
 * Drives the unchanged official npm client algorithmia@0.3.10 through every data operation
 * it has, against a real server. What the client sends and how it parses answers is in
 * node_modules/algorithmia/lib/{algorithmia,data}.js; what it relies on is in
 * ../shared/compat.md ("Data API paths", "Data API behaviour clients rely on").
 *
 * Callback shapes of the client: File.get calls back (err, data); everything else that
 * makes a request calls back (response, status) with the parsed body (an `error` object is
 * added to it on a non-2xx status); exists() calls back (exists, status?, response?).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import algorithmia from 'algorithmia';
import { api, json, startServer, type TestServer } from './helpers/server.ts';

type Client = algorithmia.Client;
type NpmFile = algorithmia.File;
type NpmDir = algorithmia.Dir;
type ErrorObject = algorithmia.ErrorObject;

interface Reply {
  body: unknown;
  status: number;
}

/** Wraps a (response, status) callback call into a promise. */
function req(start: (cb: algorithmia.ReqCallback) => void): Promise<Reply> {
  return new Promise((resolve) => start((body, status) => resolve({ body, status })));
}

/** File.get: (err, data). */
function getFile(file: NpmFile): Promise<{ err: ErrorObject | null; data: unknown }> {
  return new Promise((resolve) => file.get((err, data) => resolve({ err, data })));
}

function exists(target: NpmFile | NpmDir): Promise<{ exists: boolean; status: number | undefined }> {
  return new Promise((resolve) => target.exists((found, status) => resolve({ exists: found, status })));
}

/** Runs forEach / forEachFile / forEachDir to its end (its `then`), collecting what it yields. */
function collect<T>(start: (cb: (err: ErrorObject | null, item: T) => void) => algorithmia.Thenable): Promise<{ errors: unknown[]; items: T[] }> {
  return new Promise((resolve) => {
    const errors: unknown[] = [];
    const items: T[] = [];
    start((err, item) => {
      if (err !== null) errors.push(err);
      items.push(item);
    }).then(() => resolve({ errors, items }));
  });
}

/** Steps a directory iterator until it yields undefined (or an error). */
async function iterate(dir: NpmDir, limit = 5000): Promise<{ error: ErrorObject | null; items: Array<NpmFile | NpmDir> }> {
  const it = dir.iterator();
  const items: Array<NpmFile | NpmDir> = [];
  for (;;) {
    const { err, item } = await new Promise<{ err: ErrorObject | null; item: NpmFile | NpmDir | undefined }>((resolve) =>
      it.next((e, i) => resolve({ err: e, item: i })),
    );
    if (err !== null) return { error: err, items };
    if (item === undefined) return { error: null, items };
    items.push(item);
    if (items.length > limit) throw new Error(`the iterator yielded more than ${limit} entries; the listing loops`);
  }
}

function errorOf(body: unknown): ErrorObject | undefined {
  if (typeof body !== 'object' || body === null || !('error' in body)) return undefined;
  return (body as { error: ErrorObject }).error;
}

/** A failed call: a 4xx status and an error object with a non-empty message. */
function assertFailed(reply: Reply, what: string): ErrorObject {
  assert.ok(reply.status >= 400 && reply.status < 500, `${what}: expected a 4xx status, got ${reply.status} ${JSON.stringify(reply.body)}`);
  const error = errorOf(reply.body);
  assert.ok(error, `${what}: expected an error object, got ${JSON.stringify(reply.body)}`);
  assert.equal(typeof error.message, 'string');
  assert.ok(error.message.length > 0, `${what}: empty error message`);
  return error;
}

/** A successful write: status 200, no error, `result` is the data URI ending with `suffix`. */
function assertWritten(reply: Reply, suffix: string): void {
  assert.equal(reply.status, 200, `expected 200, got ${reply.status} ${JSON.stringify(reply.body)}`);
  assert.equal(errorOf(reply.body), undefined);
  const result = (reply.body as { result?: unknown }).result;
  assert.equal(typeof result, 'string', `result should be a data URI, got ${JSON.stringify(reply.body)}`);
  assert.match(result as string, /^data:\/\//);
  assert.ok((result as string).endsWith(suffix), `result ${String(result)} should end with ${suffix}`);
}

const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** Every byte value, then some runs of 0x00 and 0xff. */
const BINARY = Buffer.concat([
  Buffer.from(Array.from({ length: 256 }, (_, i) => i)),
  Buffer.from([0x00, 0x00, 0xff, 0xff, 0x00, 0xff, 0xfe, 0x80, 0x0d, 0x0a, 0x00]),
]);

let s: TestServer;
let aliceKey: string;
let bobKey: string;
let client: Client;
let FileClass: new (...args: never[]) => NpmFile;
let DirClass: new (...args: never[]) => NpmDir;

before(async () => {
  s = await startServer();
  aliceKey = await s.user('alice');
  bobKey = await s.user('bob');
  client = algorithmia.client(aliceKey, s.url);
  // The client's own File and Dir classes (data.js does not reach the package's main export).
  FileClass = client.file('data://x/y').constructor as typeof FileClass;
  DirClass = client.dir('data://x').constructor as typeof DirClass;
});

after(async () => {
  await s?.close();
});

test('client(key, address): Dir.create, Dir.exists true and false', { timeout: 20_000 }, async () => {
  assert.equal(client.apiAddress, s.url);
  assert.equal(client.apiKey, `Simple ${aliceKey}`);

  const dir = client.dir('data://.my/npm');
  assert.equal((await exists(dir)).exists, false, 'data://.my/npm should not exist before it is created');

  const created = await req((cb) => dir.create(cb)); // POST /v1/data/.my {"name":"npm"}
  assertWritten(created, '/npm');
  assert.deepEqual(await exists(dir), { exists: true, status: undefined });

  const missing = await exists(client.dir('data://.my/no-such-dir'));
  assert.equal(missing.exists, false);
  assert.equal(missing.status, 404);

  // Creating it again fails with an error body.
  assertFailed(await req((cb) => dir.create(cb)), 'creating an existing directory');

  // A nested directory, and the `algorithmia(key, address)` form of creating a client.
  const nested = algorithmia(aliceKey, s.url).dir('data://.my/npm/nested');
  assertWritten(await req((cb) => nested.create(cb)), '/npm/nested');
  assert.equal((await exists(nested)).exists, true);
  const listing = await json(await api(s.url, aliceKey)('/v1/data/.my/npm'));
  assert.deepEqual(listing.folders, [{ name: 'nested' }]);
});

test('client from ALGORITHMIA_API and ALGORITHMIA_API_KEY', { timeout: 20_000 }, async () => {
  const saved = { api: process.env.ALGORITHMIA_API, key: process.env.ALGORITHMIA_API_KEY };
  process.env.ALGORITHMIA_API = s.url;
  process.env.ALGORITHMIA_API_KEY = bobKey;
  try {
    const envClient = algorithmia.client();
    assert.equal(envClient.apiAddress, s.url);
    assert.equal(envClient.apiKey, `Simple ${bobKey}`);

    assertWritten(await req((cb) => envClient.dir('data://.my/envdir').create(cb)), '/envdir');
    assertWritten(await req((cb) => envClient.file('data://.my/envdir/hello.txt').put('hello from env', cb)), '/envdir/hello.txt');

    // The env key is bob's: the file is in bob's data, not alice's.
    const asBob = await api(s.url, bobKey)('/v1/data/.my/envdir/hello.txt');
    assert.equal(asBob.status, 200);
    assert.equal(await asBob.text(), 'hello from env');
    assert.equal((await api(s.url, aliceKey)('/v1/data/.my/envdir/hello.txt')).status, 404);

    // The module-level default client (algorithmia.file) reads the same variables.
    const viaDefault = await req((cb) => algorithmia.file('data://.my/envdir/hello.txt').getString(cb));
    assert.equal(viaDefault.status, 200);
    assert.equal(viaDefault.body, 'hello from env');
  } finally {
    if (saved.api === undefined) delete process.env.ALGORITHMIA_API;
    else process.env.ALGORITHMIA_API = saved.api;
    if (saved.key === undefined) delete process.env.ALGORITHMIA_API_KEY;
    else process.env.ALGORITHMIA_API_KEY = saved.key;
  }
});

test('File.put with a string, File.get (Buffer) and File.getString', { timeout: 20_000 }, async () => {
  const text = 'Leader of the Autobots — ünïcödé ✓\nsecond line\n';
  const file = client.file('data://.my/npm/prime.txt');
  assertWritten(await req((cb) => file.put(text, cb)), '/npm/prime.txt');

  const got = await getFile(file);
  assert.equal(got.err, null);
  assert.ok(Buffer.isBuffer(got.data), `File.get should give a Buffer, got ${typeof got.data}`);
  assert.ok((got.data as Buffer).equals(Buffer.from(text, 'utf8')));

  const asString = await req((cb) => file.getString(cb));
  assert.equal(asString.status, 200);
  assert.equal(asString.body, text);

  // Replacing a file with put gives the new content.
  assertWritten(await req((cb) => file.put('replaced', cb)), '/npm/prime.txt');
  assert.equal((await req((cb) => file.getString(cb))).body, 'replaced');
});

test('File.put with a Buffer: binary bytes (0x00, 0xff, every value) round-trip exactly', { timeout: 20_000 }, async () => {
  // Whatever the name suggests (.dat, .txt, .json), File.get must hand back the same bytes:
  // the client parses by the response Content-Type, so a JSON or text type would break it.
  for (const name of ['bytes.dat', 'bytes.txt', 'bytes.json']) {
    const file = client.file(`data://.my/npm/${name}`);
    assertWritten(await req((cb) => file.put(BINARY, cb)), `/npm/${name}`);
    const got = await getFile(file);
    assert.equal(got.err, null, `${name}: ${JSON.stringify(got.err)}`);
    assert.ok(Buffer.isBuffer(got.data), `${name}: File.get should give a Buffer`);
    assert.equal((got.data as Buffer).length, BINARY.length, `${name}: length`);
    assert.ok((got.data as Buffer).equals(BINARY), `${name}: bytes differ`);
  }
  // The stored size is the byte count (seen through a raw HEAD).
  const head = await api(s.url, aliceKey)('/v1/data/.my/npm/bytes.dat', { method: 'HEAD' });
  assert.equal(head.status, 200);
  assert.equal(head.headers.get('content-length'), String(BINARY.length));
});

test('File.putString and File.putJson, File.getJson', { timeout: 20_000 }, async () => {
  const notes = client.file('data://.my/npm/notes.txt');
  assertWritten(await req((cb) => notes.putString('line 1\nline 2 ✓', cb)), '/npm/notes.txt');
  const text = await req((cb) => notes.getString(cb));
  assert.equal(text.status, 200);
  assert.equal(text.body, 'line 1\nline 2 ✓');

  // putJson writes its argument as it is (httpRequest.write), so it takes serialised JSON.
  const value = { robots: ['C-3PO', 'R2-D2'], count: 2, nested: { ok: true, none: null }, pi: 3.25, text: 'ünï ✓' };
  const data = client.file('data://.my/npm/robots.json');
  assertWritten(await req((cb) => data.putJson(JSON.stringify(value), cb)), '/npm/robots.json');
  const parsed = await req((cb) => data.getJson(cb));
  assert.equal(parsed.status, 200);
  assert.deepEqual(parsed.body, value);

  // getJson works whatever the file is called; getString of the same file is the JSON text.
  const plain = client.file('data://.my/npm/robots-json.dat');
  assertWritten(await req((cb) => plain.putJson(JSON.stringify(value), cb)), '/npm/robots-json.dat');
  assert.deepEqual((await req((cb) => plain.getJson(cb))).body, value);
  assert.equal((await req((cb) => data.getString(cb))).body, JSON.stringify(value));
});

test('File.exists true and false, File.delete answers exactly {result:{deleted:1}}', { timeout: 20_000 }, async () => {
  const file = client.file('data://.my/npm/doomed.txt');
  const missing = await exists(file);
  assert.equal(missing.exists, false);
  assert.equal(missing.status, 404);

  assertWritten(await req((cb) => file.put('soon gone', cb)), '/npm/doomed.txt');
  assert.deepEqual(await exists(file), { exists: true, status: undefined });

  const deleted = await req((cb) => file.delete(cb));
  assert.equal(deleted.status, 200);
  assert.deepEqual(deleted.body, { result: { deleted: 1 } });

  const after = await exists(file);
  assert.equal(after.exists, false);
  assert.equal(after.status, 404);
  const got = await getFile(file);
  assert.equal(got.data, null);
  assert.ok(got.err && typeof got.err.message === 'string' && got.err.message.length > 0);

  // Deleting it again is an error.
  assertFailed(await req((cb) => file.delete(cb)), 'deleting a deleted file');
});

test('Dir.putFile uploads a local file under its base name', { timeout: 20_000 }, async () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'npm-client-'));
  try {
    const local = path.join(tmp, 'upload.bin');
    const bytes = Buffer.concat([BINARY, Buffer.alloc(70_000, 0xab), BINARY]); // more than one chunk
    fs.writeFileSync(local, bytes);
    const dir = client.dir('data://.my/npm');
    assertWritten(await req((cb) => dir.putFile(local, cb)), '/npm/upload.bin');
    const got = await getFile(dir.file('upload.bin'));
    assert.equal(got.err, null);
    assert.ok(Buffer.isBuffer(got.data));
    assert.ok((got.data as Buffer).equals(bytes), 'uploaded bytes differ');
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});

const BIG = 'data://.my/npm/big';
const BIG_PATH = '.my/npm/big';
const FILE_COUNT = 1005;
// Names that sort among the files, so a listing ordered by name alone would interleave them.
const FOLDERS = ['aa-folder', 'file-0500-folder', 'zz-folder'];
const FILE_NAMES = Array.from({ length: FILE_COUNT }, (_, i) => `file-${String(i).padStart(4, '0')}.txt`);
const contentOf = (name: string) => `content of ${name}`;

// The timeout is a guard against a hang, not a measure: 1,005 uploads took 13 s on a quiet machine
// in the cluster configuration, and over 30 s on a loaded CI machine (bench:data measures speed).
test('a directory with 3 folders and 1,005 files: forEach, forEachFile, forEachDir, iterator', { timeout: 180_000 }, async () => {
  const big = client.dir(BIG);
  assertWritten(await req((cb) => big.create(cb)), '/npm/big');
  for (const name of FOLDERS) {
    assertWritten(await req((cb) => client.dir(`${BIG}/${name}`).create(cb)), `/npm/big/${name}`);
  }
  // Through the client itself, 50 uploads at a time.
  for (let i = 0; i < FILE_NAMES.length; i += 50) {
    const replies = await Promise.all(FILE_NAMES.slice(i, i + 50).map((n) => req((cb) => big.file(n).put(contentOf(n), cb))));
    for (const r of replies) assert.equal(r.status, 200, JSON.stringify(r.body));
  }
  // One file inside a subfolder (for the recursive delete below; not part of big's listing).
  assertWritten(await req((cb) => client.file(`${BIG}/aa-folder/inner.txt`).put('inner', cb)), '/npm/big/aa-folder/inner.txt');

  const expectedDirs = FOLDERS.map((n) => `${BIG_PATH}/${n}`).sort();
  const expectedFiles = FILE_NAMES.map((n) => `${BIG_PATH}/${n}`).sort();
  const sizes = new Map(FILE_NAMES.map((n) => [`${BIG_PATH}/${n}`, Buffer.byteLength(contentOf(n))]));

  // The server side of the contract, page by page: at most 1000 entries, never folders and
  // files in the same page (npm 0.3.10 indexes files[offset] without subtracting the folders).
  const call = api(s.url, aliceKey);
  let marker: string | undefined;
  const pages: Array<{ folders?: Array<{ name: string }>; files?: Array<{ filename: string }>; marker?: string }> = [];
  do {
    const res = await call(`/v1/data/.my/npm/big${marker ? `?marker=${encodeURIComponent(marker)}` : ''}`);
    assert.equal(res.status, 200);
    const page = await json(res);
    pages.push(page);
    marker = page.marker;
    assert.ok(pages.length < 10, 'too many pages');
  } while (marker);
  for (const [i, page] of pages.entries()) {
    const folders = page.folders?.length ?? 0;
    const files = page.files?.length ?? 0;
    assert.ok(!(folders > 0 && files > 0), `page ${i} mixes ${folders} folders and ${files} files`);
    assert.ok(folders + files <= 1000, `page ${i} has ${folders + files} entries`);
  }
  assert.equal(pages.reduce((n, p) => n + (p.folders?.length ?? 0) + (p.files?.length ?? 0), 0), FOLDERS.length + FILE_COUNT);

  const checkEntries = (items: Array<NpmFile | NpmDir>, label: string) => {
    const paths = items.map((it) => it.data_path);
    assert.equal(new Set(paths).size, paths.length, `${label}: duplicated entries`);
    const dirs = items.filter((it) => it instanceof DirClass);
    const files = items.filter((it) => it instanceof FileClass) as NpmFile[];
    assert.equal(dirs.length + files.length, items.length, `${label}: entries that are neither File nor Dir`);
    assert.deepEqual(dirs.map((d) => d.data_path).sort(), expectedDirs, `${label}: folders`);
    assert.deepEqual(files.map((f) => f.data_path).sort(), expectedFiles, `${label}: files`);
    for (const f of files) {
      assert.equal(f.size, sizes.get(f.data_path), `${label}: size of ${f.data_path}`);
      assert.match(f.last_modified ?? '', ISO_MS, `${label}: last_modified of ${f.data_path}`);
    }
  };

  const all = await collect<NpmFile | NpmDir>((cb) => big.forEach(cb));
  assert.deepEqual(all.errors, []);
  assert.equal(all.items.length, FOLDERS.length + FILE_COUNT);
  checkEntries(all.items, 'forEach');

  const onlyFiles = await collect<NpmFile>((cb) => big.forEachFile(cb));
  assert.deepEqual(onlyFiles.errors, []);
  assert.equal(onlyFiles.items.length, FILE_COUNT);
  assert.ok(onlyFiles.items.every((f) => f instanceof FileClass));
  assert.deepEqual(onlyFiles.items.map((f) => f.data_path).sort(), expectedFiles);

  const onlyDirs = await collect<NpmDir>((cb) => big.forEachDir(cb));
  assert.deepEqual(onlyDirs.errors, []);
  assert.ok(onlyDirs.items.every((d) => d instanceof DirClass));
  assert.deepEqual(onlyDirs.items.map((d) => d.data_path).sort(), expectedDirs);

  const stepped = await iterate(big);
  assert.equal(stepped.error, null);
  assert.equal(stepped.items.length, FOLDERS.length + FILE_COUNT);
  checkEntries(stepped.items, 'iterator');

  // Entries from the listing are usable objects: a listed file reads back its content.
  const listed = onlyFiles.items.find((f) => f.data_path.endsWith('/file-1004.txt'));
  assert.ok(listed);
  assert.equal((await req((cb) => listed.getString(cb))).body, contentOf('file-1004.txt'));

  // Iterating a directory that does not exist yields an error, not an empty listing.
  const none = await iterate(client.dir('data://.my/npm/no-such-dir'));
  assert.ok(none.error && typeof none.error.message === 'string' && none.error.message.length > 0);
  assert.deepEqual(none.items, []);
});

test('Dir.delete(false) on a non-empty directory fails; Dir.delete(true) deletes recursively', { timeout: 120_000 }, async () => {
  const big = client.dir(BIG);
  assert.equal((await exists(big)).exists, true, 'the listing test should have created data://.my/npm/big');

  const refused = await req((cb) => big.delete(false, cb)); // DELETE /v1/data/.my/npm/big (no force)
  assertFailed(refused, 'Dir.delete(false) on a non-empty directory');
  assert.equal((await exists(big)).exists, true);
  assert.equal((await exists(big.file('file-0000.txt'))).exists, true);
  assert.equal((await exists(client.file(`${BIG}/aa-folder/inner.txt`))).exists, true);

  // An empty directory goes without force.
  const empty = client.dir('data://.my/npm/empty');
  assertWritten(await req((cb) => empty.create(cb)), '/npm/empty');
  const removed = await req((cb) => empty.delete(false, cb));
  assert.equal(removed.status, 200, JSON.stringify(removed.body));
  assert.deepEqual(removed.body, { result: { deleted: 0 } });
  assert.equal((await exists(empty)).exists, false);

  const forced = await req((cb) => big.delete(true, cb)); // ?force=true
  assert.equal(forced.status, 200, JSON.stringify(forced.body));
  // The spec: result.deleted is the number of files deleted (1,005 + aa-folder/inner.txt).
  assert.deepEqual(forced.body, { result: { deleted: FILE_COUNT + 1 } });
  assert.equal((await exists(big)).exists, false);
  assert.equal((await exists(client.dir(`${BIG}/aa-folder`))).exists, false);
  assert.equal((await exists(client.file(`${BIG}/aa-folder/inner.txt`))).exists, false);
  assert.equal((await exists(big.file('file-0000.txt'))).exists, false);
  const parent = await collect<NpmDir>((cb) => client.dir('data://.my/npm').forEachDir(cb));
  assert.deepEqual(parent.items.map((d) => d.data_path), ['.my/npm/nested']);
});

test('errors: missing files, missing directories, wrong key, no key', { timeout: 20_000 }, async () => {
  // File.get of a missing file: (err, null) with a message.
  const missing = client.file('data://.my/npm/missing.txt');
  const got = await getFile(missing);
  assert.equal(got.data, null);
  assert.ok(got.err, 'File.get of a missing file should give an error');
  assert.equal(typeof got.err.message, 'string');
  assert.match(got.err.message, /missing\.txt/);

  const asString = await req((cb) => missing.getString(cb));
  assertFailed(asString, 'getString of a missing file');
  assert.equal(asString.status, 404);
  const asJson = await req((cb) => missing.getJson(cb));
  assertFailed(asJson, 'getJson of a missing file');
  assert.equal(asJson.status, 404);

  // Putting a file into a directory that does not exist fails.
  assertFailed(await req((cb) => client.file('data://.my/no-such-dir/a.txt').put('x', cb)), 'put into a missing directory');
  assert.equal((await exists(client.file('data://.my/no-such-dir/a.txt'))).exists, false);

  // A wrong key: well-formed but unknown.
  const wrong = algorithmia.client('sim' + 'x'.repeat(25), s.url);
  const wrongExists = await exists(wrong.dir('data://.my/npm'));
  assert.equal(wrongExists.exists, false);
  assert.equal(wrongExists.status, 401);
  const wrongGet = await getFile(wrong.file('data://.my/npm/prime.txt'));
  assert.equal(wrongGet.data, null);
  assert.ok(wrongGet.err && wrongGet.err.message.length > 0, 'File.get with a wrong key should give an error');
  const wrongPut = await req((cb) => wrong.file('data://alice/npm/intruder.txt').put('nope', cb));
  assert.equal(wrongPut.status, 401);
  assertFailed(wrongPut, 'put with a wrong key');
  assert.equal((await exists(client.file('data://.my/npm/intruder.txt'))).exists, false);
  assertFailed(await req((cb) => wrong.dir('data://.my/npm').delete(true, cb)), 'Dir.delete with a wrong key');
  assert.equal((await exists(client.dir('data://.my/npm'))).exists, true);

  // No key at all (and none in the environment): "authorization required".
  const savedKey = process.env.ALGORITHMIA_API_KEY;
  delete process.env.ALGORITHMIA_API_KEY;
  try {
    const anonymous = algorithmia.client('', s.url);
    assert.equal(anonymous.apiKey, '');
    const res = await getFile(anonymous.file('data://alice/npm/prime.txt'));
    assert.equal(res.data, null);
    assert.ok(res.err);
    assert.equal(res.err.message, 'authorization required');
    assert.equal((await exists(anonymous.dir('data://alice/npm'))).status, 401);
  } finally {
    if (savedKey !== undefined) process.env.ALGORITHMIA_API_KEY = savedKey;
  }
});
