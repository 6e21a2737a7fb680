/**
 * ALGOHOST_SANDBOX=gvisor: a real server whose algorithms and builds run under gVisor's runsc
 * (src/runtime/gvisor.ts), through the same pool, worker and limits as bubblewrap's. Python and
 * JavaScript algorithms answer, fail, time out, run out of memory, stay warm, use the SDK; the
 * hostile probes of sandbox.test.ts stay contained; no runsc process or bundle outlives its
 * sandbox, or the server.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { api, json, startServer, tempHome, type TestServer } from './helpers/server.ts';
import { callAlgo, release } from './helpers/algorithms.ts';
import { CLUSTER } from './helpers/backends.ts';
import { WAIT_MS } from './helpers/process.ts';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { gvisorBase, probeGvisor } from '../src/runtime/gvisor.ts';
import { probeFence } from '../src/runtime/egressFence.ts';
import { DEFAULT_LIMITS } from '../src/runtime/sandbox.ts';
import { Worker } from '../src/runtime/worker.ts';
import { text } from './helpers/workers.ts';

const support = probeGvisor();
const skip = CLUSTER
  ? 'runs on one node: it watches the runsc processes of this process'
  : support.available
    ? false
    : `runsc cannot run here: ${support.reason}`;

const REPO = path.resolve(import.meta.dirname, '..');
let s: TestServer;
let alice: ReturnType<typeof api>;
/** A file of the server's home no algorithm may read. */
let secret: string;

/** The runsc processes of this process's sandboxes (their --root and bundle are under gvisorBase()). */
function runscProcesses(): string[] {
  const base = gvisorBase();
  const out = execFileSync('/usr/bin/ps', ['-eo', 'pid=,args='], { encoding: 'utf8' });
  return out.split('\n').filter((l) => l.includes(base) && /runsc/.test(l));
}

/** Bundles (one per sandbox) still on disk. */
const bundles = () => fs.readdirSync(gvisorBase()).filter((d) => d.startsWith('b-'));

async function eventually(what: string, check: () => boolean, ms = 10_000): Promise<void> {
  const until = Date.now() + ms;
  while (!check()) {
    if (Date.now() > until) assert.fail(`${what} within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const PY = `import os
import socket
import Algorithmia

client = Algorithmia.client()
calls = 0


def apply(input):
    global calls
    calls += 1
    do = input['do']
    if do == 'echo':
        print('printed by python')
        return {'echo': input.get('value'), 'calls': calls, 'uid': os.getuid(), 'kernel': os.uname().release}
    if do == 'fail':
        raise ValueError('no good input')
    if do == 'spin':
        while True:
            pass
    if do == 'hog':
        hog = []
        while True:
            hog.append(bytearray(16 * 1024 * 1024))
    if do == 'sdk':
        d = client.dir('data://.my/gv')
        if not d.exists():
            d.create()
        client.file('data://.my/gv/py.json').putJson({'n': input['n']})
        return client.file('data://.my/gv/py.json').getJson()
    if do == 'probe':
        out = {}
        for p in input['paths']:
            try:
                with open(p) as f:
                    out[p] = 'READ: ' + f.read(40)
            except OSError as e:
                out[p] = type(e).__name__
        out['pids'] = sorted(int(d) for d in os.listdir('/proc') if d.isdigit())
        try:
            os.kill(input['server_pid'], 9)
            out['kill'] = 'killed'
        except OSError as e:
            out['kill'] = type(e).__name__
        out['net'] = {}
        for host, port in input['targets']:
            try:
                socket.create_connection((host, port), timeout=3).close()
                out['net'][host] = 'connected'
            except OSError as e:
                out['net'][host] = type(e).__name__
        out['ifs'] = [n for _, n in socket.if_nameindex()]
        with open('/proc/self/status') as f:
            out['cap'] = [l.split()[1] for l in f if l.startswith(('CapEff', 'CapBnd'))]
        try:
            os.setuid(1000)
            out['setuid'] = 'done'
        except OSError as e:
            out['setuid'] = type(e).__name__
        return out
    if do == 'host':
        out = {'nodename': os.uname().nodename}
        for p in ['/etc/hostname', '/proc/self/mountinfo', '/proc/1/mountinfo']:
            try:
                with open(p) as f:
                    out[p] = f.read()
            except OSError as e:
                out[p] = type(e).__name__
        return out
    raise ValueError(do)
`;

const JS = `import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
let calls = 0;
export async function apply(input, ctx) {
  calls++;
  switch (input.do) {
    case 'echo':
      console.log('printed by node');
      return { echo: input.value, calls, uid: process.getuid(), kernel: os.release() };
    case 'fail':
      throw new TypeError('no good input');
    case 'spin':
      for (;;) {}
    case 'hog': {
      const a = [];
      for (;;) a.push(new Array(1e6).fill(1.5));
    }
    case 'sdk':
      return await ctx.client.file(input.uri).getString();
    case 'probe': {
      const out = {};
      for (const p of input.paths) { try { out[p] = 'READ: ' + fs.readFileSync(p, 'utf8').slice(0, 40); } catch (e) { out[p] = e.code; } }
      out.pids = fs.readdirSync('/proc').filter((d) => /^\\d+$/.test(d)).map(Number).sort((a, b) => a - b);
      try { process.kill(input.server_pid, 'SIGKILL'); out.kill = 'killed'; } catch (e) { out.kill = e.code; }
      out.net = {};
      for (const [host, port] of input.targets) {
        out.net[host] = await new Promise((resolve) => {
          const c = net.connect({ host, port, timeout: 3000 }, () => { c.destroy(); resolve('connected'); });
          c.on('error', (e) => resolve(e.code));
          c.on('timeout', () => { c.destroy(); resolve('timeout'); });
        });
      }
      out.ifs = Object.keys(os.networkInterfaces());
      out.cap = fs.readFileSync('/proc/self/status', 'utf8').split('\\n').filter((l) => /^Cap(Eff|Bnd)/.test(l)).map((l) => l.split(/\\s+/)[1]);
      const { spawnSync } = await import('node:child_process');
      const nested = spawnSync('/usr/bin/unshare', ['-Ur', '/usr/bin/id', '-u']);
      out.nested = nested.status === 0 ? String(nested.stdout).trim() : 'refused';
      return out;
    }
    case 'host': {
      const out = { nodename: os.hostname() };
      for (const p of ['/etc/hostname', '/proc/self/mountinfo', '/proc/1/mountinfo']) { try { out[p] = fs.readFileSync(p, 'utf8'); } catch (e) { out[p] = e.code; } }
      return out;
    }
  }
  throw new Error(input.do);
}
`;

const call = async (name: string, input: unknown, query = '') => json(await callAlgo(alice, `alice/${name}`, JSON.stringify(input), 'application/json', query));

before(async () => {
  if (skip) return;
  s = await startServer({ env: { ALGOHOST_SANDBOX: 'gvisor', ALGOHOST_WORKER_MEMORY_MB: '128' } });
  alice = api(s.url, await s.user('alice'));
  secret = path.join(s.home, 'secret-of-the-server');
  fs.writeFileSync(secret, 'do not read');
  // Built under gVisor too (the build's check runs the runner there).
  await release(alice, 'alice', 'GvPy', { 'src/GvPy.py': PY }, { settings: { language: 'python3' } });
  await release(alice, 'alice', 'GvJs', { 'src/index.js': JS }, { settings: { language: 'javascript' } });
});

after(async () => {
  if (skip) return;
  await s?.close();
});

describe('ALGOHOST_SANDBOX=gvisor', { skip }, () => {
  test('/health says gvisor', async () => {
    const health = await json(await fetch(`${s.url}/health`));
    assert.deepEqual(health.sandbox, { enabled: true, kind: 'gvisor' });
  });

  for (const [name, lang] of [['GvPy', 'python'], ['GvJs', 'node']] as const) {
    test(`${lang}: a result from gVisor's kernel, with what it printed; the second call is warm`, async () => {
      const t0 = performance.now();
      const first = await call(name, { do: 'echo', value: [1, 'two'] }, '?stdout=true');
      const cold = performance.now() - t0;
      assert.equal(first.error, undefined, JSON.stringify(first));
      assert.deepEqual(first.result.echo, [1, 'two']);
      // uid 0 of gVisor's own user namespace, without capabilities (gvisor.ts says why).
      assert.equal(first.result.uid, 0);
      // gVisor's Sentry answers uname with its own release, never the host's kernel.
      assert.notEqual(first.result.kernel, os.release(), 'the algorithm ran on the host kernel: not under gVisor');
      assert.match(first.metadata.stdout, new RegExp(`printed by ${lang}`));
      const t1 = performance.now();
      const second = await call(name, { do: 'echo', value: 2 });
      const warm = performance.now() - t1;
      assert.equal(second.result.calls, first.result.calls + 1, 'the same worker answered (warm)');
      assert.ok(warm < cold, `warm ${warm} ms, cold ${cold} ms`);
    });

    test(`${lang}: an algorithm error is the algorithm's, and its worker lives on`, async () => {
      const r = await call(name, { do: 'fail' });
      assert.match(r.error?.message ?? '', /no good input/, JSON.stringify(r));
      assert.equal(r.error.error_type, 'AlgorithmError');
      assert.equal((await call(name, { do: 'echo', value: 'after' })).result.echo, 'after');
    });

    test(`${lang}: a timeout kills the whole runsc tree and removes its bundle`, async () => {
      const before = s.services.runtime.pool.stats().total;
      const r = await call(name, { do: 'spin' }, '?timeout=2');
      assert.equal(r.error?.error_type, 'TimeoutError', JSON.stringify(r));
      // The killed sandbox's processes and bundle go; the pool's other workers keep theirs (three
      // runsc processes each: runsc, its gofer, its sandbox).
      await eventually('one runsc tree per live worker', () => runscProcesses().length === 3 * s.services.runtime.pool.stats().total);
      await eventually('one bundle per live worker', () => bundles().length === s.services.runtime.pool.stats().total);
      assert.ok(s.services.runtime.pool.stats().total < before + 1);
      assert.equal((await call(name, { do: 'echo', value: 'replaced' })).result.echo, 'replaced');
    });

    test(`${lang}: running out of memory is an OutOfMemoryError`, async () => {
      const r = await call(name, { do: 'hog' }, '?timeout=60');
      assert.equal(r.error?.error_type, 'OutOfMemoryError', JSON.stringify(r).slice(0, 2000));
    });
  }

  test('the SDK: Python writes and reads data://, JavaScript reads what it wrote, as the caller', async () => {
    const py = await call('GvPy', { do: 'sdk', n: 7 });
    assert.deepEqual(py.result, { n: 7 }, JSON.stringify(py));
    const js = await call('GvJs', { do: 'sdk', uri: 'data://.my/gv/py.json' });
    assert.deepEqual(JSON.parse(js.result), { n: 7 }, JSON.stringify(js));
  });

  test('hostile probes: host files, /proc/1/environ, other processes, the network without network_access', async () => {
    const hostAddress = Object.values(os.networkInterfaces())
      .flat()
      .find((a) => a && a.family === 'IPv4' && !a.internal)?.address;
    const port = Number(new URL(s.url).port);
    const input = {
      do: 'probe',
      paths: [secret, '/etc/shadow', '/etc/passwd', '/root/.bashrc', path.join(REPO, 'package.json'), '/proc/1/environ'],
      server_pid: process.pid,
      targets: [['127.0.0.1', port], ...(hostAddress ? [[hostAddress, port]] : [])],
    };
    for (const name of ['GvPy', 'GvJs']) {
      const r = await call(name, input);
      assert.equal(r.error, undefined, JSON.stringify(r));
      const o = r.result;
      for (const p of [secret, '/etc/shadow', '/etc/passwd', '/root/.bashrc', path.join(REPO, 'package.json')]) assert.doesNotMatch(String(o[p]), /^READ/, `${name} read ${p}`);
      // pid 1 is the runner itself: its environment is the sandbox's, nothing of the server's.
      assert.doesNotMatch(String(o['/proc/1/environ']), /ALGOHOST|secret|NODE_|npm_/i, `${name}: ${o['/proc/1/environ']}`);
      assert.ok(o.pids.length <= 3, `${name} sees only its own processes: ${o.pids}`);
      assert.notEqual(o.kill, 'killed', `${name} signalled the server`);
      for (const [host, result] of Object.entries(o.net)) assert.notEqual(result, 'connected', `${name} reached ${host}`);
      assert.deepEqual(o.ifs, ['lo'], `${name} has only its own loopback`);
      assert.deepEqual(o.cap, ['0000000000000000', '0000000000000000'], `${name}: no capability, none to gain`);
      if (name === 'GvPy') assert.equal(o.setuid, 'PermissionError');
      else assert.equal(o.nested, 'refused', 'no nested user namespace (where code would hold every capability again)');
    }
    assert.ok(fs.existsSync(secret));
  });

  test('nothing names the host: the sandbox\'s own host name, and no host path in its mount table', async () => {
    const name = new RegExp(`(^|[^A-Za-z0-9.-])${os.hostname().replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}([^A-Za-z0-9-]|$)`);
    for (const algo of ['GvPy', 'GvJs']) {
      const r = await call(algo, { do: 'host' });
      assert.equal(r.error, undefined, JSON.stringify(r));
      const o = r.result as Record<string, string>;
      assert.match(o['/proc/self/mountinfo'] ?? '', / \/algo /, `${algo}: the mount table was read: ${JSON.stringify(o)}`);
      assert.equal(o.nodename, 'sandbox', `${algo}: its own host name`);
      for (const [file, value] of Object.entries(o)) {
        assert.doesNotMatch(value, name, `${algo}: ${file} names the host`);
        for (const p of [s.home, REPO, `${os.tmpdir()}/`, os.homedir(), 'algohost-', gvisorBase()]) assert.equal(value.includes(p), false, `${algo}: ${file} shows the host path ${p}: ${value}`);
      }
    }
  });
});

const fence = probeFence();
describe('gVisor behind the egress fence', { skip: skip || (fence.available ? false : `no egress fence here: ${fence.reason}`) }, () => {
  test('runsc runs in the fenced namespace with --network=host: the filter and its NAT apply to the Sentry\'s sockets', async () => {
    const listen = () =>
      new Promise<http.Server>((resolve) => {
        const srv = http.createServer((_req, res) => res.end('reached'));
        srv.listen(0, '127.0.0.1', () => resolve(srv));
      });
    const [open, closed] = await Promise.all([listen(), listen()]);
    const [allowed, other] = [open, closed].map((x) => (x.address() as AddressInfo).port);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-gvisor-fence-'));
    fs.writeFileSync(
      path.join(dir, 'net.py'),
      `import os
import socket


def apply(ports):
    out = {'kernel': os.uname().release, 'ifs': [n for _, n in socket.if_nameindex()]}
    for p in ports:
        try:
            socket.create_connection(('127.0.0.1', p), timeout=3).close()
            out[str(p)] = 'connected'
        except OSError as e:
            out[str(p)] = type(e).__name__
    for host, p in (('10.0.2.2', ports[1]), ('169.254.169.254', 80)):
        try:
            socket.create_connection((host, p), timeout=3).close()
            out[host] = 'connected'
        except OSError as e:
            out[host] = type(e).__name__
    return out
`,
    );
    let w: Worker | undefined;
    try {
      // 127.0.0.1:PORT allowed: the fence translates it to the host's loopback through its NAT.
      const policy = { reach: 'public' as const, allow: [{ cidr: '127.0.0.1', ports: [allowed!] }], deny: [] };
      w = await Worker.start({ runner: 'python', algoDir: dir, entry: 'net.py', network: true, fence: policy, limits: DEFAULT_LIMITS, gvisor: { runsc: '/usr/bin/runsc' } });
      const o = JSON.parse(text(await w.call('json', Buffer.from(JSON.stringify([allowed, other])), 20_000)));
      assert.notEqual(o.kernel, os.release(), 'under gVisor');
      assert.deepEqual([...o.ifs].sort(), ['lo', 'tap0'], 'the fenced namespace\'s interfaces');
      assert.equal(o[String(allowed)], 'connected', 'the allowed host port, through the fence\'s NAT');
      assert.notEqual(o[String(other)], 'connected');
      assert.notEqual(o['10.0.2.2'], 'connected', 'the NAT\'s gateway (the host\'s loopback) on a port not allowed');
      assert.notEqual(o['169.254.169.254'], 'connected');
    } finally {
      await w?.stop();
      open.close();
      closed.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('ALGOHOST_SANDBOX=gvisor where runsc cannot run', { skip: CLUSTER ? 'starts a server process of its own' : false }, () => {
  test('the server refuses to start, in one line saying why, and does not fall back to bubblewrap', () => {
    const home = tempHome();
    try {
      const r = spawnSync(process.execPath, [path.join(REPO, 'bin/algohost.mjs'), 'serve', '--port', '0', '--home', home, '--no-demo'], {
        env: { ...process.env, ALGOHOST_SANDBOX: 'gvisor', ALGOHOST_RUNSC: '/nonexistent/runsc', ALGOHOST_LOG_LEVEL: 'warn' },
        encoding: 'utf8',
        timeout: WAIT_MS,
      });
      assert.equal(r.status, 1, r.stderr);
      assert.match(r.stderr, /ALGOHOST_SANDBOX=gvisor, but \/nonexistent\/runsc is not installed \(apt-get install runsc\)/);
      assert.doesNotMatch(r.stderr, /is ready/);
    } finally {
      fs.rmSync(home, { recursive: true, force: true });
    }
  });
});

describe('after the server stops', { skip }, () => {
  test('no runsc process and no bundle remains', async () => {
    assert.ok(runscProcesses().length > 0, 'the server had gVisor sandboxes running');
    await s.close();
    await eventually('no runsc process of this server', () => runscProcesses().length === 0);
    await eventually('no bundle left', () => bundles().length === 0);
    s = undefined as unknown as TestServer;
  });
});
