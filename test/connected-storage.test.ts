/**
 * What connected accounts add to the data API (issue 4), over real HTTP against a real S3
 * protocol server (s3rver) on loopback: URI spellings and labels, the account's path
 * restriction, read-only accounts, no ACLs, key permissions, provider failures mapped to
 * errors that name the account and never its credentials, the operator's egress rule, and
 * algorithms reaching their caller's accounts through the SDK.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import os from 'node:os';
import { Writable } from 'node:stream';
import pino from 'pino';
import algorithmia from 'algorithmia';
import { api, json, startServer, tempHome, type TestServer } from './helpers/server.ts';
import { connectAccount } from './helpers/connectors.ts';
import { rawRequest } from './helpers/raw.ts';
import { S3RVER_KEY, startS3, type S3Server } from './helpers/s3.ts';
import { callAlgo, release } from './helpers/algorithms.ts';
import { rcloneMissing, startWebDav } from './helpers/webdav.ts';
import { startDropboxStandIn } from './helpers/dropboxStandIn.ts';
import { AddressRule, isInternalAddress } from '../src/addressRule.ts';
import { ownListener, type OwnListener } from './helpers/ownAddress.ts';
import { RemoteError } from '../src/data/connectors/remote.ts';
import { S3Storage } from '../src/data/connectors/s3.ts';
import { WebDavStorage } from '../src/data/connectors/webdav.ts';
import { buildApp, LOG_OPTIONS } from '../src/app.ts';
import { loadConfig } from '../src/config.ts';
import { createServices } from '../src/services.ts';

let s3: S3Server;
let s: TestServer;
let alice: ReturnType<typeof api>;
let aliceKey: string;
let bob: ReturnType<typeof api>;

const json200 = async (res: Promise<Response>) => {
  const r = await res;
  const body = await json(r);
  assert.equal(r.status, 200, JSON.stringify(body));
  return body;
};
const code = async (res: Promise<Response>, status: number, expected: string) => {
  const r = await res;
  const body = await json(r);
  assert.equal(r.status, status, JSON.stringify(body));
  assert.equal(body.error.code, expected, JSON.stringify(body));
  return body.error.message as string;
};

before(async () => {
  s3 = await startS3(['bkt', 'other']);
  s = await startServer({ env: { ALGOHOST_CONNECTOR_NETWORK: 'any' } });
  aliceKey = await s.user('alice');
  alice = api(s.url, aliceKey);
  bob = api(s.url, await s.user('bob'));
  const creds = { endpoint: s3.endpoint, ...S3RVER_KEY, force_path_style: true };
  await connectAccount(s, 'alice', aliceKey, { label: 'store', protocol: 'objstore', writeable: true, cred_data: creds });
  await connectAccount(s, 'alice', aliceKey, { label: 'ro', protocol: 'objstore', cred_data: creds });
  await connectAccount(s, 'alice', aliceKey, { label: 'fenced', protocol: 'objstore', writeable: true, path: 'bkt/allowed/*', cred_data: creds });
  await json200(alice('/v1/connector/objstore/bkt/allowed/in.txt', { method: 'PUT', body: 'inside' }));
  await json200(alice('/v1/connector/objstore/bkt/outside.txt', { method: 'PUT', body: 'outside' }));
});
after(async () => {
  await s?.close();
  await s3?.stop();
});

test('every spelling of a connected account reaches it: objstore/s3, +label, any case, both routes, collapsed slashes', async () => {
  assert.deepEqual(await json200(alice('/v1/data/objstore+store://bkt/spell.txt', { method: 'PUT', body: 'spelled' })), { result: 'objstore+store://bkt/spell.txt' });
  for (const path of [
    '/v1/data/objstore://bkt/spell.txt',
    '/v1/data/S3+Store:/bkt/spell.txt',
    '/v1/data/s3://bkt/spell.txt',
    '/v1/connector/OBJSTORE+store/bkt/spell.txt',
    '/api/v1/connector/s3/bkt/spell.txt',
    '/v1/data/objstore%2Bstore%3A%2F%2Fbkt%2Fspell.txt',
  ]) {
    const r = await alice(path);
    assert.equal(r.status, 200, path);
    assert.equal(await r.text(), 'spelled', path);
  }
  // The root of an objstore account lists its buckets.
  const root = await json200(alice('/v1/connector/objstore/'));
  assert.deepEqual(root.folders.map((f: { name: string }) => f.name), ['bkt', 'other']);
});

test('unknown labels, missing defaults and other users\' accounts are 404 unknown_connector, saying what to do', async () => {
  let message = await code(alice('/v1/connector/objstore+nope/bkt'), 404, 'unknown_connector');
  assert.match(message, /labelled "nope"/);
  message = await code(alice('/v1/data/filehost://x'), 404, 'unknown_connector');
  assert.match(message, /no default filehost account.*connectors/);
  await code(bob('/v1/connector/objstore+store/bkt/spell.txt'), 404, 'unknown_connector');
  await code(alice('/v1/connector/data+store/x'), 404, 'unknown_connector');
});

test('an account\'s path restriction cannot be escaped', async () => {
  assert.equal(await (await alice('/v1/connector/objstore+fenced/bkt/allowed/in.txt')).text(), 'inside');
  await json200(alice('/v1/connector/objstore+fenced/bkt/allowed'));
  for (const path of ['bkt/outside.txt', 'bkt', '', 'other', 'bkt/allowedX/in.txt', 'bkt/ALLOWED/in.txt']) {
    const message = await code(alice(`/v1/connector/objstore+fenced/${path}`), 403, 'forbidden');
    assert.match(message, /exposes only bkt\/allowed\/\*/);
  }
  // Sent exactly as written (fetch would resolve the dot segments before sending).
  for (const path of ['bkt/allowed/../outside.txt', 'bkt/allowed/%2e%2e/outside.txt', 'bkt/allowed/.%2E/outside.txt', 'bkt%2Fallowed%2F..%2Foutside.txt', 'bkt/allowed/./../outside.txt']) {
    for (const prefix of ['/v1/connector/objstore+fenced/', '/v1/data/objstore+fenced://']) {
      const r = await rawRequest(s.url, 'GET', prefix + path, { headers: { authorization: `Simple ${aliceKey}` } });
      assert.equal(r.status, 400, `${prefix}${path}: ${r.body}`);
      assert.equal(JSON.parse(r.body).error.code, 'invalid_path');
    }
  }
  await code(alice('/v1/connector/objstore+fenced/bkt/escape.txt', { method: 'PUT', body: 'x' }), 403, 'forbidden');
  await code(alice('/v1/connector/objstore+fenced/bkt/allowed?force=true', { method: 'DELETE' }), 403, 'forbidden');
  assert.equal((await alice('/v1/connector/objstore/bkt/escape.txt', { method: 'HEAD' })).status, 404, 'nothing was written outside');
  await json200(alice('/v1/connector/objstore+fenced/bkt/allowed/new.txt', { method: 'PUT', body: 'ok' }));
});

test('a read-only account refuses every change and changes nothing', async () => {
  assert.equal(await (await alice('/v1/connector/objstore+ro/bkt/outside.txt')).text(), 'outside');
  const message = await code(alice('/v1/connector/objstore+ro/bkt/outside.txt', { method: 'PUT', body: 'changed' }), 403, 'write_denied');
  assert.match(message, /"ro" is read-only.*writeable/);
  await code(alice('/v1/connector/objstore+ro/bkt/outside.txt', { method: 'DELETE' }), 403, 'write_denied');
  await code(alice('/v1/connector/objstore+ro/bkt', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"name":"made"}' }), 403, 'write_denied');
  assert.equal(await (await alice('/v1/connector/objstore/bkt/outside.txt')).text(), 'outside');
  assert.equal((await alice('/v1/connector/objstore/bkt/made', { method: 'HEAD' })).status, 404);
});

test('buckets are neither made nor deleted through an account', async () => {
  const made = await code(alice('/v1/connector/objstore/', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"name":"newbucket"}' }), 400, 'invalid_path');
  assert.match(made, /buckets are not created through a connected account/);
  const gone = await code(alice('/v1/connector/objstore/other?force=true', { method: 'DELETE' }), 400, 'invalid_path');
  assert.match(gone, /buckets are not deleted/);
  const root = await json200(alice('/v1/connector/objstore/'));
  assert.deepEqual(root.folders.map((f: { name: string }) => f.name), ['bkt', 'other']);
});

test('connectors carry no ACLs: asking for one is a clear 400', async () => {
  await code(alice('/v1/connector/objstore/bkt?acl=true'), 400, 'acl_not_supported');
  await code(alice('/v1/connector/objstore/bkt/allowed', { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: '{"acl":{"read":[]}}' }), 400, 'acl_not_supported');
  await code(alice('/v1/connector/objstore/bkt', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"name":"withacl","acl":{"read":["user://*"]}}' }), 400, 'acl_not_supported');
});

test('a key\'s allow_data and allow_data_write hold for connectors as for hosted data', async () => {
  const mk = async (name: string, permissions: Record<string, boolean>) =>
    (await json(await alice('/v1/users/alice/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name, permissions }) }))).api_key as string;
  const reader = api(s.url, await mk('reader', { allow_data_write: false }));
  const blind = api(s.url, await mk('blind', { allow_data: false, allow_data_write: false }));
  assert.equal(await (await reader('/v1/connector/objstore/bkt/outside.txt')).text(), 'outside');
  await code(reader('/v1/connector/objstore/bkt/outside.txt', { method: 'PUT', body: 'x' }), 403, 'key_permission_denied');
  await code(blind('/v1/connector/objstore/bkt/outside.txt'), 403, 'key_permission_denied');
});

test('an algorithm reads and writes its caller\'s connected accounts through the SDK', async () => {
  await release(alice, 'alice', 'Copier', {
    'src/index.js': `export async function apply(input, ctx) {
  const text = await ctx.client.file(input.from).getString();
  await ctx.client.file(input.to).put(text.toUpperCase());
  const names = [];
  for await (const e of ctx.client.dir(input.dir).list()) names.push(e.name);
  return { text, names: names.sort() };
}
`,
  }, { settings: { language: 'javascript', algorithm_callability: 'public' } });
  const input = JSON.stringify({ from: 's3+store://bkt/allowed/in.txt', to: 'objstore://bkt/allowed/upper.txt', dir: 'objstore+store://bkt/allowed' });
  const out = await json(await callAlgo(alice, 'alice/Copier', input, 'application/json'));
  assert.equal(out.error, undefined, JSON.stringify(out));
  assert.equal(out.result.text, 'inside');
  assert.ok(out.result.names.includes('upper.txt') && out.result.names.includes('in.txt'), JSON.stringify(out.result));
  assert.equal(await (await alice('/v1/connector/objstore/bkt/allowed/upper.txt')).text(), 'INSIDE');
  // Bob calling the same algorithm reaches Bob's accounts, and he has none.
  const bobs = await json(await callAlgo(bob, 'alice/Copier', input, 'application/json'));
  assert.ok(bobs.error, 'bob has no objstore account');
  assert.match(bobs.error.message, /no objstore account|no default objstore account|unknown_connector/);
});

test('a Python algorithm reaches its caller\'s connected account too (import Algorithmia)', async () => {
  await release(alice, 'alice', 'PyCopier', {
    'src/PyCopier.py': `import Algorithmia

def apply(input):
    client = Algorithmia.client()
    text = client.file(input['from']).getString()
    client.file(input['to']).put(text[::-1])
    names = sorted(f.path.rsplit('/', 1)[-1] for f in client.dir(input['dir']).files())
    return {'text': text, 'names': names}
`,
  }, { settings: { language: 'python3', algorithm_callability: 'public' } });
  const input = JSON.stringify({ from: 'objstore+store://bkt/allowed/in.txt', to: 's3://bkt/allowed/py.txt', dir: 'objstore://bkt/allowed' });
  const out = await json(await callAlgo(alice, 'alice/PyCopier', input, 'application/json'));
  assert.equal(out.error, undefined, JSON.stringify(out));
  assert.equal(out.result.text, 'inside');
  assert.ok(out.result.names.includes('py.txt'), JSON.stringify(out.result));
  assert.equal(await (await alice('/v1/connector/objstore/bkt/allowed/py.txt')).text(), 'edisni');
});

test('the official npm client (algorithmia 0.3.10) reaches a connected account with an s3+label:// URI', async () => {
  const client = algorithmia.client(aliceKey, s.url);
  // It sends the URI untranslated: PUT /v1/data/s3+store://bkt/npm/hello.txt
  const put = await new Promise<{ body: unknown; status: number }>((resolve) =>
    client.file('s3+store://bkt/npm/hello.txt').put('from npm', (body, status) => resolve({ body, status })),
  );
  assert.equal(put.status, 200, JSON.stringify(put.body));
  assert.equal((put.body as { result: string }).result, 's3+store://bkt/npm/hello.txt');
  const got = await new Promise<{ err: unknown; data: unknown }>((resolve) => client.file('s3+store://bkt/npm/hello.txt').get((err, data) => resolve({ err, data })));
  assert.equal(got.err, null);
  assert.equal(String(got.data), 'from npm');
  const found = await new Promise<boolean>((resolve) => client.file('s3+store://bkt/npm/hello.txt').exists((e) => resolve(e)));
  assert.equal(found, true);
  assert.equal(await (await alice('/v1/connector/objstore/bkt/npm/hello.txt')).text(), 'from npm');
});

describe('provider failures', () => {
  let silent: net.Server;
  const sockets: net.Socket[] = [];
  const lines: string[] = [];
  let url: string;
  let key: string;
  let close: () => Promise<void>;
  const SECRET = 'never-shown-Secret-0123456789abcdef';
  let dav: Awaited<ReturnType<typeof startWebDav>> | undefined;
  let dropbox: Awaited<ReturnType<typeof startDropboxStandIn>> | undefined;

  before(async () => {
    silent = net.createServer((sock) => sockets.push(sock));
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const closed = net.createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const closedPort = (closed.address() as net.AddressInfo).port;
    await new Promise((r) => closed.close(r));

    dav = rcloneMissing() ? undefined : await startWebDav({ user: 'carol', pass: 'the-right-password' });
    dropbox = await startDropboxStandIn({ token: 'sl.the-right-token' });
    const home = tempHome();
    const services = await createServices(
      loadConfig(
        { home, port: '0', demo: false },
        { ALGOHOST_CONNECTOR_NETWORK: 'any', ALGOHOST_CONNECTOR_TIMEOUT_MS: '500', ALGOHOST_DROPBOX_API_URL: dropbox.apiUrl, ALGOHOST_DROPBOX_CONTENT_URL: dropbox.contentUrl },
      ),
    );
    const sink = new Writable({ write: (chunk, _e, done) => (lines.push(String(chunk)), done()) });
    const app = buildApp(services, { logger: pino({ level: 'trace', ...LOG_OPTIONS }, sink) });
    url = await app.listen({ port: 0, host: '127.0.0.1' });
    key = (await services.users.create('carol')).apiKey;
    close = async () => {
      await app.close();
      await services.close();
    };
    const server = { url, services, app } as unknown as TestServer;
    const connect = (label: string, endpoint: string, extra: Record<string, string> = {}) =>
      connectAccount(server, 'carol', key, { label, protocol: 'objstore', cred_data: { endpoint, access_key_id: 'S3RVER', secret_access_key: SECRET, force_path_style: true, ...extra } });
    await connect('down', `http://127.0.0.1:${closedPort}`);
    await connect('mute', `http://127.0.0.1:${(silent.address() as net.AddressInfo).port}`);
    await connect('wrongkey', s3.endpoint, { access_key_id: 'NOT-A-KEY-ID' });
    if (dav) await connectAccount(server, 'carol', key, { label: 'davbad', protocol: 'filehost', provider: 'webdav', cred_data: { url: dav.url, username: 'carol', password: SECRET } });
    await connectAccount(server, 'carol', key, { label: 'boxbad', protocol: 'filehost', provider: 'dropbox', cred_data: { access_token: SECRET } });
  });
  after(async () => {
    await close?.();
    await dav?.stop();
    await dropbox?.stop();
    for (const sock of sockets) sock.destroy();
    await new Promise((r) => silent.close(r));
  });

  test('unreachable → 502, silent → 504, refused credentials → 403; each names the account, none shows a secret', async () => {
    const carol = api(url, key);
    let message = await code(carol('/v1/connector/objstore+down/bkt/x.txt'), 502, 'connector_unreachable');
    assert.match(message, /"down" could not be reached.*ECONNREFUSED/);
    const started = Date.now();
    message = await code(carol('/v1/connector/objstore+mute/bkt/x.txt'), 504, 'connector_timeout');
    assert.match(message, /"mute" did not answer/);
    assert.ok(Date.now() - started < 10_000, 'the timeout is the configured one, not a socket default');
    message = await code(carol('/v1/connector/objstore+wrongkey/bkt/x.txt'), 403, 'connector_denied');
    assert.match(message, /"wrongkey" was refused by its provider \(HTTP 403\); check the account's credentials/);
    const head = await carol('/v1/connector/objstore+wrongkey/bkt/x.txt', { method: 'HEAD' });
    assert.equal(head.status, 403);
    let everything = lines.join('') + message + (head.headers.get('x-error-message') ?? '');
    // A wrong WebDAV password and a wrong Dropbox token: refused, named, and not repeated.
    if (dav) {
      const m = await code(carol('/v1/data/filehost+davbad://x.txt'), 403, 'connector_denied');
      assert.match(m, /"davbad" was refused by its provider/);
      everything += m;
    }
    const m = await code(carol('/v1/data/dropbox+boxbad://x.txt'), 403, 'connector_denied');
    assert.match(m, /"boxbad" was refused by its provider/);
    everything += m + lines.join('');
    assert.ok(lines.length > 0, 'the log was captured');
    assert.equal(everything.includes(SECRET), false, 'the secret appears in a response or the log');
    assert.equal(everything.includes(SECRET.slice(6, 26)), false, 'part of the secret appears in a response or the log');
  });
});

test('by default accounts may not point at the server\'s own network, its public addresses included (ALGOHOST_CONNECTOR_NETWORK=public)', async (t) => {
  const guarded = await startServer();
  let mine: OwnListener | string | undefined;
  try {
    const key = await guarded.user('dave');
    await connectAccount(guarded, 'dave', key, { label: 'local', protocol: 'objstore', cred_data: { endpoint: s3.endpoint, ...S3RVER_KEY } });
    const message = await code(api(guarded.url, key)('/v1/connector/objstore/bkt/outside.txt'), 403, 'connector_address_refused');
    assert.match(message, /^the account "local" was refused by the address rule: 127\.0\.0\.1 is an internal address \(loopback.*ALGOHOST_CONNECTOR_NETWORK=any/);

    // The finding (issue 36): a WebDAV account made the server send PROPFIND to a listener on
    // the node's own public address, and its errors told what answered. This machine is given
    // such an address (198.51.100.214 on an interface of the test's own: no range refuses it).
    mine = await ownListener('198.51.100.214');
    if (typeof mine === 'string') return t.skip(mine);
    const endpoint = mine.url;
    await connectAccount(guarded, 'dave', key, { label: 'ownS3', protocol: 'objstore', cred_data: { endpoint, ...S3RVER_KEY } });
    await connectAccount(guarded, 'dave', key, { label: 'ownDav', protocol: 'filehost', provider: 'webdav', cred_data: { url: `${endpoint}/dav/` } });
    for (const [label, path] of [['ownS3', '/v1/connector/objstore+ownS3/bkt/x.txt'], ['ownDav', '/v1/connector/filehost+ownDav/x.txt']] as const) {
      const refused = await code(api(guarded.url, key)(path), 403, 'connector_address_refused');
      assert.match(refused, new RegExp(`^the account "${label}" was refused by the address rule: 198\\.51\\.100\\.214 is an address of this server\\.`));
      assert.doesNotMatch(refused, /501|Unsupported|ECONNREFUSED|Parse Error/);
    }
    assert.deepEqual(mine.heard, [], 'the listener on the server\'s own address was reached');
  } finally {
    if (typeof mine === 'object') await mine.close();
    await guarded.close();
  }
  for (const internal of ['127.0.0.1', '10.1.2.3', '172.20.0.1', '192.168.1.1', '169.254.169.254', '100.64.0.1', '0.0.0.0', '::1', '::', 'fd00::1', 'fe80::1', '::ffff:127.0.0.1', '::ffff:169.254.169.254']) {
    assert.equal(isInternalAddress(internal), true, internal);
  }
  for (const external of ['8.8.8.8', '1.1.1.1', '172.32.0.1', '2606:4700:4700::1111', '::ffff:8.8.8.8']) {
    assert.equal(isInternalAddress(external), false, external);
  }
});

test('with the public-only rule, every new connection is checked: a name that resolves to an internal address is refused at connect time', async () => {
  // "localhost" stands for a name that resolved to a public address when the account's client
  // was made and to an internal one later (DNS rebinding): only the lookup at connect time sees it.
  const port = new URL(s3.endpoint).port;
  const { lookup } = await AddressRule.open(loadConfig({}, { ALGOHOST_HOME: os.tmpdir() }));
  const providers = [
    new S3Storage({ endpoint: `http://localhost:${port}`, ...S3RVER_KEY, force_path_style: true }, { lookup }),
    new WebDavStorage({ url: `http://localhost:${port}/`, lookup }),
  ];
  for (const provider of providers) {
    const err = await provider.stat(['bkt', 'outside.txt'], AbortSignal.timeout(5000)).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(err instanceof RemoteError, `${provider.constructor.name}: expected a RemoteError, got ${String(err)}`);
    assert.equal(err.kind, 'address_refused');
    assert.match(err.message, /^refused by the address rule: localhost resolved to (127\.0\.0\.1|::1), an internal address \(loopback/);
  }
  // The same providers without the rule reach it.
  assert.deepEqual(await new S3Storage({ endpoint: `http://localhost:${port}`, ...S3RVER_KEY, force_path_style: true }).stat(['bkt'], AbortSignal.timeout(5000)), { kind: 'dir' });
});
