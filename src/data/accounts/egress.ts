import dns from 'node:dns/promises';
import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from 'node:dns';
import net from 'node:net';
import { AppError } from '../../errors.ts';

/**
 * Connected accounts make the server send requests to addresses its users choose. Unless the
 * operator allows it (ALGOHOST_CONNECTOR_NETWORK=any), those addresses must be public: a user
 * must not be able to point an "S3 endpoint" at the server's loopback, its LAN or a cloud
 * metadata service and read the answers back through the data API.
 */
const INTERNAL = new net.BlockList();
for (const [network, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  INTERNAL.addSubnet(network, prefix, 'ipv4');
}
for (const [network, prefix] of [
  ['::', 128],
  ['::1', 128],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
] as const) {
  INTERNAL.addSubnet(network, prefix, 'ipv6');
}

/** Is this IP address one a user's account may not make the server reach? */
export function isInternalAddress(address: string): boolean {
  const family = net.isIP(address);
  if (family === 4) return INTERNAL.check(address, 'ipv4');
  if (family === 6) {
    // IPv4-mapped (::ffff:a.b.c.d) and NAT64 addresses carry an IPv4 address: judge that one.
    const mapped = /^(?:::ffff:|64:ff9b::)(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
    if (mapped) return INTERNAL.check(mapped[1]!, 'ipv4');
    return INTERNAL.check(address, 'ipv6');
  }
  return true;
}

/**
 * Refuses an endpoint whose host is, or resolves to, an internal address, when an account's
 * client is made; its connections then resolve through `publicOnlyLookup`, which catches a name
 * that changes its answer later (DNS rebinding).
 */
export async function checkPublicEndpoint(url: string, label: string): Promise<void> {
  const host = new URL(url).hostname.replace(/^\[|\]$/g, '');
  let addresses: string[];
  if (net.isIP(host)) {
    addresses = [host];
  } else {
    try {
      addresses = (await dns.lookup(host, { all: true, verbatim: true })).map((a) => a.address);
    } catch {
      throw new AppError('connector_unreachable', `the account "${label}" could not be reached: its host ${host} does not resolve`);
    }
  }
  const internal = addresses.find(isInternalAddress);
  if (internal !== undefined) {
    throw new AppError(
      'connector_address_refused',
      `the account "${label}" points at ${host} (${internal}), an internal address; this server only connects accounts to public addresses unless its operator sets ALGOHOST_CONNECTOR_NETWORK=any`,
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
      const refused: NodeJS.ErrnoException = new Error(`${hostname} resolved to ${internal.address}, an internal address`);
      refused.code = INTERNAL_ADDRESS;
      return callback(refused, []);
    }
    if (options.all) return callback(null, addresses);
    const first = addresses[0];
    if (!first) return callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), []);
    callback(null, first.address, first.family);
  });
}
