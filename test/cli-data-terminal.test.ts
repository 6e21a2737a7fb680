/**
 * `algo cp` on a real terminal (a tmux pane) draws a progress bar with percent, ETA and rate,
 * redrawn in place and cleared at the end; the same command with stderr piped draws nothing.
 * The server runs in this process, so every wait here is asynchronous.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { AlgohostClient } from '../client/src/index.ts';
import { startServer, tempHome, type TestServer } from './helpers/server.ts';
import { childEnv, NODE, sleep, within } from './helpers/process.ts';

const ALGO = path.resolve(import.meta.dirname, '..', 'bin', 'algo.mjs');
const MiB = 1024 * 1024;
const SIZE = 200 * MiB;
const run = promisify(execFile);

const tmux = spawnSync('tmux', ['-V'], { encoding: 'utf8' });
const skip = tmux.status === 0 ? false : 'tmux is not installed (apt-get install tmux): the progress bar needs a terminal to be seen';

let server: TestServer;
let key: string;
let work: string;
let sock: string;

before(async () => {
  if (skip) return;
  server = await startServer();
  key = await server.user('alice');
  work = tempHome('algo-cli-tty-');
  sock = path.join(work, 'tmux.sock');
  // 200 MiB: long enough (a second or more) to be caught mid-way.
  const chunk = crypto.randomBytes(MiB);
  const fd = fs.openSync(path.join(work, 'big.bin'), 'w');
  for (let i = 0; i < SIZE / MiB; i++) fs.writeSync(fd, chunk);
  fs.closeSync(fd);
  await new AlgohostClient({ apiKey: key, baseUrl: server.url, env: {} }).dir('data://.my/t').create();
});

after(async () => {
  if (skip) return;
  // Only the tmux server this test started, by its own socket.
  if (fs.existsSync(sock)) await run('tmux', ['-S', sock, 'kill-server']).catch(() => undefined);
  await server?.close();
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

async function pane(): Promise<string> {
  const { stdout } = await run('tmux', ['-S', sock, 'capture-pane', '-p'], { timeout: 10_000 });
  return stdout;
}

// The bar's line: label, bar, percent, ETA (drawn only once a rate is known), bytes done, rate.
const BAR = /big\.bin \[[=> ]{24}\] (\d{1,3})% ETA \d+:\d\d [\d.]+ (?:B|KiB|MiB|GiB) [\d.]+ (?:B|KiB|MiB|GiB)\/s/;

test('cp on a terminal shows a progress bar with percent, ETA and rate, cleared at the end; piped, none', { skip, timeout: 180_000 }, async () => {
  const env = childEnv({ HOME: work, ALGOHOST_API: server.url, ALGOHOST_API_KEY: key });
  const script = path.join(work, 'copy.sh');
  const rc = path.join(work, 'rc');
  const exports = Object.entries(env).filter(([k]) => /^[A-Z_][A-Z0-9_]*$/.test(k)).map(([k, v]) => `export ${k}=${quote(v ?? '')}`);
  fs.writeFileSync(script, [
    ...exports,
    'unset NODE_EXTRA_CA_CERTS NODE_OPTIONS',
    `cd ${quote(work)}`,
    `${quote(NODE)} ${quote(ALGO)} cp big.bin data://.my/t/tty.bin`,
    `echo $? > ${quote(rc)}.tmp && mv ${quote(rc)}.tmp ${quote(rc)}`,
    'sleep 120', // keeps the pane, to read what is left on it
  ].join('\n'));
  await run('tmux', ['-S', sock, '-f', '/dev/null', 'new-session', '-d', '-x', '200', '-y', '50', `sh ${quote(script)}`], {
    env: { ...env, TERM: 'xterm-256color' },
    timeout: 10_000,
  });

  const seen: number[] = [];
  const deadline = Date.now() + 120_000;
  while (!fs.existsSync(rc)) {
    assert.ok(Date.now() < deadline, `the copy did not finish within 120 s; the pane shows:\n${await pane()}`);
    const m = BAR.exec(await pane());
    if (m) seen.push(Number(m[1]));
    await sleep(40);
  }
  assert.equal(fs.readFileSync(rc, 'utf8').trim(), '0', `exit code; the pane shows:\n${await pane()}`);
  assert.ok(seen.some((p) => p < 100), `a bar seen mid-way (percents seen: ${JSON.stringify(seen)})`);
  const end = await pane();
  assert.match(end, /Copied big\.bin to data:\/\/\.my\/t\/tty\.bin \(200\.0 MiB in /);
  assert.doesNotMatch(end, /ETA|%/, `the bar is cleared at the end:\n${end}`);
  const client = new AlgohostClient({ apiKey: key, baseUrl: server.url, env: {} });
  assert.equal((await client.file('data://.my/t/tty.bin').stat()).size, SIZE);

  // The same command with stderr piped: no bar, no control characters, just the result.
  const child = spawn(NODE, [ALGO, 'cp', 'big.bin', 'data://.my/t/piped.bin'], { cwd: work, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (b: Buffer) => (out += b.toString()));
  child.stderr.on('data', (b: Buffer) => (err += b.toString()));
  const closed = new Promise<number | null>((resolve) => child.on('close', resolve));
  const code = await within(closed, 120_000, 'the piped copy did not finish').finally(() => child.kill('SIGKILL'));
  assert.equal(code, 0, err);
  assert.equal(err, '', 'nothing on a piped stderr');
  assert.match(out, /^Copied big\.bin to data:\/\/\.my\/t\/piped\.bin \(200\.0 MiB in [\d.]+ s, [\d.]+ \w+\/s\)\n$/);
  assert.equal((await client.file('data://.my/t/piped.bin').stat()).size, SIZE);
});
