/**
 * Several servers on one PostgreSQL + S3 (issue 13): real server processes with homes of their
 * own, a throwaway PostgreSQL cluster and an S3 protocol server on loopback. Two servers serve
 * the same users and files; a key revoked on one is refused on the other within a second; a
 * server killed mid-upload leaves nothing partial or orphaned after a restart, and leaves a
 * live neighbour's upload alone; bad settings stop the start in one line; a backend lost while
 * running answers 503 with a clear code and the server recovers when it is back.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import { spawn } from 'node:child_process';
import type pg from 'pg';
import { PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { createDatabase, pgQuery, postgresAvailable, startPostgres, type PostgresCluster } from './helpers/postgres.ts';
import { listKeys, s3Client, S3RVER_KEY, startS3, type S3Server } from './helpers/s3.ts';
import { tempHome } from './helpers/server.ts';
import { BIN, NODE, WAIT_MS, childEnv, getBytes, sha256, sleep, slowly, startServerProcess, streamRequest, within, type ServerProcess } from './helpers/process.ts';

const BUCKET = 'shared';
const MiB = 1024 * 1024;
const missing = postgresAvailable();

let cluster: PostgresCluster | undefined;
let adminUrl = process.env.ALGOHOST_TEST_PG_URL;
let s3: S3Server;
let client: S3Client;
const homes: string[] = [];
const running = new Set<ServerProcess>();

before(async () => {
  if (missing) return;
  if (!adminUrl) {
    cluster = await startPostgres();
    adminUrl = cluster.adminUrl;
  }
  s3 = await startS3([BUCKET]);
  client = s3Client(s3);
});

after(async () => {
  for (const s of running) await s.kill('SIGKILL').catch(() => undefined);
  client?.destroy();
  await s3?.stop();
  cluster?.stop();
  for (const h of homes) fs.rmSync(h, { recursive: true, force: true });
});

interface Deployment {
  env: Record<string, string>;
  databaseUrl: string;
  prefix: string;
}

/** A new database and key prefix: one deployment's shared state. */
async function deployment(extra: Record<string, string> = {}): Promise<Deployment> {
  const databaseUrl = await createDatabase(adminUrl!, 'shared');
  const prefix = crypto.randomBytes(6).toString('hex');
  return {
    databaseUrl,
    prefix,
    env: {
      ALGOHOST_DATABASE_URL: databaseUrl,
      ALGOHOST_BLOBS: `s3://${BUCKET}/${prefix}?endpoint=${encodeURIComponent(s3.endpoint)}&force_path_style=true`,
      AWS_ACCESS_KEY_ID: S3RVER_KEY.access_key_id,
      AWS_SECRET_ACCESS_KEY: S3RVER_KEY.secret_access_key,
      ...extra,
    },
  };
}

/** A server of `d` with a home of its own (a node of the deployment). */
async function node(d: Deployment, home = tempHome('algohost-node-')): Promise<ServerProcess> {
  if (!homes.includes(home)) homes.push(home);
  const s = await startServerProcess({ home, env: d.env });
  running.add(s);
  return s;
}

/** `algohost ARGS` with the deployment's settings (no home needed: the users are in the database). */
async function cli(d: Deployment, args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const home = tempHome('algohost-cli-');
  homes.push(home);
  const child = spawn(NODE, [BIN, ...args, '--home', home], { env: childEnv(d.env), stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s));
  child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
  const code = await within(new Promise<number | null>((resolve) => child.once('close', resolve)), WAIT_MS, `algohost ${args.join(' ')}`);
  return { code, stdout, stderr };
}

async function user(d: Deployment, name: string): Promise<string> {
  const r = await cli(d, ['user', 'create', name]);
  assert.equal(r.code, 0, r.stderr);
  return (JSON.parse(r.stdout) as { api_key: string }).api_key;
}

const call = (base: string, key: string, p: string, init: RequestInit = {}) =>
  fetch(base + p, { ...init, headers: { authorization: `Simple ${key}`, ...(init.headers as Record<string, string>) } });

/** Every object under the deployment's prefix, by key. */
async function objects(d: Deployment): Promise<string[]> {
  return listKeys(client, BUCKET, `${d.prefix}/`);
}

async function query<T extends pg.QueryResultRow>(d: Deployment, text: string, values: unknown[] = []): Promise<T[]> {
  return pgQuery<T>(d.databaseUrl, text, values);
}

describe('servers sharing PostgreSQL + S3', { skip: missing }, () => {
  test('two servers serve the same users and files; a key revoked on one is refused on the other within a second', async () => {
    const d = await deployment();
    const [a, b] = await Promise.all([node(d), node(d)]);
    const key = await user(d, 'alice');
    const other = await user(d, 'bob');

    assert.equal((await call(a.url, key, '/v1/data/.my', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"name":"c"}' })).status, 200);
    const body = crypto.randomBytes(3 * MiB + 17);
    assert.equal((await call(a.url, key, '/v1/data/.my/c/f.bin', { method: 'PUT', body })).status, 200);
    const listed = (await (await call(b.url, key, '/v1/data/.my/c')).json()) as { files: { filename: string; size: number }[] };
    assert.deepEqual(listed.files.map((f) => [f.filename, f.size]), [['f.bin', body.length]]);
    const got = await getBytes(`${b.url}/v1/data/.my/c/f.bin`, key);
    assert.equal(got.status, 200);
    assert.equal(sha256(got.body), sha256(body), 'read whole through the other server');
    const range = await call(b.url, key, '/v1/data/.my/c/f.bin', { headers: { range: 'bytes=100-199' } });
    assert.equal(range.status, 206);
    assert.deepEqual(Buffer.from(await range.arrayBuffer()), body.subarray(100, 200));

    // A listing marker made by one server pages on the other (they share the secret): a
    // directory of more than one page (1000 entries), its rows made directly in the database.
    await query(
      d,
      "INSERT INTO nodes (owner_id, dir, name, kind, size, created_at, modified_at) SELECT u.id, 'c', 'd' || lpad(g::text, 4, '0'), 'dir', 0, 1, 1 FROM users u, generate_series(1, 1001) g WHERE u.username = 'alice'",
    );
    // Pages alternate between the servers: each takes the other's marker.
    const names: string[] = [];
    let marker: string | undefined;
    let pages = 0;
    do {
      const base = pages % 2 === 0 ? a.url : b.url;
      const page = await call(base, key, `/v1/data/.my/c${marker ? `?marker=${encodeURIComponent(marker)}` : ''}`);
      assert.equal(page.status, 200, await page.clone().text());
      const listing = (await page.json()) as { files?: { filename: string }[]; folders?: { name: string }[]; marker?: string };
      for (const f of listing.files ?? []) names.push(f.filename);
      for (const f of listing.folders ?? []) names.push(f.name);
      marker = listing.marker;
      pages++;
    } while (marker && pages < 10);
    assert.ok(pages >= 2, 'more than one page');
    assert.equal(names.length, 1002, 'the file and every folder');
    assert.equal(new Set(names).size, 1002, 'each once');

    // An ACL changed on one server holds on the other at once.
    assert.equal((await call(b.url, other, '/v1/data/alice/c/f.bin')).status, 404, 'private: not even its name');
    assert.equal((await call(a.url, key, '/v1/data/.my/c', { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: '{"acl":{"read":["user://*"]}}' })).status, 200);
    assert.equal((await call(b.url, other, '/v1/data/alice/c/f.bin')).status, 200);

    assert.equal((await call(b.url, key, '/v1/data/.my/c/f.bin', { method: 'DELETE' })).status, 200);
    assert.equal((await call(a.url, key, '/v1/data/.my/c/f.bin')).status, 404);

    // A second key, warm in both servers' caches, revoked through one of them.
    const made = await call(a.url, key, '/v1/users/alice/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"name":"spare"}' });
    assert.equal(made.status, 201, await made.clone().text());
    const spare = (await made.json()) as { id: string; api_key: string };
    for (let i = 0; i < 3; i++) {
      for (const s of [a, b]) {
        const r = await call(s.url, spare.api_key, '/v1/data/.my/c');
        assert.equal(r.status, 200, `${s === a ? 'A' : 'B'}, round ${i}: ${await r.text()}`);
      }
    }
    const t0 = performance.now();
    assert.equal((await call(a.url, key, `/v1/users/alice/keys/${spare.id}`, { method: 'DELETE' })).status, 204);
    let status = 200;
    let elapsed = 0;
    while (status === 200 && elapsed < 5000) {
      status = (await call(b.url, spare.api_key, '/v1/data/.my/c')).status;
      elapsed = performance.now() - t0;
    }
    assert.equal(status, 401, 'refused on the other server');
    assert.ok(elapsed <= 1000, `refused within 1 s of the revocation (took ${Math.round(elapsed)} ms)`);

    const health = (await (await fetch(`${b.url}/health`)).json()) as { metadata: { driver: string; ok: boolean }; blobs: { driver: string; ok: boolean } };
    assert.deepEqual([health.metadata.driver, health.metadata.ok, health.blobs.driver, health.blobs.ok], ['postgres', true, 's3', true]);
  });

  test('kill -9 mid-upload: after a restart nothing is partial or orphaned, and a live neighbour keeps its upload', async () => {
    const d = await deployment();
    const homeA = tempHome('algohost-node-');
    let a = await node(d, homeA);
    const b = await node(d);
    const key = await user(d, 'alice');
    assert.equal((await call(a.url, key, '/v1/data/.my', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"name":"c"}' })).status, 200);
    const kept = crypto.randomBytes(2 * MiB);
    assert.equal((await call(a.url, key, '/v1/data/.my/c/kept', { method: 'PUT', body: kept })).status, 200);

    // Uploads on A, held half-way: a small one (one PutObject at the end) and large ones (multipart).
    const gates: (() => void)[] = [];
    const uploads = [1, 20, 20].map((mib, i) => {
      const data = crypto.randomBytes(mib * MiB);
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      gates.push(release);
      return streamRequest(`${a.url}/v1/data/.my/c/cut${i}`, key, slowly(data, { chunkSize: 256 * 1024, pauseAt: Math.floor(data.length * 0.6), gate }));
    });
    // And one on B that must survive A's death and A's recovery.
    let releaseB!: () => void;
    const gateB = new Promise<void>((resolve) => (releaseB = resolve));
    const neighbour = crypto.randomBytes(12 * MiB);
    const onB = streamRequest(`${b.url}/v1/data/.my/c/neighbour`, key, slowly(neighbour, { chunkSize: 256 * 1024, pauseAt: 10 * MiB, gate: gateB }));

    // A blob that was stored but never committed by a server that died (the window between
    // the store's answer and the metadata commit), made by hand: recovery must remove it.
    const stray = crypto.randomBytes(16).toString('hex');
    await client.send(new PutObjectCommand({ Bucket: BUCKET, Key: `${d.prefix}/blobs/${stray.slice(0, 2)}/${stray}`, Body: 'stray' }));
    await query(d, 'INSERT INTO pending_blobs (blob_id, created_at, holder) VALUES ($1, $2, $3)', [stray, Date.now(), 'gone-host:1:000000000000']);

    const t0 = Date.now();
    for (;;) {
      const rows = await query<{ n: number }>(d, 'SELECT count(*)::int AS n FROM pending_blobs');
      if (rows[0]!.n >= 5) break;
      if (Date.now() - t0 > WAIT_MS) throw new Error('the uploads did not begin');
      await sleep(50);
    }
    await a.kill('SIGKILL');
    running.delete(a);
    for (const r of await Promise.all(uploads.map((u) => u.result))) assert.equal(r.ok, false, 'the client of a killed server sees its upload fail');

    a = await node(d, homeA);
    assert.equal((await call(a.url, key, '/v1/data/.my/c/cut0')).status, 404);
    assert.equal((await call(a.url, key, '/v1/data/.my/c/cut1')).status, 404);
    const keptNow = await getBytes(`${a.url}/v1/data/.my/c/kept`, key);
    assert.equal(sha256(keptNow.body), sha256(kept), 'an acknowledged upload survives whole');

    releaseB();
    for (const g of gates) g();
    const done = await onB.result;
    assert.ok(done.ok && done.status === 200, `the neighbour's upload completes: ${JSON.stringify(done)}`);
    const back = await getBytes(`${a.url}/v1/data/.my/c/neighbour`, key);
    assert.equal(sha256(back.body), sha256(neighbour));

    // Exactly the referenced blobs are in the bucket; nothing is pending.
    const referenced = (await query<{ blob_id: string }>(d, "SELECT blob_id FROM nodes WHERE kind = 'file'")).map((r) => r.blob_id);
    assert.deepEqual(
      await objects(d),
      referenced.map((id) => `${d.prefix}/blobs/${id.slice(0, 2)}/${id}`).sort(),
    );
    assert.deepEqual(await query(d, 'SELECT blob_id FROM pending_blobs'), []);
  });

  test('a server killed and never restarted: a live neighbour sweeps what it left in flight', async () => {
    const d = await deployment();
    const a = await node(d);
    const b = await startServerProcess({ home: tempHome('algohost-node-'), env: { ...d.env, ALGOHOST_SWEEP_INTERVAL_MS: '200' } });
    running.add(b);
    const key = await user(d, 'alice');
    assert.equal((await call(a.url, key, '/v1/data/.my', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"name":"c"}' })).status, 200);
    // A large upload on A held half-way: its parts are in the store, its row pending.
    const data = crypto.randomBytes(20 * MiB);
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const upload = streamRequest(`${a.url}/v1/data/.my/c/cut`, key, slowly(data, { chunkSize: 256 * 1024, pauseAt: 12 * MiB, gate }));
    const t0 = Date.now();
    while ((await query<{ n: number }>(d, 'SELECT count(*)::int AS n FROM pending_blobs'))[0]!.n < 1) {
      if (Date.now() - t0 > WAIT_MS) throw new Error('the upload did not begin');
      await sleep(50);
    }
    // A live server's pending upload is left alone by B's sweeps.
    await sleep(600);
    assert.equal((await query<{ n: number }>(d, 'SELECT count(*)::int AS n FROM pending_blobs'))[0]!.n, 1, "a live server's upload is not swept");
    // And a blob stored by a server that died between the store's answer and its commit.
    const stray = crypto.randomBytes(16).toString('hex');
    await client.send(new PutObjectCommand({ Bucket: BUCKET, Key: `${d.prefix}/blobs/${stray.slice(0, 2)}/${stray}`, Body: 'stray' }));
    await query(d, 'INSERT INTO pending_blobs (blob_id, created_at, holder) VALUES ($1, $2, $3)', [stray, Date.now(), 'gone-host:1:000000000000']);

    await a.kill('SIGKILL');
    running.delete(a);
    release();
    assert.equal((await upload.result).ok, false);
    // Without any restart, B's next sweeps remove both.
    const t1 = Date.now();
    let left = -1;
    while (Date.now() - t1 < 10_000) {
      left = (await query<{ n: number }>(d, 'SELECT count(*)::int AS n FROM pending_blobs'))[0]!.n;
      if (left === 0) break;
      await sleep(100);
    }
    assert.equal(left, 0, 'nothing pending once the neighbour has swept');
    assert.deepEqual(await objects(d), [], 'no object of the dead server is left');
    assert.equal((await call(b.url, key, '/v1/data/.my/c/cut')).status, 404);
  });

  test('bad settings stop the start with one line naming the setting', async () => {
    const d = await deployment();
    const cases: [Record<string, string>, RegExp][] = [
      [{ ALGOHOST_BLOBS: `s3://nosuchbucket/x?endpoint=${encodeURIComponent(s3.endpoint)}` }, /^algohost: ALGOHOST_BLOBS \(.*\): there is no bucket "nosuchbucket"; create it first$/],
      // s3rver knows one access key id (it does not check the secret's signature): another is refused.
      [{ AWS_ACCESS_KEY_ID: 'NOSUCHKEY' }, /^algohost: ALGOHOST_BLOBS \(.*\): the store refused the credentials/],
      [{ ALGOHOST_BLOBS: `s3://${BUCKET}/x?endpoint=http://127.0.0.1:1` }, /^algohost: ALGOHOST_BLOBS \(.*\): the store cannot be reached/],
      [{ ALGOHOST_DATABASE_URL: 'postgres://algohost:x@127.0.0.1:1/db' }, /^algohost: ALGOHOST_DATABASE_URL \(postgres:\/\/algohost:\*\*\*@127\.0\.0\.1:1\/db\): nothing answers at that address/],
      [{ ALGOHOST_DATABASE_URL: 'mysql://x@y/z' }, /^algohost: ALGOHOST_DATABASE_URL must look like postgres:\/\//],
    ];
    for (const [env, expected] of cases) {
      const home = tempHome('algohost-bad-');
      homes.push(home);
      const child = spawn(NODE, [BIN, 'serve', '--port', '0', '--home', home, '--no-demo'], { env: childEnv({ ...d.env, ...env }), stdio: ['ignore', 'pipe', 'pipe'] });
      let stderr = '';
      child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
      child.stdout.resume();
      const code = await within(new Promise<number | null>((resolve) => child.once('close', resolve)), 30_000, `serve with ${JSON.stringify(env)} did not stop`).finally(
        () => child.exitCode === null && child.kill('SIGKILL'),
      );
      assert.equal(code, 1, stderr);
      const lines = stderr.trimEnd().split('\n');
      assert.equal(lines.length, 1, `one line: ${stderr}`);
      assert.match(lines[0]!, expected);
    }
  });

  test('a file store lost while running answers 503 storage_unavailable, and the server recovers when it is back', async () => {
    const d = await deployment();
    const s = await node(d);
    const key = await user(d, 'alice');
    assert.equal((await call(s.url, key, '/v1/data/.my', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"name":"c"}' })).status, 200);
    assert.equal((await call(s.url, key, '/v1/data/.my/c/f', { method: 'PUT', body: 'before' })).status, 200);
    await s3.halt();
    try {
      const t0 = performance.now();
      const get = await call(s.url, key, '/v1/data/.my/c/f');
      assert.equal(get.status, 503);
      assert.equal(((await get.json()) as { error: { code: string } }).error.code, 'storage_unavailable');
      const put = await call(s.url, key, '/v1/data/.my/c/g', { method: 'PUT', body: 'during' });
      assert.equal(put.status, 503);
      assert.ok(performance.now() - t0 < 30_000, 'answered, not hung');
      assert.equal((await call(s.url, key, '/v1/data/.my/c/g')).status, 404, 'nothing half-written is visible');
      const health = await fetch(`${s.url}/health`);
      assert.equal(health.status, 503);
      assert.equal(((await health.json()) as { blobs: { ok: boolean } }).blobs.ok, false);
    } finally {
      await s3.resume();
    }
    assert.equal(await (await call(s.url, key, '/v1/data/.my/c/f')).text(), 'before');
    assert.equal((await call(s.url, key, '/v1/data/.my/c/g', { method: 'PUT', body: 'after' })).status, 200);
    assert.equal((await fetch(`${s.url}/health`)).status, 200);
  });

  test('a database lost while running answers 503 metadata_unavailable, and the server recovers when it is back', async () => {
    // A cluster of this test's own: it is stopped and started again.
    const own = await startPostgres();
    try {
      const databaseUrl = await createDatabase(own.adminUrl);
      const d: Deployment = { ...(await deployment()), databaseUrl };
      d.env.ALGOHOST_DATABASE_URL = databaseUrl;
      const s = await node(d);
      const key = await user(d, 'alice');
      assert.equal((await call(s.url, key, '/v1/data/.my', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"name":"c"}' })).status, 200);
      own.halt();
      const t0 = performance.now();
      const r = await call(s.url, key, '/v1/data/.my/c');
      assert.equal(r.status, 503);
      assert.equal(((await r.json()) as { error: { code: string } }).error.code, 'metadata_unavailable');
      assert.ok(performance.now() - t0 < 15_000, 'answered, not hung');
      assert.equal((await fetch(`${s.url}/health`)).status, 503);
      own.start();
      let status = 0;
      for (let i = 0; i < 100 && status !== 200; i++) {
        status = (await call(s.url, key, '/v1/data/.my/c')).status;
        if (status !== 200) await sleep(100);
      }
      assert.equal(status, 200, 'serves again once the database is back');
    } finally {
      own.stop();
    }
  });
});
