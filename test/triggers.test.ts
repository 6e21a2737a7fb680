/**
 * Triggers (issue 23; docs/events.md): a user's rule runs an algorithm version on each matching
 * event, with an input made from the event, and writes the result to a path made from it. Real
 * algorithms in real sandboxes, on every configuration (one node, PostgreSQL + S3, the cluster):
 * templates, outputs, runs and their request, `call.completed` and `trigger.failed`, the key's
 * permissions, loops (own writes, the algorithm's own SDK writes, chains deeper than 3), and
 * another user kept out.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { release } from './helpers/algorithms.ts';
import { triggerDispatch } from './helpers/triggers.ts';
import { writeUserLimits } from '../src/limits/userLimits.ts';

let s: TestServer;
let alice: ReturnType<typeof api>;
let aliceKey: string;
let bob: ReturnType<typeof api>;

const postJson = (call: ReturnType<typeof api>, path: string, body: unknown, method = 'POST') =>
  call(path, { method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

const put = (call: ReturnType<typeof api>, uri: string, body: string) => call(`/v1/data/${uri.replace(/^data:\/\//, '')}`, { method: 'PUT', body });

async function mkdir(call: ReturnType<typeof api>, parent: string, name: string) {
  const r = await postJson(call, `/v1/data/${parent}`, { name });
  assert.ok(r.status === 200 || r.status === 201 || r.status === 409, `mkdir ${parent}/${name}: ${r.status}`);
}

interface Trigger {
  id: string;
  types: string[];
  path: string | null;
  algorithm: string;
  input: unknown;
  output: string | null;
  key: string | null;
  timeout: number;
  enabled: boolean;
  disabled_reason: string | null;
}
interface Run {
  id: string;
  event_id: string;
  event_type: string;
  subject: string;
  depth: number;
  status: string;
  attempts: number;
  request_id: string;
  output: string | null;
  http_status: number | null;
  error: string | null;
  waiting: string | null;
}

async function createTrigger(body: Record<string, unknown>, who = alice, user = 'alice'): Promise<Trigger> {
  const r = await postJson(who, `/v1/users/${user}/triggers`, body);
  const out = await json(r);
  assert.equal(r.status, 201, JSON.stringify(out));
  return out as Trigger;
}

async function runs(id: string, who = alice, user = 'alice'): Promise<Run[]> {
  const r = await who(`/v1/users/${user}/triggers/${id}/runs`);
  assert.equal(r.status, 200);
  return ((await json(r)) as { results: Run[] }).results;
}

/** Waits until the trigger has `n` finished runs (bounded), and returns them, oldest first. */
async function finished(id: string, n: number, ms = 60_000): Promise<Run[]> {
  const end = Date.now() + ms;
  let got: Run[] = [];
  while (Date.now() < end) {
    got = (await runs(id)).filter((r) => r.status === 'succeeded' || r.status === 'failed');
    if (got.length >= n) return got.reverse();
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`trigger ${id}: ${got.length} of ${n} runs finished within ${ms} ms: ${JSON.stringify(await runs(id))}`);
}

/** Reads a file's text, waiting (bounded) for it to exist. */
async function fileText(uri: string, ms = 60_000): Promise<string> {
  const end = Date.now() + ms;
  for (;;) {
    const r = await alice(`/v1/data/${uri.replace(/^data:\/\//, '')}`);
    if (r.status === 200) return r.text();
    await r.body?.cancel();
    if (Date.now() > end) assert.fail(`${uri} was not written within ${ms} ms`);
    await new Promise((res) => setTimeout(res, 50));
  }
}

/** The user's events in the outbox (through the live stream's backlog is the test of events.test.ts; here the store is read). */
async function eventsOf(type: string): Promise<{ type: string; subject: string; data: Record<string, unknown> }[]> {
  const rows = await s.services.store.db.selectFrom('events').innerJoin('users', 'users.id', 'events.user_id').select(['events.type', 'events.subject', 'events.data', 'users.username']).where('events.type', '=', type).orderBy('events.id').execute();
  return rows.filter((r) => r.username === 'alice').map((r) => ({ type: r.type, subject: r.subject, data: JSON.parse(r.data) as Record<string, unknown> }));
}

before(async () => {
  // A user's queued runs are capped at 60 here (the budget tests queue 50 at once).
  s = await startServer({ env: { ALGOHOST_TRIGGER_MAX_QUEUED: '60' } });
  aliceKey = await s.user('alice');
  alice = api(s.url, aliceKey);
  bob = api(s.url, await s.user('bob'));
  // Upper: text in, text out; Echo: JSON in, JSON out; Fails: always throws.
  await release(alice, 'alice', 'Upper', { 'src/index.js': "exports.apply = (x) => String(x).toUpperCase();\n" }, { settings: { language: 'javascript' } });
  await release(alice, 'alice', 'Echo', { 'src/index.js': 'exports.apply = (x) => ({ got: x });\n' }, { settings: { language: 'javascript' } });
  await release(alice, 'alice', 'Fails', { 'src/index.js': "exports.apply = () => { throw new Error('no thank you'); };\n" }, { settings: { language: 'javascript' } });
  for (const dir of ['inbox', 'out', 'json', 'fail', 'a', 'b', 'c', 'd', 'loop', 'keys', 'bin'])
    await mkdir(alice, '.my', dir);
});
after(() => s.close());

describe('a trigger', () => {
  test('runs its algorithm on a matching upload and writes the result to its output path', async () => {
    const t = await createTrigger({ types: ['data.file.created'], path: 'data://.my/inbox/**', algorithm: 'alice/Upper/0.*', input: '{{subject}} is {{data.size}} bytes, {{name}} {{stem}} {{ext}}', output: 'data://.my/out/{{stem}}.upper' });
    // A second, writing where no directory is yet: made for it.
    const deep = await createTrigger({ types: ['data.file.created'], path: 'data://.my/inbox/**', algorithm: 'alice/Upper', input: '{{name}}', output: 'data://.my/made/for/you/{{name}}' });
    assert.match(t.id, /^trg_[0-9a-f]{24}$/);
    assert.deepEqual(t.types, ['data.file.created']);
    assert.equal(t.enabled, true);
    assert.match(t.key ?? '', /.+/, 'the key that made it, by default');
    assert.equal((await put(alice, 'data://.my/inbox/hello.txt', 'hello')).status, 200);
    assert.equal(await fileText('data://.my/out/hello.upper'), 'DATA://ALICE/INBOX/HELLO.TXT IS 5 BYTES, HELLO.TXT HELLO TXT');
    assert.equal(await fileText('data://.my/made/for/you/hello.txt'), 'HELLO.TXT');
    await alice(`/v1/users/alice/triggers/${deep.id}`, { method: 'DELETE' });
    const [run] = await finished(t.id, 1);
    assert.equal(run!.status, 'succeeded', JSON.stringify(run));
    assert.equal(run!.subject, 'data://alice/inbox/hello.txt');
    assert.equal(run!.event_type, 'data.file.created');
    assert.equal(run!.depth, 1);
    assert.equal(run!.output, 'data://alice/out/hello.upper', 'the canonical URI');
    // Its call, as an async call's: the request, and `call.completed` naming the trigger.
    const req = await json(await alice(`/v1/requests/${run!.request_id}`));
    assert.equal(req.status, 'done');
    assert.equal(req.response.result, 'DATA://ALICE/INBOX/HELLO.TXT IS 5 BYTES, HELLO.TXT HELLO TXT');
    const completed = (await eventsOf('call.completed')).find((e) => e.data.request_id === run!.request_id);
    assert.ok(completed, 'call.completed for the run');
    assert.equal(completed.data.status, 'succeeded');
    assert.equal((completed.data.trigger as { trigger: string }).trigger, t.id);
    // The output's own event says the trigger wrote it, and did not fire it again.
    const written = (await eventsOf('data.file.created')).find((e) => e.subject === 'data://alice/out/hello.upper');
    assert.equal((written?.data.trigger as { trigger: string; depth: number } | undefined)?.trigger, t.id);
    // Another file elsewhere, or another type, fires nothing.
    await put(alice, 'data://.my/out/other.txt', 'x');
    await put(alice, 'data://.my/inbox/hello.txt', 'updated');
    await new Promise((r) => setTimeout(r, 500));
    assert.equal((await runs(t.id)).length, 1);
    await alice(`/v1/users/alice/triggers/${t.id}`, { method: 'DELETE' });
  });

  test('a JSON template is sent as JSON, one placeholder alone keeping its type; a JSON result is written as its text', async () => {
    const t = await createTrigger({ types: ['data.file.*'], path: 'data://.my/json/*.in', algorithm: 'alice/Echo', input: { uri: '{{subject}}', size: '{{data.size}}', said: 'size {{data.size}}', list: ['{{type}}'] }, output: 'data://.my/json/{{stem}}.out' });
    await put(alice, 'data://.my/json/a.in', '1234');
    const out = JSON.parse(await fileText('data://.my/json/a.out')) as unknown;
    assert.deepEqual(out, { got: { uri: 'data://alice/json/a.in', size: 4, said: 'size 4', list: ['data.file.created'] } });
    await alice(`/v1/users/alice/triggers/${t.id}`, { method: 'DELETE' });
  });

  test('a trigger with no output drops the result; only its call.completed stays; the run counts in usage', async () => {
    const callsSoFar = async () => ((await json(await alice('/v1/users/alice/usage'))) as { as_caller: { total: { calls: number } } }).as_caller.total.calls;
    // Settled first: in a cluster, an earlier test's run on the other API node is counted with
    // that node's next flush (every second), which once landed after this count was read.
    let before = await callsSoFar();
    for (let i = 0; i < 10; i++) {
      await new Promise((r) => setTimeout(r, 1_200));
      const now = await callsSoFar();
      if (now === before) break;
      before = now;
    }
    const t = await createTrigger({ types: ['data.file.created'], path: 'data://.my/bin/**', algorithm: 'alice/Upper' });
    assert.equal(t.input, '{{subject}}');
    await put(alice, 'data://.my/bin/x', 'x');
    const [run] = await finished(t.id, 1);
    assert.equal(run!.status, 'succeeded');
    assert.equal(run!.output, null);
    const list = await json(await alice('/v1/data/.my/bin'));
    assert.deepEqual((list.files as { filename: string }[]).map((f) => f.filename), ['x']);
    assert.ok((await eventsOf('call.completed')).some((e) => e.data.request_id === run!.request_id));
    // Finished runs are kept 7 days.
    await s.services.triggers.sweep(Date.now() + 6 * 24 * 3_600_000);
    assert.equal((await runs(t.id)).length, 1);
    await s.services.triggers.sweep(Date.now() + 8 * 24 * 3_600_000);
    assert.equal((await runs(t.id)).length, 0);
    // Counted as the owner's call (in a cluster, another node's count arrives with its next flush).
    const end = Date.now() + 15_000;
    while ((await callsSoFar()) < before + 1 && Date.now() < end) await new Promise((r) => setTimeout(r, 200));
    assert.equal(await callsSoFar(), before + 1);
    await alice(`/v1/users/alice/triggers/${t.id}`, { method: 'DELETE' });
  });

  test('a failing run is listed with its error and raises trigger.failed', async () => {
    const t = await createTrigger({ types: ['data.file.created'], path: 'data://.my/fail/**', algorithm: 'alice/Fails', output: 'data://.my/fail/{{name}}.out' });
    await put(alice, 'data://.my/fail/f.txt', 'x');
    const [run] = await finished(t.id, 1);
    assert.equal(run!.status, 'failed');
    assert.match(run!.error ?? '', /no thank you/);
    const failed = (await eventsOf('trigger.failed')).find((e) => e.data.run_id === run!.id);
    assert.ok(failed, 'trigger.failed raised');
    assert.equal(failed.subject, 'data://alice/fail/f.txt');
    assert.equal(failed.data.trigger_id, t.id);
    assert.match(String(failed.data.error), /no thank you/);
    assert.equal((await alice('/v1/data/.my/fail/f.txt.out')).status, 404, 'no output for a failed run');
    const completed = (await eventsOf('call.completed')).find((e) => e.data.request_id === run!.request_id);
    assert.equal(completed?.data.status, 'failed');
    await alice(`/v1/users/alice/triggers/${t.id}`, { method: 'DELETE' });
  });
});

describe('loops', () => {
  test('a trigger is not fired by its own output, even on the path it watches', async () => {
    const t = await createTrigger({ types: ['data.file.*'], path: 'data://.my/loop/**', algorithm: 'alice/Upper', output: 'data://.my/loop/{{name}}.up' });
    await put(alice, 'data://.my/loop/seed', 'x');
    await fileText('data://.my/loop/seed.up');
    await new Promise((r) => setTimeout(r, 1000));
    const all = await runs(t.id);
    assert.equal(all.length, 1, JSON.stringify(all));
    await alice(`/v1/users/alice/triggers/${t.id}`, { method: 'DELETE' });
  });

  test('chains of triggers stop at depth 3: the fourth is recorded as failed and not run', async () => {
    const a = await createTrigger({ types: ['data.file.created'], path: 'data://.my/a/**', algorithm: 'alice/Upper', input: '{{name}}', output: 'data://.my/b/{{name}}' });
    const b = await createTrigger({ types: ['data.file.created'], path: 'data://.my/b/**', algorithm: 'alice/Upper', input: '{{name}}', output: 'data://.my/c/{{name}}' });
    const c = await createTrigger({ types: ['data.file.created'], path: 'data://.my/c/**', algorithm: 'alice/Upper', input: '{{name}}', output: 'data://.my/d/{{name}}' });
    const d = await createTrigger({ types: ['data.file.created'], path: 'data://.my/d/**', algorithm: 'alice/Upper', input: '{{name}}', output: 'data://.my/a/{{name}}.again' });
    await put(alice, 'data://.my/a/start', 's');
    assert.equal(await fileText('data://.my/d/start'), 'START');
    const [dRun] = await finished(d.id, 1);
    assert.equal(dRun!.status, 'failed');
    assert.equal(dRun!.depth, 4);
    assert.match(dRun!.error ?? '', /at most 3 deep/);
    assert.equal(dRun!.attempts, 0, 'never started');
    assert.equal((await alice('/v1/data/.my/a/start.again')).status, 404);
    assert.deepEqual([(await finished(a.id, 1))[0]!.depth, (await finished(b.id, 1))[0]!.depth, (await finished(c.id, 1))[0]!.depth], [1, 2, 3]);
    assert.ok((await eventsOf('trigger.failed')).some((e) => e.data.run_id === dRun!.id));
    for (const t of [a, b, c, d]) await alice(`/v1/users/alice/triggers/${t.id}`, { method: 'DELETE' });
  });

  test("an algorithm's own writes through the SDK during a run do not fire its trigger again", async () => {
    await release(
      alice,
      'alice',
      'PyLooper',
      {
        'src/PyLooper.py': `import Algorithmia

client = Algorithmia.client()


def apply(uri):
    name = uri.rsplit('/', 1)[1]
    client.file('data://.my/loop/' + name + '.sdk').put('written by the algorithm')
    return name
`,
      },
      { settings: { language: 'python3' } },
    );
    const t = await createTrigger({ types: ['data.file.created'], path: 'data://.my/loop/*.seed', algorithm: 'alice/PyLooper' });
    // Would fire on `x.seed.sdk`? No: the pattern wants *.seed; the next name is made to match.
    const t2 = await createTrigger({ types: ['data.file.*'], path: 'data://.my/loop/**', algorithm: 'alice/PyLooper' });
    await put(alice, 'data://.my/loop/one.seed', 'x');
    await fileText('data://.my/loop/one.seed.sdk');
    await new Promise((r) => setTimeout(r, 1500));
    // Both runs on one.seed write one.seed.sdk. t fired once; t2 fired on one.seed (depth 1) but
    // not on the .sdk file its own run wrote; t's run's write of it fired t2 at depth 2, whose
    // write (one.seed.sdk.sdk) fired nothing already in its chain.
    const r1 = await finished(t.id, 1);
    const r2 = await finished(t2.id, 2);
    assert.equal(r1.length, 1, JSON.stringify(r1));
    assert.deepEqual(r2.map((r) => [r.subject, r.depth]).sort(), [
      ['data://alice/loop/one.seed', 1],
      ['data://alice/loop/one.seed.sdk', 2],
    ]);
    for (const x of [t, t2]) await alice(`/v1/users/alice/triggers/${x.id}`, { method: 'DELETE' });
  });
});

describe('budgets', () => {
  /** Every run of these triggers once the outbox is read to its end and none is queued or running (bounded). */
  async function settled(ids: string[], ms = 90_000): Promise<Run[]> {
    const end = Date.now() + ms;
    const db = s.services.store.db;
    for (;;) {
      // Where the dispatchers stand first, then the runs (helpers/triggers.ts says why).
      const { caughtUp, cursor, last } = await triggerDispatch(db);
      const all = (await Promise.all(ids.map((id) => runs(id)))).flat();
      if (caughtUp && all.every((r) => r.status === 'succeeded' || r.status === 'failed')) return all;
      if (Date.now() > end) assert.fail(`not settled within ${ms} ms: ${all.length} runs, cursor ${cursor} of ${last}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** The budget's `trigger.failed` events raised for events under `subject`. */
  async function budgetEvents(subject: string) {
    return (await eventsOf('trigger.failed')).filter((e) => e.subject.startsWith(subject) && typeof e.data.budget === 'number');
  }

  for (const k of [6, 50]) {
    test(`${k} triggers firing each other on one path, each naming no algorithm: one upload causes 50 runs in all, and one trigger.failed names the budget`, async () => {
      const dir = `amp${k}`;
      await mkdir(alice, '.my', dir);
      const ts: Trigger[] = [];
      for (let i = 0; i < k; i++) ts.push(await createTrigger({ path: `data://.my/${dir}/**`, algorithm: 'alice/NoSuchAlgorithm' }));
      if (k === 50) {
        // As many as one user may have: one more is refused, naming the cap.
        const over = await postJson(alice, '/v1/users/alice/triggers', { path: `data://.my/${dir}/**`, algorithm: 'alice/NoSuchAlgorithm' });
        const body = await json(over);
        assert.equal(over.status, 409, JSON.stringify(body));
        assert.equal(body.error.code, 'too_many_triggers');
        assert.equal(body.error.limit, 50);
      }
      await put(alice, `data://.my/${dir}/x`, 'x');
      const all = await settled(ts.map((t) => t.id));
      // 9e3d0b8: K = 6 made 1,956 runs; every one now counts against the upload's budget.
      assert.equal(all.length, 50, `runs: ${all.length}`);
      // The upload fires each trigger once; the rest of the budget goes to deeper runs in whatever
      // order they end (runs of depth 2 and 3 interleave), never past depth 3.
      assert.equal(all.filter((r) => r.depth === 1).length, k);
      assert.ok(all.every((r) => r.depth <= 3), JSON.stringify(all.map((r) => r.depth)));
      const budget = await budgetEvents(`data://alice/${dir}/`);
      assert.equal(budget.length, 1, JSON.stringify(budget));
      assert.equal(budget[0]!.data.budget, 50);
      assert.equal(budget[0]!.data.not_run, true);
      assert.match(String(budget[0]!.data.error), /at most 50 trigger runs.*ALGOHOST_TRIGGER_RUNS_PER_EVENT/);
      // The failures of runs that never started fire nothing: none of them made a run.
      const notRun = new Set((await eventsOf('trigger.failed')).filter((e) => e.data.not_run === true).map((e) => e.data.run_id));
      assert.ok(!all.some((r) => notRun.has(r.event_id)));
      for (const t of ts) await alice(`/v1/users/alice/triggers/${t.id}`, { method: 'DELETE' });
    });
  }

  test('a chain that writes real outputs, each where the others watch, stops at the budget: 50 runs, 50 files', async () => {
    await mkdir(alice, '.my', 'relay');
    const ts: Trigger[] = [];
    for (let i = 0; i < 8; i++) ts.push(await createTrigger({ types: ['data.file.created'], path: 'data://.my/relay/**', algorithm: 'alice/Upper', input: '{{name}}', output: 'data://.my/relay/{{run}}' }));
    await put(alice, 'data://.my/relay/start', 's');
    const all = await settled(ts.map((t) => t.id));
    assert.equal(all.length, 50);
    assert.ok(all.every((r) => r.status === 'succeeded'), JSON.stringify(all.filter((r) => r.status !== 'succeeded')));
    // Depth 1: 8; then each output fires the 7 others, as far as the budget goes (deeper runs may
    // interleave, as their runs end), never past depth 3.
    assert.equal(all.filter((r) => r.depth === 1).length, 8);
    assert.ok(all.every((r) => r.depth <= 3));
    const listing = (await json(await alice('/v1/data/.my/relay'))) as { files?: unknown[] };
    assert.equal(listing.files?.length, 51, 'the seed and one output per run');
    assert.equal((await budgetEvents('data://alice/relay/')).length, 1);
    for (const t of ts) await alice(`/v1/users/alice/triggers/${t.id}`, { method: 'DELETE' });
  });
});

describe("the owner's limits", () => {
  test('a run over its owner\'s calls a minute waits in its queue, saying why, and starts when allowed: none fails, none counts an attempt', async () => {
    const carolKey = await s.user('carol');
    const carol = api(s.url, carolKey);
    await writeUserLimits(s.services.store, (await s.services.users.require('carol')).id, { calls_per_min: 60, burst: 1 });
    await release(carol, 'carol', 'Shout', { 'src/index.js': 'exports.apply = (x) => String(x).toUpperCase();\n' }, { settings: { language: 'javascript' } });
    await mkdir(carol, '.my', 'paced');
    // Publishing spent no call; the bucket is full (1 token), and refills one a second.
    const t = await createTrigger({ types: ['data.file.created'], path: 'data://.my/paced/**', algorithm: 'carol/Shout', input: '{{name}}' }, carol, 'carol');
    for (const name of ['a', 'b', 'c']) assert.equal((await put(carol, `data://carol/paced/${name}`, 'x')).status, 200);
    const waits = new Set<string>();
    const end = Date.now() + 60_000;
    let all: Run[] = [];
    while (Date.now() < end) {
      all = await runs(t.id, carol, 'carol');
      for (const r of all) if (r.status === 'queued' && r.waiting) waits.add(r.waiting);
      if (all.length === 3 && all.every((r) => r.status === 'succeeded' || r.status === 'failed')) break;
      await new Promise((r) => setTimeout(r, 25));
    }
    assert.deepEqual(all.map((r) => r.status), ['succeeded', 'succeeded', 'succeeded'], JSON.stringify(all));
    assert.deepEqual(all.map((r) => r.attempts), [1, 1, 1]);
    assert.ok([...waits].some((w) => /^rate_limited: you may make 60 calls a minute/.test(w)), `seen waiting: ${JSON.stringify([...waits])}`);
    // One token a second: the third started at least a second and a half after the first.
    const started = all.map((r) => Date.parse((r as Run & { started_at: string }).started_at)).sort((a, b) => a - b);
    assert.ok(started[2]! - started[0]! >= 1500, `started ${started[2]! - started[0]!} ms apart`);
    assert.ok(all.every((r) => r.waiting === null));
    await carol(`/v1/users/carol/triggers/${t.id}`, { method: 'DELETE' });
  });
});

describe("one user's backlog", () => {
  test('past the cap on queued runs, a new run is recorded as not run, not queued', async () => {
    const gina = api(s.url, await s.user('gina'));
    // One call a minute: every run past the first waits in the queue.
    await writeUserLimits(s.services.store, (await s.services.users.require('gina')).id, { calls_per_min: 1, burst: 1 });
    await mkdir(gina, '.my', 'flood');
    const t = await createTrigger({ types: ['data.file.created'], path: 'data://.my/flood/**', algorithm: 'alice/Upper', input: '{{name}}' }, gina, 'gina');
    for (let i = 0; i < 65; i += 13) await Promise.all(Array.from({ length: 13 }, (_, j) => put(gina, `data://gina/flood/f${i + j}`, 'x')));
    const db = s.services.store.db;
    const end = Date.now() + 60_000;
    let all: Run[] = [];
    for (;;) {
      // Where the dispatchers stand first, then the runs (helpers/triggers.ts says why).
      const { caughtUp, cursor, last } = await triggerDispatch(db);
      all = ((await json(await gina(`/v1/users/gina/triggers/${t.id}/runs?limit=200`))) as { results: Run[] }).results;
      if (caughtUp && all.length >= 65) break;
      if (Date.now() > end) assert.fail(`${all.length} runs, cursor ${cursor} of ${last}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const refused = all.filter((r) => r.status === 'failed' && /already queued, the most one user may have \(ALGOHOST_TRIGGER_MAX_QUEUED\)/.test(r.error ?? ''));
    const waiting = all.filter((r) => r.status === 'queued');
    assert.equal(all.length, 65);
    assert.ok(waiting.length <= 60, `${waiting.length} queued`);
    assert.ok(refused.length >= 4, `${refused.length} refused: ${JSON.stringify(all.map((r) => r.status))}`);
    assert.ok(refused.every((r) => r.attempts === 0));
    await gina(`/v1/users/gina/triggers/${t.id}`, { method: 'DELETE' });
  });
});

describe('sharing', () => {
  test("one trigger's backlog does not hold another trigger's runs behind it", async () => {
    await release(alice, 'alice', 'Sleepy', { 'src/index.js': 'export async function apply(x) { await new Promise((r) => setTimeout(r, 8000)); return x; }\n' }, { settings: { language: 'javascript' } });
    await mkdir(alice, '.my', 'busy');
    await mkdir(alice, '.my', 'quick');
    const slow = await createTrigger({ types: ['data.file.created'], path: 'data://.my/busy/**', algorithm: 'alice/Sleepy' });
    const fast = await createTrigger({ types: ['data.file.created'], path: 'data://.my/quick/**', algorithm: 'alice/Upper' });
    const backlog = 12;
    await Promise.all(Array.from({ length: backlog }, (_, i) => put(alice, `data://.my/busy/b${i}`, 'x')));
    await put(alice, 'data://.my/quick/q', 'x');
    const [q] = await finished(fast.id, 1);
    const slowRuns = await finished(slow.id, backlog, 180_000);
    type Timed = Run & { started_at: string };
    // A node runs 8 at once, 4 of one trigger: the quick run started beside the first 4 of the
    // backlog (8 in a cluster of two API nodes), not once every run of the backlog had a slot.
    const before = (slowRuns as Timed[]).filter((r) => Date.parse(r.started_at) <= Date.parse((q as Timed).started_at)).length;
    assert.ok(before <= 8, `${before} of the backlog's ${backlog} runs started before the quick run`);
    for (const t of [slow, fast]) await alice(`/v1/users/alice/triggers/${t.id}`, { method: 'DELETE' });
  });
});

describe("the trigger's key", () => {
  async function key(permissions: Record<string, unknown>, who = alice, user = 'alice') {
    const r = await postJson(who, `/v1/users/${user}/keys`, { name: `k${Math.random().toString(36).slice(2, 8)}`, permissions });
    const body = await json(r);
    assert.equal(r.status, 201, JSON.stringify(body));
    return body as { id: string; api_key: string };
  }

  test('runs have the permissions of the key it names, so a restricted key stays restricted', async () => {
    const onlyEcho = await key({ algo_acl: ['algo://alice/Echo/*'] });
    const t = await createTrigger({ types: ['data.file.created'], path: 'data://.my/keys/*.a', algorithm: 'alice/Upper', key: onlyEcho.id, output: 'data://.my/keys/{{name}}.out' });
    assert.equal(t.key, onlyEcho.id);
    await put(alice, 'data://.my/keys/x.a', 'x');
    const [run] = await finished(t.id, 1);
    assert.equal(run!.status, 'failed');
    assert.match(run!.error ?? '', /may not call algo:\/\/alice\/Upper/);
    assert.equal(run!.http_status, 401, 'algo_not_allowed, as a call with that key gets');
    const readOnly = await key({ allow_data_write: false });
    const t2 = await createTrigger({ types: ['data.file.created'], path: 'data://.my/keys/*.b', algorithm: 'alice/Upper', key: readOnly.id, output: 'data://.my/keys/{{name}}.out' });
    await put(alice, 'data://.my/keys/x.b', 'x');
    const [run2] = await finished(t2.id, 1);
    assert.equal(run2!.status, 'failed');
    assert.match(run2!.error ?? '', /could not be written.*allow_data_write is off/);
    assert.equal((await alice('/v1/data/.my/keys/x.b.out')).status, 404);
  });

  test('a restricted key cannot name a stronger key, and a revoked key turns its trigger off', async () => {
    const weak = await key({ algo_acl: ['algo://alice/Echo/*'] });
    const strong = await key({});
    const r = await postJson(api(s.url, weak.api_key), '/v1/users/alice/triggers', { algorithm: 'alice/Echo', key: strong.id });
    assert.equal(r.status, 403);
    assert.equal((await json(r)).error.code, 'permission_escalation');
    const t = await createTrigger({ types: ['data.file.created'], path: 'data://.my/keys/*.c', algorithm: 'alice/Upper', key: strong.id });
    assert.equal((await alice(`/v1/users/alice/keys/${strong.id}`, { method: 'DELETE' })).status, 204);
    await put(alice, 'data://.my/keys/x.c', 'x');
    const [run] = await finished(t.id, 1);
    assert.equal(run!.status, 'failed');
    const now = await json(await alice(`/v1/users/alice/triggers/${t.id}`));
    assert.equal(now.enabled, false);
    assert.match(now.disabled_reason, /revoked or deleted/);
  });
});

describe('the routes', () => {
  test('list, read, change (checked as at creation), delete', async () => {
    const t = await createTrigger({ algorithm: 'alice/Echo', types: ['data.file.created'] });
    assert.ok((await json(await alice('/v1/users/alice/triggers'))).results.some((x: Trigger) => x.id === t.id));
    assert.equal((await json(await alice(`/v1/users/alice/triggers/${t.id}`))).algorithm, 'alice/Echo');
    const changed = await json(await postJson(alice, `/v1/users/alice/triggers/${t.id}`, { path: 'data://.my/elsewhere/**', enabled: false, timeout: 10 }, 'PATCH'));
    assert.equal(changed.path, 'data://.my/elsewhere/**');
    assert.equal(changed.enabled, false);
    assert.equal(changed.timeout, 10);
    assert.deepEqual(changed.types, ['data.file.created']);
    const bad = await postJson(alice, `/v1/users/alice/triggers/${t.id}`, { output: 'nowhere' }, 'PATCH');
    assert.equal(bad.status, 400);
    assert.equal((await json(bad)).error.code, 'invalid_trigger');
    assert.equal((await alice(`/v1/users/alice/triggers/${t.id}`, { method: 'DELETE' })).status, 204);
    const gone = await alice(`/v1/users/alice/triggers/${t.id}`);
    assert.equal(gone.status, 404);
    assert.equal((await json(gone)).error.code, 'trigger_not_found');
  });

  test('bad bodies get 400 invalid_trigger naming the field', async () => {
    const cases: [unknown, RegExp][] = [
      [[], /JSON object/],
      [{}, /algorithm:/],
      [{ algorithm: 'nope' }, /algorithm:/],
      [{ algorithm: 'alice/Echo/1.x.y' }, /algorithm:/],
      [{ algorithm: 'alice/Echo', types: ['data.nothing'] }, /matches no event type/],
      // 70 kB of one pattern: V8 refuses to compile it (a 500 before), so it is refused first.
      [{ algorithm: 'alice/Echo', types: ['data.' + 'a*'.repeat(35_000)] }, /longer than any event type/],
      [{ algorithm: 'alice/Echo', path: 'data://bob/**' }, /your own data/],
      [{ algorithm: 'alice/Echo', input: '{{secret}}' }, /not a placeholder/],
      [{ algorithm: 'alice/Echo', input: 5 }, /input:/],
      [{ algorithm: 'alice/Echo', output: 'relative/path' }, /output:/],
      [{ algorithm: 'alice/Echo', output: 'data://.my/{{nope}}' }, /not a placeholder/],
      [{ algorithm: 'alice/Echo', timeout: 0 }, /timeout:/],
      [{ algorithm: 'alice/Echo', enabled: 'yes' }, /enabled:/],
      [{ algorithm: 'alice/Echo', key: 'key_nope' }, /no live API key/],
      [{ algorithm: 'alice/Echo', colour: 'red' }, /unknown field "colour"/],
    ];
    for (const [body, message] of cases) {
      const r = await postJson(alice, '/v1/users/alice/triggers', body);
      const out = await json(r);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(out.error.code, 'invalid_trigger', JSON.stringify(out));
      assert.match(out.error.message, message, JSON.stringify(body));
    }
  });

  test("another user's key reaches none of the routes, and their events fire none of a user's triggers", async () => {
    const t = await createTrigger({ types: ['data.file.created'], algorithm: 'alice/Upper' });
    for (const [method, path] of [
      ['GET', '/v1/users/alice/triggers'],
      ['POST', '/v1/users/alice/triggers'],
      ['GET', `/v1/users/alice/triggers/${t.id}`],
      ['PATCH', `/v1/users/alice/triggers/${t.id}`],
      ['DELETE', `/v1/users/alice/triggers/${t.id}`],
      ['GET', `/v1/users/alice/triggers/${t.id}/runs`],
    ] as const) {
      const r = method === 'GET' || method === 'DELETE' ? await bob(path, { method }) : await postJson(bob, path, { algorithm: 'alice/Upper' }, method);
      await r.body?.cancel();
      assert.equal(r.status, 403, `${method} ${path}`);
    }
    // Through bob's own path, alice's trigger is not there.
    assert.equal((await bob(`/v1/users/bob/triggers/${t.id}`)).status, 404);
    // Bob's uploads fire none of alice's triggers (it watches every path of hers).
    await mkdir(bob, '.my', 'stuff');
    await put(bob, 'data://.my/stuff/b.txt', 'b');
    await new Promise((r) => setTimeout(r, 800));
    assert.equal((await runs(t.id)).length, 0);
    await alice(`/v1/users/alice/triggers/${t.id}`, { method: 'DELETE' });
  });
});
