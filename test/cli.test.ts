/**
 * The `algohost` command as operators use it: first start and the demo user, the admin CLI
 * working on the home of a running server, graceful shutdown on SIGTERM, /health.
 */
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { tempHome } from './helpers/server.ts';
import {
  WAIT_MS,
  freshRequest,
  getBytes,
  runCli,
  sha256,
  sleep,
  slowly,
  startServerProcess,
  streamRequest,
  within,
  type ServerProcess,
} from './helpers/process.ts';

const REPO = new URL('..', import.meta.url).pathname;

const KEY_PATTERN = /^sim[0-9A-Za-z]{25}$/;
const ANY_KEY = /sim[0-9A-Za-z]{25}/;

const homes: string[] = [];
const running = new Set<ServerProcess>();

after(async () => {
  for (const s of running) await s.kill('SIGKILL').catch(() => undefined);
  for (const h of homes) fs.rmSync(h, { recursive: true, force: true });
});

function newHome(): string {
  const home = tempHome('algohost-cli-');
  homes.push(home);
  return home;
}

async function start(home: string, options: { demo?: boolean; env?: Record<string, string> } = {}): Promise<ServerProcess> {
  const s = await startServerProcess({ home, ...options });
  running.add(s);
  return s;
}

async function stop(s: ServerProcess): Promise<void> {
  await s.kill('SIGKILL');
  running.delete(s);
}

function call(base: string, key: string, p: string, init: RequestInit = {}): Promise<Response> {
  const headers = new Headers(init.headers);
  headers.set('authorization', `Simple ${key}`);
  return fetch(base + p, { ...init, headers });
}

async function status(res: Response): Promise<number> {
  await res.arrayBuffer();
  return res.status;
}

function mkdir(base: string, key: string, name: string): Promise<Response> {
  return call(base, key, '/v1/data/.my', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name }) });
}

/** The one JSON line a successful admin command prints. */
function oneJsonLine(stdout: string): unknown {
  const lines = stdout.split('\n');
  assert.equal(lines.length, 2, `expected exactly one line on stdout, got ${JSON.stringify(stdout)}`);
  assert.equal(lines[1], '', 'stdout must end with a newline');
  return JSON.parse(lines[0]!);
}

test('first start creates user demo with a 0600 key file; later starts keep it; --no-demo creates nothing', async () => {
  const home = newHome();
  const keyFile = path.join(home, 'demo-key');
  const first = await start(home, { demo: true });
  let key: string;
  try {
    await first.waitFor('stderr', /curl .*\/v1\/data\/\.my\n/);
    assert.ok(fs.existsSync(keyFile), 'demo-key must exist after the first start');
    assert.equal(fs.statSync(keyFile).mode & 0o777, 0o600, 'demo-key must be readable by its owner only');
    const content = fs.readFileSync(keyFile, 'utf8');
    key = content.trim();
    assert.equal(key.length, 28);
    assert.match(key, KEY_PATTERN);
    assert.equal(content, `${key}\n`);
    const banner = first.stderr();
    assert.ok(banner.includes(key), `the banner must show the new key:\n${banner}`);
    assert.match(banner, /Created user "demo"/);
    const curl = banner.split('\n').find((l) => l.includes('curl ') && l.includes('/v1/data/.my'));
    assert.ok(curl, `the banner must show a curl example:\n${banner}`);
    assert.ok(curl.includes(`${first.url}/v1/data/.my`), curl);
    assert.ok(curl.includes(keyFile), curl);
    assert.match(curl, /Authorization: Simple /);
    assert.equal(await status(await call(first.url, key, '/v1/data/.my')), 200);
    // The first curl line calls demo/Hello: run what it says (its headers, its body).
    const hello = banner.split('\n').find((l) => l.includes('curl ') && l.includes('/v1/algo/demo/Hello'));
    assert.ok(hello, `the banner must show how to call demo/Hello:\n${banner}`);
    assert.match(hello, /-H 'Content-Type: text\/plain' -d 'world'/);
    const r = await fetch(`${first.url}/v1/algo/demo/Hello`, { method: 'POST', headers: { authorization: `Simple ${key}`, 'content-type': 'text/plain' }, body: 'world' });
    assert.deepEqual(((await r.json()) as { result: unknown }).result, 'Hello world');
    // Every demo algorithm is published and public, each answering its sample.
    const catalogue = (await (await fetch(`${first.url}/v1/users/demo/algorithms`, { headers: { authorization: `Simple ${key}` } })).json()) as { results: Array<{ name: string }> };
    assert.deepEqual(catalogue.results.map((a) => a.name).sort(), ['Hello', 'Reverse', 'Stats', 'WordCount']);
    const stats = await fetch(`${first.url}/v1/algo/demo/Stats`, { method: 'POST', headers: { authorization: `Simple ${key}`, 'content-type': 'application/json' }, body: '[1,2,3]' });
    assert.deepEqual(((await stats.json()) as { result: unknown }).result, { count: 3, sum: 6, mean: 2, min: 1, max: 3 });
    const words = await fetch(`${first.url}/v1/algo/demo/WordCount`, { method: 'POST', headers: { authorization: `Simple ${key}`, 'content-type': 'text/plain' }, body: 'a b a' });
    assert.deepEqual(((await words.json()) as { result: unknown }).result, { words: 3, lines: 1, top: [['a', 2], ['b', 1]] });
    const rev = await fetch(`${first.url}/v1/algo/demo/Reverse`, { method: 'POST', headers: { authorization: `Simple ${key}`, 'content-type': 'application/octet-stream' }, body: Buffer.from([1, 2, 3]) });
    assert.equal(((await rev.json()) as { result: string }).result, Buffer.from([3, 2, 1]).toString('base64'));
  } finally {
    await stop(first);
  }

  const second = await start(home, { demo: true });
  try {
    await second.waitFor('stderr', /curl .*\/v1\/data\/\.my\n/);
    const banner = second.stderr();
    assert.doesNotMatch(banner, ANY_KEY, `a second start must not print a key:\n${banner}`);
    assert.doesNotMatch(banner, /Created user/);
    assert.equal(fs.readFileSync(keyFile, 'utf8'), `${key}\n`, 'demo-key must not change');
    assert.equal(await status(await call(second.url, key, '/v1/data/.my')), 200);
  } finally {
    await stop(second);
  }
  const users = await runCli(['user', 'list'], home);
  assert.equal(users.code, 0, users.stderr);
  assert.deepEqual((oneJsonLine(users.stdout) as { username: string }[]).map((u) => u.username), ['demo']);

  const bare = newHome();
  const noDemo = await start(bare, { demo: false });
  try {
    // Give a (wrong) banner time to arrive: it is written in one piece with the ready line.
    await sleep(200);
    assert.doesNotMatch(noDemo.stderr(), ANY_KEY);
    assert.doesNotMatch(noDemo.stderr(), /Created user/);
    assert.equal(fs.existsSync(path.join(bare, 'demo-key')), false, '--no-demo must not write demo-key');
    const list = await runCli(['user', 'list'], bare);
    assert.equal(list.code, 0, list.stderr);
    assert.deepEqual(oneJsonLine(list.stdout), [], '--no-demo must create no user');
  } finally {
    await stop(noDemo);
  }
});

test('admin CLI manages users and keys on the home of a running server', async () => {
  const home = newHome();
  const server = await start(home);
  try {
    // /health needs no key.
    const health = await fetch(`${server.url}/health`);
    assert.equal(health.status, 200);
    assert.equal(((await health.json()) as { status: string }).status, 'ok');

    const created = await runCli(['user', 'create', 'bob'], home);
    assert.equal(created.code, 0, created.stderr);
    const bob = oneJsonLine(created.stdout) as Record<string, unknown>;
    assert.deepEqual(Object.keys(bob).sort(), ['api_key', 'username']);
    assert.equal(bob.username, 'bob');
    assert.match(String(bob.api_key), KEY_PATTERN);
    const bobKey = String(bob.api_key);
    assert.equal(await status(await call(server.url, bobKey, '/v1/data/.my')), 200);
    assert.equal(await status(await mkdir(server.url, bobKey, 'c')), 200);

    const dup = await runCli(['user', 'create', 'bob'], home);
    assert.equal(dup.code, 1);
    assert.equal(dup.stdout, '');
    assert.match(dup.stderr, /already exists/);

    for (const bad of ['9bad', 'a-b']) {
      const r = await runCli(['user', 'create', bad], home);
      assert.notEqual(r.code, 0, `user create ${bad} must fail`);
      assert.equal(r.stdout, '');
      assert.match(r.stderr, /invalid username/);
      assert.ok(r.stderr.includes(bad), r.stderr);
    }

    const list = await runCli(['user', 'list'], home);
    assert.equal(list.code, 0, list.stderr);
    assert.deepEqual((oneJsonLine(list.stdout) as { username: string }[]).map((u) => u.username), ['bob']);

    const ro = await runCli(['key', 'create', 'bob', '--name', 'ro', '--permissions', '{"allow_data_write":false}'], home);
    assert.equal(ro.code, 0, ro.stderr);
    const roRecord = oneJsonLine(ro.stdout) as { id: string; name: string; api_key: string; permissions: Record<string, unknown> };
    assert.equal(roRecord.name, 'ro');
    assert.match(roRecord.api_key, KEY_PATTERN);
    assert.match(roRecord.id, /^key_/);
    assert.equal(roRecord.permissions.allow_data_write, false);
    assert.equal(roRecord.permissions.allow_data, true);
    assert.equal(await status(await call(server.url, roRecord.api_key, '/v1/data/.my/c')), 200);
    const denied = await call(server.url, roRecord.api_key, '/v1/data/.my/c/x.txt', { method: 'PUT', body: 'hello' });
    assert.equal(await status(denied), 403);
    assert.equal(await status(await call(server.url, bobKey, '/v1/data/.my/c/x.txt')), 404, 'the refused PUT must not store anything');

    const keys = await runCli(['key', 'list', 'bob'], home);
    assert.equal(keys.code, 0, keys.stderr);
    const keyList = oneJsonLine(keys.stdout) as { id: string; name: string }[];
    assert.deepEqual(keyList.map((k) => k.name).sort(), ['default-key', 'ro']);
    assert.ok(!keys.stdout.includes(roRecord.api_key), 'key list must not show secrets');

    const revoked = await runCli(['key', 'revoke', 'bob', roRecord.id], home);
    assert.equal(revoked.code, 0, revoked.stderr);
    assert.equal(await status(await call(server.url, roRecord.api_key, '/v1/data/.my/c')), 401, 'a revoked key must fail on the next request');
    assert.equal(await status(await call(server.url, bobKey, '/v1/data/.my/c')), 200, 'revoking one key leaves the others');

    const deleted = await runCli(['user', 'delete', 'bob'], home);
    assert.equal(deleted.code, 0, deleted.stderr);
    assert.equal(await status(await call(server.url, bobKey, '/v1/data/.my')), 401, "a deleted user's key must fail");
    const remaining = await runCli(['user', 'list'], home);
    assert.equal(remaining.code, 0, remaining.stderr);
    assert.deepEqual(oneJsonLine(remaining.stdout), []);

    const unknown = await runCli(['frobnicate'], home);
    assert.equal(unknown.code, 2);
    // The one line that says what is wrong and where the usage is, not the whole usage text.
    assert.equal(unknown.stderr, 'algohost: unknown command "frobnicate"\nsee `algohost --help`\n');
    const noNats = await runCli(['cluster', 'status'], home, undefined, { ALGOHOST_NATS_URL: '' });
    assert.equal(noNats.code, 2);
    assert.equal(noNats.stderr, 'algohost: cluster status needs ALGOHOST_NATS_URL: the NATS server of the cluster\nsee `algohost --help`\n');
    const unknownSub = await runCli(['user', 'frobnicate'], home);
    assert.equal(unknownSub.code, 2);
    assert.match(unknownSub.stderr, /unknown user command/);
  } finally {
    await stop(server);
  }
});

test('SIGTERM lets an upload in flight finish, refuses new connections and exits 0', async () => {
  const home = newHome();
  const created = await runCli(['user', 'create', 'carol', '--init'], home);
  assert.equal(created.code, 0, created.stderr);
  const key = (JSON.parse(created.stdout) as { api_key: string }).api_key;
  // info level: the server logs "stopping" when it handles the signal.
  const server = await start(home, { env: { ALGOHOST_LOG_LEVEL: 'info' } });
  // A keep-alive agent, as real clients use: the connection stays open after the answer.
  const agent = new http.Agent({ keepAlive: true });
  const data = crypto.randomBytes(30 * 32 * 1024);
  try {
    assert.equal(await status(await mkdir(server.url, key, 'c')), 200);
    // ~1.5 s of sending: 30 chunks, 50 ms apart.
    const upload = streamRequest(`${server.url}/v1/data/.my/c/slow.bin`, key, slowly(data, { chunkSize: 32 * 1024, delayMs: 50 }), { agent });
    await within(
      (async () => {
        while (upload.sent < 4 * 32 * 1024) await sleep(10);
      })(),
      WAIT_MS,
      'the upload did not start',
    );
    const sigtermAt = Date.now();
    server.child.kill('SIGTERM');
    await server.waitFor('stdout', /stopping/, 5_000);
    assert.equal(upload.outcome, undefined, 'the upload must still be in flight when the server starts stopping');
    assert.equal(upload.bodyDone, false);

    // The "stopping" log line is written just before the listener closes, so allow
    // a short window in which a connection may still be served; a hang fails at once.
    const stoppingSeenAt = Date.now();
    let fresh = await freshRequest(`${server.url}/health`, 3_000);
    while (fresh !== 'refused' && fresh !== 'reset' && fresh.status === 200 && Date.now() - stoppingSeenAt < 1_000) {
      await sleep(50);
      fresh = await freshRequest(`${server.url}/health`, 3_000);
    }
    // A connection accepted in the instant before the listener closed has no request yet: the
    // drain closes it as idle (a reset), which a client treats like a refusal. What must not
    // happen is a new request being served, or a hang.
    assert.ok(
      fresh === 'refused' || fresh === 'reset' || fresh.status === 503,
      `a new connection after SIGTERM must be refused, reset before any request, or answered 503, got ${JSON.stringify(fresh)}`,
    );

    const outcome = await within(upload.result, WAIT_MS, 'the upload in flight was not answered');
    assert.ok(outcome.ok, `the upload in flight failed: ${outcome.ok ? '' : outcome.error.message}`);
    assert.equal(outcome.status, 200, outcome.body);
    assert.ok(Date.now() - sigtermAt >= 1_000, 'the upload should have taken its time');

    const exit = await within(server.exited, 10_000, 'the server did not exit after finishing the upload');
    running.delete(server);
    assert.deepEqual(exit, { code: 0, signal: null });
  } finally {
    agent.destroy();
    if (running.has(server)) await stop(server);
  }

  // The upload that finished during shutdown is really stored.
  const again = await start(home);
  try {
    const got = await getBytes(`${again.url}/v1/data/.my/c/slow.bin`, key);
    assert.equal(got.status, 200);
    assert.equal(sha256(got.body), sha256(data));
  } finally {
    await stop(again);
  }
});

test('without a working bubblewrap: auto starts and warns loudly, required refuses to start', async () => {
  const home = tempHome();
  const env = { ALGOHOST_BWRAP: '/nonexistent/bwrap' };
  try {
    const refused = spawnSync(process.execPath, [path.join(REPO, 'bin/algohost.mjs'), 'serve', '--port', '0', '--home', home, '--no-demo'], {
      env: { ...process.env, ...env, ALGOHOST_SANDBOX: 'required', ALGOHOST_LOG_LEVEL: 'warn' },
      encoding: 'utf8',
      timeout: WAIT_MS,
    });
    assert.equal(refused.status, 1);
    assert.match(refused.stderr, /ALGOHOST_SANDBOX=required, but \/nonexistent\/bwrap is not installed/);

    const server = await startServerProcess({ home, env });
    try {
      assert.match(server.stderr(), /WARNING: algorithms are NOT sandboxed/);
      const health = (await (await fetch(`${server.url}/health`)).json()) as { status: string; sandbox: { enabled: boolean; warning: string } };
      assert.equal(health.status, 'ok');
      assert.equal(health.sandbox.enabled, false);
      assert.match(health.sandbox.warning, /NOT sandboxed/);
    } finally {
      await server.kill('SIGKILL');
    }
  } finally {
    fs.rmSync(home, { recursive: true, force: true });
  }
});
