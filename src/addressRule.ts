import dns from 'node:dns/promises';
import type { LookupAddress, LookupOptions } from 'node:dns';
import net from 'node:net';
import os from 'node:os';
import { ipv6Groups } from './addresses.ts';
import type { Config } from './config.ts';
import { AppError } from './errors.ts';

/**
 * The one address rule (docs/security.md, "One address rule"): what the server refuses to
 * connect to when a user chooses where it connects. Webhook deliveries, connected accounts
 * (S3, WebDAV), the package index a build's source names for itself, and the egress fence
 * around algorithms all ask it. It refuses:
 *
 * - addresses no user may make the server reach, by range: loopback, private, CGNAT,
 *   link-local (cloud metadata), multicast, reserved, Azure's platform endpoint, and IPv6's
 *   equivalents (an IPv6 address that carries an IPv4 one is judged by that one);
 * - every address of this server's own interfaces, public ones included: a service listening
 *   on 0.0.0.0 answers on them all;
 * - every address of the deployment's own services (its database, S3 store, NATS servers,
 *   OTLP collector, metrics listener), resolved at start and again every SERVICES_RESOLVE_MS.
 *
 * An address once seen as the server's or a service's stays refused: a service that moved may
 * still be listening where it was.
 *
 * Documentation ranges (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32) are not
 * refused by range: tests use them to stand in for the internet.
 */
const IPV4_REFUSED: [network: string, prefix: number, name: string][] = [
  ['0.0.0.0', 8, '"this network"'],
  ['10.0.0.0', 8, 'private'],
  ['100.64.0.0', 10, 'CGNAT'],
  ['127.0.0.0', 8, 'loopback'],
  ['169.254.0.0', 16, 'link-local'],
  // A public address the cloud's agents and metadata answer on, as the fence refuses it.
  ['168.63.129.16', 32, "Azure's platform endpoint"],
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

/**
 * The ranges as a packet filter (the egress fence's nftables) refuses them: it cannot look
 * inside an address, so the IPv6 forms that carry an IPv4 address are refused whole.
 */
export const FILTER_RANGES = {
  v4: IPV4_REFUSED.map(([network, prefix]) => (prefix === 32 ? network : `${network}/${prefix}`)),
  v6: [...IPV6_REFUSED, ...IPV6_EMBEDDING].map(([network, prefix]) => `${network}/${prefix}`),
};

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
 * The range that makes this IP address one no user may make the server reach, as
 * "link-local 169.254.0.0/16", or undefined for a public address. An IPv6 address that carries
 * an IPv4 address (mapped, compatible, translated, NAT64, 6to4) is judged by that address;
 * anything that is not an IP address is refused.
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

/** Is this IP address refused by range? (`refusedRange` names why; `AddressRule.refused` adds the server's own.) */
export function isInternalAddress(address: string): boolean {
  return refusedRange(address) !== undefined;
}

/** The same address however it is written (IPv6 in full, lower case; IPv4 as it is); undefined for none. */
function canonical(address: string): string | undefined {
  const bare = address.replace(/%.*$/, '');
  if (net.isIPv4(bare)) return bare;
  if (!net.isIPv6(bare)) return undefined;
  return ipv6Groups(bare).map((g) => g.toString(16)).join(':');
}

/**
 * The forms an address can reach a host by: itself, and the IPv4 address an IPv6 one carries
 * (::ffff:198.51.100.7 is 198.51.100.7 to a dual-stack socket; NAT64 and 6to4 lead there too).
 */
function forms(address: string): string[] {
  const a = canonical(address);
  if (a === undefined) return [];
  const bytes = ipBytes(a)!;
  if (bytes.length === 4) return [a];
  const embedding = V6_EMBEDDING.find((r) => within(bytes, r.network, r.prefix));
  if (!embedding) return [a];
  const at = embedding.rest[1] as number;
  return [a, bytes.slice(at, at + 4).join('.')];
}

/** How often the deployment's service names are resolved again (a database that moved, a NATS server replaced). */
export const SERVICES_RESOLVE_MS = 30_000;
/** At most this many addresses of each kind are kept refused: every one there is now, and the latest before, up to it. */
const MAX_REMEMBERED = 256;

/** The error code of a connection the rule refused at connect time (remote.ts and webhooks.ts tell it from a socket's errors). */
export const ADDRESS_REFUSED = 'ERR_ALGOHOST_ADDRESS_REFUSED';

/** What the rule asks of the world: tests give their own. */
export interface AddressWorld {
  /** A name's addresses (dns.lookup, all of them). */
  lookup?: ((host: string) => Promise<string[]>) | undefined;
  /** The addresses of this machine's interfaces now (os.networkInterfaces). */
  interfaces?: (() => string[]) | undefined;
  now?: (() => number) | undefined;
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/** Addresses remembered, most recent last, up to a bound that never lets go of the current ones. */
class Remembered {
  private readonly set = new Set<string>();

  /** Adds what there is now; forgets the oldest of the rest past MAX_REMEMBERED. */
  saw(addresses: string[]): void {
    for (const a of addresses) {
      this.set.delete(a);
      this.set.add(a);
    }
    for (const a of this.set) {
      if (this.set.size <= Math.max(MAX_REMEMBERED, addresses.length)) break;
      this.set.delete(a);
    }
  }

  has(address: string): boolean {
    return this.set.has(address);
  }

  list(): string[] {
    return [...this.set];
  }
}

/**
 * The rule of one server: the ranges, with its own interfaces' addresses and its deployment's
 * services' (`open` resolves them). `refused` judges an address; `checkEndpoint` a URL before
 * a client is made or a request sent; `lookup` every new connection of an HTTP client (a name
 * that resolved to an allowed address when it was checked and to a refused one later, DNS
 * rebinding, is refused when it connects).
 */
export class AddressRule {
  private readonly host = new Remembered();
  private readonly services = new Remembered();
  private resolvedAt: number;
  private resolving = false;
  private readonly resolveName: (host: string) => Promise<string[]>;
  private readonly interfaces: () => string[];
  private readonly now: () => number;

  private constructor(
    /** The hosts of the deployment's own services, as its settings name them. */
    private readonly serviceHosts: string[],
    world: AddressWorld,
  ) {
    this.resolveName = world.lookup ?? lookupAll;
    this.interfaces = world.interfaces ?? interfaceAddresses;
    this.now = world.now ?? Date.now;
    this.resolvedAt = this.now();
  }

  /** The rule of a server with these settings, its services resolved (`world`: how it finds out, for tests). */
  static async open(config: Config, world: AddressWorld = {}): Promise<AddressRule> {
    const rule = new AddressRule(serviceHosts(config), world);
    rule.services.saw(await addressesOf(rule.serviceHosts, rule.resolveName));
    rule.hostAddresses();
    return rule;
  }

  /** Every address of this machine's interfaces now, and those it had before (up to a bound). */
  hostAddresses(): string[] {
    this.host.saw(this.interfaces().flatMap((a) => forms(a)));
    return this.host.list();
  }

  /**
   * The deployment's services' addresses, resolved again in the background once they are older
   * than SERVICES_RESOLVE_MS: a service that moves is refused at its new address from then on,
   * and still at its old ones.
   */
  serviceAddresses(): string[] {
    const names = this.serviceHosts.filter((h) => !net.isIP(h));
    if (names.length > 0 && !this.resolving && this.now() - this.resolvedAt >= SERVICES_RESOLVE_MS) {
      this.resolving = true;
      this.resolvedAt = this.now();
      void addressesOf(names, this.resolveName)
        .then((found) => this.services.saw(found))
        .finally(() => (this.resolving = false));
    }
    return this.services.list();
  }

  /**
   * Why the server may not connect to `address` on a user's behalf, as a phrase ("an internal
   * address (loopback 127.0.0.0/8)", "an address of this server", "an address of this
   * deployment's services"), or undefined when it may.
   */
  refused(address: string): string | undefined {
    const range = refusedRange(address);
    if (range !== undefined) return `an internal address (${range})`;
    const a = forms(address);
    // Read on every check: an interface added since the last is refused at once.
    this.hostAddresses();
    if (a.some((f) => this.host.has(f))) return 'an address of this server';
    this.serviceAddresses();
    if (a.some((f) => this.services.has(f))) return "an address of this deployment's services";
    return undefined;
  }

  /**
   * Refuses a URL whose host is, or resolves to, an address the rule refuses (403
   * `connector_address_refused`, saying which and why); `what` names it for the user ("the
   * account \"nas\"").
   */
  async checkEndpoint(url: string, what: string): Promise<void> {
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
        addresses = await this.resolveName(host);
      } catch {
        throw new AppError('connector_unreachable', `${what} could not be reached: its host ${host} does not resolve`);
      }
    }
    for (const address of addresses) {
      const why = this.refused(address);
      if (why === undefined) continue;
      const where = host === address ? host : `${host} (${address})`;
      throw new AppError('connector_address_refused', `${what} was refused by the address rule: ${where} is ${why}. This server connects on its users' behalf only to public addresses that are neither its own nor its deployment's (unless its operator sets ALGOHOST_CONNECTOR_NETWORK=any)`);
    }
  }

  /**
   * A DNS lookup for the sockets of HTTP clients that connect where users choose: refuses what
   * the rule refuses at connect time (error code ADDRESS_REFUSED, its message "refused by the
   * address rule: …"). IP literals are not looked up by Node: `checkEndpoint` judges those.
   */
  readonly lookup = (hostname: string, options: LookupOptions, callback: LookupCallback): void => {
    this.resolveName(hostname).then(
      (found) => {
        const family = typeof options.family === 'number' ? options.family : options.family === 'IPv4' ? 4 : options.family === 'IPv6' ? 6 : 0;
        const addresses = found.map((address) => ({ address, family: net.isIP(address) })).filter((a) => a.family !== 0 && (family === 0 || a.family === family));
        for (const a of addresses) {
          const why = this.refused(a.address);
          if (why === undefined) continue;
          const refused: NodeJS.ErrnoException = new Error(`refused by the address rule: ${hostname} resolved to ${a.address}, ${why}`);
          refused.code = ADDRESS_REFUSED;
          return callback(refused, []);
        }
        if (options.all) return callback(null, addresses);
        const first = addresses[0];
        if (!first) return callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), []);
        callback(null, first.address, first.family);
      },
      (err: NodeJS.ErrnoException) => callback(err, []),
    );
  };
}

/** The hosts of the deployment's own services, from the settings that name them. */
function serviceHosts(config: Config): string[] {
  const hosts: string[] = [];
  const add = (host: string | undefined) => {
    const h = host?.replace(/^\[|\]$/g, '');
    // A wildcard listens on every interface: those are the host's addresses, refused anyway.
    if (h && h !== '0.0.0.0' && h !== '::') hosts.push(h);
  };
  const addUrl = (url: string | undefined) => {
    if (!url) return;
    try {
      add(new URL(url).hostname);
    } catch {
      // Checked by config.ts already.
    }
  };
  addUrl(config.database?.url);
  addUrl(config.blobs?.endpoint);
  for (const s of (config.natsUrl ?? '').split(',')) addUrl(s.trim() || undefined);
  addUrl(config.traces?.url);
  add(config.metricsAddr?.host);
  add(config.host);
  return hosts;
}

/** Every address of this machine's interfaces (what a service listening on 0.0.0.0 answers on). */
function interfaceAddresses(): string[] {
  const out: string[] = [];
  for (const list of Object.values(os.networkInterfaces())) for (const a of list ?? []) out.push(a.address);
  return out;
}

async function addressesOf(hosts: string[], lookup: (host: string) => Promise<string[]>): Promise<string[]> {
  const found = await Promise.all(
    hosts.map(async (h) => {
      if (net.isIP(h)) return [h];
      try {
        return await lookup(h);
      } catch {
        return [];
      }
    }),
  );
  return found.flat().flatMap((a) => forms(a));
}

async function lookupAll(host: string): Promise<string[]> {
  return (await dns.lookup(host, { all: true, verbatim: true })).map((a) => a.address);
}
