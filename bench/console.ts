/**
 * Web console benchmark (`npm run bench:console`): issue 15's performance target, "the first
 * page is interactive within 1 s on this machine (a Lighthouse-style measurement in a bench
 * script), and the assets are served compressed and cacheable", and its data browser's
 * "tens of thousands of entries stay responsive", measured in Debian's Chromium (headless,
 * driven by playwright-core) against a real `algohost serve` process on a fresh home.
 *
 *   1. the sign-in page, cold cache (a new browser context each time) and warm (the same
 *      context, reloaded): navigation start → interactive, Lighthouse-style: first contentful
 *      paint happened, the user-name input is in the page, and then a quiet window (no long
 *      task over 50 ms, at most 2 requests in flight) of QUIET_MS; interactive is the end of
 *      the last long task before that window (or the input's appearance). Also FCP,
 *      DOMContentLoaded, load, and the first keystroke typed into the input as soon as it
 *      appeared. Against a baseline measured the same way in the same run: a bare node:http
 *      server in this process serving a static page whose one small script renders a form.
 *   2. signed in: submitting the sign-in form → the first algorithm card painted.
 *   3. transfer: bytes over the wire for the first page (CDP Network.loadingFinished
 *      encodedDataLength) against the decoded sizes, each response's encoding and caching
 *      headers, and what a warm reload fetched over the network.
 *   4. the data browser: a collection of FILES files (PUT over the API), opened in the console
 *      (click → first page of rows painted), every "Next page" to the end (click → the next
 *      page painted; the walk stops after one over WALK_CAP_MS), BACK_STEPS "Previous page"
 *      (pages already fetched), typing into the page's "New folder" box on the first page and
 *      after the walk, and the main thread's longest tasks throughout.
 *
 * In-page times come from an init script installed on the context (so it sees the document
 * from its start): PerformanceObservers for paint, longtask, long-animation-frame and event
 * timing, a MutationObserver for the elements waited on, and capture listeners for clicks and
 * keys. "Painted" is the first task after the next animation frame. Results go to stdout and to
 * docs/performance.md between the bench:console markers. BENCH_QUICK=1 shortens every phase
 * (for checking the script, not for numbers).
 */
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import crypto from 'node:crypto';
import { chromium, type Browser, type BrowserContext, type CDPSession, type Page } from 'playwright-core';
import { runCli, startServerProcess, type ServerProcess } from '../test/helpers/process.ts';
import { median, percentile } from './load.ts';
import { codeVersion, commandLine, createBench, docMarkers, fmt, machineBase, noiseMeter, pct, perRep, QUICK, runLines, sleep, table, verdict, waitForQuiet, writeDocBlock, type Row } from './common.ts';
import { childrenOf, descendants, treeCpuAll } from './procTree.ts';

const CHROMIUM = '/usr/bin/chromium';
const bench = createBench('console');
/** Page loads per side (ours, baseline) and cache state. */
const REPS = QUICK ? 3 : 15;
/** The quiet window after which a page counts as interactive (Lighthouse: 5 s). */
const QUIET_MS = QUICK ? 1000 : 5000;
const FILES = QUICK ? 2000 : 20_000;
const DATA_RUNS = QUICK ? 1 : 3;
const PUT_CONCURRENCY = 32;
const TARGET_MS = 1000;
const LONG_TASK_MS = 50;
const SLUGGISH_MS = 200;
/**
 * The walk through the pages stops after a "Next page" that took longer than this (click →
 * painted). In the first runs the console grew one table by a page per "Load more", and one at
 * 13,000 rows took a minute; a console that stays fast walks every page.
 */
const WALK_CAP_MS = 15_000;
/** "Previous page" clicks after the walk. */
const BACK_STEPS = 3;
const VIEWPORT = { width: 1280, height: 900 };
const WAIT = { timeout: 60_000 };
const PASSWORD = 'bench password';

// ---- what runs in the page ------------------------------------------------------------------

/**
 * Installed with context.addInitScript: runs in every document before its own scripts. Plain
 * JavaScript in a string (this project's TypeScript has no DOM types).
 */
const INIT_SCRIPT = `(() => {
  if (window.__bench) return;
  const r = (window.__bench = { longtasks: [], loafs: [], events: [], paints: {}, seen: {}, clicks: [], typed: [], errors: [], waiters: [] });
  const observe = (type, each, extra) => {
    try {
      new PerformanceObserver((list) => list.getEntries().forEach(each)).observe(Object.assign({ type, buffered: true }, extra || {}));
    } catch (e) {
      r.errors.push(type + ': ' + e);
    }
  };
  observe('longtask', (e) => r.longtasks.push([e.startTime, e.duration]));
  observe('paint', (e) => (r.paints[e.name] = e.startTime));
  observe('long-animation-frame', (e) => {
    const script = e.scripts.reduce((n, s) => n + s.duration, 0);
    r.loafs.push([e.startTime, e.duration, e.blockingDuration, script, e.styleAndLayoutStart ? e.startTime + e.duration - e.styleAndLayoutStart : 0]);
  });
  observe('event', (e) => r.events.push([e.name, e.startTime, e.duration, e.processingStart - e.startTime, e.processingEnd - e.processingStart]), { durationThreshold: 16 });
  // The first task after the next frame was produced: what was in the DOM is on screen.
  const afterFrame = (cb) => requestAnimationFrame(() => {
    const ch = new MessageChannel();
    ch.port1.onmessage = () => cb(performance.now());
    ch.port2.postMessage(0);
  });
  r.afterFrame = afterFrame;
  const watched = { input: 'input[name=username]', card: 'li.card' };
  const check = () => {
    for (const k in watched) {
      if (r.seen[k] === undefined && document.querySelector(watched[k])) {
        r.seen[k] = performance.now();
        afterFrame((t) => (r.seen[k + 'Painted'] = t));
      }
    }
    for (const w of r.waiters.slice()) {
      if (w.test()) {
        r.waiters.splice(r.waiters.indexOf(w), 1);
        const done = { at: performance.now() };
        w.result.done = done;
        afterFrame((t) => (done.painted = t));
      }
    }
  };
  /** Arms a waiter: result.done = { at, painted } once test() holds after a DOM change. */
  r.arm = (name, test) => {
    const result = {};
    r[name] = result;
    r.waiters.push({ test, result });
    check();
  };
  new MutationObserver(check).observe(document, { childList: true, subtree: true, characterData: true });
  addEventListener('click', (e) => r.clicks.push(e.timeStamp), true);
  // After the app's own handler (and the re-render it queued as a microtask): typing worked.
  addEventListener('input', (e) => {
    const handled = performance.now();
    const target = e.target;
    setTimeout(() => {
      const entry = { key: e.timeStamp, handled, value: target && target.value };
      r.typed.push(entry);
      afterFrame((t) => (entry.painted = t));
    }, 0);
  });
})();`;

/** What the init script recorded, with the page's resource timing and its clock now. */
interface Recorded {
  now: number;
  longtasks: [number, number][];
  /** start, duration, blocking duration, script time, style and layout time. */
  loafs: [number, number, number, number, number][];
  /** name, start, duration, input delay, processing. */
  events: [string, number, number, number, number][];
  paints: Record<string, number>;
  seen: Record<string, number>;
  clicks: number[];
  typed: { key: number; handled: number; value?: string; painted?: number }[];
  errors: string[];
  nav: { responseStart: number; dcl: number; load: number } | null;
  resources: { name: string; start: number; end: number; transfer: number; encoded: number; decoded: number }[];
  done?: { at: number; painted?: number };
}

const READ = `(() => {
  const r = window.__bench;
  const n = performance.getEntriesByType('navigation')[0];
  return {
    now: performance.now(),
    longtasks: r.longtasks, loafs: r.loafs, events: r.events, paints: r.paints, seen: r.seen, clicks: r.clicks,
    typed: r.typed.map((t) => Object.assign({}, t)), errors: r.errors,
    nav: n ? { responseStart: n.responseStart, dcl: n.domContentLoadedEventEnd, load: n.loadEventEnd } : null,
    resources: performance.getEntriesByType('resource').map((e) => ({ name: e.name, start: e.startTime, end: e.responseEnd, transfer: e.transferSize, encoded: e.encodedBodySize, decoded: e.decodedBodySize })),
    done: r.wait && r.wait.done ? Object.assign({}, r.wait.done) : undefined,
  };
})()`;

const read = async (page: Page) => (await page.evaluate(READ)) as Recorded;

// ---- the Lighthouse-style "interactive" ------------------------------------------------------

/**
 * Lighthouse's Time to Interactive, starting where our page can first be used: from
 * max(FCP, the input's appearance), find the first window of `quietMs` with no long task and at
 * most 2 requests in flight; interactive is the end of the last long task before that window,
 * or the start point when none. `observedTo` says whether the window was seen whole.
 */
function interactive(r: Recorded, quietMs: number): { at: number; windowStart: number; complete: boolean } {
  const fcp = r.paints['first-contentful-paint'] ?? NaN;
  const start = Math.max(fcp, r.seen.input ?? NaN);
  const tasks = [...r.longtasks].sort((a, b) => a[0] - b[0]);
  const requests = [...r.resources.map((x) => [x.start, x.end] as const)];
  // Requests in flight at time t (the document itself is done by then).
  const inflight = (t: number) => requests.filter(([a, b]) => a <= t && t < b).length;
  const busyNetworkUntil = (from: number, to: number): number | undefined => {
    // The first moment in [from, to) with more than 2 in flight, and when it drops to 2.
    const points = [from, ...requests.flatMap(([a, b]) => [a, b])].filter((t) => t >= from && t < to).sort((a, b) => a - b);
    for (const t of points) {
      if (inflight(t) > 2) {
        const ends = requests.map(([, b]) => b).filter((b) => b > t).sort((a, b) => a - b);
        for (const e of ends) if (inflight(e) <= 2) return e;
        return Infinity;
      }
    }
    return undefined;
  };
  let c = start;
  for (let guard = 0; guard < 1000 && Number.isFinite(c); guard++) {
    const task = tasks.find(([s, d]) => s + d > c && s < c + quietMs);
    if (task) {
      c = task[0] + task[1];
      continue;
    }
    const net = busyNetworkUntil(c, c + quietMs);
    if (net !== undefined) {
      c = net;
      continue;
    }
    break;
  }
  const before = tasks.filter(([s, d]) => s + d <= c).map(([s, d]) => s + d);
  const at = Math.max(start, ...before);
  return { at, windowStart: c, complete: r.now >= c + quietMs };
}

// ---- the browser's network, from CDP ----------------------------------------------------------

interface Transfer {
  url: string;
  method: string;
  status?: number;
  /** The status on the wire (a revalidation shows 304 here, where the response is the cached 200). */
  rawStatus?: number;
  encoding?: string;
  cacheControl?: string;
  fromDiskCache?: boolean;
  fromMemoryCache?: boolean;
  /** Bytes received over the network, headers included (Network.loadingFinished). */
  wire?: number;
  /** Body bytes after decoding (Network.dataReceived). */
  decoded: number;
  failed?: string;
}

/** Every request of the page from now on, by CDP id; `reset()` starts a new list. */
async function watchNetwork(cdp: CDPSession): Promise<{ list: () => Transfer[]; reset: () => void }> {
  let byId = new Map<string, Transfer>();
  const rawStatus = new Map<string, number>();
  await cdp.send('Network.enable');
  await cdp.send('Network.setCacheDisabled', { cacheDisabled: false });
  cdp.on('Network.requestWillBeSent', (e) => {
    byId.set(e.requestId, { url: e.request.url, method: e.request.method, decoded: 0, rawStatus: rawStatus.get(e.requestId) });
  });
  cdp.on('Network.responseReceivedExtraInfo', (e) => {
    rawStatus.set(e.requestId, e.statusCode);
    const t = byId.get(e.requestId);
    if (t) t.rawStatus = e.statusCode;
  });
  cdp.on('Network.requestServedFromCache', (e) => {
    const t = byId.get(e.requestId);
    if (t) t.fromMemoryCache = true;
  });
  cdp.on('Network.responseReceived', (e) => {
    const t = byId.get(e.requestId);
    if (!t) return;
    const h = Object.fromEntries(Object.entries(e.response.headers).map(([k, v]) => [k.toLowerCase(), String(v)]));
    t.status = e.response.status;
    t.encoding = h['content-encoding'];
    t.cacheControl = h['cache-control'];
    t.fromDiskCache = e.response.fromDiskCache;
  });
  cdp.on('Network.dataReceived', (e) => {
    const t = byId.get(e.requestId);
    if (t) t.decoded += e.dataLength;
  });
  cdp.on('Network.loadingFinished', (e) => {
    const t = byId.get(e.requestId);
    if (t) t.wire = e.encodedDataLength;
  });
  cdp.on('Network.loadingFailed', (e) => {
    const t = byId.get(e.requestId);
    if (t) t.failed = e.errorText;
  });
  return { list: () => [...byId.values()], reset: () => (byId = new Map()) };
}

const fromCache = (t: Transfer) => t.fromMemoryCache === true || t.fromDiskCache === true;
const pathOf = (url: string) => {
  const u = new URL(url);
  return u.pathname + u.search;
};

// ---- the baseline: a static page whose one script renders a form ------------------------------

const BASE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>baseline</title>
<script type="module" src="/app.js"></script>
</head>
<body>
<div id="app"><p>Loading…</p></div>
</body>
</html>
`;
const BASE_JS = `const form = document.createElement('form');
form.innerHTML = '<label>User name <input name="username" autocomplete="username" required></label> <label>Password <input name="password" type="password" required></label> <button type="submit">Sign in</button>';
form.addEventListener('submit', (e) => e.preventDefault());
document.getElementById('app').replaceChildren(form);
`;

async function startBaseline(): Promise<{ url: string; close: () => Promise<void> }> {
  const etag = (s: string) => `"${crypto.createHash('sha256').update(s).digest('base64url').slice(0, 22)}"`;
  const files: Record<string, { body: string; type: string; cache: string; etag: string }> = {
    '/': { body: BASE_HTML, type: 'text/html; charset=utf-8', cache: 'no-cache', etag: etag(BASE_HTML) },
    '/app.js': { body: BASE_JS, type: 'text/javascript; charset=utf-8', cache: 'public, max-age=31536000, immutable', etag: etag(BASE_JS) },
  };
  const server = http.createServer((req, res) => {
    const f = files[(req.url ?? '/').split('?')[0]!];
    if (!f) {
      res.writeHead(404).end();
      return;
    }
    const headers = { 'content-type': f.type, 'cache-control': f.cache, etag: f.etag };
    if (req.headers['if-none-match'] === f.etag) res.writeHead(304, headers).end();
    else res.writeHead(200, headers).end(f.body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

// ---- one page load ----------------------------------------------------------------------------

interface Load {
  interactive: number;
  fcp: number;
  input: number;
  inputPainted: number;
  dcl: number;
  load: number;
  ttfb: number;
  /** The first keystroke (typed as soon as the input appeared) handled by the page. */
  keyHandled: number;
  /** Its delay: from the key event's time to the handler. */
  keyDelay: number;
  longBefore: number;
  longestBefore: number;
  /** The page's script: its response end (ours: the bundle; the baseline: app.js). */
  scriptEnd: number;
  /** Ours: GET /v1/session, the check for a session before the form renders (NaN for the baseline). */
  sessionStart: number;
  sessionEnd: number;
  transfers: Transfer[];
}

/** Waits until the page is interactive by the definition above (the quiet window seen whole). */
async function loadInteractive(page: Page, navigate: () => Promise<unknown>, net: { list: () => Transfer[]; reset: () => void }): Promise<Load> {
  net.reset();
  await navigate();
  const input = page.locator('input[name=username]');
  await input.waitFor(WAIT);
  await input.pressSequentially('b');
  const deadline = Date.now() + 60_000;
  for (;;) {
    const r = await read(page);
    const i = interactive(r, QUIET_MS);
    if (i.complete && r.typed.length > 0 && r.nav && r.nav.load > 0) {
      const key = r.typed[0]!;
      if (key.value !== 'b') throw new Error(`typing into the user-name input gave ${JSON.stringify(key.value)}`);
      const before = r.longtasks.filter(([s, d]) => s + d <= i.at);
      const script = r.resources.find((x) => /\.js$/.test(pathOf(x.name)));
      const session = r.resources.find((x) => pathOf(x.name) === '/v1/session');
      return {
        interactive: i.at,
        fcp: r.paints['first-contentful-paint'] ?? NaN,
        input: r.seen.input!,
        inputPainted: r.seen.inputPainted ?? NaN,
        dcl: r.nav.dcl,
        load: r.nav.load,
        ttfb: r.nav.responseStart,
        keyHandled: key.handled,
        keyDelay: key.handled - key.key,
        longBefore: before.length,
        longestBefore: Math.max(0, ...before.map(([, d]) => d)),
        scriptEnd: script?.end ?? NaN,
        sessionStart: session?.start ?? NaN,
        sessionEnd: session?.end ?? NaN,
        transfers: net.list(),
      };
    }
    if (Date.now() > deadline) throw new Error(`no quiet window of ${QUIET_MS} ms within 60 s (long tasks: ${JSON.stringify(r.longtasks)})`);
    await sleep(Math.max(100, Math.min(1000, i.windowStart + QUIET_MS - r.now + 20)));
  }
}

interface SignInResult {
  /** Click on "Sign in" → the first algorithm card painted. */
  toCard: number;
  /** POST /v1/session as the page saw it (request start → response end). */
  session: number;
  /** GET /v1/algorithms, the marketplace's listing. */
  list: number;
  longest: number;
}

async function signIn(page: Page, username: string): Promise<SignInResult> {
  await page.locator('input[name=username]').fill(username);
  await page.locator('input[name=password]').fill(PASSWORD);
  const clicked = (await read(page)).clicks.length;
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.locator('li.card').first().waitFor(WAIT);
  for (let i = 0; i < 100; i++) {
    const r = await read(page);
    if (r.seen.cardPainted !== undefined) {
      const click = r.clicks[clicked]!;
      const after = r.resources.filter((x) => x.start >= click);
      const session = after.find((x) => pathOf(x.name) === '/v1/session');
      const list = after.find((x) => pathOf(x.name).startsWith('/v1/algorithms?') || pathOf(x.name) === '/v1/algorithms');
      await sleep(300);
      const r2 = await read(page);
      return {
        toCard: r.seen.cardPainted - click,
        session: session ? session.end - session.start : NaN,
        list: list ? list.end - list.start : NaN,
        longest: Math.max(0, ...r2.longtasks.filter(([s]) => s >= click).map(([, d]) => d)),
      };
    }
    await sleep(50);
  }
  throw new Error('the first algorithm card was never painted');
}

// ---- the data browser -------------------------------------------------------------------------

interface Step {
  /** Click (or key) → painted. */
  ms: number;
  rows: number;
  /** Longest long task from the click to 300 ms after the paint. */
  longest: number;
  /** Long animation frames in that span: the longest one's script and style/layout time. */
  loafScript: number;
  loafLayout: number;
  loafLongest: number;
  /** Longest Event Timing entry (input delay + handlers + next paint) in that span. */
  event: number;
  /** The listing request (start → response end), when there was one. */
  request: number;
}

/** Whether [start, start + duration] meets [from, to]. */
const overlaps = (start: number, duration: number, from: number, to: number) => start <= to && start + duration >= from;

const ROWS = `document.querySelectorAll('table.listing tbody tr').length`;
/**
 * The page of the listing shown, read off the console's status line ("Page 3: entries
 * 2,001–3,000; more follow"), with the rows drawn so far; null on a listing of one page.
 */
const PAGE = `(() => {
  const t = [...document.querySelectorAll('[role=status]')].map((e) => e.textContent || '').find((x) => /^Page \\d+:/.test(x));
  const m = t && /^Page (\\d+): entr(?:y|ies) ([\\d,]+)(?:–([\\d,]+))?/.exec(t);
  if (!m) return null;
  const n = (x) => Number(x.replace(/,/g, ''));
  return { page: Number(m[1]), from: n(m[2]), to: m[3] ? n(m[3]) : n(m[2]), rows: ${ROWS}, last: !/more follow/.test(t) };
})()`;
/** An in-page test: page `n` is shown, with every one of its rows drawn. */
const pageDrawn = (n: number) => `((p) => !!p && p.page === ${n} && p.rows === p.to - p.from + 1)(${PAGE})`;
interface Shown {
  page: number;
  from: number;
  to: number;
  rows: number;
  last: boolean;
}

/** Clicks `click`, waits until `test` (an in-page expression) holds and is painted; the step's figures. */
async function step(page: Page, test: string, click: () => Promise<void>, listingPath?: string): Promise<Step> {
  const before = await read(page);
  await page.evaluate(`window.__bench.arm('wait', () => (${test}))`);
  await click();
  const deadline = Date.now() + 300_000;
  for (;;) {
    const r = await read(page);
    if (r.done?.painted !== undefined) {
      const t0 = r.clicks[before.clicks.length] ?? NaN;
      await sleep(300);
      const r2 = await read(page);
      const end = r.done.painted + 300;
      const within = <T extends [number, number, ...unknown[]]>(xs: T[]) => xs.filter((x) => overlaps(x[0], x[1], t0, end));
      const worst = within(r2.loafs).sort((a, b) => b[1] - a[1])[0];
      const req = listingPath ? r2.resources.filter((x) => x.start >= t0 && pathOf(x.name).startsWith(listingPath)).pop() : undefined;
      return {
        ms: r.done.painted - t0,
        rows: (await page.evaluate(ROWS)) as number,
        longest: Math.max(0, ...within(r2.longtasks).map(([, d]) => d)),
        loafScript: worst?.[3] ?? 0,
        loafLayout: worst?.[4] ?? 0,
        loafLongest: worst?.[1] ?? 0,
        event: Math.max(0, ...r2.events.filter((e) => overlaps(e[1], e[2], t0, end)).map((e) => e[2])),
        request: req ? req.end - req.start : NaN,
      };
    }
    if (Date.now() > deadline) throw new Error(`waited 300 s for ${test}`);
    await sleep(25);
  }
}

/** Types one key into the focused "New folder" box; key → the frame after the re-render. */
async function keystroke(page: Page, key: string): Promise<Step> {
  const before = await read(page);
  await page.keyboard.press(key);
  for (let i = 0; i < 12_000; i++) {
    const r = await read(page);
    const t = r.typed[before.typed.length];
    if (t?.painted !== undefined) {
      await sleep(300);
      const r2 = await read(page);
      const end = t.painted + 300;
      const loafs = r2.loafs.filter((x) => overlaps(x[0], x[1], t.key, end)).sort((a, b) => b[1] - a[1]);
      return {
        ms: t.painted - t.key,
        rows: (await page.evaluate(ROWS)) as number,
        longest: Math.max(0, ...r2.longtasks.filter(([s, d]) => overlaps(s, d, t.key, end)).map(([, d]) => d)),
        loafScript: loafs[0]?.[3] ?? 0,
        loafLayout: loafs[0]?.[4] ?? 0,
        loafLongest: loafs[0]?.[1] ?? 0,
        event: Math.max(0, ...r2.events.filter((e) => overlaps(e[1], e[2], t.key, end)).map((e) => e[2])),
        request: NaN,
      };
    }
    await sleep(25);
  }
  throw new Error('the keystroke was never handled');
}

interface DataRun {
  open: Step;
  /** Every "Next page", from the first page to the last. */
  next: Step[];
  /** "Previous page" after the walk: pages already fetched. */
  back: Step[];
  /** Keys typed with the first page shown, and after the walk. */
  typeFirst: Step[];
  typeEnd: Step[];
  /** The walk stopped before the last page (a step took over WALK_CAP_MS). */
  capped: boolean;
  /** Pages shown, and the last entry's number reached. */
  pages: number;
  entries: number;
  domNodes: number;
  heapMiB: number;
  firstPageFiles: number;
  firstPageBytes: number;
}

async function dataRun(context: BrowserContext, url: string, collection: string): Promise<DataRun> {
  const page = await context.newPage();
  try {
    await page.goto(`${url}/#/data`);
    const link = page.getByRole('link', { name: `${collection}/`, exact: true });
    await link.waitFor(WAIT);
    const title = `data://.my/${collection}`;
    const listing = `/v1/data/.my/${collection}`;
    const open = await step(
      page,
      `(document.querySelector('h1') || {}).textContent === ${JSON.stringify(title)} && ${pageDrawn(1)}`,
      () => link.click(),
      listing,
    );
    const first = (await read(page)).resources.filter((x) => pathOf(x.name).startsWith(listing)).pop();
    // Typing with the first page shown.
    const box = page.getByLabel('New folder');
    await box.click();
    const typeFirst: Step[] = [];
    for (const k of ['x', 'y', 'z']) typeFirst.push(await keystroke(page, k));
    // The walk: "Next page" to the last page.
    const next: Step[] = [];
    const nextButton = page.getByRole('button', { name: 'Next page' });
    let capped = false;
    let shown = (await page.evaluate(PAGE)) as Shown | null;
    while (shown && !shown.last) {
      if (next.length > 0 && next.at(-1)!.ms > WALK_CAP_MS) {
        capped = true;
        bench.log(`  stopping the walk: that "Next page" took over ${WALK_CAP_MS / 1000} s`);
        break;
      }
      next.push(await step(page, pageDrawn(shown.page + 1), () => nextButton.click({ timeout: 300_000 }), listing));
      shown = (await page.evaluate(PAGE)) as Shown;
      if (shown.page % 5 === 0 || shown.last) bench.log(`  next page → page ${shown.page} (entries ${fmt(shown.from, 0)}–${fmt(shown.to, 0)}) in ${fmt(next.at(-1)!.ms, 0)} ms (longest task ${fmt(next.at(-1)!.longest, 0)} ms)`);
    }
    const pages = shown?.page ?? 1;
    const entries = shown?.to ?? open.rows;
    // Back through pages already fetched.
    const back: Step[] = [];
    const prevButton = page.getByRole('button', { name: 'Previous page' });
    for (let i = 0; i < BACK_STEPS && pages - i > 1; i++) back.push(await step(page, pageDrawn(pages - i - 1), () => prevButton.click({ timeout: 300_000 })));
    await box.click();
    const typeEnd: Step[] = [];
    for (const k of ['a', 'b', 'c']) typeEnd.push(await keystroke(page, k));
    const domNodes = (await page.evaluate('document.getElementsByTagName("*").length')) as number;
    const heap = (await page.evaluate('performance.memory ? performance.memory.usedJSHeapSize : NaN')) as number;
    return { open, next, back, typeFirst, typeEnd, capped, pages, entries, domNodes, heapMiB: heap / 1024 / 1024, firstPageFiles: open.rows, firstPageBytes: first?.decoded ?? NaN };
  } finally {
    await page.close().catch(() => undefined);
  }
}

/** PUTs `count` tiny files into `.my/<collection>` over the API, `PUT_CONCURRENCY` at a time. */
async function fillCollection(url: string, key: string, collection: string, count: number): Promise<number> {
  const t0 = performance.now();
  const made = await fetch(`${url}/v1/data/.my`, { method: 'POST', headers: { authorization: `Simple ${key}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: collection }) });
  if (made.status !== 200) throw new Error(`making the collection: ${made.status} ${await made.text()}`);
  const agent = new http.Agent({ keepAlive: true, maxSockets: PUT_CONCURRENCY });
  const width = String(count).length;
  let next = 0;
  const put = (i: number) =>
    new Promise<void>((resolve, reject) => {
      const req = http.request(`${url}/v1/data/.my/${collection}/file-${String(i).padStart(width, '0')}.txt`, { method: 'PUT', agent, headers: { authorization: `Simple ${key}`, 'content-type': 'text/plain' } }, (res) => {
        res.resume();
        res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`PUT file ${i}: ${res.statusCode}`))));
      });
      req.on('error', reject);
      req.end(`file ${i}\n`);
    });
  try {
    await Promise.all(
      Array.from({ length: PUT_CONCURRENCY }, async () => {
        while (next < count) await put(next++);
      }),
    );
  } finally {
    agent.destroy();
  }
  return (performance.now() - t0) / 1000;
}

// ---- the run ------------------------------------------------------------------------------------

/** What was started, stopped in reverse order whatever happens (also on SIGINT/SIGTERM/SIGHUP). */
const stops: { what: string; stop: () => Promise<void> }[] = [];
let stopping: Promise<void> | undefined;
function stopAll(): Promise<void> {
  stopping ??= (async () => {
    for (const s of stops.reverse()) {
      await Promise.race([s.stop(), sleep(20_000).then(() => Promise.reject(new Error('gave up after 20 s')))]).catch((err: unknown) => bench.log(`stopping ${s.what}: ${(err as Error).message}`));
    }
    await bench.cleanup();
  })();
  return stopping;
}
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(signal, () => {
    bench.log(`${signal}: stopping what was started`);
    void stopAll().finally(() => process.exit(130));
  });
}

/** Kills (SIGKILL, by pid) what is left of a process tree whose root has exited. */
function killTree(pids: number[]): void {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
  }
}

try {
  await main();
} catch (err) {
  process.exitCode = 1;
  process.stderr.write(`bench:console failed: ${(err as Error).stack ?? String(err)}\n`);
} finally {
  await stopAll();
}

async function main(): Promise<void> {
  if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is not installed (apt-get install chromium; .ci/run does)`);
  const t0 = performance.now();
  const load0 = os.loadavg()[0]!;
  fs.mkdirSync(bench.work, { recursive: true });
  const home = fs.mkdtempSync(path.join(bench.work, 'home-'));

  bench.log('starting algohost serve (with the demo algorithms) and the baseline server');
  const server: ServerProcess = await startServerProcess({ home, demo: true, timeoutMs: 120_000 });
  stops.push({
    what: `algohost serve (pid ${server.pid})`,
    stop: async () => {
      const tree = descendants(server.pid);
      await server.kill('SIGTERM', 30_000).catch(() => server.kill('SIGKILL'));
      killTree(tree);
    },
  });
  const base = await startBaseline();
  stops.push({ what: 'the baseline server', stop: base.close });

  const created = await runCli(['user', 'create', 'bench', '--password-stdin'], home, 60_000, {}, `${PASSWORD}\n`);
  if (created.code !== 0) throw new Error(`user create: ${created.stderr}`);
  const key = (JSON.parse(created.stdout) as { api_key: string }).api_key;
  // The demo algorithms: published at the first start; wait for them (the marketplace's cards).
  const algorithms = async () => ((await (await fetch(`${server.url}/v1/algorithms`, { headers: { authorization: `Simple ${key}` } })).json()) as { results: unknown[] }).results.length;
  for (let i = 0; (await algorithms()) < 4; i++) {
    if (i > 120) throw new Error('the demo algorithms were not published within 60 s');
    await sleep(500);
  }
  const publicAlgorithms = await algorithms();

  const collection = 'many';
  bench.log(`putting ${fmt(FILES, 0)} files into data://bench/${collection} (${PUT_CONCURRENCY} at a time)`);
  const putSeconds = await fillCollection(server.url, key, collection, FILES);
  bench.log(`  ${fmt(FILES / putSeconds, 0)} files/s`);

  bench.log('starting Chromium');
  const browser: Browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'], handleSIGINT: false, handleSIGTERM: false, handleSIGHUP: false });
  // Chromium's main process: our child that is not the server.
  const chromiumMain = childrenOf(process.pid).filter((p) => p !== server.pid);
  stops.push({
    what: 'Chromium',
    stop: async () => {
      const tree = chromiumMain.flatMap((p) => [p, ...descendants(p)]);
      await browser.close();
      killTree(tree);
    },
  });
  const newContext = async () => {
    const c = await browser.newContext({ viewport: VIEWPORT });
    await c.addInitScript({ content: INIT_SCRIPT });
    return c;
  };

  const idleAtStart = await waitForQuiet(120_000, bench.log);
  const noise = noiseMeter(() => treeCpuAll(process.pid));

  // 1–3. The sign-in page, cold and warm, ours and the baseline, interleaved.
  type Side = 'ours' | 'base';
  const loads: Record<Side, { cold: Load[]; warm: Load[] }> = { ours: { cold: [], warm: [] }, base: { cold: [], warm: [] } };
  const signIns: SignInResult[] = [];
  const urls: Record<Side, string> = { ours: server.url, base: base.url };
  for (let rep = 0; rep < REPS; rep++) {
    for (const side of rep % 2 === 0 ? (['ours', 'base'] as const) : (['base', 'ours'] as const)) {
      const context = await newContext();
      try {
        const page = await context.newPage();
        const cdp = await context.newCDPSession(page);
        const net = await watchNetwork(cdp);
        const cold = await loadInteractive(page, () => page.goto(`${urls[side]}/`), net);
        const warm = await loadInteractive(page, () => page.reload(), net);
        loads[side].cold.push(cold);
        loads[side].warm.push(warm);
        let extra = '';
        if (side === 'ours') {
          const s = await signIn(page, 'bench');
          signIns.push(s);
          extra = `; sign in → first card ${fmt(s.toCard, 0)} ms`;
        }
        bench.log(`${rep + 1}/${REPS} ${side}: interactive cold ${fmt(cold.interactive, 0)} ms, warm ${fmt(warm.interactive, 0)} ms (FCP ${fmt(cold.fcp, 0)} / ${fmt(warm.fcp, 0)})${extra}`);
      } finally {
        await context.close();
      }
    }
  }

  // 4. The data browser.
  bench.log(`data browser: ${DATA_RUNS} run(s) over ${fmt(FILES, 0)} files`);
  const dataContext = await newContext();
  const dataRuns: DataRun[] = [];
  try {
    const page = await dataContext.newPage();
    await page.goto(`${server.url}/`);
    await signIn(page, 'bench');
    await page.close();
    for (let i = 0; i < DATA_RUNS; i++) {
      const d = await dataRun(dataContext, server.url, collection);
      dataRuns.push(d);
      bench.log(`data ${i + 1}/${DATA_RUNS}: open ${fmt(d.open.ms, 0)} ms; next page median ${fmt(median(d.next.map((x) => x.ms)), 0)} ms over ${d.next.length}; longest task ${fmt(Math.max(d.open.longest, ...d.next.map((x) => x.longest), ...d.back.map((x) => x.longest)), 0)} ms`);
    }
  } finally {
    await dataContext.close();
  }
  const noiseLine = noise();
  await stopAll();

  // ---- the report ----
  const m = (xs: number[]) => median(xs);
  const p90 = (xs: number[]) => percentile(xs, 90);
  const ms = (xs: number[]) => `${fmt(m(xs), 0)} (${fmt(p90(xs), 0)})`;
  const ratio = (a: number[], b: number[]) => `${fmt(m(a) / m(b), 1)} ×`;
  const pick = (side: Side, cache: 'cold' | 'warm', f: (l: Load) => number) => loads[side][cache].map(f);
  const row = (measure: string, f: (l: Load) => number, cache: 'cold' | 'warm', target = '—', result = '—'): Row => ({
    measure,
    ours: ms(pick('ours', cache, f)),
    base: ms(pick('base', cache, f)),
    ratio: ratio(pick('ours', cache, f), pick('base', cache, f)),
    target,
    result,
  });
  const coldTti = pick('ours', 'cold', (l) => l.interactive);
  const ttiMet = m(coldTti) <= TARGET_MS;

  // Transfer: the first cold load of ours (all are alike), and what every warm reload fetched.
  const coldT = loads.ours.cold[0]!.transfers.filter((t) => !t.failed);
  const wire = coldT.reduce((n, t) => n + (t.wire ?? 0), 0);
  const decoded = coldT.reduce((n, t) => n + t.decoded, 0);
  const assets = coldT.filter((t) => pathOf(t.url).startsWith('/console/') || pathOf(t.url) === '/');
  const compressible = assets.filter((t) => /\.(js|css|svg)$/.test(pathOf(t.url)) || pathOf(t.url) === '/');
  const compressed = compressible.every((t) => t.encoding === 'br' || t.encoding === 'gzip');
  const hashed = assets.filter((t) => /-[A-Z0-9]{8}\.(js|css)$/i.test(pathOf(t.url)));
  const immutable = hashed.length >= 2 && hashed.every((t) => /max-age=31536000/.test(t.cacheControl ?? '') && /immutable/.test(t.cacheControl ?? ''));
  const warmAll = loads.ours.warm.flatMap((l) => l.transfers.filter((t) => !t.failed));
  const warmHashed = warmAll.filter((t) => /-[A-Z0-9]{8}\.(js|css)$/i.test(pathOf(t.url)));
  const warmHashedNetwork = warmHashed.filter((t) => !fromCache(t));
  const warmNet = warmAll.filter((t) => !fromCache(t));
  const warm304 = warmNet.filter((t) => (t.rawStatus ?? t.status) === 304);
  const warmWire = loads.ours.warm.map((l) => l.transfers.reduce((n, t) => n + (t.wire ?? 0), 0));
  const baseWire = loads.base.cold[0]!.transfers.reduce((n, t) => n + (t.wire ?? 0), 0);
  const cacheOk = compressed && immutable && warmHashed.length > 0 && warmHashedNetwork.length === 0;

  const kib = (n: number) => `${fmt(n / 1024, 1)} KiB`;
  const rows: Row[] = [
    row(`**Sign-in page interactive, cold cache** (Lighthouse-style, ${QUIET_MS / 1000} s quiet window), ms: median (p90)`, (l) => l.interactive, 'cold', `≤ ${TARGET_MS} ms`, `${verdict(ttiMet)}${p90(coldTti) > TARGET_MS ? ` (p90 ${fmt(p90(coldTti), 0)} ms over)` : ''}`),
    row('same, warm cache (reload in the same context)', (l) => l.interactive, 'warm'),
    row('first contentful paint, cold', (l) => l.fcp, 'cold'),
    row('first contentful paint, warm', (l) => l.fcp, 'warm'),
    row('user-name input in the page, cold', (l) => l.input, 'cold'),
    row('user-name input painted, cold', (l) => l.inputPainted, 'cold'),
    row('user-name input in the page, warm', (l) => l.input, 'warm'),
    row('DOMContentLoaded, cold', (l) => l.dcl, 'cold'),
    row('load event, cold', (l) => l.load, 'cold'),
    row('document response start (TTFB), cold', (l) => l.ttfb, 'cold'),
    row('the script received (ours: the bundle; baseline: app.js), cold', (l) => l.scriptEnd, 'cold'),
    {
      measure: 'ours: GET /v1/session (is there a session?) before the form renders, cold: start → end',
      ours: `${fmt(m(pick('ours', 'cold', (l) => l.sessionStart)), 0)} → ${fmt(m(pick('ours', 'cold', (l) => l.sessionEnd)), 0)}`,
      base: '—',
      ratio: '—',
      target: '—',
      result: '—',
    },
    row('first keystroke handled (typed as soon as the input appeared), cold', (l) => l.keyHandled, 'cold'),
    {
      measure: 'its input delay (key event → the app\u2019s handler), cold, ms',
      ours: ms(pick('ours', 'cold', (l) => l.keyDelay)),
      base: ms(pick('base', 'cold', (l) => l.keyDelay)),
      ratio: '—',
      target: '—',
      result: '—',
    },
    {
      measure: `long tasks (> ${LONG_TASK_MS} ms) before interactive, cold: count, longest ms (max over runs)`,
      ours: `${fmt(Math.max(...pick('ours', 'cold', (l) => l.longBefore)), 0)}, ${fmt(Math.max(...pick('ours', 'cold', (l) => l.longestBefore)), 0)}`,
      base: `${fmt(Math.max(...pick('base', 'cold', (l) => l.longBefore)), 0)}, ${fmt(Math.max(...pick('base', 'cold', (l) => l.longestBefore)), 0)}`,
      ratio: '—',
      target: '—',
      result: '—',
    },
    {
      measure: 'signed in: click on "Sign in" → first algorithm card painted, ms: median (p90)',
      ours: ms(signIns.map((s) => s.toCard)),
      base: '—',
      ratio: '—',
      target: '—',
      result: '—',
    },
    {
      measure: 'of which POST /v1/session (scrypt) / GET /v1/algorithms, as the page saw them, ms (median)',
      ours: `${fmt(m(signIns.map((s) => s.session)), 0)} / ${fmt(m(signIns.map((s) => s.list)), 0)}`,
      base: '—',
      ratio: '—',
      target: '—',
      result: '—',
    },
    {
      measure: `first page over the wire, cold: ${coldT.length} requests, bytes received (headers included) vs decoded bodies`,
      ours: kib(wire),
      base: kib(baseWire),
      ratio: `${pct(wire / Math.max(1, decoded))} of the decoded ${kib(decoded)}`,
      target: 'compressed',
      result: verdict(compressed),
    },
    {
      measure: 'warm reload: requests that went to the network (304 of them) / hashed assets fetched again / bytes received',
      ours: `${fmt(warmNet.length / loads.ours.warm.length, 1)} (${fmt(warm304.length / loads.ours.warm.length, 1)}) / ${warmHashedNetwork.length} of ${warmHashed.length} / ${kib(m(warmWire))}`,
      base: '—',
      ratio: '—',
      target: 'hashed assets from cache',
      result: verdict(cacheOk),
    },
  ];

  // The data browser.
  const all = <T>(f: (d: DataRun) => T[]) => dataRuns.flatMap(f);
  const nexts = all((d) => d.next);
  const backs = all((d) => d.back);
  const longestAll = Math.max(...all((d) => [d.open, ...d.next, ...d.back, ...d.typeFirst, ...d.typeEnd].map((x) => x.longest)));
  const pageSize = dataRuns[0]!.firstPageFiles;
  const range = (xs: number[]) => (Math.min(...xs) === Math.max(...xs) ? fmt(xs[0]!, 0) : `${fmt(Math.min(...xs), 0)}–${fmt(Math.max(...xs), 0)}`);
  const totalPages = range(dataRuns.map((d) => d.pages));
  const cappedRuns = dataRuns.filter((d) => d.capped).length;
  const sluggish = (x: number) => (x > SLUGGISH_MS ? `**sluggish** (> ${SLUGGISH_MS} ms)` : 'ok');
  const dataLine = (measure: string, xs: Step[], detail = '') =>
    `| ${measure} | ${ms(xs.map((x) => x.ms))} | ${fmt(Math.max(...xs.map((x) => x.longest)), 0)} | ${fmt(m(xs.map((x) => x.loafScript)), 0)} / ${fmt(m(xs.map((x) => x.loafLayout)), 0)} | ${detail || '—'} | ${sluggish(Math.max(...xs.map((x) => x.longest)))} |`;
  const keysFirst = all((d) => d.typeFirst);
  const keysEnd = all((d) => d.typeEnd);
  const dataTable = [
    `| Step | ms, median (p90) | Longest task, ms (max) | Longest frame: script / style and layout, ms (median) | Detail | Result (long tasks ≤ ${SLUGGISH_MS} ms) |`,
    '|---|---:|---:|---:|---|---|',
    dataLine(`open the ${fmt(FILES, 0)}-file folder from the Data page: click → first ${fmt(pageSize, 0)} rows painted`, dataRuns.map((d) => d.open), `listing request ${fmt(m(dataRuns.map((d) => d.open.request)), 0)} ms`),
    dataLine(`"Next page", every one of the walk (${nexts.length} in all): click → the page's rows painted`, nexts, `listing request ${fmt(m(nexts.map((x) => x.request)), 0)} ms (p90 ${fmt(p90(nexts.map((x) => x.request)), 0)})`),
    dataLine(`"Next page" to the last page (page ${totalPages}): click → painted`, dataRuns.map((d) => d.next.at(-1)!).filter(Boolean)),
    dataLine(`"Previous page" after the walk (a page already fetched): click → painted`, backs),
    dataLine(`a key typed into "New folder", first page shown: key → next frame`, keysFirst, `longest event (Event Timing) ${fmt(Math.max(...keysFirst.map((x) => x.event)), 0)} ms`),
    dataLine(`a key typed into "New folder" after the walk (${totalPages} pages fetched): key → next frame`, keysEnd, `longest event (Event Timing) ${fmt(Math.max(...keysEnd.map((x) => x.event)), 0)} ms`),
  ].join('\n');

  const { begin, end } = docMarkers('console');
  const transferLines = coldT.map((t) => `${t.method} ${pathOf(t.url).slice(0, 48)} → ${t.status ?? '?'}, ${t.encoding ?? 'identity'}, cache-control: ${t.cacheControl ?? '—'}; ${fmt(t.wire ?? 0, 0)} B over the wire, ${fmt(t.decoded, 0)} B decoded`);
  const warmLines = loads.ours.warm[0]!.transfers.map((t) => `${t.method} ${pathOf(t.url).slice(0, 48)} → ${t.rawStatus ?? t.status ?? '?'}${fromCache(t) ? ` from the ${t.fromMemoryCache ? 'memory' : 'disk'} cache` : ' over the network'}; ${fmt(t.wire ?? 0, 0)} B`);
  const block = [
    begin,
    '### Web console (`npm run bench:console`) — latest run',
    '',
    `Times from navigation start, in ms, median (p90) of ${REPS} page loads per side and cache state; the baseline is a static page from a bare \`node:http\` server in the bench process, whose one small script renders a form, loaded the same way in the same run (sides alternating).`,
    '',
    table(rows, 'Baseline: static page', 'Ours / baseline (medians)'),
    '',
    `**Data browser**, one collection of ${fmt(FILES, 0)} files (the API pages listings by ${fmt(pageSize, 0)}: the first page held ${fmt(pageSize, 0)} files, ${kib(dataRuns[0]!.firstPageBytes)} of JSON), ${DATA_RUNS} run(s) in a signed-in page: open the folder from the Data page, click "Next page" to the last page (or until one click took over ${WALK_CAP_MS / 1000} s), then "Previous page" ${BACK_STEPS} times, and type 3 keys into "New folder" on the first page and after the walk. The console shows one page at a time. ${cappedRuns === 0 ? `Every run walked to the last entry (${dataRuns.map((d) => fmt(d.entries, 0)).join(', ')} of ${fmt(FILES, 0)}).` : `**${cappedRuns} of ${dataRuns.length} run(s) gave up before the last page**: the walk reached entries ${dataRuns.map((d) => fmt(d.entries, 0)).join(', ')} of ${fmt(FILES, 0)}.`}`,
    '',
    dataTable,
    '',
    `- The longest main-thread task anywhere in the data runs: ${fmt(longestAll, 0)} ms (${sluggish(longestAll)}). After the walk (${totalPages} pages fetched, one shown) the page has ${fmt(m(dataRuns.map((d) => d.domNodes)), 0)} elements and ${fmt(m(dataRuns.map((d) => d.heapMiB)), 0)} MiB of JS heap.`,
    `- **Setup:** a fresh home with the demo algorithms (${publicAlgorithms} public algorithms on the marketplace); user \`bench\` with a password (\`algohost user create bench --password-stdin\`); ${fmt(FILES, 0)} files PUT over the API at ${fmt(FILES / putSeconds, 0)} files/s (${PUT_CONCURRENCY} at a time).`,
    `- **Code:** ${codeVersion()}.`,
    `- **Machine:** ${machineBase()}; Chromium ${browser.version()} headless (playwright-core), ${VIEWPORT.width}×${VIEWPORT.height}; server, browser and bench on this machine, over loopback.`,
    commandLine('console', `: ${REPS} loads per side and cache state, ${QUIET_MS / 1000} s quiet window, ${fmt(FILES, 0)} files, ${DATA_RUNS} data run(s)`),
    ...runLines({ seconds: (performance.now() - t0) / 1000, load0, load1: os.loadavg()[0]!, idleAtStart, noise: noiseLine }),
    '',
    '<details><summary>Every run, and the first page\u2019s requests</summary>',
    '',
    '```',
    perRep('interactive ms, ours, cold', coldTti),
    perRep('interactive ms, ours, warm', pick('ours', 'warm', (l) => l.interactive)),
    perRep('interactive ms, baseline, cold', pick('base', 'cold', (l) => l.interactive)),
    perRep('interactive ms, baseline, warm', pick('base', 'warm', (l) => l.interactive)),
    perRep('FCP ms, ours, cold', pick('ours', 'cold', (l) => l.fcp)),
    perRep('input in the page ms, ours, cold', pick('ours', 'cold', (l) => l.input)),
    perRep('long tasks before interactive, ours, cold', pick('ours', 'cold', (l) => l.longBefore)),
    perRep('sign in → first card ms', signIns.map((s) => s.toCard)),
    perRep('POST /v1/session ms', signIns.map((s) => s.session)),
    perRep('data: open ms', dataRuns.map((d) => d.open.ms)),
    ...dataRuns.map((d, i) => perRep(`data run ${i + 1}: every "Next page" ms`, d.next.map((x) => x.ms))),
    ...dataRuns.map((d, i) => perRep(`data run ${i + 1}: longest task per "Next page" ms`, d.next.map((x) => x.longest))),
    ...dataRuns.map((d, i) => perRep(`data run ${i + 1}: listing request per "Next page" ms`, d.next.map((x) => x.request))),
    perRep('"Previous page" ms', backs.map((x) => x.ms)),
    perRep('keys, first page, ms', keysFirst.map((x) => x.ms)),
    perRep('keys after the walk, ms', keysEnd.map((x) => x.ms)),
    'first page, cold:',
    ...transferLines.map((l) => `  ${l}`),
    'the same page, warm reload:',
    ...warmLines.map((l) => `  ${l}`),
    '```',
    '',
    '</details>',
    end,
  ].join('\n');
  process.stdout.write(block + '\n');
  writeDocBlock(block, { begin, end, initial: '# Performance\n', section: '## Web console' });
}
