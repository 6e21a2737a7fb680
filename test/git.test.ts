/**
 * Algorithm sources over git, as a user works with them: the real `git` command clones, pulls
 * and pushes against the real server on port 0 (HTTP Basic: user name and API key), builds run
 * in the sandbox, and the pushed code answers calls.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { api, json, startServer, tempHome, type TestServer } from './helpers/server.ts';
import { callAlgo, compile, createAlgorithm, publish, upload } from './helpers/algorithms.ts';

const GIT_PRESENT = fs.existsSync('/usr/lib/git-core/git-http-backend');

let s: TestServer;
let aliceKey: string;
let bobKey: string;
let alice: ReturnType<typeof api>;
const work = tempHome('algohost-git-');

before(async () => {
  s = await startServer();
  aliceKey = await s.user('alice');
  bobKey = await s.user('bob');
  alice = api(s.url, aliceKey);
});
after(async () => {
  await s.close();
  fs.rmSync(work, { recursive: true, force: true });
});

interface Ran {
  code: number;
  out: string;
}

/** `git ARGS` in `cwd` with a clean environment: no prompts, no user config. */
function git(args: string[], cwd = work): Promise<Ran> {
  const env = { PATH: '/usr/bin:/bin', HOME: work, GIT_TERMINAL_PROMPT: '0', GIT_CONFIG_NOSYSTEM: '1', GIT_AUTHOR_NAME: 'Alice', GIT_AUTHOR_EMAIL: 'alice@example.com', GIT_COMMITTER_NAME: 'Alice', GIT_COMMITTER_EMAIL: 'alice@example.com' };
  return new Promise((resolve) => {
    execFile('/usr/bin/git', args, { cwd, env, timeout: 120_000 }, (err, stdout, stderr) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, out: `${stdout}${stderr}` });
    });
  });
}

/**
 * The clone address with credentials in it, as a user pastes it: always the same API node, as
 * docs/deployment.md tells operators to route /git/ (each node keeps its own repositories).
 */
function remote(user: string, key: string, ref: string): string {
  const u = new URL(s.node);
  return `http://${user}:${key}@${u.host}/git/${ref}.git`;
}

async function ok(args: string[], cwd = work): Promise<string> {
  const r = await git(args, cwd);
  assert.equal(r.code, 0, `git ${args.join(' ')}:\n${r.out}`);
  return r.out;
}

test('the owner clones a new algorithm and gets its template; a tar.gz upload arrives with the next pull', { skip: !GIT_PRESENT && 'git is not installed' }, async () => {
  await createAlgorithm(alice, 'alice', 'Greeter', { language: 'python3' });
  await ok(['clone', remote('alice', aliceKey, 'alice/Greeter'), 'greeter']);
  const dir = path.join(work, 'greeter');
  assert.match(fs.readFileSync(path.join(dir, 'src/Greeter.py'), 'utf8'), /def apply\(input\):\n {4}return "hello \{\}"\.format\(input\)/);
  assert.match(await ok(['log', '--format=%an %s'], dir), /^algohost The python3 template\n$/);

  assert.equal((await upload(alice, 'alice', 'Greeter', { 'src/Greeter.py': 'def apply(input):\n    return "uploaded " + input\n', 'NOTES.md': 'from a tar.gz\n' })).status, 200);
  await ok(['pull', '--ff-only'], dir);
  assert.equal(fs.readFileSync(path.join(dir, 'NOTES.md'), 'utf8'), 'from a tar.gz\n');
  assert.match(fs.readFileSync(path.join(dir, 'src/Greeter.py'), 'utf8'), /uploaded/);
  // Fetching again with nothing new changes nothing (no commit per fetch).
  await ok(['pull', '--ff-only'], dir);
  assert.equal((await ok(['rev-list', '--count', 'HEAD'], dir)).trim(), '2');
});

test('a push to master becomes the source and is built; git push shows the result; the build answers calls', { skip: !GIT_PRESENT && 'git is not installed' }, async () => {
  const dir = path.join(work, 'greeter');
  fs.writeFileSync(path.join(dir, 'src/Greeter.py'), 'def apply(input):\n    return "pushed " + input\n');
  await ok(['commit', '-qam', 'say pushed'], dir);
  const pushed = await ok(['push', 'origin', 'master'], dir);
  assert.match(pushed, /remote: algohost: stored [0-9a-f]{12} as the source of alice\/Greeter \(2 files\)/);
  const hash = /remote: algohost: build ([0-9a-f]{40}) succeeded/.exec(pushed)?.[1];
  assert.ok(hash, pushed);
  const answer = await json(await callAlgo(alice, `alice/Greeter/${hash}`, 'you'));
  assert.equal(answer.result, 'pushed you');
  // The same as an upload and a compile: the algorithm's last build is this one, ready to publish.
  assert.equal(await publish(alice, 'alice', 'Greeter'), '0.1.0');
  const builds = await json(await alice('/v1/algorithms/alice/Greeter/builds'));
  assert.equal(builds.results[0].build_id, hash);

  // A push whose build fails: shown with its log; the source is stored, as an upload's would be.
  fs.writeFileSync(path.join(dir, 'src/Greeter.py'), 'def apply(input:\n');
  await ok(['commit', '-qam', 'broken'], dir);
  const broken = await ok(['push', 'origin', 'master'], dir);
  assert.match(broken, /remote: algohost: build [0-9a-f]{40} FAILED; its log:/);
  assert.match(broken, /SyntaxError/);
  const info = await json(await alice('/v1/algorithms/alice/Greeter/compile', { method: 'POST' }));
  assert.equal(info.compilation.successful, false, 'the broken source is the current one');
});

test('only master: another branch, or deleting master, is refused with the reason', { skip: !GIT_PRESENT && 'git is not installed' }, async () => {
  const dir = path.join(work, 'greeter');
  const other = await git(['push', 'origin', 'HEAD:refs/heads/feature'], dir);
  assert.notEqual(other.code, 0);
  assert.match(other.out, /remote: algohost: only master is kept here/);
  const del = await git(['push', 'origin', ':master'], dir);
  assert.notEqual(del.code, 0);
});

test('who may clone and push: the owner; others only when the source is open, and never push', { skip: !GIT_PRESENT && 'git is not installed' }, async () => {
  // A published public algorithm with closed source: bob may call it, not read its source.
  await createAlgorithm(alice, 'alice', 'Closed', { language: 'python3' });
  await compile(alice, 'alice', 'Closed');
  await publish(alice, 'alice', 'Closed');
  const closed = await git(['clone', remote('bob', bobKey, 'alice/Closed'), 'bob-closed']);
  assert.notEqual(closed.code, 0);
  assert.match(closed.out, /not found/);

  await alice('/v1/algorithms/alice/Closed', { method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ settings: { source_visibility: 'open' } }) });
  await ok(['clone', remote('bob', bobKey, 'alice/Closed'), 'bob-open']);
  const bobDir = path.join(work, 'bob-open');
  assert.ok(fs.existsSync(path.join(bobDir, 'src/Closed.py')));
  fs.writeFileSync(path.join(bobDir, 'src/Closed.py'), 'def apply(input):\n    return "bob was here"\n');
  await ok(['commit', '-qam', 'bob'], bobDir);
  const bobPush = await git(['push', 'origin', 'master'], bobDir);
  assert.notEqual(bobPush.code, 0);
  assert.match(bobPush.out, /403/);

  // A key of alice's that may not manage algorithms reads, but does not push.
  const user = await s.services.users.require('alice');
  const { apiKey: readOnly } = await s.services.keys.create(user.id, { name: 'no-manage', permissions: { allow_algo_management: false } });
  await ok(['clone', remote('alice', readOnly, 'alice/Closed'), 'alice-ro']);
  const roDir = path.join(work, 'alice-ro');
  fs.writeFileSync(path.join(roDir, 'extra.txt'), 'x\n');
  await ok(['add', 'extra.txt'], roDir);
  await ok(['commit', '-qm', 'ro'], roDir);
  const roPush = await git(['push', 'origin', 'master'], roDir);
  assert.notEqual(roPush.code, 0);
  assert.match(roPush.out, /403/);
  // Nothing of either refused push reached the source.
  const files = await git(['ls-remote', remote('alice', aliceKey, 'alice/Closed')]);
  assert.equal(files.code, 0);
  await ok(['fetch', 'origin'], roDir);
  assert.equal((await ok(['rev-list', '--count', 'origin/master'], roDir)).trim(), '1');
});

test('credentials: none gets a Basic challenge (git asks, here it cannot); a wrong key or another user name is refused', { skip: !GIT_PRESENT && 'git is not installed' }, async () => {
  const res = await fetch(`${s.node}/git/alice/Greeter.git/info/refs?service=git-upload-pack`);
  assert.equal(res.status, 401);
  assert.match(res.headers.get('www-authenticate') ?? '', /^Basic realm="algohost"/);
  const u = new URL(s.node);
  const anonymous = await git(['clone', `http://${u.host}/git/alice/Greeter.git`, 'anon']);
  assert.notEqual(anonymous.code, 0);
  assert.match(anonymous.out, /could not read Username|Authentication failed/);
  const wrong = await git(['clone', remote('alice', `sim${'x'.repeat(25)}`, 'alice/Greeter'), 'wrong']);
  assert.notEqual(wrong.code, 0);
  assert.match(wrong.out, /Authentication failed/);
  const mismatch = await fetch(`${s.node}/git/alice/Greeter.git/info/refs?service=git-upload-pack`, { headers: { authorization: `Basic ${Buffer.from(`bob:${aliceKey}`).toString('base64')}` } });
  assert.equal(mismatch.status, 401);
  assert.match((await json(mismatch)).error.message, /belongs to alice, not bob/);
  // The dumb protocol and other paths are not served.
  const dumb = await fetch(`${s.node}/git/alice/Greeter.git/HEAD`, { headers: { authorization: `Basic ${Buffer.from(`alice:${aliceKey}`).toString('base64')}` } });
  assert.equal(dumb.status, 404);
});

test('deleting an algorithm deletes its repository', { skip: !GIT_PRESENT && 'git is not installed' }, async () => {
  await createAlgorithm(alice, 'alice', 'Gone', { language: 'javascript' });
  await ok(['clone', remote('alice', aliceKey, 'alice/Gone'), 'gone']);
  const algo = await s.services.algorithms.byId(Number((await json(await alice("/v1/algorithms/alice/Gone"))).id));
  assert.ok(algo);
  const repo = path.join(s.home, 'algorithms', String(algo.id), 'repo.git');
  assert.ok(fs.existsSync(repo));
  // Through the node that serves /git/ (a deletion through another removes that node's copy; this
  // one's goes at its next sweep, which cluster.test.ts checks on a worker node).
  assert.equal((await api(s.node, aliceKey)('/v1/algorithms/alice/Gone', { method: 'DELETE' })).status, 204);
  assert.equal(fs.existsSync(repo), false);
  const again = await git(['clone', remote('alice', aliceKey, 'alice/Gone'), 'gone-again']);
  assert.notEqual(again.code, 0);
});

test('the git the server runs reads no config from the temp directory (another account may write a .gitconfig there)', { skip: !GIT_PRESENT && 'git is not installed' }, async () => {
  // A temp directory as a shared /tmp would be: a .gitconfig (and its XDG twin) whose hooks and
  // fsmonitor would run as the server, each leaving a mark.
  const tmp = path.join(work, 'shared-tmp');
  const marks = path.join(work, 'marks');
  const hooks = path.join(tmp, 'hooks');
  fs.mkdirSync(hooks, { recursive: true });
  fs.mkdirSync(marks);
  const mark = (name: string) => `#!/bin/sh\necho "$0 $*" >> ${JSON.stringify(path.join(marks, name))}\nexit 0\n`;
  for (const hook of ['reference-transaction', 'pre-receive', 'update', 'post-receive', 'post-update', 'pre-commit', 'post-commit']) {
    fs.writeFileSync(path.join(hooks, hook), mark(hook), { mode: 0o755 });
  }
  fs.writeFileSync(path.join(tmp, 'fsmonitor'), mark('fsmonitor'), { mode: 0o755 });
  const config = `[core]\n\thooksPath = ${hooks}\n\tfsmonitor = ${path.join(tmp, 'fsmonitor')}\n`;
  fs.writeFileSync(path.join(tmp, '.gitconfig'), config);
  fs.mkdirSync(path.join(tmp, '.config', 'git'), { recursive: true });
  fs.writeFileSync(path.join(tmp, '.config', 'git', 'config'), config);
  // os.tmpdir() reads TMPDIR when called: the server's git runs below all see this directory.
  const saved = process.env.TMPDIR;
  process.env.TMPDIR = tmp;
  let failed: unknown;
  try {
    // A clone commits the template (init, config, add, commit-tree, update-ref); an upload is
    // committed at the next fetch; a push goes through http-backend, receive-pack and the hook.
    await createAlgorithm(alice, 'alice', 'Configless', { language: 'python3' });
    await ok(['clone', remote('alice', aliceKey, 'alice/Configless'), 'configless']);
    const dir = path.join(work, 'configless');
    assert.equal((await upload(alice, 'alice', 'Configless', { 'src/Configless.py': 'def apply(input):\n    return "uploaded"\n' })).status, 200);
    await ok(['pull', '--ff-only'], dir);
    fs.writeFileSync(path.join(dir, 'src/Configless.py'), 'def apply(input):\n    return "pushed"\n');
    await ok(['commit', '-qam', 'pushed'], dir);
    assert.match(await ok(['push', 'origin', 'master'], dir), /remote: algohost: build [0-9a-f]{40} succeeded/);
  } catch (err) {
    failed = err;
  } finally {
    if (saved === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = saved;
  }
  // Checked first: a config that ran may also have made the git above fail.
  assert.deepEqual(fs.readdirSync(marks), [], 'no hook or fsmonitor of the temp directory\'s .gitconfig ran');
  if (failed) throw failed;
});

/** Pids of git http-backend processes (this file is the only one that runs them). */
function backends(): number[] {
  const pids: number[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes('git-http-backend')) pids.push(Number(entry));
    } catch {
      /* gone */
    }
  }
  return pids;
}

test('a push whose client goes away mid-request leaves no backend behind', { skip: !GIT_PRESENT && 'git is not installed' }, async () => {
  const http = await import('node:http');
  const u = new URL(s.node);
  const req = http.request({
    host: u.hostname,
    port: u.port,
    method: 'POST',
    path: '/git/alice/Greeter.git/git-receive-pack',
    headers: { authorization: `Basic ${Buffer.from(`alice:${aliceKey}`).toString('base64')}`, 'content-type': 'application/x-git-receive-pack-request' },
  });
  req.on('error', () => undefined);
  // A pkt-line that announces more than is sent: receive-pack waits for the rest.
  req.write(`0098${'0'.repeat(40)}`);
  const deadline = Date.now() + 10_000;
  while (backends().length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  assert.ok(backends().length > 0, 'the backend started and waits for the rest of the body');
  req.destroy();
  const gone = Date.now() + 10_000;
  while (backends().length > 0 && Date.now() < gone) await new Promise((r) => setTimeout(r, 20));
  assert.deepEqual(backends(), [], 'the backend was stopped when its client went away');
});
