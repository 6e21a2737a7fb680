/**
 * A cluster on loopback (docs/cluster.md): Debian's nats-server with JetStream, a throwaway
 * PostgreSQL, s3rver, an API node (`serve --role api`) and a worker node (`algohost worker`) as
 * real processes. Calls made through the API node run on the worker, SDK requests of those
 * calls come back to the API node and act as the caller, and the faults the issue names are
 * tried: no worker, a malformed message on the bus, NATS unreachable at start.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { api, json, tempHome } from './helpers/server.ts';
import { release } from './helpers/algorithms.ts';
import { runCli, startServerProcess, within, WAIT_MS, type ServerProcess } from './helpers/process.ts';
import { startWorker as startClusterWorker, type WorkerProcess } from './helpers/cluster.ts';
import { createDatabase, postgresAvailable, startPostgres, type PostgresCluster } from './helpers/postgres.ts';
import { S3RVER_KEY, startS3, type S3Server } from './helpers/s3.ts';
import { natsUnavailable, startNats, type NatsServer } from './helpers/nats.ts';
import { frame, RUN_SUBJECT, unframe } from '../src/cluster/messages.ts';
import { ClusterKey } from '../src/cluster/seal.ts';
import { natsOptions } from '../src/cluster/nats.ts';

// It starts its own PostgreSQL, S3 and NATS: run once, in test:unit, not again in test:shared.
const skip = (process.env.ALGOHOST_TEST_BACKENDS ? 'starts its own backends: runs in test:unit' : undefined) ?? natsUnavailable() ?? postgresAvailable();
const BUCKET = 'cluster';

let pg: PostgresCluster;
let s3: S3Server;
let nats: NatsServer;
/** The backends and the cluster's secret and CA: every node's settings but its NATS user. */
let env: Record<string, string>;
/** An API node's settings (its NATS user: algohost-api). */
let apiEnv: Record<string, string>;
const SECRET = crypto.randomBytes(32).toString('hex');
let apiNode: ServerProcess;
let worker: WorkerProcess | undefined;
let alice: ReturnType<typeof api>;
let aliceKey: string;
const homes: string[] = [];

function home(): string {
  const h = tempHome('algohost-cluster-');
  homes.push(h);
  return h;
}

/** What a node is given besides its URL to reach the bus: the test server's CA. */
function busFiles() {
  return { creds: undefined, ca: nats.ca, cert: undefined, key: undefined };
}

/** `algohost worker` with the cluster's settings (and `extra`); resolves once it says it is ready. */
function startWorker(extra: Record<string, string> = {}, args: string[] = []): Promise<WorkerProcess> {
  return startClusterWorker({ ...env, ...nats.nextWorker(), ...extra }, args);
}

before(async () => {
  if (skip) return;
  // The bus as docs/cluster.md says to run it: a user per role, TLS, every message sealed.
  // Each kept as soon as it is up, so that after() stops it even when another failed to start
  // (a server left running would keep this file's process alive for ever).
  await Promise.all([startPostgres().then((p) => (pg = p)), startS3([BUCKET]).then((s) => (s3 = s)), startNats({ secure: true }).then((n) => (nats = n))]);
  env = {
    ALGOHOST_DATABASE_URL: await createDatabase(pg.adminUrl, 'cluster'),
    ALGOHOST_BLOBS: `s3://${BUCKET}/c?endpoint=${encodeURIComponent(s3.endpoint)}&force_path_style=true`,
    AWS_ACCESS_KEY_ID: S3RVER_KEY.access_key_id,
    AWS_SECRET_ACCESS_KEY: S3RVER_KEY.secret_access_key,
    ALGOHOST_NATS_CA: nats.ca!,
    ALGOHOST_CLUSTER_SECRET: SECRET,
  };
  apiEnv = { ...env, ALGOHOST_NATS_URL: nats.urlFor('api') };
  apiNode = await startServerProcess({ home: home(), env: apiEnv, args: ['--role', 'api'] });
  worker = await startWorker();
  const created = await runCli(['user', 'create', 'alice'], home(), WAIT_MS, env);
  assert.equal(created.code, 0, created.stderr);
  aliceKey = (JSON.parse(created.stdout) as { api_key: string }).api_key;
  alice = api(apiNode.url, aliceKey);
  const js = { language: 'javascript' };
  await release(
    alice,
    'alice',
    'Kinds',
    {
      'src/index.js': `export async function apply(input, ctx) {
  if (input === 'fail') throw Object.assign(new Error('that will not do'), { error_type: 'InputError' });
  if (input === 'read') return await ctx.client.file('data://.my/c/note.txt').getString();
  if (input === 'big') return 'x'.repeat(3 * 1024 * 1024);
  if (input === 'print a lot') {
    for (let i = 0; i < 1600; i++) console.log('y'.repeat(1023));
    return 'printed';
  }
  if (input === 'read big') return (await ctx.client.file('data://.my/c/big.bin').get()).length;
  if (input === 'write big') {
    await ctx.client.file('data://.my/c/written.bin').put(Buffer.alloc(3 * 1024 * 1024, 7));
    return 'written';
  }
  if (typeof input === 'string' && input.startsWith('sleep ')) {
    await new Promise((r) => setTimeout(r, Number(input.slice(6))));
    return 'slept';
  }
  return input;
}
`,
    },
    { settings: js },
  );
  const made = await alice('/v1/data/.my', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'c' }) });
  assert.equal(made.status, 200, await made.text());
  assert.equal((await alice('/v1/data/.my/c/note.txt', { method: 'PUT', body: 'a note of alice' })).status, 200);
});

after(async () => {
  worker?.child.kill('SIGKILL');
  await apiNode?.kill();
  await Promise.all([nats?.stop(), s3?.stop()]);
  pg?.stop();
  for (const h of homes) fs.rmSync(h, { recursive: true, force: true });
});

/** An async call through `who`; its request id. */
async function accept(who: typeof alice, input: string): Promise<string> {
  const r = await who('/v1/algo/alice/Kinds?output=void', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: input });
  assert.equal(r.status, 200, await r.clone().text());
  const body = await json(r);
  assert.equal(body.async, true);
  return body.request_id as string;
}

/** Polls GET /v1/requests/:id until it is done (bounded). */
async function answerOf(who: typeof alice, id: string, ms = 30_000): Promise<Awaited<ReturnType<typeof json>>> {
  const until = Date.now() + ms;
  for (;;) {
    const r = await who(`/v1/requests/${id}`);
    if (r.status === 200) {
      const body = await json(r);
      if (body.status === 'done') return body;
    }
    assert.ok(Date.now() < until, `request ${id} not done after ${ms} ms (last: ${r.status})`);
    await new Promise((res) => setTimeout(res, 100));
  }
}

function call(input: string, query = '') {
  return alice(`/v1/algo/alice/Kinds${query}`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: input });
}

describe('an API node and a worker node over NATS', { skip }, () => {
  test('a call goes through the API node to the worker and back, as on one node', async () => {
    const r = await call('hello');
    assert.equal(r.status, 200);
    const body = await json(r);
    assert.equal(body.result, 'hello');
    assert.equal(body.metadata.content_type, 'text');
    assert.equal(typeof body.metadata.duration, 'number');

    const raw = await call('raw bytes', '?output=raw');
    assert.equal(await raw.text(), 'raw bytes');

    const failed = await json(await call('fail'));
    assert.equal(failed.error.error_type, 'InputError');
    assert.equal(failed.error.message, 'that will not do');
  });

  test("the algorithm's SDK requests come back to the API node and act as the caller", async () => {
    const body = await json(await call('read'));
    assert.equal(body.result, 'a note of alice');
  });

  test('inputs, results and SDK bodies larger than a NATS message cross whole, in parts', async () => {
    // nats-server's default max_payload is 1 MiB.
    const big = await json(await call('big'));
    assert.equal(big.result, 'x'.repeat(3 * 1024 * 1024));
    const input = crypto.randomBytes(5 * 1024 * 1024);
    const raw = await alice('/v1/algo/alice/Kinds?output=raw', { method: 'POST', headers: { 'content-type': 'application/octet-stream' }, body: input });
    assert.equal(raw.status, 200);
    assert.ok(Buffer.from(await raw.arrayBuffer()).equals(input), 'the 5 MiB input came back changed');
    const file = crypto.randomBytes(3 * 1024 * 1024 + 17);
    assert.equal((await alice('/v1/data/.my/c/big.bin', { method: 'PUT', body: file })).status, 200);
    assert.equal((await json(await call('read big'))).result, file.length);
    assert.equal((await json(await call('write big'))).result, 'written');
    // A megabyte of stdout (the owner asked for it): the outcome's header is too big for one message.
    const printed = await json(await call('print a lot', '?stdout=true'));
    assert.equal(printed.result, 'printed');
    assert.equal(printed.metadata.stdout_truncated, true);
    assert.ok(printed.metadata.stdout.length >= 1000 * 1024, `stdout of ${printed.metadata.stdout.length} characters`);
    const written = await alice('/v1/data/.my/c/written.bin');
    assert.ok(Buffer.from(await written.arrayBuffer()).equals(Buffer.alloc(3 * 1024 * 1024, 7)));
  });

  test('a malformed message on the bus is refused and logged, never run; the worker goes on', async () => {
    // As an API node would send them (its user, sealed with the cluster's key).
    const nc: NatsConnection = await connect(natsOptions(nats.urlFor('api'), busFiles(), 'test', 'api'));
    const key = new ClusterKey(SECRET);
    const job = (api: string) =>
      frame({
        type: 'run',
        call: 'c',
        api,
        sdk: false,
        job: { target: { build: { algorithmId: 1, hash: 'ab'.repeat(20) }, runner: 'node', entry: 'x', network: false }, contentType: 'text', timeoutMs: 1000, nesting: 0 },
      });
    try {
      // A header of another protocol version, and a job naming a subject nobody may publish to
      // (it once crashed the worker): each is answered with a refusal at once.
      const newer = Buffer.from(JSON.stringify({ v: 2, type: 'run', call: 'c' }));
      const length = Buffer.alloc(4);
      length.writeUInt32BE(newer.length);
      for (const bad of [Buffer.concat([length, newer]), job('algohost.v1.host.x y')]) {
        const m = await nc.request(RUN_SUBJECT, key.seal(RUN_SUBJECT, bad), { timeout: 5000 });
        const answer = unframe(key.open(m.subject, m.data));
        assert.equal(answer.header.type, 'refused');
        assert.equal(answer.header.reason, 'internal');
        assert.equal(answer.header.call, 'c');
      }
    } finally {
      await nc.close();
    }
    // The refusal may reach us before the worker's log line has come through its pipe.
    const end = Date.now() + 5_000;
    while (!/malformed message on the bus/.test(worker!.output()) && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    assert.match(worker!.output(), /malformed message on the bus/);
    assert.equal(worker!.child.exitCode, null);
    assert.equal((await json(await call('still here'))).result, 'still here');
  });

  test('a worker node killed mid-call fails that call with WorkerLostError, long before its timeout', async () => {
    const pending = call('sleep 30000');
    await new Promise((r) => setTimeout(r, 1500));
    worker!.child.kill('SIGKILL');
    const t0 = Date.now();
    const r = await pending;
    assert.equal(r.status, 200);
    const body = await json(r);
    assert.equal(body.error?.error_type, 'WorkerLostError', JSON.stringify(body));
    assert.match(body.error.message, /worker node running this call stopped answering/);
    assert.ok(Date.now() - t0 < 15_000, `the loss took ${Date.now() - t0} ms to be noticed`);
    worker = await startWorker();
    assert.equal((await json(await call('after the loss'))).result, 'after the loss');
  });

  test('a worker node stopped with SIGTERM finishes its call; then, with none left, a call is refused at once with 503', async () => {
    const pending = call('sleep 2000');
    await new Promise((r) => setTimeout(r, 700));
    worker!.child.kill('SIGTERM');
    assert.equal((await json(await pending)).result, 'slept');
    assert.equal(await within(worker!.exited, WAIT_MS, 'the worker did not stop on SIGTERM'), 0);
    const t0 = Date.now();
    const r = await call('anyone?');
    assert.equal(r.status, 503);
    const body = await json(r);
    assert.equal(body.error.code, 'server_busy');
    assert.match(body.error.message, /no worker node is running/);
    assert.ok(Date.now() - t0 < 5000, 'the refusal took its time');
    worker = await startWorker();
    assert.equal((await json(await call('back'))).result, 'back');
  });

  test('async calls: stored in JetStream before the answer, run by an API node on a worker, fetched with GET /v1/requests/:id', async () => {
    const ids = await Promise.all(['one', 'two', 'three'].map((x) => accept(alice, x)));
    const done = await Promise.all(ids.map((id) => answerOf(alice, id)));
    assert.deepEqual(
      done.map((d) => d.response.result),
      ['one', 'two', 'three'],
    );
    assert.ok(done.every((d) => d.attempts === 1));
    const big = crypto.randomBytes(3 * 1024 * 1024).toString('base64');
    const answer = await answerOf(alice, await accept(alice, big));
    assert.equal(answer.response.result, big);
  });

  test('async calls: a worker node killed mid-call gets the call run again on another, and the caller sees one answer', async () => {
    const id = await accept(alice, 'sleep 3000');
    await new Promise((r) => setTimeout(r, 1200));
    assert.equal((await json(await alice(`/v1/requests/${id}`))).status, 'running');
    worker!.child.kill('SIGKILL');
    await worker!.exited;
    worker = await startWorker();
    const done = await answerOf(alice, id, 60_000);
    assert.equal(done.response.result, 'slept');
    assert.equal(done.attempts, 2);
  });

  test('async calls: an API node killed mid-call fails none of them; NATS restarted loses none', async () => {
    const second = await startServerProcess({ home: home(), env: apiEnv, args: ['--role', 'api'] });
    const viaSecond = api(second.url, aliceKey);
    const ids = await Promise.all(Array.from({ length: 4 }, () => accept(viaSecond, 'sleep 2500')));
    await new Promise((r) => setTimeout(r, 1000));
    await second.kill('SIGKILL');
    const afterLoss = await Promise.all(ids.map((id) => answerOf(alice, id, 90_000)));
    assert.ok(afterLoss.every((d) => d.response.result === 'slept'), JSON.stringify(afterLoss.map((d) => d.response)));

    // Accepted, then NATS goes down and comes back: every one is still run, once.
    const queued = await Promise.all(Array.from({ length: 5 }, (_, i) => accept(alice, `after restart ${i}`)));
    // A sync call in flight when NATS goes: it ends in its result or a clear error, soon.
    const inFlight = call('sleep 3000');
    await new Promise((r) => setTimeout(r, 700));
    const t0 = Date.now();
    await nats.halt();
    await new Promise((r) => setTimeout(r, 500));
    await nats.resume();
    const interrupted = await json(await inFlight);
    assert.ok(interrupted.result === 'slept' || interrupted.error?.error_type === 'WorkerLostError', JSON.stringify(interrupted));
    assert.ok(Date.now() - t0 < 20_000, `the interrupted call took ${Date.now() - t0} ms to end`);
    const afterRestart = await Promise.all(queued.map((id) => answerOf(alice, id, 90_000)));
    assert.deepEqual(
      afterRestart.map((d) => d.response.result),
      Array.from({ length: 5 }, (_, i) => `after restart ${i}`),
    );
    // Sync calls go through again once the nodes have reconnected.
    const until = Date.now() + 30_000;
    let r = await call('reconnected');
    while (r.status !== 200 && Date.now() < until) {
      await new Promise((res) => setTimeout(res, 250));
      r = await call('reconnected');
    }
    assert.equal((await json(r)).result, 'reconnected');
  });

  test('/health on each node says its role and whether NATS answers; cluster status lists the nodes and the async queue', async () => {
    const h = await json(await fetch(`${apiNode.url}/health`));
    assert.equal(h.status, 'ok');
    assert.equal(h.role, 'api');
    assert.equal(h.nats.ok, true);
    const w = await startWorker({}, ['--port', '0']);
    try {
      const port = /\/health at http:\/\/127\.0\.0\.1:(\d+)/.exec(w.output())?.[1];
      assert.ok(port, w.output());
      const wh = await fetch(`http://127.0.0.1:${port}/health`);
      assert.equal(wh.status, 200);
      const body = await json(wh);
      assert.equal(body.role, 'worker');
      assert.equal(body.nats.ok, true);
      assert.equal(body.metadata.ok, true);
      assert.equal((await fetch(`http://127.0.0.1:${port}/v1/algo/x/y`)).status, 404);

      await call('warm me');
      const admin = { ...env, ALGOHOST_NATS_URL: nats.urlFor('admin') };
      const status = await runCli(['cluster', 'status', '--json'], home(), WAIT_MS, admin);
      assert.equal(status.code, 0, status.stderr);
      const s = JSON.parse(status.stdout) as { nodes: { role: string; free: number; warm: Record<string, number> }[]; async: { waiting: number; running: number } | null };
      assert.equal(s.nodes.filter((n) => n.role === 'api').length, 1);
      assert.equal(s.nodes.filter((n) => n.role === 'worker').length, 2);
      assert.ok(s.nodes.some((n) => Object.keys(n.warm).length > 0), 'no worker says it is warm after a call');
      assert.deepEqual(s.async, { waiting: 0, running: 0 });
      const table = await runCli(['cluster', 'status'], home(), WAIT_MS, admin);
      assert.match(table.stdout, /1 API node\(s\), 2 worker node\(s\)/);
      // A warm build by the name a person knows it by (from the shared database), not its key.
      assert.match(table.stdout, / alice\/Kinds\/\d+\.\d+\.\d+ ×\d+/, table.stdout);
      assert.doesNotMatch(table.stdout, /\d+:[0-9a-f]{12}/, table.stdout);
      const [warmKey] = Object.keys(s.nodes.find((n) => Object.keys(n.warm).length > 0)!.warm);
      assert.match((JSON.parse(status.stdout) as { names: Record<string, string> }).names[warmKey!]!, /^alice\/Kinds\/\d+\.\d+\.\d+$/);
      assert.match(table.stdout, /async queue: 0 waiting, 0 running/);
    } finally {
      w.child.kill('SIGTERM');
      await w.exited;
    }
  });

  test('an algorithm deleted through an API node leaves nothing on the worker node that ran it: its sweep prunes it', async () => {
    worker!.child.kill('SIGKILL');
    await worker!.exited;
    worker = await startWorker({ ALGOHOST_SWEEP_INTERVAL_MS: '300' });
    await release(alice, 'alice', 'Doomed', { 'src/index.js': 'export const apply = (x) => `doomed ${x}`;\n' }, { settings: { language: 'javascript' } });
    const id = String((await json(await alice('/v1/algorithms/alice/Doomed'))).id);
    const kindsId = String((await json(await alice('/v1/algorithms/alice/Kinds'))).id);
    assert.equal((await json(await alice('/v1/algo/alice/Doomed', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'x' }))).result, 'doomed x');
    assert.equal((await json(await call('kept'))).result, 'kept');
    const dir = (algorithm: string) => path.join(worker!.home, 'algorithms', algorithm);
    assert.ok(fs.existsSync(dir(id)), 'the worker fetched the build it ran');
    assert.equal((await alice('/v1/algorithms/alice/Doomed', { method: 'DELETE' })).status, 204);
    const until = Date.now() + 10_000;
    while (fs.existsSync(dir(id)) && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
    assert.equal(fs.existsSync(dir(id)), false, "the deleted algorithm's build is still on the worker");
    assert.ok(fs.existsSync(dir(kindsId)), "a live algorithm's build was pruned too");
    assert.equal((await json(await call('still'))).result, 'still');
  });

  test('NATS unreachable, not set, or refusing the credentials, and no cluster secret, each stop a node at start with one line naming the setting', async () => {
    const down = await runCli(['worker'], home(), WAIT_MS, { ...env, ALGOHOST_NATS_URL: 'nats://127.0.0.1:1' });
    assert.notEqual(down.code, 0);
    assert.match(down.stderr, /ALGOHOST_NATS_URL \(nats:\/\/127\.0\.0\.1:1\): no NATS server answers/);
    const unset = await runCli(['serve', '--role', 'api'], home(), WAIT_MS, { ...env, ALGOHOST_NATS_URL: '' });
    assert.notEqual(unset.code, 0);
    assert.match(unset.stderr, /serve --role api needs ALGOHOST_NATS_URL/);
    const bad = await runCli(['worker'], home(), WAIT_MS, { ...env, ALGOHOST_NATS_URL: 'http://127.0.0.1:4222' });
    assert.match(bad.stderr, /ALGOHOST_NATS_URL must be nats:\/\/HOST:PORT/);
    // Credentials the NATS server refuses, none at all, and no cluster secret: one line each.
    const wrong = new URL(nats.workerUrl('worker-12'));
    wrong.password = 'not-the-password';
    for (const url of [wrong.toString(), nats.url]) {
      const refused = await runCli(['worker'], home(), WAIT_MS, { ...env, ALGOHOST_NATS_URL: url });
      assert.notEqual(refused.code, 0);
      assert.match(refused.stderr, /the NATS server refused this node's credentials/);
      assert.doesNotMatch(refused.stderr, /not-the-password/);
      assert.equal(refused.stderr.trim().split('\n').length, 1, refused.stderr);
    }
    const noSecret = await runCli(['worker'], home(), WAIT_MS, { ...env, ALGOHOST_NATS_URL: nats.workerUrl('worker-12'), ALGOHOST_CLUSTER_SECRET: '' });
    assert.notEqual(noSecret.code, 0);
    assert.match(noSecret.stderr, /algohost worker needs ALGOHOST_CLUSTER_SECRET/);
    // A worker node signed in as one worker's user under another's name: its user may not take
    // that name's jobs, so it stops at start, saying which setting to fix.
    const misnamed = await runCli(['worker'], home(), WAIT_MS, { ...env, ALGOHOST_NATS_URL: nats.workerUrl('worker-12'), ALGOHOST_NODE_NAME: 'worker-11' });
    assert.notEqual(misnamed.code, 0);
    assert.match(misnamed.stderr, /refused this node \(named worker-11\) the subjects .*algohost\.v1\.worker\.worker-11\.run.*set ALGOHOST_NODE_NAME/);
    assert.equal(misnamed.stderr.trim().split('\n').length, 1, misnamed.stderr);
    const short = await runCli(['serve', '--role', 'api'], home(), WAIT_MS, { ...env, ALGOHOST_NATS_URL: nats.urlFor('api'), ALGOHOST_CLUSTER_SECRET: 'too short' });
    assert.match(short.stderr, /ALGOHOST_CLUSTER_SECRET must have at least 32 characters/);
  });
});
