/**
 * The one address rule (src/addressRule.ts; docs/security.md, "One address rule"), address by
 * address: what a user may not make the server reach, by range in every spelling IPv6 gives an
 * IPv4 address, and the server's own and its services' addresses. connected-storage.test.ts
 * and webhooks.test.ts check it over HTTP, with a real account and a real subscription.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import os from 'node:os';
import { ADDRESS_REFUSED, AddressRule, isInternalAddress, refusedRange, SERVICES_RESOLVE_MS } from '../src/addressRule.ts';
import { loadConfig } from '../src/config.ts';
import { AppError } from '../src/errors.ts';

/** Address → the range named when it is refused. */
const REFUSED: [string, RegExp][] = [
  // IPv4
  ['0.0.0.0', /0\.0\.0\.0\/8/],
  ['0.1.2.3', /0\.0\.0\.0\/8/],
  ['10.1.2.3', /private 10\.0\.0\.0\/8/],
  ['100.64.0.1', /CGNAT 100\.64\.0\.0\/10/],
  ['100.127.255.254', /100\.64\.0\.0\/10/],
  ['127.0.0.1', /loopback 127\.0\.0\.0\/8/],
  ['127.255.255.254', /loopback/],
  ['169.254.169.254', /link-local 169\.254\.0\.0\/16/],
  ['172.16.0.1', /private 172\.16\.0\.0\/12/],
  ['172.31.255.254', /172\.16\.0\.0\/12/],
  ['192.168.1.1', /private 192\.168\.0\.0\/16/],
  ['224.0.0.1', /multicast 224\.0\.0\.0\/4/],
  ['239.255.255.250', /multicast/],
  ['240.0.0.1', /240\.0\.0\.0\/4/],
  ['255.255.255.255', /240\.0\.0\.0\/4/],
  ['168.63.129.16', /Azure's platform endpoint 168\.63\.129\.16\/32/],
  // IPv6 ranges
  ['::', /unspecified ::\/128/],
  ['::1', /loopback ::1\/128/],
  ['0:0:0:0:0:0:0:1', /loopback/],
  ['fe80::1', /link-local fe80::\/10/],
  ['fe80::1%eth0', /link-local/],
  ['febf::1', /link-local/],
  ['fc00::1', /unique-local fc00::\/7/],
  ['fd12:3456::1', /unique-local/],
  ['ff02::1', /multicast ff00::\/8/],
  ['ff05::1:3', /multicast/],
  // IPv4-mapped, in every spelling
  ['::ffff:127.0.0.1', /IPv4-mapped ::ffff:0:0\/96 carrying 127\.0\.0\.1, loopback/],
  ['::ffff:7f00:1', /IPv4-mapped.*127\.0\.0\.1/],
  ['0:0:0:0:0:ffff:7f00:1', /IPv4-mapped.*127\.0\.0\.1/],
  ['::FFFF:A9FE:A9FE', /IPv4-mapped.*169\.254\.169\.254, link-local/],
  ['::ffff:169.254.169.254', /169\.254\.169\.254/],
  ['::ffff:0.0.0.0', /0\.0\.0\.0/],
  // IPv4-compatible (::/96)
  ['::7f00:1', /IPv4-compatible ::\/96 carrying 127\.0\.0\.1, loopback/],
  ['::127.0.0.1', /IPv4-compatible.*127\.0\.0\.1/],
  ['::a9fe:a9fe', /169\.254\.169\.254/],
  ['::10.0.0.1', /10\.0\.0\.1, private/],
  // IPv4-translated (::ffff:0:0:0/96)
  ['::ffff:0:7f00:1', /IPv4-translated.*127\.0\.0\.1/],
  // NAT64: the well-known prefix carries an IPv4 address; the local-use prefix is refused whole
  ['64:ff9b::a9fe:a9fe', /NAT64 64:ff9b::\/96 carrying 169\.254\.169\.254, link-local/],
  ['64:ff9b::169.254.169.254', /NAT64.*169\.254\.169\.254/],
  ['64:ff9b::7f00:1', /NAT64.*127\.0\.0\.1/],
  ['64:ff9b:1::a9fe:a9fe', /local-use NAT64 64:ff9b:1::\/48/],
  ['64:ff9b:1:ffff::808:808', /local-use NAT64/],
  // 6to4 carries an IPv4 address in its bits 16-47
  ['2002:7f00:1::1', /6to4 2002::\/16 carrying 127\.0\.0\.1, loopback/],
  ['2002:a9fe:a9fe::', /6to4.*169\.254\.169\.254/],
  ['2002:c0a8:101::1', /6to4.*192\.168\.1\.1/],
  // Teredo is refused whole (its client address is obfuscated; no server should need it)
  ['2001:0:4136:e378:8000:63bf:3fff:fdd2', /Teredo 2001::\/32/],
  ['2001::1', /Teredo/],
  // Not an address at all
  ['localhost', /not an IP address/],
  ['', /not an IP address/],
  ['1.2.3', /not an IP address/],
];

/** Public addresses, the documentation ranges (which tests use for "the internet") among them. */
const ALLOWED = [
  '8.8.8.8',
  '1.1.1.1',
  '9.255.255.255',
  '11.0.0.1',
  '100.63.255.255',
  '100.128.0.1',
  '126.255.255.255',
  '128.0.0.1',
  '169.253.255.255',
  '172.15.255.255',
  '172.32.0.1',
  '192.167.255.255',
  '192.169.0.1',
  '192.0.2.1',
  '198.51.100.7',
  '203.0.113.200',
  '223.255.255.255',
  '2606:4700:4700::1111',
  '2a00:1450:4001::200e',
  '2001:db8::1',
  '2001:4860:4860::8888',
  '::ffff:8.8.8.8',
  '::ffff:198.51.100.7',
  '::8.8.8.8',
  '64:ff9b::8.8.8.8',
  '64:ff9b::c633:6407',
  '2002:808:808::1',
  '2002:c633:6407::1',
];

test('refusedRange names the range of every address an account may not reach, IPv4 written as IPv6 included', () => {
  for (const [address, range] of REFUSED) {
    const got = refusedRange(address);
    assert.ok(got !== undefined, `${address} is refused`);
    assert.match(got, range, address);
    assert.equal(isInternalAddress(address), true, address);
  }
});

test('public addresses, documentation ranges and public IPv4 inside IPv6 are not refused', () => {
  for (const address of ALLOWED) {
    assert.equal(refusedRange(address), undefined, address);
    assert.equal(isInternalAddress(address), false, address);
  }
});

test('an account whose stored endpoint is not a URL answers 400 invalid_connector, naming the account, not 500', async () => {
  const rule = await AddressRule.open(loadConfig({}, { ALGOHOST_HOME: os.tmpdir() }), { interfaces: () => [] });
  await assert.rejects(rule.checkEndpoint('http://[not-an-address', 'the account "nas"'), (err: unknown) => err instanceof AppError && err.code === 'invalid_connector' && /"nas".*not a valid URL/.test(err.message));
});

/** A rule on a machine whose interfaces are `ifaces`, with the deployment's names resolved by `names`. */
async function ruleWith(env: Record<string, string>, ifaces: () => string[], names: Record<string, string[]>, now = () => 0) {
  const asked: string[] = [];
  const lookup = async (host: string) => {
    asked.push(host);
    const found = names[host];
    if (!found) throw Object.assign(new Error(`${host} does not resolve`), { code: 'ENOTFOUND' });
    return found;
  };
  return { rule: await AddressRule.open(loadConfig({}, { ALGOHOST_HOME: os.tmpdir(), ...env }), { interfaces: ifaces, lookup, now }), asked };
}

test("the server's own public addresses and its deployment's services are refused, however written, naming why", async () => {
  const { rule } = await ruleWith(
    {
      ALGOHOST_DATABASE_URL: 'postgres://u:p@db.internal:5432/algohost',
      ALGOHOST_BLOBS: 's3://b/p?endpoint=http://203.0.113.40:9000&access_key_id=k&secret_access_key=s',
      ALGOHOST_NATS_URL: 'nats://nats.internal:4222',
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://otel.internal:4318',
      ALGOHOST_METRICS_ADDR: '[2001:db8::9]:9464',
    },
    () => ['127.0.0.1', '198.51.100.9', '2001:db8:7::1', 'fe80::1%eth0'],
    { 'db.internal': ['203.0.113.10'], 'nats.internal': ['203.0.113.11', '2001:db8:5::11'], 'otel.internal': ['203.0.113.12'] },
  );
  for (const own of ['198.51.100.9', '::ffff:198.51.100.9', '::ffff:c633:6409', '64:ff9b::198.51.100.9', '2001:db8:7::1', '2001:0db8:0007:0000:0000:0000:0000:0001']) {
    assert.equal(rule.refused(own), 'an address of this server', own);
  }
  for (const service of ['203.0.113.10', '203.0.113.40', '203.0.113.11', '2001:db8:5::11', '203.0.113.12', '2001:db8::9', '::ffff:203.0.113.10']) {
    assert.equal(rule.refused(service), "an address of this deployment's services", service);
  }
  assert.match(rule.refused('127.0.0.1')!, /^an internal address \(loopback 127\.0\.0\.0\/8\)$/);
  for (const other of ['198.51.100.10', '203.0.113.13', '2001:db8:7::2', '8.8.8.8']) assert.equal(rule.refused(other), undefined, other);
  await assert.rejects(rule.checkEndpoint('http://[::ffff:198.51.100.9]:8080/hook', 'the webhook url'), (err: unknown) => {
    assert.ok(err instanceof AppError && err.code === 'connector_address_refused', String(err));
    assert.match(err.message, /^the webhook url was refused by the address rule: ::ffff:c633:6409 is an address of this server\./);
    return true;
  });
});

test('an interface added later is refused at once, and an address once seen stays refused after it is gone', async () => {
  let ifaces = ['198.51.100.9'];
  const { rule } = await ruleWith({}, () => ifaces, {});
  assert.equal(rule.refused('198.51.100.20'), undefined);
  ifaces = ['198.51.100.9', '198.51.100.20'];
  assert.equal(rule.refused('198.51.100.20'), 'an address of this server');
  ifaces = [];
  assert.equal(rule.refused('198.51.100.9'), 'an address of this server');
  assert.equal(rule.refused('198.51.100.20'), 'an address of this server');
});

test("the deployment's services are resolved again: one that moves is refused at its new address, and still at its old", async () => {
  let now = 0;
  const names = { 'db.internal': ['203.0.113.5'] };
  const { rule, asked } = await ruleWith({ ALGOHOST_DATABASE_URL: 'postgres://u:p@db.internal:5432/a' }, () => [], names, () => now);
  assert.equal(rule.refused('203.0.113.5'), "an address of this deployment's services");
  names['db.internal'] = ['203.0.113.9'];
  now += SERVICES_RESOLVE_MS - 1;
  assert.equal(rule.refused('203.0.113.9'), undefined, 'resolved again before its time');
  now += 1;
  rule.refused('203.0.113.9');
  await new Promise((r) => setImmediate(r));
  assert.equal(rule.refused('203.0.113.9'), "an address of this deployment's services");
  assert.equal(rule.refused('203.0.113.5'), "an address of this deployment's services");
  assert.equal(asked.filter((h) => h === 'db.internal').length, 2);
});

test('at connect time, a name that resolves to a refused address fails with the rule\'s words, not a socket error', async () => {
  const { rule } = await ruleWith({}, () => ['198.51.100.9'], { 'rebound.test': ['203.0.113.1', '198.51.100.9'], 'fine.test': ['203.0.113.1', '2001:db8::1'] });
  const look = (host: string, options: object) =>
    new Promise<{ err: NodeJS.ErrnoException | null; address: unknown; family?: number | undefined }>((resolve) => rule.lookup(host, options, (err, address, family) => resolve({ err, address, family })));
  const refused = await look('rebound.test', {});
  assert.equal(refused.err?.code, ADDRESS_REFUSED);
  assert.equal(refused.err?.message, 'refused by the address rule: rebound.test resolved to 198.51.100.9, an address of this server');
  assert.deepEqual(await look('fine.test', {}), { err: null, address: '203.0.113.1', family: 4 });
  assert.deepEqual(await look('fine.test', { family: 6 }), { err: null, address: '2001:db8::1', family: 6 });
  assert.deepEqual((await look('fine.test', { all: true })).address, [
    { address: '203.0.113.1', family: 4 },
    { address: '2001:db8::1', family: 6 },
  ]);
});
