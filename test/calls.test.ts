/**
 * The call API (spec 4.1, 2.2, 7, 8; compat.md "Calling an algorithm") over real HTTP, with
 * real algorithms built and run by the server, and the official npm client driven unchanged.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import algorithmia from 'algorithmia';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { callAlgo, release } from './helpers/algorithms.ts';
import { parseAlgoRef } from '../src/http/callRoutes.ts';
import type { AppError } from '../src/errors.ts';

let s: TestServer;
let aliceKey: string;
let alice: ReturnType<typeof api>;
let bob: ReturnType<typeof api>;

/** Answers by what it is sent: a small menu of behaviours to observe from outside. */
const KINDS = `
export async function apply(input) {
  if (typeof input !== 'string') return input;
  switch (input) {
    case 'void': return undefined;
    case 'print': console.log('printed'); return 'done';
    case 'fail': throw new Error('boom');
    case 'custom': throw Object.assign(new Error('that will not do'), { error_type: 'InputError' });
    case 'loop': for (;;) {}
    case 'exit': process.exit(3);
    case 'flood': { const line = 'x'.repeat(1023) + '\\n'; for (let i = 0; i < 3000; i++) process.stdout.write(line); return 'flooded'; }
    case 'slow': await new Promise((r) => setTimeout(r, 150)); return 'slow';
    default: return input;
  }
}
`;

before(async () => {
  s = await startServer();
  aliceKey = await s.user('alice');
  alice = api(s.url, aliceKey);
  bob = api(s.url, await s.user('bob'));
  const js = { language: 'javascript' };
  await release(alice, 'alice', 'Kinds', { 'src/index.js': KINDS }, { settings: js });
  await release(alice, 'alice', 'TextOnly', { 'src/TextOnly.js': "exports.input_types = ['text'];\nexports.apply = (input, cb) => cb(null, 'Hello ' + input);\n" }, { settings: js });
  await release(alice, 'alice', 'Secret', { 'src/index.js': "export const apply = () => 'secret';\n" }, { settings: { ...js, algorithm_callability: 'private' } });
  await release(alice, 'alice', 'Open', { 'src/index.js': "export function apply() { throw new Error('open failure'); }\n" }, { settings: { ...js, source_visibility: 'open' } });
});
after(() => s.close());

const kinds = (who: typeof alice, body: string | Buffer, type = 'text/plain', query = '') => callAlgo(who, 'alice/Kinds', body, type, query);

describe('inputs and results', () => {
  test('text, JSON, binary and void, with content_type and duration', async () => {
    let body = await json(await kinds(bob, 'héllo'));
    assert.equal(body.result, 'héllo');
    assert.equal(body.metadata.content_type, 'text');
    assert.equal(typeof body.metadata.duration, 'number');
    assert.ok(body.metadata.duration >= 0 && body.metadata.duration < 5);

    for (const value of [{ a: [1, 2, { b: null }] }, [1, 'two'], 42, true, null]) {
      body = await json(await kinds(bob, JSON.stringify(value), 'application/json'));
      assert.deepEqual(body.result, value);
      assert.equal(body.metadata.content_type, 'json');
    }

    const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    body = await json(await kinds(bob, bytes, 'application/octet-stream'));
    assert.equal(body.metadata.content_type, 'binary');
    assert.deepEqual(Buffer.from(body.result, 'base64'), bytes);

    body = await json(await kinds(bob, 'void'));
    assert.equal(body.result, null);
    assert.equal(body.metadata.content_type, 'void');
  });

  test('text by any of its names and charsets', async () => {
    for (const type of ['text/plain; charset=utf-8', 'application/text', 'application/text; charset=UTF-8', 'text/plain']) {
      const body = await json(await kinds(bob, 'same', type));
      assert.equal(body.result, 'same', type);
      assert.equal(body.metadata.content_type, 'text', type);
    }
  });

  test('every answer is application/json', async () => {
    const r = await kinds(bob, 'x');
    assert.match(r.headers.get('content-type') ?? '', /^application\/json/);
  });

  test('bad input is a clear 4xx before anything runs', async () => {
    let r = await kinds(bob, '{not json', 'application/json');
    assert.equal(r.status, 400);
    assert.equal((await json(r)).error.code, 'invalid_json');
    r = await kinds(bob, 'a=b', 'application/x-www-form-urlencoded');
    assert.equal(r.status, 415);
    assert.match((await json(r)).error.message, /application\/json, text\/plain or application\/octet-stream/);
    for (const q of ['?timeout=abc', '?timeout=0', '?timeout=3001', '?timeout=-5', '?timeout=0x10', '?timeout=1e2', '?timeout=%20', '?output=weird', '?stdout=maybe']) {
      r = await kinds(bob, 'x', 'text/plain', q);
      assert.equal(r.status, 400, q);
      assert.equal((await json(r)).error.code, 'invalid_query', q);
    }
    // Unknown parameters are ignored (compat.md).
    assert.equal((await json(await kinds(bob, 'x', 'text/plain', '?whatever=1&timeout=60'))).result, 'x');
  });

  test('an input over 10 MiB is refused while it streams in, chunked or declared', async () => {
    const url = new URL(`${s.url}/v1/algo/alice/Kinds`);
    const status = await new Promise<number>((resolve, reject) => {
      let answered = false;
      const req = http.request(url, { method: 'POST', headers: { authorization: `Simple ${aliceKey}`, 'content-type': 'application/octet-stream' } }, (res) => {
        answered = true;
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      // The server closes the connection after its answer; our writes after that may fail.
      req.on('error', (err) => (answered ? undefined : reject(err)));
      const chunk = Buffer.alloc(1024 * 1024, 1);
      let sent = 0;
      const pump = () => {
        while (sent < 12 && !answered) {
          sent++;
          if (!req.write(chunk)) return void req.once('drain', pump);
        }
        req.end();
      };
      pump();
    });
    assert.equal(status, 413);
    const r = await kinds(bob, Buffer.alloc(10 * 1024 * 1024 + 1), 'application/octet-stream');
    assert.equal(r.status, 413);
    assert.match((await json(r)).error.message, /10 MiB/);
    // Exactly 10 MiB is fine.
    const ok = await json(await kinds(bob, Buffer.alloc(10 * 1024 * 1024, 7), 'application/octet-stream'));
    assert.equal(Buffer.from(ok.result, 'base64').length, 10 * 1024 * 1024);
  });

  test('an input is read whole however it arrives: with its headers, after them in pieces, empty, or followed by the next request', async () => {
    const port = Number(new URL(s.url).port);
    const head = (length: number) => `POST /v1/algo/alice/Kinds HTTP/1.1\r\nHost: x\r\nAuthorization: Simple ${aliceKey}\r\nContent-Type: text/plain\r\nContent-Length: ${length}\r\n\r\n`;
    const results = (text: string) => [...text.matchAll(/\r\n\r\n(\{.*?\}\})/g)].map((m) => JSON.parse(m[1]!).result as string);
    // Sends `pieces` on one connection, 30 ms apart, and reads until `answers` responses came.
    const exchange = (pieces: string[], answers: number) =>
      new Promise<string[]>((resolve, reject) => {
        const socket = net.connect(port, '127.0.0.1');
        let text = '';
        const timer = setTimeout(() => (socket.destroy(), reject(new Error(`no answer in time; got ${text}`))), 10_000);
        socket.on('data', (d) => {
          text += d.toString('utf8');
          if (results(text).length === answers) {
            clearTimeout(timer);
            socket.end();
            resolve(results(text));
          }
        });
        socket.on('error', reject);
        pieces.forEach((p, i) => setTimeout(() => socket.write(p), i * 30));
      });
    const body = 'stitched together';
    assert.deepEqual(await exchange([head(body.length) + body], 1), [body]);
    assert.deepEqual(await exchange([head(body.length), body.slice(0, 5), body.slice(5)], 1), [body]);
    assert.deepEqual(await exchange([head(0)], 1), ['']);
    // Two requests in one write: the first body ends where its Content-Length says.
    assert.deepEqual(await exchange([head(3) + 'one' + head(3) + 'two'], 2), ['one', 'two']);
  });

  test('how a reference is read: owner, name and version, trailing slashes tolerated, empty segments not', () => {
    assert.deepEqual(parseAlgoRef('a/B'), { owner: 'a', name: 'B', version: undefined });
    assert.deepEqual(parseAlgoRef('a/B/1.2.*//'), { owner: 'a', name: 'B', version: '1.2.*' });
    assert.deepEqual(parseAlgoRef('ALGO:/a/B/'), { owner: 'a', name: 'B', version: undefined });
    assert.deepEqual(parseAlgoRef('algo://%61/B%2F0.1.0'), { owner: 'a', name: 'B', version: '0.1.0' });
    for (const bad of ['a', 'a//B', '/a/B', 'a/B/1.0.0/x', '///', '', 'a/%zz']) {
      assert.throws(() => parseAlgoRef(bad), (e: AppError) => e.code === 'invalid_path', bad);
    }
  });

  test('the reference may carry algo://, a trailing slash or percent-encoding', async () => {
    for (const ref of ['algo://alice/Kinds', 'algo:/alice/Kinds', 'alice/Kinds/', 'alice/%4Binds', 'algo://alice/Kinds/0.1.0']) {
      const body = await json(await callAlgo(bob, ref, 'ok'));
      assert.equal(body.result, 'ok', ref);
    }
    const r = await callAlgo(bob, 'alice', 'x');
    assert.equal(r.status, 400);
    assert.equal((await json(r)).error.code, 'invalid_path');
  });
});

describe('how an algorithm exports apply', () => {
  // Each style as users write it; every one answers `<style>:<input>`, through a real build and a
  // real sandboxed call. A default export that is itself a function inherits
  // Function.prototype.apply: it must be taken as the function, not that inherited member.
  const STYLES: Record<string, Record<string, string>> = {
    Named: { 'src/index.js': "export function apply(input) { return 'named:' + input; }\n" },
    DefaultFunction: { 'src/index.js': "export default function apply(input) { return 'default function:' + input; }\n" },
    DefaultAnonymous: { 'src/index.js': "export default (input) => 'default arrow:' + input;\n" },
    DefaultObject: { 'src/index.js': "export default { prefix: 'default object:', apply(input) { return this.prefix + input; } };\n" },
    DefaultInstance: { 'src/index.js': "class Algo { apply(input) { return 'class instance:' + input; } }\nexport default new Algo();\n" },
    CommonJs: { 'src/index.js': "exports.apply = function (input) { return 'commonjs:' + input; };\n" },
    ModuleExports: { 'src/index.js': "module.exports = function apply(input) { return 'module.exports:' + input; };\n" },
    Async: { 'src/index.js': "export default async function apply(input) { await new Promise((r) => setTimeout(r, 5)); return 'async:' + input; }\n" },
    Callback: { 'src/index.js': "export default function apply(input, cb) { setTimeout(() => cb(null, 'callback:' + input), 5); }\n" },
    // The runner requires an entry (require(esm)) and imports what cannot be required: a module
    // with top-level await; a CommonJS entry is imported from the require cache. Each runs once.
    TopLevelAwait: { 'src/index.js': "globalThis.runs = (globalThis.runs ?? 0) + 1;\nconst word = await Promise.resolve('top-level await');\nexport function apply(input) { return word + ' ' + globalThis.runs + ':' + input; }\n" },
    CommonJsOnce: { 'src/index.js': "globalThis.runs = (globalThis.runs ?? 0) + 1;\nexports.apply = (input) => 'commonjs ' + globalThis.runs + ':' + input;\n" },
  };
  const expected: Record<string, string> = {
    Named: 'named', DefaultFunction: 'default function', DefaultAnonymous: 'default arrow', DefaultObject: 'default object',
    DefaultInstance: 'class instance', CommonJs: 'commonjs', ModuleExports: 'module.exports', Async: 'async', Callback: 'callback',
    TopLevelAwait: 'top-level await 1', CommonJsOnce: 'commonjs 1',
  };

  test('named, default function or object, class instance, CommonJS, async, callback and top-level await styles all answer, each loaded once', async () => {
    for (const [name, files] of Object.entries(STYLES)) {
      await release(alice, 'alice', `Style${name}`, files, { settings: { language: 'javascript' } });
    }
    for (const name of Object.keys(STYLES)) {
      const body = await json(await callAlgo(bob, `alice/Style${name}`, 'x'));
      assert.equal(body.error, undefined, `${name}: ${JSON.stringify(body.error)}`);
      assert.equal(body.result, `${expected[name]}:x`, name);
    }
  });
});

describe('failures are outcomes: HTTP 200 with an error', () => {
  test('an exception: message, AlgorithmError, stack trace for the owner only (closed source)', async () => {
    let r = await kinds(alice, 'fail');
    assert.equal(r.status, 200);
    let body = await json(r);
    assert.equal(body.error.message, 'boom');
    assert.equal(body.error.error_type, 'AlgorithmError');
    assert.match(body.error.stacktrace, /Error: boom/);
    assert.equal(body.error.stack_trace, body.error.stacktrace);
    assert.equal(typeof body.metadata.duration, 'number');
    assert.equal(body.result, undefined);
    r = await kinds(bob, 'fail');
    body = await json(r);
    assert.equal(body.error.message, 'boom');
    assert.equal(body.error.stacktrace, undefined);
  });

  test('open source shows its stack trace to every caller', async () => {
    const body = await json(await callAlgo(bob, 'alice/Open', 'x'));
    assert.equal(body.error.message, 'open failure');
    assert.match(body.error.stacktrace, /open failure/);
  });

  test('an error_type set by the algorithm is kept', async () => {
    const body = await json(await kinds(bob, 'custom'));
    assert.equal(body.error.error_type, 'InputError');
    assert.equal(body.error.message, 'that will not do');
  });

  test('input of a type the algorithm does not accept: InputError with the original message', async () => {
    const r = await callAlgo(bob, 'alice/TextOnly', '[1,2]', 'application/json');
    assert.equal(r.status, 200);
    const body = await json(r);
    assert.equal(body.error.message, 'apply() functions do not match input data: the input is a JSON array; this algorithm accepts text (Content-Type: text/plain) (its input_types)');
    assert.equal(body.error.error_type, 'InputError');
    assert.equal((await json(await callAlgo(bob, 'alice/TextOnly', 'you'))).result, 'Hello you');
  });

  test('a timeout kills the worker; the next call gets a fresh one', async () => {
    const body = await json(await kinds(alice, 'loop', 'text/plain', '?timeout=1'));
    assert.equal(body.error.error_type, 'TimeoutError');
    assert.equal(body.error.message, 'algo://alice/Kinds timed out after 1 seconds');
    assert.equal((await json(await kinds(alice, 'after'))).result, 'after');
  });

  test('an algorithm that exits: SystemExit with its code', async () => {
    const body = await json(await kinds(bob, 'exit'));
    assert.equal(body.error.error_type, 'SystemExit');
    assert.match(body.error.message, /exited with code 3/);
    assert.equal((await json(await kinds(bob, 'again'))).result, 'again');
  });

  test('unknown algorithms, owners and versions', async () => {
    for (const [ref, message] of [
      ['alice/Nope', 'algorithm algo://alice/Nope not found'],
      ['nobody/Kinds', 'algorithm algo://nobody/Kinds not found'],
      ['alice/Kinds/9.9.9', 'algorithm algo://alice/Kinds/9.9.9 not found'],
    ]) {
      const r = await callAlgo(bob, ref!, 'x');
      assert.equal(r.status, 200);
      const body = await json(r);
      assert.equal(body.error.message, message);
      assert.equal(body.error.error_type, 'EntityNotFoundError');
    }
    const bad = await callAlgo(bob, 'alice/Kinds/1.x.y', 'x');
    assert.equal(bad.status, 400);
    assert.equal((await json(bad)).error.code, 'invalid_version');
  });

  test('private algorithms are callable by their owner only', async () => {
    assert.equal((await json(await callAlgo(alice, 'alice/Secret', 'x'))).result, 'secret');
    const body = await json(await callAlgo(bob, 'alice/Secret', 'x'));
    assert.equal(body.error.message, 'algorithm algo://alice/Secret not found');
  });

  test('calls without a key are 401', async () => {
    const r = await callAlgo(api(s.url, undefined), 'alice/Kinds', 'x');
    assert.equal(r.status, 401);
  });
});

describe('query options', () => {
  test('stdout: for the owner who asks (any capitalisation), never for others', async () => {
    let body = await json(await kinds(alice, 'print', 'text/plain', '?stdout=true'));
    assert.equal(body.metadata.stdout, 'printed\n');
    body = await json(await kinds(alice, 'print', 'text/plain', '?stdout=True'));
    assert.equal(body.metadata.stdout, 'printed\n');
    body = await json(await kinds(alice, 'print'));
    assert.equal(body.metadata.stdout, undefined);
    body = await json(await kinds(bob, 'print', 'text/plain', '?stdout=true'));
    assert.equal(body.result, 'done');
    assert.equal(body.metadata.stdout, undefined);
  });

  test('a stdout flood is capped and marked truncated', async () => {
    const body = await json(await kinds(alice, 'flood', 'text/plain', '?stdout=true'));
    assert.equal(body.result, 'flooded');
    assert.equal(body.metadata.stdout.length, 1024 * 1024);
    assert.equal(body.metadata.stdout_truncated, true);
  });

  test('output=raw: the result itself with a fitting type; a failure is a 400 with its message', async () => {
    let r = await kinds(bob, 'plain', 'text/plain', '?output=raw');
    assert.equal(r.status, 200);
    assert.match(r.headers.get('content-type') ?? '', /^text\/plain/);
    assert.equal(await r.text(), 'plain');
    r = await kinds(bob, '{"k":[1]}', 'application/json', '?output=raw');
    assert.match(r.headers.get('content-type') ?? '', /^application\/json/);
    assert.deepEqual(await r.json(), { k: [1] });
    r = await kinds(bob, Buffer.from([0, 1, 2, 255]), 'application/octet-stream', '?output=raw');
    assert.equal(r.headers.get('content-type'), 'application/octet-stream');
    assert.deepEqual(Buffer.from(await r.arrayBuffer()), Buffer.from([0, 1, 2, 255]));
    r = await kinds(bob, 'fail', 'text/plain', '?output=raw');
    assert.equal(r.status, 400);
    assert.equal(await r.text(), 'boom');
  });

  test('output=void answers at once with a request id', async () => {
    const r = await kinds(bob, 'slow', 'text/plain', '?output=void');
    assert.equal(r.status, 200);
    const body = await json(r);
    assert.equal(body.async, true);
    assert.match(body.request_id, /^req-[0-9a-f]{24}$/);
  });

  test('output=void still checks the key and the reference before answering', async () => {
    const r = await alice('/v1/users/alice/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'novoid', permissions: { allow_algo: false } }) });
    const noAlgo = api(s.url, (await json(r)).api_key);
    assert.equal((await kinds(noAlgo, 'x', 'text/plain', '?output=void')).status, 401);
    const bad = await callAlgo(bob, 'alice/Kinds/banana', 'x', 'text/plain', '?output=void');
    assert.equal(bad.status, 400);
    assert.equal((await json(bad)).error.code, 'invalid_version');
    const missing = await json(await callAlgo(bob, 'alice/Nope', 'x', 'text/plain', '?output=void'));
    assert.equal(missing.error.error_type, 'EntityNotFoundError');
  });

  test('parallel calls each get their own answer', async () => {
    const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => kinds(bob, `n${i}`).then(json)));
    assert.deepEqual(answers.map((b) => b.result), Array.from({ length: 12 }, (_, i) => `n${i}`));
  });
});

describe('what a key may call', () => {
  const keyWith = async (permissions: Record<string, unknown>) => {
    const r = await alice('/v1/users/alice/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: `k${Math.random().toString(36).slice(2, 10)}`, permissions }) });
    assert.equal(r.status, 201);
    return api(s.url, (await json(r)).api_key);
  };

  test('allow_algo off: 401 with the reason', async () => {
    const k = await keyWith({ allow_algo: false });
    const r = await kinds(k, 'x');
    assert.equal(r.status, 401);
    const body = await json(r);
    assert.equal(body.error.code, 'algo_not_allowed');
    assert.match(body.error.message, /allow_algo is off/);
  });

  test('algo_acl: only the listed owners or algorithms', async () => {
    const other = await keyWith({ algo_acl: ['algo://bob/*'] });
    assert.equal((await kinds(other, 'x')).status, 401);
    const one = await keyWith({ algo_acl: ['algo://alice/Kinds/*'] });
    assert.equal((await json(await kinds(one, 'x'))).result, 'x');
    assert.equal((await callAlgo(one, 'alice/TextOnly', 'x')).status, 401);
    const owner = await keyWith({ algo_acl: ['algo://ALICE/*'] });
    assert.equal((await json(await callAlgo(owner, 'alice/TextOnly', 'x'))).result, 'Hello x');
  });

  test('browser calls: allow_web_algo, referer_host and CORS', async () => {
    const web = (k: typeof alice, origin?: string) =>
      k('/v1/web/algo/alice/Kinds', { method: 'POST', headers: { 'content-type': 'text/plain', ...(origin ? { origin } : {}) }, body: 'w' });
    let r = await web(bob, 'https://app.example');
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('access-control-allow-origin'), 'https://app.example');
    assert.equal((await json(r)).result, 'w');
    const noWeb = await keyWith({ allow_web_algo: false });
    r = await web(noWeb, 'https://app.example');
    assert.equal(r.status, 401);
    assert.match((await json(r)).error.message, /allow_web_algo is off/);
    const pinned = await keyWith({ referer_host: '*.example.com' });
    assert.equal((await web(pinned, 'https://shop.example.com')).status, 200);
    assert.equal((await web(pinned, 'https://example.com.evil.net')).status, 401);
    assert.equal((await web(pinned)).status, 401);
    const pre = await fetch(`${s.url}/v1/web/algo/alice/Kinds`, { method: 'OPTIONS', headers: { origin: 'https://app.example', 'access-control-request-method': 'POST' } });
    assert.equal(pre.status, 204);
    assert.match(pre.headers.get('access-control-allow-headers') ?? '', /Authorization/);
  });
});

describe('the official npm client algorithmia@0.3.10', () => {
  const pipe = (ref: string, input: unknown) =>
    new Promise<algorithmia.AlgoResponse>((resolve) => algorithmia(aliceKey, s.url).algo(ref).pipe(input).then(resolve));

  test('text, JSON and binary, decoded by get()', async () => {
    assert.equal((await pipe('alice/Kinds', 'text in')).get(), 'text in');
    assert.deepEqual((await pipe('alice/Kinds', { a: [1, 2] })).get(), { a: [1, 2] });
    const bytes = Buffer.from([9, 8, 7, 0, 255]);
    const got = (await pipe('alice/Kinds', bytes)).get();
    assert.ok(Buffer.isBuffer(got));
    assert.deepEqual(got, bytes);
    assert.equal((await pipe('alice/Kinds', 'void')).get(), null);
  });

  test('references as users write them: algo://, versions, query options', async () => {
    assert.equal((await pipe('algo://alice/Kinds/0.1.0', 'v')).get(), 'v');
    assert.equal((await pipe('alice/Kinds/0.1.*', 'v')).get(), 'v');
    const withStdout = await pipe('algo://alice/Kinds?timeout=10&stdout=true', 'print');
    assert.equal(withStdout.get(), 'done');
    assert.equal(withStdout.metadata?.stdout, 'printed\n');
  });

  test('errors: get() throws the message; the envelope carries the type', async () => {
    const r = await pipe('alice/Kinds', 'fail');
    assert.equal(r.status, 200);
    assert.throws(() => r.get(), (e: unknown) => e === 'boom');
    assert.equal(r.error?.error_type, 'AlgorithmError');
    const missing = await pipe('alice/Missing', 'x');
    assert.throws(() => missing.get(), (e: unknown) => e === 'algorithm algo://alice/Missing not found');
    const wrong = await pipe('alice/TextOnly', [1, 2]);
    assert.throws(() => wrong.get(), (e: unknown) => typeof e === 'string' && e.startsWith('apply() functions do not match input data: the input is a JSON array'));
  });

  test('output=raw through the client: the JSON result unwrapped', async () => {
    const r = await pipe('alice/Kinds?output=raw', { result: 'inner', metadata: { content_type: 'text' } });
    // The client parses the raw body itself: it sees the algorithm's object as the envelope.
    assert.equal(r.get(), 'inner');
  });
});
