/**
 * What the nodes of a cluster take from the bus (docs/cluster.md, "Trust on the bus";
 * docs/security.md): the attacks of issue 22 on a real nats-server, against the real API node
 * executor (NatsExecutor) and a real worker node (WorkerNode) running real sandboxed algorithms
 * on the local runtime. Each attack is tried twice: on an open bus, where the attacker can read
 * and publish anything but has not the cluster's secret, and on the bus as docs/cluster.md says
 * to run it (a NATS user per role, TLS), where the attacker holds a worker's NATS credentials.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { connect, type Msg, type NatsConnection } from '@nats-io/transport-node';
import { natsUnavailable, startNats, type NatsServer, type NatsUser } from './helpers/nats.ts';
import { NatsExecutor } from '../src/cluster/natsExecutor.ts';
import { WorkerNode } from '../src/cluster/workerNode.ts';
import { ClusterKey } from '../src/cluster/seal.ts';
import { natsOptions } from '../src/cluster/nats.ts';
import { ConfigError } from '../src/config.ts';
import { BEATS, beatSubject, encodeBeat, frame, RUN_SUBJECT, unframe, WORKER_PREFIX, WORKERS_QUEUE } from '../src/cluster/messages.ts';
import { AlgorithmRuntime, DEFAULT_RUNTIME, type BuildFiles } from '../src/runtime/runtime.ts';
import { probeSandbox } from '../src/runtime/sandbox.ts';
import { targetKey, type Executor, type HostHandler, type Job, type Outcome } from '../src/runtime/contract.ts';

// NATS and the sandbox alone, no store: run once, in test:unit.
const skip =
  (process.env.ALGOHOST_TEST_BACKENDS ? 'needs no shared backend: runs in test:unit' : undefined) ??
  natsUnavailable() ??
  (probeSandbox().available ? undefined : `no sandbox: ${probeSandbox().reason}`);

const SECRET = crypto.randomBytes(32).toString('hex');
const KEY = new ClusterKey(SECRET);

/** Builds on this disk, as a worker node keeps the ones it fetched: `<root>/<algorithm>/<hash>/index.mjs`. */
const root = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-trust-'));
const builds: BuildFiles = {
  dir: (id, _kind, hash) => path.join(root, String(id), hash),
  isPresent: (id, _kind, hash) => fs.existsSync(path.join(root, String(id), hash)),
  ensure: async () => false,
};
function addBuild(id: number, source: string) {
  const hash = crypto.createHash('sha256').update(source).digest('hex');
  fs.mkdirSync(path.join(root, String(id), hash), { recursive: true });
  fs.writeFileSync(path.join(root, String(id), hash, 'index.mjs'), source);
  return { algorithmId: id, hash };
}
/** alice/Echo: answers its input, after `ms` if asked to wait. */
const ECHO = addBuild(1, 'export async function apply(x) { if (x && x.wait) await new Promise((r) => setTimeout(r, x.wait)); return x; }\n');
/** A build that says which network interfaces it sees. */
const NET = addBuild(2, "import os from 'node:os';\nexport const apply = () => Object.keys(os.networkInterfaces()).sort();\n");

function job(build: { algorithmId: number; hash: string }, input: unknown, network = false): Job {
  return { target: { build, key: targetKey(build, network), runner: 'node', entry: 'index.mjs', network }, contentType: 'json', input: Buffer.from(JSON.stringify(input)), timeoutMs: 20_000, nesting: 0 };
}

const result = (o: Outcome): unknown => (o.kind !== 'result' ? `<${o.kind}>` : o.contentType === 'json' ? JSON.parse(o.body.toString()) : o.body.toString());

function logger() {
  const lines: string[] = [];
  return { lines, warn: (_o: object, msg: string) => void lines.push(msg), info: () => undefined, error: (_o: object, msg: string) => void lines.push(msg) };
}

/** The local runtime, counting the jobs that reach it. */
class Counted implements Executor {
  jobs: Job[] = [];
  constructor(readonly runtime: AlgorithmRuntime) {}
  run(j: Job, host?: HostHandler): Promise<Outcome> {
    this.jobs.push(j);
    return this.runtime.run(j, host);
  }
  close(): Promise<void> {
    return this.runtime.close();
  }
}

const until = async (what: () => boolean, ms = 5000) => {
  const end = Date.now() + ms;
  while (!what() && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
};

interface Bus {
  nats: NatsServer;
  /** A connection as `user` (or the worker node of that name) would make it (anonymous on the open bus). */
  conn(user: NatsUser | `worker-${number}`): Promise<NatsConnection>;
  exec: NatsExecutor;
  execLog: ReturnType<typeof logger>;
  worker: WorkerNode;
  workerLog: ReturnType<typeof logger>;
  counted: Counted;
  /** The attacker's connection: anonymous on the open bus, another worker node's (worker-2's) credentials on the secure one. */
  mallory: NatsConnection;
  close(): Promise<void>;
}

async function startBus(secure: boolean): Promise<Bus> {
  const nats = await startNats({ secure });
  const conns: NatsConnection[] = [];
  const conn = async (user: NatsUser | `worker-${number}`) => {
    const files = { creds: undefined, ca: nats.ca, cert: undefined, key: undefined };
    const options = user === 'api' || user === 'admin' ? natsOptions(nats.urlFor(user), files, `test ${user}`, user) : natsOptions(nats.workerUrl(user), files, `test ${user}`, 'worker', user);
    const nc = await connect(options);
    conns.push(nc);
    return nc;
  };
  const counted = new Counted(new AlgorithmRuntime(builds, { ...DEFAULT_RUNTIME, pool: { ...DEFAULT_RUNTIME.pool, maxWorkers: 4 } }));
  const workerLog = logger();
  const worker = new WorkerNode(await conn('worker-1'), counted, workerLog, () => counted.runtime.pool.load(), KEY, false, 'worker-1');
  await worker.start();
  const execLog = logger();
  const exec = new NatsExecutor(await conn('api'), execLog, KEY, 'api-1');
  const mallory = await conn('worker-2');
  // The executor has heard the worker beat: calls are routed to it by name.
  await until(() => (exec as unknown as { workers: Map<string, unknown> }).workers.size > 0);
  return {
    nats,
    conn,
    exec,
    execLog,
    worker,
    workerLog,
    counted,
    mallory,
    async close() {
      await exec.close();
      await worker.drain();
      await counted.close();
      await Promise.all(conns.map((c) => c.close().catch(() => undefined)));
      await nats.stop();
    },
  };
}

/** A NATS permission error on `nc` (the server refuses a publish or a subscription), or undefined within `ms`. */
async function permissionError(nc: NatsConnection, act: () => void | Promise<void>, ms = 1000): Promise<string | undefined> {
  let seen: string | undefined;
  const watch = (async () => {
    for await (const s of nc.status()) {
      if (s.type === 'error' && /permission/i.test(String(s.error?.message ?? ''))) seen = String(s.error?.message);
    }
  })();
  void watch;
  await act();
  await nc.flush().catch(() => undefined);
  await until(() => seen !== undefined, ms);
  return seen;
}

after(() => fs.rmSync(root, { recursive: true, force: true }));

for (const secure of [false, true]) {
  describe(secure ? 'on the bus as docs/cluster.md runs it (users per role, TLS), mallory holding a worker password' : 'on an open bus, mallory reading and publishing anything', { skip }, () => {
    let bus: Bus;
    before(async () => {
      bus = await startBus(secure);
    });
    after(async () => {
      await bus?.close();
    });

    test('a genuine call runs: sealed, routed to the worker, answered', async () => {
      assert.deepEqual(result(await bus.exec.run(job(ECHO, 'hello'))), 'hello');
      assert.equal(bus.counted.jobs.length, 1);
    });

    test('a forged job is never run: unsealed, sealed with another key, or a real one replayed (again, or onto another subject)', async () => {
      const before = bus.counted.jobs.length;
      const sniffed: Msg[] = [];
      // What mallory can read of a real job: everything on the open bus; nothing on the secure one.
      const spy = secure ? undefined : await bus.conn('api');
      spy?.subscribe(`${WORKER_PREFIX}.*.run`, { callback: (_e, m) => void sniffed.push(m) });
      await spy?.flush();
      assert.deepEqual(result(await bus.exec.run(job(ECHO, 'genuine'))), 'genuine');
      const forged = frame({ type: 'run', call: 'forged', api: 'algohost.v1.host.mallory', sdk: true, job: { target: { build: ECHO, runner: 'node', entry: 'index.mjs', network: true }, contentType: 'json', timeoutMs: 1000, nesting: 0 } }, Buffer.from('"pwned"'));
      const other = new ClusterKey(crypto.randomBytes(32).toString('hex'));
      const attempts: [string, Uint8Array][] = [
        [RUN_SUBJECT, forged],
        [RUN_SUBJECT, other.seal(RUN_SUBJECT, forged)],
        [`${WORKER_PREFIX}.${bus.worker.node}.run`, other.seal(`${WORKER_PREFIX}.${bus.worker.node}.run`, forged)],
      ];
      if (!secure) {
        await until(() => sniffed.length > 0);
        assert.equal(sniffed.length, 1, 'the spy read the real job on the open bus');
        attempts.push([sniffed[0]!.subject, sniffed[0]!.data], [RUN_SUBJECT, sniffed[0]!.data]);
      }
      const refused = await permissionError(bus.mallory, () => {
        for (const [subject, data] of attempts) bus.mallory.publish(subject, data, { reply: 'algohost.v1.host.mallory.reply.x' });
      });
      if (secure) assert.match(refused ?? '', /Permissions Violation for Publish to "algohost\.v1\.(run|worker)/, 'a worker user may not send jobs');
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(bus.counted.jobs.length, before + 1, 'only the genuine job reached the runtime');
      if (!secure) {
        const refusals = bus.workerLog.lines.filter((l) => /refused a job that is not sealed by this cluster/.test(l));
        assert.equal(refusals.length, attempts.length, bus.workerLog.lines.join('\n'));
      }
      spy?.close();
    });

    test('a sealed job sent with another reply subject than its API node waits on is not run', async () => {
      const before = bus.counted.jobs.length;
      const api = await bus.conn('api');
      const subject = RUN_SUBJECT;
      const data = frame({ type: 'run', call: 'c-elsewhere', api: `algohost.v1.host.${bus.exec.node}`, sdk: true, job: { target: { build: ECHO, runner: 'node', entry: 'index.mjs', network: false }, contentType: 'json', timeoutMs: 5000, nesting: 0 } }, Buffer.from('"x"'));
      // The API node's user may send jobs; the answer would go to an inbox of the sender's choosing.
      api.publish(subject, KEY.seal(subject, data), { reply: '_INBOX_api.elsewhere' });
      await api.flush();
      await until(() => bus.workerLog.lines.some((l) => /answer would not go to its API node/.test(l)));
      assert.ok(bus.workerLog.lines.some((l) => /answer would not go to its API node/.test(l)), bus.workerLog.lines.join('\n'));
      assert.equal(bus.counted.jobs.length, before);
    });

    test('a body fetched in parts takes only a sealed answer: a forged one on the inbox first changes nothing', async () => {
      // mallory answers every part request she sees on the open bus before the real sender can.
      const spy = secure ? undefined : await bus.conn('api');
      let forged = 0;
      spy?.subscribe('algohost.v1.parts.>', { callback: (_e, m) => void (m.reply && (forged++, spy.publish(m.reply, frame({ type: 'part_data' }, Buffer.from('forged'))))) });
      await spy?.flush();
      const big = crypto.randomBytes(3 * 1024 * 1024).toString('base64');
      const out = await bus.exec.run(job(ECHO, big));
      assert.equal(result(out), big);
      // On the open bus the forger answered every part request (whether before the real one or after).
      if (!secure) assert.ok(forged >= 2, `the spy forged ${forged} parts`);
      spy?.close();
    });

    test('a forged beat draws no call: calls still go to the worker that beats with the seal', async () => {
      const evil = 'evil-worker';
      const got: Msg[] = [];
      // On the open bus mallory listens where a job routed to her would come (the seal is what keeps
      // jobs from her); on the secure one her user may not listen there, nor beat as another node.
      const sub = bus.mallory.subscribe(`${WORKER_PREFIX}.${evil}.run`, { callback: (e, m) => void (e ?? got.push(m)) });
      await bus.mallory.flush();
      const beat = encodeBeat({ type: 'beat', node: evil, instance: 'x', role: 'worker', host: 'x', running: 0, free: 1000, warm: { [targetKey(ECHO, false)]: 1000 }, draining: false });
      const other = new ClusterKey(crypto.randomBytes(32).toString('hex'));
      const subject = beatSubject(evil);
      const refused = await permissionError(bus.mallory, async () => {
        for (let i = 0; i < 5; i++) {
          bus.mallory.publish(subject, beat);
          bus.mallory.publish(subject, other.seal(subject, beat));
          await new Promise((r) => setTimeout(r, 50));
        }
      });
      if (secure) assert.match(refused ?? '', /Permissions Violation for (Subscription|Publish) to "algohost\.v1\.(worker|beat)\.evil-worker/);
      // An insider (a worker node with the cluster's secret) beating on her own subject as another node.
      const mine = beatSubject('worker-2');
      for (let i = 0; i < 3; i++) bus.mallory.publish(mine, KEY.seal(mine, beat));
      await bus.mallory.flush();
      await until(() => bus.execLog.lines.some((l) => /dropped a beat/.test(l)));
      assert.ok(bus.execLog.lines.some((l) => /dropped a beat/.test(l)), bus.execLog.lines.join('\n'));
      const outs = await Promise.all([1, 2, 3, 4, 5].map((i) => bus.exec.run(job(ECHO, `call ${i}`))));
      assert.deepEqual(outs.map(result), ['call 1', 'call 2', 'call 3', 'call 4', 'call 5']);
      assert.equal(got.length, 0, 'a job was routed to the forged worker');
      if (!secure) assert.ok(bus.execLog.lines.filter((l) => /dropped a beat/.test(l)).length >= 10, bus.execLog.lines.join('\n'));
      sub.unsubscribe();
    });

    test("an SDK request naming a running call is answered only from the worker running it; a forged answer is not the call's", async () => {
      let served = 0;
      const host: HostHandler = async () => {
        served++;
        return { header: { status: 200 }, body: Buffer.from('{}') };
      };
      // A call that runs for a while, so its id can be used against it meanwhile.
      let call: string | undefined;
      const spy = secure ? undefined : await bus.conn('api');
      spy?.subscribe(`${WORKER_PREFIX}.*.run`, { callback: (_e, m) => void (call = String(unframe(m.data.subarray(0, m.data.length - 40)).header.call)) });
      await spy?.flush();
      const running = bus.exec.run(job(ECHO, { wait: 1500 }), host);
      // On the secure bus mallory cannot read the call's id: she is given it, as if she had guessed it.
      if (secure) call = [...(bus.exec as unknown as { calls: Map<string, unknown> }).calls.keys()][0];
      await until(() => call !== undefined);
      assert.ok(call);
      const api = `algohost.v1.host.${bus.exec.node}`;
      const sdk = (worker: string) => frame({ type: 'host', call, worker, header: { method: 'PUT', path: '/v1/data/.my/secrets/pwned.txt', headers: {} } }, Buffer.from('pwned'));
      // Unsealed (no answer: dropped), sealed by a node not running the call (403).
      await assert.rejects(bus.mallory.request(api, sdk(bus.worker.node), { timeout: 500 }));
      // An insider (a worker node that has the cluster's secret too) naming itself, or naming the
      // worker that runs the call while the answer would go to her own inbox: 403 both.
      for (const worker of ['another-worker', bus.worker.node]) {
        const insider = KEY.seal(api, frame({ type: 'host', call, worker, header: { method: 'GET', path: '/v1/data/.my' } }));
        const answer = await bus.mallory.request(api, insider, { timeout: 2000 });
        const opened = unframe(KEY.open(answer.subject, answer.data));
        assert.equal((opened.header.header as { status: number }).status, 403, `naming ${worker}`);
      }
      // On the secure bus she cannot read the running worker's inbox, where its answers go.
      if (secure) assert.match((await permissionError(bus.mallory, () => void bus.mallory.subscribe(`_INBOX_worker.${bus.worker.node}.>`))) ?? '', /Permissions Violation for Subscription/);
      // A forged answer to the call: on the open bus it can be published (and is dropped); on
      // the secure one a worker user may answer only jobs it was given.
      const reply = `algohost.v1.host.${bus.exec.node}.reply.${call}`;
      const refused = await permissionError(bus.mallory, () => bus.mallory.publish(reply, frame({ type: 'outcome', call, worker: bus.worker.node, outcome: { kind: 'result', contentType: 'json', stdout: '', durationMs: 1 } }, Buffer.from('"forged"'))));
      if (secure) assert.match(refused ?? '', /Permissions Violation for Publish/);
      assert.deepEqual(result(await running), { wait: 1500 });
      assert.equal(served, 0, 'a forged SDK request was served as the caller');
      assert.ok(bus.execLog.lines.some((l) => /refused an SDK request from a worker node that does not run its call/.test(l)), bus.execLog.lines.join('\n'));
      spy?.close();
    });

    test('no node answers into a subject that is not an inbox: a request naming $JS.API or another subject as its reply gets no answer there', async () => {
      // What a reply would reach: a sentinel subject an API node's user may read.
      const api = await bus.conn('api');
      const heard: Msg[] = [];
      api.subscribe('algohost.v1.host.sentinel.x', { callback: (_e, m) => void heard.push(m) });
      await api.flush();
      const reply = 'algohost.v1.host.sentinel.x';
      // An insider (the cluster's secret, a worker's credentials): an SDK request, and a part request.
      const host = `algohost.v1.host.${bus.exec.node}`;
      bus.mallory.publish(host, KEY.seal(host, frame({ type: 'host', call: 'c-none', worker: 'worker-2', header: { method: 'GET', path: '/v1/data/.my' } })), { reply });
      const parts = `algohost.v1.parts.api.${bus.exec.node}`;
      bus.mallory.publish(parts, KEY.seal(parts, frame({ type: 'part', id: 'nothing', index: 0 })), { reply });
      await bus.mallory.flush();
      await until(() => bus.execLog.lines.filter((l) => /reply subject is no inbox/.test(l)).length >= 2);
      await new Promise((r) => setTimeout(r, 200));
      assert.equal(heard.length, 0, 'a node answered into a subject that is no inbox');
      assert.equal(bus.execLog.lines.filter((l) => /reply subject is no inbox/.test(l)).length, 2, bus.execLog.lines.join('\n'));
    });

    test("a job's key and network are the worker's to derive: a job cannot file its build under another's key, or get the network the worker does not give", async () => {
      // Sealed by the cluster (an API node's job), naming alice/Echo's key for another build, and the network.
      const api = await bus.conn('api');
      const forgedKey = targetKey(ECHO, false);
      const subject = `${WORKER_PREFIX}.${bus.worker.node}.run`;
      const data = frame({ type: 'run', call: 'c-net', api: 'algohost.v1.host.nobody', sdk: false, job: { target: { build: NET, key: forgedKey, runner: 'node', entry: 'index.mjs', network: true }, contentType: 'json', timeoutMs: 20_000, nesting: 0 } }, Buffer.from('null'));
      // Its answer goes where an API node would wait for it: `<api>.reply.<call>`.
      const replyTo = 'algohost.v1.host.nobody.reply.c-net';
      const answered = new Promise<Msg>((resolve) => api.subscribe(replyTo, { max: 1, callback: (_e, m) => resolve(m) }));
      await api.flush();
      api.publish(subject, KEY.seal(subject, data), { reply: replyTo });
      const m = await answered;
      const reply = unframe(KEY.open(m.subject, m.data));
      assert.equal(reply.header.type, 'outcome', JSON.stringify(reply.header));
      // Run without the network: it sees its own loopback only.
      assert.deepEqual(JSON.parse(reply.body.toString()), ['lo']);
      const ran = bus.counted.jobs.at(-1)!;
      assert.equal(ran.target.key, targetKey(NET, false));
      assert.equal(ran.target.network, false);
      // The pool holds NET's worker under NET's key, none under the key the job named for it.
      const warm = bus.counted.runtime.pool.load().warm;
      assert.equal(warm[targetKey(NET, false)], 1, JSON.stringify(warm));
      assert.deepEqual(result(await bus.exec.run(job(ECHO, 'still echo'))), 'still echo');
    });

    if (secure) {
      test('a node signs in with a client certificate where the server verifies them (ALGOHOST_NATS_CERT, ALGOHOST_NATS_KEY); without one it is refused', async () => {
        const strict = await startNats({ secure: true, verifyClients: true });
        try {
          const files = { creds: undefined, ca: strict.ca, cert: strict.client!.cert, key: strict.client!.key };
          const nc = await connect(natsOptions(strict.workerUrl('worker-1'), files, 'with a certificate', 'worker', 'worker-1'));
          await nc.flush();
          await nc.close();
          await assert.rejects(connect({ ...natsOptions(strict.workerUrl('worker-1'), { ...files, cert: undefined, key: undefined }, 'without', 'worker', 'worker-1'), timeout: 3000, maxReconnectAttempts: 0 }));
        } finally {
          await strict.stop();
        }
      });

      test('the NATS server refuses an anonymous client, and keeps a worker user out of what is not its part', async () => {
        await assert.rejects(connect({ servers: bus.nats.url, tls: { caFile: bus.nats.ca } }), /Authorization Violation/);
        await assert.rejects(connect({ servers: bus.nats.url, user: 'algohost-worker-1', pass: 'wrong', tls: { caFile: bus.nats.ca } }), /Authorization Violation/);
        // worker-2's user, beside worker-1 (the node running calls): nothing of another node's.
        const theirs = [`${WORKER_PREFIX}.worker-1.run`, '_INBOX_worker.worker-1.>', 'algohost.v1.parts.worker.worker-1', 'algohost.v1.parts.api.api-1', beatSubject('worker-1'), beatSubject('worker-2'), BEATS];
        for (const subject of ['algohost.v1.host.>', '_INBOX_api.>', 'algohost.v1.async', RUN_SUBJECT, ...theirs]) {
          const nc = await bus.conn('worker-2');
          const refused = await permissionError(nc, () => void nc.subscribe(subject));
          assert.match(refused ?? '', /Permissions Violation for Subscription/, `worker-2's user may subscribe to ${subject}`);
        }
        for (const subject of ['$JS.API.INFO', 'algohost.v1.async', 'algohost.v1.async.1', RUN_SUBJECT, `${WORKER_PREFIX}.worker-1.run`, beatSubject('worker-1'), 'algohost.v1.parts.worker.worker-1', 'algohost.v1.parts.worker.worker-2']) {
          const nc = await bus.conn('worker-2');
          const refused = await permissionError(nc, () => nc.publish(subject, Buffer.from('x')));
          assert.match(refused ?? '', /Permissions Violation for Publish/, `worker-2's user may publish to ${subject}`);
        }
        // What is its own: the queue group (as a member only), its jobs, beats, parts and inboxes.
        const own = await bus.conn('worker-2');
        const mine = [`${WORKER_PREFIX}.worker-2.run`, 'algohost.v1.parts.worker.worker-2', '_INBOX_worker.worker-2.x'];
        const allowed = await permissionError(own, () => {
          for (const subject of mine) own.subscribe(subject);
          own.subscribe(RUN_SUBJECT, { queue: WORKERS_QUEUE });
          own.publish(beatSubject('worker-2'), Buffer.from('x'));
          own.publish('algohost.v1.parts.api.api-1', Buffer.from('x'));
        });
        assert.equal(allowed, undefined);
        // It may publish on no subject it may subscribe to: a message sent to itself would
        // otherwise give it the right to answer on any subject it named as the reply.
        for (const subject of [...mine, RUN_SUBJECT]) {
          const nc = await bus.conn('worker-2');
          nc.subscribe(subject, subject === RUN_SUBJECT ? { queue: WORKERS_QUEUE } : {});
          const refused = await permissionError(nc, () => nc.publish(subject, Buffer.from('x'), { reply: '$JS.API.INFO' }));
          assert.match(refused ?? '', /Permissions Violation for Publish/, `worker-2's user may publish on ${subject}, which it reads`);
          const still = await permissionError(nc, () => nc.publish('$JS.API.INFO', Buffer.from('')));
          assert.match(still ?? '', /Permissions Violation for Publish to "\$JS\.API\.INFO"/, `after a message to itself on ${subject}, worker-2 may publish on $JS.API`);
        }
        // A worker node given a name its user's permissions do not give stops at start, saying so.
        const misnamed = new WorkerNode(await bus.conn('worker-2'), bus.counted, logger(), () => bus.counted.runtime.pool.load(), KEY, false, 'worker-1');
        await assert.rejects(misnamed.start(), (err: Error) => err instanceof ConfigError && /named worker-1.*ALGOHOST_NODE_NAME/.test(err.message));
        // An API node's user may not take jobs.
        const apiUser = await bus.conn('api');
        assert.match((await permissionError(apiUser, () => void apiUser.subscribe(RUN_SUBJECT))) ?? '', /Permissions Violation for Subscription/);
      });
    }
  });
}
