/**
 * Network access for algorithms is the operator's decision (ALGOHOST_ALGORITHM_NETWORK). What
 * the default (`nat`, the egress fence) lets out is tried in full by test/egress-fence.test.ts,
 * inside network namespaces of its own; here, what each setting does on this machine.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { probeSandbox } from '../src/runtime/sandbox.ts';
import { probeFence } from '../src/runtime/egressFence.ts';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { callAlgo, release } from './helpers/algorithms.ts';

const FETCH = `export async function apply(url) {
  try { const r = await fetch(url); return 'reached: ' + (await r.text()); } catch (e) { return 'unreachable: ' + (e.cause?.code ?? e.message); }
}
`;

let target: http.Server;
let targetUrl = '';
before(async () => {
  target = http.createServer((_req, res) => res.end('hello from the host'));
  await new Promise<void>((r) => target.listen(0, '127.0.0.1', r));
  targetUrl = `http://127.0.0.1:${(target.address() as AddressInfo).port}/`;
});
after(() => new Promise<void>((r) => target.close(() => r())));

const fence = probeSandbox().available ? probeFence() : { available: false, reason: 'no sandbox' };

describe('by default (nat: the egress fence)', { skip: fence.available ? false : `the fence cannot be made here: ${fence.reason}` }, () => {
  let s: TestServer;
  before(async () => {
    s = await startServer();
  });
  after(() => s.close());

  test('an algorithm with network_access "full" runs in a namespace of its own: the host\'s loopback is not its', async () => {
    const alice = api(s.url, await s.user('alice'));
    await release(alice, 'alice', 'Net', { 'src/index.js': FETCH }, { settings: { language: 'javascript', network_access: 'full' } });
    // 127.0.0.1 is the sandbox's own loopback, where nothing listens.
    assert.match((await json(await callAlgo(alice, 'alice/Net', targetUrl))).result, /^unreachable: ECONNREFUSED/);
    // The host's loopback through the NAT's gateway is refused by the filter.
    const viaGateway = targetUrl.replace('127.0.0.1', '10.0.2.2');
    assert.match((await json(await callAlgo(alice, 'alice/Net', viaGateway))).result, /^unreachable: (EHOSTUNREACH|ECONNREFUSED)/);
    const health = await json(await fetch(`${s.url}/health`));
    assert.deepEqual(health.network, { mode: 'nat' });
  });
});

describe('with ALGOHOST_ALGORITHM_NETWORK=none', () => {
  let s: TestServer;
  before(async () => {
    s = await startServer({ env: { ALGOHOST_ALGORITHM_NETWORK: 'none' } });
  });
  after(() => s.close());

  test('network_access "full" is refused with the setting that would allow it', async () => {
    const alice = api(s.url, await s.user('alice'));
    const r = await alice('/v1/algorithms/alice', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'Net', settings: { network_access: 'full' } }) });
    assert.equal(r.status, 400);
    const body = await json(r);
    assert.equal(body.error.code, 'network_not_allowed');
    assert.match(body.error.message, /ALGOHOST_ALGORITHM_NETWORK=nat/);
  });

  test('an isolated algorithm reaches nothing', { skip: probeSandbox().available ? false : 'without the sandbox there is no network namespace' }, async () => {
    const alice = api(s.url, await s.user('carol'));
    await release(alice, 'carol', 'Isolated', { 'src/index.js': FETCH }, { settings: { language: 'javascript' } });
    assert.match((await json(await callAlgo(alice, 'carol/Isolated', targetUrl))).result, /^unreachable/);
  });
});

// The executor here stands for worker nodes: under test:shared and test:cluster, test servers
// are made otherwise (and a cluster's second API node answers /health with its own fence).
describe('on a node whose calls run elsewhere (an API node), without the fence here', { skip: process.env.ALGOHOST_TEST_BACKENDS ? 'stands for a cluster with an executor of its own: runs in test:unit' : false }, () => {
  let s: TestServer;
  let ran = 0;
  before(async () => {
    // The executor stands for the worker nodes; this node cannot make the fence.
    s = await startServer({
      networkProbe: () => ({ available: false, reason: 'no nftables on this node' }),
      executor: {
        run: async () => {
          ran++;
          return { kind: 'result', contentType: 'json', body: Buffer.from('"ran"'), stdout: '', stdoutTruncated: false, durationMs: 1 };
        },
        close: async () => undefined,
      },
    });
  });
  after(() => s.close());

  test('network_access "full" is taken: the operator\'s setting decides, and each worker node gives what its own fence can', async () => {
    const alice = api(s.url, await s.user('alice'));
    const r = await alice('/v1/algorithms/alice', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'Net', settings: { network_access: 'full' } }) });
    assert.equal(r.status, 201, await r.text());
    const health = await json(await fetch(`${s.url}/health`));
    assert.equal(health.network.mode, 'none', 'this node itself cannot fence');
    assert.equal(ran, 0);
  });
});

describe('with ALGOHOST_ALGORITHM_NETWORK=host', () => {
  let s: TestServer;
  before(async () => {
    s = await startServer({ env: { ALGOHOST_ALGORITHM_NETWORK: 'host' } });
  });
  after(() => s.close());

  test('an algorithm with network_access "full" reaches the host itself, and /health warns of it', async () => {
    const alice = api(s.url, await s.user('alice'));
    await release(alice, 'alice', 'Net', { 'src/index.js': FETCH }, { settings: { language: 'javascript', network_access: 'full' } });
    assert.equal((await json(await callAlgo(alice, 'alice/Net', targetUrl))).result, 'reached: hello from the host');
    const health = await json(await fetch(`${s.url}/health`));
    assert.equal(health.network.mode, 'host');
    assert.match(health.network.warning, /share this host's network/);
  });
});
