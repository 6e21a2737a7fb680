/** How ALGOHOST_NATS_URL and the files beside it become nats.js's connection options (src/cluster/nats.ts). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { natsOptions, redactNatsUrl } from '../src/cluster/nats.ts';
import { ConfigError, loadConfig } from '../src/config.ts';

const none = { creds: undefined, ca: undefined, cert: undefined, key: undefined };

test('a user and password, or a token, in the URL go to the client as credentials, never in the server list (nats.js does not read them there)', () => {
  const withPassword = natsOptions('tls://algohost-api:s%40cret@nats.internal:4222,tls://algohost-api:s%40cret@nats2.internal:4222', none, 'n', 'api');
  assert.deepEqual(withPassword.servers, ['tls://nats.internal:4222', 'tls://nats2.internal:4222']);
  assert.equal(withPassword.user, 'algohost-api');
  assert.equal(withPassword.pass, 's@cret');
  assert.deepEqual(withPassword.tls, {});
  assert.equal(withPassword.inboxPrefix, '_INBOX_api');
  const withToken = natsOptions('nats://t0ken@127.0.0.1:4222', none, 'n', 'worker');
  assert.equal(withToken.token, 't0ken');
  assert.equal(withToken.user, undefined);
  assert.equal(withToken.tls, undefined);
  assert.equal(withToken.inboxPrefix, '_INBOX_worker');
  assert.equal(natsOptions('nats://127.0.0.1:4222', none, 'n', 'admin').token, undefined);
});

test('servers with different credentials, or a creds file beside URL credentials, are refused in one line', () => {
  assert.throws(() => natsOptions('nats://a:b@h1:4222,nats://a:c@h2:4222', none, 'n', 'api'), (e: Error) => e instanceof ConfigError && /same credentials/.test(e.message));
  assert.throws(() => natsOptions('nats://a:b@h1:4222,nats://h2:4222', none, 'n', 'api'), /same credentials/);
  assert.throws(() => natsOptions('nats://a:%E0%A4%A@h:4222', none, 'n', 'api'), (e: Error) => e instanceof ConfigError && /percent-encoding/.test(e.message));
  assert.throws(() => natsOptions('nats://:secret@h:4222', none, 'n', 'api'), /needs a user name/);
  // A user name with an encoded ':' stays whole.
  const colon = natsOptions('nats://a%3Ab:c@h:4222', none, 'n', 'api');
  assert.deepEqual([colon.user, colon.pass], ['a:b', 'c']);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-nats-opts-'));
  try {
    const creds = path.join(dir, 'node.creds');
    fs.writeFileSync(creds, 'not used');
    assert.throws(() => natsOptions('nats://a:b@h:4222', { ...none, creds }, 'n', 'api'), /one or the other/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a CA or a client certificate asks for TLS; a certificate without its key, or an unreadable file, stops the start naming the setting', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-nats-opts-'));
  try {
    const ca = path.join(dir, 'ca.pem');
    fs.writeFileSync(ca, 'PEM');
    assert.deepEqual(natsOptions('nats://h:4222', { ...none, ca }, 'n', 'api').tls, { caFile: ca });
    const env = { ALGOHOST_HOME: dir, ALGOHOST_NATS_CA: ca };
    assert.equal(loadConfig({}, env).natsAuth.ca, ca);
    assert.throws(() => loadConfig({}, { ...env, ALGOHOST_NATS_CERT: ca }), /ALGOHOST_NATS_CERT and ALGOHOST_NATS_KEY go together/);
    assert.throws(() => loadConfig({}, { ...env, ALGOHOST_NATS_CA: path.join(dir, 'missing.pem') }), /ALGOHOST_NATS_CA must name a readable file/);
    assert.throws(() => loadConfig({}, { ALGOHOST_HOME: dir, ALGOHOST_CLUSTER_SECRET: 'short' }), /at least 32 characters/);
    // A URL that does not parse is shown without what may be its password.
    assert.throws(() => loadConfig({}, { ALGOHOST_HOME: dir, ALGOHOST_NATS_URL: 'nats://user:hunter2@[bad' }), (e: Error) => /\/\/\*\*\*@\[bad/.test(e.message) && !e.message.includes('hunter2'));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("a URL shown in a message hides its password and its token", () => {
  assert.equal(redactNatsUrl('tls://algohost-api:s3cret@h:4222'), 'tls://algohost-api:***@h:4222');
  assert.equal(redactNatsUrl('nats://t0ken@h:4222'), 'nats://***@h:4222');
  assert.equal(redactNatsUrl('nats://h:4222'), 'nats://h:4222');
});
