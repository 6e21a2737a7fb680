/**
 * The client's browser entry (client/src/browser.ts): esbuild bundles it for the browser with
 * no Node built-in and no Node global in it, and the bundle itself, run with Node's globals
 * hidden from it, works against a real server over fetch: with an API key, and as the web
 * console does, with a session cookie and its CSRF token in headers of its own instead.
 * (client-algo, client-data and client.test.ts run the client's suites over FetchTransport too.)
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { build } from 'esbuild';
import ts from 'typescript';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { release } from './helpers/algorithms.ts';
import { rejects } from './helpers/rejects.ts';
import { SESSION_COOKIE } from '../src/auth/sessions.ts';
import type * as Browser from '../client/src/browser.ts';

type BrowserEntry = typeof Browser;

const root = path.resolve(import.meta.dirname, '..');
const entry = path.join(root, 'client/src/browser.ts');

/** Names Node has and a browser does not: the bundle is run with each of them undefined. */
const NODE_GLOBALS = ['Buffer', 'process', 'require', 'global', 'module', 'exports', '__filename', '__dirname', 'setImmediate'];

/** The browser entry bundled by esbuild as a script, evaluated where Node's globals are undefined. */
async function loadBundle(): Promise<BrowserEntry> {
  const out = await build({ entryPoints: [entry], bundle: true, platform: 'browser', format: 'iife', globalName: 'algohost', write: false, logLevel: 'silent' });
  const run = new Function(...NODE_GLOBALS, `${out.outputFiles[0]!.text}\nreturn algohost;`) as () => BrowserEntry;
  return run();
}

async function collect<T>(iter: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of iter) out.push(x);
  return out;
}

test('esbuild bundles the browser entry for the browser: no Node built-in, no Node global; the Node entry does not bundle', async () => {
  const out = await build({ entryPoints: [entry], bundle: true, platform: 'browser', format: 'esm', write: false, minify: true, legalComments: 'none', metafile: true, logLevel: 'silent' });
  assert.deepEqual(out.errors, []);
  const inputs = Object.keys(out.metafile.inputs).map((p) => path.relative(root, path.resolve(root, p)));
  assert.ok(inputs.every((p) => p.startsWith('client/src/')), inputs.join(', '));
  for (const nodeOnly of ['pack.ts', 'http.ts', 'env.ts', 'index.ts']) assert.ok(!inputs.includes(`client/src/${nodeOnly}`), `${nodeOnly} stays out`);
  const code = out.outputFiles[0]!.text;
  // Minified, so no comments: a name left is a reference (global names are never renamed).
  assert.doesNotMatch(code, /\b(Buffer|process|require)\b/);
  assert.match(code, /\bfetch\b/, 'it speaks fetch');

  // The check has teeth: the Node entry (node:http, node:stream...) fails to bundle for a browser.
  const nodeEntry = await build({ entryPoints: [path.join(root, 'client/src/index.ts')], bundle: true, platform: 'browser', format: 'esm', write: false, logLevel: 'silent' }).then(
    () => undefined,
    (err: { errors?: { text: string }[] }) => err.errors ?? [],
  );
  assert.ok(nodeEntry && nodeEntry.some((e) => /node:(http|stream|fs)/.test(e.text)), JSON.stringify(nodeEntry));
});

test('the browser entry typechecks for a page: the DOM\'s types, none of Node\'s', () => {
  const program = ts.createProgram([entry], {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    lib: ['lib.es2023.d.ts', 'lib.dom.d.ts', 'lib.dom.iterable.d.ts'],
    types: [],
    strict: true,
    noUncheckedIndexedAccess: true,
    allowImportingTsExtensions: true,
    verbatimModuleSyntax: true,
    noEmit: true,
  });
  const files = program.getSourceFiles().map((f) => path.relative(root, f.fileName)).filter((f) => !f.startsWith('node_modules/'));
  assert.ok(!files.some((f) => f.includes('@types/node')), files.join(', '));
  const problems = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
  assert.deepEqual(problems, []);
  assert.ok(files.includes('client/src/fetchTransport.ts'));
});

describe('the bundle, run without Node globals, against a server', () => {
  let s: TestServer;
  let key: string;
  let lib: BrowserEntry;

  before(async () => {
    s = await startServer({ hosted: { pageSize: 3 } });
    key = await s.user('alice');
    await s.user('bob');
    await s.services.sessions.setPassword('alice', 'alice password 1');
    await release(api(s.url, key), 'alice', 'Echo', {
      'src/index.js': "export function apply(input) { if (input === 'fail') throw new Error('boom'); return input; }\n",
    }, { settings: { language: 'javascript' } });
    lib = await loadBundle();
  });
  after(() => s.close());

  test('with an API key: data, listings with paging, calls, algorithms, keys, errors', async () => {
    const client = new lib.BrowserClient({ baseUrl: s.url, apiKey: key });
    assert.equal(client.hasApiKey, true);
    assert.equal((await client.whoami()).username, 'alice');

    // Data: text, bytes and a Blob (a File is one) in; bytes, text and a web stream out.
    const dir = client.dir('data://.my/photos');
    assert.equal(await dir.create({ acl: 'private' }), 'data://alice/photos');
    assert.equal(await dir.file('a.txt').put('héllo'), 'data://alice/photos/a.txt');
    await dir.file('b.bin').put(new Uint8Array([0, 1, 254, 255]));
    await dir.file('c.txt').put(new Blob(['from ', 'a blob']));
    const bytes = await dir.file('b.bin').get();
    assert.ok(bytes instanceof Uint8Array && !Buffer.isBuffer(bytes), 'plain bytes, no Buffer');
    assert.deepEqual([...bytes], [0, 1, 254, 255]);
    assert.equal(await dir.file('a.txt').text(), 'héllo');
    const stream = await dir.file('c.txt').stream();
    assert.ok(stream instanceof ReadableStream);
    assert.equal(await new Response(stream).text(), 'from a blob');
    assert.equal(await dir.file('a.txt').exists(), true);
    for (const n of ['d.txt', 'e.txt']) await dir.file(n).put(n);
    const first = await dir.page();
    assert.equal(first.files?.length, 3, 'three a page');
    assert.ok(first.marker);
    assert.deepEqual((await collect(dir.files())).map((e) => e.name), ['a.txt', 'b.bin', 'c.txt', 'd.txt', 'e.txt']);
    assert.equal(lib.aclLevel(await dir.getAcl()), 'private');
    await dir.setAcl('public');
    assert.equal(lib.aclLevel(await dir.getAcl()), 'public');
    assert.equal(await dir.file('e.txt').delete(), 1);
    assert.equal(await dir.file('e.txt').exists(), false);
    const missing = await rejects(dir.file('e.txt').text(), lib.ApiError);
    assert.equal(missing.status, 404);
    assert.equal(missing.code, 'not_found');
    assert.match(missing.requestId ?? '', /^req-/);
    const notEmpty = await rejects(dir.delete(), lib.ApiError);
    assert.equal(notEmpty.code, 'directory_not_empty');
    assert.equal(await dir.delete({ force: true }), 4);

    // Calls: text, JSON, binary (base64 in the envelope, bytes here), and a failure.
    const echo = client.algo('alice/Echo');
    const hi = await echo.pipe('hi');
    assert.equal(hi.result, 'hi');
    assert.equal(hi.metadata.content_type, 'text');
    assert.equal(typeof hi.metadata.duration, 'number');
    assert.deepEqual((await echo.pipe({ a: [1, null] })).result, { a: [1, null] });
    const bin = await echo.pipe(new Uint8Array([7, 0, 255]));
    assert.equal(bin.metadata.content_type, 'binary');
    assert.ok(bin.result instanceof Uint8Array && !Buffer.isBuffer(bin.result));
    assert.deepEqual([...(bin.result as Uint8Array)], [7, 0, 255]);
    const raw = await echo.pipe(new Uint8Array([1, 2]), { output: 'raw' });
    assert.deepEqual([...(raw.result as Uint8Array)], [1, 2]);
    const failed = await rejects(echo.pipe('fail'), lib.AlgorithmError);
    assert.equal(failed.message, 'boom');

    // Management: the algorithm, its versions and builds, lists, keys.
    assert.equal((await echo.info()).settings.language, 'javascript');
    const versions = await collect(echo.versions());
    assert.deepEqual(versions.map((v) => v.version_info.semantic_version), ['0.1.0']);
    assert.equal((await echo.builds())[0]?.build_id, versions[0]?.version_info.git_hash);
    assert.equal((await echo.update({ details: { summary: 'says it back' } })).details.summary, 'says it back');
    assert.deepEqual((await collect(client.algorithms('alice'))).map((a) => a.name), ['Echo']);
    assert.deepEqual((await collect(client.searchAlgorithms('echo'))).map((a) => `${a.owner}/${a.name}`), ['alice/Echo']);
    const created = await client.keys('alice').create({ name: 'browser', permissions: { allow_data_write: false } });
    assert.deepEqual((await client.keys('alice').list()).map((k) => k.name).sort(), ['browser', 'default-key']);
    await client.keys('alice').revoke(created.id);
    const revoked = await rejects(new lib.BrowserClient({ baseUrl: s.url, apiKey: created.api_key }).whoami(), lib.ApiError);
    assert.equal(revoked.code, 'api_key_revoked');
    const others = await rejects(client.keys('bob').list(), lib.ApiError);
    assert.equal(others.status, 403);
  });

  test('as the console: no key, the session cookie and X-CSRF-Token on every request; the page\'s origin by default', async () => {
    const signIn = await fetch(`${s.url}/v1/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ username: 'alice', password: 'alice password 1' }) });
    const session = await json(signIn);
    assert.equal(signIn.status, 200, JSON.stringify(session));
    const cookie = new RegExp(`${SESSION_COOKIE}=[A-Za-z0-9_-]+`).exec(signIn.headers.get('set-cookie') ?? '')![0];
    // A browser sends the cookie itself (credentials: 'same-origin'); Node's fetch has no cookie jar, so the test sends it.
    let asked = 0;
    const headers = () => {
      asked++;
      return { cookie, 'x-csrf-token': session.csrf_token as string };
    };
    const page = globalThis as { location?: { href: string } };
    page.location = { href: `${s.url}/console/algorithms?x=1` };
    let client: InstanceType<BrowserEntry['BrowserClient']>;
    try {
      client = new lib.BrowserClient({ headers });
    } finally {
      delete page.location;
    }
    assert.equal(client.baseUrl, s.url, 'the page\'s origin');
    assert.equal(client.hasApiKey, false);
    assert.equal((await client.whoami()).username, 'alice');
    assert.equal(await client.dir('data://.my/notes').create(), 'data://alice/notes');
    assert.equal(await client.file('data://.my/notes/console.txt').put('from the console'), 'data://alice/notes/console.txt');
    assert.equal(await client.file('data://.my/notes/console.txt').text(), 'from the console');
    assert.equal((await client.algo('alice/Echo').pipe('via a session')).result, 'via a session');
    assert.equal(asked, 5, 'the headers are asked for once a request (whoami, create, put, text, pipe)');

    const noToken = new lib.BrowserClient({ baseUrl: s.url, headers: { cookie } });
    const refused = await rejects(noToken.file('data://.my/notes/console.txt').put('forged'), lib.ApiError);
    assert.equal(refused.status, 403);
    assert.equal(refused.code, 'csrf_token_invalid');
    assert.equal(await client.file('data://.my/notes/console.txt').text(), 'from the console');
    const nobody = await rejects(new lib.BrowserClient({ baseUrl: s.url }).whoami(), lib.ApiError);
    assert.equal(nobody.code, 'auth_required');
  });
});
