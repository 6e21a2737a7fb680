/**
 * The cluster's bus protocol against a real nats-server (Debian's, on loopback): bodies too big
 * for one message crossing in parts (wire.ts), and the API node's executor (natsExecutor.ts)
 * routing by the workers' beats, failing a call whose worker goes silent, retrying one refused by
 * a stopping worker, and refusing at once when no worker listens. The test plays the worker
 * nodes with the protocol's own encoders, so each decision can be watched; test/cluster.test.ts
 * runs the real worker processes.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { connect, type Msg, type NatsConnection } from '@nats-io/transport-node';
import { natsUnavailable, startNats, type NatsServer } from './helpers/nats.ts';
import { Wire } from '../src/cluster/wire.ts';
import { NatsExecutor } from '../src/cluster/natsExecutor.ts';
import { ClusterKey } from '../src/cluster/seal.ts';
import {
  beatSubject,
  decodeHostReply,
  decodeRunRequest,
  encodeBeat,
  encodeHostRequest,
  encodeRunReply,
  encodeRunRequest,
  encodeWarmRequest,
  decodeWarmRequest,
  encodeTaken,
  frame,
  MessageError,
  RUN_SUBJECT,
  unframe,
  WORKER_PREFIX,
  WORKERS_QUEUE,
  type RunReply,
  type RunRequest,
  type WarmRequest,
} from '../src/cluster/messages.ts';
import { MAX_SDK_BODY } from '../src/algorithms/hostRequests.ts';
import { BuildMissingError, ExecutorBusyError, targetKey, WorkerLostError, WorkerStartError, type Job } from '../src/runtime/contract.ts';

// NATS alone, no store: run once, in test:unit, not again in test:shared.
const skip = (process.env.ALGOHOST_TEST_BACKENDS ? 'needs no shared backend: runs in test:unit' : undefined) ?? natsUnavailable();
let nats: NatsServer;
const conns: NatsConnection[] = [];

async function conn(): Promise<NatsConnection> {
  const nc = await connect({ servers: nats.url });
  conns.push(nc);
  return nc;
}

function logger() {
  const lines: string[] = [];
  return { lines, warn: (_o: object, msg: string) => void lines.push(msg), info: () => undefined, error: (_o: object, msg: string) => void lines.push(msg) };
}

/** A name of its own for each API node a test makes. */
const apiName = () => `api-${crypto.randomBytes(4).toString('hex')}`;

/** The cluster's key, as every node here holds it. */
const KEY = new ClusterKey('test cluster secret of 32 characters or more');

/** A build of its own for each name (its hash made from the name): the key it runs under is derived from it. */
function build(name: string) {
  return { algorithmId: 1, hash: crypto.createHash('sha1').update(name).digest('hex') };
}

/** The key a worker keeps the warm workers of `name`'s build under. */
const keyOf = (name: string) => targetKey(build(name), false);

function job(name: string, input = Buffer.from('"hi"')): Job {
  return { target: { build: build(name), key: keyOf(name), runner: 'node', entry: 'x', network: false }, contentType: 'json', input, timeoutMs: 20_000, nesting: 0 };
}

const ok = (body: Buffer): RunReply => ({ type: 'outcome', outcome: { kind: 'result', contentType: 'json', body, stdout: '', stdoutTruncated: false, durationMs: 1 } });

/**
 * A worker node played by the test: listens on its own subject (and the queue group if asked),
 * records the jobs it gets, answers each with `answer` (or not at all when it returns undefined).
 */
async function fakeWorker(name: string, answer: (r: RunRequest) => RunReply | undefined, queue = false, key = KEY) {
  const nc = await conn();
  const wire = new Wire(nc, name, logger(), key, 'worker');
  const got: RunRequest[] = [];
  const warms: WarmRequest[] = [];
  const onMsg = async (msg: Msg) => {
    const message = await wire.open(wire.unseal(msg));
    if (message.header.type === 'warm') {
      warms.push(decodeWarmRequest(message));
      return;
    }
    const r = decodeRunRequest(message);
    got.push(r);
    wire.send(r.api, encodeTaken({ type: 'taken', call: r.call, worker: name }));
    const reply = answer(r);
    if (!reply) return;
    wire.respond(msg, wire.pack(encodeRunReply(reply, { call: r.call, worker: name }), 10_000).data);
  };
  const subs = [nc.subscribe(`${WORKER_PREFIX}.${name}.run`, { callback: (_e, m) => void onMsg(m) })];
  if (queue) subs.push(nc.subscribe(RUN_SUBJECT, { queue: WORKERS_QUEUE, callback: (_e, m) => void onMsg(m) }));
  await nc.flush();
  return {
    got,
    warms,
    beat(free: number, warm: Record<string, number> = {}, draining = false, instance = 'first') {
      wire.send(beatSubject(name), encodeBeat({ type: 'beat', node: name, instance, role: 'worker', host: 'test', running: 0, free, warm, draining }));
    },
    stop: async () => {
      for (const s of subs) s.unsubscribe();
      await nc.flush();
    },
  };
}

before(async () => {
  if (!skip) nats = await startNats();
});

after(async () => {
  await Promise.all(conns.map((c) => c.close().catch(() => undefined)));
  await nats?.stop();
});

test("a job carries its caller's share to the worker's queue (docs/limits.md, \"Shares\"); a share that is not a whole number from 1 to 1000 is refused as malformed", () => {
  const target = { build: { algorithmId: 1, hash: 'ab'.repeat(20) }, key: 'k', runner: 'node' as const, entry: 'x', network: false };
  const request = (weight: unknown): RunRequest => ({ type: 'run', call: 'c', api: 'algohost.v1.host.a', sdk: false, job: { target, contentType: 'text', input: Buffer.from('x'), timeoutMs: 1, nesting: 0, caller: '7', weight: weight as number } });
  const decoded = decodeRunRequest(encodeRunRequest(request(3)));
  assert.equal(decoded.job.caller, '7');
  assert.equal(decoded.job.weight, 3);
  // From an API node of an older version: no share, the worker's default.
  assert.equal(decodeRunRequest(encodeRunRequest(request(undefined))).job.weight, undefined);
  for (const bad of [0, 1001, 2.5, '3', -1]) assert.throws(() => decodeRunRequest(encodeRunRequest(request(bad))), MessageError, String(bad));
});

test('a warm request names a target and the version key it follows; its key is made by the receiver, a bad target refused as malformed', () => {
  const target = { build: { algorithmId: 4, hash: 'cd'.repeat(20) }, key: 'forged', runner: 'python' as const, entry: 'src/A.py', network: false };
  const w = decodeWarmRequest(unframe(encodeWarmRequest({ type: 'warm', target, after: `4:${'ef'.repeat(20)}` }) as Buffer));
  assert.deepEqual(w, { type: 'warm', target: { ...target, key: `4:${'cd'.repeat(20)}` }, after: `4:${'ef'.repeat(20)}` });
  assert.throws(() => decodeWarmRequest(unframe(frame({ type: 'warm', target: { ...target, runner: 'cobol' }, after: 'x' }))), MessageError);
  assert.throws(() => decodeWarmRequest(unframe(frame({ type: 'warm', target, after: 'x'.repeat(300) }))), MessageError);
  assert.throws(() => decodeRunRequest(unframe(encodeWarmRequest({ type: 'warm', target, after: 'x' }) as Buffer)), MessageError);
});

describe('bodies bigger than one NATS message', { skip }, () => {
  test('cross whole in parts; small ones go inline; a kept body is dropped once fetched', async () => {
    const [a, b] = [await conn(), await conn()];
    const sender = new Wire(a, 'sender', logger(), KEY);
    // Its parts subject is known to the server before the receiver asks (in a node, the message
    // that names it goes through the same connection after the subscription; here it is handed over).
    await a.flush();
    const receiver = new Wire(b, 'receiver', logger(), KEY);
    const max = sender.maxPayload;
    for (const size of [0, 10, max - 5000, max, 5 * 1024 * 1024 + 3]) {
      const body = crypto.randomBytes(size);
      const { data, ref } = sender.pack({ header: { type: 'x', n: size }, body }, 10_000);
      assert.ok(data.length <= max, `a message of ${data.length} bytes for a ${size}-byte body`);
      assert.equal(ref !== undefined, size > max - 5000, `size ${size}: kept ${ref !== undefined}`);
      const m = await receiver.open(data);
      assert.equal(m.header.n, size);
      assert.ok(m.body.equals(body), `the ${size}-byte body came back changed`);
      assert.equal(sender.kept, 0, 'a fetched body is still kept');
    }
    sender.close();
    receiver.close();
  });

  test('a kept body expires; a receiver asking after that gets a clear error; bad part requests are dropped and logged', async () => {
    const [a, b] = [await conn(), await conn()];
    const log = logger();
    const sender = new Wire(a, 'sender2', log, KEY);
    // Its parts subject is known to the server before the receiver asks (in a node, the message
    // that names it goes through the same connection after the subscription; here it is handed over).
    await a.flush();
    const receiver = new Wire(b, 'receiver2', logger(), KEY);
    const { data } = sender.pack({ header: { type: 'x' }, body: crypto.randomBytes(3 * 1024 * 1024) }, 50);
    await new Promise((r) => setTimeout(r, 150));
    assert.equal(sender.kept, 0);
    await assert.rejects(async () => receiver.open(data), (err: Error) => err instanceof MessageError && /no longer there/.test(err.message));
    await assert.rejects(b.request(sender.subject, crypto.randomBytes(40), { timeout: 300 }));
    await assert.rejects(b.request(sender.subject, KEY.seal(sender.subject, crypto.randomBytes(40)), { timeout: 300 }));
    assert.equal(log.lines.filter((l) => /malformed or unsealed message on the bus/.test(l)).length, 2, log.lines.join('\n'));
    // A reference to a body bigger than the receiver allows is refused before a byte is fetched.
    const big = sender.pack({ header: { type: 'x' }, body: crypto.randomBytes(2 * 1024 * 1024) }, 10_000);
    await assert.rejects(async () => receiver.open(big.data, Date.now() + 5000, 1024 * 1024), /over this message's limit/);
    sender.close();
    receiver.close();
  });

  test('a header too big for one message (a megabyte of stdout) crosses whole, wrapped', async () => {
    const [a, b] = [await conn(), await conn()];
    const sender = new Wire(a, 'sender4', logger(), KEY);
    // Its parts subject is known to the server before the receiver asks (in a node, the message
    // that names it goes through the same connection after the subscription; here it is handed over).
    await a.flush();
    const receiver = new Wire(b, 'receiver4', logger(), KEY);
    const stdout = 'é"\\\n'.repeat(400_000);
    const body = crypto.randomBytes(100);
    const { data, ref } = sender.pack({ header: { type: 'outcome', stdout }, body }, 10_000);
    assert.ok(ref !== undefined && data.length <= sender.maxPayload);
    assert.equal(unframe(data).header.type, 'wrapped');
    const m = await receiver.open(data);
    assert.equal(m.header.stdout, stdout);
    assert.ok(m.body.equals(body));
    sender.close();
    receiver.close();
  });

  test('a job naming a subject nobody may publish to is refused as malformed', () => {
    const bad = frame({
      type: 'run',
      call: 'c',
      api: 'algohost.v1.host.a b',
      sdk: false,
      job: { target: { build: { algorithmId: 1, hash: 'ab'.repeat(20) }, runner: 'node', entry: 'x', network: false }, contentType: 'text', timeoutMs: 1, nesting: 0 },
    });
    assert.throws(() => decodeRunRequest(unframe(bad)), MessageError);
  });

  test('a forged reference to another subject is refused', async () => {
    const b = await conn();
    const receiver = new Wire(b, 'receiver3', logger(), KEY);
    const forged = frame({ type: 'x', ref: { subject: 'algohost.v1.host.someone', id: 'a', size: 10, parts: 1 } });
    await assert.rejects(async () => receiver.open(forged), /not a parts subject/);
    receiver.close();
  });
});

describe("the API node's executor", { skip }, () => {
  test('routes a job to a worker warm for its version, else to the one with the most room', async () => {
    const nc = await conn();
    const exec = new NatsExecutor(nc, logger(), KEY, apiName());
    const name = (r: RunRequest) => ['K', 'L'].find((n) => keyOf(n) === r.job.target.key);
    const warm = await fakeWorker('w-warm', (r) => ok(Buffer.from(JSON.stringify('warm:' + name(r)))));
    const roomy = await fakeWorker('w-roomy', (r) => ok(Buffer.from(JSON.stringify('roomy:' + name(r)))));
    warm.beat(1, { [keyOf('K')]: 1 });
    roomy.beat(8);
    await nc.flush();
    await new Promise((r) => setTimeout(r, 100));
    const a = await exec.run(job('K'));
    assert.equal(a.kind === 'result' && a.body.toString(), '"warm:K"');
    const b = await exec.run(job('L'));
    assert.equal(b.kind === 'result' && b.body.toString(), '"roomy:L"');
    // Its call ended, so w-warm's idle worker is counted back: K goes to it again, one after another...
    const again = await exec.run(job('K'));
    assert.equal(again.kind === 'result' && again.body.toString(), '"warm:K"');
    // ...but two at once: the second finds w-warm's one idle worker counted as taken, and goes where there is room.
    const [c1, c2] = await Promise.all([exec.run(job('K')), exec.run(job('K'))]);
    assert.equal(c1.kind === 'result' && c1.body.toString(), '"warm:K"');
    assert.equal(c2.kind === 'result' && c2.body.toString(), '"roomy:K"');
    // A draining worker gets nothing, even when warm.
    warm.beat(4, { [keyOf('K')]: 4 }, true);
    await nc.flush();
    await new Promise((r) => setTimeout(r, 100));
    const d = await exec.run(job('K'));
    assert.equal(d.kind === 'result' && d.body.toString(), '"roomy:K"');
    assert.deepEqual(
      warm.got.map((r) => r.job.target.key),
      [keyOf('K'), keyOf('K'), keyOf('K')],
    );
    await exec.close();
    await warm.stop();
    await roomy.stop();
  });

  test('a version just published: every live worker node is asked to warm it, whatever its last beat said (it decides by its own pool); a draining one is not; one whose beat showed the old version idle gets its first call', async () => {
    const nc = await conn();
    const exec = new NatsExecutor(nc, logger(), KEY, apiName());
    const name = (r: RunRequest) => ['Old', 'New'].find((n) => keyOf(n) === r.job.target.key);
    const idle = await fakeWorker('w-idle', (r) => ok(Buffer.from(JSON.stringify('idle:' + name(r)))));
    // Its beat was sent before its call of the old version ended: it shows nothing idle.
    const stale = await fakeWorker('w-stale', (r) => ok(Buffer.from(JSON.stringify('stale:' + name(r)))));
    const draining = await fakeWorker('w-draining', () => undefined);
    idle.beat(1, { [keyOf('Old')]: 1 });
    stale.beat(8);
    draining.beat(0, { [keyOf('Old')]: 2 }, true);
    await nc.flush();
    await new Promise((r) => setTimeout(r, 100));
    exec.warm(job('New').target, keyOf('Old'));
    await nc.flush();
    const deadline = Date.now() + 5000;
    while ((idle.warms.length === 0 || stale.warms.length === 0) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    for (const w of [idle, stale]) assert.deepEqual(w.warms.map((m) => [m.target.key, m.after]), [[keyOf('New'), keyOf('Old')]]);
    assert.equal(draining.warms.length, 0);
    const first = await exec.run(job('New'));
    assert.equal(first.kind === 'result' && first.body.toString(), '"idle:New"');
    await exec.close();
    for (const w of [idle, stale, draining]) await w.stop();
  });

  test('an outcome whose header is too big for one message (a megabyte of stdout) comes back wrapped, still bound to its call', async () => {
    const nc = await conn();
    const exec = new NatsExecutor(nc, logger(), KEY, apiName());
    const stdout = 'y'.repeat(1100 * 1024);
    const w = await fakeWorker('w-loud', () => ({ type: 'outcome', outcome: { kind: 'result', contentType: 'json', body: Buffer.from('"done"'), stdout, stdoutTruncated: false, durationMs: 1 } }), true);
    const out = await exec.run(job('W'));
    assert.equal(out.kind === 'result' && out.body.toString(), '"done"');
    assert.equal(out.stdout.length, stdout.length);
    await exec.close();
    await w.stop();
  });

  test('a big input and a big result cross in parts', async () => {
    const nc = await conn();
    const exec = new NatsExecutor(nc, logger(), KEY, apiName());
    const w = await fakeWorker('w-echo', (r) => ok(Buffer.concat([r.job.input, r.job.input])), true);
    const input = crypto.randomBytes(4 * 1024 * 1024);
    const out = await exec.run(job('E', input));
    assert.ok(out.kind === 'result' && out.body.equals(Buffer.concat([input, input])));
    await exec.close();
    await w.stop();
  });

  test('a worker that took a call and then goes silent fails it with WorkerLostError, not at its timeout', async () => {
    const nc = await conn();
    const exec = new NatsExecutor(nc, logger(), KEY, apiName());
    const mute = await fakeWorker('w-mute', () => undefined);
    mute.beat(2);
    await nc.flush();
    await new Promise((r) => setTimeout(r, 100));
    const t0 = Date.now();
    await assert.rejects(exec.run(job('M')), (err: Error) => err instanceof WorkerLostError && /w-mute/.test(err.message));
    const took = Date.now() - t0;
    assert.ok(took >= 3000 && took < 10_000, `lost after ${took} ms (the job's own time is 20 s)`);
    assert.equal(mute.got.length, 1);
    await exec.close();
    await mute.stop();
  });

  test('a worker that starts again under its name (a new process beating) has lost the calls its old process held: they fail once that one is silent, though the name beats on', async () => {
    const nc = await conn();
    const log = logger();
    const exec = new NatsExecutor(nc, log, KEY, apiName());
    const again = await fakeWorker('w-again', () => undefined);
    again.beat(2);
    await nc.flush();
    await new Promise((r) => setTimeout(r, 100));
    const t0 = Date.now();
    const running = exec.run(job('A'));
    while (again.got.length === 0 && Date.now() - t0 < 5_000) await new Promise((r) => setTimeout(r, 20));
    assert.equal(again.got.length, 1, 'the call never reached its worker');
    // The name beats on, from its new process, as one restarted within a beat would.
    const beating = setInterval(() => again.beat(2, {}, false, 'second'), 300);
    try {
      await assert.rejects(running, (err: Error) => err instanceof WorkerLostError && /started again/.test(err.message));
      const took = Date.now() - t0;
      assert.ok(took >= 3000 && took < 10_000, `lost after ${took} ms (the job's own time is 20 s)`);
    } finally {
      clearInterval(beating);
    }
    assert.ok(!log.lines.some((l) => /two worker node processes/.test(l)), 'a restart was taken for two processes');
    // Two processes beating under one name, in turn, are told of.
    again.beat(2, {}, false, 'first');
    again.beat(2, {}, false, 'second');
    await new Promise((r) => setTimeout(r, 200));
    assert.ok(log.lines.some((l) => /two worker node processes beat under the name w-again/.test(l)), log.lines.join('\n'));
    await exec.close();
    await again.stop();
  });

  test('a job refused by a worker that began to stop goes to another; with nobody listening, a call is refused at once', async () => {
    const nc = await conn();
    const exec = new NatsExecutor(nc, logger(), KEY, apiName());
    const stopping = await fakeWorker('w-stopping', () => ({ type: 'refused', reason: 'draining', message: 'stopping' }));
    const other = await fakeWorker('w-other', () => ok(Buffer.from('"other"')), true);
    stopping.beat(16);
    await nc.flush();
    await new Promise((r) => setTimeout(r, 100));
    const r = await exec.run(job('D'));
    assert.equal(r.kind === 'result' && r.body.toString(), '"other"');
    assert.equal(stopping.got.length, 1);
    await other.stop();
    // The only worker heard of has gone (its subject has no listener) and the queue is empty.
    stopping.beat(16);
    await stopping.stop();
    await nc.flush();
    await new Promise((res) => setTimeout(res, 100));
    const t0 = Date.now();
    await assert.rejects(exec.run(job('D')), (err: Error) => err instanceof ExecutorBusyError && err.reason === 'no_workers');
    assert.ok(Date.now() - t0 < 2000);
    await exec.close();
  });

  test("a worker's refusals come back as the local executor's errors (a runtime that cannot start, a build it cannot find, its queue full)", async () => {
    const nc = await conn();
    const exec = new NatsExecutor(nc, logger(), KEY, apiName());
    const answers: RunReply[] = [
      { type: 'refused', reason: 'start_failed', message: 'bwrap: cannot start' },
      { type: 'refused', reason: 'build_missing', message: 'gone' },
      { type: 'refused', reason: 'busy_queue_full', message: 'full' },
    ];
    const w = await fakeWorker('w-refusing', () => answers.shift(), true);
    await assert.rejects(exec.run(job('R')), (err: Error) => err instanceof WorkerStartError && /bwrap: cannot start/.test(err.message));
    await assert.rejects(exec.run(job('R')), (err: Error) => err instanceof BuildMissingError);
    await assert.rejects(exec.run(job('R')), (err: Error) => err instanceof ExecutorBusyError && err.reason === 'queue_full');
    await exec.close();
    await w.stop();
  });

  test("an SDK request over the SDK's size, or unreadable, is answered at once with 400, never served", async () => {
    const nc = await conn();
    const exec = new NatsExecutor(nc, logger(), KEY, apiName());
    let served = 0;
    const answers: { status: unknown; took: number }[] = [];
    const wnc = await conn();
    const wire = new Wire(wnc, 'w-sdk-wire', logger(), KEY);
    // The worker, once it has the job, sends two bad SDK requests for it, then answers the job.
    const sub = wnc.subscribe(`${WORKER_PREFIX}.w-sdk-2.run`, {
      callback: (_e, msg) =>
        void (async () => {
          const r = decodeRunRequest(await wire.open(wire.unseal(msg)));
          const big = wire.pack(encodeHostRequest({ type: 'host', call: r.call, worker: 'w-sdk-2', header: { method: 'PUT', path: '/v1/data/.my/c/x' }, body: Buffer.alloc(MAX_SDK_BODY + 2) }), 10_000);
          for (const data of [big.data, frame({ type: 'host', call: r.call })]) {
            const t0 = Date.now();
            const answer = decodeHostReply(await wire.open(await wire.request(r.api, data, 5_000)));
            answers.push({ status: answer.header.status, took: Date.now() - t0 });
          }
          wire.withdraw(big.ref);
          wire.respond(msg, wire.pack(encodeRunReply(ok(Buffer.from('"done"')), { call: r.call, worker: 'w-sdk-2' }), 10_000).data);
        })(),
    });
    await wnc.flush();
    wire.send(beatSubject('w-sdk-2'), encodeBeat({ type: 'beat', node: 'w-sdk-2', instance: 'first', role: 'worker', host: 'test', running: 0, free: 4, warm: {}, draining: false }));
    await wnc.flush();
    await new Promise((r) => setTimeout(r, 100));
    const out = await exec.run(job('S'), async () => {
      served++;
      return { header: { status: 200 }, body: Buffer.alloc(0) };
    });
    assert.equal(out.kind === 'result' && out.body.toString(), '"done"');
    assert.deepEqual(
      answers.map((a) => a.status),
      [400, 400],
    );
    assert.ok(answers.every((a) => a.took < 2000), JSON.stringify(answers));
    assert.equal(served, 0, 'a bad SDK request reached the handler');
    sub.unsubscribe();
    wire.close();
    await exec.close();
  });

  test('malformed messages to its subjects are dropped and logged; it goes on', async () => {
    const nc = await conn();
    const log = logger();
    const exec = new NatsExecutor(nc, log, KEY, apiName());
    const w = await fakeWorker('w-fine', () => ok(Buffer.from('"fine"')), true);
    const other = await conn();
    const host = `algohost.v1.host.${exec.node}`;
    other.publish(host, crypto.randomBytes(30));
    other.publish(host, KEY.seal(host, frame({ type: 'host', call: 5 })));
    other.publish(beatSubject('x'), KEY.seal(beatSubject('x'), Buffer.from('\0\0\0\u0002{}')));
    await other.flush();
    await new Promise((r) => setTimeout(r, 200));
    assert.ok(log.lines.filter((l) => /(malformed|forged|replayed).* message on the bus/.test(l)).length >= 3, log.lines.join('\n'));
    const r = await exec.run(job('F'));
    assert.equal(r.kind === 'result' && r.body.toString(), '"fine"');
    assert.equal(unframe(frame({ type: 'x' })).header.type, 'x');
    await exec.close();
    await w.stop();
  });
});
