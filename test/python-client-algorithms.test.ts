/**
 * The algorithm management requests of the official Python client (`algorithmia` 2.x), sent
 * byte for byte as it sends them: Algorithmia/algorithm.py builds the bodies, client.py's
 * postJsonHelper sends `json.dumps(...)` with `Content-Type: application/json` and the bare
 * key as Authorization, putHelper hands a dict to requests as `data=`, which form-encodes it.
 * The flow is the client's own test (Test/regular/algo_test.py,
 * test_algorithm_programmatic_create_process). The client is not installable here.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, type TestServer } from './helpers/server.ts';
import { rawRequest, type RawResponse } from './helpers/raw.ts';

let s: TestServer;
let key: string;

before(async () => {
  s = await startServer();
  key = await s.user('quality');
});
after(() => s.close());

/** Python's json.dumps: ", " and ": " separators, keys in insertion order. */
const pyJson = (value: unknown): string =>
  JSON.stringify(value)
    .replace(/("(?:[^"\\]|\\.)*")|,/g, (m, str: string | undefined) => str ?? ', ')
    .replace(/("(?:[^"\\]|\\.)*")|:/g, (m, str: string | undefined) => str ?? ': ');

const headers = (extra: Record<string, string> = {}) => ({
  'User-Agent': 'python-requests/2.31.0',
  'Accept-Encoding': 'gzip, deflate',
  Accept: '*/*',
  Connection: 'keep-alive',
  Authorization: key,
  ...extra,
});

function postJson(path: string, body: unknown): Promise<RawResponse> {
  return rawRequest(s.url, 'POST', path, { headers: headers({ 'Content-Type': 'application/json' }), body: pyJson(body) });
}

const parsed = (r: RawResponse) => JSON.parse(r.body) as Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any

test('create with version_info, compile, call by hash, publish with source and scmsCredentials, info by hash', async () => {
  const details = { summary: 'Example Summary', label: 'QA', tagline: 'Example Tagline' };
  const settings = { source_visibility: 'open', algorithm_environment: 'abcd-123', license: 'apl', network_access: 'isolated', pipeline_enabled: false };
  // algorithm.create(details, settings, version_info): no source or scmsCredentials when not given.
  const created = await postJson('/v1/algorithms/quality', { name: 'hello', details, settings, version_info: { sample_input: 'hello' } });
  assert.equal(created.status, 201, created.body);
  assert.equal(parsed(created).name, 'hello');
  assert.equal(parsed(created).settings.language, 'python3', 'no language: the Python template');

  const compiled = await postJson('/v1/algorithms/quality/hello/compile', {});
  assert.equal(compiled.status, 200, compiled.body);
  const gitHash = parsed(compiled).version_info.git_hash as string;
  assert.equal(parsed(compiled).name, 'hello');

  // algo_with_build.pipe("John"): a str goes as text/plain.
  const piped = await rawRequest(s.url, 'POST', `/v1/algo/quality/hello/${gitHash}?timeout=300&stdout=False`, {
    headers: headers({ 'Content-Type': 'text/plain' }),
    body: 'John',
  });
  assert.equal(piped.status, 200, piped.body);
  assert.equal(parsed(piped).result, 'hello John');

  // algorithm.publish(details, settings, version_info): source and scmsCredentials default to {}.
  const published = await postJson('/v1/algorithms/quality/hello/versions', {
    details: { label: 'testing123' },
    settings: { algorithm_callability: 'private' },
    version_info: { release_notes: 'created programmatically', sample_input: 'John', version_type: 'minor' },
    source: {},
    scmsCredentials: {},
  });
  assert.equal(published.status, 200, published.body);
  assert.equal(parsed(published).version_info.semantic_version, '0.1.0');

  const info = await rawRequest(s.url, 'GET', `/v1/algorithms/quality/hello/versions/${gitHash}`, { headers: headers() });
  assert.equal(info.status, 200, info.body);
  assert.equal(parsed(info).version_info.semantic_version, '0.1.0');
  assert.equal(parsed(info).version_info.sample_input, 'John');
  assert.equal(parsed(info).version_info.release_notes, 'created programmatically');
  assert.equal(parsed(info).settings.algorithm_callability, 'private');
  assert.equal(parsed(info).details.label, 'testing123');
});

test('the sample input and release notes of create and update are used by the next publish that does not say its own', async () => {
  const created = await postJson('/v1/algorithms/quality', { name: 'Sampled', details: { label: 'S' }, settings: {}, version_info: { sample_input: { n: 1 } } });
  assert.equal(created.status, 201, created.body);
  assert.equal((await postJson('/v1/algorithms/quality/Sampled/compile', {})).status, 200);
  const first = await postJson('/v1/algorithms/quality/Sampled/versions', { details: {}, settings: {}, version_info: {}, source: {}, scmsCredentials: {} });
  assert.equal(first.status, 200, first.body);
  assert.deepEqual(parsed(first).version_info.sample_input, { n: 1 });
  assert.equal(parsed(first).version_info.release_notes, '');
});

test('what cannot be done is refused, saying what: a linked repository, repository credentials, a form-encoded update', async () => {
  const linked = await postJson('/v1/algorithms/quality', { name: 'Linked', details: {}, settings: {}, source: { scm: { id: 'github' } } });
  assert.equal(linked.status, 400);
  assert.equal(parsed(linked).error.code, 'invalid_body');
  assert.match(parsed(linked).error.message, /cannot link an external repository/);
  const creds = await postJson('/v1/algorithms/quality', { name: 'Creds', details: {}, settings: {}, scmsCredentials: { oauth_key: 'x' } });
  assert.equal(creds.status, 400);
  assert.match(parsed(creds).error.message, /scmsCredentials/);
  // Nothing was half-made.
  for (const name of ['Linked', 'Creds']) {
    assert.equal((await rawRequest(s.url, 'GET', `/v1/algorithms/quality/${name}`, { headers: headers() })).status, 404);
  }
  // The original's own internal repository is just "ours".
  const internal = await postJson('/v1/algorithms/quality', { name: 'Internal', details: {}, settings: {}, source: { scm: { id: 'internal', provider: 'internal', default: true, enabled: true } }, scmsCredentials: {} });
  assert.equal(internal.status, 201, internal.body);

  // algorithm.update(details, settings, version_info): putHelper passes the dict as requests'
  // `data=`, which form-encodes it; a dict's values are iterated as its keys, so only field
  // names arrive and every value is lost. Applying it would change nothing the caller meant.
  const form =
    'details=summary&details=label&details=tagline&settings=source_visibility&settings=algorithm_environment&settings=license&settings=network_access&settings=pipeline_enabled&version_info=sample_input';
  const update = await rawRequest(s.url, 'PUT', '/v1/algorithms/quality/hello', {
    headers: headers({ 'Content-Type': 'application/x-www-form-urlencoded' }),
    body: form,
  });
  assert.equal(update.status, 415, update.body);
  assert.equal(parsed(update).error.code, 'unsupported_media_type');
  assert.match(parsed(update).error.message, /form-encoded.*JSON/);

  // The same update as JSON (what the client means) works, empty source and credentials included.
  const asJson = await rawRequest(s.url, 'PUT', '/v1/algorithms/quality/hello', {
    headers: headers({ 'Content-Type': 'application/json' }),
    body: pyJson({ details: { summary: 'Example Summary', label: 'QA', tagline: 'Example Tagline' }, settings: { source_visibility: 'open' }, version_info: { sample_input: 'hello' }, source: {}, scmsCredentials: {} }),
  });
  assert.equal(asJson.status, 200, asJson.body);
  assert.ok('id' in parsed(asJson));
  assert.equal(parsed(asJson).details.summary, 'Example Summary');
});
