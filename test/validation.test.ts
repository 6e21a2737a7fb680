import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import http from 'node:http';
import net from 'node:net';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { rawRequest } from './helpers/raw.ts';
import { createAlgorithm } from './helpers/algorithms.ts';
import { errorAnswer, headerSafe } from '../src/http/answers.ts';
import { clientErrorResponse } from '../src/http/clientErrors.ts';

let s: TestServer;
let key: string;
let auth: Record<string, string>;

/**
 * Everything that could change: every node row, every pending blob, every stored blob, and on
 * disk every file under the home's data dir (temporary files included).
 */
async function snapshot(server: TestServer): Promise<string> {
  const nodes = await server.services.store.db.selectFrom('nodes').selectAll().orderBy('id').execute();
  const pending = await server.services.store.db.selectFrom('pending_blobs').select('blob_id').orderBy('blob_id').execute();
  const blobs: string[] = [];
  for await (const id of server.services.blobs.list()) blobs.push(id);
  const files = server.services.config.blobs ? [] : fs.readdirSync(path.join(server.home, 'data'), { recursive: true }).map(String).sort();
  return JSON.stringify({ nodes, pending, blobs: blobs.sort(), files });
}

before(async () => {
  s = await startServer({ env: { ALGOHOST_MAX_UPLOAD_BYTES: '1000' } });
  key = await s.user('alice');
  await s.user('bob');
  auth = { authorization: `Simple ${key}` };
  const call = api(s.url, key);
  await call('/v1/data/.my', { method: 'POST', body: 'c', headers: { 'content-type': 'text/plain' } });
  await call('/v1/data/.my/c', { method: 'POST', body: 'sub', headers: { 'content-type': 'text/plain' } });
  await call('/v1/data/.my/c/file.txt', { method: 'PUT', body: 'original' });
  await call('/v1/data/.my', { method: 'POST', body: 'other', headers: { 'content-type': 'text/plain' } });
});
after(() => s.close());

interface Case {
  what: string;
  method: string;
  path: string;
  body?: string | Buffer;
  type?: string;
  status: number;
  code: string;
}

const longName = 'n'.repeat(256);
/** Lone surrogates as JSON writes them (escapes: the text of a body, not its characters). */
const LONE = ['\\ud800', '\\udfff', 'a\\ud800b'];
/** The same as a URL would carry them: the (invalid) UTF-8 of \ud800 and \udfff, percent-encoded. */
const SURROGATE_BYTES = ['%ED%A0%80', '%ED%BF%BF'];
const json_ = 'application/json';

const CASES: Case[] = [
  { what: '".." segment', method: 'PUT', path: '/v1/data/.my/c/../x', body: 'x', status: 400, code: 'invalid_path' },
  { what: '"." segment', method: 'PUT', path: '/v1/data/.my/c/./x', body: 'x', status: 400, code: 'invalid_path' },
  { what: 'empty segment', method: 'PUT', path: '/v1/data/.my/c//x', body: 'x', status: 400, code: 'invalid_path' },
  { what: 'encoded dots', method: 'PUT', path: '/v1/data/.my/c/%2e%2e/x', body: 'x', status: 400, code: 'invalid_path' },
  { what: 'encoded slashes escaping', method: 'PUT', path: '/v1/data/.my/c/..%2F..%2F..%2Fetc%2Fpasswd', body: 'x', status: 400, code: 'invalid_path' },
  { what: 'Java-encoded escape', method: 'GET', path: '/v1/data/.my%2F..%2F..%2Fsecret', status: 400, code: 'invalid_path' },
  { what: 'connector escape', method: 'GET', path: '/v1/connector/data/.my/c/%2e%2e/%2e%2e/x', status: 400, code: 'invalid_path' },
  { what: 'NUL', method: 'PUT', path: '/v1/data/.my/c/a%00b', body: 'x', status: 400, code: 'invalid_path' },
  { what: 'newline', method: 'PUT', path: '/v1/data/.my/c/a%0Ab', body: 'x', status: 400, code: 'invalid_path' },
  { what: 'DEL character', method: 'GET', path: '/v1/data/.my/c/a%7Fb', status: 400, code: 'invalid_path' },
  { what: 'malformed percent-encoding', method: 'GET', path: '/v1/data/.my/c/%zz', status: 400, code: 'invalid_path' },
  { what: 'over-long name', method: 'PUT', path: `/v1/data/.my/c/${longName}`, body: 'x', status: 400, code: 'invalid_path' },
  { what: 'over-long path', method: 'PUT', path: `/v1/data/.my/c/${'d/'.repeat(520)}x`, body: 'x', status: 400, code: 'invalid_path' },
  { what: 'too deep', method: 'GET', path: `/v1/data/.my/c/${'d/'.repeat(40)}x`, status: 400, code: 'invalid_path' },
  { what: 'bad connector name', method: 'GET', path: '/v1/connector/da!ta/x', status: 400, code: 'invalid_path' },
  { what: 'file at user level', method: 'PUT', path: '/v1/data/.my/loose.txt', body: 'x', status: 400, code: 'invalid_path' },
  { what: 'delete a user root', method: 'DELETE', path: '/v1/data/.my', status: 400, code: 'invalid_path' },
  { what: 'reserved owner', method: 'GET', path: '/v1/data/.session/x', status: 400, code: 'reserved_path' },
  { what: 'malformed JSON mkdir', method: 'POST', path: '/v1/data/.my/c', body: '{"name":', type: json_, status: 400, code: 'invalid_json' },
  { what: 'empty JSON mkdir', method: 'POST', path: '/v1/data/.my/c', body: '', type: json_, status: 400, code: 'invalid_json' },
  { what: 'JSON array mkdir', method: 'POST', path: '/v1/data/.my/c', body: '["x"]', type: json_, status: 400, code: 'invalid_body' },
  { what: 'name not a string', method: 'POST', path: '/v1/data/.my/c', body: '{"name":5}', type: json_, status: 400, code: 'invalid_body' },
  { what: 'unknown field', method: 'POST', path: '/v1/data/.my/c', body: '{"name":"x","color":"red"}', type: json_, status: 400, code: 'invalid_body' },
  { what: 'name with slash', method: 'POST', path: '/v1/data/.my/c', body: '{"name":"a/b"}', type: json_, status: 400, code: 'invalid_path' },
  { what: 'name ".."', method: 'POST', path: '/v1/data/.my/c', body: '{"name":".."}', type: json_, status: 400, code: 'invalid_path' },
  { what: 'name with NUL', method: 'POST', path: '/v1/data/.my/c', body: '{"name":"a\\u0000"}', type: json_, status: 400, code: 'invalid_path' },
  { what: 'unknown ACL string', method: 'POST', path: '/v1/data/.my', body: '{"name":"n1","acl":{"read":["user://bob"]}}', type: json_, status: 400, code: 'invalid_acl' },
  { what: 'ACL not an object', method: 'POST', path: '/v1/data/.my', body: '{"name":"n2","acl":"public"}', type: json_, status: 400, code: 'invalid_acl' },
  { what: 'two ACL forms', method: 'POST', path: '/v1/data/.my', body: '{"name":"n3","acl":{"read":["user://*","algo://.my/*"]}}', type: json_, status: 400, code: 'invalid_acl' },
  { what: 'ACL on a nested directory', method: 'POST', path: '/v1/data/.my/c', body: '{"name":"n4","acl":{"read":[]}}', type: json_, status: 400, code: 'invalid_acl' },
  { what: 'reserved collection name', method: 'POST', path: '/v1/data/.my', body: '{"name":".hidden"}', type: json_, status: 400, code: 'reserved_path' },
  { what: 'mkdir over a file', method: 'POST', path: '/v1/data/.my/c', body: '{"name":"file.txt"}', type: json_, status: 409, code: 'type_conflict' },
  { what: 'mkdir over a directory', method: 'POST', path: '/v1/data/.my/c', body: '{"name":"sub"}', type: json_, status: 409, code: 'already_exists' },
  { what: 'file over a directory', method: 'PUT', path: '/v1/data/.my/c/sub', body: 'x', status: 409, code: 'type_conflict' },
  { what: 'file over a collection', method: 'PUT', path: '/v1/data/.my/c', body: 'x', status: 409, code: 'type_conflict' },
  { what: 'file at the root, no such collection', method: 'PUT', path: '/v1/data/.my/nocoll', body: 'x', status: 400, code: 'invalid_path' },
  { what: 'file under a file', method: 'PUT', path: '/v1/data/.my/c/file.txt/x', body: 'x', status: 409, code: 'type_conflict' },
  { what: 'mkdir under a file', method: 'POST', path: '/v1/data/.my/c/file.txt', body: '{"name":"x"}', type: json_, status: 409, code: 'type_conflict' },
  { what: 'PATCH a file', method: 'PATCH', path: '/v1/data/.my/c/file.txt', body: '{"acl":{"read":[]}}', type: json_, status: 409, code: 'type_conflict' },
  { what: 'PATCH ACL of nested directory', method: 'PATCH', path: '/v1/data/.my/c/sub', body: '{"acl":{"read":[]}}', type: json_, status: 400, code: 'invalid_acl' },
  { what: 'PATCH malformed JSON', method: 'PATCH', path: '/v1/data/.my/c', body: '{', type: json_, status: 400, code: 'invalid_json' },
  { what: 'PATCH null body', method: 'PATCH', path: '/v1/data/.my/c', body: 'null', type: json_, status: 400, code: 'invalid_body' },
  { what: 'PATCH unknown field', method: 'PATCH', path: '/v1/data/.my/c', body: '{"name":"renamed"}', type: json_, status: 400, code: 'invalid_body' },
  { what: 'PATCH bad ACL', method: 'PATCH', path: '/v1/data/.my/c', body: '{"acl":{"read":["*"]}}', type: json_, status: 400, code: 'invalid_acl' },
  { what: 'marker never issued', method: 'GET', path: '/v1/data/.my/c?marker=abc', status: 400, code: 'invalid_marker' },
  { what: 'forged marker', method: 'GET', path: '/v1/data/.my/c?marker=WyJmIiwiIl0.AAAAAAAAAAAAAAAAAAAAAA', status: 400, code: 'invalid_marker' },
  { what: 'marker with multi-byte signature', method: 'GET', path: `/v1/data/.my/c?marker=WyJmIiwiIl0.${encodeURIComponent('é'.repeat(22))}`, status: 400, code: 'invalid_marker' },
  { what: 'marker with a body that is not JSON', method: 'GET', path: '/v1/data/.my/c?marker=%%%.AAAAAAAAAAAAAAAAAAAAAA', status: 400, code: 'invalid_marker' },
  { what: 'mkdir past the depth limit', method: 'POST', path: `/v1/data/.my/c/${'d/'.repeat(30)}d`, body: '{"name":"x"}', type: json_, status: 400, code: 'invalid_path' },
  { what: 'near-miss route', method: 'GET', path: '/v1/datax', status: 404, code: 'route_not_found' },
  { what: 'bad force value', method: 'DELETE', path: '/v1/data/.my/c?force=maybe', status: 400, code: 'invalid_query' },
  { what: 'bad acl value', method: 'GET', path: '/v1/data/.my/c?acl=please', status: 400, code: 'invalid_query' },
  { what: 'write to another user', method: 'PUT', path: '/v1/data/bob/x/y', body: 'x', status: 403, code: 'write_denied' },
  { what: 'delete another user', method: 'DELETE', path: '/v1/data/bob/x', status: 403, code: 'write_denied' },
  { what: 'missing file', method: 'DELETE', path: '/v1/data/.my/c/nope', status: 404, code: 'not_found' },
  { what: 'missing parent', method: 'PUT', path: '/v1/data/.my/nope/x', body: 'x', status: 404, code: 'not_found' },
  { what: 'unknown user', method: 'GET', path: '/v1/data/nobody/x', status: 404, code: 'not_found' },
  { what: 'declared size over the limit', method: 'PUT', path: '/v1/data/.my/c/big', body: Buffer.alloc(1001), status: 413, code: 'payload_too_large' },
  { what: 'OPTIONS', method: 'OPTIONS', path: '/v1/data/.my/c', status: 405, code: 'method_not_allowed' },
  { what: 'PROPFIND', method: 'PROPFIND', path: '/v1/data/.my/c', status: 405, code: 'method_not_allowed' },
  { what: 'mkdir body too large', method: 'POST', path: '/v1/data/.my/c', body: `{"name":"${'x'.repeat(70_000)}"}`, type: json_, status: 413, code: 'payload_too_large' },
  // Lone surrogates: a JSON escape can make a string that is not text (UTF-8 cannot carry it).
  ...LONE.flatMap((l): Case[] => [
    { what: `mkdir name ${l}`, method: 'POST', path: '/v1/data/.my/c', body: `{"name":"${l}"}`, type: json_, status: 400, code: 'invalid_path' },
    { what: `collection name ${l}`, method: 'POST', path: '/v1/data/.my', body: `{"name":"${l}"}`, type: json_, status: 400, code: 'invalid_path' },
    { what: `ACL entry ${l}`, method: 'POST', path: '/v1/data/.my', body: `{"name":"n5","acl":{"read":["${l}"]}}`, type: json_, status: 400, code: 'invalid_acl' },
    { what: `PATCH field ${l}`, method: 'PATCH', path: '/v1/data/.my/c', body: `{"${l}":1}`, type: json_, status: 400, code: 'invalid_body' },
  ]),
  // ... and in URLs, where they can only come as the UTF-8 of a surrogate (not UTF-8 at all).
  ...SURROGATE_BYTES.flatMap((b): Case[] => [
    { what: `path segment ${b}`, method: 'PUT', path: `/v1/data/.my/c/a${b}b`, body: 'x', status: 400, code: 'invalid_path' },
    { what: `connector path ${b}`, method: 'GET', path: `/v1/connector/data/.my/c/${b}`, status: 400, code: 'invalid_path' },
    { what: `marker ${b}`, method: 'GET', path: `/v1/data/.my/c?marker=${b}`, status: 400, code: 'invalid_marker' },
    { what: `force ${b}`, method: 'DELETE', path: `/v1/data/.my/c?force=${b}`, status: 400, code: 'invalid_query' },
  ]),
];

describe('bad input: a clear 4xx, and nothing changes', () => {
  test('every case answers its status and code, with a message and X-Error-Message', async () => {
    const before = await snapshot(s);
    for (const c of CASES) {
      const headers: Record<string, string> = { ...auth };
      if (c.type) headers['content-type'] = c.type;
      const res = await rawRequest(s.url, c.method, c.path, { headers, body: c.body });
      assert.equal(res.status, c.status, `${c.what}: status (${res.body.slice(0, 200)})`);
      const body = JSON.parse(res.body);
      assert.equal(body.error.code, c.code, `${c.what}: code`);
      assert.ok(typeof body.error.message === 'string' && body.error.message.length > 10, `${c.what}: message`);
      assert.ok(res.headers['x-error-message'], `${c.what}: X-Error-Message`);
      assert.match(String(res.headers['content-type']), /^application\/json/, `${c.what}: content type`);
    }
    assert.equal(await snapshot(s), before, 'no refused request changed any metadata or file');
    const still = await api(s.url, key)('/v1/data/.my/c/file.txt');
    assert.equal(await still.text(), 'original');
  });

  test('lone surrogates in names, text fields, paths and queries of every route that takes strings: a 400 with its own code, never a 500', async () => {
    const call = api(s.url, key);
    await createAlgorithm(call, 'alice', 'Surrogates', { language: 'python3' });
    const cases: Case[] = [
      ...[...LONE, '\\ud83d\\ude00'].flatMap((l): Case[] => [
        { what: `algorithm name ${l}`, method: 'POST', path: '/v1/algorithms/alice', body: `{"name":"${l}"}`, type: json_, status: 400, code: 'invalid_algorithm_name' },
        { what: `key name ${l}`, method: 'POST', path: '/v1/users/alice/keys', body: `{"name":"${l}"}`, type: json_, status: 400, code: 'invalid_key_name' },
        { what: `account label ${l}`, method: 'POST', path: '/v1/users/alice/connectors', body: `{"label":"${l}","protocol":"objstore","cred_data":{"access_key_id":"a","secret_access_key":"b"}}`, type: json_, status: 400, code: 'invalid_connector' },
      ]),
      ...LONE.flatMap((l): Case[] => [
        { what: `details.summary ${l}`, method: 'PUT', path: '/v1/algorithms/alice/Surrogates', body: `{"details":{"summary":"${l}"}}`, type: json_, status: 400, code: 'invalid_body' },
        { what: `details.label ${l}`, method: 'POST', path: '/v1/algorithms/alice', body: `{"name":"S2","details":{"label":"${l}"}}`, type: json_, status: 400, code: 'invalid_body' },
        { what: `settings.language ${l}`, method: 'PUT', path: '/v1/algorithms/alice/Surrogates', body: `{"settings":{"language":"${l}"}}`, type: json_, status: 400, code: 'invalid_body' },
        { what: `settings field ${l}`, method: 'PUT', path: '/v1/algorithms/alice/Surrogates', body: `{"settings":{"${l}":1}}`, type: json_, status: 400, code: 'invalid_body' },
        { what: `release notes ${l}`, method: 'POST', path: '/v1/algorithms/alice/Surrogates/versions', body: `{"version_info":{"release_notes":"${l}"}}`, type: json_, status: 400, code: 'invalid_body' },
        { what: `permission ${l}`, method: 'POST', path: '/v1/users/alice/keys', body: `{"name":"k","permissions":{"${l}":true}}`, type: json_, status: 400, code: 'invalid_permissions' },
        { what: `cred_data ${l}`, method: 'POST', path: '/v1/users/alice/connectors', body: `{"label":"s1","protocol":"objstore","cred_data":{"access_key_id":"${l}","secret_access_key":"b"}}`, type: json_, status: 400, code: 'invalid_connector' },
        { what: `cred_data.url ${l}`, method: 'POST', path: '/v1/users/alice/connectors', body: `{"label":"w1","protocol":"filehost","provider":"webdav","cred_data":{"url":"http://198.51.100.1/${l}/"}}`, type: json_, status: 400, code: 'invalid_connector' },
        { what: `new password ${l}`, method: 'PUT', path: '/v1/users/alice/password', body: `{"current_password":"whatever","password":"${l}-long-enough-otherwise"}`, type: json_, status: 400, code: 'invalid_password' },
        { what: `sign-in user name ${l}`, method: 'POST', path: '/v1/session', body: `{"username":"${l}","password":"x"}`, type: json_, status: 401, code: 'invalid_credentials' },
      ]),
      ...SURROGATE_BYTES.flatMap((b): Case[] => [
        { what: `algorithm in path ${b}`, method: 'GET', path: `/v1/algorithms/alice/${b}`, status: 400, code: 'invalid_path' },
        { what: `user name in path ${b}`, method: 'GET', path: `/v1/users/${b}/keys`, status: 400, code: 'invalid_path' },
        { what: `version in path ${b}`, method: 'GET', path: `/v1/algorithms/alice/Surrogates/versions/${b}`, status: 400, code: 'invalid_path' },
        { what: `algorithm called ${b}`, method: 'POST', path: `/v1/algo/alice/${b}`, body: '"x"', type: json_, status: 400, code: 'invalid_path' },
        { what: `call timeout ${b}`, method: 'POST', path: `/v1/algo/alice/Surrogates?timeout=${b}`, body: '"x"', type: json_, status: 400, code: 'invalid_query' },
        { what: `versions marker ${b}`, method: 'GET', path: `/v1/algorithms/alice/Surrogates/versions?marker=${b}`, status: 400, code: 'invalid_marker' },
        { what: `usage date ${b}`, method: 'GET', path: `/v1/users/alice/usage?from=${b}`, status: 400, code: 'invalid_query' },
        { what: `cred_data.url ${b}`, method: 'POST', path: '/v1/users/alice/connectors', body: `{"label":"w2","protocol":"filehost","provider":"webdav","cred_data":{"url":"http://u${b}:p@198.51.100.1/"}}`, type: json_, status: 400, code: 'invalid_connector' },
      ]),
    ];
    for (const c of cases) {
      const headers: Record<string, string> = { ...auth };
      if (c.type) headers['content-type'] = c.type;
      const res = await rawRequest(s.url, c.method, c.path, { headers, body: c.body });
      assert.equal(res.status, c.status, `${c.what}: status (${res.body.slice(0, 200)})`);
      const body = JSON.parse(res.body);
      assert.equal(body.error.code, c.code, `${c.what}: code`);
      assert.ok(typeof body.error.message === 'string' && body.error.message.length > 10, `${c.what}: message`);
      assert.match(String(res.headers['x-error-message']), /^[\x20-\x7e]+$/, `${c.what}: X-Error-Message`);
    }
    // What was refused was not stored: the algorithm's details and the keys and accounts are as they were.
    const algo = await json(await call('/v1/algorithms/alice/Surrogates'));
    assert.equal(algo.details.summary, '');
    assert.deepEqual((await json(await call('/v1/users/alice/connectors'))).results, []);
    // User names come in through the admin commands: the same rule.
    await assert.rejects(s.services.users.create('a\ud800b'), { code: 'invalid_username' });
  });

  test('a message quoting characters outside the BMP (an emoji: a surrogate pair) is sent whole in the body, percent-encoded in X-Error-Message', async () => {
    const res = await rawRequest(s.url, 'POST', '/v1/algorithms/alice', { headers: { ...auth, 'content-type': json_ }, body: '{"name":"\\ud83d\\ude00"}' });
    assert.equal(res.status, 400);
    assert.match(JSON.parse(res.body).error.message, /"\u{1f600}"/u);
    assert.match(String(res.headers['x-error-message']), /"%F0%9F%98%80"/);
  });

  test('the safety net: a URIError that escapes the checks above answers 400 in the envelope; header text never throws', () => {
    const a = errorAnswer(new URIError('URI malformed'), 'req-1');
    assert.equal(a.status, 400);
    assert.equal(a.error.code, 'invalid_body');
    assert.match(a.error.message, /lone surrogate/);
    assert.equal(headerSafe('x\ud800y\udfff\u{1f600}é'), 'x%EF%BF%BDy%EF%BF%BD%F0%9F%98%80%C3%A9');
  });

  test('a marker issued for one directory is refused by another', async () => {
    const call = api(s.url, key);
    for (let i = 0; i < 3; i++) await call(`/v1/data/.my/other/f${i}`, { method: 'PUT', body: 'x' });
    const small = await startServer({ home: s.home + '-pg', hosted: { pageSize: 2 } });
    try {
      const k = await small.user('alice');
      const c = api(small.url, k);
      await c('/v1/data/.my', { method: 'POST', body: 'a', headers: { 'content-type': 'text/plain' } });
      await c('/v1/data/.my', { method: 'POST', body: 'b', headers: { 'content-type': 'text/plain' } });
      for (let i = 0; i < 3; i++) await c(`/v1/data/.my/a/f${i}`, { method: 'PUT', body: 'x' });
      const page = await json(await c('/v1/data/.my/a'));
      assert.ok(page.marker);
      const wrong = await c(`/v1/data/.my/b?marker=${encodeURIComponent(page.marker)}`);
      assert.equal(wrong.status, 400);
      assert.equal((await json(wrong)).error.code, 'invalid_marker');
      const right = await c(`/v1/data/.my/a?marker=${encodeURIComponent(page.marker)}`);
      assert.equal(right.status, 200);
    } finally {
      await small.close();
    }
  });

  test('a streamed (chunked) upload over the limit is refused and leaves nothing behind', async () => {
    const before = await snapshot(s);
    const { hostname, port } = new URL(s.url);
    const status = await new Promise<number>((resolve, reject) => {
      const req = http.request({ host: hostname, port, method: 'PUT', path: '/v1/data/.my/c/streamed', headers: auth }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', reject);
      // No Content-Length: the limit can only be enforced while the bytes arrive.
      req.write(Buffer.alloc(600));
      req.write(Buffer.alloc(600));
      req.end();
    });
    assert.equal(status, 413);
    assert.equal(await snapshot(s), before);
    assert.equal((await api(s.url, key)('/v1/data/.my/c/streamed', { method: 'HEAD' })).status, 404);
    if (!s.services.config.blobs) assert.deepEqual(fs.readdirSync(path.join(s.home, 'data', 'tmp')), [], 'no temp file is left');
  });

  test('a client that disconnects mid-upload leaves nothing behind, and the server carries on', async () => {
    const before = await snapshot(s);
    const { hostname, port } = new URL(s.url);
    await new Promise<void>((resolve) => {
      const req = http.request({ host: hostname, port, method: 'PUT', path: '/v1/data/.my/c/cut', headers: auth });
      req.on('error', () => resolve());
      req.write(Buffer.alloc(500));
      setTimeout(() => {
        req.destroy();
        resolve();
      }, 100);
    });
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(await snapshot(s), before);
    assert.equal((await api(s.url, key)('/v1/data/.my/c/file.txt')).status, 200);
  });
});

/** Sends `bytes` as they are on a new connection and reads what comes back until the server closes it. */
function rawBytes(base: string, bytes: string | Buffer): Promise<{ status: number; head: string; body: string }> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const socket = net.connect({ host: hostname, port: Number(port) }, () => socket.write(bytes));
    socket.setTimeout(10_000, () => socket.destroy(new Error('no answer within 10 s')));
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', reject);
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('latin1');
      const at = text.indexOf('\r\n\r\n');
      resolve({ status: Number(text.slice(9, 12)), head: text.slice(0, at), body: text.slice(at + 4) });
    });
  });
}

describe('every 400 in our envelope (issue 36)', () => {
  test('a request Node\'s HTTP parser refuses is answered in the envelope, with a code and a request id', async () => {
    const head = (extra: string) => `GET /v1/user HTTP/1.1\r\nHost: x\r\nAuthorization: Simple ${key}\r\n${extra}\r\n`;
    const cases: { what: string; bytes: string; status: number; code: string }[] = [
      { what: 'DEL in a header value', bytes: head('Range: bytes=\x7f\r\n'), status: 400, code: 'malformed_request' },
      { what: 'a control character in a header value', bytes: head('X-Note: a\x01b\r\n'), status: 400, code: 'malformed_request' },
      { what: 'a space in a header name', bytes: head('X Note: a\r\n'), status: 400, code: 'malformed_request' },
      { what: 'Content-Length and Transfer-Encoding both', bytes: `POST /v1/data/.my/c/f HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`, status: 400, code: 'malformed_request' },
      { what: 'a malformed request line', bytes: 'GET /v1/user HTTP/9\r\n\r\n', status: 400, code: 'malformed_request' },
      { what: 'headers over 16 KiB', bytes: head(`X-Big: ${'b'.repeat(20_000)}\r\n`), status: 431, code: 'headers_too_large' },
    ];
    for (const c of cases) {
      const res = await rawBytes(s.url, c.bytes);
      assert.equal(res.status, c.status, `${c.what}: ${res.head} ${res.body}`);
      assert.match(res.head, /\r\ncontent-type: application\/json/i, c.what);
      assert.match(res.head, /\r\nx-error-message: ./i, c.what);
      const body = JSON.parse(res.body);
      assert.equal(body.error.code, c.code, c.what);
      assert.match(body.error.id, /^req-[0-9a-f]{16}$/, `${c.what}: a request id`);
      assert.ok(body.error.message.length > 10, c.what);
    }
    // The server carries on.
    assert.equal((await api(s.url, key)('/v1/user')).status, 200);
  });

  test('a head that took too long is a 408 in the envelope (Node\'s timeout is 30 s: the answer itself, without the wait)', () => {
    const answer = clientErrorResponse(Object.assign(new Error('timeout'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' }), 'req-0000000000000001');
    assert.match(answer, /^HTTP\/1\.1 408 Request Timeout\r\n/);
    assert.match(answer, /\r\nConnection: close\r\n/);
    assert.deepEqual(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)).error, { code: 'request_timeout', message: 'the request did not arrive whole in time', id: 'req-0000000000000001' });
  });

  test('JSON null, a list or a number where an object is documented: 400 with the route\'s code, and nothing changes', async () => {
    const call = api(s.url, key);
    await createAlgorithm(call, 'alice', 'Bodies', { language: 'python3' });
    const before = await call('/v1/algorithms/alice/Bodies').then(json);
    const sent: [string, string, string][] = [
      ['PUT', '/v1/algorithms/alice/Bodies', 'invalid_body'],
      ['POST', '/v1/algorithms/alice', 'invalid_body'],
      ['POST', '/v1/algorithms/alice/Bodies/versions', 'invalid_body'],
      ['POST', '/v1/users/alice/keys', 'invalid_body'],
      ['POST', '/v1/users/alice/connectors', 'invalid_body'],
      ['PUT', '/v1/users/alice/password', 'invalid_body'],
      ['POST', '/v1/session', 'invalid_body'],
      ['POST', '/v1/users/alice/triggers', 'invalid_trigger'],
      ['POST', '/v1/users/alice/subscriptions', 'invalid_subscription'],
    ];
    for (const [method, path, code] of sent) {
      for (const body of ['null', '[]', '[{"name":"x"}]', '5', '"text"']) {
        const res = await rawRequest(s.url, method, path, { headers: { ...auth, 'content-type': json_ }, body });
        assert.equal(res.status, 400, `${method} ${path} ${body}: ${res.body.slice(0, 200)}`);
        assert.equal(JSON.parse(res.body).error.code, code, `${method} ${path} ${body}`);
      }
    }
    assert.deepEqual(await call('/v1/algorithms/alice/Bodies').then(json), before, 'the algorithm is as it was');
    // An optional body left out is still taken as {} (publish with no settings).
    const noBody = await call('/v1/algorithms/alice/Bodies/versions', { method: 'POST' });
    assert.notEqual(JSON.parse(await noBody.text()).error?.code, 'invalid_body');
  });
});
