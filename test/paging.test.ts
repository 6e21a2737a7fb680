import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { api, json, startServer, type TestServer } from './helpers/server.ts';

let s: TestServer;
let call: ReturnType<typeof api>;

const FILES = 2500;
const FOLDERS = 30;
const fileName = (i: number) => `f${String(i).padStart(5, '0')}`;
const folderName = (i: number) => `d${String(i).padStart(3, '0')}`;

/** Runs `jobs` with at most `width` in flight. */
async function pool<T>(items: T[], width: number, job: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < items.length) await job(items[next++]!);
    }),
  );
}

async function ok(res: Promise<Response>): Promise<void> {
  const r = await res;
  assert.equal(r.status, 200, `${r.url}: ${await r.text()}`);
  await r.arrayBuffer().catch(() => undefined);
}

before(async () => {
  s = await startServer();
  call = api(s.url, await s.user('alice'));
  await ok(call('/v1/data/.my', { method: 'POST', body: 'p', headers: { 'content-type': 'text/plain' } }));
  await pool([...Array(FOLDERS).keys()], 8, (i) =>
    ok(call('/v1/data/.my/p', { method: 'POST', body: folderName(i), headers: { 'content-type': 'text/plain' } })),
  );
  await pool([...Array(FILES).keys()], 16, (i) => ok(call(`/v1/data/.my/p/${fileName(i)}`, { method: 'PUT', body: String(i) })));
});
after(() => s.close());

test('paging 2,500 entries while entries are added and removed between and during pages', async () => {
  const initialFiles = new Set([...Array(FILES).keys()].map(fileName));
  const initialFolders = new Set([...Array(FOLDERS).keys()].map(folderName));
  const deleted = new Set<string>();
  const seen: string[] = [];
  const pages: { folders: number; files: number }[] = [];
  let marker: string | undefined;
  let round = 0;
  let phase: 'files' | 'folders' = 'files';

  do {
    // Mutations racing with the page request: new names before and after the cursor,
    // and deletions of names already seen and not yet seen.
    const r = round++;
    const mutations = [
      call(`/v1/data/.my/p/f${String(r * 7).padStart(5, '0')}a`, { method: 'PUT', body: 'new' }),
      call(`/v1/data/.my/p/f${String(2499 - r * 11).padStart(5, '0')}a`, { method: 'PUT', body: 'new' }),
      call('/v1/data/.my/p', { method: 'POST', body: `d${String(r).padStart(3, '0')}x`, headers: { 'content-type': 'text/plain' } }),
    ];
    for (const victim of [fileName(r * 13 + 5), fileName(2400 - r * 17)]) {
      deleted.add(victim);
      mutations.push(call(`/v1/data/.my/p/${victim}`, { method: 'DELETE' }));
    }
    const q = marker ? `?marker=${encodeURIComponent(marker)}` : '';
    const [res, ...rest] = await Promise.all([call(`/v1/data/.my/p${q}`), ...mutations]);
    for (const m of rest) assert.ok(m.status === 200 || m.status === 404, `mutation answered ${m.status}`);
    assert.equal(res!.status, 200);
    const page = await json(res!);

    const folders: string[] = (page.folders ?? []).map((f: { name: string }) => f.name);
    const files: string[] = (page.files ?? []).map((f: { filename: string }) => f.filename);
    assert.ok(folders.length === 0 || files.length === 0, 'a page never mixes folders and files');
    assert.ok(folders.length + files.length <= 1000, 'at most 1000 entries a page');
    if (folders.length > 0) phase = 'folders';
    assert.ok(!(phase === 'folders' && files.length > 0), 'all file pages come before the folder pages');
    const names = folders.length ? folders : files;
    for (let i = 1; i < names.length; i++) assert.ok(names[i - 1]! < names[i]!, 'a stable, sorted order');
    seen.push(...names.map((n) => (folders.length ? `dir:${n}` : `file:${n}`)));
    pages.push({ folders: folders.length, files: files.length });
    marker = page.marker;
    assert.ok(round < 50, 'the walk ends');
  } while (marker);

  assert.equal(new Set(seen).size, seen.length, 'no entry is listed twice');
  const seenSet = new Set(seen);
  for (const f of initialFolders) assert.ok(seenSet.has(`dir:${f}`), `surviving folder ${f} is listed`);
  let survivors = 0;
  for (const f of initialFiles) {
    if (deleted.has(f)) continue;
    survivors++;
    assert.ok(seenSet.has(`file:${f}`), `surviving file ${f} is listed`);
  }
  assert.ok(survivors > 2400, 'most entries survived');
  assert.ok(pages.length >= 4, `2,530 entries take several pages (${JSON.stringify(pages)})`);
  assert.equal(pages[0]!.folders, 0, 'the first page holds files (the Python CLI reads a file\'s details from it)');
});
