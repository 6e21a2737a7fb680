/**
 * The `algo` data commands end to end: bin/algo.mjs as a child process against a real server
 * (in this process, so every wait here is asynchronous), checked through the SDK and the
 * local file system rather than through the CLI itself.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { AlgohostClient } from '../client/src/index.ts';
import { startServer, tempHome, type TestServer } from './helpers/server.ts';
import { childEnv, NODE } from './helpers/process.ts';

const ALGO = path.resolve(import.meta.dirname, '..', 'bin', 'algo.mjs');
const MiB = 1024 * 1024;

let server: TestServer;
let key: string;
let client: AlgohostClient;
let work: string;
let home: string;

before(async () => {
  server = await startServer({ hosted: { pageSize: 1000 } });
  key = await server.user('alice');
  client = new AlgohostClient({ apiKey: key, baseUrl: server.url, env: {} });
  work = tempHome('algo-cli-data-');
  home = tempHome('algo-cli-home-');
});

after(async () => {
  await server?.close();
  for (const d of [work, home]) if (d) fs.rmSync(d, { recursive: true, force: true });
});

interface Run {
  code: number | null;
  stdout: Buffer;
  out: string;
  err: string;
}

/** Runs `algo ARGS` in `work`, stdout and stderr piped; fails the test after `timeoutMs`. */
function algo(args: string[], env: Record<string, string> = {}, timeoutMs = 120_000): Promise<Run> {
  const child = spawn(NODE, [ALGO, ...args], {
    cwd: work,
    env: childEnv({ HOME: home, ALGOHOST_API: server.url, ALGOHOST_API_KEY: key, TZ: 'UTC', ...env }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  child.stdout.on('data', (b: Buffer) => out.push(b));
  child.stderr.on('data', (b: Buffer) => err.push(b));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`algo ${args.join(' ')} did not finish within ${timeoutMs} ms`));
    }, timeoutMs);
    child.on('close', (code) => {
      clearTimeout(timer);
      const stdout = Buffer.concat(out);
      resolve({ code, stdout, out: stdout.toString('utf8'), err: Buffer.concat(err).toString('utf8') });
    });
  });
}

function ok(r: Run): Run {
  assert.equal(r.code, 0, `expected success, got ${r.code}; stderr: ${r.err}`);
  return r;
}

const sha = (data: Uint8Array) => crypto.createHash('sha256').update(data).digest('hex');

async function shaOfStream(stream: AsyncIterable<unknown>): Promise<string> {
  const h = crypto.createHash('sha256');
  for await (const chunk of stream) h.update(chunk as Buffer);
  return h.digest('hex');
}

const shaLocal = (p: string) => shaOfStream(fs.createReadStream(p));
const shaRemote = async (uri: string) => shaOfStream(await client.file(uri).stream());

/** Relative path → sha256 of every file, and every directory, under a local directory. */
function localTree(root: string): { files: Map<string, string>; dirs: Set<string> } {
  const files = new Map<string, string>();
  const dirs = new Set<string>();
  const visit = (dir: string, rel: string) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) {
        dirs.add(r);
        visit(path.join(dir, e.name), r);
      } else files.set(r, sha(fs.readFileSync(path.join(dir, e.name))));
    }
  };
  visit(root, '');
  return { files, dirs };
}

/** The same, read through the SDK. */
async function remoteTree(uri: string): Promise<{ files: Map<string, string>; dirs: Set<string> }> {
  const files = new Map<string, string>();
  const dirs = new Set<string>();
  const visit = async (u: string, rel: string) => {
    for await (const e of client.dir(u).list()) {
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (e.type === 'dir') {
        dirs.add(r);
        await visit(e.uri, r);
      } else files.set(r, await shaRemote(e.uri));
    }
  };
  await visit(uri, '');
  return { files, dirs };
}

function assertSameTree(actual: { files: Map<string, string>; dirs: Set<string> }, expected: { files: Map<string, string>; dirs: Set<string> }) {
  assert.deepEqual([...actual.dirs].sort(), [...expected.dirs].sort(), 'the same directories');
  assert.deepEqual([...actual.files.entries()].sort(), [...expected.files.entries()].sort(), 'the same files with the same contents');
}

/** Runs `fn` on every item, `n` at a time. */
async function parallel<T>(items: T[], n: number, fn: (item: T) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(Array.from({ length: n }, async () => {
    while (next < items.length) await fn(items[next++]!);
  }));
}

test('cp: a 50 MiB file local to remote, remote to local and remote to remote, contents compared', async () => {
  const big = path.join(work, 'big.bin');
  fs.writeFileSync(big, crypto.randomBytes(50 * MiB));
  const want = await shaLocal(big);
  await client.dir('data://.my/cp').create();

  // Local to remote, into an existing directory: the file goes under its own name.
  const up = ok(await algo(['cp', 'big.bin', 'data://.my/cp']));
  assert.match(up.out, /^Copied big\.bin to data:\/\/\.my\/cp\/big\.bin \(50\.0 MiB in /);
  assert.equal(up.err, '', 'no progress bar when stderr is a pipe');
  assert.equal((await client.file('data://.my/cp/big.bin').stat()).size, 50 * MiB);
  assert.equal(await shaRemote('data://.my/cp/big.bin'), want);

  // Remote to local, to a new name; no temporary file left beside it.
  ok(await algo(['cp', 'data://.my/cp/big.bin', 'down.bin']));
  assert.equal(await shaLocal(path.join(work, 'down.bin')), want);
  assert.deepEqual(fs.readdirSync(work).filter((n) => n.endsWith('.part')), []);

  // Remote to remote, with --json.
  const across = ok(await algo(['--json', 'cp', 'data://.my/cp/big.bin', 'data://.my/cp/copy.bin']));
  const report = JSON.parse(across.out) as { files: { from: string; to: string; size: number }[]; bytes: number };
  assert.deepEqual(report.files, [{ from: 'data://.my/cp/big.bin', to: 'data://.my/cp/copy.bin', size: 50 * MiB }]);
  assert.equal(report.bytes, 50 * MiB);
  assert.equal(await shaRemote('data://.my/cp/copy.bin'), want);

  // Remote to local over an existing file replaces it.
  fs.writeFileSync(path.join(work, 'down.bin'), 'old');
  ok(await algo(['cp', 'data://.my/cp/copy.bin', 'down.bin']));
  assert.equal(await shaLocal(path.join(work, 'down.bin')), want);
});

test('Ctrl-C during a download leaves neither the file nor its temporary part behind', async () => {
  // The 50 MiB file of the test above.
  assert.equal(await client.file('data://.my/cp/big.bin').exists(), true);
  const child = spawn(NODE, [ALGO, 'cp', 'data://.my/cp/big.bin', 'interrupted.bin'], {
    cwd: work,
    env: childEnv({ HOME: home, ALGOHOST_API: server.url, ALGOHOST_API_KEY: key }),
    stdio: 'ignore',
  });
  const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
  const parts = () => fs.readdirSync(work).filter((n) => n.startsWith('.interrupted.bin.') && n.endsWith('.part'));
  const deadline = Date.now() + 30_000;
  while (parts().length === 0) {
    assert.ok(Date.now() < deadline, 'the download never started');
    await new Promise((r) => setTimeout(r, 5));
  }
  child.kill('SIGINT');
  const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
  const code = await exited;
  clearTimeout(timer);
  assert.equal(code, 130);
  assert.deepEqual(parts(), []);
  assert.equal(fs.existsSync(path.join(work, 'interrupted.bin')), false);
});

test('cp -r: a nested tree up, down and across, every file compared, empty directories kept', async () => {
  const tree = path.join(work, 'tree');
  const files: Record<string, Buffer> = {
    'top.txt': Buffer.from('top\n'),
    'space name.txt': Buffer.from('spaces are fine'),
    'empty-file': Buffer.alloc(0),
    'a/x.bin': crypto.randomBytes(300 * 1024),
    'a/b/y.bin': crypto.randomBytes(70_000),
    'a/b/c/z.txt': Buffer.from('deep'),
  };
  for (let i = 0; i < 30; i++) files[`a/many/f${String(i).padStart(2, '0')}.dat`] = crypto.randomBytes(1000 + i);
  for (const [rel, data] of Object.entries(files)) {
    fs.mkdirSync(path.dirname(path.join(tree, rel)), { recursive: true });
    fs.writeFileSync(path.join(tree, rel), data);
  }
  fs.mkdirSync(path.join(tree, 'empty', 'inner'), { recursive: true });
  const local = localTree(tree);
  assert.equal(local.files.size, 36);

  await client.dir('data://.my/trees').create();
  // Up, into an existing directory: data://.my/trees/tree.
  const up = ok(await algo(['cp', '-r', '-c', '3', 'tree', 'data://.my/trees']));
  assert.match(up.out, /^Copied 36 files in 7 directories to data:\/\/\.my\/trees /);
  assertSameTree(await remoteTree('data://.my/trees/tree'), local);

  // Down, to a new directory (a trailing "/" is fine for a directory): it becomes the copy.
  ok(await algo(['cp', '-r', 'data://.my/trees/tree', 'down/']));
  assertSameTree(localTree(path.join(work, 'down')), local);
  // Again, now that it exists: the tree goes under it by name, as with cp(1).
  ok(await algo(['cp', '--recursive', 'data://.my/trees/tree', 'down']));
  assertSameTree(localTree(path.join(work, 'down', 'tree')), local);

  // Across, streamed from one URI to the other.
  ok(await algo(['cp', '-r', '--concurrency=8', 'data://.my/trees/tree', 'data://.my/trees/tree2']));
  assertSameTree(await remoteTree('data://.my/trees/tree2'), local);

  // Several sources into one directory.
  ok(await algo(['cp', 'tree/top.txt', 'tree/a/x.bin', 'data://.my/trees/tree2/a/b/y.bin', 'data://.my/trees/']));
  assert.equal(await shaRemote('data://.my/trees/top.txt'), local.files.get('top.txt'));
  assert.equal(await shaRemote('data://.my/trees/x.bin'), local.files.get('a/x.bin'));
  assert.equal(await shaRemote('data://.my/trees/y.bin'), local.files.get('a/b/y.bin'));
  // ...a directory among them only with -r.
  const noR = await algo(['cp', 'tree/top.txt', 'data://.my/trees/tree2/a/b', 'data://.my/trees/']);
  assert.equal(noR.code, 1);
  assert.match(noR.err, /algo cp: data:\/\/\.my\/trees\/tree2\/a\/b is a directory: use -r/);
  ok(await algo(['cp', '-r', 'tree/top.txt', 'data://.my/trees/tree2/a/b', 'data://.my/trees/']));
  assertSameTree(await remoteTree('data://.my/trees/b'), {
    files: new Map([['y.bin', local.files.get('a/b/y.bin')!], ['c/z.txt', local.files.get('a/b/c/z.txt')!]]),
    dirs: new Set(['c']),
  });
  // Several sources need an existing directory.
  const missingDir = await algo(['cp', 'tree/top.txt', 'tree/empty-file', 'data://.my/trees/nowhere']);
  assert.equal(missingDir.code, 1);
  assert.equal(missingDir.err, 'algo cp: no such directory data://.my/trees/nowhere\n');
  // So does a file copied to a name ending in "/".
  const slash = await algo(['cp', 'tree/top.txt', 'data://.my/trees/nowhere/']);
  assert.equal(slash.code, 1);
  assert.equal(slash.err, 'algo cp: no such directory data://.my/trees/nowhere\n');
  assert.equal(await client.file('data://.my/trees/nowhere').exists(), false);
});

test('cp goes on after a file that fails, and says which', async () => {
  await client.dir('data://.my/partial').create();
  await client.dir('data://.my/partial/clash').create(); // a directory where a file would go
  fs.mkdirSync(path.join(work, 'partial'));
  fs.writeFileSync(path.join(work, 'partial', 'clash'), 'a file');
  fs.writeFileSync(path.join(work, 'partial', 'fine.txt'), 'fine');
  const r = await algo(['cp', 'partial/clash', 'partial/fine.txt', 'data://.my/partial']);
  assert.equal(r.code, 1);
  assert.match(r.err, /algo cp: partial\/clash: cannot write data:\/\/\.my\/partial\/clash: .*is a directory/);
  assert.match(r.err, /algo cp: 1 of 2 files not copied/);
  assert.equal(await client.file('data://.my/partial/fine.txt').text(), 'fine');
  assert.equal(await client.dir('data://.my/partial/clash').exists(), true);
});

test('ls follows every page: 2,500 entries (1,200 directories, 1,300 files), as text and as JSON', async () => {
  await client.dir('data://.my/big').create();
  const dirs = Array.from({ length: 1200 }, (_, i) => `d${String(i).padStart(4, '0')}`);
  const names = Array.from({ length: 1300 }, (_, i) => `f${String(i).padStart(4, '0')}.txt`);
  await parallel(dirs, 16, (d) => client.dir(`data://.my/big/${d}`).create());
  await parallel(names, 16, (f) => client.file(`data://.my/big/${f}`).put(f));

  const r = ok(await algo(['ls', 'data://.my/big']));
  const lines = r.out.split('\n');
  assert.equal(lines.pop(), '', 'ends with a newline');
  assert.equal(lines.length, 2500);
  // File pages come first, then folder pages (docs/data.md), and ls prints as pages arrive.
  assert.deepEqual(lines, [...names, ...dirs.map((d) => `${d}/`)]);

  const j = ok(await algo(['--json', 'ls', 'data://.my/big']));
  const entries = JSON.parse(j.out) as { type: string; name: string; uri: string; size?: number; last_modified?: string }[];
  assert.equal(entries.length, 2500);
  assert.deepEqual(entries.slice(0, 1300).map((e) => [e.type, e.name, e.size]), names.map((f) => ['file', f, f.length]));
  assert.deepEqual(entries.slice(1300).map((e) => [e.type, e.name]), dirs.map((d) => ['dir', d]));
  assert.equal(entries[1299]!.uri, 'data://.my/big/f1299.txt');
  assert.match(entries[1299]!.last_modified!, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

  // Without an argument: your collections.
  const root = ok(await algo(['ls']));
  assert.ok(root.out.split('\n').includes('big/'), root.out);
});

test('ls -l: time, size and name; directories marked; a file listed as itself', async () => {
  await client.dir('data://.my/long').create();
  await client.dir('data://.my/long/sub').create();
  await client.file('data://.my/long/a.txt').put('hi');
  await client.file('data://.my/long/b.bin').put(Buffer.alloc(1536, 7));
  const entries = new Map<string, Date>();
  for await (const e of client.dir('data://.my/long').files()) entries.set(e.name, e.lastModified);
  // The child runs with TZ=UTC.
  const when = (name: string) => entries.get(name)!.toISOString().slice(0, 19).replace('T', ' ');

  const r = ok(await algo(['ls', '-l', 'data://.my/long']));
  assert.equal(r.out, [
    `${when('a.txt')}         2 B  a.txt`,
    `${when('b.bin')}     1.5 KiB  b.bin`,
    `${' '.repeat(19)}       [dir]  sub/`,
    '',
  ].join('\n'));

  const one = ok(await algo(['ls', '-l', 'data://.my/long/b.bin']));
  assert.equal(one.out, `${when('b.bin')}     1.5 KiB  b.bin\n`);
  const short = ok(await algo(['ls', 'data://.my/long/a.txt']));
  assert.equal(short.out, 'a.txt\n');
});

test('cp -c at its maximum (64) with many files, up and down: every file copied, no listener-leak warning', async () => {
  const src = path.join(work, 'wide');
  fs.mkdirSync(src);
  for (let i = 0; i < 150; i++) fs.writeFileSync(path.join(src, `f${String(i).padStart(3, '0')}.txt`), `file ${i}\n`.repeat(i + 1));
  ok(await algo(['mkdir', 'data://.my/wide']));
  const up = ok(await algo(['cp', '-r', '-c', '64', 'wide', 'data://.my/wide']));
  assert.doesNotMatch(up.err, /MaxListenersExceededWarning|memory leak/);
  const down = ok(await algo(['cp', '-r', '-c', '64', 'data://.my/wide/wide', 'wide-back']));
  assert.doesNotMatch(down.err, /MaxListenersExceededWarning|memory leak/);
  for (let i = 0; i < 150; i++) {
    const name = `f${String(i).padStart(3, '0')}.txt`;
    assert.equal(fs.readFileSync(path.join(work, 'wide-back', name), 'utf8'), `file ${i}\n`.repeat(i + 1), name);
  }
  const tooMany = await algo(['cp', '-c', '65', 'wide', 'data://.my/wide']);
  assert.equal(tooMany.code, 2);
});

test('mkdir --acl private|my-algorithms|public sets the new collection\'s ACL; a bad level is a usage error', async () => {
  const aclOf = async (name: string) => {
    const res = await fetch(`${server.url}/v1/data/.my/${name}?acl=true`, { headers: { authorization: `Simple ${key}` } });
    assert.equal(res.status, 200);
    return ((await res.json()) as { acl: { read: string[] } }).acl.read;
  };
  for (const [level, read] of [['private', []], ['my-algorithms', ['algo://.my/*']], ['public', ['user://*']], ['PUBLIC', ['user://*']]] as const) {
    const name = `acl_${level.replace('-', '_').toLowerCase()}${level === 'PUBLIC' ? '2' : ''}`;
    ok(await algo(['mkdir', '--acl', level, `data://.my/${name}`]));
    assert.deepEqual(await aclOf(name), read, level);
  }
  ok(await algo(['mkdir', `data://.my/acl_default`]));
  assert.deepEqual(await aclOf('acl_default'), ['algo://.my/*']);
  const bad = await algo(['mkdir', '--acl', 'friends', 'data://.my/acl_bad']);
  assert.equal(bad.code, 2);
  assert.match(bad.err, /--acl is one of private, my-algorithms, public \(got "friends"\)/);
  assert.equal(await client.dir('data://.my/acl_bad').exists(), false);
});

test('mkdir, cat, rm and rmdir (-f)', async () => {
  const made = ok(await algo(['mkdir', 'data://.my/m']));
  assert.equal(made.out, 'Created directory data://alice/m\n');
  assert.equal(await client.dir('data://.my/m').exists(), true);
  const again = await algo(['mkdir', 'data://.my/m']);
  assert.equal(again.code, 1);
  assert.equal(again.err, 'algo mkdir: data://.my/m already exists\n');
  const orphan = await algo(['mkdir', 'data://.my/nope/x']);
  assert.equal(orphan.code, 1);
  assert.equal(orphan.err, 'algo mkdir: no such directory data://.my/nope\n');
  ok(await algo(['mkdir', '.my/m/sub'])); // no scheme: data://
  assert.equal(await client.dir('data://.my/m/sub').exists(), true);

  const bytes = Buffer.from([0, 255, 1, 254, 0x80, 10]);
  const large = crypto.randomBytes(5 * MiB);
  await client.file('data://.my/m/a.txt').put('alpha\n');
  await client.file('data://.my/m/b.bin').put(bytes);
  await client.file('data://.my/m/sub/large.bin').put(large);
  const cat = ok(await algo(['cat', 'data://.my/m/a.txt', 'data://.my/m/b.bin', 'data://.my/m/sub/large.bin']));
  assert.ok(cat.stdout.equals(Buffer.concat([Buffer.from('alpha\n'), bytes, large])), 'the bytes, in order, unchanged');
  const catMissing = await algo(['cat', 'data://.my/m/zz']);
  assert.equal(catMissing.code, 1);
  assert.equal(catMissing.err, 'algo cat: no such file data://.my/m/zz\n');
  assert.equal(catMissing.out, '');
  const catDir = await algo(['cat', 'data://.my/m/sub']);
  assert.equal(catDir.code, 1);
  assert.equal(catDir.err, 'algo cat: data://.my/m/sub is a directory\n');

  const rmDir = await algo(['rm', 'data://.my/m/sub']);
  assert.equal(rmDir.code, 1);
  assert.match(rmDir.err, /data:\/\/\.my\/m\/sub is a directory: use rmdir/);
  assert.equal(await client.dir('data://.my/m/sub').exists(), true);
  // One missing among several: the others are deleted all the same.
  const rm = await algo(['rm', 'data://.my/m/a.txt', 'data://.my/m/missing.txt']);
  assert.equal(rm.code, 1);
  assert.equal(rm.out, 'Deleted file data://.my/m/a.txt\n');
  assert.equal(rm.err, 'algo rm: no such file data://.my/m/missing.txt\nalgo rm: 1 of 2 not deleted\n');
  assert.equal(await client.file('data://.my/m/a.txt').exists(), false);

  const notEmpty = await algo(['rmdir', 'data://.my/m']);
  assert.equal(notEmpty.code, 1);
  assert.equal(notEmpty.err, 'algo rmdir: data://.my/m is not empty: use -f to delete it with everything in it\n');
  assert.equal(await client.dir('data://.my/m').exists(), true);
  const onFile = await algo(['rmdir', 'data://.my/m/b.bin']);
  assert.equal(onFile.code, 1);
  assert.equal(onFile.err, 'algo rmdir: data://.my/m/b.bin is a file: use rm\n');
  assert.equal(await client.file('data://.my/m/b.bin').exists(), true);
  const forced = ok(await algo(['rmdir', '-f', 'data://.my/m']));
  assert.equal(forced.out, 'Deleted directory data://.my/m and 2 files in it\n');
  assert.equal(await client.dir('data://.my/m').exists(), false);
  const gone = await algo(['rmdir', 'data://.my/m']);
  assert.equal(gone.code, 1);
  assert.equal(gone.err, 'algo rmdir: no such directory data://.my/m\n');

  ok(await algo(['mkdir', 'data://.my/empty']));
  const json = ok(await algo(['--json', 'rmdir', 'data://.my/empty']));
  assert.deepEqual(JSON.parse(json.out), { deleted: 'data://.my/empty', files: 0 });
  assert.equal(await client.dir('data://.my/empty').exists(), false);
});

test('misuse exits 2 with the usage; a missing file or directory exits 1 with its name', async () => {
  for (const args of [
    ['ls', '-z'],
    ['ls', 'data://.my/a', 'data://.my/b'],
    ['cp', 'only-one'],
    ['cp', 'a.txt', 'b.txt'], // neither side remote
    ['cp', '-c', '0', 'a.txt', 'data://.my/x'],
    ['cp', '-c', 'many', 'a.txt', 'data://.my/x'],
    ['cp', 'nosuch://x', 'out'],
    ['rm'],
  ]) {
    const r = await algo(args);
    assert.equal(r.code, 2, `algo ${args.join(' ')}: ${r.err}`);
    assert.match(r.err, new RegExp(`^algo ${args[0]}: [^\\n]*\\nsee \`algo ${args[0]} --help\`\\n$`), r.err);
    assert.equal(r.out, '');
  }

  await client.dir('data://.my/errs').create();
  await client.dir('data://.my/errs/dir').create();
  const cases: [string[], string][] = [
    [['ls', 'data://.my/x'], 'algo ls: no such directory data://.my/x\n'],
    [['cp', 'missing.txt', 'data://.my/errs/'], 'algo cp: no such file or directory missing.txt\n'],
    [['cp', 'data://.my/errs/missing.bin', 'out.bin'], 'algo cp: no such file or directory data://.my/errs/missing.bin\n'],
    [['cp', 'data://.my/errs/dir', 'out'], 'algo cp: data://.my/errs/dir is a directory: use -r\n'],
    [['cp', 'big.bin', 'data://.my/errs/nope/big.bin'], 'algo cp: no such directory data://.my/errs/nope\n'],
    [['cp', 'data://.my/errs', 'data://.my/errs/dir/', '-r'], 'algo cp: cannot copy data://.my/errs into itself\n'],
  ];
  for (const [args, message] of cases) {
    const r = await algo(args);
    assert.equal(r.code, 1, `algo ${args.join(' ')}: ${r.err}`);
    assert.equal(r.err, message);
  }
  assert.equal(fs.existsSync(path.join(work, 'out.bin')), false);
  assert.equal(fs.existsSync(path.join(work, 'out')), false);
});

test('a rejected key, no key, and a profile file', async () => {
  const bad = await algo(['ls'], { ALGOHOST_API_KEY: `sim${'A'.repeat(25)}` });
  assert.equal(bad.code, 1);
  assert.match(bad.err, /^algo ls: API key rejected.*: run `algo auth`\n$/);

  const none = await algo(['cat', 'data://.my/x'], { ALGOHOST_API_KEY: '' });
  assert.equal(none.code, 1);
  assert.match(none.err, /no API key for profile "default": run `algo auth`/);

  const config = path.join(home, '.algohost', 'config');
  fs.mkdirSync(path.dirname(config), { recursive: true });
  fs.writeFileSync(config, `[profiles.work]\napi_key = "${key}"\napi_server = "${server.url}"\n`, { mode: 0o600 });
  try {
    const viaProfile = ok(await algo(['--profile', 'work', 'ls', 'data://.my/long'], { ALGOHOST_API_KEY: '', ALGOHOST_API: '' }));
    assert.equal(viaProfile.out, 'a.txt\nb.bin\nsub/\n');
    const wrongProfile = await algo(['--profile', 'other', 'ls'], { ALGOHOST_API_KEY: '', ALGOHOST_API: '' });
    assert.equal(wrongProfile.code, 1);
    assert.match(wrongProfile.err, /no API key for profile "other": run `algo auth --profile other`/);
  } finally {
    fs.rmSync(config);
  }
});
