import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { probeSandbox } from '../src/runtime/sandbox.ts';
import { detectCgroups } from '../src/runtime/cgroup.ts';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { callAlgo, compile, createAlgorithm, publish, release, tarGz, upload } from './helpers/algorithms.ts';

// Builds and calls run sandboxed where bubblewrap works, unsandboxed otherwise: these tests
// are about publishing, and pass either way (the sandbox has its own tests).
const sandboxed = probeSandbox().available;

let s: TestServer;
let alice: ReturnType<typeof api>;
let bob: ReturnType<typeof api>;

before(async () => {
  s = await startServer();
  alice = api(s.url, await s.user('alice'));
  bob = api(s.url, await s.user('bob'));
});
after(() => s.close());

const text = (body: string) => `exports.apply = function (input, cb) { cb(null, ${JSON.stringify(body)} + input); };\n`;

describe('templates: an algorithm compiled before any upload', () => {
  for (const [language, name] of [
    ['javascript', 'TplJs'],
    ['typescript', 'TplTs'],
    ['python3', 'TplPy'],
  ] as const) {
    test(`${language}: compiles and answers "hello <input>" by build hash`, async () => {
      await createAlgorithm(alice, 'alice', name, { language });
      const hash = await compile(alice, 'alice', name);
      assert.match(hash, /^[0-9a-f]{40}$/);
      const r = await callAlgo(alice, `alice/${name}/${hash}`, 'there');
      const body = await json(r);
      assert.equal(r.status, 200, JSON.stringify(body));
      assert.equal(body.result, 'hello there', JSON.stringify(body));
      assert.equal(body.metadata.content_type, 'text');
      // Compiling the same source again is the same build (no rebuild, same id).
      assert.equal(await compile(alice, 'alice', name), hash);
    });
  }
});

describe('builds', () => {
  test('a build without an entry point fails and its logs say why', async () => {
    await createAlgorithm(alice, 'alice', 'NoEntry', { language: 'javascript' });
    assert.equal((await upload(alice, 'alice', 'NoEntry', { 'lib/other.js': 'exports.x = 1;\n' })).status, 200);
    const r = await alice('/v1/algorithms/alice/NoEntry/compile', { method: 'POST' });
    const body = await json(r);
    assert.equal(r.status, 200);
    assert.equal(body.compilation.successful, false);
    assert.match(body.compilation.output, /no entry point; expected one of src\/NoEntry\.js/);
    const id = body.version_info.git_hash;
    const logs = await json(await alice(`/v1/algorithms/alice/NoEntry/builds/${id}/logs`));
    assert.match(logs.logs, /build failed/);
    const b = await json(await alice(`/v1/algorithms/alice/NoEntry/builds/${id}`));
    assert.equal(b.status, 'failed');
    const list = await json(await alice('/v1/algorithms/alice/NoEntry/builds'));
    assert.deepEqual(list.results.map((x: { build_id: string }) => x.build_id), [id]);
    // Nothing to publish.
    const p = await alice('/v1/algorithms/alice/NoEntry/versions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    assert.equal(p.status, 409);
    assert.equal((await json(p)).error.code, 'no_build');
  });

  test('an entry point that does not load fails the build with its error in the logs', async () => {
    await createAlgorithm(alice, 'alice', 'Broken', { language: 'javascript' });
    await upload(alice, 'alice', 'Broken', { 'src/Broken.js': 'exports.apply = function (x) { return x; ;\n' });
    const body = await json(await alice('/v1/algorithms/alice/Broken/compile', { method: 'POST' }));
    assert.equal(body.compilation.successful, false);
    assert.match(body.compilation.output, /SyntaxError/);
    assert.match(body.compilation.output, /src\/Broken\.js does not load/);
  });

  test('JavaScript dependencies are installed with npm (a local file: package, no network needed)', async () => {
    const files = {
      'package.json': JSON.stringify({ name: 'withdep', version: '1.0.0', dependencies: { shout: 'file:./vendor/shout' } }),
      'vendor/shout/package.json': JSON.stringify({ name: 'shout', version: '1.0.0', main: 'index.js' }),
      'vendor/shout/index.js': 'module.exports = (s) => String(s).toUpperCase() + "!";\n',
      'src/index.js': 'import shout from "shout";\nexport function apply(input) { return shout(input); }\n',
    };
    await release(alice, 'alice', 'WithDep', files, { settings: { language: 'javascript' } });
    const body = await json(await callAlgo(alice, 'alice/WithDep', 'hey'));
    assert.equal(body.result, 'HEY!', JSON.stringify(body));
    const hash = (await json(await alice('/v1/algorithms/alice/WithDep/versions'))).results[0].version_info.git_hash;
    const logs = (await json(await alice(`/v1/algorithms/alice/WithDep/builds/${hash}/logs`))).logs;
    assert.match(logs, /npm install/);
  });

  test('a running build\'s log can be read as it grows, before the compile answers', async () => {
    // An install script that keeps the build busy for 2.5 s: the builder's first step line
    // must be readable through the API while the build is still in progress.
    const files = {
      'package.json': JSON.stringify({ name: 'slow', version: '1.0.0', dependencies: { shout: 'file:./vendor/shout' }, scripts: { postinstall: 'node -e "setTimeout(() => {}, 2500)"' } }),
      'vendor/shout/package.json': JSON.stringify({ name: 'shout', version: '1.0.0', main: 'index.js' }),
      'vendor/shout/index.js': 'module.exports = (s) => String(s);\n',
      'src/index.js': 'export function apply(input) { return input; }\n',
    };
    await createAlgorithm(alice, 'alice', 'SlowBuild', { language: 'javascript' });
    assert.equal((await upload(alice, 'alice', 'SlowBuild', files)).status, 200);
    const started = Date.now();
    let answered = false;
    const compiling = compile(alice, 'alice', 'SlowBuild').finally(() => (answered = true));
    let seen: string | undefined;
    for (let i = 0; i < 100 && seen === undefined && !answered; i++) {
      await new Promise((r) => setTimeout(r, 100));
      const list = (await json(await alice('/v1/algorithms/alice/SlowBuild/builds'))).results as { build_id: string; status: string }[];
      const running = list.find((b) => b.status === 'in-progress');
      if (!running) continue;
      const logs = (await json(await alice(`/v1/algorithms/alice/SlowBuild/builds/${running.build_id}/logs`))).logs as string;
      if (logs.includes('$ npm install')) seen = logs;
    }
    assert.ok(seen !== undefined, 'the build\'s first step was never readable while it ran');
    const hash = await compiling;
    assert.ok(Date.now() - started >= 2500, 'the install script kept the build busy');
    const final = (await json(await alice(`/v1/algorithms/alice/SlowBuild/builds/${hash}/logs`))).logs as string;
    assert.ok(final.startsWith(seen) && final.length > seen.length, `the final log continues the one read during the build:\n${seen}\n---\n${final}`);
  });

  test('install scripts run in a cgroup: a process flood in a build is capped', { skip: detectCgroups().pids ? false : 'no writable pids controller here' }, async () => {
    const flood = `const { spawn } = require('child_process');
let ok = 0, failed = 0;
for (let i = 0; i < 400; i++) { try { const c = spawn('/usr/bin/sleep', ['2']); c.on('error', () => failed++); if (c.pid) ok++; } catch { failed++; } }
setTimeout(() => console.log('FLOOD started ' + ok + ' failed ' + failed), 300);
`;
    await createAlgorithm(alice, 'alice', 'Flood', { language: 'javascript' });
    await upload(alice, 'alice', 'Flood', {
      'src/index.js': 'exports.apply = (x) => x;\n',
      'package.json': JSON.stringify({ name: 'flood', version: '1.0.0', dependencies: { dep: 'file:./dep' }, scripts: { preinstall: 'node flood.js' } }),
      'flood.js': flood,
      'dep/package.json': JSON.stringify({ name: 'dep', version: '1.0.0' }),
    });
    const body = await json(await alice('/v1/algorithms/alice/Flood/compile', { method: 'POST' }));
    const m = /FLOOD started (\d+) failed (\d+)/.exec(body.compilation.output);
    assert.ok(m, body.compilation.output);
    assert.ok(Number(m[1]) < 256 && Number(m[2]) > 0, m[0]);
  });

  test('TypeScript is bundled with esbuild, local imports included', async () => {
    const files = {
      'src/index.ts': 'import { twice } from "./twice.ts";\nexport async function apply(input: { n: number }): Promise<{ n: number }> {\n  return { n: twice(input.n) };\n}\n',
      'src/twice.ts': 'export const twice = (n: number): number => n * 2;\n',
    };
    await release(alice, 'alice', 'Typed', files, { settings: { language: 'typescript' } });
    const body = await json(await callAlgo(alice, 'alice/Typed', '{"n":21}', 'application/json'));
    assert.deepEqual(body.result, { n: 42 }, JSON.stringify(body));
  });

  test('a TypeScript type error that esbuild cannot parse fails the build', async () => {
    await createAlgorithm(alice, 'alice', 'TypedBroken', { language: 'typescript' });
    await upload(alice, 'alice', 'TypedBroken', { 'src/index.ts': 'export function apply(x: number {\n' });
    const body = await json(await alice('/v1/algorithms/alice/TypedBroken/compile', { method: 'POST' }));
    assert.equal(body.compilation.successful, false);
    assert.match(body.compilation.output, /TypeScript did not compile/);
  });

  test('TypeScript cannot bundle files from outside its source', { skip: sandboxed ? false : 'needs the sandbox: without it the bundler runs on the host' }, async () => {
    await createAlgorithm(alice, 'alice', 'Snoop', { language: 'typescript' });
    await upload(alice, 'alice', 'Snoop', { 'src/index.ts': `import secret from ${JSON.stringify(s.home + '/secret.key')};\nexport const apply = () => String(secret);\n` });
    const body = await json(await alice('/v1/algorithms/alice/Snoop/compile', { method: 'POST' }));
    assert.equal(body.compilation.successful, false);
    assert.match(body.compilation.output, /Could not resolve/);
  });

  test('Python requirements whose index is an internal address fail the build at once, naming the index and the address rule', async () => {
    await createAlgorithm(alice, 'alice', 'PyDeps', { language: 'python3' });
    // An index on a local port, named by the requirements file itself: the server would check it
    // answers, and the address rule (docs/security.md) keeps it from connecting there at all.
    await upload(alice, 'alice', 'PyDeps', {
      'requirements.txt': '--index-url http://127.0.0.1:9/simple\nsomepackage==1.0\n',
      'src/PyDeps.py': 'def apply(input):\n    return input\n',
    });
    const body = await json(await alice('/v1/algorithms/alice/PyDeps/compile', { method: 'POST' }));
    assert.equal(body.compilation.successful, false);
    assert.match(body.compilation.output, /the Python package index the source names was refused by the address rule: 127\.0\.0\.1 is an internal address/);
  });

  test('Python requirements that pip cannot install fail the build with pip\'s reason', async () => {
    await createAlgorithm(alice, 'alice', 'PyLocal', { language: 'python3' });
    // No index at all, and a local path that is not a package: pip itself says why.
    await upload(alice, 'alice', 'PyLocal', {
      'requirements.txt': '--no-index\n./not_a_package\n',
      'not_a_package/README': 'nothing to install here\n',
      'src/PyLocal.py': 'def apply(input):\n    return input\n',
    });
    const body = await json(await alice('/v1/algorithms/alice/PyLocal/compile', { method: 'POST' }));
    assert.equal(body.compilation.successful, false);
    assert.match(body.compilation.output, /\$ pip install/);
    assert.match(body.compilation.output, /not_a_package/);
  });

  test('uploads: wrong type is 415, a bad archive 400, and only the owner may upload or compile', async () => {
    await createAlgorithm(alice, 'alice', 'Guarded', { language: 'javascript' });
    let r = await alice('/v1/algorithms/alice/Guarded/source', { method: 'PUT', headers: { 'content-type': 'application/json' }, body: '{}' });
    assert.equal(r.status, 415);
    r = await alice('/v1/algorithms/alice/Guarded/source', { method: 'PUT', headers: { 'content-type': 'application/gzip' }, body: 'not gzip at all' });
    assert.equal(r.status, 400);
    assert.equal((await json(r)).error.code, 'invalid_archive');
    r = await bob('/v1/algorithms/alice/Guarded/source', { method: 'PUT', headers: { 'content-type': 'application/gzip' }, body: tarGz({ 'src/Guarded.js': text('x') }) });
    assert.equal(r.status, 403);
    r = await bob('/v1/algorithms/alice/Guarded/compile', { method: 'POST' });
    assert.equal(r.status, 403);
    r = await bob('/v1/algorithms/alice/Guarded/builds');
    assert.equal(r.status, 403);
  });
});

describe('publishing and version selection', () => {
  const src = (v: string) => ({ 'src/Versioned.js': text(`v${v}:`) });

  before(async () => {
    await createAlgorithm(alice, 'alice', 'Versioned', { language: 'javascript' });
    const steps: Array<[string, string, string?]> = [
      ['0.1.0', 'minor'],
      ['0.2.0', 'minor'],
      ['0.2.1', 'revision'],
      ['1.0.0', 'major'],
      ['1.0.1', 'revision', 'private'],
    ];
    for (const [expect, type, callability] of steps) {
      await upload(alice, 'alice', 'Versioned', src(expect));
      await compile(alice, 'alice', 'Versioned');
      const settings = { algorithm_callability: callability ?? 'public' };
      assert.equal(await publish(alice, 'alice', 'Versioned', { version_type: type, release_notes: `notes ${expect}` }, settings), expect);
    }
    // The private publish of 1.0.1 made that version private, not the algorithm.
    const algo = await json(await bob('/v1/algorithms/alice/Versioned'));
    assert.equal(algo.settings.algorithm_callability, 'public');
  });

  const answer = async (who: typeof alice, ref: string) => {
    const body = await json(await callAlgo(who, ref, 'x'));
    return body.result ?? body.error.message;
  };

  test('selectors resolve per spec 9.2 for the owner and for others', async () => {
    assert.equal(await answer(bob, 'alice/Versioned'), 'v1.0.0:x');
    assert.equal(await answer(bob, 'alice/Versioned/latest'), 'v1.0.0:x');
    assert.equal(await answer(bob, 'alice/Versioned/0.2.*'), 'v0.2.1:x');
    assert.equal(await answer(bob, 'alice/Versioned/0.2'), 'v0.2.1:x');
    assert.equal(await answer(bob, 'alice/Versioned/0.*'), 'v0.2.1:x');
    assert.equal(await answer(bob, 'alice/Versioned/0.1.0'), 'v0.1.0:x');
    assert.equal(await answer(bob, 'alice/Versioned/1.*'), 'v1.0.0:x');
    // Private versions: the owner only, by exact number or latestPrivate.
    assert.equal(await answer(alice, 'alice/Versioned/latestPrivate'), 'v1.0.1:x');
    assert.equal(await answer(alice, 'alice/Versioned/1.0.1'), 'v1.0.1:x');
    assert.equal(await answer(alice, 'alice/Versioned'), 'v1.0.0:x');
    assert.equal(await answer(bob, 'alice/Versioned/1.0.1'), 'algorithm algo://alice/Versioned/1.0.1 not found');
    assert.equal(await answer(bob, 'alice/Versioned/latestPrivate'), 'v1.0.0:x');
    assert.equal(await answer(bob, 'alice/Versioned/3.*'), 'algorithm algo://alice/Versioned/3.* not found');
  });

  test('an algorithm created private stays owner-only, whatever its versions say; its owner calls it plainly', async () => {
    await createAlgorithm(alice, 'alice', 'Hidden', { language: 'javascript', algorithm_callability: 'private' });
    await upload(alice, 'alice', 'Hidden', { 'src/Hidden.js': text('h1:') });
    await compile(alice, 'alice', 'Hidden');
    assert.equal(await publish(alice, 'alice', 'Hidden'), '0.1.0');
    await upload(alice, 'alice', 'Hidden', { 'src/Hidden.js': text('h2:') });
    await compile(alice, 'alice', 'Hidden');
    assert.equal(await publish(alice, 'alice', 'Hidden', {}, { algorithm_callability: 'public' }), '0.2.0');
    // No public version until 0.2.0; the owner's plain call takes the latest public one then.
    assert.equal(await answer(alice, 'alice/Hidden'), 'h2:x');
    assert.equal(await answer(alice, 'alice/Hidden/0.1.0'), 'h1:x');
    for (const ref of ['alice/Hidden', 'alice/Hidden/0.2.0', 'alice/Hidden/latest']) {
      assert.equal(await answer(bob, ref), `algorithm algo://${ref} not found`);
    }
    assert.equal((await bob('/v1/algorithms/alice/Hidden')).status, 404);
    assert.equal((await json(await alice('/v1/algorithms/alice/Hidden'))).settings.algorithm_callability, 'private');
  });

  test('an owner with only private versions calls the latest of them plainly', async () => {
    await createAlgorithm(alice, 'alice', 'Drafts', { language: 'javascript' });
    await upload(alice, 'alice', 'Drafts', { 'src/Drafts.js': text('d1:') });
    await compile(alice, 'alice', 'Drafts');
    await publish(alice, 'alice', 'Drafts', {}, { algorithm_callability: 'private' });
    assert.equal(await answer(alice, 'alice/Drafts'), 'd1:x');
    assert.equal(await answer(bob, 'alice/Drafts'), 'algorithm algo://alice/Drafts not found');
  });

  test('a build hash is callable by its owner only, published or not', async () => {
    await upload(alice, 'alice', 'Versioned', src('draft'));
    const hash = await compile(alice, 'alice', 'Versioned');
    assert.equal(await answer(alice, `alice/Versioned/${hash}`), 'vdraft:x');
    assert.match(await answer(bob, `alice/Versioned/${hash}`), /not found/);
  });

  test('publishing the same build twice is refused', async () => {
    await upload(alice, 'alice', 'Versioned', src('1.0.1'));
    await compile(alice, 'alice', 'Versioned');
    const r = await alice('/v1/algorithms/alice/Versioned/version', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    assert.equal(r.status, 409);
    const body = await json(r);
    assert.equal(body.error.code, 'already_published');
    assert.match(body.error.message, /already published as version 1\.0\.1/);
  });

  test('version lists: the owner sees every version, others the public ones; one by hash', async () => {
    const mine = await json(await alice('/v1/algorithms/alice/Versioned/versions'));
    assert.deepEqual(mine.results.map((v: { version_info: { semantic_version: string } }) => v.version_info.semantic_version), ['1.0.1', '1.0.0', '0.2.1', '0.2.0', '0.1.0']);
    const theirs = await json(await bob('/v1/algorithms/alice/Versioned/versions'));
    assert.deepEqual(theirs.results.map((v: { version_info: { semantic_version: string } }) => v.version_info.semantic_version), ['1.0.0', '0.2.1', '0.2.0', '0.1.0']);
    const one = mine.results[2];
    const byHash = await json(await bob(`/v1/algorithms/alice/Versioned/versions/${one.version_info.git_hash}`));
    assert.equal(byHash.version_info.semantic_version, '0.2.1');
    assert.equal(byHash.version_info.release_notes, 'notes 0.2.1');
    const hidden = await bob(`/v1/algorithms/alice/Versioned/versions/${mine.results[0].version_info.git_hash}`);
    assert.equal(hidden.status, 404);
    assert.equal((await json(hidden)).error.code, 'version_not_found');
  });

  test('bad version_type is a 400', async () => {
    const r = await alice('/v1/algorithms/alice/Versioned/versions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"version_info":{"version_type":"huge"}}' });
    assert.equal(r.status, 400);
    assert.equal((await json(r)).error.code, 'invalid_version');
  });

  test('the public catalogue lists published public algorithms and searches them', async () => {
    const all = await json(await bob('/v1/algorithms'));
    const names = all.results.map((a: { name: string }) => a.name);
    assert.ok(names.includes('Versioned'));
    assert.ok(!names.includes('NoEntry'), 'never published');
    const found = await json(await bob('/v1/algorithms?q=VERSION'));
    assert.deepEqual(found.results.map((a: { name: string }) => a.name), ['Versioned']);
    const none = await json(await bob('/v1/algorithms?q=100%25_'));
    assert.deepEqual(none.results, []);
  });

  test('deleting an algorithm removes its builds and versions', async () => {
    await release(alice, 'alice', 'Doomed', { 'src/Doomed.js': text('d') }, { settings: { language: 'javascript' } });
    assert.equal((await json(await callAlgo(bob, 'alice/Doomed', 'x'))).result, 'dx');
    assert.equal((await alice('/v1/algorithms/alice/Doomed', { method: 'DELETE' })).status, 204);
    const body = await json(await callAlgo(bob, 'alice/Doomed', 'x'));
    assert.equal(body.error.message, 'algorithm algo://alice/Doomed not found');
    assert.equal(body.error.error_type, 'EntityNotFoundError');
  });
});
