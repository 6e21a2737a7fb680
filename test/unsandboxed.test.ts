/**
 * Without a working bubblewrap (ALGOHOST_SANDBOX=auto), algorithms still build and run, and
 * the server says everywhere that they are not sandboxed.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { api, json, startServer, type TestServer } from './helpers/server.ts';
import { callAlgo, release } from './helpers/algorithms.ts';

let s: TestServer;
let alice: ReturnType<typeof api>;

before(async () => {
  s = await startServer({ env: { ALGOHOST_BWRAP: '/nonexistent/bwrap' } });
  alice = api(s.url, await s.user('alice'));
});
after(() => s.close());

test('/health says algorithms are not sandboxed, and why', async () => {
  const body = await json(await fetch(`${s.url}/health`));
  assert.equal(body.sandbox.enabled, false);
  assert.match(body.sandbox.warning, /NOT sandboxed: \/nonexistent\/bwrap is not installed/);
});

test('JavaScript, TypeScript and Python algorithms build and answer without the sandbox', async () => {
  await release(alice, 'alice', 'Js', { 'src/index.js': "export const apply = (x) => 'js ' + x;\n" }, { settings: { language: 'javascript' } });
  await release(alice, 'alice', 'Ts', { 'src/index.ts': "export const apply = (x: string): string => 'ts ' + x;\n" }, { settings: { language: 'typescript' } });
  await release(alice, 'alice', 'Py', { 'src/Py.py': "import os\n\ndef apply(x):\n    return 'py ' + x + ' ' + str(os.getcwd().startswith('/tmp'))\n" }, { settings: { language: 'python3' } });
  assert.equal((await json(await callAlgo(alice, 'alice/Js', 'a'))).result, 'js a');
  assert.equal((await json(await callAlgo(alice, 'alice/Ts', 'b'))).result, 'ts b');
  // Each worker still gets a private working directory of its own under the temp dir.
  assert.equal((await json(await callAlgo(alice, 'alice/Py', 'c'))).result, 'py c True');
});

test('a timeout still kills the worker and the next call gets a fresh one', async () => {
  await release(alice, 'alice', 'Spin', { 'src/index.js': "export const apply = (x) => { if (x === 'spin') for (;;) {} return x; };\n" }, { settings: { language: 'javascript' } });
  const body = await json(await callAlgo(alice, 'alice/Spin', 'spin', 'text/plain', '?timeout=1'));
  assert.equal(body.error.error_type, 'TimeoutError');
  assert.equal((await json(await callAlgo(alice, 'alice/Spin', 'ok'))).result, 'ok');
});
