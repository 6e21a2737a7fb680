/**
 * The egress rule of ALGOHOST_CONNECTOR_NETWORK=public (src/data/accounts/egress.ts), address by
 * address: what a user's account may not make the server reach, in every spelling IPv6 gives an
 * IPv4 address. connected-storage.test.ts checks it over HTTP, with a real account.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { checkPublicEndpoint, isInternalAddress, refusedRange } from '../src/data/accounts/egress.ts';
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
  await assert.rejects(checkPublicEndpoint('http://[not-an-address', 'the account "nas"'), (err: unknown) => err instanceof AppError && err.code === 'invalid_connector' && /"nas".*not a valid URL/.test(err.message));
});
