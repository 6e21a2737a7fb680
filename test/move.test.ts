/**
 * `algohost move`: a single-machine home (SQLite + disk) carried into PostgreSQL + S3, cut
 * short by kill -9 and resumed, then served by two servers of the new deployment that have
 * never seen the home: users, keys (restricted and revoked ones too), files by SHA-256, ACLs,
 * an algorithm's build, a connected account's sealed credentials, usage, new ids after the carried
 * ones, and nothing orphaned or pending in the store.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { spawn } from 'node:child_process';
import Database from 'better-sqlite3';
import type pg from 'pg';
import { PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { createDatabase, pgQuery, postgresAvailable, startPostgres, type PostgresCluster } from './helpers/postgres.ts';
import { listKeys, s3Client, S3RVER_KEY, startS3, type S3Server } from './helpers/s3.ts';
import { api, json, startServer, tempHome } from './helpers/server.ts';
import { SHARED } from './helpers/backends.ts';
import { release, callAlgo } from './helpers/algorithms.ts';
import { connectAccount } from './helpers/connectors.ts';
import { BIN, NODE, childEnv, sha256, sleep, startServerProcess, within, type ServerProcess } from './helpers/process.ts';

const BUCKET = 'moved';
const MiB = 1024 * 1024;
const FILES = 60;
const MANY = 2500;
/** Usage rows made by hand: more than a page of the move's. */
const USAGE_ROWS = 1500;
const skip = SHARED ? 'moves a single-machine home; runs with the default backends' : postgresAvailable();

let cluster: PostgresCluster | undefined;
let s3: S3Server;
let client: S3Client;
const homes: string[] = [];
const running = new Set<ServerProcess>();
const closers: (() => Promise<void>)[] = [];

before(async () => {
  if (skip) return;
  cluster = await startPostgres();
  s3 = await startS3([BUCKET, 'external']);
  client = s3Client(s3);
});

after(async () => {
  for (const close of closers) await close().catch(() => undefined);
  for (const s of running) await s.kill('SIGKILL').catch(() => undefined);
  client?.destroy();
  await s3?.stop();
  cluster?.stop();
  for (const h of homes) fs.rmSync(h, { recursive: true, force: true });
});

interface Target {
  databaseUrl: string;
  blobsUrl: string;
  prefix: string;
  env: Record<string, string>;
}

async function target(): Promise<Target> {
  const databaseUrl = await createDatabase(cluster!.adminUrl, 'moved');
  const prefix = crypto.randomBytes(6).toString('hex');
  const blobsUrl = `s3://${BUCKET}/${prefix}?endpoint=${encodeURIComponent(s3.endpoint)}&force_path_style=true`;
  return {
    databaseUrl,
    blobsUrl,
    prefix,
    env: {
      ALGOHOST_DATABASE_URL: databaseUrl,
      ALGOHOST_BLOBS: blobsUrl,
      AWS_ACCESS_KEY_ID: S3RVER_KEY.access_key_id,
      AWS_SECRET_ACCESS_KEY: S3RVER_KEY.secret_access_key,
      ALGOHOST_CONNECTOR_NETWORK: 'any',
    },
  };
}

/** `algohost move` as a process; `started` is told once it runs. */
function moveProcess(home: string, t: Target) {
  const child = spawn(NODE, [BIN, 'move', '--home', home, '--to', t.databaseUrl, '--blobs', t.blobsUrl], {
    env: childEnv({ AWS_ACCESS_KEY_ID: S3RVER_KEY.access_key_id, AWS_SECRET_ACCESS_KEY: S3RVER_KEY.secret_access_key }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s));
  child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('close', (code, signal) => resolve({ code, signal })));
  return { child, exited, out: () => stdout, err: () => stderr };
}

async function runMove(home: string, t: Target) {
  const m = moveProcess(home, t);
  const exit = await within(m.exited, 120_000, 'algohost move did not finish').finally(() => m.child.exitCode === null && m.child.kill('SIGKILL'));
  return { ...exit, stdout: m.out(), stderr: m.err() };
}

async function objects(t: Target): Promise<string[]> {
  return listKeys(client, BUCKET, `${t.prefix}/`);
}

async function query<T extends pg.QueryResultRow>(t: Target, text: string): Promise<T[]> {
  return pgQuery<T>(t.databaseUrl, text);
}

const jsonInit = (method: string, body: unknown): RequestInit => ({ method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

describe('algohost move', { skip }, () => {
  test('a home moved into PostgreSQL + S3, interrupted and resumed, is served whole by servers that never saw it', async () => {
    // The home, made by a single-machine server.
    const home = tempHome('algohost-home-');
    homes.push(home);
    const s = await startServer({ home, env: { ALGOHOST_CONNECTOR_NETWORK: 'any' } });
    // Stopped before the move (the home is then at rest), or by after() if the test fails first.
    let open = true;
    const stop = async () => {
      if (!open) return;
      open = false;
      await s.app.close();
      await s.services.close();
    };
    closers.push(stop);
    const aliceKey = await s.user('alice');
    const bobKey = await s.user('bob');
    const alice = api(s.url, aliceKey);
    assert.equal((await alice('/v1/data/.my', jsonInit('POST', { name: 'shared', acl: { read: ['user://*'] } }))).status, 200);
    assert.equal((await alice('/v1/data/.my', jsonInit('POST', { name: 'private' }))).status, 200);
    const files = new Map<string, string>();
    for (let i = 0; i < FILES; i++) {
      const body = crypto.randomBytes(MiB + i);
      const p = `/v1/data/.my/shared/f${String(i).padStart(2, '0')}.bin`;
      assert.equal((await alice(p, { method: 'PUT', body })).status, 200);
      files.set(p, sha256(body));
    }
    assert.equal((await alice('/v1/data/.my/private/secret.txt', { method: 'PUT', body: 'only alice' })).status, 200);
    assert.equal((await alice('/v1/data/.my/shared', jsonInit('POST', { name: 'sub' }))).status, 200);
    const readOnly = (await json(await alice('/v1/users/alice/keys', jsonInit('POST', { name: 'ro', permissions: { allow_data_write: false } })))).api_key as string;
    const revoked = await json(await alice('/v1/users/alice/keys', jsonInit('POST', { name: 'gone' })));
    assert.equal((await alice(`/v1/users/alice/keys/${revoked.id as string}`, { method: 'DELETE' })).status, 204);
    await release(alice, 'alice', 'Reverse', { 'src/index.js': "exports.apply = (input) => String(input).split('').reverse().join('');\n" }, { settings: { language: 'javascript' } });
    assert.equal((await json(await callAlgo(alice, 'alice/Reverse', 'moved'))).result, 'devom');
    const creds = { endpoint: s3.endpoint, ...S3RVER_KEY, force_path_style: true };
    await connectAccount(s, 'alice', aliceKey, { label: 'ext', protocol: 'objstore', writeable: true, cred_data: creds });
    assert.equal((await alice('/v1/connector/objstore+ext/external/hello.txt', { method: 'PUT', body: 'outside' })).status, 200);
    await stop();
    // More rows than the move copies in one page: a collection of 2500 folders, made in the
    // home's database directly (the server is stopped).
    const sqlite = new Database(path.join(home, 'metadata.sqlite'));
    try {
      const owner = (sqlite.prepare("SELECT id FROM users WHERE username = 'alice'").get() as { id: number }).id;
      const bobId = (sqlite.prepare("SELECT id FROM users WHERE username = 'bob'").get() as { id: number }).id;
      const insert = sqlite.prepare("INSERT INTO nodes (owner_id, dir, name, kind, size, created_at, modified_at) VALUES (?, ?, ?, 'dir', 0, 1, 1)");
      // Bob's calls of 2020 to algorithms of alice's, one row each (usage has no id to page by).
      const usage = sqlite.prepare("INSERT INTO usage VALUES ('2020-01-01', ?, ?, 'alice', ?, '1.0.0', 'ok', 1, 250, 10, 20)");
      sqlite.transaction(() => {
        insert.run(owner, '', 'many');
        for (let i = 0; i < MANY; i++) insert.run(owner, 'many', `d${String(i).padStart(4, '0')}`);
        for (let i = 0; i < USAGE_ROWS; i++) usage.run(bobId, owner, `Old${String(i).padStart(4, '0')}`);
      })();
    } finally {
      sqlite.close();
    }

    const t = await target();
    // Cut short while copying the files: nothing of the home is visible in the database.
    const first = moveProcess(home, t);
    let seen = 0;
    for (let i = 0; i < 2000 && seen < 5 && first.child.exitCode === null; i++) {
      seen = (await objects(t)).length;
      if (seen < 5) await sleep(5);
    }
    first.child.kill('SIGKILL');
    const cut = await first.exited;
    assert.equal(cut.signal, 'SIGKILL', `the move finished before it could be cut short (it copied too fast?): ${first.err()}`);
    const partly = (await objects(t)).length;
    assert.ok(partly >= 5 && partly < FILES, `cut half-way: ${partly} objects`);
    assert.equal((await query(t, 'SELECT id FROM users')).length, 0, 'no users before the move is whole');

    // What an earlier run copied of a file that has since left the home (its server ran in
    // between): an object and its pending row, made by hand. The move must not adopt it.
    const stray = crypto.randomBytes(16).toString('hex');
    await client.send(new PutObjectCommand({ Bucket: BUCKET, Key: `${t.prefix}/blobs/${stray.slice(0, 2)}/${stray}`, Body: 'stray' }));
    await pgQuery(t.databaseUrl, 'INSERT INTO pending_blobs (blob_id, created_at, holder) VALUES ($1, $2, $3)', [stray, Date.now(), 'gone-host:1:000000000000#move']);

    // And one object of the cut run left short, as a store that keeps a cut-off upload's bytes
    // would (s3rver does): the resumed move must send it again, not keep it.
    const pendingBefore = (await query<{ blob_id: string }>(t, "SELECT blob_id FROM pending_blobs WHERE holder LIKE '%#move' AND blob_id <> '" + stray + "'")).map((r) => r.blob_id);
    const storedBefore = new Set((await objects(t)).map((k) => k.split('/').pop()!));
    const cutShort = pendingBefore.find((id) => storedBefore.has(id));
    assert.ok(cutShort, 'the cut run left an object it had written');
    await client.send(new PutObjectCommand({ Bucket: BUCKET, Key: `${t.prefix}/blobs/${cutShort.slice(0, 2)}/${cutShort}`, Body: 'short' }));

    // Resumed: what the first run sent whole is not sent again; everything is read back.
    const second = await runMove(home, t);
    assert.equal(second.code, 0, second.stderr);
    const report = JSON.parse(second.stdout) as { rows: Record<string, number>; files: { count: number; copied: number; resumed: number }; trees: { count: number }; verified: boolean };
    assert.equal(report.verified, true);
    assert.equal(report.files.count, FILES + 1);
    assert.ok(report.files.resumed >= 1, `resumed: ${JSON.stringify(report.files)}`);
    assert.equal(report.files.copied + report.files.resumed, FILES + 1);
    assert.equal(report.rows.users, 2);
    assert.equal(report.rows.api_keys, 4);
    assert.equal(report.rows.connectors, 1);
    // The rows of the hand-made usage, and alice's call of alice/Reverse, written when the server stopped.
    assert.equal(report.rows.usage, USAGE_ROWS + 1);
    assert.ok((report.rows.nodes ?? 0) > MANY + FILES, `nodes: ${report.rows.nodes}`);
    assert.ok(report.trees.count >= 2, 'the source and the build');
    assert.match(second.stderr, /verified: /);

    // A third run finds the move done and only verifies.
    const third = await runMove(home, t);
    assert.equal(third.code, 0, third.stderr);
    assert.match(third.stderr, /already holds this home/);

    // The stray is still pending (for a sweep), not made a file.
    assert.deepEqual((await query<{ blob_id: string }>(t, 'SELECT blob_id FROM pending_blobs')).map((r) => r.blob_id), [stray]);

    // Two servers of the new deployment, each with a home that has never held anything.
    const serveTarget = async () => {
      const h = tempHome('algohost-node-');
      homes.push(h);
      const p = await startServerProcess({ home: h, env: t.env });
      running.add(p);
      return p;
    };
    const [a, b] = await Promise.all([serveTarget(), serveTarget()]);

    // Nothing orphaned, nothing pending once the servers have started (their start-up sweep
    // removed the stray): every object is a file's contents or a tree.
    const referenced = new Set(
      (await query<{ blob_id: string }>(t, "SELECT blob_id FROM nodes WHERE blob_id IS NOT NULL UNION SELECT blob_id FROM artifacts")).map((r) => r.blob_id),
    );
    const stored = await objects(t);
    assert.equal(stored.length, referenced.size, 'one object per referenced blob');
    for (const key of stored) assert.ok(referenced.has(key.split('/').pop()!), `${key} is referenced`);
    assert.equal((await query(t, 'SELECT blob_id FROM pending_blobs')).length, 0);
    const aliceB = api(b.url, aliceKey);
    for (const [p, digest] of files) {
      const r = await aliceB(p);
      assert.equal(r.status, 200, p);
      assert.equal(sha256(Buffer.from(await r.arrayBuffer())), digest, p);
    }
    const bobA = api(a.url, bobKey);
    assert.equal((await bobA('/v1/data/alice/shared/f00.bin')).status, 200, 'the public ACL came along');
    assert.equal((await bobA('/v1/data/alice/private/secret.txt')).status, 404, 'so did the private one');
    // Files first, then folders, a page each here.
    const listing = await json(await aliceB('/v1/data/.my/shared'));
    assert.equal(listing.files.length, FILES);
    const folders = await json(await aliceB(`/v1/data/.my/shared?marker=${encodeURIComponent(listing.marker as string)}`));
    assert.deepEqual(folders.folders.map((f: { name: string }) => f.name), ['sub']);
    const many: string[] = [];
    for (let marker: string | undefined, pages = 0; pages === 0 || (marker && pages < 10); pages++) {
      const page = await json(await aliceB(`/v1/data/.my/many${marker ? `?marker=${encodeURIComponent(marker)}` : ''}`));
      many.push(...(page.folders ?? []).map((f: { name: string }) => f.name));
      marker = page.marker;
    }
    assert.equal(new Set(many).size, MANY, 'every folder of the large collection, once');
    assert.equal((await api(a.url, readOnly)('/v1/data/.my/shared/new.txt', { method: 'PUT', body: 'x' })).status, 403, 'a restricted key stays restricted');
    assert.equal((await api(a.url, revoked.api_key as string)('/v1/data/.my/shared')).status, 401, 'a revoked key stays revoked');
    // The build reaches a server that has never built it; the sealed credentials still open.
    const called = await json(await callAlgo(api(a.url, aliceKey), 'alice/Reverse', 'moved'));
    assert.equal(called.result, 'devom', JSON.stringify(called));
    // Usage came along: the call made in the home and the one just made (server a, which
    // writes its own before it reads), and bob's of 2020.
    const usage = await json(await api(a.url, aliceKey)('/v1/users/alice/usage'));
    assert.equal(usage.as_caller.total.calls, 2, JSON.stringify(usage));
    assert.deepEqual([...new Set(usage.as_caller.days.map((d: { algorithm: string }) => d.algorithm))], ['alice/Reverse']);
    const old = await json(await aliceB('/v1/users/alice/usage?from=2020-01-01&to=2020-01-01'));
    assert.deepEqual(old.as_owner.total, { calls: USAGE_ROWS, seconds: USAGE_ROWS / 4, bytes_in: USAGE_ROWS * 10, bytes_out: USAGE_ROWS * 20, errors: 0, timeouts: 0 });
    assert.equal(old.as_owner.days.length, USAGE_ROWS);
    const outside = await api(a.url, aliceKey)('/v1/connector/objstore+ext/external/hello.txt');
    assert.equal(outside.status, 200, await outside.clone().text());
    assert.equal(await outside.text(), 'outside');
    // New rows are numbered after the carried ones.
    const carol = spawn(NODE, [BIN, 'user', 'create', 'carol'], { env: childEnv(t.env), stdio: ['ignore', 'pipe', 'pipe'] });
    let carolOut = '';
    carol.stdout.setEncoding('utf8').on('data', (x: string) => (carolOut += x));
    assert.equal(await within(new Promise((resolve) => carol.once('close', resolve)), 30_000, 'user create'), 0);
    const carolKey = (JSON.parse(carolOut) as { api_key: string }).api_key;
    assert.equal((await api(a.url, carolKey)('/v1/data/.my', jsonInit('POST', { name: 'mine' }))).status, 200);
    assert.equal((await aliceB('/v1/data/.my', jsonInit('POST', { name: 'after' }))).status, 200);
    assert.equal((await aliceB('/v1/data/.my/after/new.txt', { method: 'PUT', body: 'new' })).status, 200);
    await release(aliceB, 'alice', 'Again', { 'src/index.js': "exports.apply = () => 'again';\n" }, { settings: { language: 'javascript' } });
    assert.equal((await json(await callAlgo(api(a.url, aliceKey), 'alice/Again', ''))).result, 'again');
  });

  test('a move refuses a home in use, a database that holds data, and bad settings, touching nothing', async () => {
    const home = tempHome('algohost-home-');
    homes.push(home);
    const served = await startServerProcess({ home });
    running.add(served);
    const t = await target();
    const busy = await runMove(home, t);
    assert.equal(busy.code, 1);
    assert.match(busy.stderr, /the home .* is in use by process \d+/);
    await served.kill('SIGTERM');
    running.delete(served);

    // A deployment that has served already (it has users of its own).
    const used = await target();
    const node = await startServerProcess({ home: tempHome('algohost-node-'), env: used.env });
    running.add(node);
    await node.kill('SIGTERM');
    running.delete(node);
    await query(used, "INSERT INTO users (username, username_lc, created_at) VALUES ('zed', 'zed', 1)");
    const full = await runMove(home, used);
    assert.equal(full.code, 1);
    assert.match(full.stderr.trimEnd().split('\n').pop()!, /^algohost: the database already holds users of its own; move into an empty database/);
    assert.equal((await objects(used)).length, 0);

    const bad = await runMove(home, { ...t, databaseUrl: 'postgres://algohost:x@127.0.0.1:1/db' });
    assert.equal(bad.code, 1);
    assert.match(bad.stderr.trimEnd().split('\n').pop()!, /^algohost: ALGOHOST_DATABASE_URL \(.*\): nothing answers at that address/);
  });
});
