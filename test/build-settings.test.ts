/**
 * Builds where users are: a private npm registry and a Python package index behind TLS signed
 * by a CA of their own (as a TLS-intercepting proxy does), an HTTP proxy, an npmrc with a
 * token, a registry that is not there. The registry, the index and the proxy are local
 * stand-ins on 127.0.0.1 that follow the public protocols (npm's registry API: packument and
 * tarball; PEP 503's simple index; HTTP CONNECT), with a throwaway CA made by openssl. The
 * builds are real: npm and pip in the build sandbox.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import { api, json, startServer, tempHome, type TestServer } from './helpers/server.ts';
import { makeCa } from './helpers/tls.ts';
import { callAlgo, createAlgorithm, upload } from './helpers/algorithms.ts';
import { BuildNetwork, fromNpmRegistry, pipIndexOf } from '../src/algorithms/buildNetwork.ts';
import { AddressRule } from '../src/addressRule.ts';
import { loadConfig } from '../src/config.ts';

const work = tempHome('algohost-build-net-');
const servers: Array<{ close(): unknown }> = [];
let caFile: string;
let otherCaFile: string;
let registry: { url: string; seen: Array<{ path: string; auth: string | undefined }> };
let index: { url: string; seen: string[] };
let proxy: { url: string; tunnels: string[] };

async function listen(server: net.Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  servers.push(server);
  return (server.address() as net.AddressInfo).port;
}

/** A pure-Python wheel made with the standard library (PyPI is out of reach here). */
function makeWheel(): Buffer {
  const out = path.join(work, 'tinypkg-1.0-py3-none-any.whl');
  const script = `
import zipfile, sys
files = {
  'tinypkg/__init__.py': 'def shout(s):\\n    return s.upper() + "!"\\n',
  'tinypkg-1.0.dist-info/METADATA': 'Metadata-Version: 2.1\\nName: tinypkg\\nVersion: 1.0\\n',
  'tinypkg-1.0.dist-info/WHEEL': 'Wheel-Version: 1.0\\nGenerator: algohost-test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n',
}
files['tinypkg-1.0.dist-info/RECORD'] = ''.join(name + ',,\\n' for name in list(files) + ['tinypkg-1.0.dist-info/RECORD'])
with zipfile.ZipFile(sys.argv[1], 'w') as z:
    for name, text in files.items():
        z.writestr(name, text)
`;
  execFileSync('/usr/bin/python3', ['-c', script, out], { env: {} });
  return fs.readFileSync(out);
}

before(async () => {
  const main = makeCa(work, 'registry');
  caFile = main.ca;
  otherCaFile = makeCa(work, 'other').ca;
  const tls = { key: fs.readFileSync(main.key), cert: fs.readFileSync(main.cert) };

  // npm registry stand-in: one package, tiny-dep 1.0.0.
  // npm strips the first path component of a package tarball: it must be package/, not ./package/.
  const pkgDir = path.join(work, 'tiny-dep');
  fs.mkdirSync(path.join(pkgDir, 'package'), { recursive: true });
  fs.writeFileSync(path.join(pkgDir, 'package', 'package.json'), JSON.stringify({ name: 'tiny-dep', version: '1.0.0', main: 'index.js' }));
  fs.writeFileSync(path.join(pkgDir, 'package', 'index.js'), 'exports.shout = (s) => String(s).toUpperCase() + "!";\n');
  const tarball = execFileSync('/usr/bin/tar', ['-czf', '-', '-C', pkgDir, 'package']);
  registry = { url: '', seen: [] };
  const reg = https.createServer(tls, (req, res) => {
    registry.seen.push({ path: req.url ?? '', auth: req.headers.authorization });
    const base = `https://${req.headers.host}`;
    if (req.url === '/tiny-dep') {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({
        name: 'tiny-dep',
        'dist-tags': { latest: '1.0.0' },
        versions: {
          '1.0.0': {
            name: 'tiny-dep',
            version: '1.0.0',
            main: 'index.js',
            dist: {
              tarball: `${base}/tiny-dep/-/tiny-dep-1.0.0.tgz`,
              shasum: crypto.createHash('sha1').update(tarball).digest('hex'),
              integrity: `sha512-${crypto.createHash('sha512').update(tarball).digest('base64')}`,
            },
          },
        },
      }));
    } else if (req.url === '/tiny-dep/-/tiny-dep-1.0.0.tgz') {
      res.setHeader('content-type', 'application/octet-stream');
      res.end(tarball);
    } else {
      res.statusCode = 404;
      res.end('{}');
    }
  });
  registry.url = `https://localhost:${await listen(reg)}/`;

  // PEP 503 simple index stand-in: one project, tinypkg 1.0.
  const wheel = makeWheel();
  const wheelSha = crypto.createHash('sha256').update(wheel).digest('hex');
  index = { url: '', seen: [] };
  const idx = https.createServer(tls, (req, res) => {
    index.seen.push(req.url ?? '');
    if (req.url === '/simple/tinypkg/') {
      res.setHeader('content-type', 'text/html');
      res.end(`<!DOCTYPE html><html><body><a href="/files/tinypkg-1.0-py3-none-any.whl#sha256=${wheelSha}">tinypkg-1.0-py3-none-any.whl</a></body></html>`);
    } else if (req.url === '/files/tinypkg-1.0-py3-none-any.whl') {
      res.setHeader('content-type', 'application/octet-stream');
      res.end(wheel);
    } else {
      res.statusCode = 404;
      res.end('not here');
    }
  });
  index.url = `https://127.0.0.1:${await listen(idx)}/simple/`;

  // HTTP CONNECT proxy stand-in: tunnels to loopback only, and says where it went.
  proxy = { url: '', tunnels: [] };
  const px = http.createServer((_req, res) => {
    res.statusCode = 405;
    res.end();
  });
  px.on('connect', (req: http.IncomingMessage, client: net.Socket, head: Buffer) => {
    const [host, port] = (req.url ?? '').split(':');
    if (host !== 'localhost' && host !== '127.0.0.1') {
      client.end('HTTP/1.1 403 Forbidden\r\n\r\n');
      return;
    }
    proxy.tunnels.push(req.url ?? '');
    const upstream = net.connect(Number(port), '127.0.0.1', () => {
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    upstream.on('error', () => client.destroy());
    client.on('error', () => upstream.destroy());
  });
  proxy.url = `http://127.0.0.1:${await listen(px)}`;
});

after(() => {
  for (const s of servers) s.close();
  fs.rmSync(work, { recursive: true, force: true });
});

const JS_SOURCE = {
  'package.json': JSON.stringify({ name: 'usesdep', version: '1.0.0', dependencies: { 'tiny-dep': '^1.0.0' } }),
  'src/UsesDep.js': "const t = require('tiny-dep');\nexports.apply = function (input, cb) { cb(null, t.shout(input)); };\n",
};
const PY_SOURCE = {
  'requirements.txt': 'tinypkg==1.0\n',
  'src/UsesPip.py': 'import tinypkg\n\n\ndef apply(input):\n    return tinypkg.shout(input)\n',
};

/** A server with `env`, user alice, and `name` compiled from `files`: the compile answer and alice's API. */
async function buildWith(env: Record<string, string>, name: string, language: string, files: Record<string, string>) {
  const s: TestServer = await startServer({ env: { ALGOHOST_BUILD_NO_PROXY: '', ...env } });
  servers.push({ close: () => s.close() });
  const call = api(s.url, await s.user('alice'));
  await createAlgorithm(call, 'alice', name, { language });
  assert.equal((await upload(call, 'alice', name, files)).status, 200);
  const started = Date.now();
  const body = await json(await call(`/v1/algorithms/alice/${name}/compile`, { method: 'POST' }));
  return { body, call, seconds: (Date.now() - started) / 1000, server: s };
}

describe('npm', () => {
  test('a registry whose CA the server does not trust: the build fails at once, naming ALGOHOST_BUILD_CA_FILE', async () => {
    const { body, seconds } = await buildWith({ ALGOHOST_BUILD_NPM_REGISTRY: registry.url }, 'UsesDep', 'javascript', JS_SOURCE);
    assert.equal(body.compilation.successful, false);
    assert.match(body.compilation.output, /presents a certificate this server does not trust \((SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT_LOCALLY)\): set ALGOHOST_BUILD_CA_FILE/);
    assert.doesNotMatch(body.compilation.output, /\$ npm install/, 'npm is not started against a registry that cannot work');
    assert.ok(seconds < 15, `said within seconds (${seconds} s)`);
  });

  test('with ALGOHOST_BUILD_CA_FILE the install works, the npmrc token reaches the registry and stays out of the log', async () => {
    const token = `secret-${crypto.randomBytes(8).toString('hex')}`;
    const npmrc = path.join(work, 'npmrc');
    fs.writeFileSync(npmrc, `//localhost:${new URL(registry.url).port}/:_authToken=${token}\n`);
    registry.seen.length = 0;
    const { body, call } = await buildWith({ ALGOHOST_BUILD_NPM_REGISTRY: registry.url, ALGOHOST_BUILD_CA_FILE: caFile, ALGOHOST_BUILD_NPMRC: npmrc }, 'UsesDep', 'javascript', JS_SOURCE);
    assert.equal(body.compilation.successful, true, body.compilation.output);
    const answer = await json(await callAlgo(call, `alice/UsesDep/${body.version_info.git_hash}`, 'hi'));
    assert.equal(answer.result, 'HI!');
    assert.ok(registry.seen.some((r) => r.path === '/tiny-dep' && r.auth === `Bearer ${token}`), JSON.stringify(registry.seen));
    assert.doesNotMatch(body.compilation.output, new RegExp(token));
  });

  test('a CA file that does not sign the registry is named as the one to fix', async () => {
    const { body } = await buildWith({ ALGOHOST_BUILD_NPM_REGISTRY: registry.url, ALGOHOST_BUILD_CA_FILE: otherCaFile }, 'UsesDep', 'javascript', JS_SOURCE);
    assert.equal(body.compilation.successful, false);
    assert.match(body.compilation.output, new RegExp(`ALGOHOST_BUILD_CA_FILE \\(now ${otherCaFile.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\) does not hold the CA that signed it`));
  });

  test('through ALGOHOST_BUILD_HTTPS_PROXY: the install goes through the proxy', async () => {
    proxy.tunnels.length = 0;
    const { body, call } = await buildWith({ ALGOHOST_BUILD_NPM_REGISTRY: registry.url, ALGOHOST_BUILD_CA_FILE: caFile, ALGOHOST_BUILD_HTTPS_PROXY: proxy.url }, 'UsesDep', 'javascript', JS_SOURCE);
    assert.equal(body.compilation.successful, true, body.compilation.output);
    assert.equal((await json(await callAlgo(call, `alice/UsesDep/${body.version_info.git_hash}`, 'yo'))).result, 'YO!');
    const port = new URL(registry.url).port;
    // The check and npm itself both tunnelled to the registry.
    assert.ok(proxy.tunnels.filter((t) => t === `localhost:${port}`).length >= 2, JSON.stringify(proxy.tunnels));
  });

  test('a registry that is not there fails within seconds, naming ALGOHOST_BUILD_NPM_REGISTRY; a proxy that is not there names the proxy setting', async () => {
    const closed = net.createServer();
    const port = await listen(closed);
    closed.close();
    const gone = await buildWith({ ALGOHOST_BUILD_NPM_REGISTRY: `https://127.0.0.1:${port}/` }, 'UsesDep', 'javascript', JS_SOURCE);
    assert.equal(gone.body.compilation.successful, false);
    assert.match(gone.body.compilation.output, /cannot reach the npm registry https:\/\/127\.0\.0\.1:\d+\/ \(ECONNREFUSED\) within 5 s: set ALGOHOST_BUILD_NPM_REGISTRY to one this server can reach, or ALGOHOST_BUILD_HTTPS_PROXY/);
    assert.ok(gone.seconds < 15, `${gone.seconds} s`);
    const noProxy = await buildWith({ ALGOHOST_BUILD_NPM_REGISTRY: registry.url, ALGOHOST_BUILD_HTTPS_PROXY: `http://127.0.0.1:${port}` }, 'UsesDep', 'javascript', JS_SOURCE);
    assert.match(noProxy.body.compilation.output, /cannot reach the proxy http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\) to get to the npm registry .*: check ALGOHOST_BUILD_HTTPS_PROXY/);
  });
});

describe('pip', () => {
  test('an index whose CA is not trusted fails naming ALGOHOST_BUILD_CA_FILE; with it, the install works', async () => {
    const untrusted = await buildWith({ ALGOHOST_BUILD_PIP_INDEX_URL: index.url }, 'UsesPip', 'python3', PY_SOURCE);
    assert.equal(untrusted.body.compilation.successful, false);
    assert.match(untrusted.body.compilation.output, /the Python package index https:\/\/127\.0\.0\.1:\d+\/simple\/ presents a certificate this server does not trust .*ALGOHOST_BUILD_CA_FILE/);

    index.seen.length = 0;
    const { body, call } = await buildWith({ ALGOHOST_BUILD_PIP_INDEX_URL: index.url, ALGOHOST_BUILD_CA_FILE: caFile }, 'UsesPip', 'python3', PY_SOURCE);
    assert.equal(body.compilation.successful, true, body.compilation.output);
    assert.ok(index.seen.includes('/simple/tinypkg/'), JSON.stringify(index.seen));
    assert.equal((await json(await callAlgo(call, `alice/UsesPip/${body.version_info.git_hash}`, 'hey'))).result, 'HEY!');
  });

  test('a pip.conf naming the index is used, and the host\'s pip.conf has its credentials left out', async () => {
    const conf = path.join(work, 'pip.conf');
    fs.writeFileSync(conf, `[global]\nindex-url = ${index.url}\n`);
    const { body } = await buildWith({ ALGOHOST_BUILD_PIP_CONF: conf, ALGOHOST_BUILD_CA_FILE: caFile }, 'UsesPip', 'python3', PY_SOURCE);
    assert.equal(body.compilation.successful, true, body.compilation.output);

    // The host's own (here: PIP_CONFIG_FILE, as the host would set it) is copied without the password.
    const hostConf = path.join(work, 'host-pip.conf');
    fs.writeFileSync(hostConf, `[global]\nindex-url = https://user:hunter2@127.0.0.1:${new URL(index.url).port}/simple/\n`);
    const viaHost = await buildWith({ PIP_CONFIG_FILE: hostConf, ALGOHOST_BUILD_CA_FILE: caFile }, 'UsesPip', 'python3', PY_SOURCE);
    assert.equal(viaHost.body.compilation.successful, true, viaHost.body.compilation.output);
    const copied = fs.readFileSync(path.join(viaHost.server.home, 'build-settings', 'pip.conf'), 'utf8');
    assert.doesNotMatch(copied, /hunter2/);
    assert.match(copied, new RegExp(`index-url = https://127\\.0\\.0\\.1:${new URL(index.url).port}/simple/`));
  });
});

test('which dependencies need a registry, and which index a requirements file names', () => {
  for (const spec of ['^1.0.0', 'latest', '*', 'npm:other@1', '@scope/pkg@1']) assert.equal(fromNpmRegistry(spec), true, spec);
  for (const spec of ['file:./x', 'link:../y', './z', 'git+https://h/r.git', 'github:a/b', 'a/b', 'https://h/p.tgz']) assert.equal(fromNpmRegistry(spec), false, spec);
  assert.equal(pipIndexOf('# nothing\n\n'), undefined);
  assert.equal(pipIndexOf('requests==2\n'), '');
  assert.equal(pipIndexOf('--index-url http://127.0.0.1:9/simple\nsomepackage==1.0\n'), 'http://127.0.0.1:9/simple');
  assert.equal(pipIndexOf('-i=https://mirror/simple\nx\n'), 'https://mirror/simple');
  assert.equal(pipIndexOf('--no-index\n--find-links ./wheels\nx\n'), undefined);
  assert.equal(pipIndexOf('./local_pkg\ngit+https://h/r.git\n'), undefined);
});

test('an index a source names for itself is held to the address rule before the server checks it answers; the operator\'s registries are not', async () => {
  const heard: string[] = [];
  const index = http.createServer((req, res) => {
    heard.push(`${req.method} ${req.url}`);
    res.end('ok');
  });
  await new Promise<void>((r) => index.listen(0, '127.0.0.1', r));
  const home = tempHome();
  try {
    const url = `http://127.0.0.1:${(index.address() as net.AddressInfo).port}/simple/`;
    const rule = await AddressRule.open(loadConfig({}, { ALGOHOST_HOME: home }), { interfaces: () => ['198.51.100.9'] });
    const network = new BuildNetwork(loadConfig({}, { ALGOHOST_HOME: home }).build, path.join(home, 'build-settings'), rule);
    assert.match((await network.check('pip', url, true))!, /^the Python package index the source names was refused by the address rule: 127\.0\.0\.1 is an internal address \(loopback/);
    assert.match((await network.check('pip', 'http://198.51.100.9:9/simple/', true))!, /refused by the address rule: 198\.51\.100\.9 is an address of this server\./);
    assert.deepEqual(heard, [], 'the server connected to an index the rule refuses');
    // The operator's own (ALGOHOST_BUILD_PIP_INDEX_URL, a pip.conf): a registry on the host is theirs to name.
    assert.equal(await network.check('pip', url), undefined);
    assert.deepEqual(heard, ['GET /simple/']);
  } finally {
    await new Promise((r) => index.close(r));
    fs.rmSync(home, { recursive: true, force: true });
  }
});

test('a sandboxed build step finds the CA file and .npmrc at /etc/algohost, named so in its environment: nothing of the home', async () => {
  const home = tempHome();
  try {
    const npmrc = path.join(home, 'operator-npmrc');
    fs.writeFileSync(npmrc, 'registry=https://registry.example/\n');
    const config = loadConfig({}, { ALGOHOST_HOME: home, ALGOHOST_BUILD_CA_FILE: caFile, ALGOHOST_BUILD_NPMRC: npmrc }).build;
    const network = new BuildNetwork(config, path.join(home, 'build-settings'));
    const inSandbox = await network.setup('npm');
    assert.equal(inSandbox.env.NPM_CONFIG_CAFILE, '/etc/algohost/ca.pem');
    assert.equal(inSandbox.env.NPM_CONFIG_USERCONFIG, '/etc/algohost/npmrc');
    assert.deepEqual(Object.values(inSandbox.binds).sort(), ['/etc/algohost/ca.pem', '/etc/algohost/npmrc']);
    assert.ok(Object.keys(inSandbox.binds).every((f) => f.startsWith(path.join(home, 'build-settings'))));
    assert.ok(!JSON.stringify(inSandbox.env).includes(home), JSON.stringify(inSandbox.env));
    // Without a sandbox (ALGOHOST_UNSANDBOXED) the files are where they are.
    assert.equal((await network.setup('npm', false)).env.NPM_CONFIG_CAFILE, path.join(home, 'build-settings', 'ca.pem'));
  } finally {
    fs.rmSync(home, { recursive: true, force: true });
  }
});

test('a setting that names a missing file, or a CA file with no certificate, stops the server at start', async () => {
  const { loadConfig } = await import('../src/config.ts');
  assert.throws(() => loadConfig({}, { ALGOHOST_BUILD_CA_FILE: path.join(work, 'nope.pem') }), /ALGOHOST_BUILD_CA_FILE must name a readable file/);
  const notPem = path.join(work, 'not.pem');
  fs.writeFileSync(notPem, 'hello');
  assert.throws(() => loadConfig({}, { ALGOHOST_BUILD_CA_FILE: notPem }), /must hold PEM certificates/);
  assert.throws(() => loadConfig({}, { ALGOHOST_BUILD_NPMRC: path.join(work, 'nope') }), /ALGOHOST_BUILD_NPMRC must name a readable file/);
  assert.throws(() => loadConfig({}, { ALGOHOST_BUILD_NPM_REGISTRY: 'ftp://x' }), /ALGOHOST_BUILD_NPM_REGISTRY must be an http/);
  // The host's own settings are the defaults: its npmrc (credentials left out) and proxies.
  const home = path.join(work, 'hosthome');
  fs.mkdirSync(home, { recursive: true });
  fs.writeFileSync(path.join(home, '.npmrc'), 'registry=https://npm.example.com/\n//npm.example.com/:_authToken=abc\n');
  const c = loadConfig({}, { HOME: home, HTTPS_PROXY: 'http://proxy.example:3128', no_proxy: 'localhost' }).build;
  assert.deepEqual(c.npmrc, { file: path.join(home, '.npmrc'), sanitize: true });
  assert.equal(c.httpsProxy, 'http://proxy.example:3128');
  assert.equal(c.noProxy, 'localhost');
});
