/**
 * `algohost doctor` (issue 25; docs/deployment.md "Checking a machine"): run as an operator runs
 * it, on this machine, against real services on loopback: its stand-in registries (a node:http
 * server answering, and a port nobody listens on), PostgreSQL, s3rver and nats-server (with
 * JetStream, and without). What it says of each is checked, and that it exits 1 exactly when a
 * check failed.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { runCli, within, WAIT_MS } from './helpers/process.ts';
import { SHARED } from './helpers/backends.ts';
import { createDatabase, postgresAvailable, startPostgres, type PostgresCluster } from './helpers/postgres.ts';
import { listKeys, s3Client, S3RVER_KEY, startS3, type S3Server } from './helpers/s3.ts';
import { NATS_SERVER, natsUnavailable, startNats, type NatsServer } from './helpers/nats.ts';

interface Result {
  check: string;
  status: 'ok' | 'warn' | 'fail' | 'skip';
  detail: string;
  fix?: string;
}

const homes: string[] = [];
const home = () => {
  const h = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-doctor-'));
  homes.push(h);
  return h;
};
after(() => {
  for (const h of homes) fs.rmSync(h, { recursive: true, force: true });
});

/** A port nobody listens on (taken, then given back). */
async function closedPort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as net.AddressInfo).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

/** A stand-in registry: answers every GET (the check takes any HTTP answer), counting them. */
async function registry(): Promise<{ url: string; hits: () => number; close: () => Promise<void> }> {
  let hits = 0;
  const srv = http.createServer((_req, res) => {
    hits++;
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(srv.address() as net.AddressInfo).port}/`, hits: () => hits, close: () => new Promise((r) => srv.close(() => r())) };
}

/** Runs the doctor with `env` (the settings an operator would give), as JSON and as text. */
async function doctor(env: Record<string, string>, h = home()): Promise<{ code: number | null; results: Map<string, Result>; text: string }> {
  const json = await runCli(['doctor', '--json'], h, 90_000, env);
  assert.ok(json.stdout.trim().startsWith('{'), `doctor --json printed JSON: ${json.stdout}${json.stderr}`);
  const results = new Map((JSON.parse(json.stdout) as { results: Result[] }).results.map((r) => [r.check, r]));
  const text = await runCli(['doctor'], h, 90_000, env);
  assert.equal(text.code, json.code, 'the same verdict as text and as JSON');
  return { code: json.code, results, text: text.stdout };
}

const failed = (results: Map<string, Result>) => [...results.values()].filter((r) => r.status === 'fail');

describe('algohost doctor', { skip: SHARED ? 'starts its own PostgreSQL, S3 and NATS: once, under test:unit' : false }, () => {
  let npm: Awaited<ReturnType<typeof registry>>;
  let pip: Awaited<ReturnType<typeof registry>>;
  before(async () => {
    npm = await registry();
    pip = await registry();
  });
  after(async () => {
    await npm?.close();
    await pip?.close();
  });

  test('one machine: a line per check; a registry that does not answer is a problem with its fix, and the exit status says so', async () => {
    const down = await closedPort();
    const { code, results, text } = await doctor({ ALGOHOST_BUILD_NPM_REGISTRY: npm.url, ALGOHOST_BUILD_PIP_INDEX_URL: `http://127.0.0.1:${down}/simple/` });
    for (const name of ['sandbox', 'user namespaces', 'cgroups', 'seccomp', 'egress fence', 'git', 'npm registry', 'pip index', 'database', 'clock', 'blob store', 'nats', 'disk']) {
      assert.ok(results.has(name), `a line for ${name}`);
      assert.match(text, new RegExp(`^(OK|WARN|FAIL|SKIP) +${name} `, 'm'), `the text has ${name}'s line`);
    }
    assert.equal(results.get('npm registry')!.status, 'ok');
    assert.ok(npm.hits() >= 2, 'the npm registry was asked (once a run)');
    const pipLine = results.get('pip index')!;
    assert.equal(pipLine.status, 'fail');
    assert.match(pipLine.detail, new RegExp(`127\\.0\\.0\\.1:${down}`));
    assert.match(pipLine.fix!, /ALGOHOST_BUILD_PIP_INDEX_URL/);
    assert.match(text, /^ +fix: .*ALGOHOST_BUILD_PIP_INDEX_URL/m, 'the fix is printed under the problem');
    assert.equal(code, 1);
    assert.match(results.get('database')!.detail, /SQLite/);
    assert.equal(results.get('nats')!.status, 'skip');
    assert.equal(results.get('git')!.status, fs.existsSync('/usr/lib/git-core/git-http-backend') ? 'ok' : 'fail');
    assert.equal(results.get('sandbox')!.status === 'ok', fs.existsSync('/usr/bin/bwrap'), 'the sandbox is ok exactly where bubblewrap is installed (and works)');
    if (fs.existsSync('/usr/bin/bwrap') && process.arch === 'x64') {
      assert.equal(results.get('seccomp')!.status, 'ok');
      assert.match(results.get('seccomp')!.detail, /unshare\(2\), allowed without it, is refused/);
    }
    assert.ok(['ok', 'warn'].includes(results.get('disk')!.status));
  });

  test('both registries answering: the exit status is 1 exactly when a line failed', async () => {
    const { code, results } = await doctor({ ALGOHOST_BUILD_NPM_REGISTRY: npm.url, ALGOHOST_BUILD_PIP_INDEX_URL: `${pip.url}simple/` });
    assert.equal(results.get('pip index')!.status, 'ok');
    assert.equal(code, failed(results).length > 0 ? 1 : 0, JSON.stringify(failed(results)));
  });

  test('a sandbox binary that is not there is a problem, with the package to install', async () => {
    const { code, results } = await doctor({ ALGOHOST_BUILD_NPM_REGISTRY: npm.url, ALGOHOST_BUILD_PIP_INDEX_URL: pip.url, ALGOHOST_BWRAP: '/nonexistent/bwrap' });
    const s = results.get('sandbox')!;
    assert.equal(s.status, 'fail');
    assert.match(s.detail, /\/nonexistent\/bwrap is not installed/);
    assert.match(s.fix!, /apt-get install bubblewrap/);
    assert.equal(code, 1);
  });

  describe('a cluster node', { skip: postgresAvailable() ?? natsUnavailable() }, () => {
    let pg: PostgresCluster;
    let s3: S3Server;
    let nats: NatsServer;
    let bare: ChildProcess | undefined;
    let bareUrl = '';
    before(async () => {
      pg = await startPostgres();
      s3 = await startS3(['doctor']);
      nats = await startNats();
      // A NATS server without JetStream.
      const port = await closedPort();
      bare = spawn(NATS_SERVER, ['-a', '127.0.0.1', '-p', String(port)], { stdio: ['ignore', 'ignore', 'pipe'] });
      let log = '';
      await within(
        new Promise<void>((resolve) => bare!.stderr!.setEncoding('utf8').on('data', (s: string) => (log += s).includes('Listening for client connections') && resolve())),
        WAIT_MS,
        'nats-server without JetStream did not start',
      );
      bareUrl = `nats://127.0.0.1:${port}`;
    });
    after(async () => {
      bare?.kill('SIGKILL');
      await nats?.stop();
      await s3?.stop();
      pg?.stop();
    });

    const clusterEnv = async (extra: Record<string, string> = {}) => ({
      ALGOHOST_BUILD_NPM_REGISTRY: npm.url,
      ALGOHOST_BUILD_PIP_INDEX_URL: pip.url,
      ALGOHOST_DATABASE_URL: await createDatabase(pg.adminUrl, 'doctor'),
      ALGOHOST_BLOBS: `s3://doctor/node?endpoint=${encodeURIComponent(s3.endpoint)}&force_path_style=true`,
      AWS_ACCESS_KEY_ID: S3RVER_KEY.access_key_id,
      AWS_SECRET_ACCESS_KEY: S3RVER_KEY.secret_access_key,
      ALGOHOST_NATS_URL: nats.url,
      ALGOHOST_CLUSTER_SECRET: 'doctor-cluster-secret-0123456789abcdef',
      ...extra,
    });

    test('PostgreSQL, S3 and NATS reached as a node reaches them: version, clock, an object written and removed, JetStream', async () => {
      const { results } = await doctor(await clusterEnv());
      assert.equal(results.get('database')!.status, 'ok', JSON.stringify(results.get('database')));
      assert.match(results.get('database')!.detail, /^PostgreSQL 15\.\d+/);
      assert.ok(!results.get('database')!.detail.includes('algohost-test'), 'no password shown');
      assert.equal(results.get('clock')!.status, 'ok', 'one machine has one clock');
      assert.match(results.get('clock')!.detail, /by \d+ ms/);
      assert.equal(results.get('blob store')!.status, 'ok', JSON.stringify(results.get('blob store')));
      assert.deepEqual(await listKeys(s3Client(s3), 'doctor', ''), [], 'the probe object is removed');
      assert.equal(results.get('nats')!.status, 'ok', JSON.stringify(results.get('nats')));
      assert.match(results.get('nats')!.detail, /JetStream on, round trip \d+ ms/);
    });

    test('a database nobody answers, a bucket that does not exist, NATS without JetStream: three problems, each with its fix', async () => {
      const down = await closedPort();
      const env = await clusterEnv({
        ALGOHOST_DATABASE_URL: `postgres://algohost:secret-pw@127.0.0.1:${down}/algohost`,
        ALGOHOST_BLOBS: `s3://no-such-bucket/x?endpoint=${encodeURIComponent(s3.endpoint)}&force_path_style=true`,
        ALGOHOST_NATS_URL: bareUrl,
      });
      const { code, results, text } = await doctor(env);
      const db = results.get('database')!;
      assert.equal(db.status, 'fail');
      assert.match(db.fix!, /ALGOHOST_DATABASE_URL/);
      assert.ok(!text.includes('secret-pw'), 'the password is not printed');
      assert.equal(results.get('clock')!.status, 'skip');
      const blobs = results.get('blob store')!;
      assert.equal(blobs.status, 'fail');
      assert.match(blobs.detail, /no bucket "no-such-bucket"/);
      const n = results.get('nats')!;
      assert.equal(n.status, 'fail');
      assert.match(n.detail, /without JetStream/);
      assert.match(n.fix!, /-js/);
      assert.equal(code, 1);
    });
  });
});
