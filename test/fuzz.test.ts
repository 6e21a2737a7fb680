/**
 * The API fuzzed from its own OpenAPI document (issue 36): every operation of
 * /v1/openapi.json is sent requests generated from its parameters and body schemas, valid ones
 * and broken ones (wrong types, missing and unknown fields, JSON null and lists where an object
 * is documented, huge strings, bytes that are not JSON, a control character in a header), over
 * real HTTP with a real key, to one real server seeded with an algorithm, a key and some data.
 * Every answer must be below 500, of a status the operation documents, with a body that
 * matches the documented schema *strictly* (no field the schema does not name: the document's
 * objects are open for clients' sake, so this test closes them), and every 4xx must be our
 * error envelope with a code of that status and a request id.
 *
 * Bounded: a fixed seed and a few runs per operation by default (well under a minute);
 * ALGOHOST_TEST_FUZZ_RUNS=N runs N per operation, ALGOHOST_TEST_FUZZ_SEED another seed
 * (docs/openapi.md).
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import { startServer, api, json, type TestServer } from './helpers/server.ts';
import { openapiDocument, type OpenApiDocument } from '../src/http/openapi/document.ts';
import { AnswerCheck } from '../src/http/openapi/check.ts';
import { ERROR_CODES, type ErrorCode } from '../src/errors.ts';

const RUNS = Number(process.env.ALGOHOST_TEST_FUZZ_RUNS ?? 8);
const SEED = Number(process.env.ALGOHOST_TEST_FUZZ_SEED ?? 36);

type Schema = Record<string, unknown>;
interface Operation {
  method: string;
  path: string;
  operationId: string;
  parameters?: { name: string; in: 'path' | 'query' | 'header'; schema: Schema }[];
  requestBody?: { required: boolean; content: Record<string, { schema: Schema }> };
  responses: Record<string, unknown>;
}

// ---------------------------------------------------------------------------------------------
// The document, closed: what the fuzzer holds answers to

/**
 * The document with every object schema that names its properties closed
 * (`unevaluatedProperties: false`, JSON Schema 2020-12), unless it says itself what else it
 * takes. An `allOf` is closed at its top (the union of its members' properties), and its
 * members are left open there, or each would refuse the others' fields.
 */
function strictDocument(doc: OpenApiDocument): OpenApiDocument {
  const out = structuredClone(doc) as OpenApiDocument & { components: { schemas: Record<string, Schema> } };
  const schemas = out.components.schemas;
  // From the document as it came (open), so that a member copied in is not closed at its top.
  const original = (doc.components as { schemas: Record<string, Schema> }).schemas;
  const resolve = (ref: string) => structuredClone(original[ref.split('/').pop()!]!);
  const close = (s: unknown, top: boolean): unknown => {
    if (typeof s !== 'object' || s === null || Array.isArray(s)) return s;
    const o = s as Schema;
    if (Array.isArray(o.allOf)) {
      // A member named by $ref is copied in (its own fields closed below it, not at its top).
      o.allOf = o.allOf.map((m: Schema) => (typeof m.$ref === 'string' ? close(resolve(m.$ref), false) : m));
      if (top && o.additionalProperties === undefined) o.unevaluatedProperties = false;
    }
    for (const k of ['anyOf', 'oneOf'] as const) if (Array.isArray(o[k])) o[k] = (o[k] as unknown[]).map((m) => close(m, top));
    if (o.properties && typeof o.properties === 'object') {
      for (const [name, p] of Object.entries(o.properties as Record<string, unknown>)) (o.properties as Record<string, unknown>)[name] = close(p, true);
      if (top && o.additionalProperties === undefined && o.unevaluatedProperties === undefined) o.unevaluatedProperties = false;
    }
    if (o.items) o.items = close(o.items, true);
    if (typeof o.additionalProperties === 'object') o.additionalProperties = close(o.additionalProperties, true);
    return o;
  };
  for (const name of Object.keys(schemas)) schemas[name] = close(schemas[name], true) as Schema;
  for (const item of Object.values(out.paths)) {
    for (const op of Object.values(item)) {
      for (const r of Object.values(op.responses) as { content?: Record<string, { schema: unknown }> }[]) {
        for (const c of Object.values(r.content ?? {})) c.schema = close(c.schema, true);
      }
    }
  }
  for (const r of Object.values((out.components as unknown as { responses: Record<string, { content: Record<string, { schema: unknown }> }> }).responses)) {
    for (const c of Object.values(r.content)) c.schema = close(c.schema, true);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Values from schemas

const DOC = openapiDocument({ metrics: false });
const COMPONENTS = (DOC.components as { schemas: Record<string, Schema> }).schemas;
const deref = (s: Schema): Schema => (typeof s.$ref === 'string' ? deref(COMPONENTS[s.$ref.split('/').pop()!]!) : s);

/** Printable ASCII, mostly short; now and then long. */
const text = fc.oneof({ arbitrary: fc.string({ maxLength: 12 }), weight: 6 }, { arbitrary: fc.string({ unit: 'binary', maxLength: 12 }), weight: 2 }, { arbitrary: fc.constant('x'.repeat(70_000)), weight: 1 });

/** A value of the schema (roughly: enough to get past the first check of each route). */
function valid(schema: Schema, depth = 0): fc.Arbitrary<unknown> {
  const s = deref(schema);
  if (Array.isArray(s.enum)) return fc.constantFrom(...(s.enum as unknown[]));
  if ('const' in s) return fc.constant(s.const);
  if (Array.isArray(s.anyOf) || Array.isArray(s.oneOf)) return fc.oneof(...((s.anyOf ?? s.oneOf) as Schema[]).map((m) => valid(m, depth)));
  const type = Array.isArray(s.type) ? s.type[0] : s.type;
  switch (type) {
    case 'string': return s.format === 'date' ? fc.constantFrom('2026-01-01', '2026-02-30', '1999-12-31') : text;
    case 'integer': return fc.integer({ min: (s.minimum as number) ?? -5, max: (s.maximum as number) ?? 1000 });
    case 'number': return fc.double({ min: 0, max: 5000, noNaN: true });
    case 'boolean': return fc.boolean();
    case 'null': return fc.constant(null);
    case 'array': return depth > 3 ? fc.constant([]) : fc.array(valid((s.items as Schema) ?? {}, depth + 1), { maxLength: 3 });
    case 'object': {
      const props = (s.properties ?? {}) as Record<string, Schema>;
      if (depth > 3 || Object.keys(props).length === 0) return fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 });
      return fc.record(Object.fromEntries(Object.entries(props).map(([k, p]) => [k, valid(p, depth + 1)])), { requiredKeys: (s.required as string[]) ?? [] });
    }
    default: return fc.jsonValue({ maxDepth: 2 });
  }
}

/** A value of the wrong kind for the schema: the other JSON types, and broken objects. */
function invalid(schema: Schema): fc.Arbitrary<unknown> {
  const s = deref(schema);
  const others = fc.constantFrom<unknown>(null, [], [{}], 0, -1, 1e300, '', 'text', true, {});
  if (s.type !== 'object' || !s.properties) return others;
  const props = s.properties as Record<string, Schema>;
  return fc.oneof(
    others,
    // A field of the wrong type.
    fc.tuple(fc.constantFrom(...Object.keys(props)), fc.constantFrom<unknown>(null, 5, [], {}, 'x', true)).map(([k, v]) => ({ [k]: v })),
    // A field nobody documented.
    valid(s).map((v) => ({ ...(v as object), not_a_field: 1 })),
  );
}

// ---------------------------------------------------------------------------------------------
// Requests

interface Request {
  method: string;
  url: string;
  headers: Record<string, string>;
  body?: Buffer;
  /** A header value with this control character: the request is sent as bytes, and must be refused as malformed. */
  control?: string;
}

/** Percent-encodes every byte outside the unreserved set (a lone surrogate becomes U+FFFD's bytes). */
const encode = (s: string) => [...Buffer.from(s, 'utf8')].map((b) => (/[A-Za-z0-9\-._~]/.test(String.fromCharCode(b)) ? String.fromCharCode(b) : `%${b.toString(16).toUpperCase().padStart(2, '0')}`)).join('');

/** Odd path segments, as sent (not encoded again). */
const ODD_SEGMENTS = ['..', '.', '%2e%2e', '%00', '%ZZ', '%C3%28', '%ED%A0%80', 'a%2Fb', 'n'.repeat(300), '%20'];

interface Seeds {
  user: string;
  other: string;
  keyId: string;
}

function pathValue(name: string, seeds: Seeds): fc.Arbitrary<string> {
  const real: Record<string, string[]> = {
    owner: [seeds.user, seeds.other], username: [seeds.user, seeds.other], name: ['Seed', 'Nothing'], algoname: ['Seed', 'Nothing'],
    version: ['1.0.0', 'latest', '1.*', 'a'.repeat(40)], ref: ['1.0.0', 'b'.repeat(40)], id: [seeds.keyId, 'nope', '1'], language: ['python3', 'javascript', 'cobol'],
    label: ['fz', 'none'], delivery: ['nope'], connector: ['data', 'filehost', 'objstore', 'dropbox+fz', 'nope'],
    path: ['.my/fz', '.my/fz/f.txt', '.my/fz/new.txt', '.my', `${seeds.other}/pub/f.txt`, '.my/fz/f.txt/under'], rest: ['v1/algo/a/b', 'x'],
  };
  return fc.oneof(
    { arbitrary: fc.constantFrom(...(real[name] ?? ['x'])), weight: 6 },
    { arbitrary: fc.constantFrom(...ODD_SEGMENTS), weight: 1 },
    { arbitrary: fc.string({ unit: 'binary', maxLength: 20 }).map(encode), weight: 2 },
  );
}

function queryValue(schema: Schema): fc.Arbitrary<string> {
  return fc.oneof({ arbitrary: valid(schema).map((v) => (typeof v === 'string' ? v : JSON.stringify(v))), weight: 3 }, { arbitrary: fc.string({ unit: 'binary', maxLength: 10 }), weight: 1 });
}

function requestOf(op: Operation, key: string, seeds: Seeds): fc.Arbitrary<Request> {
  const params = op.parameters ?? [];
  const pathArbs = Object.fromEntries(params.filter((p) => p.in === 'path').map((p) => [p.name, pathValue(p.name, seeds)]));
  const queryArbs = Object.fromEntries(params.filter((p) => p.in === 'query').map((p) => [p.name, fc.option(queryValue(p.schema), { freq: 2 })]));
  const headerArbs = Object.fromEntries(params.filter((p) => p.in === 'header').map((p) => [p.name, fc.option(fc.string({ maxLength: 20 }), { freq: 2 })]));
  const auth = fc.oneof(
    { arbitrary: fc.constant(`Simple ${key}`), weight: 12 },
    { arbitrary: fc.constantFrom<string | undefined>(undefined, 'Simple', `Bearer ${key}`, 'Simple sim0000000000000000000000000', `Simple ${key}x`), weight: 1 },
  );
  return fc.record({
    path: fc.record(pathArbs),
    query: fc.record(queryArbs),
    // (fc.option's `freq`: one in freq is null.)
    extraQuery: fc.oneof({ arbitrary: fc.constant(null), weight: 6 }, { arbitrary: fc.tuple(fc.string({ maxLength: 6 }), fc.string({ maxLength: 6 })), weight: 1 }),
    headers: fc.record(headerArbs),
    auth,
    body: bodyOf(op),
    control: fc.oneof({ arbitrary: fc.constant(null), weight: 15 }, { arbitrary: fc.constantFrom('\x7f', '\x01', '\x1b', '\x00'), weight: 1 }),
  }).map(({ path, query, extraQuery, headers, auth, body, control }) => {
    // A data path keeps its slashes; other parameters are one segment each.
    const p = op.path.replace(/\{([^}]+)\}/g, (_m, name: string) => (name === 'path' || name === 'rest' ? path[name]! : path[name]!.replace(/\//g, '%2F')));
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v !== null) q.append(k, v);
    if (extraQuery) q.append(...extraQuery);
    const h: Record<string, string> = {};
    for (const [k, v] of Object.entries(headers)) if (v !== null) h[k.toLowerCase()] = v;
    if (auth !== undefined) h.authorization = auth;
    if (body) h['content-type'] = body.type;
    const qs = q.toString();
    const r: Request = { method: op.method, url: qs ? `${p}?${qs}` : p, headers: h, ...(body ? { body: body.bytes } : {}), ...(control !== null ? { control } : {}) };
    // A failure names the request shortly (a 70 kB string is shown by its length).
    return Object.assign(r, { [fc.toStringMethod]: () => show(r) });
  });
}

/** A body for the operation: a documented type with a valid or broken value, now and then another type, or none. */
function bodyOf(op: Operation): fc.Arbitrary<{ type: string; bytes: Buffer } | null> {
  const content = op.requestBody?.content ?? {};
  const kinds: fc.Arbitrary<{ type: string; bytes: Buffer } | null>[] = [];
  for (const [type, { schema }] of Object.entries(content)) {
    const t = type === '*/*' ? 'application/x-anything' : type;
    if (type === 'application/json') {
      const value = fc.oneof({ arbitrary: valid(schema), weight: 3 }, { arbitrary: invalid(schema), weight: 2 });
      kinds.push(value.map((v) => ({ type: t, bytes: Buffer.from(JSON.stringify(v) ?? 'null') })));
      kinds.push(fc.constantFrom('{', '', '{"a":', 'nul', '\u0000').map((raw) => ({ type: t, bytes: Buffer.from(raw) })));
    } else {
      kinds.push(fc.uint8Array({ maxLength: 64 }).map((b) => ({ type: t, bytes: Buffer.from(b) })));
    }
  }
  // A body where none (or another type) is documented.
  kinds.push(fc.constantFrom('{}', 'null', '<x/>').map((raw) => ({ type: raw === '<x/>' ? 'application/xml' : 'application/json', bytes: Buffer.from(raw) })));
  return fc.oneof(
    { arbitrary: fc.oneof(...kinds), weight: op.requestBody ? 8 : 1 },
    { arbitrary: fc.constant(null), weight: op.requestBody?.required ? 1 : 4 },
  );
}

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  /** Undefined when the answer is endless (the event stream) and was cut off after its head. */
  body: Buffer | undefined;
}

function send(base: string, r: Request): Promise<Answer> {
  const { hostname, port } = new URL(base);
  if (r.control !== undefined) return sendBytes(hostname, Number(port), r);
  return new Promise((resolve, reject) => {
    // Content-Length always: Node's client sends a GET's or an OPTIONS's body unframed otherwise.
    const headers = r.body === undefined ? r.headers : { ...r.headers, 'content-length': String(r.body.length) };
    const req = http.request({ host: hostname, port, method: r.method, path: r.url, headers, timeout: 20_000 }, (res) => {
      if (res.statusCode === 200 && String(res.headers['content-type']).startsWith('text/event-stream')) {
        resolve({ status: 200, headers: res.headers, body: undefined });
        res.destroy();
        return;
      }
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within 20 s`)));
    req.on('error', reject);
    req.end(r.body);
  });
}

/** The request as bytes, a header holding a control character (no client library sends one); read to the close. */
function sendBytes(host: string, port: number, r: Request): Promise<Answer> {
  const head = [`${r.method} ${r.url} HTTP/1.1`, 'Host: fuzz', ...Object.entries(r.headers).map(([k, v]) => `${k}: ${v}`), `X-Fuzz: a${r.control}b`, `Content-Length: ${r.body?.length ?? 0}`];
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const socket = net.connect({ host, port }, () => socket.end(Buffer.concat([Buffer.from(`${head.join('\r\n')}\r\n\r\n`, 'latin1'), r.body ?? Buffer.alloc(0)])));
    socket.setTimeout(20_000, () => socket.destroy(new Error('no answer within 20 s')));
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('error', reject);
    socket.on('close', () => {
      const all = Buffer.concat(chunks);
      const at = all.indexOf('\r\n\r\n');
      const lines = all.subarray(0, at).toString('latin1').split('\r\n');
      const headers: http.IncomingHttpHeaders = {};
      for (const l of lines.slice(1)) headers[l.slice(0, l.indexOf(':')).toLowerCase()] = l.slice(l.indexOf(':') + 1).trim();
      resolve({ status: Number(lines[0]!.split(' ')[1]), headers, body: all.subarray(at + 4) });
    });
  });
}

// ---------------------------------------------------------------------------------------------
// What every answer must be

/** Why the answer is off its contract, or undefined. */
function fault(check: AnswerCheck, op: Operation, r: Request, a: Answer): string | undefined {
  if (a.status >= 500) return `a ${a.status}: the server failed on a client's request`;
  const type = a.headers['content-type'];
  if (r.control !== undefined) {
    // Refused by the HTTP parser before any route: our envelope all the same.
    // (Or 431, when the headers were over the limit before the parser reached the character.)
    if (a.status !== 400 && a.status !== 431) return `a header with a control character answered ${a.status}, not 400`;
  } else {
    const header = (name: string) => (a.headers[name] === undefined ? undefined : String(a.headers[name]));
    const v = check.check(r.method, r.url, a.status, type, a.body, header);
    if (v) return v.problem;
  }
  // JSON that is not an object, where an object is documented, is refused (JSON null was taken as {}).
  const documented = op.requestBody?.content['application/json']?.schema;
  if (documented && deref(documented).type === 'object' && r.control === undefined && r.body !== undefined && r.headers['content-type'] === 'application/json' && a.status < 400) {
    let value: unknown = {};
    try {
      value = JSON.parse(r.body.toString('utf8'));
    } catch {
      // Not JSON: refused or not, the check above has judged the answer.
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value)) return `a body of ${JSON.stringify(value)?.slice(0, 40)} where an object is documented was taken (${a.status})`;
  }
  if (a.status >= 400 && a.body !== undefined && a.body.length > 0 && r.method !== 'HEAD') {
    // Only a raw call's failure is not the envelope: the algorithm's message as text (documented).
    if (/^text\/plain/.test(String(type)) && a.status === 400 && /[?&]output=raw/.test(r.url) && op.path.includes('/algo/')) return undefined;
    let e: { error?: { code?: unknown; message?: unknown; id?: unknown } };
    try {
      e = JSON.parse(a.body.toString('utf8')) as typeof e;
    } catch {
      return `a ${a.status} whose body is not JSON: ${a.body.toString('utf8').slice(0, 200)}`;
    }
    const code = e.error?.code as ErrorCode | undefined;
    if (typeof code !== 'string' || ERROR_CODES[code] !== a.status) return `a ${a.status} without a code of that status: ${a.body.toString('utf8').slice(0, 200)}`;
    if (typeof e.error?.message !== 'string' || typeof e.error.id !== 'string' || !/^req-/.test(e.error.id)) return `a ${a.status} without a message and request id: ${a.body.toString('utf8').slice(0, 200)}`;
    if (r.control !== undefined && code !== (a.status === 431 ? 'headers_too_large' : 'malformed_request')) return `a control character in a header answered ${code}, not malformed_request`;
  }
  return undefined;
}

/** A request as a failure shows it: long text cut, with its length. */
const cut = (t: string) => (t.length > 300 ? `${t.slice(0, 300)}…(${t.length} characters)` : t);
const show = (r: Request) => JSON.stringify({ method: r.method, url: cut(r.url), headers: r.headers, body: r.body === undefined ? undefined : cut(r.body.toString('utf8')), control: r.control });

/** Every operation of the document, the destructive ones (DELETE) last so they take nothing from the others. */
function operations(doc: OpenApiDocument): Operation[] {
  const ops: Operation[] = [];
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) ops.push({ ...(op as unknown as Operation), method: method.toUpperCase(), path });
  }
  return ops.sort((a, b) => Number(a.method === 'DELETE') - Number(b.method === 'DELETE'));
}

describe('the API fuzzed from its OpenAPI document', () => {
  let s: TestServer;
  let key: string;
  let seeds: Seeds;
  const check = new AnswerCheck(strictDocument(DOC), { metrics: false });

  /** What requests refer to, made again before each operation (a DELETE before may have taken it). */
  async function seed(): Promise<void> {
    const call = api(s.url, key);
    const put = (path: string, body: string, type?: string) => call(path, { method: type ? 'POST' : 'PUT', body, ...(type ? { headers: { 'content-type': type } } : {}) });
    await call(`/v1/algorithms/${seeds.user}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"name":"Seed","settings":{"language":"python3"}}' });
    await put('/v1/data/.my', 'fz', 'text/plain');
    await put('/v1/data/.my/fz/f.txt', 'fuzzed');
  }

  before(async () => {
    s = await startServer();
    key = await s.user('fuzz');
    const otherKey = await s.user('other');
    const victim = await json(await api(s.url, key)('/v1/users/fuzz/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"name":"victim"}' }));
    seeds = { user: 'fuzz', other: 'other', keyId: victim.id };
    const otherCall = api(s.url, otherKey);
    await otherCall('/v1/data/.my', { method: 'POST', body: 'pub', headers: { 'content-type': 'text/plain' } });
    await otherCall('/v1/data/.my/pub/f.txt', { method: 'PUT', body: 'theirs' });
  });
  after(() => s?.close());

  test('the strict check catches a field the document does not name, which the open document lets pass', () => {
    const open = new AnswerCheck(DOC, { metrics: false });
    const who = { username: 'fuzz', key_id: 'k', permissions: { allow_algo: true, algo_acl: [], allow_web_algo: false, referer_host: null, allow_data: true, allow_data_write: true, allow_algo_management: true } };
    const body = (v: unknown) => Buffer.from(JSON.stringify(v));
    assert.equal(check.check('GET', '/v1/user', 200, 'application/json', body(who)), undefined);
    assert.equal(open.check('GET', '/v1/user', 200, 'application/json', body({ ...who, planted: 1 })), undefined);
    assert.match(check.check('GET', '/v1/user', 200, 'application/json', body({ ...who, planted: 1 }))!.problem, /unevaluated properties/);
    assert.match(check.check('GET', '/v1/user', 200, 'application/json', body({ ...who, permissions: { ...who.permissions, planted: 1 } }))!.problem, /unevaluated properties/);
    // Members of an allOf: each one's fields are allowed, another's too, a third's not.
    const day = { calls: 1, seconds: 1, bytes_in: 1, bytes_out: 1, errors: 0, timeouts: 0, day: '2026-01-01', algorithm: 'a/b', version: '1.0.0' };
    const section = { total: { calls: 1, seconds: 1, bytes_in: 1, bytes_out: 1, errors: 0, timeouts: 0 }, days: [day] };
    assert.equal(check.check('GET', '/v1/users/fuzz/usage', 200, 'application/json', body({ user: 'fuzz', from: '2026-01-01', to: '2026-01-02', as_caller: section, as_owner: section })), undefined);
    assert.match(check.check('GET', '/v1/users/fuzz/usage', 200, 'application/json', body({ user: 'fuzz', from: '2026-01-01', to: '2026-01-02', as_caller: { ...section, days: [{ ...day, planted: 1 }] }, as_owner: section }))!.problem, /unevaluated/);
    // The error envelope: its documented fields, and the fields of a code's own (open: they differ by code).
    assert.equal(check.check('GET', '/v1/user', 401, 'application/json', body({ error: { code: 'auth_required', message: 'm', id: 'req-1', limit: 'x' } })), undefined);
    assert.match(check.check('GET', '/v1/user', 401, 'application/json', body({ error: { code: 'auth_required', message: 'm' }, planted: 1 }))!.problem, /unevaluated/);
  });

  test(`every operation, ${RUNS} requests each (seed ${SEED}): no 5xx, documented statuses and bodies, the envelope on every error`, async (t) => {
    let sent = 0;
    const statuses = new Map<number, number>();
    for (const op of operations(DOC)) {
      await seed();
      await fc.assert(
        fc.asyncProperty(requestOf(op, key, seeds), async (r) => {
          let a: Answer;
          try {
            a = await send(s.url, r);
          } catch (err) {
            throw new Error(`${op.operationId}: no answer: ${(err as Error).message}\nrequest: ${show(r)}`);
          }
          sent++;
          statuses.set(a.status, (statuses.get(a.status) ?? 0) + 1);
          const problem = fault(check, op, r, a);
          assert.equal(problem, undefined, `${op.operationId}: ${problem}\nrequest: ${show(r)}\nanswer: ${a.status} ${a.body?.toString('utf8').slice(0, 300)}`);
        }),
        { seed: SEED, numRuns: RUNS, endOnFailure: true, includeErrorInReport: true },
      );
    }
    t.diagnostic(`${sent} requests; answers by status: ${[...statuses].sort((a, b) => a[0] - b[0]).map(([k, v]) => `${k}: ${v}`).join(', ')}`);
    assert.ok(sent >= operations(DOC).length * RUNS, `${sent} requests sent`);
    // The requests reach past the first checks: successes, and refusals of several kinds.
    assert.ok([200, 201, 204].some((st) => (statuses.get(st) ?? 0) > 0) && [400, 401, 403, 404].every((st) => (statuses.get(st) ?? 0) > 0), 'too few kinds of answer: the generators have stopped reaching the routes');
  });
});
