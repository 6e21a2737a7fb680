/**
 * Crash safety of hosted uploads: the server process is killed with SIGKILL while uploads
 * are in flight, then restarted on the same home. A file is either absent or complete,
 * every acknowledged upload survives, and no partial write or orphaned blob is left behind.
 */
import { HOME_FILES_ONLY } from './helpers/backends.ts';
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { tempHome } from './helpers/server.ts';
import {
  WAIT_MS,
  filesUnder,
  getBytes,
  runCli,
  sha256,
  sleep,
  slowly,
  startServerProcess,
  streamRequest,
  within,
  type ServerProcess,
  type Upload,
} from './helpers/process.ts';

const MiB = 1024 * 1024;
const homes: string[] = [];
const running = new Set<ServerProcess>();

after(async () => {
  for (const s of running) await s.kill('SIGKILL').catch(() => undefined);
  for (const h of homes) fs.rmSync(h, { recursive: true, force: true });
});

async function start(home: string): Promise<ServerProcess> {
  const s = await startServerProcess({ home });
  running.add(s);
  return s;
}

async function killHard(s: ServerProcess): Promise<void> {
  process.kill(s.pid, 'SIGKILL');
  const exit = await within(s.exited, WAIT_MS, 'server did not die on SIGKILL');
  running.delete(s);
  assert.equal(exit.signal, 'SIGKILL');
}

/** A new home with a running server, user alice (key returned) and her collection `c`. */
async function setUp(): Promise<{ home: string; server: ServerProcess; key: string }> {
  const home = tempHome('algohost-crash-');
  homes.push(home);
  const server = await start(home);
  const created = await runCli(['user', 'create', 'alice'], home);
  assert.equal(created.code, 0, created.stderr);
  const key = (JSON.parse(created.stdout) as { api_key: string }).api_key;
  const res = await fetch(`${server.url}/v1/data/.my`, {
    method: 'POST',
    headers: { authorization: `Simple ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'c' }),
  });
  assert.equal(res.status, 200, await res.text());
  return { home, server, key };
}

/** Polls until at least `n` partial writes sit in the home's data/tmp. */
async function waitForPartials(home: string, n: number): Promise<void> {
  const tmp = path.join(home, 'data', 'tmp');
  const deadline = Date.now() + WAIT_MS;
  while (fs.readdirSync(tmp).length < n) {
    if (Date.now() > deadline) throw new Error(`fewer than ${n} partial uploads in ${tmp} after ${WAIT_MS} ms`);
    await sleep(10);
  }
}

function gateOpener(): { gate: Promise<void>; open: () => void } {
  let open!: () => void;
  const gate = new Promise<void>((resolve) => (open = resolve));
  return { gate, open };
}

test('kill -9 during 20 concurrent uploads: each file is absent or complete, acknowledged ones survive, nothing is left behind', { skip: HOME_FILES_ONLY }, async (t) => {
  const { home, server, key } = await setUp();
  const { gate, open } = gateOpener();
  try {
    // 4 tiny uploads finish before the kill; 8 stop half-way (their body never ends, so
    // they cannot have become files); 8 stream on at different speeds and race the kill.
    type Kind = 'tiny' | 'stalled' | 'racing';
    const plans = Array.from({ length: 20 }, (_, i) => {
      const kind: Kind = i < 4 ? 'tiny' : i < 12 ? 'stalled' : 'racing';
      const size = kind === 'tiny' ? crypto.randomInt(1, 64 * 1024) : crypto.randomInt(2 * MiB, 8 * MiB + 1);
      const data = crypto.randomBytes(size);
      return { i, kind, data, sha: sha256(data) };
    });
    const uploads: Upload[] = plans.map((p) => {
      const body =
        p.kind === 'tiny'
          ? slowly(p.data)
          : p.kind === 'stalled'
            ? slowly(p.data, { delayMs: 2, pauseAt: Math.floor(p.data.length / 2), gate })
            : slowly(p.data, { delayMs: 2 + (p.i % 4) * 3 });
      return streamRequest(`${server.url}/v1/data/.my/c/f${p.i}.bin`, key, body);
    });

    // Kill when: the tiny ones were answered, the stalled ones are being written (a partial
    // file each in data/tmp), and half of the racing ones have sent their whole body.
    await within(Promise.all(uploads.slice(0, 4).map((u) => u.result)), WAIT_MS, 'tiny uploads not answered');
    await waitForPartials(home, 8);
    const deadline = Date.now() + WAIT_MS;
    while (uploads.slice(12).filter((u) => u.bodyDone).length < 4) {
      if (Date.now() > deadline) throw new Error('racing uploads did not progress');
      await sleep(2);
    }
    const answeredBeforeKill = uploads.map((u) => u.outcome !== undefined);
    await killHard(server);
    open(); // let the stalled generators run on; their requests are dead and they stop

    const outcomes = await within(Promise.all(uploads.map((u) => u.result)), WAIT_MS, 'uploads did not settle after the kill');
    const acknowledged = outcomes.map((o) => o.ok && o.status === 200);
    for (const p of plans.filter((p) => p.kind === 'tiny')) {
      const o = outcomes[p.i]!;
      assert.ok(acknowledged[p.i], `tiny upload f${p.i}.bin should have been answered 200 before the kill, got ${JSON.stringify(o.ok ? o : o.error.message)}`);
    }
    for (const [i, o] of outcomes.entries()) {
      // Anything answered at all must have been a success: the server never refused an upload here.
      if (o.ok) assert.equal(o.status, 200, `f${i}.bin was answered ${o.status}: ${o.body}`);
    }
    const inFlight = answeredBeforeKill.filter((a) => !a).length;
    assert.ok(inFlight >= 8, `only ${inFlight} uploads were in flight at the kill; the test did not exercise a crash`);
    const leftover = fs.readdirSync(path.join(home, 'data', 'tmp'));
    assert.ok(leftover.length >= 1, 'the crash should have left partial writes in data/tmp (before the restart cleans them)');

    const again = await start(home);
    try {
      assert.deepEqual(fs.readdirSync(path.join(home, 'data', 'tmp')), [], 'data/tmp must be empty after the restart');

      const present: string[] = [];
      for (const p of plans) {
        const name = `f${p.i}.bin`;
        const got = await getBytes(`${again.url}/v1/data/.my/c/${name}`, key);
        if (acknowledged[p.i]) assert.equal(got.status, 200, `${name} was acknowledged with 200 before the kill but is gone`);
        if (p.kind === 'stalled') assert.equal(got.status, 404, `${name} never finished its body but exists (${got.body.length} bytes)`);
        assert.ok(got.status === 200 || got.status === 404, `${name}: unexpected status ${got.status}`);
        if (got.status === 200) {
          assert.equal(got.body.length, p.data.length, `${name}: size differs from what was sent`);
          assert.equal(sha256(got.body), p.sha, `${name}: content differs from what was sent`);
          present.push(name);
        }
      }
      assert.ok(present.length >= 4);
      const racing = plans.filter((p) => p.kind === 'racing');
      t.diagnostic(
        `in flight at the kill: ${inFlight}; racing uploads acknowledged ${racing.filter((p) => acknowledged[p.i]).length}, ` +
          `present ${racing.filter((p) => present.includes(`f${p.i}.bin`)).length} of ${racing.length}; partial writes left by the crash: ${leftover.length}`,
      );

      // The listing agrees with the reads.
      const listing = (await (await fetch(`${again.url}/v1/data/.my/c`, { headers: { authorization: `Simple ${key}` } })).json()) as {
        files?: { filename: string; size: number }[];
      };
      assert.deepEqual((listing.files ?? []).map((f) => f.filename).sort(), [...present].sort());

      // Each present file has exactly one blob; any other blob is an orphan of the crash.
      const blobs = filesUnder(path.join(home, 'data', 'blobs'));
      assert.equal(blobs.length, present.length, `blob files on disk (${blobs.length}) != files present (${present.length}): orphaned blobs left behind`);
    } finally {
      await again.kill('SIGKILL');
      running.delete(again);
    }
  } finally {
    open();
    if (running.has(server)) await server.kill('SIGKILL');
    running.delete(server);
  }
});

test('kill -9 while a file is being replaced keeps the old complete content', { skip: HOME_FILES_ONLY }, async () => {
  const { home, server, key } = await setUp();
  const { gate, open } = gateOpener();
  try {
    const put = async (name: string, data: Buffer) => {
      const up = streamRequest(`${server.url}/v1/data/.my/c/${name}`, key, slowly(data));
      const o = await within(up.result, WAIT_MS, `PUT ${name} not answered`);
      assert.ok(o.ok && o.status === 200, `PUT ${name}: ${JSON.stringify(o.ok ? o : o.error.message)}`);
    };
    const oldF = crypto.randomBytes(MiB + 17);
    await put('f.bin', oldF);
    // A replace that completed before the crash: the new content wins, the old blob is gone.
    const g1 = crypto.randomBytes(300_000);
    const g2 = crypto.randomBytes(500_000);
    await put('g.bin', g1);
    await put('g.bin', g2);

    const newF = crypto.randomBytes(4 * MiB);
    const replacing = streamRequest(`${server.url}/v1/data/.my/c/f.bin`, key, slowly(newF, { delayMs: 1, pauseAt: 3 * MiB, gate }));
    await waitForPartials(home, 1);
    const deadline = Date.now() + WAIT_MS;
    while (replacing.sent < 3 * MiB) {
      if (Date.now() > deadline) throw new Error('the replacing upload did not progress');
      await sleep(5);
    }
    assert.equal(replacing.outcome, undefined, 'the replacing upload must still be in flight at the kill');
    await killHard(server);
    open();
    const o = await within(replacing.result, WAIT_MS, 'replacing upload did not settle');
    assert.equal(o.ok, false, 'an upload whose body never ended cannot have been answered');

    const again = await start(home);
    try {
      assert.deepEqual(fs.readdirSync(path.join(home, 'data', 'tmp')), []);
      const f = await getBytes(`${again.url}/v1/data/.my/c/f.bin`, key);
      assert.equal(f.status, 200);
      assert.equal(f.body.length, oldF.length);
      assert.equal(sha256(f.body), sha256(oldF), 'f.bin must keep its old content');
      const g = await getBytes(`${again.url}/v1/data/.my/c/g.bin`, key);
      assert.equal(g.status, 200);
      assert.equal(sha256(g.body), sha256(g2), 'g.bin must have its second, acknowledged content');
      const blobs = filesUnder(path.join(home, 'data', 'blobs'));
      assert.equal(blobs.length, 2, `expected one blob each for f.bin and g.bin, found ${blobs.length}`);
    } finally {
      await again.kill('SIGKILL');
      running.delete(again);
    }
  } finally {
    open();
    if (running.has(server)) await server.kill('SIGKILL');
    running.delete(server);
  }
});
