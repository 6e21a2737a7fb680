/**
 * test/helpers/netns.ts builds what it promises: from inside the server namespace the stand-in
 * internet answers by TCP, UDP and DNS, and the leak listeners answer on the server's own
 * loopback, private and metadata addresses (so a fence test that sees them refused proves
 * something); the host's namespace gains nothing; stop() removes both namespaces.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { netnsUnavailable, startTestNetwork } from './helpers/netns.ts';

const IP = ['/usr/sbin/ip', '/usr/bin/ip', '/sbin/ip', '/bin/ip'].find((f) => fs.existsSync(f)) ?? 'ip';

/** Tries every target from inside the server namespace; prints one JSON object. */
const PROBE = String.raw`
import json, socket, struct, sys
inet, tcp, udp, leak, v6 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
out = {}
def attempt(key, fn):
    try:
        out[key] = fn()
    except Exception as e:
        out[key] = "ERROR " + repr(e)
def tcp_line(host, port):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.settimeout(3); s.connect((host, port)); s.sendall(b"hi\n")
        return s.makefile().readline().strip()
def udp_line(host, port):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_DGRAM) as s:
        s.settimeout(3); s.connect((host, port)); s.send(b"hi")
        return s.recv(2048).decode().strip()
def dns_a(name, server=inet):
    q = struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack("!HH", 1, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(3); s.sendto(q, (server, 53)); r = s.recv(2048)
    qid, flags, qd, an = struct.unpack("!HHHH", r[:8])
    assert qid == 0x1234
    if flags & 15: return "rcode %d" % (flags & 15)
    return [socket.inet_ntoa(r[i + 12:i + 16]) for i in range(len(r)) if r[i:i + 2] == b"\xc0\x0c" and r[i + 2:i + 4] == b"\0\1"]
attempt("internet tcp", lambda: tcp_line(inet, tcp))
attempt("internet udp", lambda: udp_line(inet, udp))
attempt("dns good.test", lambda: dns_a("good.test"))
attempt("dns priv.test", lambda: dns_a("priv.test"))
attempt("dns nope.test", lambda: dns_a("nope.test"))
attempt("resolver good.test", lambda: socket.gethostbyname("good.test"))
hosts = ["127.0.0.1", "10.1.2.3", "169.254.169.254"] + (["::1", "fd99::1"] if v6 else [])
for h in hosts:
    attempt("leak tcp " + h, lambda: tcp_line(h, leak))
    attempt("leak udp " + h, lambda: udp_line(h, leak))
if v6:
    attempt("internet tcp6", lambda: tcp_line("2001:db8:100::1", tcp))
print(json.dumps(out))
`;

const reason = netnsUnavailable();

test('netns harness: the server namespace reaches the stand-in internet and its own leak listeners', { skip: reason ?? false, timeout: 30_000 }, async () => {
  const net = await startTestNetwork();
  let stopped = false;
  try {
    assert.match(net.server, /^algohost-srv-/);
    assert.match(net.internet, /^algohost-inet-/);
    const names = execFileSync(IP, ['netns', 'list'], { encoding: 'utf8' });
    assert.ok(names.includes(net.server) && names.includes(net.internet), names);

    const r = await net.run(
      ['/usr/bin/python3', '-c', PROBE, net.internetAddress, String(net.ports.tcp), String(net.ports.udp), String(net.leakPort), net.ipv6 ? '1' : '0'],
      { timeoutMs: 15_000 },
    );
    assert.equal(r.code, 0, r.stderr);
    const seen = JSON.parse(r.stdout) as Record<string, unknown>;
    assert.equal(seen['internet tcp'], 'INTERNET tcp from 198.51.100.2');
    assert.equal(seen['internet udp'], 'INTERNET udp from 198.51.100.2');
    assert.deepEqual(seen['dns good.test'], ['198.51.100.1']);
    assert.deepEqual(seen['dns priv.test'], ['10.1.2.3']);
    assert.equal(seen['dns nope.test'], 'rcode 3');
    assert.equal(seen['resolver good.test'], '198.51.100.1', 'resolv.conf in /etc/netns/<server> names the stand-in DNS');
    for (const h of ['127.0.0.1', '10.1.2.3', '169.254.169.254']) {
      assert.equal(seen[`leak tcp ${h}`], `LEAK tcp ${h}:${net.leakPort} from ${h}`);
      assert.equal(seen[`leak udp ${h}`], `LEAK udp ${h}:${net.leakPort} from ${h}`);
    }
    if (net.ipv6) {
      assert.equal(seen['leak tcp ::1'], `LEAK tcp [::1]:${net.leakPort} from ::1`);
      assert.equal(seen['leak udp fd99::1'], `LEAK udp [fd99::1]:${net.leakPort} from fd99::1`);
      assert.equal(seen['internet tcp6'], 'INTERNET tcp from 2001:db8:100::2');
    }

    const log = await net.log();
    assert.ok(log.includes('INTERNET tcp from 198.51.100.2'), log.join('\n'));
    assert.ok(log.includes(`LEAK udp 10.1.2.3:${net.leakPort} from 10.1.2.3`), log.join('\n'));
    assert.ok(log.some((l) => l.startsWith('DNS udp A good.test from 198.51.100.2 -> 198.51.100.1')), log.join('\n'));

    // A command that outlives its timeout is killed with its process group.
    const t0 = Date.now();
    const slow = await net.run(['/bin/sh', '-c', 'sleep 30 & sleep 30'], { timeoutMs: 300 });
    assert.ok(Date.now() - t0 < 5_000);
    assert.equal(slow.code, null);

    // The host's own namespace gained nothing.
    const hostAddrs = execFileSync(IP, ['-o', 'addr'], { encoding: 'utf8' });
    for (const a of ['10.1.2.3', '169.254.169.254', '198.51.100.', '2001:db8:100:', 'fd99::1']) assert.ok(!hostAddrs.includes(a), hostAddrs);
    const hostLinks = execFileSync(IP, ['-o', 'link'], { encoding: 'utf8' });
    assert.ok(!/\bah[si][0-9a-f]{6}\b/.test(hostLinks), hostLinks);

    await net.stop();
    stopped = true;
    await net.stop(); // idempotent
    const after = execFileSync(IP, ['netns', 'list'], { encoding: 'utf8' });
    assert.ok(!after.includes(net.server) && !after.includes(net.internet), after);
    assert.ok(!fs.existsSync(`/etc/netns/${net.server}`));
  } finally {
    if (!stopped) await net.stop();
  }
});
