/**
 * The `algo` command's account commands end to end: `bin/algo.mjs` as a child process with a
 * temporary HOME against a real server. auth (prompts answered on stdin, the profile file's
 * content and mode), keys, connectors, exit codes and the messages a person acts on. A few
 * cases need a terminal (no echo of the key): those call main() in-process with fake TTY
 * streams. init, publish and run are in cli-algo-publish.test.ts.
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
const KEY = /^sim[0-9A-Za-z]{25}$/;

interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `algo ARGS` with HOME=home, `input` on stdin (closed at once without it). */
async function algo(home: string, args: string[], options: { input?: string; env?: Record<string, string> } = {}): Promise<Ran> {
  const env = childEnv({ HOME: home, ...options.env });
  for (const k of Object.keys(env)) if (k.startsWith('ALGORITHMIA_')) delete env[k];
  const child = spawn(process.execPath, [BIN, ...args], { env, cwd: home, stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s));
  child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
  child.stdin.end(options.input ?? '');
  const code = await within(new Promise<number | null>((resolve) => child.once('close', resolve)), 60_000, `algo ${args.join(' ')} did not finish`).finally(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  return { code, stdout, stderr };
}

/** A fake terminal for main() in-process: answers typed one at a time, after their question shows. */
function terminal(home: string) {
  const stdin = Object.assign(new PassThrough(), { isTTY: true });
  const stdout = Object.assign(new PassThrough(), { isTTY: true });
  const stderr = Object.assign(new PassThrough(), { isTTY: true });
  let out = '';
  let err = '';
  stdout.setEncoding('utf8').on('data', (s: string) => (out += s));
  stderr.setEncoding('utf8').on('data', (s: string) => (err += s));
  return {
    io: { stdin, stdout, stderr },
    env: { HOME: home },
    out: () => out,
    err: () => err,
    /** Types `text` and Enter once stderr shows `question` (for the `nth` time). */
    async answer(question: string, text: string, nth = 1): Promise<void> {
      await within((async () => {
        while (err.split(question).length - 1 < nth) await new Promise((r) => setTimeout(r, 10));
      })(), 10_000, `the question "${question}" was not asked`);
      stdin.write(`${text}\r`);
    },
  };
}

let s: TestServer;
let aliceKey: string;
let bobKey: string;
const homes: string[] = [];

function home(): string {
  const h = tempHome('algo-cli-home-');
  homes.push(h);
  return h;
}

const configFile = (h: string) => path.join(h, '.algohost', 'config');

/** A HOME whose default profile is alice's. */
async function aliceHome(): Promise<string> {
  const h = home();
  const r = await algo(h, ['auth', '--api-server', s.url, '--api-key', aliceKey]);
  assert.equal(r.code, 0, r.stderr);
  return h;
}

before(async () => {
  s = await startServer();
  aliceKey = await s.user('alice');
  bobKey = await s.user('bob');
});

after(async () => {
  await s.close();
  for (const h of homes) fs.rmSync(h, { recursive: true, force: true });
});

test('auth: answers piped on stdin; the key is checked and saved in a 0600 TOML profile', async () => {
  const h = home();
  const r = await algo(h, ['auth'], { input: `${s.url}\n${aliceKey}\n` });
  assert.equal(r.code, 0, r.stderr);
  // The default address is shown, the questions go to stderr, the key is never printed.
  assert.match(r.stderr, /API address \[http:\/\/127\.0\.0\.1:8080\]: /);
  assert.match(r.stderr, /API key: /);
  assert.ok(!r.stdout.includes(aliceKey) && !r.stderr.includes(aliceKey), 'the key is not printed');
  assert.match(r.stdout, /Authenticated as alice at http:\/\/127\.0\.0\.1:\d+/);
  assert.equal(
    fs.readFileSync(configFile(h), 'utf8'),
    `[profiles]\n\n[profiles.default]\napi_key = "${aliceKey}"\napi_server = "${s.url}"\n`,
  );
  assert.equal(fs.statSync(configFile(h)).mode & 0o777, 0o600);
  assert.equal(fs.statSync(path.dirname(configFile(h))).mode & 0o777, 0o700);

  // The saved profile works: keys lists alice's keys.
  const keys = await algo(h, ['--json', 'keys']);
  assert.equal(keys.code, 0, keys.stderr);
  assert.deepEqual((JSON.parse(keys.stdout) as Array<{ name: string }>).map((k) => k.name), ['default-key']);

  // Enter keeps the address shown (the profile's); a new key replaces the old one.
  const again = await algo(h, ['auth'], { input: `\n${bobKey}\n` });
  assert.equal(again.code, 0, again.stderr);
  assert.ok(again.stderr.includes(`API address [${s.url}]: `), again.stderr);
  assert.match(again.stdout, /Authenticated as bob/);
  assert.equal(fs.readFileSync(configFile(h), 'utf8'), `[profiles]\n\n[profiles.default]\napi_key = "${bobKey}"\napi_server = "${s.url}"\n`);

  // Another profile from flags (no stdin), keeping the first.
  const other = await algo(h, ['--profile', 'ci', 'auth', '--api-server', `${s.url}/`, '--api-key', aliceKey]);
  assert.equal(other.code, 0, other.stderr);
  const text = fs.readFileSync(configFile(h), 'utf8');
  assert.ok(text.includes(`[profiles.default]\napi_key = "${bobKey}"`), text);
  assert.ok(text.includes(`[profiles.ci]\napi_key = "${aliceKey}"\napi_server = "${s.url}"\n`), text);
  const asCi = await algo(h, ['--profile', 'ci', '--json', 'keys']);
  assert.equal(asCi.code, 0, asCi.stderr);
  const asDefault = await algo(h, ['--json', 'keys', 'list']);
  assert.notEqual(JSON.parse(asCi.stdout)[0].prefix, JSON.parse(asDefault.stdout)[0].prefix, 'the profiles hold different users\' keys');
});

test('auth: a malformed key, a rejected key, an unreachable server or missing answers save nothing', async () => {
  const h = await aliceHome();
  const before = fs.readFileSync(configFile(h), 'utf8');

  const malformed = await algo(h, ['auth'], { input: `${s.url}\nnotakey\n` });
  assert.equal(malformed.code, 1);
  assert.match(malformed.stderr, /an API key starts with "sim"; nothing was saved/);

  const rejected = await algo(h, ['auth'], { input: `${s.url}\nsim${'x'.repeat(25)}\n` });
  assert.equal(rejected.code, 1);
  assert.match(rejected.stderr, /rejected the key: .*nothing was saved/);

  const unreachable = await algo(h, ['auth', '--api-server', 'http://127.0.0.1:9', '--api-key', aliceKey]);
  assert.equal(unreachable.code, 1);
  assert.match(unreachable.stderr, /cannot reach http:\/\/127\.0\.0\.1:9 .*check the address; nothing was saved/);

  const ended = await algo(h, ['auth'], { input: `${s.url}\n` });
  assert.equal(ended.code, 1);
  assert.match(ended.stderr, /stdin ended before every question was answered/);

  const notUrl = await algo(h, ['auth'], { input: 'ftp://x\n' });
  assert.equal(notUrl.code, 1);
  assert.match(notUrl.stderr, /must start with http:\/\/ or https:\/\//);

  const badFlag = await algo(h, ['auth', '--api-key', 'abc']);
  assert.equal(badFlag.code, 2);
  assert.match(badFlag.stderr, /--api-key: an API key starts with "sim"/);
  assert.match(badFlag.stderr, /\nsee `algo auth --help`\n$/);

  assert.equal(fs.readFileSync(configFile(h), 'utf8'), before, 'the profile file did not change');
});

test('auth on a terminal: the key is not echoed; a wrong answer is asked again', async () => {
  const h = home();
  const t = terminal(h);
  const done = main(['auth'], t.env, t.io);
  await t.answer('API address [', s.url);
  await t.answer('API key: ', 'oops');
  await t.answer('API key: ', aliceKey, 2);
  assert.equal(await done, 0, t.err());
  assert.match(t.err(), /an API key starts with "sim"; try again/);
  assert.ok(t.err().includes(s.url), 'the address is echoed');
  assert.ok(!t.err().includes(aliceKey) && !t.out().includes(aliceKey), 'the key is not echoed');
  assert.ok(!t.err().includes('oops'), 'nor a wrong key');
  assert.match(fs.readFileSync(configFile(h), 'utf8'), new RegExp(`api_key = "${aliceKey}"`));
});

test('auth on a terminal: Ctrl-C stops it, saving nothing', async () => {
  const h = home();
  const t = terminal(h);
  const done = main(['auth'], t.env, t.io);
  await t.answer('API address [', s.url);
  await within((async () => {
    while (!t.err().includes('API key: ')) await new Promise((r) => setTimeout(r, 10));
  })(), 10_000, 'the key was not asked for');
  t.io.stdin.write('sim\x03');
  assert.equal(await done, 1);
  assert.match(t.err(), /\nalgo auth: interrupted; nothing was saved\n$/);
  assert.ok(!fs.existsSync(configFile(h)));
});

test('keys: list, create (the secret printed once, alone on stdout), revoke; a revoked key gets the auth hint', async () => {
  const h = await aliceHome();
  const list = await algo(h, ['keys']);
  assert.equal(list.code, 0, list.stderr);
  assert.match(list.stdout, /^ID +NAME +PREFIX +CREATED +PERMISSIONS\nkey_\S+ +default-key +sim\S{5} /);

  const created = await algo(h, ['keys', 'create', 'ci', '--permissions', '{"allow_data_write": false}']);
  assert.equal(created.code, 0, created.stderr);
  const secret = created.stdout.trim();
  assert.match(secret, KEY);
  assert.equal(created.stdout, `${secret}\n`);
  assert.match(created.stderr, /only time it is shown/);

  const json = await algo(h, ['--json', 'keys']);
  const keys = JSON.parse(json.stdout) as Array<{ id: string; name: string; prefix: string; permissions: { allow_data_write: boolean } }>;
  const ci = keys.find((k) => k.name === 'ci');
  assert.ok(ci, json.stdout);
  assert.equal(ci.prefix, secret.slice(0, 8));
  assert.equal(ci.permissions.allow_data_write, false);

  // The new key works (from the environment, which wins over the profile)...
  const withCi = await algo(h, ['keys'], { env: { ALGOHOST_API_KEY: secret } });
  assert.equal(withCi.code, 0, withCi.stderr);
  assert.match(withCi.stdout, /\bci\b/);

  // ...until it is revoked (by name here).
  const revoked = await algo(h, ['keys', 'revoke', 'ci']);
  assert.equal(revoked.code, 0, revoked.stderr);
  assert.equal(revoked.stdout, `Revoked ${ci.id}\n`);
  const refused = await algo(h, ['keys'], { env: { ALGOHOST_API_KEY: secret } });
  assert.equal(refused.code, 1);
  assert.match(refused.stderr, /API key rejected \(.*revoked.*\): run `algo auth`/);

  const gone = await algo(h, ['keys', 'revoke', 'ci']);
  assert.equal(gone.code, 1);
  assert.match(gone.stderr, /no key with the id or name "ci"/);
  const usage = await algo(h, ['keys', 'create']);
  assert.equal(usage.code, 2);
  assert.match(usage.stderr, /needs a NAME/);
});

test('connectors: add (the secret read from stdin, never shown), list, remove', async () => {
  const h = await aliceHome();
  const empty = await algo(h, ['connectors']);
  assert.equal(empty.code, 0, empty.stderr);
  assert.match(empty.stdout, /No connected accounts/);

  const added = await algo(h, ['connectors', 'add', 'nas', '--provider', 'webdav', '--cred', 'url=https://dav.example.com/remote.php', '--cred', 'username=bob', '--writeable'], { input: 'pw-Secret-123\n' });
  assert.equal(added.code, 0, added.stderr);
  assert.match(added.stderr, /password: /);
  assert.match(added.stdout, /Connected nas: filehost\+nas:\/\/ \(the default filehost:\/\/\), read-write/);

  const list = await algo(h, ['connectors', 'list']);
  assert.equal(list.code, 0, list.stderr);
  assert.match(list.stdout, /^LABEL +URI +PROVIDER +ACCESS +PATH +DETAILS\nnas +filehost\+nas:\/\/ \(filehost:\/\/\) +webdav +read-write +\* +url=https:\/\/dav\.example\.com\/remote\.php username=bob\n$/);
  const json = await algo(h, ['--json', 'connectors']);
  assert.ok(!json.stdout.includes('pw-Secret-123') && !list.stdout.includes('pw-Secret-123'), 'the password never comes back');
  const accounts = JSON.parse(json.stdout) as Array<{ label: string; provider: string; writeable: boolean; cred_data: Record<string, unknown> }>;
  assert.deepEqual(accounts.map((a) => [a.label, a.provider, a.writeable, a.cred_data]), [['nas', 'webdav', true, { url: 'https://dav.example.com/remote.php', username: 'bob' }]]);
  // The password was sent: the stored credentials decrypt to it.
  const stored = await s.services.accounts.resolve((await s.services.users.require('alice')).id, 'filehost', 'nas');
  assert.equal(stored.credentials.password, 'pw-Secret-123');

  const removed = await algo(h, ['connectors', 'remove', 'nas']);
  assert.equal(removed.code, 0, removed.stderr);
  assert.equal(removed.stdout, 'Removed nas\n');
  const after = await algo(h, ['--json', 'connectors']);
  assert.deepEqual(JSON.parse(after.stdout), []);

  const noProvider = await algo(h, ['connectors', 'add', 'x']);
  assert.equal(noProvider.code, 2);
  assert.match(noProvider.stderr, /--provider is one of s3, webdav, dropbox/);
  const missing = await algo(h, ['connectors', 'remove', 'nope']);
  assert.equal(missing.code, 1);
});

test('exit codes and messages: usage 2, server refusals 1, no profile and a bad key point at `algo auth`', async () => {
  const h = await aliceHome();
  const cases: Array<[string[], number, RegExp]> = [
    [['frobnicate'], 2, /unknown command "frobnicate"/],
    [['run'], 2, /which algorithm\?/],
    [['run', 'alice/X'], 2, /give the input with one of -d -t -j -b/],
    [['run', 'alice/X', '-d', 'a', '-t', 'b'], 2, /give one input, not 2 \(-d -t\)/],
    [['run', 'alice/X', '-d', 'a', '--timeout', 'soon'], 2, /--timeout takes seconds/],
    [['run', 'alice/X', '-j', '{nope'], 2, /-j: the input is not valid JSON/],
    [['run', 'alice/X', '-d'], 2, /-d needs a value/],
    [['run', 'alice/X', '-q', 'a'], 2, /unknown option "-q"/],
    [['versions', 'alice/X', '--profile'], 2, /--profile needs a profile name/],
    [['keys', 'bogus'], 2, /unknown action "bogus"/],
    [['run', 'alice/Nope', '-d', 'x'], 1, /^algo run: EntityNotFoundError: algorithm algo:\/\/alice\/Nope not found\n$/],
    [['versions', 'alice/Nope'], 1, /^algo versions: No such algorithm/],
    [['run', 'alice/X', '-D', 'missing.txt'], 1, /missing\.txt: no such file or directory/],
    [['keys', '--user', 'bob'], 1, /you can only manage your own keys \(you are alice\)/],
  ];
  // A usage mistake: its one line, then where the usage is (not the usage's 25 lines).
  const badJson = await algo(h, ['run', 'alice/X', '-j', '{nope']);
  assert.match(badJson.stderr, /^algo run: -j: the input is not valid JSON[^\n]*\nsee `algo run --help`\n$/);
  assert.equal((await algo(h, ['frobnicate'])).stderr, 'algo: unknown command "frobnicate"\nsee `algo --help` (it lists the commands)\n');
  const bare = await algo(h, []);
  assert.equal(bare.code, 2);
  assert.match(bare.stdout, /^usage: algo \[--profile NAME\] \[--json\] <command>/);
  for (const [args, code, pattern] of cases) {
    const r = await algo(h, args);
    assert.equal(r.code, code, `algo ${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, pattern, `algo ${args.join(' ')}`);
    assert.equal(r.stdout, '', `algo ${args.join(' ')} prints nothing on stdout`);
  }

  // No profile at all.
  const empty = home();
  const none = await algo(empty, ['keys']);
  assert.equal(none.code, 1);
  assert.match(none.stderr, /no API key for profile "default": run `algo auth`/);
  const noneNamed = await algo(empty, ['--profile', 'work', 'versions', 'alice/X']);
  assert.match(noneNamed.stderr, /run `algo auth --profile work`/);
  // Global flags after the command work the same (up to `--`).
  const lateNamed = await algo(empty, ['versions', 'alice/X', '--profile', 'work']);
  assert.match(lateNamed.stderr, /run `algo auth --profile work`/);
  const lateEq = await algo(empty, ['versions', '--profile=work', 'alice/X']);
  assert.match(lateEq.stderr, /run `algo auth --profile work`/);
  const before = await algo(h, ['--json', 'keys']);
  const after = await algo(h, ['keys', '--json']);
  assert.equal(after.code, 0, after.stderr);
  assert.equal(after.stdout, before.stdout);
  assert.ok(Array.isArray(JSON.parse(after.stdout)), 'JSON on stdout');
  const afterDashes = await algo(h, ['versions', '--', '--json']);
  // After `--`, --json is the command's argument (here, a name the server does not know), not the flag.
  assert.equal(afterDashes.code, 1, afterDashes.stderr);
  assert.doesNotMatch(afterDashes.stderr, /which algorithm/);

  // A profile whose key the server does not know.
  const bad = home();
  fs.mkdirSync(path.dirname(configFile(bad)), { recursive: true });
  fs.writeFileSync(configFile(bad), `[profiles.default]\napi_key = "sim${'Z'.repeat(25)}"\napi_server = "${s.url}"\n`, { mode: 0o600 });
  for (const args of [['versions', 'alice/X'], ['run', 'alice/X', '-d', 'x'], ['keys']]) {
    const r = await algo(bad, args);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /API key rejected \(.*\): run `algo auth`/, `algo ${args.join(' ')}`);
  }

  // help
  const help = await algo(h, ['help', 'publish']);
  assert.equal(help.code, 0);
  assert.match(help.stdout, /^usage: algo publish \[DIR\]/);
  const all = await algo(h, ['--help']);
  for (const name of ['auth', 'run', 'init', 'publish', 'versions', 'keys', 'connectors']) assert.match(all.stdout, new RegExp(`\\n  ${name} +\\S`), name);
});
