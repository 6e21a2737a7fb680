import dns from 'node:dns/promises';
import { ipv6Groups } from '../../addresses.ts';
import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from 'node:dns';
import net from 'node:net';
import { AppError } from '../../errors.ts';

/**
 * Connected accounts make the server send requests to addresses its users choose. Unless the
 * operator allows it (ALGOHOST_CONNECTOR_NETWORK=any), those addresses must be public: a user
 * must not be able to point an "S3 endpoint" at the server's loopback, its LAN or a cloud
 * metadata service and read the answers back through the data API.
 *
 * `refusedRange` is the one rule; anything else that makes the server reach addresses users
 * choose (webhooks, sandboxes' network) should ask it too. Documentation ranges (192.0.2.0/24,
 * 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32) are not refused: tests use them to stand in
 * for the internet.
 */
const IPV4_REFUSED: [network: string, prefix: number, name: string][] = [
  ['0.0.0.0', 8, '"this network"'],
  ['10.0.0.0', 8, 'private'],
  ['100.64.0.0', 10, 'CGNAT'],
  ['127.0.0.0', 8, 'loopback'],
  ['169.254.0.0', 16, 'link-local'],
  ['172.16.0.0', 12, 'private'],
  ['192.0.0.0', 24, 'IETF protocol assignments'],
  ['192.168.0.0', 16, 'private'],
  ['198.18.0.0', 15, 'benchmarking'],
  ['224.0.0.0', 4, 'multicast'],
  ['240.0.0.0', 4, 'reserved'],
];

/** IPv6 ranges refused whole; those that carry an IPv4 address are judged by it below. */
const IPV6_REFUSED: [network: string, prefix: number, name: string][] = [
  ['::', 128, 'unspecified'],
  ['::1', 128, 'loopback'],
  ['64:ff9b:1::', 48, 'local-use NAT64'],
  ['100::', 64, 'discard-only'],
  ['2001::', 32, 'Teredo'],
  ['fc00::', 7, 'unique-local'],
  ['fe80::', 10, 'link-local'],
  ['fec0::', 10, 'site-local'],
  ['ff00::', 8, 'multicast'],
];

/** IPv6 ranges that carry an IPv4 address: the address at `at` (its first byte) is judged. */
const IPV6_EMBEDDING: [network: string, prefix: number, name: string, at: number][] = [
  ['::', 96, 'IPv4-compatible', 12],
  ['::ffff:0:0', 96, 'IPv4-mapped', 12],
  ['::ffff:0:0:0', 96, 'IPv4-translated', 12],
  ['64:ff9b::', 96, 'NAT64', 12],
  ['2002::', 16, '6to4', 2],
];

/** The 4 or 16 bytes of an IP address, or undefined when it is none (a zone, fe80::1%eth0, is dropped). */
function ipBytes(address: string): number[] | undefined {
  if (net.isIPv4(address)) return address.split('.').map(Number);
  const bare = address.replace(/%.*$/, '');
  if (!net.isIPv6(bare)) return undefined;
  return ipv6Groups(bare).flatMap((n) => [n >> 8, n & 0xff]);
}

function within(bytes: number[], network: number[], prefix: number): boolean {
  for (let bit = 0; bit < prefix; bit += 8) {
    const mask = prefix - bit >= 8 ? 0xff : (0xff << (8 - (prefix - bit))) & 0xff;
    if ((bytes[bit / 8]! & mask) !== (network[bit / 8]! & mask)) return false;
  }
  return true;
}

const compile = <T extends [string, number, ...unknown[]]>(list: T[]) => list.map(([network, prefix, ...rest]) => ({ network: ipBytes(network)!, prefix, range: `${network}/${prefix}`, rest }));
const V4 = compile(IPV4_REFUSED);
const V6 = compile(IPV6_REFUSED);
const V6_EMBEDDING = compile(IPV6_EMBEDDING);

/**
 * The range that makes this IP address one a user's account may not make the server reach,
 * as "link-local 169.254.0.0/16", or undefined for a public address. An
 * IPv6 address that carries an IPv4 address (mapped, compatible, translated, NAT64, 6to4) is
 * judged by that address; anything that is not an IP address is refused.
 */
export function refusedRange(address: string): string | undefined {
  const bytes = ipBytes(address);
  if (!bytes) return 'not an IP address';
  if (bytes.length === 4) {
    const hit = V4.find((r) => within(bytes, r.network, r.prefix));
    return hit && `${String(hit.rest[0])} ${hit.range}`;
  }
  const hit = V6.find((r) => within(bytes, r.network, r.prefix));
  if (hit) return `${String(hit.rest[0])} ${hit.range}`;
  const embedding = V6_EMBEDDING.find((r) => within(bytes, r.network, r.prefix));
  if (embedding) {
    const at = embedding.rest[1] as number;
    const ipv4 = bytes.slice(at, at + 4).join('.');
    const inner = refusedRange(ipv4);
    return inner && `${String(embedding.rest[0])} ${embedding.range} carrying ${ipv4}, ${inner}`;
  }
  return undefined;
}

/** Is this IP address one a user's account may not make the server reach? (`refusedRange` names why.) */
export function isInternalAddress(address: string): boolean {
  return refusedRange(address) !== undefined;
}

/**
 * Refuses an endpoint whose host is, or resolves to, an internal address, when an account's
 * client is made; its connections then resolve through `publicOnlyLookup`, which catches a name
 * that changes its answer later (DNS rebinding).
 */
export async function checkPublicEndpoint(url: string, what: string): Promise<void> {
  let host: string;
  try {
    host = new URL(url).hostname.replace(/^\[|\]$/g, '');
  } catch {
    // Checked when the account is made: a row that holds no URL was stored otherwise (an older version, by hand).
    throw new AppError('invalid_connector', `${what} has an endpoint that is not a valid URL: change it (PATCH it) or make it again`);
  }
  let addresses: string[];
  if (net.isIP(host)) {
    addresses = [host];
  } else {
    try {
      addresses = (await dns.lookup(host, { all: true, verbatim: true })).map((a) => a.address);
    } catch {
      throw new AppError('connector_unreachable', `${what} could not be reached: its host ${host} does not resolve`);
    }
  }
  for (const address of addresses) {
    const range = refusedRange(address);
    if (range === undefined) continue;
    throw new AppError(
      'connector_address_refused',
      `${what} points at ${host} (${address}), an internal address (${range}); this server only connects to public addresses unless its operator sets ALGOHOST_CONNECTOR_NETWORK=any`,
    );
  }
}

/** The error code a guarded lookup fails with; remote.ts reports it as the provider being refused. */
export const INTERNAL_ADDRESS = 'ERR_ALGOHOST_INTERNAL_ADDRESS';

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * A DNS lookup for the sockets of accounts' HTTP clients that refuses internal addresses at
 * connect time, so a name that resolved to a public address when the account's client was made
 * cannot be made to resolve to an internal one later (DNS rebinding). IP literals are not
 * looked up by Node: `checkPublicEndpoint` judges those when the client is made.
 */
export function publicOnlyLookup(hostname: string, options: LookupOptions, callback: LookupCallback): void {
  dnsLookup(hostname, { ...options, all: true }, (err, addresses) => {
    if (err) return callback(err, []);
    const internal = addresses.find((a) => isInternalAddress(a.address));
    if (internal) {
      const refused: NodeJS.ErrnoException = new Error(`${hostname} resolved to ${internal.address}, an internal address (${refusedRange(internal.address)})`);
      refused.code = INTERNAL_ADDRESS;
      return callback(refused, []);
    }
    if (options.all) return callback(null, addresses);
    const first = addresses[0];
    if (!first) return callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), []);
    callback(null, first.address, first.family);
  });
}
