/**
 * The data requests of the official Python client's command line (`python -m Algorithmia`),
 * sent as it sends them (its source: Algorithmia/CLI.py `ls`, datadirectory.py, client.py
 * getHelper; requests' default headers). It is not installable here, so its requests are
 * replayed byte for byte over HTTP.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { api, startServer, type TestServer } from './helpers/server.ts';
import { rawRequest } from './helpers/raw.ts';

let s: TestServer;
let key: string;

before(async () => {
  s = await startServer();
  key = await s.user('alice');
});
after(() => s.close());

/** What requests sends for `session.get(url, headers={'Authorization': key})`: the bare key. */
const pythonHeaders = (k: string) => ({
  'User-Agent': 'python-requests/2.31.0',
  'Accept-Encoding': 'gzip, deflate',
  Accept: '*/*',
  Connection: 'keep-alive',
  Authorization: k,
});

/** CLI.py's `ls -l data://.my/dir/file`: the parent's first page, the file found by name in `files`. */
async function pythonLsLong(path: string): Promise<{ size: number; last_modified: string } | undefined> {
  const parts = path.split('/');
  const name = parts.at(-1)!;
  const directory = path.slice(0, -name.length); // keeps its trailing slash, as CLI.py does
  const res = await rawRequest(s.url, 'GET', '/v1/data/' + directory.replace(/^data:\/\//, ''), { headers: pythonHeaders(key) });
  assert.equal(res.status, 200, res.body);
  const content = JSON.parse(res.body) as { files?: { filename: string; size: number; last_modified: string }[] };
  return content.files?.find((f) => f.filename === name);
}

test('ls -l of a file finds it in the first page of its directory, however many folders are beside it', async () => {
  const call = api(s.url, key);
  const post = (parent: string, name: string) =>
    call(parent, { method: 'POST', body: JSON.stringify({ name }), headers: { 'content-type': 'application/json' } });
  assert.equal((await post('/v1/data/.my', 'proj')).status, 200);
  // More folders than a page holds: the file must still be in the first page.
  const folders = Array.from({ length: 1100 }, (_, i) => `sub${String(i).padStart(4, '0')}`);
  for (let i = 0; i < folders.length; i += 50) {
    const batch = await Promise.all(folders.slice(i, i + 50).map((f) => post('/v1/data/.my/proj', f)));
    for (const r of batch) assert.equal(r.status, 200);
  }
  const put = await call('/v1/data/.my/proj/results.csv', { method: 'PUT', body: 'a,b\n1,2\n' });
  assert.equal(put.status, 200);

  const info = await pythonLsLong('data://.my/proj/results.csv');
  assert.ok(info, 'the file is in the first page of its directory');
  assert.equal(info.size, 8);
  // datafile.py parses exactly '%Y-%m-%dT%H:%M:%S.%fZ'.
  assert.match(info.last_modified, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

  // The folders follow in later pages, never mixed with files, and all of them are reached.
  const seen: string[] = [];
  let marker: string | undefined;
  for (let pages = 0; pages < 10; pages++) {
    const res = await rawRequest(s.url, 'GET', '/v1/data/.my/proj/' + (marker ? `?marker=${encodeURIComponent(marker)}` : ''), { headers: pythonHeaders(key) });
    const page = JSON.parse(res.body) as { folders?: { name: string }[]; files?: unknown[]; marker?: string };
    assert.ok(!(page.folders && page.files), 'a page never mixes folders and files');
    seen.push(...(page.folders ?? []).map((f) => f.name));
    marker = page.marker;
    if (!marker) break;
  }
  assert.deepEqual(seen, folders);
});
