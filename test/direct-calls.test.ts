/**
 * The direct call path (src/http/directCalls.ts) against fastify's routes (callRoutes.ts),
 * request by request on one real server: each call of a matrix is sent once with a
 * Content-Length, which the direct path takes, and once chunked, which only fastify takes. The
 * two answers must be the same: status, headers in order, and body, apart from what differs by
 * nature (the date, the request id, the call's duration).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { api, startServer, type TestServer } from './helpers/server.ts';
import { release } from './helpers/algorithms.ts';

let s: TestServer;
let aliceKey: string;
let narrowKey: string;
let noAlgoKey: string;

const KINDS = `
export async function apply(input) {
  if (typeof input !== 'string') return input;
  switch (input) {
    case 'print': console.log('printed'); return 'done';
    case 'fail': throw new Error('boom');
    case 'custom': throw Object.assign(new Error('that will not do'), { error_type: 'InputError' });
    case 'exit': process.exit(3);
    case 'bytes': return Buffer.from([0, 1, 2, 255]);
    default: return input;
  }
}
`;

before(async () => {
  s = await startServer();
  aliceKey = await s.user('alice');
  const alice = api(s.url, aliceKey);
  await release(alice, 'alice', 'Kinds', { 'src/index.js': KINDS }, { settings: { language: 'javascript' } });
  const make = async (body: Record<string, unknown>) => {
    const r = await alice('/v1/users/alice/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const text = await r.text();
    assert.equal(r.status, 201, text);
    return (JSON.parse(text) as { api_key: string }).api_key;
  };
  narrowKey = await make({ name: 'narrow', permissions: { algo_acl: ['algo://alice/Other/*'] } });
  noAlgoKey = await make({ name: 'noalgo', permissions: { allow_algo: false } });
});

after(async () => {
  await s?.close();
});

interface Answer {
  status: number;
  headers: string[];
  body: Buffer;
}

/** POSTs `body` with a Content-Length (`chunked: false`) or in chunks without one. */
function post(path: string, headers: Record<string, string>, body: Buffer, chunked: boolean): Promise<Answer> {
  const u = new URL(s.url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path, method: 'POST', headers: chunked ? headers : { ...headers, 'content-length': String(body.length) } }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.rawHeaders, body: Buffer.concat(parts) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    if (chunked) {
      req.write(body.subarray(0, 1));
      req.end(body.subarray(1));
    } else req.end(body);
  });
}

/**
 * What may differ between two answers to the same request: the date, ids, durations, lengths
 * that carry them, and whether a worker was started for it (the first of the two may be cold).
 */
function normalised(a: Answer): { status: number; headers: [string, string][]; body: unknown } {
  const headers: [string, string][] = [];
  for (let i = 0; i < a.headers.length; i += 2) {
    const name = a.headers[i]!.toLowerCase();
    if (name === 'date') continue;
    const value = a.headers[i + 1]!;
    headers.push([name, name === 'content-length' ? '(length)' : name === 'x-cold-start' && /^(true|false)$/.test(value) ? '(true or false)' : value]);
  }
  let body: unknown = a.body.toString('latin1');
  if (a.headers.some((h, i) => i % 2 === 0 && h.toLowerCase() === 'content-type') && /json/.test(String(a.headers[a.headers.findIndex((h) => h.toLowerCase() === 'content-type') + 1]))) {
    const doc = JSON.parse(a.body.toString('utf8')) as { error?: { id?: string }; metadata?: { duration?: number } };
    if (doc.error?.id !== undefined) doc.error.id = '(id)';
    if (doc.metadata?.duration !== undefined) doc.metadata.duration = 0;
    body = doc;
  }
  return { status: a.status, headers, body };
}

const cases: { what: string; path: string; key?: () => string; type?: string; body: string | Buffer; direct: boolean }[] = [
  { what: 'text in, text out', path: '/v1/algo/alice/Kinds', body: 'hello', direct: true },
  { what: 'JSON in, JSON out', path: '/v1/algo/alice/Kinds', type: 'application/json', body: '{"a":[1,2,"é"]}', direct: true },
  { what: 'bytes in, bytes out', path: '/v1/algo/alice/Kinds', type: 'application/octet-stream', body: Buffer.from([9, 8, 7, 0, 255]), direct: true },
  { what: 'a binary result', path: '/v1/algo/alice/Kinds', body: 'bytes', direct: true },
  { what: "the algorithm's error", path: '/v1/algo/alice/Kinds', body: 'fail', direct: true },
  { what: 'an error with its own type', path: '/v1/algo/alice/Kinds', body: 'custom', direct: true },
  { what: 'a crash', path: '/v1/algo/alice/Kinds', body: 'exit', direct: true },
  { what: 'stdout for the owner', path: '/v1/algo/alice/Kinds?stdout=true', body: 'print', direct: true },
  { what: 'output=raw', path: '/v1/algo/alice/Kinds?output=raw', body: 'raw text', direct: true },
  { what: 'output=raw of an error', path: '/v1/algo/alice/Kinds?output=raw', body: 'fail', direct: true },
  { what: 'a version that does not exist', path: '/v1/algo/alice/Kinds/9.9.9', body: 'x', direct: true },
  { what: 'an algorithm that does not exist', path: '/v1/algo/alice/Nothing', body: 'x', direct: true },
  { what: 'input that is not JSON', path: '/v1/algo/alice/Kinds', type: 'application/json', body: '{"a":', direct: true },
  { what: "a key whose algo_acl leaves it out", path: '/v1/algo/alice/Kinds', key: () => narrowKey, body: 'x', direct: true },
  { what: 'a key that may not call algorithms', path: '/v1/algo/alice/Kinds', key: () => noAlgoKey, body: 'x', direct: true },
  // Left to fastify by the direct path itself: the answers must still be the same.
  { what: 'a refused key', path: '/v1/algo/alice/Kinds', key: () => 'not-a-key', body: 'x', direct: false },
  { what: 'a bad timeout', path: '/v1/algo/alice/Kinds?timeout=soon', body: 'x', direct: false },
  { what: 'an unsupported Content-Type', path: '/v1/algo/alice/Kinds', type: 'image/png', body: 'x', direct: false },
  { what: 'output=void', path: '/v1/algo/alice/Kinds?output=void', body: 'x', direct: false },
];

test('every call is answered the same by the direct path and by fastify', async () => {
  for (const c of cases) {
    const headers = { authorization: `Simple ${c.key ? c.key() : aliceKey}`, 'content-type': c.type ?? 'text/plain' };
    const body = Buffer.isBuffer(c.body) ? c.body : Buffer.from(c.body);
    const before = s.app.directCalls.answered;
    const direct = await post(c.path, headers, body, false);
    assert.equal(s.app.directCalls.answered - before, c.direct ? 1 : 0, `${c.what}: ${c.direct ? 'not' : ''} answered on the direct path`);
    const viaFastify = await post(c.path, headers, body, true);
    assert.equal(s.app.directCalls.answered - before, c.direct ? 1 : 0, `${c.what}: a chunked request reached the direct path`);
    const a = normalised(direct);
    const b = normalised(viaFastify);
    if (c.what === 'output=void') {
      // Each answer names its own request id; the rest is the same.
      (a.body as { request_id?: string }).request_id = (b.body as { request_id?: string }).request_id = '(id)';
    }
    assert.deepEqual(a, b, c.what);
  }
});
