/**
 * The console's Events page in a real browser (Debian's Chromium, headless, driven by
 * playwright-core) against a real server on port 0 (ALGOHOST_CONNECTOR_NETWORK=any, so that a
 * webhook receiver on loopback may be an endpoint): a subscription made from the page to a real
 * receiver, its secret shown once (and the real one: the receiver's deliveries verify with it,
 * by the Standard Webhooks package), a test event delivered and listed with its attempt, a
 * redelivery with the same id, a rotation, disable, delete; a trigger on a real algorithm whose
 * run on an upload shows as succeeded, with its output in the Data page; the live tail showing
 * uploads as they happen, paused, filtered, and resuming after a dropped connection with
 * Last-Event-ID. The server's answers to bad forms are shown as they are.
 *
 * With CONSOLE_SCREENSHOTS=DIR, the pages are saved there (docs/console.md's pictures).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { Webhook } from 'standardwebhooks';
import { api, json, startServer, tempHome, type TestServer } from './helpers/server.ts';
import { release } from './helpers/algorithms.ts';

const CHROMIUM = '/usr/bin/chromium';
const skip = fs.existsSync(CHROMIUM) ? false : `${CHROMIUM} is not installed (apt-get install chromium; .ci/run does)`;
const SHOTS = process.env.CONSOLE_SCREENSHOTS;
const WAIT = { timeout: 30_000 };

let s: TestServer;
let browser: Browser;
let alice: ReturnType<typeof api>;
let aliceKey: string;
const contexts: BrowserContext[] = [];

async function shot(page: Page, name: string): Promise<void> {
  if (!SHOTS) return;
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
}

/** A browser of its own for one user, signed in through the form (as test/console.test.ts does). */
async function signedIn(username: string, password: string, viewport = { width: 1280, height: 900 }): Promise<Page> {
  const context = await browser.newContext({ viewport });
  contexts.push(context);
  const page = await context.newPage();
  page.on('dialog', (d) => void d.accept()); // confirm() of deletes and rotations
  await page.goto(s.url + '/');
  await page.getByLabel('User name').fill(username);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('navigation', { name: 'Sections' }).waitFor(WAIT);
  return page;
}

/** Opens the Events page from the navigation, and one of its tabs. */
async function openEvents(page: Page, tab: 'Webhooks' | 'Triggers' | 'Live tail'): Promise<void> {
  await page.getByRole('navigation', { name: 'Sections' }).getByRole('link', { name: 'Events' }).click();
  await page.getByRole('heading', { level: 1, name: 'Events' }).waitFor(WAIT);
  await page.getByRole('navigation', { name: 'Events' }).getByRole('link', { name: tab }).click();
}

interface Received {
  headers: Record<string, string>;
  body: string;
}

/** A webhook endpoint on 127.0.0.1 that records what it gets and answers 200. */
async function receiver() {
  const got: Received[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8').on('data', (c: string) => (body += c));
    req.on('end', () => {
      got.push({ headers: Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)])), body });
      res.writeHead(200).end('ok');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    got,
    async until(n: number, ms = 30_000): Promise<Received[]> {
      const end = Date.now() + ms;
      while (got.length < n) {
        assert.ok(Date.now() < end, `the receiver got ${got.length} of ${n} deliveries within ${ms} ms`);
        await new Promise((r) => setTimeout(r, 20));
      }
      return got;
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

let hook: Awaited<ReturnType<typeof receiver>>;

const postJson = (p: string, body: unknown) => alice(p, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
const put = async (uri: string, body: string) => {
  const r = await alice(`/v1/data/${uri}`, { method: 'PUT', body });
  assert.equal(r.status, 200, await r.clone().text());
};

/** A PUT of hosted data on a connection made for it (not fetch's pool). */
function putOnNewConnection(uri: string, body: string): Promise<number | undefined> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${s.url}/v1/data/${uri}`, { method: 'PUT', agent: false, headers: { authorization: `Simple ${aliceKey}` } }, (res) => {
      res.resume().on('end', () => resolve(res.statusCode));
    });
    req.on('error', reject).end(body);
  });
}

describe('the Events page in Chromium', { skip }, () => {
  before(async () => {
    s = await startServer({ home: tempHome('algohost-console-events-'), env: { ALGOHOST_CONNECTOR_NETWORK: 'any' } });
    aliceKey = await s.user('alice');
    alice = api(s.url, aliceKey);
    await s.services.sessions.setPassword('alice', 'alice password');
    await release(alice, 'alice', 'Upper', { 'src/index.js': 'exports.apply = (x) => String(x).toUpperCase();\n' }, { settings: { language: 'javascript' } });
    for (const name of ['inbox', 'out', 'tail']) assert.equal((await postJson('/v1/data/.my', { name })).status, 200);
    hook = await receiver();
    browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  });
  after(async () => {
    for (const c of contexts) await c.close().catch(() => undefined);
    await browser?.close();
    await hook?.close();
    await s?.close();
  });

  test('webhooks: a subscription made, its secret shown once; a test event delivered, redelivered with its id; rotate, disable, delete', async () => {
    const page = await signedIn('alice', 'alice password');
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: s.url });
    await openEvents(page, 'Webhooks');
    await page.getByText('No subscriptions yet.').waitFor(WAIT);

    // The server checks the form, and its message is shown.
    await page.getByLabel('Endpoint URL').fill('ftp://example.com/hook');
    await page.getByRole('button', { name: 'Create the subscription' }).click();
    const refused = page.getByRole('alert').filter({ hasText: /http:\/\/ or https:\/\// });
    await refused.waitFor(WAIT);
    assert.match((await refused.textContent())!, /\(invalid_subscription\)$/);

    await page.getByLabel('Endpoint URL').fill(hook.url);
    await page.getByLabel('Event types').fill('data.file.*');
    await page.getByLabel('Path', { exact: true }).fill('data://.my/inbox/**');
    await page.getByRole('button', { name: 'Create the subscription' }).click();
    const notice = page.locator('.notice');
    await notice.waitFor(WAIT);
    const secret = (await notice.locator('code.secret').textContent())!;
    assert.match(secret, /^whsec_[A-Za-z0-9+/]{43}=$/);
    assert.match((await notice.textContent())!, /Copy it now: it is shown this once and cannot be read again\./);
    assert.equal(await refused.count(), 0, 'the earlier error is gone');
    await notice.getByRole('button', { name: 'Copy the secret' }).click();
    await notice.getByRole('button', { name: 'Copied', exact: true }).waitFor(WAIT);
    assert.equal(await page.evaluate('navigator.clipboard.readText()'), secret);
    const row = page.getByRole('row', { name: new RegExp(hook.url.replace(/[.]/g, '\\.')) });
    await row.waitFor(WAIT);
    assert.match((await row.textContent())!, /data\.file\.\* under data:\/\/\.my\/inbox\/\*\*/);
    await shot(page, 'events-webhooks');
    await notice.getByRole('button', { name: 'I have copied it' }).click();
    await notice.waitFor({ state: 'detached', timeout: 30_000 });
    await page.reload();
    await row.waitFor(WAIT);
    assert.ok(!(await page.content()).includes(secret), 'the secret is never shown again');
    const [made] = (await json(await alice('/v1/users/alice/subscriptions'))).results as { id: string; url: string; enabled: boolean }[];
    assert.equal(made?.url, hook.url);

    // Its deliveries: a test event, delivered to the receiver, signed with the secret shown.
    await page.getByRole('link', { name: `Deliveries to ${hook.url}` }).click();
    await page.getByRole('heading', { level: 2, name: `Subscription to ${hook.url}` }).waitFor(WAIT);
    await page.getByText('No deliveries yet.').waitFor(WAIT);
    await page.getByRole('button', { name: 'Send a test event' }).click();
    const [first] = await hook.until(1);
    const verified = new Webhook(secret).verify(first!.body, first!.headers) as { type: string };
    assert.equal(verified.type, 'webhook.test');
    const delivery = page.getByRole('row', { name: /webhook\.test/ });
    await delivery.filter({ hasText: 'delivered' }).waitFor(WAIT);
    const attempts = delivery.locator('ol.attempts li');
    assert.equal(await attempts.count(), 1);
    assert.match((await attempts.first().textContent())!, /^Attempt 1: .+ · 200 · [\d,]+ ms$/);
    await shot(page, 'events-deliveries');

    // Redeliver: sent again with the same webhook-id, a second attempt listed.
    await delivery.getByRole('button', { name: /^Redeliver webhook\.test msg_/ }).click();
    const [, again] = await hook.until(2);
    assert.equal(again!.headers['webhook-id'], first!.headers['webhook-id']);
    await attempts.nth(1).waitFor(WAIT);
    await delivery.filter({ hasText: 'delivered' }).waitFor(WAIT);
    assert.match((await attempts.nth(1).textContent())!, /^Attempt 2: .+ · 200 · /);

    // Rotate: a new secret shown once, and the next delivery verifies with it.
    await page.getByRole('button', { name: 'Rotate the secret' }).click();
    const rotated = page.locator('.notice code.secret');
    await rotated.waitFor(WAIT);
    const secret2 = (await rotated.textContent())!;
    assert.match(secret2, /^whsec_/);
    assert.notEqual(secret2, secret);
    assert.match((await page.locator('.notice').textContent())!, /The old secret goes on signing beside it for 24 hours/);
    await page.getByRole('button', { name: 'Send a test event' }).click();
    const [, , third] = await hook.until(3);
    assert.equal((new Webhook(secret2).verify(third!.body, third!.headers) as { type: string }).type, 'webhook.test');
    await page.getByRole('row', { name: /webhook\.test/ }).nth(1).waitFor(WAIT); // two deliveries listed

    // Disable, enable, delete: the API says so each time.
    const state = page.locator('.facts dd').filter({ hasText: /^(Enabled|Disabled)/ });
    await page.getByRole('button', { name: 'Disable', exact: true }).click();
    await state.filter({ hasText: /^Disabled$/ }).waitFor(WAIT);
    assert.equal((await json(await alice(`/v1/users/alice/subscriptions/${made!.id}`))).enabled, false);
    await page.getByRole('button', { name: 'Enable', exact: true }).click();
    await state.filter({ hasText: /^Enabled$/ }).waitFor(WAIT);
    assert.equal((await json(await alice(`/v1/users/alice/subscriptions/${made!.id}`))).enabled, true);
    await page.getByRole('button', { name: 'Delete', exact: true }).click();
    await page.getByText('No subscriptions yet.').waitFor(WAIT);
    assert.equal((await alice(`/v1/users/alice/subscriptions/${made!.id}`)).status, 404);
  });

  test('triggers: one made from the page runs its algorithm on an upload; the run shows as succeeded, its output in Data', async () => {
    // A key to choose from (the trigger below runs as the session's user instead).
    assert.equal((await postJson('/v1/users/alice/keys', { name: 'runner', permissions: { allow_algo: true, allow_data: true, allow_data_write: true } })).status, 201);
    const page = await signedIn('alice', 'alice password');
    await openEvents(page, 'Triggers');
    await page.getByText('No triggers yet.').waitFor(WAIT);
    const keyOptions = await page.getByLabel('Runs with the permissions of').locator('option').allTextContents();
    assert.equal(keyOptions[0], 'None: your own authority (this console session)');
    assert.ok(keyOptions.some((o) => /^the key runner \(sim.+…\)$/.test(o)), keyOptions.join(' | '));

    // The server's message for a bad algorithm; the page's own for a JSON template that is not JSON.
    await page.getByLabel('Algorithm').fill('not an algorithm');
    await page.getByRole('button', { name: 'Create the trigger' }).click();
    const refused = page.getByRole('alert').filter({ hasText: /is not "owner\/name" or "owner\/name\/version"/ });
    await refused.waitFor(WAIT);
    assert.match((await refused.textContent())!, /\(invalid_trigger\)$/);
    await page.getByLabel('JSON (an object or a list)').check();
    await page.getByRole('button', { name: 'Create the trigger' }).click();
    await page.getByRole('alert').filter({ hasText: /the template is not JSON/ }).waitFor(WAIT);
    await page.getByLabel('Text', { exact: true }).check();

    await page.getByLabel('Event types').fill('data.file.created');
    await page.getByLabel('Path', { exact: true }).fill('data://.my/inbox/**');
    await page.getByLabel('Algorithm').fill('alice/Upper');
    assert.equal(await page.getByLabel('Input template').inputValue(), '{{subject}}');
    await page.getByLabel('Output path').fill('data://.my/out/{{stem}}.upper');
    await page.getByRole('button', { name: 'Create the trigger' }).click();
    await page.getByRole('status').filter({ hasText: /^Made the trigger trg_[0-9a-f]{24}/ }).waitFor(WAIT);
    const row = page.getByRole('row', { name: /alice\/Upper/ });
    await row.waitFor(WAIT);
    assert.match((await row.textContent())!, /data\.file\.created under data:\/\/\.my\/inbox\/\*\*/);
    assert.match((await row.textContent())!, /you: your own authority/);
    const [made] = (await json(await alice('/v1/users/alice/triggers'))).results as { id: string; key: string | null; output: string }[];
    assert.equal(made?.key, null, 'the session\'s own authority');
    assert.equal(made?.output, 'data://.my/out/{{stem}}.upper');

    // Its runs: an upload through the API fires it; the page shows the run as it ends.
    await row.getByRole('link', { name: 'alice/Upper', exact: true }).click();
    await page.getByRole('heading', { level: 2, name: 'Trigger running alice/Upper' }).waitFor(WAIT);
    await page.getByText('No runs yet.').waitFor(WAIT);
    await put('.my/inbox/hello.txt', 'hello');
    const run = page.getByRole('row', { name: /data:\/\/alice\/inbox\/hello\.txt/ });
    await run.filter({ hasText: 'succeeded' }).waitFor({ timeout: 120_000 });
    const cells = await run.getByRole('cell').allTextContents();
    assert.equal(cells[1], '1', 'depth');
    assert.match(cells[2]!, /^[1-3]$/, 'attempts');
    // The path written: as the template had it (.my) or canonical (the user's name).
    assert.match(cells[3]!, /^data:\/\/(\.my|alice)\/out\/hello\.upper open its folder$/);
    assert.match(cells[4]!, /^req-[0-9a-f]{24}$/);
    await shot(page, 'events-trigger');
    await run.getByRole('link', { name: /^Open the folder of data:\/\/(\.my|alice)\/out\/hello\.upper in Data$/ }).click();
    await page.getByRole('heading', { level: 1, name: /^data:\/\/(\.my|alice)\/out$/ }).waitFor(WAIT);
    await page.getByRole('row', { name: /hello\.upper/ }).waitFor(WAIT);
    assert.equal(await (await alice('/v1/data/.my/out/hello.upper')).text(), 'DATA://ALICE/INBOX/HELLO.TXT');

    // Disable and delete it from the list.
    await openEvents(page, 'Triggers');
    await page.getByRole('button', { name: `Disable alice/Upper (${made!.id})` }).click();
    await page.getByRole('row', { name: /alice\/Upper/ }).filter({ hasText: 'Disabled' }).waitFor(WAIT);
    assert.equal((await json(await alice(`/v1/users/alice/triggers/${made!.id}`))).enabled, false);
    await page.getByRole('button', { name: `Delete alice/Upper (${made!.id})` }).click();
    await page.getByText('No triggers yet.').waitFor(WAIT);
    assert.equal((await alice(`/v1/users/alice/triggers/${made!.id}`)).status, 404);
  });

  test('the live tail: uploads show as they happen, newest on top; pause, resume, filter; after a dropped connection it resumes with Last-Event-ID', async () => {
    const page = await signedIn('alice', 'alice password');
    const stream = (u: URL) => u.pathname === '/v1/users/alice/events';
    const opened = page.waitForResponse((r) => stream(new URL(r.url())), WAIT);
    await openEvents(page, 'Live tail');
    assert.equal((await opened).status(), 200);
    const status = page.getByRole('status').filter({ hasText: /^(Connecting|Live|Paused|Stopped|The connection)/ });
    await status.filter({ hasText: /^Live/ }).waitFor(WAIT);
    const items = page.locator('ol.tail > li');
    const item = (subject: string) => items.filter({ hasText: subject });

    await put('.my/tail/one.txt', 'one!');
    await item('data://alice/tail/one.txt').waitFor(WAIT);
    assert.match((await items.first().locator('summary').textContent())!, /data\.file\.created data:\/\/alice\/tail\/one\.txt$/);
    await items.first().locator('summary').click();
    const data = JSON.parse((await items.first().locator('pre').textContent())!) as { size: number; by: string };
    assert.equal(data.size, 4);
    assert.equal(data.by, 'alice');
    await put('.my/tail/two.txt', 'two');
    await item('data://alice/tail/two.txt').waitFor(WAIT);
    assert.match((await items.first().textContent())!, /two\.txt/, 'newest on top');
    await shot(page, 'events-tail');

    // Paused: events are held, not shown, until resumed.
    await page.getByRole('button', { name: 'Pause' }).click();
    await put('.my/tail/held.txt', 'x');
    await status.filter({ hasText: 'Paused: 1 new event held.' }).waitFor(WAIT);
    assert.equal(await item('held.txt').count(), 0);
    await page.getByRole('button', { name: 'Resume' }).click();
    await item('data://alice/tail/held.txt').waitFor(WAIT);
    assert.match((await items.first().textContent())!, /held\.txt/);

    if (!s.cluster) {
      // The server drops every connection (as a restart or a proxy would): the page reconnects
      // with the last event's id, and an upload made meanwhile arrives once.
      const heldItem = item('data://alice/tail/held.txt');
      await heldItem.locator('summary').click();
      const lastId = (await heldItem.locator('details p code').textContent())!;
      assert.match(lastId, /^evt_[0-9a-f]{24}$/);
      const resumed = page.waitForRequest((r) => stream(new URL(r.url())) && r.headers()['last-event-id'] === lastId, WAIT);
      s.app.server.closeAllConnections();
      // On a connection of its own: this process's pooled ones were just closed too.
      assert.equal(await putOnNewConnection('.my/tail/while-away.txt', 'x'), 200);
      await resumed;
      await item('data://alice/tail/while-away.txt').waitFor(WAIT);
      await status.filter({ hasText: /^Live/ }).waitFor(WAIT);
      assert.equal(await item('data://alice/tail/while-away.txt').count(), 1);
      assert.equal(await item('data://alice/tail/held.txt').count(), 1, 'nothing twice');
    }

    // A filter: only directories now; a file uploaded before the directory is not shown.
    await page.getByLabel('Event types').fill('data.directory.*');
    const filtered = page.waitForResponse((r) => stream(new URL(r.url())) && new URL(r.url()).searchParams.get('types') === 'data.directory.*', WAIT);
    await page.getByRole('button', { name: 'Apply the filter' }).click();
    assert.equal((await filtered).status(), 200);
    await status.filter({ hasText: /^Live/ }).waitFor(WAIT);
    await page.getByText('No events yet.').waitFor(WAIT);
    await put('.my/tail/ignored.txt', 'x');
    assert.equal((await postJson('/v1/data/.my/tail', { name: 'sub' })).status, 200);
    await item('data://alice/tail/sub').waitFor(WAIT);
    assert.equal(await item('ignored.txt').count(), 0, 'the file event came first and was filtered out');
    assert.equal(await items.count(), 1);

    // Clear empties the list; a filter the server refuses is shown, and the tail stops.
    await page.getByRole('button', { name: 'Clear' }).click();
    await page.getByText('No events yet.').waitFor(WAIT);
    await page.getByLabel('Event types').fill('no.such');
    await page.getByRole('button', { name: 'Apply the filter' }).click();
    await page.getByRole('alert').filter({ hasText: /matches no event type/ }).waitFor(WAIT);
    await status.filter({ hasText: 'Stopped.' }).waitFor(WAIT);
  });

  test('on a phone-sized screen the Events pages fit, lists and details', async () => {
    const sub = await json(await postJson('/v1/users/alice/subscriptions', { url: `${hook.url}/with/a/rather/long/path/to/see/it/wrap`, types: ['data.file.created', 'data.file.deleted'], path: 'data://.my/inbox/**' }));
    const trg = await json(await postJson('/v1/users/alice/triggers', { types: ['data.file.created'], path: 'data://.my/inbox/**', algorithm: 'alice/Upper', output: 'data://.my/out/{{stem}}.phone' }));
    await alice(`/v1/users/alice/subscriptions/${sub.id as string}/test`, { method: 'POST' });
    await put('.my/inbox/phone.txt', 'x');
    const page = await signedIn('alice', 'alice password', { width: 390, height: 844 });
    const pages: [string, string][] = [
      ['webhooks', 'Add a subscription'],
      [`webhooks/${sub.id as string}`, 'Deliveries'],
      ['triggers', 'Add a trigger'],
      [`triggers/${trg.id as string}`, 'Runs'],
      ['tail', ''],
    ];
    for (const [where, heading] of pages) {
      await page.goto(`${s.url}/#/events/${where}`);
      if (heading) await page.getByRole('heading', { level: 2, name: heading, exact: true }).waitFor(WAIT);
      else await page.getByRole('status').filter({ hasText: /^Live/ }).waitFor(WAIT);
      await page.getByText(/^Loading/).first().waitFor({ state: 'detached', timeout: 30_000 });
      if (where.startsWith('webhooks/')) await page.getByRole('row', { name: /webhook\.test/ }).waitFor(WAIT);
      if (where.startsWith('triggers/')) await page.getByRole('row', { name: /phone\.txt/ }).waitFor(WAIT);
      if (where.startsWith('triggers/')) await shot(page, 'events-phone');
      const overflow = (await page.evaluate('document.documentElement.scrollWidth - document.documentElement.clientWidth')) as number;
      assert.ok(overflow <= 0, `#/events/${where}: no sideways scrolling (${overflow}px)`);
    }
    await alice(`/v1/users/alice/subscriptions/${sub.id as string}`, { method: 'DELETE' });
    await alice(`/v1/users/alice/triggers/${trg.id as string}`, { method: 'DELETE' });
  });
});
