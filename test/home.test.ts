/**
 * One server per home, and admin commands that find the home a user means: a second
 * `algohost serve` on a home in use leaves the first one's uploads alone, admin commands
 * run elsewhere do not make empty homes, and a busy port is one line, not a stack trace.
 */
import { HOME_FILES_ONLY } from './helpers/backends.ts';
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { tempHome } from './helpers/server.ts';
import {
  BIN,
  NODE,
  WAIT_MS,
  childEnv,
  getBytes,
  runCli,
  sha256,
  sleep,
  slowly,
  startServerProcess,
  streamRequest,
  within,
  type CliResult,
  type ServerProcess,
} from './helpers/process.ts';

const dirs: string[] = [];
const running = new Set<ServerProcess>();

after(async () => {
  for (const s of running) await s.kill('SIGKILL').catch(() => undefined);
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true });
});

function scratch(): string {
  const d = tempHome('algohost-home-');
  dirs.push(d);
  return d;
}

/** `algohost ARGS` in `cwd`, with `env` added to a clean environment; no --home unless given. */
async function algohost(args: string[], cwd: string, env: Record<string, string> = {}): Promise<CliResult> {
  const child = spawn(NODE, [BIN, ...args], { cwd, env: childEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s));
  child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
  const closed = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('close', (code, signal) => resolve({ code, signal })));
  try {
    return { ...(await within(closed, WAIT_MS, `algohost ${args.join(' ')} did not finish`)), stdout, stderr };
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
}

/** Every path under `dir` with its size and modification time, to show nothing changed. */
function snapshot(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const entry of fs.readdirSync(dir, { recursive: true, withFileTypes: true })) {
    const p = path.join(entry.parentPath, entry.name);
    const st = fs.statSync(p);
    out.set(path.relative(dir, p), entry.isDirectory() ? 'dir' : `${st.size}:${st.mtimeMs}`);
  }
  return out;
}

test('a second server on a home in use exits at once, naming the first, and its uploads in flight complete', { skip: HOME_FILES_ONLY }, async () => {
  const home = scratch();
  const first = await startServerProcess({ home });
  running.add(first);
  const created = await runCli(['user', 'create', 'alice', '--init'], home);
  assert.equal(created.code, 0, created.stderr);
  const key = (JSON.parse(created.stdout) as { api_key: string }).api_key;
  const mk = await fetch(`${first.url}/v1/data/.my`, {
    method: 'POST',
    headers: { authorization: `Simple ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'c' }),
  });
  assert.equal(mk.status, 200);

  // An upload in flight has its bytes in data/tmp: crash recovery by a second server would
  // remove them and the first server's rename would fail.
  const data = crypto.randomBytes(24 * 32 * 1024);
  // The upload stops half-way until the second server has come and gone.
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const upload = streamRequest(`${first.url}/v1/data/.my/c/big.bin`, key, slowly(data, { chunkSize: 32 * 1024, delayMs: 5, pauseAt: 12 * 32 * 1024, gate }));
  // Sent is not yet received: under load the server may open its temporary file a little later.
  await within(
    (async () => {
      while (upload.sent < 3 * 32 * 1024 || fs.readdirSync(path.join(home, 'data', 'tmp')).length === 0) await sleep(10);
    })(),
    WAIT_MS,
    'the upload did not reach data/tmp',
  );
  const tmpBefore = fs.readdirSync(path.join(home, 'data', 'tmp'));
  assert.equal(tmpBefore.length, 1, 'the upload in flight should be in data/tmp');

  const before = snapshot(home);
  const startedAt = Date.now();
  const second = await algohost(['serve', '--port', '0', '--home', home, '--no-demo'], home);
  assert.equal(second.code, 1, second.stderr);
  assert.equal(second.stderr, `algohost: the home ${home} is in use by process ${first.pid}; stop it first or choose another --home\n`);
  assert.ok(Date.now() - startedAt < WAIT_MS);
  assert.equal(upload.outcome, undefined, 'the second server must have come and gone while the upload was in flight');
  const after = snapshot(home);
  for (const [p, v] of before) {
    // The upload's own temporary file grows; everything else must be exactly as it was.
    if (p.startsWith(path.join('data', 'tmp'))) continue;
    if (p.startsWith('metadata.sqlite')) continue; // the first server's own writes
    assert.equal(after.get(p), v, `${p} changed`);
  }
  assert.deepEqual(fs.readdirSync(path.join(home, 'data', 'tmp')), tmpBefore, 'the upload in flight must keep its temporary file');
  release();

  const outcome = await within(upload.result, WAIT_MS, 'the upload was not answered');
  assert.ok(outcome.ok && outcome.status === 200, JSON.stringify(outcome));
  const got = await getBytes(`${first.url}/v1/data/.my/c/big.bin`, key);
  assert.equal(got.status, 200);
  assert.equal(sha256(got.body), sha256(data));

  // Everything the server keeps in its home (an algorithm built too) is in configuration.md's table of it.
  const made = await fetch(`${first.url}/v1/algorithms/alice`, { method: 'POST', headers: { authorization: `Simple ${key}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'Kept' }) });
  assert.equal(made.status, 201);
  assert.equal((await fetch(`${first.url}/v1/algorithms/alice/Kept/compile`, { method: 'POST', headers: { authorization: `Simple ${key}` } })).status, 200);
  const table = fs.readFileSync(new URL('../docs/configuration.md', import.meta.url), 'utf8').split('## The home directory')[1]!;
  for (const entry of fs.readdirSync(home)) {
    const documented = entry.replace(/-(wal|shm|journal)$/, '');
    assert.ok(table.includes(`\`${documented}`), `docs/configuration.md's home table names ${entry}`);
  }

  // Admin commands still work beside the running server.
  const list = await runCli(['user', 'list'], home);
  assert.equal(list.code, 0, list.stderr);
  assert.deepEqual((JSON.parse(list.stdout) as { username: string }[]).map((u) => u.username), ['alice']);

  // Once the first server is gone (even by kill -9), the home is free again.
  await first.kill('SIGKILL');
  running.delete(first);
  const third = await startServerProcess({ home });
  running.add(third);
  assert.equal((await getBytes(`${third.url}/v1/data/.my/c/big.bin`, key)).status, 200);
  await third.kill('SIGTERM');
  running.delete(third);
});

test('admin commands find the home in this directory or a parent, and make a new one only with --init', async () => {
  const project = scratch();
  const home = path.join(project, '.algohost');
  const sub = path.join(project, 'a', 'b');
  fs.mkdirSync(sub, { recursive: true });
  const elsewhere = scratch();

  // No home anywhere: refused, and nothing is created where the command ran.
  const refused = await algohost(['user', 'create', 'bob'], sub);
  assert.equal(refused.code, 1);
  assert.equal(refused.stdout, '');
  assert.match(refused.stderr, /no \.algohost home in .*a\/b or its parents; .*--home DIR or ALGOHOST_HOME, or add --init/);
  assert.equal(fs.existsSync(path.join(sub, '.algohost')), false);
  assert.equal(fs.existsSync(home), false);

  // --init makes it, here, and says so.
  const init = await algohost(['user', 'create', 'bob', '--init'], project);
  assert.equal(init.code, 0, init.stderr);
  assert.equal(init.stderr, `algohost: home ${home}\n`);
  assert.equal((JSON.parse(init.stdout) as { username: string }).username, 'bob');

  // From a subdirectory: the parent's home, not a new one.
  const fromSub = await algohost(['user', 'list'], sub);
  assert.equal(fromSub.code, 0, fromSub.stderr);
  assert.equal(fromSub.stderr, `algohost: home ${home}\n`);
  assert.deepEqual((JSON.parse(fromSub.stdout) as { username: string }[]).map((u) => u.username), ['bob']);
  assert.equal(fs.existsSync(path.join(sub, '.algohost')), false);

  // Named explicitly, a directory that is not a home is refused, by flag or environment.
  const byFlag = await algohost(['user', 'list', '--home', elsewhere], sub);
  assert.equal(byFlag.code, 1);
  assert.equal(byFlag.stderr, `algohost: ${elsewhere} (from --home) is not an algohost home (no metadata.sqlite); point at the server's home with --home DIR or ALGOHOST_HOME, or add --init to create a new home\n`);
  assert.deepEqual(fs.readdirSync(elsewhere), []);
  const byEnv = await algohost(['key', 'list', 'bob'], sub, { ALGOHOST_HOME: elsewhere });
  assert.equal(byEnv.code, 1);
  assert.match(byEnv.stderr, /\(from ALGOHOST_HOME\) is not an algohost home/);

  // And the environment wins over the parent search when it names a home.
  const envHome = await algohost(['user', 'list'], elsewhere, { ALGOHOST_HOME: home });
  assert.equal(envHome.code, 0, envHome.stderr);
  assert.equal(envHome.stderr, `algohost: home ${home}\n`);

  // serve makes a new home as before; --init means nothing to it.
  const wrong = await algohost(['serve', '--init'], sub);
  assert.equal(wrong.code, 2);
  assert.match(wrong.stderr, /--init is for the admin commands/);
});

test('a port already in use is one line naming the port and the setting, and makes nothing: no new home, no demo user', async () => {
  const blocker = net.createServer();
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
  const port = (blocker.address() as net.AddressInfo).port;
  const dir = scratch();
  const home = path.join(dir, 'new-home');
  try {
    // With the demo on, as a first start is: it would make the home, the demo user and its key.
    const r = await algohost(['serve', '--port', String(port), '--host', '127.0.0.1', '--home', home], dir);
    assert.equal(r.code, 1);
    assert.equal(
      r.stderr,
      `algohost: port ${port} on 127.0.0.1 is already in use by another program; stop it or choose another with --port N or ALGOHOST_PORT\n`,
    );
    assert.equal(fs.existsSync(home), false, 'a start that cannot listen made the home');
    // The metrics address is checked as early.
    const m = await algohost(['serve', '--port', '0', '--host', '127.0.0.1', '--home', home], dir, { ALGOHOST_METRICS_ADDR: `127.0.0.1:${port}` });
    assert.equal(m.code, 1);
    assert.match(m.stderr, new RegExp(`^algohost: ALGOHOST_METRICS_ADDR 127\\.0\\.0\\.1:${port}: the port is already in use`));
    assert.equal(fs.existsSync(home), false, 'a start that cannot listen for metrics made the home');
  } finally {
    blocker.close();
  }
  // The failed start released its lock: a server starts on the same home at once.
  const server = await startServerProcess({ home });
  running.add(server);
  assert.equal((await fetch(`${server.url}/health`)).status, 200);
  await server.kill('SIGTERM');
  running.delete(server);
});
