/**
 * The egress fence's ruleset (src/runtime/egressFence.ts nftRuleset) and what it does on this
 * machine, through the NAT's aliases of the host's loopback: only what is allowed reaches it.
 * The full hostile suite, in network namespaces of its own, is test/egress-fence.test.ts.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import dgram from 'node:dgram';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fencedHosts, nftRuleset, parseCidr, probeFence, type FencePolicy } from '../src/runtime/egressFence.ts';
import { DEFAULT_LIMITS, probeSandbox } from '../src/runtime/sandbox.ts';
import { Worker } from '../src/runtime/worker.ts';
import { SandboxNetwork, SERVICES_RESOLVE_MS } from '../src/runtime/networkPolicy.ts';
import { loadConfig } from '../src/config.ts';

test('the NAT network is refused before any allowed range, loopback ports are TCP only, and nothing but addresses and ports reaches the rules', () => {
  const rules = nftRuleset({ reach: 'public', allow: [{ cidr: '10.0.0.0/8' }, { cidr: '127.0.0.1', ports: [4873] }], deny: ['198.51.100.2'] }).split('\n');
  const at = (needle: string) => rules.findIndex((l) => l.includes(needle));
  assert.ok(at('ip daddr 10.0.2.0/24 reject') > 0);
  assert.ok(at('ip daddr 10.0.2.0/24 reject') < at('ip daddr 10.0.0.0/8 accept'), rules.join('\n'));
  assert.ok(at('ip daddr 10.0.2.2 tcp dport { 4873 } accept') < at('ip daddr 10.0.2.0/24 reject'));
  assert.ok(at('ip daddr 10.0.2.3 meta l4proto { tcp, udp } th dport 53 accept') < at('ip daddr 10.0.2.0/24 reject'));
  assert.equal(rules.filter((l) => l.includes('10.0.2.2') && l.includes('udp')).length, 0, 'a loopback port is open to UDP');
  assert.ok(rules.some((l) => l.includes('168.63.129.16') && l.includes('reject')), "Azure's metadata address is not refused");
  for (const bad of ['fe80::1%eth0', '10.0.0.0/33', '1.2.3.4; flush ruleset', 'example.com', '::1/129']) assert.throws(() => parseCidr(bad), /is not an IP address or CIDR range|has no valid prefix length/, bad);
  assert.throws(() => nftRuleset({ reach: 'public', allow: [{ cidr: '1.2.3.4', ports: [0] }], deny: [] }), /not a port/);
  assert.throws(() => nftRuleset({ reach: 'public', allow: [{ cidr: '127.0.0.1' }], deny: [] }), /only as 127\.0\.0\.1 with a port/);
  assert.throws(() => loadConfig({}, { ALGOHOST_HOME: os.tmpdir(), ALGOHOST_ALGORITHM_EGRESS_ALLOW: '[fe80::1%eth0]:443' }), /ALGOHOST_ALGORITHM_EGRESS_ALLOW: "\[fe80::1%eth0\]:443" is not an address/);
  assert.deepEqual(loadConfig({}, { ALGOHOST_HOME: os.tmpdir(), ALGOHOST_ALGORITHM_EGRESS_ALLOW: '10.0.5.20:5432, 192.168.7.0/24,[fd00::7]:443,models.internal' }).egressAllow, [
    { host: '10.0.5.20', ports: [5432] },
    { host: '192.168.7.0/24', ports: undefined },
    { host: 'fd00::7', ports: [443] },
    { host: 'models.internal', ports: undefined },
  ]);
});

const fence = probeSandbox().available ? probeFence() : { available: false, reason: 'no sandbox' };

describe('behind the fence, the host loopback is reached only on an allowed TCP port', { skip: fence.available ? false : `the fence cannot be made here: ${fence.reason}` }, () => {
  let dir: string;
  let tcp: net.Server;
  let udp: dgram.Socket;
  let port: number;
  let other: number;
  before(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-rules-'));
    fs.writeFileSync(
      path.join(dir, 'probe.py'),
      `import socket
def apply(targets):
    out = []
    for proto, host, port in targets:
        try:
            if proto == "tcp":
                s = socket.create_connection((host, port), timeout=2)
                out.append("OK " + s.recv(20).decode())
            elif proto == "resolve":
                out.append("OK " + ",".join(sorted({a[4][0] for a in socket.getaddrinfo(host, port, socket.AF_INET)})))
            elif proto == "dns":
                # A real query (for example.com, type A) straight to the NAT's DNS forwarder.
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.settimeout(2)
                s.connect((host, port))
                s.send(bytes.fromhex("abcd01000001000000000000076578616d706c6503636f6d0000010001"))
                out.append("OK " + s.recv(512)[:2].hex())
            else:
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.settimeout(2)
                s.sendto(b"x", (host, port))
                out.append("OK " + s.recv(20).decode())
        except Exception as e:
            out.append("REFUSED " + type(e).__name__)
    return out
`,
    );
    tcp = net.createServer((s) => s.end('HOST')).listen(0, '127.0.0.1');
    await new Promise((r) => tcp.once('listening', r));
    port = (tcp.address() as net.AddressInfo).port;
    udp = dgram.createSocket('udp4');
    udp.on('message', (_m, peer) => udp.send('HOST', peer.port, peer.address));
    await new Promise<void>((r) => udp.bind(port, '127.0.0.1', () => r()));
    const o = net.createServer((s) => s.end('OTHER')).listen(0, '127.0.0.1');
    await new Promise((r) => o.once('listening', r));
    other = (o.address() as net.AddressInfo).port;
    o.unref();
  });
  after(() => {
    tcp.close();
    udp.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('10.0.0.0/8 allowed does not open the NAT network (every address of which is the host loopback); 127.0.0.1:PORT allowed opens that TCP port alone', async () => {
    const policy: FencePolicy = { reach: 'public', allow: [{ cidr: '10.0.0.0/8' }, { cidr: '127.0.0.1', ports: [port] }], deny: [] };
    const w = await Worker.start({ runner: 'python', algoDir: dir, entry: 'probe.py', network: true, fence: policy, limits: DEFAULT_LIMITS });
    try {
      const targets = [
        ['tcp', '127.0.0.1', port],
        ['tcp', '10.0.2.2', port],
        ['udp', '10.0.2.2', port],
        ['udp', '127.0.0.1', port],
        ['tcp', '10.0.2.2', other],
        ['tcp', '10.0.2.5', port],
        ['tcp', '10.0.2.5', other],
        ['tcp', '127.0.0.1', other],
      ];
      const o = await w.call('json', Buffer.from(JSON.stringify(targets)), 30_000);
      assert.equal(o.kind, 'result', JSON.stringify(o));
      const seen = JSON.parse((o as { body: Buffer }).body.toString()) as string[];
      assert.deepEqual(seen.slice(0, 2), ['OK HOST', 'OK HOST'], JSON.stringify(seen));
      for (const [i, s] of seen.entries()) if (i >= 2) assert.match(s, /^REFUSED/, `${JSON.stringify(targets[i])}: ${s}`);
    } finally {
      await w.stop();
    }
  });

  test('a build behind the fence resolves only the names it may reach (its /etc/hosts), and has no DNS at all', async () => {
    const policy: FencePolicy = { reach: 'allowed', allow: [{ cidr: '127.0.0.1', ports: [port] }], deny: [], names: { 'registry.test': ['127.0.0.1'], 'bad name\n1.2.3.4 evil.test': ['127.0.0.1'] } };
    assert.doesNotMatch(fencedHosts(policy), /evil/, 'a name with a space or line break reached /etc/hosts');
    const w = await Worker.start({ runner: 'python', algoDir: dir, entry: 'probe.py', network: true, fence: policy, limits: DEFAULT_LIMITS });
    try {
      const targets = [
        ['tcp', 'registry.test', port],
        ['resolve', 'localhost', 80],
        ['resolve', 'example.com', 80],
        ['resolve', 'evil.test', 80],
        ['dns', '10.0.2.3', 53],
        ['tcp', '10.0.2.3', 53],
      ];
      const o = await w.call('json', Buffer.from(JSON.stringify(targets)), 30_000);
      assert.equal(o.kind, 'result', JSON.stringify(o));
      const seen = JSON.parse((o as { body: Buffer }).body.toString()) as string[];
      assert.deepEqual(seen.slice(0, 2), ['OK HOST', 'OK 127.0.0.1'], JSON.stringify(seen));
      for (const [i, s] of seen.entries()) if (i >= 2) assert.match(s, /^REFUSED/, `${JSON.stringify(targets[i])}: ${s}`);
    } finally {
      await w.stop();
    }
  });
});

test("the deployment's services are resolved again: one that moves is refused at its new address, and still at its old", async () => {
  let answer = ['203.0.113.5'];
  let now = 0;
  const asked: string[] = [];
  const config = loadConfig({}, { ALGOHOST_HOME: os.tmpdir(), ALGOHOST_NATS_URL: 'nats://nats.internal:4222' });
  const network = await SandboxNetwork.open(config, {
    probe: () => ({ available: true }),
    lookup: async (host) => {
      asked.push(host);
      return host === 'nats.internal' ? answer : [];
    },
    now: () => now,
  });
  const denied = () => network.algorithmFence()!.deny;
  assert.ok(denied().includes('203.0.113.5'), JSON.stringify(denied()));
  answer = ['203.0.113.9'];
  now += SERVICES_RESOLVE_MS - 1;
  assert.ok(!denied().includes('203.0.113.9'));
  assert.equal(asked.length, 1, 'resolved again before its time');
  now += 1;
  denied();
  await new Promise((r) => setImmediate(r));
  assert.ok(denied().includes('203.0.113.9') && denied().includes('203.0.113.5'), JSON.stringify(denied()));
  assert.equal(asked.length, 2);
});
