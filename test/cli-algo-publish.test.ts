/**
 * `algo init`, `algo publish`, `algo versions` and `algo run` end to end: `bin/algo.mjs` as a
 * child process with a temporary HOME against a real server that builds and runs algorithms
 * in its sandboxes. For each language: the template is made, published, called (also with the
 * curl line publish prints), then a source of our own is published with --major and called
 * with each input and output option. Progress on a terminal is checked in-process (main() with
 * fake TTY streams).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import { startServer, tempHome, type TestServer } from './helpers/server.ts';
import { childEnv, within } from './helpers/process.ts';
import { main } from '../src/cli/algo/main.ts';

const BIN = path.resolve(import.meta.dirname, '..', 'bin', 'algo.mjs');

interface Ran {
  code: number | null;
  stdout: string;
  bytes: Buffer;
  stderr: string;
}

let s: TestServer;
let aliceKey: string;
let home: string;

/** Runs `algo ARGS` in HOME (also the working directory), `input` on stdin. */
async function algo(args: string[], options: { input?: string | Buffer; env?: Record<string, string> } = {}): Promise<Ran> {
  const env = childEnv({ HOME: home, ...options.env });
  for (const k of Object.keys(env)) if (k.startsWith('ALGORITHMIA_')) delete env[k];
  const child = spawn(process.execPath, [BIN, ...args], { env, cwd: home, stdio: ['pipe', 'pipe', 'pipe'] });
  const out: Buffer[] = [];
  let stderr = '';
  child.stdout.on('data', (b: Buffer) => out.push(b));
  child.stderr.setEncoding('utf8').on('data', (t: string) => (stderr += t));
  child.stdin.end(options.input ?? '');
  const code = await within(new Promise<number | null>((resolve) => child.once('close', resolve)), 120_000, `algo ${args.join(' ')} did not finish`).finally(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  const bytes = Buffer.concat(out);
  return { code, stdout: bytes.toString('utf8'), bytes, stderr };
}

/** `algo ARGS` must succeed; answers what it printed. */
async function ok(args: string[], options: { input?: string | Buffer } = {}): Promise<Ran> {
  const r = await algo(args, options);
  assert.equal(r.code, 0, `algo ${args.join(' ')} exited ${r.code}: ${r.stderr}`);
  return r;
}

const at = (...p: string[]) => path.join(home, ...p);

before(async () => {
  s = await startServer();
  aliceKey = await s.user('alice');
  home = tempHome('algo-cli-publish-');
  await ok(['auth', '--api-server', s.url, '--api-key', aliceKey]);
});

after(async () => {
  await s.close();
  fs.rmSync(home, { recursive: true, force: true });
});

type Lang = 'python3' | 'javascript' | 'typescript';

const ENTRY: Record<Lang, (name: string) => string> = {
  python3: (n) => `src/${n}.py`,
  javascript: (n) => `src/${n}.js`,
  typescript: () => 'src/index.ts',
};

/** Our own source per language, the same behaviour in each: bytes reversed, JSON described, "boom" fails, text greeted after a line on stdout. */
const CUSTOM: Record<Lang, string> = {
  python3: `import time


def apply(input):
    if isinstance(input, (bytes, bytearray)):
        return bytes(input[::-1])
    if isinstance(input, (dict, list)):
        return {"type": type(input).__name__, "input": input}
    if input == "boom":
        raise ValueError("boom")
    if input == "sleep":
        time.sleep(10)
    print("debug: got " + str(input))
    return "hello " + str(input)
`,
  javascript: `exports.apply = function (input, cb) {
  if (Buffer.isBuffer(input)) return cb(null, Buffer.from(input).reverse());
  if (input !== null && typeof input === 'object') return cb(null, { type: Array.isArray(input) ? 'list' : 'dict', input: input });
  if (input === 'boom') return cb(new Error('boom'));
  console.log('debug: got ' + input);
  cb(null, 'hello ' + input);
};
`,
  typescript: `export async function apply(input: unknown): Promise<unknown> {
  if (input instanceof Uint8Array) return Buffer.from(input).reverse();
  if (input !== null && typeof input === 'object') return { type: Array.isArray(input) ? 'list' : 'dict', input };
  if (input === 'boom') throw new Error('boom');
  console.log('debug: got ' + String(input));
  return 'hello ' + String(input);
}
`,
};

const pretty = (v: unknown) => `${JSON.stringify(v, null, 2)}\n`;

/** init → publish → run of the template, then our source published --major and run with every option. */
async function lifecycle(lang: Lang, options: { withOwner: boolean; jsonPublish: boolean }): Promise<{ name: string; dir: string }> {
  const name = `Greeter_${lang}`;
  const dir = at(name);
  const ref = `alice/${name}`;

  // init: the template, a test input, a README and the manifest.
  const init = await ok(['init', options.withOwner ? ref : name, '--language', lang]);
  assert.match(init.stdout, new RegExp(`^Created ${name}/ \\(${lang}\\): `));
  assert.deepEqual(JSON.parse(fs.readFileSync(path.join(dir, 'algohost.json'), 'utf8')), {
    name, language: lang, ...(options.withOwner ? { owner: 'alice' } : {}), test_input: 'input.json',
  });
  assert.equal(fs.readFileSync(path.join(dir, 'input.json'), 'utf8'), '"world"\n');
  assert.match(fs.readFileSync(path.join(dir, ENTRY[lang](name)), 'utf8'), /hello/);
  assert.match(fs.readFileSync(path.join(dir, 'README.md'), 'utf8'), new RegExp(`algo run ${options.withOwner ? 'alice' : '<you>'}/${name} -D input.json`));
  // node_modules and .git stay home: a file there that would break the build is never uploaded.
  fs.mkdirSync(path.join(dir, 'node_modules', 'junk'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'node_modules', 'junk', 'index.js'), 'x'.repeat(1000));
  fs.mkdirSync(path.join(dir, '.git'));
  fs.writeFileSync(path.join(dir, '.git', 'HEAD'), 'ref: refs/heads/main\n');

  // publish: created (owner = the key's user, or the manifest's), uploaded, built, published.
  const first = await ok(['publish', name]);
  assert.match(first.stdout, new RegExp(`^Published ${ref} 0\\.1\\.0 \\(public\\)\\n`));
  assert.match(first.stderr, new RegExp(`Created ${ref} \\(${lang}\\)`));
  const files = Number(/Uploaded (\d+) files/.exec(first.stderr)?.[1]);
  assert.equal(files, 5, first.stderr);
  assert.match(first.stderr, /build succeeded/, 'the build log is shown');
  assert.ok(!first.stderr.includes('\r') && !first.stderr.includes('\x1b'), 'no progress bar when stderr is not a terminal');

  // The curl line it prints calls the version.
  const curl = /^ {2}(curl .*)$/m.exec(first.stdout)?.[1];
  assert.ok(curl, first.stdout);
  // (spawned, not spawnSync: the server runs in this process and must keep answering)
  const sh = spawn('/bin/sh', ['-c', `${curl} -sS`], { env: { PATH: process.env.PATH, ALGORITHMIA_API_KEY: aliceKey }, stdio: ['ignore', 'pipe', 'inherit'] });
  let called = '';
  sh.stdout.setEncoding('utf8').on('data', (t: string) => (called += t));
  assert.equal(await within(new Promise((resolve) => sh.once('close', resolve)), 60_000, 'curl did not finish'), 0);
  assert.equal(JSON.parse(called).result, 'hello world');

  assert.equal((await ok(['run', ref, '-D', `${name}/input.json`])).stdout, 'hello world\n');
  assert.equal((await ok(['run', `${ref}/0.1.0`, '-d', 'you'])).stdout, 'hello you\n');

  // Our source, published again with --major.
  fs.writeFileSync(path.join(dir, ENTRY[lang](name)), CUSTOM[lang]);
  if (options.jsonPublish) {
    const second = await ok(['--json', 'publish', name, '--major', '--notes', 'our own']);
    const out = JSON.parse(second.stdout) as { algorithm: string; version: string; created: boolean; curl: string; build_log: string };
    assert.equal(out.algorithm, ref);
    assert.equal(out.version, '1.0.0');
    assert.equal(out.created, false);
    assert.match(out.curl, new RegExp(`/v1/algo/${ref}/1\\.0\\.0$`));
    assert.match(out.build_log, /build succeeded/);
    assert.ok(!second.stderr.includes('build succeeded'), 'with --json the log is in the JSON, not on stderr');
  } else {
    const second = await ok(['publish', name, '--major', '--notes', 'our own']);
    assert.match(second.stdout, new RegExp(`^Published ${ref} 1\\.0\\.0 \\(public\\)\\n`));
    assert.ok(!second.stderr.includes('Created'), 'the algorithm existed');
  }
  const versions = JSON.parse((await ok(['--json', 'versions', ref])).stdout) as Array<{ version_info: { semantic_version: string; release_notes: string } }>;
  assert.deepEqual(versions.map((v) => [v.version_info.semantic_version, v.version_info.release_notes]), [['1.0.0', 'our own'], ['0.1.0', '']]);
  assert.match((await ok(['versions', ref])).stdout, /^VERSION +PUBLISHED +CALLABLE +BUILD +NOTES\n1\.0\.0 +\S+ +public +[0-9a-f]{12} +our own\n0\.1\.0 +\S+ +public +[0-9a-f]{12}\n$/);

  // Text, with and without the algorithm's stdout.
  assert.equal((await ok(['run', ref, '-t', 'hi'])).stdout, 'hello hi\n');
  assert.equal((await ok(['run', ref, '-t', 'hi', '--debug'])).stdout, 'debug: got hi\nhello hi\n');
  // JSON, indented.
  assert.equal((await ok(['run', ref, '-j', '{"a":[1,2]}'])).stdout, pretty({ type: 'dict', input: { a: [1, 2] } }));
  // Bytes as given, raw on stdout, or into a file with -o.
  assert.deepEqual((await ok(['run', ref, '-b', 'abc'])).bytes, Buffer.from('cba'));
  const o = await ok(['run', ref, '-b', 'abc', '-o', 'out.bin']);
  assert.equal(o.stdout, '');
  assert.deepEqual(fs.readFileSync(at('out.bin')), Buffer.from('cba'));
  // The algorithm's error: exit 1 with its type and message.
  const boom = await algo(['run', ref, '-t', 'boom']);
  assert.equal(boom.code, 1);
  assert.match(boom.stderr, /^algo run: AlgorithmError: boom\n/);
  assert.equal(boom.stdout, '');
  return { name, dir };
}

test('python3: init, publish, run the template; our source with --major; every input and output option', async () => {
  const { name, dir } = await lifecycle('python3', { withOwner: false, jsonPublish: false });
  const ref = `alice/${name}`;

  // -d detects: JSON when it parses (a JSON string is the string), else text.
  assert.equal((await ok(['run', ref, '-d', '"q"'])).stdout, 'hello q\n');
  assert.equal((await ok(['run', ref, '-t', '"q"'])).stdout, 'hello "q"\n');
  assert.equal((await ok(['run', ref, '-d', 'plain words'])).stdout, 'hello plain words\n');
  assert.equal((await ok(['run', ref, '-d', '[1,2]'])).stdout, pretty({ type: 'list', input: [1, 2] }));
  // Files: -D detects bytes that are not UTF-8; -B, -J, -T; "-" is stdin.
  const blob = Buffer.from([0x00, 0xff, 0x10, 0x80]);
  fs.writeFileSync(at('blob.bin'), blob);
  fs.writeFileSync(at('doc.json'), '{"k": "v"}\n');
  assert.deepEqual((await ok(['run', ref, '-D', 'blob.bin'])).bytes, Buffer.from(blob).reverse());
  assert.deepEqual((await ok(['run', ref, '-B', '-'], { input: blob })).bytes, Buffer.from(blob).reverse());
  assert.equal((await ok(['run', ref, '-D', 'doc.json'])).stdout, pretty({ type: 'dict', input: { k: 'v' } }));
  assert.equal((await ok(['run', ref, '-T', 'doc.json'])).stdout, 'hello {"k": "v"}\n');
  assert.equal((await ok(['run', ref, '--json-file', '-'], { input: '["x"]' })).stdout, pretty({ type: 'list', input: ['x'] }));
  assert.equal((await ok(['run', ref, '-T', '-'], { input: 'from stdin' })).stdout, 'hello from stdin\n');
  const notText = await algo(['run', ref, '-T', 'blob.bin']);
  assert.equal(notText.code, 2);
  assert.match(notText.stderr, /-T: the input is not UTF-8 text; send bytes with -b\/-B/);
  // -o with a JSON result: the indented JSON.
  await ok(['run', ref, '-j', '{"n":1}', '-o', 'out.json']);
  assert.equal(fs.readFileSync(at('out.json'), 'utf8'), pretty({ type: 'dict', input: { n: 1 } }));

  // --json: the whole envelope, binary in base64; an error's envelope too, still exit 1.
  const env = JSON.parse((await ok(['--json', 'run', ref, '-b', 'abc', '--debug'])).stdout);
  assert.deepEqual(Object.keys(env).sort(), ['metadata', 'result']);
  assert.equal(env.result, Buffer.from('cba').toString('base64'));
  assert.equal(env.metadata.content_type, 'binary');
  assert.equal(typeof env.metadata.duration, 'number');
  const failed = await algo(['--json', 'run', ref, '-t', 'boom']);
  assert.equal(failed.code, 1);
  const error = JSON.parse(failed.stdout).error;
  assert.equal(error.error_type, 'AlgorithmError');
  assert.equal(error.message, 'boom');
  assert.match(error.stacktrace, /ValueError: boom/);

  // --timeout: the call is cut at 1 s (the algorithm sleeps 10).
  const startedAt = Date.now();
  const slow = await algo(['run', ref, '-t', 'sleep', '--timeout', '1']);
  assert.equal(slow.code, 1);
  assert.match(slow.stderr, /^algo run: TimeoutError: /);
  assert.ok(Date.now() - startedAt < 9000, 'cut short, not after the algorithm finished');

  // Not its owner: no stdout for --debug, said so.
  const bob = await s.user('bob');
  const bobDebug = await algo(['run', `${ref}/1.0.0`, '-t', 'x', '--debug'], { env: { ALGOHOST_API_KEY: bob } });
  assert.equal(bobDebug.code, 0, bobDebug.stderr);
  assert.equal(bobDebug.stdout, 'hello x\n');
  assert.match(bobDebug.stderr, /no stdout: only the algorithm's owner sees it/);

  // A build that fails: its log, exit 1, nothing published.
  const entry = path.join(dir, `src/${name}.py`);
  fs.writeFileSync(entry, 'def apply(:\n');
  const broken = await algo(['publish', name]);
  assert.equal(broken.code, 1);
  assert.match(broken.stderr, /SyntaxError/);
  assert.match(broken.stderr, /algo publish: the build of alice\/Greeter_python3 failed \(log above\); nothing was published\n$/);
  // Publishing an unchanged build again is refused with the server's reason.
  fs.writeFileSync(entry, CUSTOM.python3);
  const same = await algo(['publish', name]);
  assert.equal(same.code, 1);
  assert.match(same.stderr, /already published as version 1\.0\.0/);

  // --revision --private: 1.0.1 is private, callable by its owner only; 1.0.0 stays public,
  // and the CLI says so.
  fs.writeFileSync(entry, `${CUSTOM.python3}# private\n`);
  const priv = await ok(['publish', name, '--revision', '--private']);
  assert.match(priv.stdout, /^Published alice\/Greeter_python3 1\.0\.1 \(private\)\n/);
  assert.match(priv.stdout, /\nOnly you can call 1\.0\.1 \(as alice\/Greeter_python3\/1\.0\.1 or alice\/Greeter_python3\/latestPrivate\); others, and alice\/Greeter_python3 without a version, still get 1\.0\.0, the latest public version\.\n/);
  const plainAsBob = await algo(['run', ref, '-t', 'you'], { env: { ALGOHOST_API_KEY: bob } });
  assert.equal(plainAsBob.code, 0, plainAsBob.stderr);
  assert.equal(plainAsBob.stdout, 'hello you\n');
  assert.match((await ok(['versions', ref])).stdout, /\n1\.0\.1 +\S+ +private /);
  assert.equal((await ok(['run', `${ref}/1.0.1`, '-t', 'me'])).stdout, 'hello me\n');
  const asBob = await algo(['run', `${ref}/1.0.1`, '-t', 'me'], { env: { ALGOHOST_API_KEY: bob } });
  assert.equal(asBob.code, 1);
  assert.match(asBob.stderr, /EntityNotFoundError/);
});

test('run: an input the algorithm does not take gets the flag that sends what it does', async () => {
  const dir = at('TextOnly');
  fs.mkdirSync(path.join(dir, 'src'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'src/TextOnly.js'), `exports.input_types = ['text'];\nexports.apply = function (input, cb) { cb(null, 'got ' + input); };\n`);
  await ok(['publish', dir, '--name', 'TextOnly', '--language', 'javascript']);
  // -d guesses: 17 parses as JSON, which this algorithm refuses.
  const guessed = await algo(['run', 'alice/TextOnly', '-d', '17']);
  assert.equal(guessed.code, 1);
  // The error, then the hint that explains it.
  assert.match(guessed.stderr, /^algo run: InputError: apply\(\) functions do not match input data: the input is a JSON number; this algorithm accepts text[^\n]*\nhint: -d sent the input as JSON \(it parses as JSON\), and the algorithm takes text: send it with -t TEXT or -T FILE\n$/);
  assert.equal((await ok(['run', 'alice/TextOnly', '-t', '17'])).stdout, 'got 17\n');
  const bytes = await algo(['run', 'alice/TextOnly', '-b', 'x']);
  assert.equal(bytes.code, 1);
  assert.match(bytes.stderr, /hint: -b sends binary data, and the algorithm takes text: send it with -t TEXT or -T FILE\n/);
  // --json: the envelope only, no hint mixed in.
  const asJson = await algo(['--json', 'run', 'alice/TextOnly', '-d', '17']);
  assert.equal(asJson.code, 1);
  assert.doesNotMatch(asJson.stderr + asJson.stdout, /hint:/);
});

test('javascript: init, publish, run the template; our source with --major', async () => {
  await lifecycle('javascript', { withOwner: false, jsonPublish: false });
});

test('typescript: init with an owner, publish, run the template; our source with --major (--json)', async () => {
  await lifecycle('typescript', { withOwner: true, jsonPublish: true });
});

test('init and publish refuse what they cannot do: usage 2, the rest 1', async () => {
  const cases: Array<[string[], number, RegExp]> = [
    [['init'], 2, /name the algorithm/],
    [['init', 'Nolang'], 2, /--language is one of python3, javascript, typescript/],
    [['init', 'X', '--language', 'cobol'], 2, /--language is one of python3, javascript, typescript \(got "cobol"\)/],
    [['init', '9lives', '--language', 'python3'], 2, /"9lives" is not an algorithm name/],
    [['init', 'a/b/c', '--language', 'python3'], 2, /is not \[owner\/\]name/],
    [['publish', '--major', '--minor'], 2, /choose one of --major, --minor/],
    [['publish', '--public', '--private'], 2, /choose --public or --private/],
    [['publish', 'nowhere'], 1, /nowhere is not a directory/],
    [['publish', 'empty'], 1, /no algohost\.json in .*empty: run `algo init`, or pass --name and --language/],
    [['publish', 'empty', '--name', 'X'], 2, /"language" in algohost\.json is one of python3/],
    [['versions'], 2, /which algorithm\?/],
    [['versions', 'alice/X/1.0.0'], 2, /without a version: alice\/X/],
  ];
  fs.mkdirSync(at('empty'), { recursive: true });
  for (const [args, code, pattern] of cases) {
    const r = await algo(args);
    assert.equal(r.code, code, `algo ${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, pattern, `algo ${args.join(' ')}`);
  }
  fs.mkdirSync(at('taken'));
  fs.writeFileSync(at('taken', 'file'), '');
  const taken = await algo(['init', 'Taken', '--language', 'python3', '--dir', 'taken']);
  assert.equal(taken.code, 1);
  assert.match(taken.stderr, /taken already exists and is not an empty directory/);
  assert.deepEqual(fs.readdirSync(at('taken')), ['file']);
});

test('publish on a terminal shows upload and build progress on stderr; --owner names the owner', async () => {
  await ok(['init', 'Progress', '--language', 'javascript']);
  const stdin = Object.assign(new PassThrough(), { isTTY: true });
  const stdout = Object.assign(new PassThrough(), { isTTY: true });
  const stderr = Object.assign(new PassThrough(), { isTTY: true });
  let out = '';
  let err = '';
  stdout.setEncoding('utf8').on('data', (t: string) => (out += t));
  stderr.setEncoding('utf8').on('data', (t: string) => (err += t));
  const code = await main(['publish', at('Progress'), '--owner', 'alice'], { HOME: home }, { stdin, stdout, stderr });
  assert.equal(code, 0, err);
  const CLEAR = '\r\x1b[2K';
  assert.ok(err.includes(`${CLEAR}uploading alice/Progress`), err);
  assert.ok(err.includes(`${CLEAR}building alice/Progress`), err);
  assert.match(out, /^Published alice\/Progress 0\.1\.0 \(public\)\n/);
  assert.ok(!out.includes('\x1b'), 'stdout has no progress');

  // Another owner than the key's: the server refuses, exit 1.
  const other = await algo(['publish', 'Progress', '--owner', 'bob']);
  assert.equal(other.code, 1);
  assert.match(other.stderr, /^algo publish: only bob can manage algorithms under bob\n$/);
});

test('publish follows a running build\'s log: its first step shows while the build still runs', async () => {
  await ok(['init', 'SlowJs', '--language', 'javascript']);
  const dir = at('SlowJs');
  // An install script that keeps the build busy for 2.5 s after npm's step has started.
  fs.writeFileSync(
    path.join(dir, 'package.json'),
    JSON.stringify({ name: 'slowjs', version: '1.0.0', dependencies: { shout: 'file:./vendor/shout' }, scripts: { postinstall: 'node -e "setTimeout(() => {}, 2500)"' } }),
  );
  fs.mkdirSync(path.join(dir, 'vendor', 'shout'), { recursive: true });
  fs.writeFileSync(path.join(dir, 'vendor', 'shout', 'package.json'), JSON.stringify({ name: 'shout', version: '1.0.0', main: 'index.js' }));
  fs.writeFileSync(path.join(dir, 'vendor', 'shout', 'index.js'), 'module.exports = (s) => String(s);\n');
  const env = childEnv({ HOME: home });
  const child = spawn(process.execPath, [BIN, 'publish', 'SlowJs'], { env, cwd: home, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  let stepShownAt: number | undefined;
  child.stdout.resume();
  child.stderr.setEncoding('utf8').on('data', (t: string) => {
    stderr += t;
    if (stepShownAt === undefined && stderr.includes('$ npm install')) stepShownAt = Date.now();
  });
  const code = await within(new Promise<number | null>((resolve) => child.once('close', resolve)), 120_000, 'publish did not finish');
  const exitedAt = Date.now();
  assert.equal(code, 0, stderr);
  assert.ok(stepShownAt !== undefined, `no build step on stderr:\n${stderr}`);
  assert.ok(exitedAt - stepShownAt >= 1000, `the step appeared only ${exitedAt - stepShownAt} ms before the end: the log was not followed\n${stderr}`);
  assert.equal(stderr.split('$ npm install').length, 2, 'each line of the log is shown once');
});

/** `git ARGS` in `cwd`: no prompts, no user config. */
function git(args: string[], cwd: string): Promise<{ code: number; out: string }> {
  const env = { PATH: '/usr/bin:/bin', HOME: home, GIT_TERMINAL_PROMPT: '0', GIT_CONFIG_NOSYSTEM: '1', GIT_AUTHOR_NAME: 'Alice', GIT_AUTHOR_EMAIL: 'alice@example.com', GIT_COMMITTER_NAME: 'Alice', GIT_COMMITTER_EMAIL: 'alice@example.com' };
  return new Promise((resolve) => {
    const child = spawn('/usr/bin/git', args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (t: string) => (out += t));
    child.stderr.setEncoding('utf8').on('data', (t: string) => (out += t));
    child.once('close', (code) => resolve({ code: code ?? 1, out }));
  });
}

test('after a git push (which builds), publish --build latest publishes that build as it stands: nothing uploaded or built again', { skip: !fs.existsSync('/usr/lib/git-core/git-http-backend') && 'git is not installed' }, async () => {
  await ok(['init', 'Pushed', '--language', 'javascript']);
  await ok(['publish', 'Pushed']);
  const u = new URL(s.node);
  const cloned = await git(['clone', `http://alice:${aliceKey}@${u.host}/git/alice/Pushed.git`, 'pushed-clone'], home);
  assert.equal(cloned.code, 0, cloned.out);
  const clone = at('pushed-clone');
  fs.writeFileSync(path.join(clone, 'src/Pushed.js'), "exports.apply = function (input, cb) { cb(null, 'pushed ' + input); };\n");
  assert.equal((await git(['commit', '-qam', 'say pushed'], clone)).code, 0);
  const pushed = await git(['push', 'origin', 'HEAD'], clone);
  assert.equal(pushed.code, 0, pushed.out);
  const hash = /remote: algohost: build ([0-9a-f]{40}) succeeded/.exec(pushed.out)?.[1];
  assert.ok(hash, pushed.out);

  // The clone is the directory to publish from: its manifest came with the source.
  const r = await ok(['publish', 'pushed-clone', '--build', 'latest']);
  assert.doesNotMatch(r.stderr, /Uploaded|build succeeded/, 'nothing uploaded or built again');
  assert.match(r.stderr, new RegExp(`Published the latest build, ${hash.slice(0, 12)}, as it stands`));
  assert.match(r.stdout, /^Published alice\/Pushed 0\.2\.0 \(public\)\n/);
  const asJson = JSON.parse((await ok(['--json', 'versions', 'alice/Pushed'])).stdout) as { version_info: { semantic_version: string; git_hash: string } }[];
  assert.equal(asJson.find((v) => v.version_info.semantic_version === '0.2.0')?.version_info.git_hash, hash);
  assert.equal((await ok(['run', 'alice/Pushed/0.2.0', '-t', 'x'])).stdout, 'pushed x\n');

  // Twice: the server says it is published already. An algorithm that does not exist has no build.
  const again = await algo(['publish', 'pushed-clone', '--build', 'latest']);
  assert.equal(again.code, 1);
  assert.match(again.stderr, /already published as version 0\.2\.0/);
  const none = await algo(['publish', 'pushed-clone', '--name', 'NeverMade', '--build', 'latest']);
  assert.equal(none.code, 1);
  assert.match(none.stderr, /^algo publish: alice\/NeverMade does not exist, so it has no build: publish pushed-clone without --build to upload and build it\n$/);
  assert.equal((await algo(['publish', 'pushed-clone', '--build', 'abc123'])).code, 2);
});

test('a summary for the marketplace card: asked by init at a terminal, given by --summary, carried by the manifest to publish', async () => {
  const algohost = (p: string) => fetch(`${s.url}${p}`, { headers: { authorization: `Simple ${aliceKey}` } }).then((r) => r.json() as Promise<{ details: { summary?: string } }>);
  // At a terminal, init asks; the answer goes into the manifest, and publish onto the card.
  const stdin = Object.assign(new PassThrough(), { isTTY: true, setRawMode: () => stdin });
  const stdout = Object.assign(new PassThrough(), { isTTY: true });
  const stderr = Object.assign(new PassThrough(), { isTTY: true });
  let err = '';
  stderr.setEncoding('utf8').on('data', (t: string) => (err += t));
  stdout.resume();
  stdin.write('Counts the words of a text\n');
  const code = await main(['init', 'Asked', '--language', 'javascript', '--dir', at('Asked')], { HOME: home }, { stdin, stdout, stderr });
  assert.equal(code, 0, err);
  assert.match(err, /Summary of Asked, one line for its marketplace card \(Enter to skip\): /);
  assert.equal(JSON.parse(fs.readFileSync(at('Asked', 'algohost.json'), 'utf8')).summary, 'Counts the words of a text');
  await ok(['publish', 'Asked']);
  assert.equal((await algohost('/v1/algorithms/alice/Asked')).details.summary, 'Counts the words of a text');

  // Not at a terminal (a script), nothing is asked; --summary gives it, and changes it later.
  await ok(['init', 'Given', '--language', 'python3', '--summary', 'Sorts things']);
  assert.equal(JSON.parse(fs.readFileSync(at('Given', 'algohost.json'), 'utf8')).summary, 'Sorts things');
  await ok(['publish', 'Given']);
  assert.equal((await algohost('/v1/algorithms/alice/Given')).details.summary, 'Sorts things');
  fs.appendFileSync(at('Given', 'README.md'), '\nStably.\n');
  const changed = await ok(['publish', 'Given', '--summary', 'Sorts things, stably']);
  assert.match(changed.stderr, /alice\/Given: summary set to "Sorts things, stably"/);
  assert.equal((await algohost('/v1/algorithms/alice/Given')).details.summary, 'Sorts things, stably');
  const multi = await algo(['init', 'Bad', '--language', 'python3', '--summary', 'two\nlines']);
  assert.equal(multi.code, 2);
  assert.match(multi.stderr, /--summary is one line of 200 characters at most/);
});
