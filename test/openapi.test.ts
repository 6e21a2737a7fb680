import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { validate } from '@readme/openapi-parser';
import { startServer, api, json, type TestServer } from './helpers/server.ts';
import { openapiDocument } from '../src/http/openapi/document.ts';
import { ROUTES, UNDOCUMENTED, UNNAMEABLE_METHODS } from '../src/http/openapi/routes.ts';
import { AnswerCheck } from '../src/http/openapi/check.ts';
import { ERROR_CODES } from '../src/errors.ts';

const TOKEN = 'o'.repeat(40);

describe('OpenAPI document', () => {
  let s: TestServer;
  let key: string;
  before(async () => {
    s = await startServer({ env: { ALGOHOST_METRICS_TOKEN: TOKEN } });
    key = await s.user('olga');
  });
  after(() => s?.close());

  test('is valid OpenAPI 3.1, by @readme/openapi-parser', async () => {
    for (const metrics of [true, false]) {
      const doc = openapiDocument({ metrics });
      const result = await validate(structuredClone(doc) as never);
      assert.equal(result.valid, true, result.valid ? '' : JSON.stringify(result.errors, null, 2));
      assert.equal(doc.openapi, '3.1.0');
    }
  });

  test('is served at GET /v1/openapi.json without a key', async () => {
    const res = await fetch(`${s.url}/v1/openapi.json`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
    const doc = await json(res);
    assert.deepEqual(doc, JSON.parse(JSON.stringify(openapiDocument({ metrics: true }))));
  });

  test('describes every route the app registers, and no other (onRoute)', () => {
    const registered = new Set(s.app.registeredRoutes.map((r) => `${r.method} ${r.url}`));
    const skipped = new Set(UNDOCUMENTED.map((u) => u.route));
    const documented = new Set(ROUTES.map((r) => `${r.method} ${r.route}`));
    const api = new Set(
      [...registered].filter((k) => {
        const [method, url] = k.split(' ') as [string, string];
        if (skipped.has(url)) return false;
        // OpenAPI 3.1 cannot name WebDAV's methods, which app.all adds to the retired routes.
        if (UNNAMEABLE_METHODS.has(method)) return false;
        // fastify answers HEAD for every GET (exposeHeadRoutes): documented where it means more.
        if (method === 'HEAD' && registered.has(`GET ${url}`) && !documented.has(k)) return false;
        return true;
      }),
    );
    assert.deepEqual([...api].filter((k) => !documented.has(k)).sort(), [], 'registered but not in the document (src/http/openapi/routes.ts)');
    assert.deepEqual([...documented].filter((k) => !api.has(k)).sort(), [], 'in the document but not registered');
    // Each undocumented route is really there, so the list cannot hide a stale entry.
    for (const u of UNDOCUMENTED) assert.ok([...registered].some((k) => k.endsWith(` ${u.route}`)), `${u.route} is listed as undocumented but not registered`);
  });

  test('every error code of errors.ts is in the document, under its status', () => {
    const doc = openapiDocument({ metrics: false }) as unknown as { components: { schemas: { ErrorCode: { enum: string[] } }; responses: Record<string, { description: string }> } };
    assert.deepEqual(doc.components.schemas.ErrorCode.enum.sort(), Object.keys(ERROR_CODES).sort());
    for (const [code, status] of Object.entries(ERROR_CODES)) assert.match(doc.components.responses[`Error${status}`]!.description, new RegExp(`\`${code}\``));
  });

  test('the Simple scheme is the API key in Authorization', () => {
    const doc = openapiDocument({ metrics: false }) as unknown as { components: { securitySchemes: Record<string, Record<string, string>> }; security: unknown };
    assert.deepEqual({ ...doc.components.securitySchemes.Simple, description: undefined }, { type: 'apiKey', in: 'header', name: 'Authorization', description: undefined });
    assert.match(doc.components.securitySchemes.Simple!.description!, /Simple <key>/);
  });

  test('answers of the running server are checked: these match', async () => {
    const call = api(s.url, key);
    assert.equal((await call('/v1/user')).status, 200);
    assert.equal((await call('/v1/users/olga/keys')).status, 200);
    assert.equal((await call('/v1/users/olga/usage')).status, 200);
    assert.equal((await call('/v1/users/olga/limits')).status, 200);
    assert.equal((await call('/v1/users/nobody/keys')).status, 403);
    assert.equal((await call('/v1/algorithms/olga/nothing')).status, 404);
    assert.equal((await call('/v1/nothing')).status, 404);
    assert.equal((await call('/v1/data/.my', { method: 'POST', body: '{"name":"x"}', headers: { 'content-type': 'application/json' } })).status, 200);
    assert.equal((await call('/v1/data/.my/x/f.txt', { method: 'PUT', body: 'hello' })).status, 200);
    assert.equal((await call('/v1/data/.my/x/f.txt')).status, 200);
    assert.equal((await call('/v1/data/.my/x/f.txt', { headers: { range: 'bytes=0-1' } })).status, 206);
    assert.equal((await call('/v1/data/.my/x?acl=true')).status, 200);
    assert.equal((await call('/v1/data/.my/x/f.txt', { method: 'HEAD' })).status, 200);
    assert.equal((await call('/v1/data/.my/x?force=true', { method: 'DELETE' })).status, 200);
    assert.equal((await fetch(`${s.url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } })).status, 200);
    assert.equal((await fetch(`${s.url}/v1/user`)).status, 401);
    assert.equal((await fetch(`${s.url}/api/v1/algo/a/b`)).status, 410);
    assert.equal((await fetch(`${s.url}/health`)).status, 200);
    // Found by test/fuzz.test.ts: a preflight takes (and drops) any body; a body of a type no
    // parser takes is a documented 415 wherever fastify reads bodies; the router's empty
    // parameters and one trailing slash are matched as it matches them.
    const xml = { method: 'POST', headers: { 'content-type': 'application/xml' }, body: '<x/>' };
    assert.equal((await fetch(`${s.url}/v1/web/algo/olga/x`, { ...xml, method: 'OPTIONS' })).status, 204);
    assert.equal((await call('/v1/algorithms/olga/nothing/compile', xml)).status, 415);
    assert.equal((await call('/v1/users/nobody/subscriptions//deliveries')).status, 403);
    assert.equal((await fetch(`${s.url}/v1/web/algo//`, { method: 'OPTIONS' })).status, 204);
    assert.deepEqual(s.app.answerCheck!.violations, []);
  });

  test('an answer off the document is caught: status, type, body', () => {
    const check = new AnswerCheck(openapiDocument({ metrics: false }), { metrics: false });
    const body = (v: unknown) => Buffer.from(JSON.stringify(v));
    const who = { username: 'olga', key_id: 'k', permissions: { allow_algo: true, algo_acl: [], allow_web_algo: false, referer_host: null, allow_data: true, allow_data_write: true, allow_algo_management: true } };
    assert.equal(check.check('GET', '/v1/user', 200, 'application/json; charset=utf-8', body(who)), undefined);
    assert.match(check.check('GET', '/v1/user', 200, 'application/json', body({ ...who, username: 5 }))!.problem, /\/username must be string/);
    assert.match(check.check('GET', '/v1/user', 201, 'application/json', body(who))!.problem, /status 201 is not among/);
    assert.match(check.check('GET', '/v1/user', 200, 'text/html', Buffer.from('<p>'))!.problem, /Content-Type "text\/html"/);
    // An error's code must be one of its status's.
    assert.equal(check.check('GET', '/v1/user', 401, 'application/json', body({ error: { code: 'auth_required', message: 'm', id: 'r' } })), undefined);
    assert.match(check.check('GET', '/v1/user', 401, 'application/json', body({ error: { code: 'not_found', message: 'm' } }))!.problem, /does not match/);
    // A route that is not there answers only the router's errors.
    assert.match(check.check('GET', '/v1/nowhere', 200, 'application/json', body({}))!.problem, /no documented operation/);
    // The console, git: not the API.
    assert.equal(check.check('GET', '/console/x.js', 200, 'text/javascript', Buffer.from('x')), undefined);
    // Where the document must allow any JSON (a raw result, a JSON file), the check still holds the usual answer to its schema.
    assert.match(check.check('POST', '/v1/algo/a/b', 200, 'application/json', body({ x: 1 }))!.problem, /does not match/);
    assert.equal(check.check('POST', '/v1/algo/a/b?output=raw', 200, 'application/json', body({ x: 1 })), undefined);
    assert.equal(check.check('POST', '/v1/algo/a/b', 200, 'application/json', body({ result: 1, metadata: { content_type: 'json', duration: 0.1 } })), undefined);
    const dir = (v: string) => (name: string) => (name === 'x-data-type' ? v : undefined);
    assert.match(check.check('GET', '/v1/data/.my/c', 200, 'application/json', body([1]), dir('directory'))!.problem, /does not match/);
    assert.equal(check.check('GET', '/v1/data/.my/c/f.json', 200, 'application/json', body([1]), dir('file')), undefined);
    assert.equal(check.violations.length, 7);
  });
});
