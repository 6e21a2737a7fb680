/**
 * `algohost trial cluster` (issue 25: a one-command local cluster; docs/deployment.md): started
 * as a new operator starts it, it brings up PostgreSQL, s3rver, nats-server, an API node and two
 * workers on loopback; the demo algorithm answers through them, a file goes to S3 and back; and
 * SIGTERM (twice, as an impatient Ctrl-C would) stops every process it started and removes its
 * directory.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import { BIN, childEnv, NODE, within } from './helpers/process.ts';
import { SHARED } from './helpers/backends.ts';
import { postgresAvailable } from './helpers/postgres.ts';
import { natsUnavailable } from './helpers/nats.ts';

async function freePort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as net.AddressInfo).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** Every process whose command line names `text`. */
const processesNaming = (text: string) => {
  try {
    return execFileSync('/usr/bin/pgrep', ['-f', text], { encoding: 'utf8' }).trim().split('\n').filter(Boolean);
  } catch {
    return [];
  }
};

test('a whole cluster on loopback from one command: it answers, and Ctrl-C leaves nothing behind', { skip: SHARED ? 'starts its own cluster: once, under test:unit' : (postgresAvailable() ?? natsUnavailable()), timeout: 300_000 }, async () => {
  const port = await freePort();
  const child = spawn(NODE, [BIN, 'trial', 'cluster', '--port', String(port), '--json'], { env: childEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (s: string) => (stdout += s));
  child.stderr!.setEncoding('utf8').on('data', (s: string) => (stderr += s));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  try {
    const line = await within(
      new Promise<string>((resolve, reject) => {
        child.stdout!.on('data', () => stdout.includes('\n') && resolve(stdout.split('\n')[0]!));
        void exited.then((code) => reject(new Error(`the trial exited (${code}) before it was up:\n${stdout}\n${stderr}`)));
      }),
      240_000,
      'the trial did not come up',
    );
    const up = JSON.parse(line) as { api: string; postgres: string; dir: string; demo_key_file: string; workers: string[]; pids: Record<string, number> };
    assert.deepEqual(up.workers, ['worker-1', 'worker-2']);
    assert.match(up.postgres, /^postgres:\/\/algohost:\*\*\*@127\.0\.0\.1:\d+\/algohost$/, 'no password printed');
    const key = fs.readFileSync(up.demo_key_file, 'utf8').trim();
    const auth = { authorization: `Simple ${key}` };
    // The demo algorithm, built on the API node, runs on a worker node.
    const call = await fetch(`${up.api}/v1/algo/demo/Hello`, { method: 'POST', headers: { ...auth, 'content-type': 'text/plain' }, body: 'trial' });
    assert.equal(call.status, 200);
    assert.equal(((await call.json()) as { result: string }).result, 'Hello trial');
    // A file through the shared backends.
    assert.equal((await fetch(`${up.api}/v1/data/.my`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ name: 't' }) })).status, 200);
    assert.equal((await fetch(`${up.api}/v1/data/.my/t/a.txt`, { method: 'PUT', headers: auth, body: 'in S3' })).status, 200);
    assert.equal(await (await fetch(`${up.api}/v1/data/.my/t/a.txt`, { headers: auth })).text(), 'in S3');
    const health = (await (await fetch(`${up.api}/health`)).json()) as { role: string; metadata: { driver: string }; blobs: { driver: string }; nats: { ok: boolean } };
    assert.equal(health.role, 'api');
    assert.equal(health.metadata.driver, 'postgres');
    assert.equal(health.blobs.driver, 's3');
    assert.equal(health.nats.ok, true);
    for (const [name, pid] of Object.entries(up.pids)) assert.ok(alive(pid), `${name} runs`);
    assert.ok(processesNaming(up.dir).length >= 5, 'PostgreSQL, S3, NATS and the nodes run from the trial directory');

    child.kill('SIGTERM');
    child.kill('SIGTERM');
    assert.equal(await within(exited, 120_000, 'the trial did not stop'), 0, stderr);
    for (const [name, pid] of Object.entries(up.pids)) assert.ok(!alive(pid), `${name} (${pid}) is gone`);
    assert.deepEqual(processesNaming(up.dir), [], 'nothing started from the trial directory runs (PostgreSQL included)');
    assert.ok(!fs.existsSync(up.dir), 'its directory is removed');
  } finally {
    if (child.exitCode === null) {
      child.kill('SIGKILL');
      const dir = /"dir":"([^"]+)"/.exec(stdout)?.[1];
      if (dir) for (const pid of processesNaming(dir)) process.kill(Number(pid), 'SIGKILL');
    }
  }
});
