/**
 * The `algo` command's event commands end to end (docs/cli.md): `bin/algo.mjs` as a child
 * process against a real server, the key and address from ALGOHOST_API(_KEY). `events tail`
 * prints uploads as they happen, as lines or JSON, from `--since` an event, until Ctrl-C;
 * `subscriptions …` with a real receiver on loopback (ALGOHOST_CONNECTOR_NETWORK=any), the
 * secret printed once and verifying what is delivered; `triggers …` with a real algorithm
 * writing its output. Runs on every configuration.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { api, startServer, tempHome, type TestServer } from './helpers/server.ts';
import { childEnv, within } from './helpers/process.ts';
import { release } from './helpers/algorithms.ts';
import { AlgohostClient, verifyWebhook, type CloudEvent } from '../client/src/index.ts';

const BIN = path.resolve(import.meta.dirname, '..', 'bin', 'algo.mjs');

let s: TestServer;
let aliceKey: string;
let alice: AlgohostClient;
const homes: string[] = [];

before(async () => {
  s = await startServer({ env: { ALGOHOST_CONNECTOR_NETWORK: 'any' } });
  aliceKey = await s.user('alice');
  await s.user('bob');
  alice = new AlgohostClient({ baseUrl: s.url, apiKey: aliceKey, env: {} });
  await alice.dir('data://.my/inbox').create();
});
after(async () => {
  await s.close();
  for (const h of homes) fs.rmSync(h, { recursive: true, force: true });
});

/** `algo ARGS` as alice (or `key`), started: its output so far, waits on it, and Ctrl-C. */
function start(args: string[], key = aliceKey) {
  const home = tempHome('algo-cli-events-');
  homes.push(home);
  const child = spawn(process.execPath, [BIN, ...args], { env: childEnv({ HOME: home, ALGOHOST_API: s.url, ALGOHOST_API_KEY: key }), cwd: home, stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (t: string) => (stdout += t));
  child.stderr.setEncoding('utf8').on('data', (t: string) => (stderr += t));
  child.stdin.end();
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  return {
    out: () => stdout,
    err: () => stderr,
    async waitFor(stream: 'stdout' | 'stderr', pattern: RegExp, ms = 20_000): Promise<void> {
      const end = Date.now() + ms;
      while (!pattern.test(stream === 'stdout' ? stdout : stderr)) {
        if (Date.now() > end || child.exitCode !== null) assert.fail(`algo ${args.join(' ')}: no ${pattern} on ${stream}; stdout: ${stdout} stderr: ${stderr}`);
        await new Promise((r) => setTimeout(r, 10));
      }
    },
    /** Ctrl-C: answers the exit code. */
    async interrupt(): Promise<number | null> {
      child.kill('SIGINT');
      return within(exited, 20_000, `algo ${args.join(' ')} did not stop on SIGINT`).finally(() => {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      });
    },
    done: () => within(exited, 60_000, `algo ${args.join(' ')} did not finish`),
  };
}

/** Runs `algo ARGS` to its end. */
async function algo(args: string[], key = aliceKey) {
  const run = start(args, key);
  const code = await run.done();
  return { code, stdout: run.out(), stderr: run.err() };
}

let probes = 0;
/**
 * Uploads probe files into inbox until `output()` shows one. A stream "from now on" starts where
 * the outbox is once the server has subscribed it, just after it answered: an upload at that
 * moment may come before it.
 */
async function nudge(output: () => string): Promise<string> {
  for (let i = 0; i < 50; i++) {
    const name = `probe-${++probes}.txt`;
    await alice.file(`data://.my/inbox/${name}`).put('probe');
    const end = Date.now() + 1_000;
    while (Date.now() < end) {
      if (output().includes(name)) return name;
      await new Promise((r) => setTimeout(r, 10));
    }
  }
  assert.fail(`no probe upload was printed: ${output()}`);
}

describe('algo events tail', () => {
  test('prints each upload as it happens, one line each (time, type, subject, summary), until Ctrl-C', async () => {
    const tail = start(['events', 'tail', '--types', 'data.file.*', '--path', 'data://.my/inbox/**']);
    try {
      await tail.waitFor('stderr', /Listening for alice's events \(Ctrl-C to stop\)/);
      await nudge(tail.out);
      await alice.file('data://.my/inbox/tailed.txt').put('hello');
      await alice.dir('data://.my/elsewhere').create();
      await alice.file('data://.my/inbox/tailed.txt').delete();
      await tail.waitFor('stdout', /data\.file\.deleted {2}data:\/\/alice\/inbox\/tailed\.txt/);
    } finally {
      assert.equal(await tail.interrupt(), 0, tail.err());
    }
    const lines = tail.out().trimEnd().split('\n').filter((l) => l.includes('tailed.txt'));
    assert.equal(lines.length, 2, tail.out());
    assert.match(lines[0]!, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z {2}data\.file\.created {2}data:\/\/alice\/inbox\/tailed\.txt {2}5 B, text\/plain; charset=utf-8, by alice$/);
    assert.match(lines[1]!, /^\S+Z {2}data\.file\.deleted {2}data:\/\/alice\/inbox\/tailed\.txt {2}5 B, by alice$/);
    assert.doesNotMatch(tail.out(), /elsewhere/, 'the filter let a directory of another path through');
  });

  test('--json prints each CloudEvent as one line; --since prints what came after that event first', async () => {
    const filter = ['--types', 'data.file.created', '--path', 'data://.my/inbox/**'];
    const tail = start(['events', 'tail', '--json', ...filter]);
    let probe: CloudEvent;
    try {
      await tail.waitFor('stderr', /Listening/);
      const name = await nudge(tail.out);
      await alice.file('data://.my/inbox/json-1.txt').put('1');
      await alice.file('data://.my/inbox/json-2.txt').put('22');
      await tail.waitFor('stdout', /json-2\.txt/);
      const events = tail.out().trimEnd().split('\n').map((l) => JSON.parse(l) as CloudEvent);
      probe = events.find((e) => e.subject.endsWith(name))!;
      const after = events.slice(events.indexOf(probe) + 1).filter((e) => !e.subject.includes('/probe-'));
      assert.deepEqual(after.map((e) => [e.specversion, e.type, e.subject, e.data.size]), [
        ['1.0', 'data.file.created', 'data://alice/inbox/json-1.txt', 1],
        ['1.0', 'data.file.created', 'data://alice/inbox/json-2.txt', 2],
      ]);
    } finally {
      assert.equal(await tail.interrupt(), 0, tail.err());
    }

    const since = start(['events', 'tail', '--json', '--since', probe.id, ...filter]);
    try {
      await since.waitFor('stdout', /json-2\.txt/);
      assert.match(since.err(), new RegExp(`after ${probe.id}`));
    } finally {
      assert.equal(await since.interrupt(), 0, since.err());
    }
    const replayed = since.out().trimEnd().split('\n').map((l) => JSON.parse(l) as CloudEvent).filter((e) => !e.subject.includes('/probe-'));
    assert.deepEqual(replayed.map((e) => e.subject), ['data://alice/inbox/json-1.txt', 'data://alice/inbox/json-2.txt']);
  });

  test('mistakes are usage errors (exit 2); refusals say what the server said (exit 1)', async () => {
    const none = await algo(['events']);
    assert.equal(none.code, 2);
    assert.match(none.stderr, /algo events needs an action: tail/);
    const since = await algo(['events', 'tail', '--since', 'yesterday']);
    assert.equal(since.code, 2);
    assert.match(since.stderr, /--since takes an event id/);
    const expired = await algo(['events', 'tail', '--since', `evt_${'0'.repeat(24)}`]);
    assert.equal(expired.code, 1);
    assert.match(expired.stderr, /algo events: event evt_0+ is not kept any more/);
    const theirs = await algo(['events', 'tail', '--user', 'bob']);
    assert.equal(theirs.code, 1);
    assert.match(theirs.stderr, /^algo events: /);
  });
});

/** A webhook receiver on 127.0.0.1 that records what it gets. */
async function receiver() {
  const got: { headers: http.IncomingHttpHeaders; body: string }[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8').on('data', (c: string) => (body += c));
    req.on('end', () => {
      got.push({ headers: req.headers, body });
      res.end('ok');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    got,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

async function until(check: () => boolean | Promise<boolean>, what: string, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('algo subscriptions', () => {
  test('create prints the secret once; list, show, update, test, deliveries, redeliver, rotate, delete', async () => {
    const rx = await receiver();
    try {
      const made = await algo(['subscriptions', 'create', rx.url, '--types', 'data.directory.*', '--path', 'data://.my/hooked/**']);
      assert.equal(made.code, 0, made.stderr);
      assert.match(made.stdout, /^whsec_[A-Za-z0-9+/]+=*\n$/, 'the secret alone on stdout');
      assert.match(made.stderr, /it is not shown again/);
      const secret = made.stdout.trim();
      const id = /Created (sub_[0-9a-f]{24})/.exec(made.stderr)![1]!;

      const list = await algo(['subscriptions']);
      assert.equal(list.code, 0, list.stderr);
      assert.match(list.stdout, /^ID +URL +TYPES +PATH +STATUS$/m);
      assert.match(list.stdout, new RegExp(`^${id} +${rx.url} +data\\.directory\\.\\* +data://\\S+/hooked/\\*\\* +enabled$`, 'm'));
      const listed = JSON.parse((await algo(['subscriptions', 'list', '--json'])).stdout) as { id: string; secret?: string }[];
      assert.ok(listed.some((x) => x.id === id));
      assert.ok(listed.every((x) => x.secret === undefined));
      const shown = await algo(['subscriptions', 'show', id]);
      assert.match(shown.stdout, new RegExp(`^url: +${rx.url}$`, 'm'));
      assert.ok(!shown.stdout.includes(secret), 'the secret was shown again');

      const disabled = await algo(['subscriptions', 'update', id, '--disable', '--types', 'data.directory.created']);
      assert.equal(disabled.code, 0, disabled.stderr);
      assert.match(disabled.stdout, /^status: +disabled$/m);
      assert.match(disabled.stdout, /^types: +data\.directory\.created$/m);
      assert.equal((await algo(['subscriptions', 'update', id, '--enable'])).code, 0);

      // A test event reaches the receiver, signed with the secret printed.
      const sent = await algo(['subscriptions', 'test', id]);
      assert.equal(sent.code, 0, sent.stderr);
      const delivery = /delivery (msg_[0-9a-f]{24})/.exec(sent.stdout)![1]!;
      await until(() => rx.got.length >= 1, 'the test delivery');
      assert.equal(rx.got[0]!.headers['webhook-id'], delivery);
      assert.equal((await verifyWebhook(secret, rx.got[0]!.headers, rx.got[0]!.body)).type, 'webhook.test');
      await until(async () => /delivered/.test((await algo(['subscriptions', 'deliveries', id])).stdout), 'the delivery to be recorded');
      const deliveries = await algo(['subscriptions', 'deliveries', id]);
      assert.match(deliveries.stdout, new RegExp(`^${delivery} +evt_[0-9a-f]{24} +webhook\\.test +delivered +1 +\\S+ +HTTP 200$`, 'm'));
      const again = await algo(['subscriptions', 'redeliver', id, delivery]);
      assert.equal(again.code, 0, again.stderr);
      await until(() => rx.got.length >= 2, 'the redelivery');
      assert.equal(rx.got[1]!.headers['webhook-id'], delivery);

      const rotated = await algo(['subscriptions', 'rotate', id]);
      assert.equal(rotated.code, 0, rotated.stderr);
      assert.match(rotated.stdout, /^whsec_/);
      assert.notEqual(rotated.stdout.trim(), secret);
      assert.match(rotated.stderr, /old one signs beside it for 24 hours/);

      const deleted = await algo(['subscriptions', 'delete', id]);
      assert.equal(deleted.code, 0, deleted.stderr);
      assert.ok(!(await algo(['subscriptions'])).stdout.includes(id));
      const gone = await algo(['subscriptions', 'show', id]);
      assert.equal(gone.code, 1);
      assert.match(gone.stderr, /^algo subscriptions: /);
    } finally {
      await rx.close();
    }
  });

  test('mistakes are usage errors (exit 2)', async () => {
    for (const [args, pattern] of [
      [['subscriptions', 'nope'], /unknown action "nope"/],
      [['subscriptions', 'create'], /needs URL/],
      [['subscriptions', 'update', 'sub_x'], /needs something to change/],
      [['subscriptions', 'show', 'sub_x', '--types', 'x'], /--types does not go with show/],
      [['subscriptions', 'deliveries', 'sub_x', '--limit', '0'], /--limit takes a whole number/],
    ] as const) {
      const r = await algo([...args]);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, pattern);
    }
  });
});

describe('algo triggers', () => {
  test('create runs an algorithm on each upload and writes its output; list, show, runs, update, delete', async () => {
    await release(api(s.url, aliceKey), 'alice', 'Upper', {
      'src/index.js': 'export function apply(input) { return String(input).toUpperCase(); }\n',
    }, { settings: { language: 'javascript' } });
    await alice.dir('data://.my/tin').create();
    await alice.dir('data://.my/tout').create();
    const key = await algo(['keys', 'create', 'for-triggers']);
    assert.equal(key.code, 0, key.stderr);
    const keyId = (await alice.keys('alice').list()).find((k) => k.name === 'for-triggers')!.id;

    const made = await algo([
      'triggers', 'create', 'alice/Upper/0.*', '--types', 'data.file.created', '--path', 'data://.my/tin/**',
      '--input', 'name {{name}}', '--output', 'data://.my/tout/{{name}}', '--key', 'for-triggers', '--timeout', '60',
    ]);
    assert.equal(made.code, 0, made.stderr);
    const id = /^Created (trg_[0-9a-f]{24})$/m.exec(made.stdout)![1]!;
    assert.match(made.stdout, new RegExp(`^key: +${keyId}$`, 'm'));
    assert.match(made.stdout, /^output: +data:\/\/(\.my|alice)\/tout\/\{\{name\}\}$/m);

    await alice.file('data://.my/tin/x.txt').put('anything');
    await until(() => alice.file('data://.my/tout/x.txt').exists(), 'the output file', 90_000);
    assert.equal(await alice.file('data://.my/tout/x.txt').text(), 'NAME X.TXT');

    const runs = await algo(['triggers', 'runs', id]);
    assert.equal(runs.code, 0, runs.stderr);
    assert.match(runs.stdout, /^RUN +CREATED +EVENT +SUBJECT +STATUS +HTTP +OUTPUT \/ ERROR$/m);
    assert.match(runs.stdout, /^run_[0-9a-f]{24} +\S+ +data\.file\.created +data:\/\/alice\/tin\/x\.txt +succeeded +200 +data:\/\/(\.my|alice)\/tout\/x\.txt$/m);
    const runsJson = JSON.parse((await algo(['triggers', 'runs', id, '--json', '--limit', '5'])).stdout) as { status: string }[];
    assert.deepEqual(runsJson.map((r) => r.status), ['succeeded']);

    const list = await algo(['triggers']);
    assert.match(list.stdout, new RegExp(`^${id} +alice/Upper/0\\.\\* +data\\.file\\.created +\\S+ +\\S+ +enabled$`, 'm'));
    const json = JSON.parse((await algo(['triggers', 'show', id, '--json'])).stdout) as { input: unknown; key: string; timeout: number };
    assert.deepEqual([json.input, json.key, json.timeout], ['name {{name}}', keyId, 60]);

    const changed = await algo(['triggers', 'update', id, '--disable', '--input-json', '{"file": "{{name}}"}']);
    assert.equal(changed.code, 0, changed.stderr);
    assert.match(changed.stdout, /^status: +disabled$/m);
    assert.match(changed.stdout, /^input: +\{"file":"\{\{name\}\}"\} \(JSON\)$/m);

    const bad = await algo(['triggers', 'create', 'alice/Upper', '--input', '{{nonsense}}']);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /^algo triggers: .*input/m);
    const noKey = await algo(['triggers', 'create', 'alice/Upper', '--key', 'no-such-key']);
    assert.equal(noKey.code, 1);
    assert.match(noKey.stderr, /no key with the id or name "no-such-key"/);

    assert.equal((await algo(['triggers', 'delete', id])).code, 0);
    const gone = await algo(['triggers', 'show', id]);
    assert.equal(gone.code, 1);
    assert.match(gone.stderr, /^algo triggers: /);
  });
});
