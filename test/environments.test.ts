/**
 * The algorithm environments the Python CLI asks for (`algo languages`, `algo environment`,
 * `algo template`), requested as its client.py sends them (getHelper / getStreamHelper: the
 * bare key as Authorization), and the template archive checked with the real `tar` and by
 * building and calling what it holds.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { api, startServer, tempHome, type TestServer } from './helpers/server.ts';
import { rawRequest } from './helpers/raw.ts';
import { callAlgo, compile, createAlgorithm, upload } from './helpers/algorithms.ts';
import { starterFiles } from '../src/algorithms/templates.ts';

let s: TestServer;
let key: string;
const dirs: string[] = [];

before(async () => {
  s = await startServer();
  key = await s.user('alice');
});
after(async () => {
  await s.close();
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

const headers = () => ({ 'User-Agent': 'python-requests/2.31.0', 'Accept-Encoding': 'gzip, deflate', Accept: '*/*', Connection: 'keep-alive', Authorization: key });
const BASE = '/v1/algorithm-environments/edge';

async function getJson(p: string) {
  const r = await rawRequest(s.url, 'GET', p, { headers: headers() });
  return { status: r.status, type: r.headers['content-type'], body: JSON.parse(r.body) as any }; // eslint-disable-line @typescript-eslint/no-explicit-any
}

/** Every file under `dir`, relative path to content. */
function readTree(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of fs.readdirSync(dir, { recursive: true, withFileTypes: true })) {
    if (e.isFile()) out[path.relative(dir, path.join(e.parentPath, e.name))] = fs.readFileSync(path.join(e.parentPath, e.name), 'utf8');
  }
  return out;
}

test('languages: what list_languages prints, with a JSON configuration', async () => {
  const r = await getJson(`${BASE}/languages`);
  assert.equal(r.status, 200);
  assert.match(String(r.type), /^application\/json/);
  assert.deepEqual(r.body.map((l: { name: string }) => l.name), ['python3', 'javascript', 'typescript']);
  for (const l of r.body) {
    assert.deepEqual(Object.keys(l).sort(), ['configuration', 'display_name', 'name']);
    assert.equal(typeof l.display_name, 'string');
    assert.equal(JSON.parse(l.configuration).display_name, l.display_name);
  }
});

test('environments of a language, in the original shape; an unknown language is a clear 404', async () => {
  const r = await getJson(`${BASE}/languages/python3/environments`);
  assert.equal(r.status, 200);
  assert.equal(r.body.environments.length, 1);
  const env = r.body.environments[0];
  assert.deepEqual(Object.keys(env).sort(), ['created_at', 'description', 'display_name', 'environment_specification_id', 'id', 'language', 'machine_type']);
  assert.match(env.id, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
  assert.notEqual(env.id, env.environment_specification_id);
  assert.equal(env.language.name, 'python3');
  assert.equal(env.machine_type, 'CPU');
  assert.ok(!Number.isNaN(Date.parse(env.created_at)));
  // The same ids on every request (they are derived, not random).
  assert.deepEqual((await getJson(`${BASE}/languages/python3/environments`)).body, r.body);
  const js = (await getJson(`${BASE}/languages/javascript/environments`)).body.environments[0];
  assert.notEqual(js.environment_specification_id, env.environment_specification_id);

  const missing = await getJson(`${BASE}/languages/cobol/environments`);
  assert.equal(missing.status, 404);
  assert.equal(missing.body.error.code, 'not_found');
  assert.match(missing.body.error.message, /python3, javascript, typescript/);

  const noKey = await rawRequest(s.url, 'GET', `${BASE}/languages`, {});
  assert.equal(noKey.status, 401);
});

for (const language of ['python3', 'javascript'] as const) {
  test(`the ${language} template: a tar.gz of the starter algo init writes, which builds and answers`, async () => {
    const specId = (await getJson(`${BASE}/languages/${language}/environments`)).body.environments[0].environment_specification_id as string;
    const res = await fetch(`${s.url}${BASE}/environment-specifications/${specId}/template`, { headers: { Authorization: key } });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'application/gzip');
    const archive = Buffer.from(await res.arrayBuffer());
    const dir = tempHome('algohost-template-');
    dirs.push(dir);
    fs.writeFileSync(path.join(dir, 'template.tar.gz'), archive);
    fs.mkdirSync(path.join(dir, 'out'));
    // What client.get_template does with it: tarfile.open(..., "r:gz").extractall(dest).
    execFileSync('tar', ['-xzf', path.join(dir, 'template.tar.gz'), '-C', path.join(dir, 'out')]);
    const files = readTree(path.join(dir, 'out'));
    assert.deepEqual(files, starterFiles(language));
    // The README describes the code beside it: its entry file, and how that file answers.
    const entry = /`(src\/[^`]+)`: the entry point/.exec(files['README.md']!)?.[1];
    assert.ok(entry && files[entry], `the README names an entry file that exists: ${entry}`);
    if (language === 'javascript') {
      assert.match(files[entry]!, /cb\(null, /);
      assert.match(files['README.md']!, /answers by calling `cb\(error, result\)`/);
    }

    // It runs: uploaded as an algorithm's source, it builds and says hello.
    const call = api(s.url, key);
    const name = `FromTemplate_${language}`;
    await createAlgorithm(call, 'alice', name, { language });
    const up = await upload(call, 'alice', name, Object.fromEntries(Object.entries(readTree(path.join(dir, 'out')))));
    assert.equal(up.status, 200);
    const hash = await compile(call, 'alice', name);
    const answer = (await (await callAlgo(call, `alice/${name}/${hash}`, 'world')).json()) as { result: string };
    assert.equal(answer.result, 'hello world');
  });
}

test('an unknown environment specification is a clear 404', async () => {
  const r = await getJson(`${BASE}/environment-specifications/00000000-0000-0000-0000-000000000000/template`);
  assert.equal(r.status, 404);
  assert.match(r.body.error.message, /no environment specification/);
});
