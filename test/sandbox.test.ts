import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { DEFAULT_LIMITS, probeSandbox, spawnTool, type SandboxSpec } from '../src/runtime/sandbox.ts';
import { probeFence } from '../src/runtime/egressFence.ts';
import { Worker } from '../src/runtime/worker.ts';
import { assertTimeoutKillsSandbox, groupGone, text } from './helpers/workers.ts';

const support = probeSandbox();
const skip = support.available ? false : `bubblewrap unavailable: ${support.reason}`;

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-sandbox-'));
/** A fake server home with a secret in it, which no algorithm may see. */
const serverHome = path.join(root, 'home');
let server: http.Server;
let port = 0;
const workers: Worker[] = [];

/** The ways a sandbox may have the network: none, the host's, and behind the egress fence where it can be made here. */
function networkKinds(): [string, Partial<SandboxSpec>][] {
  const kinds: [string, Partial<SandboxSpec>][] = [
    ['no network', {}],
    ['the host\'s network', { network: true }],
  ];
  if (probeFence().available) kinds.push(['behind the egress fence', { network: true, fence: { reach: 'public', allow: [], deny: [] } }]);
  return kinds;
}

function algorithm(name: string, source: string): SandboxSpec {
  const dir = path.join(root, 'algos', name);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'index.mjs'), source);
  return { runner: 'node', algoDir: dir, entry: 'index.mjs', network: false, limits: { ...DEFAULT_LIMITS } };
}

async function start(spec: SandboxSpec, maxStdoutBytes?: number): Promise<Worker> {
  const w = await Worker.start(spec, { maxStdoutBytes });
  workers.push(w);
  return w;
}



before(async () => {
  fs.mkdirSync(serverHome, { recursive: true });
  fs.writeFileSync(path.join(serverHome, 'secret'), 'server-secret');
  server = http.createServer((_req, res) => res.end('reachable'));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
});
after(async () => {
  await Promise.all(workers.map((w) => w.stop(200)));
  server.close();
  fs.rmSync(root, { recursive: true, force: true });
});

describe('the Node runner in the sandbox', { skip }, () => {
  test('callback-style and async apply, every content type both ways', async () => {
    const cb = await start(algorithm('cb', `export function apply(input, cb) { cb(null, 'Hello ' + input); }`));
    const r = await cb.call('text', Buffer.from('world'), 5000);
    assert.equal(r.kind, 'result');
    assert.equal(text(r), 'Hello world');
    assert.equal(r.kind === 'result' && r.contentType, 'text');

    const multi = await start(
      algorithm(
        'multi',
        `export async function apply(input) {
          if (Buffer.isBuffer(input)) return Buffer.from([...input].reverse());
          if (input === 'void') return undefined;
          return { got: input, kind: typeof input };
        }`,
      ),
    );
    const j = await multi.call('json', Buffer.from('[1,2]'), 5000);
    assert.equal(j.kind === 'result' && j.contentType, 'json');
    assert.deepEqual(JSON.parse(text(j)), { got: [1, 2], kind: 'object' });
    const b = await multi.call('binary', Buffer.from([0, 1, 255]), 5000);
    assert.equal(b.kind === 'result' && b.contentType, 'binary');
    assert.deepEqual(b.kind === 'result' && [...b.body], [255, 1, 0]);
    const v = await multi.call('text', Buffer.from('void'), 5000);
    assert.equal(v.kind === 'result' && v.contentType, 'void');
    assert.ok(v.durationMs >= 0 && v.durationMs < 5000);
  });

  test('every way apply answers is answered once, with what it printed', async () => {
    const w = await start(
      algorithm(
        'ways',
        `export function apply(input, cb) {
          switch (input) {
            case 'sync': Promise.resolve().then(() => console.log('queued while it ran')); return 'sync';
            case 'cb-now': cb(null, 'called back at once'); return;
            case 'cb-later': setTimeout(() => cb(null, 'called back later'), 20); return;
            case 'cb-error': setTimeout(() => cb(new Error('called back with an error')), 5); return;
            case 'cb-twice': cb(null, 'first'); cb(null, 'second'); return 'returned';
            case 'promise': return new Promise((r) => setTimeout(() => r('resolved'), 20));
            case 'thenable': return { then(ok) { ok('a thenable'); } };
            case 'rejects': return Promise.reject(new Error('rejected'));
            case 'throws': throw new Error('thrown');
            case 'unencodable': return { big: 10n };
            case 'cb-then-print': cb(null, 'r1'); console.log('printed right after the callback'); return;
            case 'late-microtasks': (async () => { await null; await null; await null; console.log('three microtasks later'); })(); return 'v';
            case 'return-then-cb': Promise.resolve().then(() => cb(null, 'from the callback')); return 'returned';
            case 'quiet': return 'quiet';
          }
        }`,
      ),
    );
    const expect: [string, string, string][] = [
      ['sync', 'result', 'sync'],
      ['cb-now', 'result', 'called back at once'],
      ['cb-later', 'result', 'called back later'],
      ['cb-error', 'algorithm_error', 'called back with an error'],
      ['cb-twice', 'result', 'first'],
      ['promise', 'result', 'resolved'],
      ['thenable', 'result', 'a thenable'],
      ['rejects', 'algorithm_error', 'rejected'],
      ['throws', 'algorithm_error', 'thrown'],
      ['unencodable', 'algorithm_error', 'BigInt'],
      ['cb-then-print', 'result', 'r1'],
      ['quiet', 'result', 'quiet'],
      ['late-microtasks', 'result', 'v'],
      ['quiet', 'result', 'quiet'],
      ['return-then-cb', 'result', 'returned'],
    ];
    for (const [input, kind, what] of expect) {
      const o = await w.call('text', Buffer.from(input), 5000);
      assert.equal(o.kind, kind, input);
      if (o.kind === 'result') assert.equal(text(o), what, input);
      if (o.kind === 'algorithm_error') assert.match(o.error.message, new RegExp(what), input);
      // What the algorithm prints in the turn that decided its answer belongs to its call, and
      // never shows up in the next one.
      const printed: Record<string, string> = { sync: 'queued while it ran\n', 'cb-then-print': 'printed right after the callback\n', 'late-microtasks': 'three microtasks later\n' };
      assert.equal(o.stdout, printed[input] ?? '', input);
    }
    assert.equal(w.dead, false);
  });

  test('load() runs once per worker; a failing load or a missing apply is a LoadingError', async () => {
    const once = await start(algorithm('once', `let n = 0; export function load() { n++; } export function apply() { return n; }`));
    await once.call('json', Buffer.from('1'), 5000);
    assert.equal(text(await once.call('json', Buffer.from('1'), 5000)), '1');
    for (const [name, src] of [
      ['badload', `export function load() { throw new Error('no model'); } export function apply() { return 1; }`],
      ['noapply', `export const x = 1;`],
      ['syntax', `export function apply( {`],
    ]) {
      const w = await start(algorithm(name!, src!));
      const o = await w.call('json', Buffer.from('1'), 5000);
      assert.equal(o.kind, 'algorithm_error', name);
      assert.equal(o.kind === 'algorithm_error' && o.error.error_type, 'LoadingError', name);
    }
  });

  test('a thrown error is an algorithm error with message, stack and type; the worker lives on', async () => {
    const w = await start(
      algorithm('throws', `export function apply(x) { if (x === 'typed') throw Object.assign(new Error('bad input'), { error_type: 'InputError' }); throw new Error('boom'); }`),
    );
    const o = await w.call('text', Buffer.from('x'), 5000);
    assert.equal(o.kind, 'algorithm_error');
    if (o.kind === 'algorithm_error') {
      assert.equal(o.error.message, 'boom');
      assert.equal(o.error.error_type, 'AlgorithmError');
      assert.match(o.error.stacktrace, /index\.mjs/);
    }
    const t = await w.call('text', Buffer.from('typed'), 5000);
    assert.equal(t.kind === 'algorithm_error' && t.error.error_type, 'InputError');
    assert.equal(w.dead, false);
  });
});

describe('escape attempts fail', { skip }, () => {
  test('no network: the host\'s loopback server is unreachable (and reachable with network_access full)', async () => {
    const src = `export async function apply(port) {
      const net = await import('node:net');
      return await new Promise((resolve) => {
        const s = net.connect({ host: '127.0.0.1', port }, () => { s.destroy(); resolve('connected'); });
        s.on('error', (e) => resolve('failed: ' + e.code));
      });
    }`;
    const isolated = await start(algorithm('net', src));
    assert.match(text(await isolated.call('json', Buffer.from(String(port)), 5000)), /^failed: /);
    const open = await start({ ...algorithm('net2', src), network: true });
    assert.equal(text(await open.call('json', Buffer.from(String(port)), 5000)), 'connected', 'the probe itself works');
  });

  test('the server\'s home, the host\'s secrets and environment are invisible; we are nobody with no capabilities', async () => {
    process.env.ALGOHOST_TEST_SECRET = 'parent-env-secret';
    const w = await start(
      algorithm(
        'snoop',
        `import fs from 'node:fs';
        export async function apply(paths) {
          const out = {};
          for (const p of paths) { try { out[p] = fs.readFileSync(p, 'utf8').slice(0, 40); } catch (e) { out[p] = e.code; } }
          out.env = Object.keys(process.env).sort();
          out.uid = process.getuid();
          out.cap = fs.readFileSync('/proc/self/status', 'utf8').match(/CapEff:\\s*(\\w+)/)[1];
          out.pids = fs.readdirSync('/proc').filter((d) => /^\\d+$/.test(d)).length;
          const { spawnSync } = await import('node:child_process');
          const nested = spawnSync('/usr/bin/unshare', ['-Ur', '/usr/bin/id', '-u']);
          out.nested = nested.status === 0 ? String(nested.stdout).trim() : 'refused';
          return out;
        }`,
      ),
    );
    const secret = path.join(serverHome, 'secret');
    const o = JSON.parse(text(await w.call('json', Buffer.from(JSON.stringify([secret, '/etc/shadow', '/etc/passwd', '/root/.bashrc', '/work/main/package.json'])), 5000)));
    delete process.env.ALGOHOST_TEST_SECRET;
    for (const p of [secret, '/etc/shadow', '/etc/passwd', '/root/.bashrc', '/work/main/package.json']) assert.equal(o[p], 'ENOENT', p);
    assert.deepEqual(o.env, ['HOME', 'LANG', 'PATH', 'PWD'], 'only what the sandbox sets (PWD comes from --chdir)');
    assert.equal(o.uid, 65534);
    assert.equal(o.cap, '0000000000000000');
    assert.ok(o.pids <= 3, `only the sandbox's own processes are visible (${o.pids})`);
    assert.equal(o.nested, 'refused', 'no nested user namespace (where code would be root again)');
  });

  test('the sandbox\'s other processes (bwrap, its pid 1) show no host path in their command line or environment', async () => {
    const src = `import fs from 'node:fs';
      export function apply() {
        const out = {};
        for (const pid of fs.readdirSync('/proc').filter((d) => /^\\d+$/.test(d))) {
          for (const f of ['cmdline', 'environ']) {
            try { out[pid + '/' + f] = fs.readFileSync('/proc/' + pid + '/' + f, 'utf8').split('\\0').join(' '); } catch (e) { out[pid + '/' + f] = e.code; }
          }
          try { out[pid + '/cwd'] = fs.readlinkSync('/proc/' + pid + '/cwd'); } catch (e) { out[pid + '/cwd'] = e.code; }
        }
        return out;
      }`;
    const kinds = networkKinds();
    const runners = fileURLToPath(new URL('../src/runtime/runners', import.meta.url));
    const hostPaths = [root, runners, process.cwd(), fileURLToPath(new URL('..', import.meta.url)).replace(/\/$/, '')];
    for (const [kind, extra] of kinds) {
      const w = await start({ ...algorithm('proc1', src), ...extra });
      const o = JSON.parse(text(await w.call('json', Buffer.from('null'), 10_000))) as Record<string, string>;
      assert.match(o['1/cmdline'] ?? '', /bwrap/, `${kind}: pid 1 (bwrap) and its command line are visible, so the check means something: ${JSON.stringify(o)}`);
      assert.notEqual(o['1/environ'], 'EACCES', `${kind}: pid 1's environment was read`);
      for (const [what, value] of Object.entries(o)) {
        for (const p of hostPaths) assert.equal(value.includes(p), false, `${kind}: /proc/${what} shows the host path ${p}: ${value}`);
      }
    }
  });

  test('nothing names the host: its host name, and no host path in the mount table (Python and JavaScript)', async () => {
    const js = `import fs from 'node:fs';
      import os from 'node:os';
      import { spawnSync } from 'node:child_process';
      const read = (p) => { try { return fs.readFileSync(p, 'utf8'); } catch (e) { return e.code; } };
      export function apply() {
        return { nodename: os.hostname(), uname: String(spawnSync('/usr/bin/uname', ['-n']).stdout).trim(), hostname: read('/etc/hostname'),
          mountinfo: read('/proc/self/mountinfo'), mountinfo1: read('/proc/1/mountinfo'), mounts: read('/proc/self/mounts') };
      }`;
    const py = `import os
def read(p):
    try:
        with open(p) as f:
            return f.read()
    except OSError as e:
        return type(e).__name__
def apply(input):
    return {'nodename': os.uname().nodename, 'hostname': read('/etc/hostname'),
            'mountinfo': read('/proc/self/mountinfo'), 'mountinfo1': read('/proc/1/mountinfo'), 'mounts': read('/proc/self/mounts')}
`;
    // Named as a spare's directory is (<runner>-<pid>-<n>), under the home's run/spares.
    const spareLike = (name: string, runner: 'node' | 'python', entry: string, source: string): SandboxSpec => {
      const dir = path.join(serverHome, 'run', 'spares', `${runner}-${process.pid}-${name}`);
      fs.mkdirSync(dir, { recursive: true });
      fs.writeFileSync(path.join(dir, entry), source);
      return { runner, algoDir: dir, entry, network: false, limits: { ...DEFAULT_LIMITS } };
    };
    const kinds = networkKinds();
    const runners = fileURLToPath(new URL('../src/runtime/runners', import.meta.url));
    const repo = fileURLToPath(new URL('..', import.meta.url)).replace(/\/$/, '');
    const host = os.hostname();
    const named = new RegExp(`(^|[^A-Za-z0-9.-])${host.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}([^A-Za-z0-9-]|$)`);
    const hostPaths = [root, serverHome, runners, repo, process.cwd(), os.homedir(), `-${process.pid}-`, 'algohost-'];
    let n = 0;
    for (const [kind, extra] of kinds) {
      for (const [lang, spec] of [['JavaScript', spareLike(`${++n}`, 'node', 'index.mjs', js)], ['Python', spareLike(`${++n}`, 'python', 'main.py', py)]] as const) {
        const w = await start({ ...spec, ...extra });
        const o = JSON.parse(text(await w.call('json', Buffer.from('null'), 10_000))) as Record<string, string>;
        const what = `${kind}, ${lang}`;
        assert.match(o.mountinfo ?? '', / \/algo /, `${what}: the mount table was read, so the check means something: ${JSON.stringify(o)}`);
        assert.equal(o.nodename, 'sandbox', `${what}: the sandbox's own host name`);
        if (o.uname !== undefined) assert.equal(o.uname, 'sandbox', `${what}: uname -n`);
        for (const [file, value] of Object.entries(o)) {
          assert.doesNotMatch(value, named, `${what}: ${file} names the host (${host}): ${value}`);
          for (const p of hostPaths) assert.equal(value.includes(p), false, `${what}: ${file} shows the host path ${p}: ${value}`);
        }
      }
    }
  });

  test('a build step\'s writable /algo and its tools, bound from the host, show no host path in its mount table; what it writes is the build\'s', async () => {
    // A tool reached through a link, as the server's esbuild is (node_modules/.bin).
    const tools = path.join(serverHome, 'install', 'node_modules');
    fs.mkdirSync(path.join(tools, 'esbuild', 'bin'), { recursive: true });
    fs.mkdirSync(path.join(tools, '.bin'), { recursive: true });
    fs.writeFileSync(path.join(tools, 'esbuild', 'bin', 'esbuild'), '#!/bin/sh\necho tool ran\n', { mode: 0o755 });
    fs.symlinkSync('../esbuild/bin/esbuild', path.join(tools, '.bin', 'esbuild'));
    const build = path.join(root, 'build-step');
    fs.mkdirSync(build, { recursive: true });
    const child = spawnTool({
      algoDir: build,
      argv: () => [
        '/bin/sh',
        '-c',
        // What an install does to its directory: make, rename and remove.
        '/tools/esbuild; uname -n; grep " /tools/esbuild " /proc/self/mountinfo; grep " /algo " /proc/self/mountinfo; ' +
          'mkdir -p /algo/d1/d2 && echo made > /algo/d1/d2/f && mv /algo/d1 /algo/d3 && echo x > /algo/gone && rm /algo/gone && echo wrote',
      ],
      network: false,
      limits: DEFAULT_LIMITS,
      binds: { [path.join(tools, '.bin', 'esbuild')]: '/tools/esbuild' },
    });
    let out = '';
    child.stdout!.setEncoding('utf8').on('data', (s: string) => (out += s));
    child.stderr!.setEncoding('utf8').on('data', (s: string) => (out += s));
    const code = await new Promise((r) => child.once('exit', r));
    assert.equal(code, 0, out);
    const [ran, nodename, line, algo, wrote] = out.trim().split('\n');
    assert.equal(ran, 'tool ran');
    assert.equal(nodename, 'sandbox');
    assert.match(line ?? '', / \/tools\/esbuild /, out);
    assert.match(algo ?? '', / \/algo rw/, out);
    assert.equal(wrote, 'wrote', out);
    for (const p of [root, serverHome, 'node_modules', 'algohost-']) assert.equal(out.includes(p), false, `a mount shows the host path ${p}: ${line} / ${algo}`);
    // Written through to the build's directory, and the overlay's stage gone with the step.
    assert.equal(fs.readFileSync(path.join(build, 'd3', 'd2', 'f'), 'utf8'), 'made\n');
    assert.equal(fs.existsSync(path.join(build, 'd1')) || fs.existsSync(path.join(build, 'gone')), false);
    for (const end = Date.now() + 5_000; fs.existsSync(`${build}.stage`) && Date.now() < end; ) await new Promise((r) => setTimeout(r, 20));
    assert.equal(fs.existsSync(`${build}.stage`), false, 'the stage was removed');
  });

  test('nothing outside /tmp is writable, and /tmp is capped', async () => {
    const w = await start(
      algorithm(
        'write',
        `import fs from 'node:fs';
        export function apply() {
          const out = {};
          for (const p of ['/algo/x', '/usr/x', '/x', '/runner/x', '/proc/x']) { try { fs.writeFileSync(p, 'x'); out[p] = 'written'; } catch (e) { out[p] = e.code; } }
          fs.writeFileSync('/tmp/ok', 'x'); out.tmp = fs.readFileSync('/tmp/ok', 'utf8');
          try { const b = Buffer.alloc(1 << 20); const fd = fs.openSync('/tmp/big', 'w'); for (let i = 0; i < 64; i++) fs.writeSync(fd, b); out.big = 'written'; } catch (e) { out.big = e.code; }
          return out;
        }`,
      ),
    );
    const free = JSON.parse(text(await w.call('json', Buffer.from('null'), 10_000)));
    assert.equal(free.big, 'written', 'with the default /tmp size, 64 MiB fits');
    const spec = algorithm('write2', fs.readFileSync(path.join(root, 'algos', 'write', 'index.mjs'), 'utf8'));
    spec.limits = { ...spec.limits, tmpBytes: 16 * 1024 * 1024 };
    const capped = await start(spec);
    const o = JSON.parse(text(await capped.call('json', Buffer.from('null'), 10_000)));
    for (const p of ['/algo/x', '/usr/x', '/x', '/runner/x', '/proc/x']) assert.notEqual(o[p], 'written', p);
    assert.equal(o.tmp, 'x');
    assert.equal(o.big, 'ENOSPC', 'a 64 MiB file does not fit a 16 MiB /tmp');
  });

  test('running forever: a timeout kills the whole sandbox, leaving no process behind', async () => {
    const w = await start(algorithm('forever', `export function apply() { for (;;) {} }`));
    await assertTimeoutKillsSandbox(w);
  });

  test('printing without limit is capped and marked truncated', async () => {
    const w = await start(
      algorithm('flood', `export function apply() { const line = 'y'.repeat(1023) + '\\n'; for (let i = 0; i < 8192; i++) process.stdout.write(line); return 'done'; }`),
      64 * 1024,
    );
    const o = await w.call('json', Buffer.from('1'), 20_000);
    assert.equal(text(o), 'done');
    assert.equal(o.stdout.length, 64 * 1024);
    assert.equal(o.stdoutTruncated, true);
  });

  test('allocating without limit ends in OutOfMemory, not in the server', async () => {
    const spec = algorithm('hog', `export function apply() { const a = []; for (;;) a.push(new Array(1e6).fill(1.5)); }`);
    spec.limits = { ...spec.limits, heapMb: 64 };
    const w = await start(spec);
    const o = await w.call('json', Buffer.from('1'), 30_000);
    assert.equal(o.kind, 'out_of_memory');
    await w.done;
    assert.ok(groupGone(w));
  });
});

describe('a worker does not trust what comes out of the sandbox', { skip }, () => {
  test('a frame forged by the algorithm on the channel kills the worker instead of being believed', async () => {
    const w = await start(
      algorithm(
        'forge',
        `import fs from 'node:fs';
        export function apply() {
          const h = Buffer.from(JSON.stringify({ type: 'result', id: 999, content_type: 'made-up', duration_ms: 1e12 }));
          const p = Buffer.alloc(8); p.writeUInt32LE(h.length, 0); p.writeUInt32LE(0, 4);
          fs.writeSync(3, Buffer.concat([p, h]));
          return 'real';
        }`,
      ),
    );
    const o = await w.call('json', Buffer.from('1'), 5000);
    assert.equal(o.kind, 'crashed');
    assert.ok(o.durationMs < 5000, 'a duration is never longer than what the server measured');
    assert.equal(w.dead, true);
  });

  test('output printed after an answer is not credited to the next call', async () => {
    const w = await start(
      algorithm(
        'late',
        `export async function apply(x) {
          if (x === 'a') { setTimeout(() => console.log('printed by A'), 20); return 'a'; }
          await new Promise((r) => setTimeout(r, 150)); console.log('printed by B'); return 'b';
        }`,
      ),
    );
    const a = await w.call('text', Buffer.from('a'), 5000);
    await new Promise((r) => setTimeout(r, 60));
    const b = await w.call('text', Buffer.from('b'), 5000);
    assert.equal(a.stdout, '');
    assert.equal(b.stdout, 'printed by B\n');
  });

  test('descriptors the server inherited do not reach the sandbox', async () => {
    // A server started with an extra open descriptor (as a supervisor's log pipe would be).
    // A high number: Node reuses low ones for itself at start, which would hide the leak.
    const script = path.join(root, 'inherit.mts'); // .mts: ESM outside the package
    const spec = algorithm('fds', `import fs from 'node:fs'; export function apply() { return fs.readdirSync('/proc/self/fd').map((f) => { try { return fs.readlinkSync('/proc/self/fd/' + f); } catch { return ''; } }); }`);
    fs.writeFileSync(
      script,
      `import { Worker } from ${JSON.stringify(new URL('../src/runtime/worker.ts', import.meta.url).pathname)};
      const w = await Worker.start(${JSON.stringify(spec)});
      const o = await w.call('json', Buffer.from('1'), 5000);
      process.stdout.write(o.kind === 'result' ? o.body.toString() : 'failed: ' + o.kind);
      await w.stop(200);`,
    );
    const marker = path.join(root, 'inherited-marker.txt');
    fs.writeFileSync(marker, 'x');
    const { spawnSync } = await import('node:child_process');
    const r = spawnSync('/bin/bash', ['-c', `exec 100<${marker}; exec ${process.execPath} --import tsx ${script}`], {
      cwd: new URL('..', import.meta.url).pathname,
      encoding: 'utf8',
      timeout: 30_000,
    });
    const targets: string[] = JSON.parse(r.stdout);
    assert.ok(targets.length >= 4, `the probe ran (${r.stderr})`);
    assert.equal(targets.some((t) => t.includes('inherited-marker')), false, `inherited descriptor visible: ${targets.join(', ')}`);
  });
});
