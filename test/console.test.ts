/**
 * The web console in a real browser: Debian's Chromium, headless, driven by playwright-core,
 * against a real server on port 0 (and, under test:cluster, through the cluster). Each test is
 * what a person does: sign in, find and try demo/Hello, publish an algorithm, move files, change
 * an ACL and see another user's view change, make and revoke a key, read usage. Then what an
 * attacker tries: stored script in a README, a file name and a summary; requests from a page of
 * another site with the victim's cookie.
 *
 * With CONSOLE_SCREENSHOTS=DIR, each page is saved there as a PNG (docs/console.md's pictures:
 * `CONSOLE_SCREENSHOTS=docs/console node --import tsx --test test/console.test.ts`).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import zlib from 'node:zlib';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { api, json, startServer, tempHome, type TestServer } from './helpers/server.ts';
import { release, tarGz } from './helpers/algorithms.ts';
import { publishDemoAlgorithms } from '../src/algorithms/demo.ts';
import { writeUserLimits } from '../src/limits/userLimits.ts';
import { cacheDirectory } from '../src/console/assets.ts';
import { connectAccount } from './helpers/connectors.ts';
import { rcloneMissing, startWebDav } from './helpers/webdav.ts';

const CHROMIUM = '/usr/bin/chromium';
const skip = fs.existsSync(CHROMIUM) ? false : `${CHROMIUM} is not installed (apt-get install chromium; .ci/run does)`;
const SHOTS = process.env.CONSOLE_SCREENSHOTS;
const WAIT = { timeout: 30_000 };

let s: TestServer;
let browser: Browser;
let aliceKey: string;
let bobKey: string;
const contexts: BrowserContext[] = [];

async function shot(page: Page, name: string): Promise<void> {
  if (!SHOTS) return;
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
}

/** A browser of its own (cookies and all) for one user, signed in through the form. */
async function signedIn(username: string, password: string, viewport = { width: 1280, height: 900 }): Promise<Page> {
  const context = await browser.newContext({ viewport, acceptDownloads: true });
  contexts.push(context);
  const page = await context.newPage();
  page.on('dialog', (d) => void d.accept()); // confirm() of deletes and revokes; an alert() fails the XSS test below
  await page.goto(s.url + '/');
  await page.getByLabel('User name').fill(username);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('navigation', { name: 'Sections' }).waitFor(WAIT);
  // The marketplace it opens on has drawn its catalogue (fetched by the effect after the one
  // that focuses the heading): a search typed now is newer than it, and focus has settled.
  await catalogueShown(page);
  return page;
}

/**
 * The words of an element's text that its layout breaks across lines (a word is letters and
 * anything else but spaces: a URL is one word). Evaluated from a string: the page runs it as is.
 */
function brokenWords(page: Page, selector: string): Promise<string[]> {
  return page.evaluate(`(() => {
    const out = [];
    for (const el of document.querySelectorAll(${JSON.stringify(selector)})) {
      const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
      for (let n = walker.nextNode(); n; n = walker.nextNode()) {
        for (const m of n.textContent.matchAll(/\\S+/g)) {
          const r = document.createRange();
          r.setStart(n, m.index);
          r.setEnd(n, m.index + m[0].length);
          if (new Set([...r.getClientRects()].map((q) => Math.round(q.top))).size > 1) out.push(m[0]);
        }
      }
    }
    return out;
  })()`) as Promise<string[]>;
}

/** The marketplace's status line once a listing is drawn: "N algorithms", "1 algorithm", "24+ algorithms". */
const listed = (page: Page) => page.getByRole('status').filter({ hasText: /^\d+\+? algorithms?$/ });
const catalogueShown = (page: Page) => listed(page).waitFor(WAIT);

describe('the web console in Chromium', { skip }, () => {
  before(async () => {
    // Connected storage on loopback (the WebDAV server the test starts) is allowed.
    s = await startServer({ home: tempHome('algohost-console-'), env: { ALGOHOST_CONNECTOR_NETWORK: 'any' } });
    aliceKey = await s.user('alice');
    bobKey = await s.user('bob');
    const demoKey = await s.user('demo');
    await s.services.sessions.setPassword('alice', 'alice password');
    await s.services.sessions.setPassword('bob', 'bob password');
    const demo = await s.services.keys.authenticate(`Simple ${demoKey}`);
    await publishDemoAlgorithms(demo, s.services, fs.mkdtempSync(path.join(s.home, 'demo-')));
    // algohost.test: another name for this machine, reached over plain HTTP (not a secure context).
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--host-resolver-rules=MAP algohost.test 127.0.0.1'] });
  });
  after(async () => {
    for (const c of contexts) await c.close().catch(() => undefined);
    await browser?.close();
    await s?.close();
  });

  test('sign in, search, open demo/Hello, try it and see "Hello world"', async () => {
    const page = await signedIn('alice', 'alice password');
    await shot(page, 'marketplace');
    await page.getByLabel('Search public algorithms').fill('hello');
    await page.getByRole('button', { name: 'Search' }).click();
    await listed(page).filter({ hasText: /^1 algorithm$/ }).waitFor(WAIT);
    await page.getByRole('link', { name: 'demo/Hello' }).click();
    await page.getByRole('heading', { level: 1, name: 'demo/Hello' }).waitFor(WAIT);
    // The sample input is the try-it box's first input.
    assert.equal(await page.getByLabel('Input', { exact: true }).inputValue(), 'world');
    await page.getByRole('button', { name: /^Call demo\/Hello\// }).click();
    const result = page.locator('pre.result');
    await result.waitFor(WAIT);
    assert.equal(await result.textContent(), 'Hello world');
    const facts = await page.locator('.answer dl').textContent();
    assert.match(facts!, /Content typetext/);
    assert.match(facts!, /Duration\d+\.\d{3} s of compute/);
    // The snippets name this server and this algorithm.
    assert.match((await page.locator('#snip-panel pre').textContent())!, new RegExp(`curl -X POST ${s.url.replace(/[.]/g, '\\.')}/v1/algo/demo/Hello/0\\.1\\.0`));
    await shot(page, 'algorithm');
  });

  test('over plain HTTP under another host name, sign-in is off, saying why and what to do instead', async () => {
    const context = await browser.newContext();
    contexts.push(context);
    const page = await context.newPage();
    const port = new URL(s.url).port;
    const signIns: string[] = [];
    page.on('request', (r) => {
      if (new URL(r.url()).pathname === '/v1/session' && r.method() === 'POST') signIns.push(r.url());
    });
    await page.goto(`http://algohost.test:${port}/`);
    const why = page.getByRole('alert');
    await why.waitFor(WAIT);
    const text = (await why.textContent())!;
    assert.match(text, /Signing in cannot work here: this page came over plain HTTP from algohost\.test:\d+/);
    assert.ok(text.includes(`ssh -L ${port}:127.0.0.1:${port} algohost.test`), text);
    assert.ok(text.includes(`http://localhost:${port}/`), text);
    for (const field of [page.getByLabel('User name'), page.getByLabel('Password'), page.getByRole('button', { name: 'Sign in' })]) {
      assert.equal(await field.isDisabled(), true);
    }
    // Nothing to type in, nothing sent: no sign-in that would land on pages that cannot load.
    await page.keyboard.press('Enter');
    await page.waitForTimeout(200);
    assert.deepEqual(signIns, []);
    await shot(page, 'signin-insecure');
    // The same server on 127.0.0.1 (a secure context): the form is on.
    await page.goto(`http://127.0.0.1:${port}/`);
    await page.getByLabel('User name').waitFor(WAIT);
    assert.equal(await page.getByLabel('User name').isDisabled(), false);
    assert.equal(await page.getByRole('alert').count(), 0);
  });

  test('the API reference: the server\'s own OpenAPI document, operations by tag with parameters, bodies and answers, nothing from elsewhere', async () => {
    const page = await signedIn('alice', 'alice password');
    const elsewhere: string[] = [];
    page.on('request', (r) => {
      if (new URL(r.url()).origin !== new URL(s.url).origin) elsewhere.push(r.url());
    });
    await page.getByRole('link', { name: 'API', exact: true }).click();
    await page.getByRole('heading', { level: 1, name: 'API reference' }).waitFor(WAIT);
    for (const tag of ['Calls', 'Data', 'Keys', 'Webhooks']) await page.getByRole('heading', { level: 2, name: tag }).waitFor(WAIT);
    const call = page.locator('details.api-op').filter({ hasText: /^POST\s+\/v1\/algo\/\{owner\}\/\{algoname\}\/\{version\}/ });
    await call.locator('summary').click();
    await call.getByRole('row', { name: /timeout/ }).waitFor(WAIT);
    assert.match((await call.textContent())!, /application\/octet-stream/);
    assert.match((await call.textContent())!, /429 error envelope/);
    await shot(page, 'api-reference');
    await page.getByLabel('Find an operation').fill('/keys');
    await page.getByRole('heading', { level: 2, name: 'Calls' }).waitFor({ ...WAIT, state: 'detached' });
    await page.getByRole('heading', { level: 2, name: 'Keys' }).waitFor(WAIT);
    assert.deepEqual(elsewhere, []);
  });

  test('a search answered before the catalogue is not covered by the catalogue coming late', async () => {
    const page = await signedIn('bob', 'bob password');
    // Hold the catalogue the marketplace asks for as it opens (no q) until the search has answered.
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    await page.route(
      (u) => u.pathname === '/v1/algorithms' && !u.searchParams.has('q'),
      async (route) => {
        await held;
        await route.continue();
      },
    );
    await page.goto(`${s.url}/#/keys`);
    await page.getByRole('heading', { level: 1, name: /keys/i }).waitFor(WAIT);
    const asked = page.waitForRequest((r) => {
      const u = new URL(r.url());
      return u.pathname === '/v1/algorithms' && !u.searchParams.has('q');
    }, WAIT);
    await page.goto(`${s.url}/#/`);
    const catalogue = await asked; // made, and held, before the search
    await page.getByLabel('Search public algorithms').fill('Reverse');
    await page.getByRole('button', { name: 'Search' }).click();
    const status = listed(page);
    await status.waitFor(WAIT);
    assert.equal(await status.textContent(), '1 algorithm');
    release();
    await (await catalogue.response())!.finished(); // the held answer itself has come
    await page.waitForTimeout(300); // and has had its chance to be drawn
    assert.equal(await status.textContent(), '1 algorithm');
    assert.equal(await page.locator('.card h2').textContent(), 'demo/Reverse');
  });

  test('try it with a file: demo/Reverse answers bytes, which download whole', async () => {
    const page = await signedIn('bob', 'bob password');
    await page.goto(`${s.url}/#/algorithms/demo/Reverse`);
    await page.getByRole('heading', { level: 1, name: 'demo/Reverse' }).waitFor(WAIT);
    await page.getByLabel('File', { exact: true }).check();
    const input = crypto.randomBytes(5000);
    await page.getByLabel('File to send').setInputFiles({ name: 'in.bin', mimeType: 'application/octet-stream', buffer: input });
    await page.getByRole('button', { name: /^Call demo\/Reverse\// }).click();
    const link = page.getByRole('link', { name: 'Download the result' });
    await link.waitFor(WAIT);
    assert.match((await page.locator('.answer dl').textContent())!, /Content typebinary/);
    const [download] = await Promise.all([page.waitForEvent('download', WAIT), link.click()]);
    assert.ok(fs.readFileSync((await download.path())!).equals(Buffer.from(input).reverse()), 'the reversed bytes');
  });

  test('another user\'s private algorithm appears nowhere: not in search, not by its address', async () => {
    await release(api(s.url, aliceKey), 'alice', 'Secret', { 'src/index.js': "export const input_types = ['text'];\nexport function apply(i) { return i; }\n", 'package.json': '{"name":"s","version":"1.0.0"}' }, {
      settings: { language: 'javascript' },
      publishSettings: { algorithm_callability: 'private' },
    });
    await api(s.url, aliceKey)('/v1/algorithms/alice/Secret', { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ details: { summary: 'hush' } }) });
    const bob = await signedIn('bob', 'bob password');
    await bob.getByLabel('Search public algorithms').fill('Secret');
    await bob.getByRole('button', { name: 'Search' }).click();
    await bob.getByText(/No public algorithm matches/).waitFor(WAIT);
    await bob.goto(`${s.url}/#/algorithms/alice/Secret`);
    await bob.locator('.error, .crumbs').first().waitFor(WAIT);
    // Whatever the page shows has finished loading (the versions come after the algorithm).
    await bob.getByText(/Loading/).first().waitFor({ state: 'detached', timeout: 30_000 });
    assert.equal(await bob.getByText('hush').count(), 0);
    assert.equal(await bob.getByRole('button', { name: /^Call alice\/Secret/ }).count(), 0);
    // Alice sees it, and may try it.
    const alice = await signedIn('alice', 'alice password');
    await alice.goto(`${s.url}/#/algorithms/alice/Secret`);
    await alice.getByRole('button', { name: /^Call alice\/Secret\/0\.1\.0/ }).waitFor(WAIT);
  });

  test('publish an algorithm from the console: create, upload, follow the build, publish; its README shows', async () => {
    const page = await signedIn('alice', 'alice password');
    await page.getByRole('link', { name: 'My algorithms' }).click();
    await page.getByLabel('Name').fill('Shout');
    await page.getByLabel('Language').selectOption('python3');
    await page.getByLabel('Summary').fill('Shouts what it is given.');
    await page.getByRole('button', { name: 'Create' }).click();
    await page.getByRole('heading', { level: 1, name: 'alice/Shout' }).waitFor(WAIT);
    const source = tarGz({
      // It takes a quarter of a second, so that its compute seconds show (usage test below).
      'src/Shout.py': 'import sys, time\n\ndef apply(input):\n    print("building up")\n    time.sleep(0.25)\n    return str(input).upper() + "!"\n',
      'requirements.txt': '',
      'README.md': '# Shout\n\nTurns `hi` into **HI!**\n\n| in | out |\n|---|---|\n| a | A! |\n',
    });
    await page.getByLabel('Upload a source archive (.tar.gz)').setInputFiles({ name: 'shout.tar.gz', mimeType: 'application/gzip', buffer: source });
    await page.getByText(/Uploaded \d+ files/).waitFor(WAIT);
    await page.getByRole('button', { name: 'Compile' }).click();
    await page.getByText(/^Built [0-9a-f]{12}: ready to publish\.$/).waitFor({ timeout: 120_000 });
    assert.ok(((await page.getByLabel('Build log').textContent()) ?? '').length > 0, 'the build log is shown');
    await page.getByLabel('Release notes').fill('First cut.');
    await page.getByLabel('Sample input (JSON, or text)').fill('hello');
    await page.getByRole('button', { name: 'Publish the last build' }).click();
    await page.getByText('Published alice/Shout/0.1.0.').waitFor(WAIT);
    await shot(page, 'my-algorithm');
    await page.getByRole('link', { name: 'Open its page' }).click();
    await page.getByRole('heading', { level: 2, name: 'README' }).waitFor(WAIT);
    await page.getByRole('heading', { level: 1, name: 'alice/Shout' }).waitFor(WAIT);
    await page.locator('.markdown strong', { hasText: 'HI!' }).waitFor(WAIT);
    assert.equal(await page.locator('.markdown table td').first().textContent(), 'a');
    await page.getByRole('button', { name: /^Call alice\/Shout\// }).click();
    await page.locator('pre.result').waitFor(WAIT);
    assert.equal(await page.locator('pre.result').textContent(), 'HELLO!');
    // The owner sees what it printed.
    assert.match((await page.locator('pre.stdout').textContent())!, /building up/);
    // Callable by others, through the API.
    const r = await api(s.url, bobKey)('/v1/algo/alice/Shout/0.1.0', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'x' });
    assert.equal((await json(r)).result, 'X!');
  });

  test('data: make a collection, upload by file and download the same bytes; delete with confirmation', async () => {
    const page = await signedIn('alice', 'alice password');
    await page.getByRole('link', { name: 'Data', exact: true }).click();
    await page.getByLabel('New collection').fill('photos');
    await page.getByRole('button', { name: 'Create' }).click();
    await page.getByRole('link', { name: 'photos/' }).click();
    await page.getByRole('heading', { level: 1, name: 'data://.my/photos' }).waitFor(WAIT);
    const bytes = crypto.randomBytes(3 * 1024 * 1024 + 17);
    await page.locator('input[type=file]').setInputFiles({ name: 'big.bin', mimeType: 'application/octet-stream', buffer: bytes });
    await page.getByText(/uploaded \(3\.0 MiB\)/).waitFor(WAIT);
    await page.getByRole('row', { name: /big\.bin/ }).waitFor(WAIT);
    const stored = await api(s.url, aliceKey)('/v1/data/.my/photos/big.bin');
    assert.ok(Buffer.from(await stored.arrayBuffer()).equals(bytes), 'the server holds the bytes sent');
    await shot(page, 'data');
    const [download] = await Promise.all([page.waitForEvent('download', WAIT), page.getByRole('button', { name: 'Download big.bin' }).click()]);
    const got = fs.readFileSync((await download.path())!);
    assert.ok(got.equals(bytes), 'the download is the same bytes');
    assert.equal(download.suggestedFilename(), 'big.bin');
    // The browser fetched it itself, by a download link (saved as it arrives), not from a blob the page held.
    assert.match(download.url(), new RegExp(`^${s.url.replace(/[.]/g, '\\.')}/v1/data/\\.my/photos/big\\.bin\\?download=\\d+\\.[\\w-]{43}$`));
    await page.getByRole('button', { name: 'Delete big.bin' }).click();
    await page.getByText('This folder is empty.').waitFor(WAIT);
    // Dropped onto the drop zone, as from a file manager.
    const dropped = await page.evaluateHandle('(() => { const dt = new DataTransfer(); dt.items.add(new File(["dropped bytes"], "dropped.txt", { type: "text/plain" })); return dt; })()');
    await page.dispatchEvent('.drop', 'drop', { dataTransfer: dropped });
    await page.getByRole('row', { name: /dropped\.txt/ }).waitFor(WAIT);
    assert.equal(await (await api(s.url, aliceKey)('/v1/data/.my/photos/dropped.txt')).text(), 'dropped bytes');
    assert.equal((await api(s.url, aliceKey)('/v1/data/.my/photos/big.bin', { method: 'HEAD' })).status, 404);
  });

  test('a folder larger than a page is shown a page at a time: next, previous, and a deletion on a later page', async () => {
    const call = api(s.url, aliceKey);
    assert.equal((await call('/v1/data/.my', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"name":"many"}' })).status, 200);
    // 1,003 files: the API pages listings by 1,000, so the second page holds the last three.
    const names = [...Array(1003).keys()].map((i) => `f${String(i).padStart(4, '0')}.txt`);
    for (let i = 0; i < names.length; i += 32) {
      await Promise.all(names.slice(i, i + 32).map(async (n) => assert.equal((await call(`/v1/data/.my/many/${n}`, { method: 'PUT', body: n })).status, 200)));
    }
    const page = await signedIn('alice', 'alice password');
    await page.goto(`${s.url}/#/data/data/.my/many`);
    const status = page.getByText(/^Page \d+: entries/);
    await status.waitFor(WAIT);
    assert.equal(await status.textContent(), 'Page 1: entries 1–1,000; more follow');
    const rows = page.locator('table.listing tbody tr');
    await page.getByRole('row', { name: /f0999\.txt/ }).waitFor(WAIT); // drawn in slices: the last one is there
    assert.equal(await rows.count(), 1000);
    assert.equal(await page.getByRole('button', { name: 'Previous page' }).isDisabled(), true);

    await page.getByRole('button', { name: 'Next page' }).click();
    await page.getByText('Page 2: entries 1,001–1,003, the last').waitFor(WAIT);
    assert.deepEqual(await rows.locator('th').allTextContents(), ['f1000.txt', 'f1001.txt', 'f1002.txt']);
    await shot(page, 'data-pages');
    assert.equal(await page.getByRole('button', { name: 'Next page' }).isDisabled(), true);

    // Deleting on page 2 fetches page 2 again and stays there.
    await page.getByRole('button', { name: 'Delete f1001.txt' }).click();
    await page.getByText('Page 2: entries 1,001–1,002, the last').waitFor(WAIT);
    assert.deepEqual(await rows.locator('th').allTextContents(), ['f1000.txt', 'f1002.txt']);
    assert.equal((await call('/v1/data/.my/many/f1001.txt', { method: 'HEAD' })).status, 404);
    // An upload on page 2 fetches page 2 again too: the user stays where they are.
    await page.locator('input[type=file]').setInputFiles({ name: 'f1001b.txt', mimeType: 'text/plain', buffer: Buffer.from('again') });
    await page.getByText('Page 2: entries 1,001–1,003, the last').waitFor(WAIT);
    assert.deepEqual(await rows.locator('th').allTextContents(), ['f1000.txt', 'f1001b.txt', 'f1002.txt']);
    await page.getByRole('button', { name: 'Delete f1001b.txt' }).click();
    await page.getByText('Page 2: entries 1,001–1,002, the last').waitFor(WAIT);

    // Back is the page already fetched; forward again asks the API for the rest.
    await page.getByRole('button', { name: 'Previous page' }).click();
    await page.getByText('Page 1: entries 1–1,000; more follow').waitFor(WAIT);
    await page.getByRole('row', { name: /f0000\.txt/ }).waitFor(WAIT);
    await page.getByRole('button', { name: 'Next page' }).click();
    await page.getByText('Page 2: entries 1,001–1,002, the last').waitFor(WAIT);

    // The last two entries of page 2 go: page 1 becomes the last page, shown again.
    await page.getByRole('button', { name: 'Delete f1000.txt' }).click();
    await page.getByText('Page 2: entry 1,001, the last').waitFor(WAIT);
    await page.getByRole('button', { name: 'Delete f1002.txt' }).click();
    await page.getByText('0 folders, 1,000 files').waitFor(WAIT);
    assert.equal(await page.getByRole('button', { name: 'Next page' }).count(), 0, 'a single page needs no pager');
  });

  test('an ACL changed in the console changes what another user sees', async () => {
    const made = await api(s.url, aliceKey)('/v1/data/.my', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'shared', acl: { read: [] } }) });
    assert.equal(made.status, 200, await made.clone().text());
    assert.equal((await api(s.url, aliceKey)('/v1/data/.my/shared/note.txt', { method: 'PUT', body: 'for bob' })).status, 200);
    const bob = await signedIn('bob', 'bob password');
    const bobOpens = async () => {
      await bob.goto(`${s.url}/#/data/data/alice/shared`);
      await bob.reload(); // the same address again: load it afresh
      await bob.getByRole('heading', { level: 1, name: 'data://alice/shared' }).waitFor(WAIT);
      await bob.locator('table.listing, .error').first().waitFor(WAIT);
    };
    await bobOpens();
    assert.equal(await bob.getByRole('row', { name: /note\.txt/ }).count(), 0, 'private: bob sees nothing');
    assert.equal(await bob.locator('.error').count(), 1);

    const alice = await signedIn('alice', 'alice password');
    await alice.goto(`${s.url}/#/data/data/.my/shared`);
    const acl = alice.getByLabel('Who may read this collection');
    await acl.waitFor(WAIT);
    assert.equal(await acl.inputValue(), 'private');
    // Saved once the PATCH is answered ("Saved." may still show from an earlier change).
    const saved = () => alice.waitForResponse((r) => r.request().method() === 'PATCH' && r.url().endsWith('/v1/data/.my/shared') && r.ok(), WAIT);
    await Promise.all([saved(), acl.selectOption('public')]);
    await alice.getByText('Saved.').waitFor(WAIT);
    await shot(alice, 'data-acl');
    await bobOpens();
    await bob.getByRole('row', { name: /note\.txt/ }).waitFor(WAIT);

    await Promise.all([saved(), alice.getByLabel('Who may read this collection').selectOption('private')]);
    await bobOpens();
    assert.equal(await bob.getByRole('row', { name: /note\.txt/ }).count(), 0, 'private again');
  });

  test('connected storage appears beside hosted data, and browses and downloads the same way', { skip: rcloneMissing() ?? false }, async () => {
    const dav = await startWebDav({ user: 'alice', pass: 'dav-secret' });
    try {
      const bytes = crypto.randomBytes(70_000);
      fs.mkdirSync(path.join(dav.root, 'reports'));
      fs.writeFileSync(path.join(dav.root, 'reports', 'q3.bin'), bytes);
      await connectAccount(s, 'alice', aliceKey, { label: 'dav', protocol: 'filehost', provider: 'webdav', writeable: true, cred_data: { url: dav.url, username: 'alice', password: 'dav-secret' } });
      const page = await signedIn('alice', 'alice password');
      await page.getByRole('link', { name: 'Data', exact: true }).click();
      const connected = page.getByRole('region', { name: 'Connected storage' });
      await connected.getByRole('link', { name: 'filehost+dav://' }).click();
      await page.getByRole('link', { name: 'reports/' }).click();
      await page.getByRole('heading', { level: 1, name: 'filehost+dav://reports' }).waitFor(WAIT);
      const [download] = await Promise.all([page.waitForEvent('download', WAIT), page.getByRole('button', { name: 'Download q3.bin' }).click()]);
      assert.ok(fs.readFileSync((await download.path())!).equals(bytes), 'the bytes on the WebDAV server');
    } finally {
      await dav.stop();
    }
  });

  test('API keys: create one with restrictions, shown once, that works; revoke it and it stops', async () => {
    const page = await signedIn('alice', 'alice password');
    await page.getByRole('link', { name: 'API keys' }).click();
    await page.getByLabel('Name').fill('reader');
    await page.getByLabel('Write and delete data').uncheck();
    await page.getByLabel('Algorithms it may call').fill('algo://demo/*');
    await page.getByRole('button', { name: 'Create the key' }).click();
    const key = (await page.locator('code.secret').textContent({ timeout: 30_000 }))!;
    assert.match(key, /^sim[0-9A-Za-z]{25}$/);
    await shot(page, 'keys');
    const as = api(s.url, key);
    assert.equal((await as('/v1/algo/demo/Hello', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'key' })).status, 200);
    assert.equal((await as('/v1/algo/alice/Shout', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'key' })).status, 401, 'outside its algo_acl');
    assert.equal((await as('/v1/data/.my/k', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"name":"k"}' })).status, 403, 'no data writes');
    await page.getByRole('button', { name: 'I have copied it' }).click();
    await page.locator('code.secret').waitFor({ state: 'detached', timeout: 30_000 });
    await page.reload();
    await page.getByRole('row', { name: /reader/ }).waitFor(WAIT);
    assert.doesNotMatch((await page.content()), new RegExp(key), 'never shown again');
    await page.getByRole('button', { name: 'Revoke reader' }).click();
    await page.getByRole('row', { name: /reader/ }).waitFor({ state: 'detached', timeout: 30_000 });
    assert.equal((await as('/v1/algo/demo/Hello', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'key' })).status, 401);
  });

  test('usage: calls made show as compute seconds, for the caller and for the owner', async () => {
    const shoutCalls = async () =>
      ((await json(await api(s.url, aliceKey)('/v1/users/alice/usage'))).as_owner.days as { algorithm: string; version: string; calls: number }[])
        .filter((d) => d.algorithm === 'alice/Shout' && d.version === '0.1.0')
        .reduce((n, d) => n + d.calls, 0);
    const before = await shoutCalls();
    for (let i = 0; i < 3; i++) await api(s.url, bobKey)('/v1/algo/alice/Shout/0.1.0', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'x' });
    // Under test:cluster a call answered by the other API node reaches the table with that
    // node's next flush, about a second later (docs/usage.md).
    for (const until = Date.now() + 10_000; (await shoutCalls()) < before + 3; await new Promise((r) => setTimeout(r, 200))) {
      assert.ok(Date.now() < until, `bob's calls reached the usage table (${before} before)`);
    }
    // Alice's quotas: a compute quota and a rate of her own; hosted data without a limit.
    const alice = await s.services.users.require('alice');
    await writeUserLimits(s.services.store, alice.id, { calls_per_min: 600, burst: 20, compute_seconds_per_month: 3600, share: 2 });
    const page = await signedIn('alice', 'alice password');
    await page.getByRole('link', { name: 'Usage' }).click();
    const limits = page.getByRole('region', { name: 'Your limits' });
    await limits.getByText(/^Compute seconds this month:/).waitFor(WAIT);
    const given = await json(await api(s.url, aliceKey)('/v1/users/alice/limits'));
    assert.match((await limits.getByText(/^Calls:/).textContent())!, /^Calls: 600 calls a minute \(bursts of 20\), \d+ available now; no limit on calls at once\.$/);
    assert.match((await limits.getByText(/^Compute seconds this month:/).textContent())!, /^Compute seconds this month: [\d.,]+ of 3,600 used, [\d.,]+ left/);
    const meter = limits.getByRole('meter', { name: 'Compute seconds this month used' });
    assert.equal(await meter.getAttribute('max'), '3600');
    assert.ok(Math.abs(Number(await meter.getAttribute('value')) - given.compute.used_s) < 60, `the meter says what the API says: ${await meter.getAttribute('value')} against ${given.compute.used_s}`);
    assert.match((await limits.getByText(/^Hosted data:/).textContent())!, /^Hosted data: [\d.]+ (B|KiB|MiB) used, no limit\.$/);
    assert.equal(given.share, 2);
    assert.equal(await limits.getByText(/^When the workers are all busy:/).textContent(), 'When the workers are all busy: 2 of your calls served each turn among the callers waiting.');
    assert.match((await limits.textContent())!, new RegExp(`start again on ${given.compute.resets_at.slice(0, 10)}`));
    await writeUserLimits(s.services.store, alice.id, {}, true);
    const owner = page.getByRole('region', { name: 'Calls to your algorithms' });
    await owner.getByRole('row', { name: /alice\/Shout\/0\.1\.0/ }).waitFor(WAIT);
    const cells = owner.getByRole('row', { name: /alice\/Shout\/0\.1\.0/ }).getByRole('cell');
    const calls = Number(await cells.nth(0).textContent());
    const seconds = Number(await cells.nth(1).textContent());
    assert.ok(calls >= 4, `bob's 3 calls and alice's own: ${calls}`);
    assert.ok(seconds >= 0.25 * calls && seconds < 60, `each call slept 0.25 s: ${seconds} s for ${calls} calls`);
    const total = await owner.locator('p').first().textContent();
    assert.match(total!, new RegExp(`^${calls} calls, \\d+\\.\\d+ compute seconds`));
    const mine = page.getByRole('region', { name: 'Your calls' });
    await mine.getByRole('row', { name: /demo\/Hello\/0\.1\.0/ }).waitFor(WAIT);
    assert.equal(await mine.locator('svg[role=img]').count(), 1, 'a chart');
    // On a scale: 0, half and the top, a round number at or above the busiest day.
    const ticks = await owner.locator('svg .scale text').allTextContents();
    assert.equal(ticks.length, 3, ticks.join(', '));
    assert.equal(ticks[0], '0 s');
    const topTick = Number(ticks[2]!.replace(/[ s,]/g, ''));
    const mantissa = topTick / 10 ** Math.floor(Math.log10(topTick));
    assert.ok(topTick >= seconds / 31 && [1, 2, 2.5, 5].some((m) => Math.abs(mantissa - m) < 1e-9), `top tick ${ticks[2]}`);
    // The period's selector is as wide as its choices, not the page.
    const period = (await page.getByLabel('Period').boundingBox())!;
    assert.ok(period.width < 250, `the period selector is ${period.width}px wide`);
    await shot(page, 'usage');
    // Bob sees his own calls, and none of alice's.
    const bob = await signedIn('bob', 'bob password');
    await bob.getByRole('link', { name: 'Usage' }).click();
    const bobs = bob.getByRole('region', { name: 'Your calls' });
    await bobs.getByRole('row', { name: /alice\/Shout\/0\.1\.0/ }).waitFor(WAIT);
    assert.equal(await bob.getByRole('row', { name: /demo\/Hello/ }).count(), 0, 'alice\'s calls to demo/Hello are hers');
  });

  test('stored XSS in a README, a summary and a file name runs nothing', async () => {
    const evil = '<img src=x onerror="window.__pwned=1;alert(1)"><script>window.__pwned=2;alert(2)</script>';
    const owner = api(s.url, bobKey);
    await release(
      owner,
      'bob',
      'Evil',
      {
        'src/index.js': "export const input_types = ['text'];\nexport function apply(input) { return input; }\n",
        'package.json': '{"name":"evil","version":"1.0.0"}',
        'README.md': `# Nice\n\n${evil}\n\n[click](javascript:window.__pwned=3)\n\n<a href="javascript:alert(4)">x</a><iframe src="javascript:alert(5)"></iframe>`,
      },
      { settings: { language: 'javascript' } },
    );
    const updated = await owner('/v1/algorithms/bob/Evil', { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ details: { summary: evil } }) });
    assert.equal(updated.status, 200, await updated.clone().text());
    const made = await owner('/v1/data/.my', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'pub', acl: { read: ['user://*'] } }) });
    assert.equal(made.status, 200, await made.clone().text());
    const put = await owner(`/v1/data/.my/pub/${encodeURIComponent('<img src=x onerror=alert(6)>.txt')}`, { method: 'PUT', body: 'x' });
    assert.equal(put.status, 200, await put.clone().text());

    const page = await signedIn('alice', 'alice password');
    const dialogs: string[] = [];
    page.on('dialog', (d) => dialogs.push(d.message()));
    await page.getByLabel('Search public algorithms').fill('Evil');
    await page.getByRole('button', { name: 'Search' }).click();
    // The full catalogue is drawn first, bob/Evil in it: wait for the search's own answer.
    await page.getByRole('status').filter({ hasText: /^1 algorithm$/ }).waitFor(WAIT);
    const card = page.locator('.card');
    assert.equal(await card.count(), 1);
    assert.ok((await card.textContent())!.includes('<img src=x onerror='), 'the summary shows as text');
    await page.getByRole('link', { name: 'bob/Evil' }).click();
    await page.locator('.markdown h1', { hasText: 'Nice' }).waitFor(WAIT);
    const html = await page.locator('.markdown').innerHTML();
    assert.doesNotMatch(html, /onerror|<script|javascript:|<iframe/i, html);
    await page.goto(`${s.url}/#/data/data/bob/pub`);
    await page.getByRole('row', { name: /onerror=alert\(6\)/ }).waitFor(WAIT);
    await page.waitForTimeout(500);
    assert.equal(await page.evaluate('window.__pwned'), undefined);
    assert.deepEqual(dialogs, []);
  });

  test('another site cannot use the cookie: its requests are refused and its reads are blocked', async () => {
    const victim = await signedIn('alice', 'alice password');
    const before = (await json(await api(s.url, aliceKey)('/v1/users/alice/keys'))).results.length as number;
    // A page on another site (localhost is another site than 127.0.0.1): it tries a form post,
    // a credentialed fetch, and a no-cors write.
    const target = s.url;
    const evil = http.createServer((_req, res) => {
      res.setHeader('content-type', 'text/html');
      res.end(`<!doctype html><body>
<iframe name=sink></iframe>
<form id=f method=POST target=sink action="${target}/v1/users/alice/keys" enctype="text/plain"><input name='{"name":"stolen","x":"' value='"}'></form>
<script>
window.results = {};
fetch(${JSON.stringify(target)} + '/v1/users/alice/keys', { credentials: 'include' })
  .then(r => r.text()).then(t => window.results.read = t, e => window.results.read = 'blocked: ' + e);
fetch(${JSON.stringify(target)} + '/v1/session', { credentials: 'include' })
  .then(r => r.text()).then(t => window.results.session = t, e => window.results.session = 'blocked: ' + e);
fetch(${JSON.stringify(target)} + '/v1/users/alice/keys', { method: 'POST', mode: 'no-cors', credentials: 'include', headers: { 'content-type': 'text/plain' }, body: '{"name":"stolen2"}' })
  .then(() => window.results.write = 'sent', e => window.results.write = 'failed ' + e);
fetch(${JSON.stringify(target)} + '/v1/session', { method: 'DELETE', mode: 'no-cors', credentials: 'include' }).then(() => window.results.signout = 'sent', () => window.results.signout = 'failed');
setTimeout(() => document.getElementById('f').submit(), 300);
</script></body>`);
    });
    await new Promise<void>((r) => evil.listen(0, '127.0.0.1', r));
    try {
      const port = (evil.address() as AddressInfo).port;
      const page = await victim.context().newPage();
      const formPost = page.waitForRequest((r) => r.method() === 'POST' && r.url() === `${target}/v1/users/alice/keys` && r.resourceType() === 'document', WAIT);
      await page.goto(`http://localhost:${port}/`);
      await page.waitForFunction('window.results && ["read", "session", "write", "signout"].every((k) => window.results[k] !== undefined)', undefined, WAIT);
      const results = (await page.evaluate('window.results')) as Record<string, string>;
      assert.match(results.read!, /^blocked/, 'the answer cannot be read from another site');
      assert.match(results.session!, /^blocked/, 'nor the session\'s token');
      assert.ok(await (await formPost).response(), 'the form\'s POST was answered');
      const keys = (await json(await api(s.url, aliceKey)('/v1/users/alice/keys'))).results as { name: string }[];
      assert.equal(keys.length, before, `no key was made: ${keys.map((k) => k.name).join(', ')}`);
      // And the victim is still signed in (the sign-out attempt did nothing).
      await victim.reload();
      await victim.getByRole('navigation', { name: 'Sections' }).waitFor(WAIT);
    } finally {
      evil.close();
    }
  });

  test('on a phone-sized screen, a key\'s name and the curl snippet\'s address are never broken mid-word', async () => {
    await api(s.url, bobKey)('/v1/users/bob/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'continuous integration runner' }) });
    const page = await signedIn('bob', 'bob password', { width: 390, height: 844 });
    await page.goto(`${s.url}/#/keys`);
    await page.getByRole('rowheader', { name: 'continuous integration runner' }).waitFor(WAIT);
    assert.deepEqual(await brokenWords(page, 'tbody th'), []);
    await page.goto(`${s.url}/#/algorithms/demo/Hello`);
    await page.locator('#snip-panel pre').waitFor(WAIT);
    assert.match((await page.locator('#snip-panel pre').textContent())!, /\/v1\/algo\/demo\/Hello/);
    assert.deepEqual(await brokenWords(page, '#snip-panel pre'), []);
    // It scrolls inside its box: the page itself still fits the screen.
    const overflow = (await page.evaluate('document.documentElement.scrollWidth - document.documentElement.clientWidth')) as number;
    assert.ok(overflow <= 0, `no sideways scrolling (${overflow}px)`);
    await shot(page, 'phone-snippet');
  });

  test('on a phone-sized screen, the pages fit and work from the keyboard', async () => {
    const page = await signedIn('bob', 'bob password', { width: 390, height: 844 });
    const overflow = (await page.evaluate('document.documentElement.scrollWidth - document.documentElement.clientWidth')) as number;
    assert.ok(overflow <= 0, `no sideways scrolling (${overflow}px)`);
    await shot(page, 'phone');
    // Keyboard: a page opens with its heading focused; before it come the sections, the sign-out
    // and first of all the skip link, which moves focus to the content.
    assert.equal(await page.evaluate('document.activeElement.tagName'), 'H1');
    const passed: string[] = [];
    for (let i = 0; i < 20 && passed[passed.length - 1] !== 'Skip to content'; i++) {
      await page.keyboard.press('Shift+Tab');
      passed.push((await page.evaluate('document.activeElement.textContent')) as string);
    }
    for (const name of ['Sign out', 'Usage', 'API keys', 'Data', 'My algorithms', 'Marketplace', 'algohost', 'Skip to content']) assert.ok(passed.includes(name), `${name} in ${passed.join(' | ')}`);
    await page.keyboard.press('Enter');
    assert.equal(await page.evaluate('document.activeElement.id'), 'main');
  });
});

function raw(url: string, encoding: string): Promise<{ headers: http.IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { headers: { 'accept-encoding': encoding } }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ headers: res.headers, body: Buffer.concat(chunks) }));
        res.on('error', reject);
      })
      .on('error', reject);
  });
}

test('the console is served compressed and cacheable, with a strict Content-Security-Policy', async () => {
  const srv = await startServer();
  try {
    const index = await fetch(srv.url + '/', { headers: { 'accept-encoding': 'br, gzip' } });
    assert.equal(index.status, 200);
    assert.equal(index.headers.get('content-encoding'), 'br');
    assert.equal(index.headers.get('cache-control'), 'no-cache');
    assert.match(index.headers.get('content-security-policy')!, /script-src 'self'/);
    assert.doesNotMatch(index.headers.get('content-security-policy')!, /unsafe-inline/);
    const html = await index.text();
    const script = /src="(\/console\/main-[A-Z0-9]+\.js)"/.exec(html)![1]!;
    const css = /href="(\/console\/main-[A-Z0-9]+\.css)"/.exec(html)![1]!;
    for (const file of [script, css]) {
      // Bytes as they travel (fetch would decompress them).
      const br = await raw(srv.url + file, 'br');
      assert.equal(br.headers['content-encoding'], 'br');
      assert.equal(br.headers['cache-control'], 'public, max-age=31536000, immutable');
      assert.equal(br.headers.vary, 'Accept-Encoding');
      const gz = await raw(srv.url + file, 'gzip');
      assert.equal(gz.headers['content-encoding'], 'gzip');
      const plain = await raw(srv.url + file, 'identity');
      assert.equal(plain.headers['content-encoding'], undefined);
      assert.ok(zlib.brotliDecompressSync(br.body).equals(plain.body), 'br decodes to the file');
      assert.ok(zlib.gunzipSync(gz.body).equals(plain.body), 'gzip decodes to the file');
      assert.ok(plain.body.length > br.body.length * 2, `compressed ${plain.body.length} → ${br.body.length}`);
      const etag = plain.headers.etag as string;
      const again = await fetch(srv.url + file, { headers: { 'if-none-match': etag } });
      assert.equal(again.status, 304);
    }
    assert.equal((await fetch(srv.url + '/console/nope.js')).status, 404);
    // The build is kept for the next process (a restart reads it back instead of building).
    const cached = JSON.parse(fs.readFileSync(path.join(await cacheDirectory(), 'assets.json'), 'utf8')) as { name: string; etag: string }[];
    assert.equal(cached.find((c) => c.name === script.slice('/console/'.length))?.etag, (await raw(srv.url + script, 'identity')).headers.etag);
  } finally {
    await srv.close();
  }
});
