/**
 * Warming a version just published (issue 24, cold starts; docs/limits.md, "Cold starts"), over
 * real HTTP with real bubblewrap sandboxes: where the version a new one follows has a warm
 * worker, a worker is started for the new one ahead of its first call, and that call is warm
 * (`X-Cold-Start: false`) and answered by the new version; where it has none, nothing is started
 * and the first call is cold. Under test:cluster the API node asks the worker node warm for the
 * old version (a `warm` message on its own subject), and the test reads the worker nodes' beats.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { callAlgo, compile, publish, release, upload } from './helpers/algorithms.ts';
import { probeSandbox } from '../src/runtime/sandbox.ts';
import type { NatsExecutor } from '../src/cluster/natsExecutor.ts';

const support = probeSandbox();
const skip = support.available ? false : `bubblewrap unavailable: ${support.reason}`;

const source = (mark: string) => ({ 'src/index.js': `export function apply(input) { return ${JSON.stringify(mark)} + ':' + input; }\n` });

describe('warming a version just published', { skip }, () => {
  let s: TestServer;
  let alice: ReturnType<typeof api>;

  before(async () => {
    s = await startServer();
    alice = api(s.url, await s.user('alice'));
  });
  after(() => s.close());

  /** Idle workers per version key: this server's pool, or the worker nodes' as they last beat. */
  const warmKeys = (): Record<string, number> => (s.cluster ? (s.cluster.parts.executor as NatsExecutor).warmKeys() : s.services.runtime.pool.load().warm);
  const warmFor = (hash: string) => Object.entries(warmKeys()).some(([key, n]) => key.endsWith(`:${hash}`) && n > 0);
  const until = async (ok: () => boolean, ms: number) => {
    for (const end = Date.now() + ms; !ok(); await new Promise((r) => setTimeout(r, 50))) if (Date.now() > end) return false;
    return true;
  };

  async function call(ref: string, input: string) {
    const r = await callAlgo(alice, ref, input);
    const body = await json(r);
    assert.equal(r.status, 200, JSON.stringify(body));
    return { cold: r.headers.get('x-cold-start'), result: body.result as string };
  }

  /** A new version of `name` from `mark`'s source: its build hash and version. */
  async function next(name: string, mark: string) {
    assert.equal((await upload(alice, 'alice', name, source(mark))).status, 200);
    const hash = await compile(alice, 'alice', name);
    return { hash, version: await publish(alice, 'alice', name) };
  }

  test('a new version of an algorithm in use has a worker started ahead of its first call, which is warm and answered by it', async () => {
    const first = await release(alice, 'alice', 'Busy', source('one'), { settings: { language: 'javascript' } });
    assert.equal((await call('alice/Busy', 'a')).result, 'one:a');
    // Its worker, idle now (on a worker node: once it has said so in a beat).
    assert.ok(await until(() => warmFor(first.hash), 10_000), `no idle worker of the first version: ${JSON.stringify(warmKeys())}`);
    const two = await next('Busy', 'two');
    assert.ok(await until(() => warmFor(two.hash), 30_000), `no worker of ${two.version} was started ahead of its first call: ${JSON.stringify(warmKeys())}`);
    // Calls without a version now go to the new one: the first is warm.
    const r = await call('alice/Busy', 'b');
    assert.equal(r.result, 'two:b');
    assert.equal(r.cold, 'false', 'the first call of the version just published started a worker');
  });

  test('a private version of a public algorithm is not warmed: calls without a version stay on the public one', async () => {
    const first = await release(alice, 'alice', 'Public', source('one'), { settings: { language: 'javascript' } });
    assert.equal((await call('alice/Public', 'a')).result, 'one:a');
    assert.ok(await until(() => warmFor(first.hash), 10_000), `no idle worker of the first version: ${JSON.stringify(warmKeys())}`);
    assert.equal((await upload(alice, 'alice', 'Public', source('two'))).status, 200);
    const hash = await compile(alice, 'alice', 'Public');
    await publish(alice, 'alice', 'Public', {}, { algorithm_callability: 'private' });
    await new Promise((r) => setTimeout(r, 2000));
    assert.equal(warmFor(hash), false, `a worker of the private version was started: ${JSON.stringify(warmKeys())}`);
    assert.equal((await call('alice/Public', 'b')).result, 'one:b');
  });

  test('a new version of an algorithm nobody calls starts nothing: its first call is cold', async () => {
    const first = await release(alice, 'alice', 'Quiet', source('one'), { settings: { language: 'javascript' } });
    const two = await next('Quiet', 'two');
    // (Warming is decided when the publish returns: on one server at once, in a cluster within a
    // beat; two seconds is several beats.)
    await new Promise((r) => setTimeout(r, 2000));
    assert.equal(warmFor(two.hash), false, `a worker of ${two.version} was started: ${JSON.stringify(warmKeys())}`);
    assert.equal(warmFor(first.hash), false);
    const r = await call('alice/Quiet', 'c');
    assert.equal(r.result, 'two:c');
    assert.equal(r.cold, 'true');
  });
});
