import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { Writable } from 'node:stream';
import pino from 'pino';
import { buildApp, LOG_OPTIONS } from '../src/app.ts';
import { loadConfig } from '../src/config.ts';
import type { FastifyInstance } from 'fastify';
import { createServices, type Services } from '../src/services.ts';
import { api, tempHome } from './helpers/server.ts';
import { release } from './helpers/algorithms.ts';

/** A server on port 0 whose log lines (at `level`) are collected; stopped and removed after `run`. */
async function withLoggedServer(
  level: string,
  env: Record<string, string>,
  run: (o: { url: string; services: Services; app: FastifyInstance; lines: string[] }) => Promise<void>,
): Promise<void> {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      lines.push(String(chunk));
      done();
    },
  });
  const home = tempHome();
  const services = await createServices(loadConfig({ home, port: '0', demo: false }, env));
  const app = buildApp(services, { logger: pino({ level, ...LOG_OPTIONS }, sink) });
  try {
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    await run({ url, services, app, lines });
  } finally {
    await app.close();
    await services.close();
    fs.rmSync(home, { recursive: true, force: true });
  }
}

test('no log line contains an API key, even at trace level and on errors', async () => {
  await withLoggedServer('trace', {}, async ({ url, services, lines }) => {
    const { apiKey } = await services.users.create('alice');
    const auth = { authorization: `Simple ${apiKey}` };
    await fetch(`${url}/v1/data/.my`, { method: 'POST', headers: { ...auth, 'content-type': 'text/plain' }, body: 'c' });
    await fetch(`${url}/v1/data/.my/c/f`, { method: 'PUT', headers: auth, body: 'x' });
    await fetch(`${url}/v1/data/.my/c/nope`, { headers: auth });
    const created = (await (
      await fetch(`${url}/v1/users/alice/keys`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: '{"name":"k2"}' })
    ).json()) as { api_key: string };
    assert.match(created.api_key, /^sim/);
    await fetch(`${url}/v1/data/.my`, { headers: { authorization: `Bearer ${created.api_key}` } });
    await fetch(`${url}/v1/data/.my`, { headers: { authorization: `Simple ${apiKey.slice(0, -1)}X` } });
    await fetch(`${url}/v1/data/.my`, { headers: { authorization: apiKey } });
    // Connected accounts' credentials: on create, on a change, and on a refused request.
    const credSecret = 'S3CRET-never-logged-0123456789';
    const connect = (method: string, path: string, body: unknown) =>
      fetch(`${url}/v1/users/alice/connectors${path}`, { method, headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify(body) });
    assert.equal((await connect('POST', '', { label: 's', protocol: 'objstore', cred_data: { access_key_id: 'AK', secret_access_key: credSecret } })).status, 201);
    assert.equal((await connect('PATCH', '/s', { cred_data: { secret_access_key: `${credSecret}-2` } })).status, 200);
    assert.equal((await connect('POST', '', { label: 'bad label', protocol: 'objstore', cred_data: { access_key_id: 'AK', secret_access_key: credSecret } })).status, 400);
    const log = lines.join('');
    assert.equal(log.includes(credSecret), false, 'a connected account\'s secret appears in the log');
    assert.ok(lines.length >= 14, `requests were logged (${lines.length} lines)`);
    assert.ok(log.includes('/v1/data/.my/c/f'), 'the log has the request lines');
    for (const secret of [apiKey, created.api_key, apiKey.slice(0, -1) + 'X']) {
      assert.equal(log.includes(secret), false, 'a key appears in the log');
      assert.equal(log.includes(secret.slice(3)), false, 'part of a key appears in the log');
    }
  });
});

test('a download ticket in a URL is redacted from request lines', async () => {
  await withLoggedServer('info', {}, async ({ url, services, lines }) => {
    const { apiKey } = await services.users.create('alice');
    await services.sessions.setPassword('alice', 'alice password');
    const auth = { authorization: `Simple ${apiKey}` };
    await fetch(`${url}/v1/data/.my`, { method: 'POST', headers: { ...auth, 'content-type': 'text/plain' }, body: 'c' });
    await fetch(`${url}/v1/data/.my/c/f`, { method: 'PUT', headers: auth, body: 'bytes' });
    const signedIn = await fetch(`${url}/v1/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"username":"alice","password":"alice password"}' });
    assert.equal(signedIn.status, 200);
    const cookie = signedIn.headers.get('set-cookie')!.split(';')[0]!;
    const { csrf_token: csrf } = (await signedIn.json()) as { csrf_token: string };
    const asked = await fetch(`${url}/v1/session/downloads`, { method: 'POST', headers: { cookie, 'x-csrf-token': csrf, 'content-type': 'application/json' }, body: '{"path":"/v1/data/.my/c/f"}' });
    assert.equal(asked.status, 200);
    const link = ((await asked.json()) as { url: string }).url;
    const ticket = new URL(link, url).searchParams.get('download')!;
    assert.ok(ticket.length > 20, link);
    const got = await fetch(new URL(link, url), { headers: { cookie } });
    assert.equal(got.status, 200);
    assert.equal(await got.text(), 'bytes');
    // A ticket among other parameters, and a bare ?download, which is no credential.
    assert.equal((await fetch(`${url}/v1/data/.my/c/f?x=1&download=${ticket}&y=2`, { method: 'HEAD', headers: { cookie } })).status, 200);
    assert.equal((await fetch(`${url}/v1/data/.my/c/f?download`, { headers: auth })).status, 200);
    const log = lines.join('');
    assert.equal(log.includes(ticket), false, 'a ticket appears in the log');
    assert.equal(log.includes(ticket.split('.')[1]!), false, 'a ticket\'s MAC appears in the log');
    assert.ok(log.includes('"url":"/v1/data/.my/c/f?download=[Redacted]"'), log);
    assert.ok(log.includes('"url":"/v1/data/.my/c/f?x=1&download=[Redacted]&y=2"'), log);
    assert.ok(log.includes('"url":"/v1/data/.my/c/f?download"'), log);
  });
});

test('a request the HTTP parser refuses is logged with the id its answer carries, and without its Authorization', async () => {
  await withLoggedServer('info', {}, async ({ url, services, lines }) => {
    const { apiKey } = await services.users.create('alice');
    const { port } = new URL(url);
    const answer = await new Promise<string>((resolve, reject) => {
      const chunks: Buffer[] = [];
      const socket = net.connect({ host: '127.0.0.1', port: Number(port) }, () =>
        socket.write(`GET /v1/user HTTP/1.1\r\nHost: x\r\nAuthorization: Simple ${apiKey}\r\nRange: bytes=\x7f\r\n\r\n`));
      socket.on('data', (c: Buffer) => chunks.push(c));
      socket.on('error', reject);
      socket.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
    });
    const id = (JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as { error: { id: string } }).error.id;
    const line = lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.reqId === id);
    assert.ok(line, `a log line with the answer's id ${id}:\n${lines.join('')}`);
    assert.equal(line.code, 'malformed_request');
    assert.equal(line.parserError, 'HPE_INVALID_HEADER_TOKEN');
    assert.equal(line.remoteAddress, '127.0.0.1');
    assert.equal(lines.join('').includes(apiKey.slice(3)), false, 'the key appears in the log');
  });
});

test('request lines log the client behind a proxy named in ALGOHOST_TRUST_PROXY, on the fastify and the direct path, and the TCP peer otherwise', async () => {
  // The test's connections come from loopback: trusted as `loopback`, a client past 10.0.0.1.
  for (const trust of ['loopback', '10.0.0.1', undefined]) {
    const trusted = trust === 'loopback';
    await withLoggedServer('info', trust ? { ALGOHOST_TRUST_PROXY: trust } : {}, async ({ url, services, app, lines }) => {
      const { apiKey } = await services.users.create('alice');
      const alice = api(url, apiKey);
      await release(alice, 'alice', 'Echo', { 'src/Echo.js': 'export function apply(input) { return input; }\n' }, { settings: { language: 'javascript' } });
      const from = (client: string) => ({ 'x-forwarded-for': `192.0.2.1, ${client}`, 'x-forwarded-host': 'algo.example' });
      const before = app.directCalls.answered;
      const called = await alice('/v1/algo/alice/Echo', { method: 'POST', headers: { 'content-type': 'text/plain', ...from('203.0.113.9') }, body: 'hi' });
      assert.equal(called.status, 200);
      assert.equal(app.directCalls.answered - before, 1, 'the call took the direct path');
      assert.equal((await alice('/v1/data/.my', { headers: from('203.0.113.10') })).status, 200);
      const arrived = lines.map((l) => JSON.parse(l) as { msg: string; req?: { url: string; remoteAddress: string; host: string } }).filter((l) => l.msg === 'incoming request');
      const logged = (u: string) => arrived.find((l) => l.req!.url === u)?.req;
      const host = new URL(url).host;
      assert.deepEqual(logged('/v1/algo/alice/Echo'), { ...logged('/v1/algo/alice/Echo'), remoteAddress: trusted ? '203.0.113.9' : '127.0.0.1', host: trusted ? 'algo.example' : host }, trust);
      assert.deepEqual(logged('/v1/data/.my'), { ...logged('/v1/data/.my'), remoteAddress: trusted ? '203.0.113.10' : '127.0.0.1', host: trusted ? 'algo.example' : host }, trust);
    });
  }
});
