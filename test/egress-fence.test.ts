/**
 * The egress fence holds (issue 22; docs/security.md, "The egress fence"): in a network of the
 * test's own (test/helpers/netns.ts), a real server runs in the "server" namespace
 * (test/egress-fence.inner.ts) with the default ALGOHOST_ALGORITHM_NETWORK=nat, and hostile
 * Python and JavaScript algorithms, an npm preinstall script and a setup.py try, by TCP, UDP,
 * IPv6 and names that resolve to loopback, to reach: the API node's port, a listener on the
 * server's 127.0.0.1, 10.1.2.3 (private), 169.254.169.254 (metadata), ::1 and a ULA, and the
 * stand-in internet at 198.51.100.1. Algorithms reach the internet and nothing else; builds
 * reach their configured registry (a stand-in on the server's loopback) and nothing else; no
 * leak listener hears from any of them.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { netnsUnavailable, startTestNetwork, type TestNetwork } from './helpers/netns.ts';
import { probeSandbox } from '../src/runtime/sandbox.ts';
import { probeFence } from '../src/runtime/egressFence.ts';

const skip =
  (process.env.ALGOHOST_TEST_BACKENDS ? 'makes its own network and server: runs in test:unit' : undefined) ??
  netnsUnavailable() ??
  (probeSandbox().available ? undefined : 'no sandbox here') ??
  (probeFence().available ? undefined : `no fence here: ${probeFence().reason}`);

let net: TestNetwork;
type Seen = Record<string, string>;
let results: { PyProbe: Seen; JsProbe: Seen; deployment: Seen; npmBuild: Seen | string; pipBuild: Seen | string };

/** What every probe tries (the inner script adds the API node's and the registry's ports). */
function targets(n: TestNetwork) {
  const leak = n.leakPort;
  return [
    { name: 'internet tcp', proto: 'tcp', host: n.internetAddress, port: n.ports.tcp },
    { name: 'internet udp', proto: 'udp', host: n.internetAddress, port: n.ports.udp },
    { name: 'internet by name', proto: 'tcp', host: 'good.test', port: n.ports.tcp },
    { name: 'listener on 127.0.0.1', proto: 'tcp', host: '127.0.0.1', port: leak },
    { name: 'listener on 127.0.0.1, udp', proto: 'udp', host: '127.0.0.1', port: leak },
    { name: 'listener on ::1', proto: 'tcp', host: '::1', port: leak },
    { name: 'private 10.1.2.3', proto: 'tcp', host: '10.1.2.3', port: leak },
    { name: 'private 10.1.2.3, udp', proto: 'udp', host: '10.1.2.3', port: leak },
    { name: 'metadata 169.254.169.254', proto: 'tcp', host: '169.254.169.254', port: leak },
    { name: 'metadata 169.254.169.254, udp', proto: 'udp', host: '169.254.169.254', port: leak },
    { name: 'ULA fd99::1', proto: 'tcp', host: 'fd99::1', port: leak },
    { name: 'the server address', proto: 'tcp', host: '198.51.100.2', port: leak },
    { name: 'the server address, udp', proto: 'udp', host: '198.51.100.2', port: leak },
    { name: 'the host loopback through the NAT gateway', proto: 'tcp', host: '10.0.2.2', port: leak },
    { name: 'a name resolving to 127.0.0.1', proto: 'tcp', host: 'loop.test', port: leak },
    { name: 'a name resolving to 10.1.2.3', proto: 'tcp', host: 'priv.test', port: leak },
    { name: 'a name resolving to the metadata address', proto: 'tcp', host: 'meta.test', port: leak },
    { name: 'a name resolving to the metadata address, udp', proto: 'udp', host: 'meta.test', port: leak },
    { name: 'a raw socket', proto: 'raw', host: '10.1.2.3', port: 0 },
    { name: 'a ping socket', proto: 'ping', host: '10.1.2.3', port: 0 },
    { name: 'a packet socket', proto: 'packet', host: '', port: 0 },
  ];
}

const REFUSED = [
  'listener on 127.0.0.1',
  'listener on 127.0.0.1, udp',
  'listener on ::1',
  'private 10.1.2.3',
  'private 10.1.2.3, udp',
  'metadata 169.254.169.254',
  'metadata 169.254.169.254, udp',
  'ULA fd99::1',
  'the server address',
  'the server address, udp',
  'the host loopback through the NAT gateway',
  'a name resolving to 127.0.0.1',
  'a name resolving to 10.1.2.3',
  'a name resolving to the metadata address',
  'a name resolving to the metadata address, udp',
  'api on 127.0.0.1',
  'api on the server address',
  'api by a name resolving to the server address',
  'api through the NAT gateway',
];
/** Tried by the Python probes alone (Node has no raw sockets). */
const PYTHON_ONLY = ['a raw socket', 'a ping socket', 'a packet socket'];

describe('the egress fence, in a network of the test\'s own', { skip }, () => {
  before(async () => {
    net = await startTestNetwork();
    const r = await net.run([process.execPath, '--import', 'tsx', path.join(import.meta.dirname, 'egress-fence.inner.ts')], {
      env: { PROBE_TARGETS: JSON.stringify(targets(net)) },
      timeoutMs: 480_000,
    });
    const line = /^RESULTS (.*)$/m.exec(r.stdout);
    assert.ok(line, `the server side failed (exit ${r.code}):\n${r.stdout.slice(-4000)}\n${r.stderr.slice(-4000)}`);
    results = JSON.parse(line[1]!);
  });
  after(async () => {
    await net?.stop();
  });

  for (const name of ['PyProbe', 'JsProbe'] as const) {
    test(`${name === 'PyProbe' ? 'a Python' : 'a JavaScript'} algorithm with network_access "full" reaches the internet, by address and by name, TCP and UDP, and nothing of ours`, () => {
      const seen = results[name];
      assert.equal(typeof seen, 'object', JSON.stringify(seen));
      for (const t of ['internet tcp', 'internet udp', 'internet by name']) assert.match(seen[t] ?? '', /^OK INTERNET (tcp|udp) from 198\.51\.100\.2$/, `${t}: ${seen[t]}`);
      for (const t of [...REFUSED, ...(name === 'PyProbe' ? PYTHON_ONLY : [])]) assert.match(seen[t] ?? '', /^REFUSED/, `${t}: ${seen[t]}`);
      // The registry of builds is no algorithm's to reach.
      assert.match(seen.registry ?? '', /^REFUSED/, `registry: ${seen.registry}`);
    });
  }

  test('the deployment\'s own services are refused wherever they are: a public address named by ALGOHOST_NATS_URL', () => {
    assert.match(results.deployment['internet tcp'] ?? '', /^REFUSED/, JSON.stringify(results.deployment));
  });

  for (const name of ['npmBuild', 'pipBuild'] as const) {
    test(`${name === 'npmBuild' ? "an npm preinstall script" : 'a setup.py'} reaches its configured registry and nothing else, not even the internet`, () => {
      const seen = results[name];
      assert.equal(typeof seen, 'object', `the build printed no probe:\n${String(seen).slice(-3000)}`);
      const s = seen as Seen;
      assert.match(s.registry ?? '', /^OK/, `registry: ${s.registry}`);
      const tried = [...REFUSED, 'internet tcp', 'internet udp', 'internet by name', ...(name === 'pipBuild' ? PYTHON_ONLY : [])];
      for (const t of tried) assert.match(s[t] ?? '', /^REFUSED/, `${t}: ${s[t]}`);
    });
  }

  test('no leak listener heard from anything; the internet heard from the server namespace only', async () => {
    const log = await net.log();
    assert.deepEqual(log.filter((l) => l.startsWith('LEAK')), []);
    const internet = log.filter((l) => l.startsWith('INTERNET'));
    assert.ok(internet.length >= 6, log.join('\n'));
    assert.ok(internet.every((l) => l.endsWith('from 198.51.100.2')), internet.join('\n'));
  });
});
