/**
 * The client SDK (client/) against a real server: configuration from options and the
 * environment, typed errors, keys, connected accounts, and the package built on its own.
 * Errors and management run over both transports (node:http and fetch).
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { startServer, type TestServer } from './helpers/server.ts';
import { rejects } from './helpers/rejects.ts';
import { TRANSPORTS, makeClient, type AnyClient, type ClientSpec } from './helpers/clients.ts';
import { ERROR_CODES } from '../src/errors.ts';
import {
  API_ERROR_CODES, AlgohostClient, AlgohostError, ApiError, DEFAULT_BASE_URL, NetworkError, VERSION, createClient, parseAlgoRef, parseDataUri,
} from '../client/src/index.ts';

let s: TestServer;
let aliceKey: string;
let alice: AlgohostClient;

const root = path.resolve(import.meta.dirname, '..');

/** A port nothing listens on: bound, then closed. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

before(async () => {
  s = await startServer();
  aliceKey = await s.user('alice');
  await s.user('bob');
  alice = new AlgohostClient({ baseUrl: s.url, apiKey: aliceKey, env: {} });
  await alice.dir('data://.my/c').create();
  await alice.file('data://.my/c/f.txt').put('found');
});
after(() => s.close());

/** Whether a client reaches the server as alice. */
const works = async (client: AnyClient) => (await client.file('data://.my/c/f.txt').text()) === 'found';

describe('configuration', () => {
  test('ALGOHOST_API(_KEY), else ALGORITHMIA_API(_KEY); explicit options win; empty means unset', async () => {
    const dead = `http://127.0.0.1:${await closedPort()}`;
    assert.ok(await works(new AlgohostClient({ env: { ALGORITHMIA_API: s.url, ALGORITHMIA_API_KEY: aliceKey } })));
    assert.ok(await works(new AlgohostClient({ env: { ALGOHOST_API: s.url, ALGOHOST_API_KEY: aliceKey, ALGORITHMIA_API: dead, ALGORITHMIA_API_KEY: 'simbad' } })));
    assert.ok(await works(new AlgohostClient({ baseUrl: s.url, apiKey: aliceKey, env: { ALGOHOST_API: dead, ALGOHOST_API_KEY: 'simbad' } })));
    assert.ok(await works(createClient({ env: { ALGOHOST_API: '', ALGORITHMIA_API: s.url, ALGOHOST_API_KEY: ' ', ALGORITHMIA_API_KEY: aliceKey } })));
    const wrongKey = await rejects(works(new AlgohostClient({ env: { ALGOHOST_API: s.url, ALGOHOST_API_KEY: 'simNotAKeyOfThisServer00000', ALGORITHMIA_API_KEY: aliceKey } })), ApiError);
    assert.equal(wrongKey.status, 401, 'our own name is read first');
    const bare = new AlgohostClient({ env: {} });
    assert.equal(bare.baseUrl, DEFAULT_BASE_URL);
    assert.equal(DEFAULT_BASE_URL, 'http://127.0.0.1:8080');
    assert.equal(bare.hasApiKey, false);
    assert.equal(new AlgohostClient({ baseUrl: `${s.url}/`, env: {} }).baseUrl, s.url);
    assert.throws(() => new AlgohostClient({ baseUrl: 'ftp://example.com', env: {} }), (e) => e instanceof AlgohostError && e.code === 'invalid_base_url');
  });

  test('without an env option the process environment is read', () => {
    const script = `import { AlgohostClient } from ${JSON.stringify(path.join(root, 'client/src/index.ts'))};
const c = new AlgohostClient();
console.log(JSON.stringify([c.baseUrl, c.hasApiKey]));`;
    const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      env: { PATH: process.env.PATH, ALGORITHMIA_API: 'http://example.test:9', ALGORITHMIA_API_KEY: 'simx' },
      cwd: root,
    }).toString();
    assert.deepEqual(JSON.parse(out), ['http://example.test:9', true]);
  });

  test('parsing references and URIs', () => {
    assert.deepEqual(parseAlgoRef('algo://a/B/1.2.*/'), { owner: 'a', name: 'B', version: '1.2.*' });
    assert.deepEqual(parseAlgoRef('a/B'), { owner: 'a', name: 'B', version: undefined });
    assert.throws(() => alice.algo('justone'), (e) => e instanceof AlgohostError && e.code === 'invalid_algorithm_ref');
    assert.deepEqual(parseDataUri('S3+Mine://bucket/a.txt'), { connector: 's3+Mine', path: 'bucket/a.txt', uri: 's3+Mine://bucket/a.txt' });
    assert.equal(parseDataUri('data://.my/c/').uri, 'data://.my/c');
    for (const bad of ['http://x/y', 'data+label://x', 'ftp:/x']) {
      assert.throws(() => alice.file(bad), (e) => e instanceof AlgohostError && e.code === 'invalid_uri', bad);
    }
  });

  test('the version constant is the package version; the codes are the server\'s', () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(root, 'client/package.json'), 'utf8'));
    assert.equal(VERSION, pkg.version);
    assert.deepEqual([...API_ERROR_CODES].sort(), Object.keys(ERROR_CODES).sort());
  });
});

for (const kind of TRANSPORTS) {
  const connect = (spec: ClientSpec) => makeClient(kind, spec);

  describe(`errors (${kind} transport)`, () => {
    test('a bad key, no key: ApiError with status, code, message and request id', async () => {
      const bad = connect({ baseUrl: s.url, apiKey: 'simNotAKeyOfThisServer00000' });
      let err = await rejects(bad.file('data://.my/c/f.txt').text(), ApiError);
      assert.equal(err.status, 401);
      assert.equal(err.code, 'invalid_api_key');
      assert.ok(err instanceof AlgohostError);
      assert.equal(err.name, 'ApiError');
      assert.match(err.requestId ?? '', /^req-/);
      err = await rejects(connect({ baseUrl: s.url }).algo('alice/X').pipe('x'), ApiError);
      assert.equal(err.code, 'auth_required');
      assert.equal(err.message, 'authorization required');
      // HEAD answers have no body: the code comes from the same request as a GET.
      err = await rejects(bad.file('data://.my/c/f.txt').exists(), ApiError);
      assert.equal(err.code, 'invalid_api_key');
    });

    test('whoami: the key\'s user, its id and its permissions (GET /v1/user); a bad key is a 401', async () => {
      const me = await connect({ baseUrl: s.url, apiKey: aliceKey }).whoami();
      assert.equal(me.username, 'alice');
      assert.match(me.key_id, /^key_/);
      assert.equal(me.permissions.allow_data, true);
      const bad = connect({ baseUrl: s.url, apiKey: 'simNotAKeyOfThisServer00000' });
      assert.equal((await rejects(bad.whoami(), ApiError)).status, 401);
    });

    test('no server: NetworkError with the system code', async () => {
      const client = connect({ baseUrl: `http://127.0.0.1:${await closedPort()}`, apiKey: aliceKey });
      const err = await rejects(client.file('data://.my/c/f.txt').text(), NetworkError);
      assert.equal(err.code, 'ECONNREFUSED');
      assert.ok(err instanceof AlgohostError);
    });

    test('the client-wide timeoutMs applies to every request', async () => {
      // A server that accepts and never answers.
      const silent = net.createServer(() => {});
      await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
      try {
        const client = connect({ baseUrl: `http://127.0.0.1:${(silent.address() as net.AddressInfo).port}`, apiKey: aliceKey, timeoutMs: 100 });
        const err = await rejects(client.health(), NetworkError);
        assert.equal(err.code, 'request_timeout');
      } finally {
        silent.close();
      }
    });
  });

  describe(`management (${kind} transport)`, () => {
    let alice: AnyClient;
    before(() => {
      alice = connect({ baseUrl: s.url, apiKey: aliceKey });
    });

    test('health', async () => {
      assert.equal((await alice.health()).status, 'ok');
    });

    test('keys: list, create, get, update, revoke; a key only does what it may', async () => {
      const keys = alice.keys('alice');
      assert.deepEqual((await keys.list()).map((k) => k.name), ['default-key']);
      const created = await keys.create({ name: 'ci', permissions: { allow_data_write: false } });
      assert.match(created.api_key, /^sim[A-Za-z0-9]{25}$/);
      assert.equal(created.permissions.allow_data_write, false);
      assert.equal(created.permissions.allow_data, true);
      const ci = connect({ baseUrl: s.url, apiKey: created.api_key });
      assert.ok(await works(ci));
      const denied = await rejects(ci.file('data://.my/c/new.txt').put('x'), ApiError);
      assert.equal(denied.code, 'key_permission_denied');
      assert.equal(denied.status, 403);
      assert.equal((await keys.get(created.id)).name, 'ci');
      assert.equal((await keys.update(created.id, { name: 'ci2' })).name, 'ci2');
      assert.deepEqual((await keys.list()).map((k) => k.name).sort(), ['ci2', 'default-key']);
      await keys.revoke(created.id);
      const revoked = await rejects(works(ci), ApiError);
      assert.equal(revoked.code, 'api_key_revoked');
      const gone = await rejects(keys.get(created.id), ApiError);
      assert.equal(gone.code, 'key_not_found');
      const others = await rejects(alice.keys('bob').list(), ApiError);
      assert.equal(others.code, 'forbidden');
    });

    test('connected accounts: create, list, get, update, delete; secrets never come back', async () => {
      const accounts = alice.connectors('alice');
      assert.deepEqual(await accounts.list(), []);
      const created = await accounts.create({ label: 'box', protocol: 'filehost', provider: 'dropbox', cred_data: { access_token: 'tok-very-secret' } });
      assert.equal(created.label, 'box');
      assert.equal(created.is_default, true);
      assert.equal(created.writeable, false);
      assert.deepEqual(created.cred_data, {});
      assert.deepEqual((await accounts.list()).map((a) => a.label), ['box']);
      assert.equal((await accounts.get('BOX')).provider, 'dropbox');
      const changed = await accounts.update('box', { writeable: true, path: 'reports/*' });
      assert.equal(changed.writeable, true);
      assert.equal(changed.path, 'reports/*');
      assert.ok(!JSON.stringify(await accounts.list()).includes('tok-very-secret'));
      const bad = await rejects(accounts.create({ label: 'bad label', protocol: 'filehost', cred_data: {} }), ApiError);
      assert.equal(bad.code, 'invalid_connector');
      await accounts.delete('box');
      const gone = await rejects(accounts.get('box'), ApiError);
      assert.equal(gone.status, 404);
      assert.deepEqual(await accounts.list(), []);
    });
  });
}

describe('the package on its own', () => {
  test('builds with its tsconfig to JS and .d.ts, and works imported by name (@algohost/client, @algohost/client/browser)', async () => {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-client-pkg-'));
    try {
      const pkgDir = path.join(tmp, 'node_modules/@algohost/client');
      execFileSync(process.execPath, [path.join(root, 'node_modules/typescript/bin/tsc'), '-p', path.join(root, 'client/tsconfig.json'), '--outDir', path.join(pkgDir, 'dist')]);
      fs.copyFileSync(path.join(root, 'client/package.json'), path.join(pkgDir, 'package.json'));
      assert.ok(fs.existsSync(path.join(pkgDir, 'dist/index.d.ts')));
      assert.ok(!fs.readFileSync(path.join(pkgDir, 'dist/index.js'), 'utf8').includes(".ts'"), 'imports rewritten to .js');
      const script = `import { AlgohostClient, ApiError } from '@algohost/client';
import { BrowserClient } from '@algohost/client/browser';
const c = new AlgohostClient({ baseUrl: ${JSON.stringify(s.url)}, apiKey: ${JSON.stringify(aliceKey)}, env: {} });
const text = await c.file('data://.my/c/f.txt').text();
const err = await c.file('data://.my/c/none').text().catch((e) => e);
const b = new BrowserClient({ baseUrl: ${JSON.stringify(s.url)}, apiKey: ${JSON.stringify(aliceKey)} });
console.log(JSON.stringify([text, err instanceof ApiError, err.code, await b.file('data://.my/c/f.txt').text()]));`;
      fs.writeFileSync(path.join(tmp, 'main.mjs'), script);
      // Without tsx: plain Node runs the emitted JavaScript (asynchronously: this process serves it).
      const { stdout: out } = await promisify(execFile)(process.execPath, ['main.mjs'], { cwd: tmp, env: { PATH: process.env.PATH } });
      assert.deepEqual(JSON.parse(out), ['found', true, 'not_found', 'found'], 'both entries, by their names in the export map');
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
  });
});
