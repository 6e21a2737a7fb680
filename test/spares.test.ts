/**
 * Pre-started workers (issue 24, cold starts; src/runtime/spares.ts), over real HTTP with real
 * bubblewrap sandboxes: a cold start on a spare answers as a worker started for its build
 * would, every answer says whether it was cold, a spare is never given a second build (so two
 * owners, or two versions, never share a process), and builds a spare does not take start as
 * before. Whether a call ran on a spare is read from inside the sandbox: a spare's runner was
 * started with `--spare` (its /proc/self/cmdline); where its /algo comes from is not shown there
 * (sandbox.ts, STAGE). What the sandbox sees of the host (its name, its mount table) is checked
 * on a spare and on a worker with the network.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { callAlgo, compile, publish as publishVersion, release, upload } from './helpers/algorithms.ts';
import { probeSandbox } from '../src/runtime/sandbox.ts';
import { HOLD_MS, linkTree, MAX_BUILD_ENTRIES, scanTree, Spares } from '../src/runtime/spares.ts';
import { DEFAULT_LIMITS } from '../src/runtime/sandbox.ts';
import { Worker } from '../src/runtime/worker.ts';
import { readCounters } from '../src/runtime/hostCpu.ts';

const CLUSTER = process.env.ALGOHOST_TEST_BACKENDS === 'cluster';
const support = probeSandbox();
const skip = support.available ? false : `bubblewrap unavailable: ${support.reason}`;

/** A JavaScript algorithm: who loaded this process (every build's load adds its mark), where /algo comes from, its own file. */
const JS = (mark: string) => `
import fs from 'node:fs';
import os from 'node:os';
const id = Math.random().toString(36).slice(2);
globalThis.marks = [...(globalThis.marks ?? []), ${JSON.stringify(mark)}];
let loaded = 0;
export function load() { loaded++; }
export function apply(input) {
  const mountinfo = fs.readFileSync('/proc/self/mountinfo', 'utf8');
  const algo = mountinfo.split('\\n').map((l) => l.split(' ')).find((f) => f[4] === '/algo');
  const read = (p) => { try { return fs.readFileSync(p, 'utf8'); } catch (e) { return e.code; } };
  return { input, id, marks: globalThis.marks, loaded, argv: read('/proc/self/cmdline').split('\\0'), ro: /(^|,)ro(,|$)/.test(algo?.[5] ?? ''), url: import.meta.url,
    data: fs.readFileSync(new URL('./data.txt', import.meta.url), 'utf8'),
    host: { nodename: os.hostname(), hostname: read('/etc/hostname'), mountinfo, mountinfo1: read('/proc/1/mountinfo') } };
}
`;
const PY = (mark: string) => `
import builtins, os, random
_id = '%x' % random.getrandbits(48)
builtins.marks = getattr(builtins, 'marks', []) + [${JSON.stringify(mark)}]
_loaded = [0]
def load():
    _loaded[0] += 1
def _read(p):
    try:
        with open(p) as f:
            return f.read()
    except OSError as e:
        return type(e).__name__
def apply(input):
    mountinfo = _read('/proc/self/mountinfo')
    algo = [l.split(' ') for l in mountinfo.split('\\n') if len(l.split(' ')) > 5 and l.split(' ')[4] == '/algo'][0]
    return {'input': input, 'id': _id, 'marks': builtins.marks, 'loaded': _loaded[0], 'argv': _read('/proc/self/cmdline').split('\\0'), 'ro': 'ro' in algo[5].split(','),
            'file': __file__, 'data': open(os.path.join(os.path.dirname(__file__), 'data.txt')).read(),
            'host': {'nodename': os.uname().nodename, 'hostname': _read('/etc/hostname'), 'mountinfo': mountinfo, 'mountinfo1': _read('/proc/1/mountinfo')}}
`;

const files = (lang: 'js' | 'py', mark: string): Record<string, string> =>
  lang === 'js'
    ? { 'src/index.js': JS(mark), 'src/data.txt': `data of ${mark}` }
    : { [`src/${mark}.py`]: PY(mark), 'src/data.txt': `data of ${mark}` };

const onSpare = (result: { argv?: string[] }) => Array.isArray(result.argv) && result.argv.includes('--spare');

const REPO = path.resolve(import.meta.dirname, '..');

/**
 * What an algorithm read of the host: its host name is the sandbox's, and neither it nor its
 * mount table names the host, or shows a path of the host's (the server's or a worker node's
 * home, a spare's directory with the server's pid, the install directory).
 */
function assertNamesNoHost(host: Record<string, string>, what: string, home: string): void {
  assert.match(host.mountinfo ?? '', / \/algo /, `${what}: the mount table was read: ${JSON.stringify(host)}`);
  assert.equal(host.nodename, 'sandbox', `${what}: its own host name`);
  const name = new RegExp(`(^|[^A-Za-z0-9.-])${os.hostname().replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}([^A-Za-z0-9-]|$)`);
  for (const [file, value] of Object.entries(host)) {
    assert.doesNotMatch(value, name, `${what}: ${file} names the host: ${value}`);
    for (const p of [home, REPO, `${os.tmpdir()}/`, os.homedir(), 'run/spares', 'algohost-', `-${process.pid}-`]) {
      assert.equal(value.includes(p), false, `${what}: ${file} shows the host path ${p}: ${value}`);
    }
  }
}

describe('pre-started workers', { skip }, () => {
  let s: TestServer;
  let alice: ReturnType<typeof api>;
  let bob: ReturnType<typeof api>;
  let n = 0;

  before(async () => {
    s = await startServer({ env: { ALGOHOST_PRESTART: '1', ALGOHOST_PRESTART_MAX_CPU: '100', ALGOHOST_ALGORITHM_NETWORK: 'host' } });
    alice = api(s.url, await s.user('alice'));
    bob = api(s.url, await s.user('bob'));
  });
  after(() => s.close());

  /** Publishes a new algorithm of `who`'s in `lang`, named after `mark`. */
  async function publish(who: ReturnType<typeof api>, owner: string, lang: 'js' | 'py', mark: string, settings: Record<string, unknown> = {}): Promise<string> {
    const name = `${mark}${++n}`;
    const f = files(lang, mark);
    if (lang === 'py') {
      // The entry file is named after the algorithm.
      f[`src/${name}.py`] = f[`src/${mark}.py`]!;
      delete f[`src/${mark}.py`];
    }
    await release(who, owner, name, f, { settings: { language: lang === 'js' ? 'javascript' : 'python3', ...settings } });
    return `${owner}/${name}`;
  }

  async function call(who: ReturnType<typeof api>, ref: string, input = 'x') {
    const r = await callAlgo(who, ref, input);
    const body = await json(r);
    assert.equal(r.status, 200, JSON.stringify(body));
    assert.equal(body.error, undefined, JSON.stringify(body.error));
    return { cold: r.headers.get('x-cold-start'), result: body.result };
  }

  /** Calls fresh algorithms until one runs on a spare (the first call of a language on a node primes its spares). */
  async function coldOnSpare(lang: 'js' | 'py', owner: string, who: ReturnType<typeof api>, mark: string) {
    const roots: string[] = [];
    for (let i = 0; i < 12; i++) {
      const ref = await publish(who, owner, lang, mark);
      const r = await call(who, ref);
      assert.equal(r.cold, 'true', 'the first call of a new algorithm is a cold start');
      if (onSpare(r.result)) return { ref, ...r };
      roots.push(JSON.stringify(r.result.argv));
      // Not ready yet (or on a worker node that had not started any): a moment for the spare to start.
      await new Promise((res) => setTimeout(res, 500));
    }
    assert.fail(`no call of a new ${lang} algorithm ran on a pre-started worker; its runner was started as ${roots.join(', ')}`);
  }

  /** Until a spare of `runner` is ready on this server (one server only; a cluster's are the worker nodes'), at most 15 s. */
  async function spareReady(runner: 'node' | 'python') {
    const end = Date.now() + 15_000;
    while (!CLUSTER && (s.services.runtime.spares?.counts()[runner] ?? 0) === 0 && Date.now() < end) await new Promise((res) => setTimeout(res, 50));
    if (CLUSTER) await new Promise((res) => setTimeout(res, 1000));
  }

  for (const lang of ['js', 'py'] as const) {
    test(`${lang}: a cold start on a spare answers as a worker started for its build, naming nothing of the host; the next call is warm`, async () => {
      const first = await coldOnSpare(lang, 'alice', alice, 'A');
      const r = first.result;
      assert.equal(r.input, 'x');
      assertNamesNoHost(r.host, `${lang} on a spare`, s.home);
      assert.equal(r.ro, true, '/algo is read-only in a spare too');
      assert.deepEqual(r.marks, ['A'], 'only its own build was ever loaded in this process');
      assert.equal(r.loaded, 1, 'load() ran once');
      assert.equal(r.data, 'data of A');
      if (lang === 'js') {
        assert.match(r.url, /^file:\/\/\/algo\/src\/index\.js$/);
      } else {
        assert.match(r.file, /^\/algo\/src\/A\d+\.py$/);
      }
      // (On a cluster the next call may land on the other worker node, cold there: an API node
      // learns which node holds a warm worker from beats sent once a second.)
      if (!CLUSTER) {
        const again = await call(alice, first.ref, 'y');
        assert.equal(again.cold, 'false');
        assert.equal(again.result.id, r.id, 'the same process answered, warm');
        assert.equal(again.result.loaded, 1);
      }
    });
  }

  test('a spare takes one build, ever: other owners\' and other versions\' builds run in processes of their own', async () => {
    const a = await coldOnSpare('js', 'alice', alice, 'A');
    const b = await coldOnSpare('js', 'bob', bob, 'B');
    assert.deepEqual(b.result.marks, ['B']);
    assert.notEqual(b.result.id, a.result.id);
    // A new version of alice's algorithm: a new build, a new process (spare or not), never hers of before.
    const name = a.ref.split('/')[1]!;
    assert.equal((await upload(alice, 'alice', name, files('js', 'A2'))).status, 200);
    await compile(alice, 'alice', name);
    const version = await publishVersion(alice, 'alice', name);
    const v2 = await call(alice, `alice/${name}/${version}`);
    // Started for it by this call (cold), or warmed once it was published (docs/limits.md, "Cold
    // starts": the version before it is warm) if that was quicker: a process of its own either way.
    assert.deepEqual(v2.result.marks, ['A2']);
    assert.notEqual(v2.result.id, a.result.id);
  });

  test('an algorithm with the network starts a worker of its own, as before', async () => {
    await coldOnSpare('js', 'alice', alice, 'A');
    const ref = await publish(alice, 'alice', 'js', 'N', { network_access: 'full' });
    const r = await call(alice, ref);
    assert.equal(r.cold, 'true');
    assert.equal(onSpare(r.result), false, JSON.stringify(r.result.argv));
    assert.deepEqual(r.result.marks, ['N']);
    assertNamesNoHost(r.result.host, 'js with the host\'s network', s.home);
  });

  test('a load() that fails on a spare is a LoadingError on every call, as on a worker started for the build', async () => {
    await coldOnSpare('py', 'alice', alice, 'A');
    // Spares of this language are primed: the next one is ready within moments.
    await new Promise((res) => setTimeout(res, 1000));
    const name = `Broken${++n}`;
    await release(alice, 'alice', name, { [`src/${name}.py`]: 'def load():\n    raise RuntimeError("no model")\ndef apply(input):\n    return input\n' }, { settings: { language: 'python3' } });
    const taken = s.services.runtime.spares?.taken ?? 0;
    for (let i = 0; i < 2; i++) {
      const r = await callAlgo(alice, `alice/${name}`, 'x');
      const body = await json(r);
      assert.equal(r.status, 200);
      assert.equal(body.error?.error_type, 'LoadingError', JSON.stringify(body));
      assert.match(body.error.message, /no model/);
    }
    // It was a spare that loaded it (one server: its own pool; a cluster's are the worker nodes').
    if (!CLUSTER) assert.equal(s.services.runtime.spares!.taken, taken + 1);
  });

  test('a spare that dies loading its build is replaced by a worker started for the build: the call is answered', async () => {
    await coldOnSpare('js', 'alice', alice, 'A');
    await spareReady('node');
    const name = `Dies${++n}`;
    // Only a pre-started runner is given `--spare`: this build kills that one while it loads, and loads in any other.
    await release(alice, 'alice', name, { 'src/index.js': "if (process.argv.includes('--spare')) process.exit(3);\nexport function apply(input) { return 'answered ' + input; }\n" }, { settings: { language: 'javascript' } });
    const taken = s.services.runtime.spares?.taken ?? 0;
    const r = await call(alice, `alice/${name}`);
    assert.equal(r.result, 'answered x');
    assert.equal(r.cold, 'true');
    if (!CLUSTER) assert.equal(s.services.runtime.spares!.taken, taken + 1, 'a spare was given the build first');
  });

  test('a load() on a spare gets no SDK request served, as on a worker started for its build: it is in no call', async () => {
    await coldOnSpare('js', 'alice', alice, 'A');
    await spareReady('node');
    const name = `Asks${++n}`;
    // load() asks for one of alice's files; the call behind it on the spare is alice's, but load() is no call's.
    await release(
      alice,
      'alice',
      name,
      { 'src/index.js': "let got;\nexport async function load() { try { got = await globalThis.algohost.client().file('data://.my/traced/f.txt').getString(); } catch (e) { got = 'refused: ' + e.message; } }\nexport function apply() { return got; }\n" },
      { settings: { language: 'javascript' } },
    );
    await alice('/v1/data/.my', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name: 'traced' }) });
    await alice('/v1/data/.my/traced/f.txt', { method: 'PUT', body: 'secret of alice' });
    const taken = s.services.runtime.spares?.taken ?? 0;
    const r = await call(alice, `alice/${name}`);
    if (!CLUSTER) assert.equal(s.services.runtime.spares!.taken, taken + 1, 'it ran on a spare');
    assert.match(String(r.result), /^refused: .*no call is in progress/, JSON.stringify(r.result));
  });

  test('what a build prints while it loads on a spare is not the first call\'s output', async () => {
    await coldOnSpare('py', 'alice', alice, 'A');
    await coldOnSpare('js', 'alice', alice, 'A');
    for (const lang of ['js', 'py'] as const) {
      await spareReady(lang === 'js' ? 'node' : 'python');
      const name = `Loud${++n}`;
      const f: Record<string, string> =
        lang === 'js'
          ? { 'src/index.js': "console.log('loading');\nexport function apply(input) { console.log('applying'); return input; }\n" }
          : { [`src/${name}.py`]: "print('loading')\ndef apply(input):\n    print('applying')\n    return input\n" };
      await release(alice, 'alice', name, f, { settings: { language: lang === 'js' ? 'javascript' : 'python3' } });
      const r = await callAlgo(alice, `alice/${name}`, 'x', 'text/plain', '?stdout=true');
      const body = await json(r);
      assert.equal(r.headers.get('x-cold-start'), 'true');
      assert.equal(body.result, 'x');
      assert.equal(body.metadata.stdout, 'applying\n', `${lang}: ${JSON.stringify(body.metadata)}`);
    }
  });

  test('spares\' directories go with their workers; those a dead server left are removed', { skip: CLUSTER ? 'the spares are the worker nodes\' (their homes are their own)' : false }, async () => {
    const spares = s.services.runtime.spares!;
    assert.ok(spares.taken > 0);
    const dir = path.join(s.home, 'run', 'spares');
    // One directory per live spare and per worker made from one.
    const live = fs.readdirSync(dir).length;
    assert.ok(live >= 1 && live <= spares.taken + 2, `${live} directories for ${spares.taken} taken and ≤ 2 waiting`);
  });
});

describe('pre-started workers, off and left behind', { skip: skip || (CLUSTER ? 'the spares are the worker nodes\' (their homes are their own)' : false) }, () => {
  test('ALGOHOST_PRESTART=0 starts every worker for its build; a dead server\'s spare directories are removed once spares are made', async () => {
    const off = await startServer({ env: { ALGOHOST_PRESTART: '0' } });
    try {
      const alice = api(off.url, await off.user('alice'));
      for (let i = 0; i < 3; i++) {
        await release(alice, 'alice', `Off${i}`, files('js', `O${i}`), { settings: { language: 'javascript' } });
        const r = await callAlgo(alice, `alice/Off${i}`, 'x');
        assert.equal(r.headers.get('x-cold-start'), 'true');
        const body = await json(r);
        assert.equal(onSpare(body.result), false);
        await new Promise((res) => setTimeout(res, 300));
      }
      assert.equal(off.services.runtime.spares, undefined);
    } finally {
      await off.close();
    }

    // A server that died left spare directories behind (its pid is gone): the next one removes them.
    const dead = spawnSync('/bin/true').pid!;
    const s = await startServer({ env: { ALGOHOST_PRESTART: '1', ALGOHOST_PRESTART_MAX_CPU: '100' } });
    try {
      const dir = path.join(s.home, 'run', 'spares');
      fs.mkdirSync(path.join(dir, `node-${dead}-1`, 'src'), { recursive: true });
      fs.writeFileSync(path.join(dir, `node-${dead}-1`, 'src', 'index.js'), '');
      const alice = api(s.url, await s.user('alice'));
      await release(alice, 'alice', 'Left', files('js', 'L'), { settings: { language: 'javascript' } });
      assert.equal((await callAlgo(alice, 'alice/Left', 'x')).status, 200);
      const end = Date.now() + 10_000;
      while (fs.existsSync(path.join(dir, `node-${dead}-1`)) && Date.now() < end) await new Promise((res) => setTimeout(res, 50));
      assert.equal(fs.existsSync(path.join(dir, `node-${dead}-1`)), false);
      assert.ok(fs.readdirSync(dir).some((d) => d.startsWith(`node-${process.pid}-`)), 'this server\'s spare has its directory there');
    } finally {
      await s.close();
    }
  });
});

describe('a build put into a spare\'s directory', () => {
  test('directories, files with their modes (hard links of the build\'s), and symbolic links as they are', async () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-spares-'));
    try {
      const from = path.join(root, 'build');
      fs.mkdirSync(path.join(from, 'src', 'lib'), { recursive: true });
      fs.mkdirSync(path.join(from, 'node_modules', '.bin'), { recursive: true });
      fs.writeFileSync(path.join(from, 'src', 'index.js'), 'export const apply = (x) => x;');
      fs.writeFileSync(path.join(from, 'src', 'lib', 'tool.sh'), '#!/bin/sh\n', { mode: 0o755 });
      fs.symlinkSync('../../src/lib/tool.sh', path.join(from, 'node_modules', '.bin', 'tool'));
      const tree = scanTree(from)!;
      assert.deepEqual({ dirs: [...tree.dirs].sort(), files: [...tree.files].sort(), links: tree.links }, {
        dirs: ['node_modules', 'node_modules/.bin', 'src', 'src/lib'],
        files: ['src/index.js', 'src/lib/tool.sh'],
        links: ['node_modules/.bin/tool'],
      });
      for (const big of [false, true]) {
        const to = path.join(root, `spare-${big}`);
        fs.mkdirSync(to);
        // The same whether linked at once (small builds) or a step at a time (large ones).
        const t = big ? { ...tree, files: [...tree.files], dirs: [...tree.dirs, ...Array.from({ length: 300 }, (_, i) => `d${i}`)] } : tree;
        if (big) for (let i = 0; i < 300; i++) fs.mkdirSync(path.join(from, `d${i}`));
        await linkTree(t, from, to);
        assert.equal(fs.readFileSync(path.join(to, 'src', 'index.js'), 'utf8'), 'export const apply = (x) => x;');
        assert.equal(fs.statSync(path.join(to, 'src', 'index.js')).ino, fs.statSync(path.join(from, 'src', 'index.js')).ino, 'a hard link, no copy');
        assert.equal(fs.statSync(path.join(to, 'src', 'lib', 'tool.sh')).mode & 0o777, 0o755);
        assert.equal(fs.readlinkSync(path.join(to, 'node_modules', '.bin', 'tool')), '../../src/lib/tool.sh');
        if (big) assert.ok(fs.statSync(path.join(to, 'd299')).isDirectory());
      }
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });

  test('a build of more than MAX_BUILD_ENTRIES entries, or with a socket, is not put into one', async () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-spares-'));
    try {
      const many = path.join(root, 'many');
      fs.mkdirSync(many);
      for (let i = 0; i <= MAX_BUILD_ENTRIES; i++) fs.writeFileSync(path.join(many, `f${i}`), '');
      assert.equal(scanTree(many), null);
      fs.rmSync(path.join(many, 'f0'));
      assert.notEqual(scanTree(many), null, 'exactly MAX_BUILD_ENTRIES is taken');
      const sock = path.join(root, 'sock');
      fs.mkdirSync(sock);
      const server = net.createServer().listen(path.join(sock, 's'));
      await new Promise((r) => server.once('listening', r));
      assert.equal(scanTree(sock), null);
      server.close();
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});

describe('spares wait for the CPUs', { skip }, () => {
  test('while the host\'s CPUs are busier than ALGOHOST_PRESTART_MAX_CPU no spare is started; once they have room, it is', async () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-spares-cpu-'));
    const build = path.join(root, 'build');
    fs.mkdirSync(path.join(build, 'src'), { recursive: true });
    fs.writeFileSync(path.join(build, 'src', 'index.js'), 'export const apply = (x) => x;');
    // How busy the CPUs are: a stand-in, since this machine's load is not the test's to set.
    const cpu = { share: 1, busy: () => cpu.share };
    const launched: string[] = [];
    const spares = new Spares(
      (runner, dir) => {
        launched.push(runner);
        return Worker.spare({ runner, algoDir: dir, entry: '', network: false, limits: DEFAULT_LIMITS, spare: true });
      },
      { perRunner: 1, dir: path.join(root, 'spares'), cpuMax: 0.9, cpu },
    );
    try {
      // The first ask keeps node's spares from now on; none is ready, and the CPUs are full.
      assert.equal(await spares.take('node', build, 'src/index.js', 30_000), undefined);
      await new Promise((r) => setTimeout(r, 4 * HOLD_MS));
      assert.deepEqual(launched, [], 'no spare started while the CPUs were busy');
      assert.ok(spares.heldBack >= 1);
      cpu.share = 0.5;
      const end = Date.now() + 30_000;
      while ((spares.counts().node ?? 0) < 1 && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
      assert.deepEqual(launched, ['node']);
      assert.equal(spares.counts().node, 1, 'started once the CPUs had room');
      const worker = await spares.take('node', build, 'src/index.js', 30_000);
      assert.ok(worker, 'the spare took the build');
      await worker.stop();
    } finally {
      await spares.close();
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});

test('the host\'s CPU counters are read from /proc/stat\'s first line', () => {
  assert.deepEqual(readCounters('cpu  100 5 50 800 20 0 5 0 0 0\ncpu0 50 2 25 400 10 0 2 0 0 0\n'), { busy: 160, total: 980 });
  assert.equal(readCounters('intr 1 2 3\n'), undefined);
  assert.equal(readCounters('cpu  a b c d e\n'), undefined);
});
