import dns from 'node:dns/promises';
import net from 'node:net';
import { AddressRule } from '../addressRule.ts';
import type { Config, EgressAllowEntry } from '../config.ts';
import { probeFence, type EgressRule, type FencePolicy, type FenceSupport } from './egressFence.ts';

export type NetworkMode = 'none' | 'nat' | 'host';

/** How often the deployment's service names are resolved again (the address rule's). */
export { SERVICES_RESOLVE_MS } from '../addressRule.ts';

/** What SandboxNetwork.open asks of the world: tests give their own. */
export interface NetworkWorld {
  /** Whether the fence can be made. */
  probe?: (() => FenceSupport) | undefined;
  /** A name's addresses (dns.lookup, all of them). */
  lookup?: ((host: string) => Promise<string[]>) | undefined;
  now?: (() => number) | undefined;
  /** The server's address rule, whose own and services' addresses the fence refuses (one is made from `lookup` and `now` without it). */
  addresses?: AddressRule | undefined;
}

/**
 * What network the sandboxes of this server get (ALGOHOST_ALGORITHM_NETWORK), worked out once
 * at start: whether the egress fence can be made here, the operator's allow-list and the
 * deployment's own services resolved to addresses. Then, for each sandbox, the fence's policy:
 * an algorithm's (the internet, none of ours) or a build's (its registries and proxy only).
 */
export class SandboxNetwork {
  private constructor(
    /** What algorithms with `network_access: full` get here: `nat` only where the fence works. */
    readonly mode: NetworkMode,
    /** Why the fence cannot be made here, when it cannot (then `nat` is `none`, and builds have the host's network). */
    readonly fenceProblem: string | undefined,
    private readonly allow: EgressRule[],
    /** The names in the operator's allow-list, with their addresses (a build's /etc/hosts). */
    private readonly allowNames: Record<string, string[]>,
    /**
     * The one address rule (src/addressRule.ts): the host's own addresses and the deployment's
     * services' (its database, S3 store, NATS servers, OTLP collector), re-resolved as it says.
     */
    private readonly addresses: AddressRule,
    private readonly lookup: (host: string) => Promise<string[]>,
  ) {}

  /** The server's network for its sandboxes (`world`: how it finds out, for tests). */
  static async open(config: Config, world: NetworkWorld = {}): Promise<SandboxNetwork> {
    const lookup = world.lookup ?? lookupAll;
    const requested = config.algorithmNetwork;
    const support = requested === 'host' ? { available: false, reason: 'ALGOHOST_ALGORITHM_NETWORK=host' } : (world.probe ?? probeFence)();
    const mode = requested === 'nat' && !support.available ? 'none' : requested;
    const [{ rules, names }, addresses] = await Promise.all([allowRules(config.egressAllow, lookup), world.addresses ?? AddressRule.open(config, { lookup, now: world.now })]);
    return new SandboxNetwork(mode, support.available ? undefined : support.reason, rules, names, addresses, lookup);
  }

  /** Whether algorithms may have the network at all (`network_access: full` is taken). */
  get allowsNetwork(): boolean {
    return this.mode !== 'none';
  }

  /**
   * The fence an algorithm with the network runs behind: every public address but the host's
   * and the deployment's own, and what the operator allows. Undefined with `host` (the host's
   * network) or where no fence can be made (no algorithm gets the network there).
   */
  algorithmFence(): FencePolicy | undefined {
    if (this.mode !== 'nat') return undefined;
    return { reach: 'public', allow: this.allow, deny: [...this.addresses.hostAddresses(), ...this.addresses.serviceAddresses()] };
  }

  /**
   * The fence a build step runs behind: only `endpoints` (its registries and proxy, as URLs),
   * resolved now, on their ports, and what the operator allows. Their names are all it can
   * resolve (its /etc/hosts): it has no DNS. Undefined where builds keep the host's network:
   * with `host`, or where no fence can be made.
   */
  async buildFence(endpoints: string[]): Promise<FencePolicy | undefined> {
    if (this.mode === 'host' || this.fenceProblem !== undefined) return undefined;
    const rules: EgressRule[] = [];
    const names: Record<string, string[]> = { ...this.allowNames };
    for (const endpoint of endpoints) {
      let url: URL;
      try {
        url = new URL(endpoint);
      } catch {
        continue;
      }
      if (url.protocol !== 'http:' && url.protocol !== 'https:') continue;
      const port = Number(url.port || (url.protocol === 'https:' ? 443 : 80));
      const host = url.hostname.replace(/^\[|\]$/g, '');
      const addresses = await resolve(host, this.lookup);
      if (!net.isIP(host) && addresses.length > 0) names[host.toLowerCase()] = addresses;
      for (const address of addresses) rules.push(...reachable(address, [port]));
    }
    return { reach: 'allowed', allow: [...rules, ...this.allow], deny: [], names };
  }
}

async function lookupAll(host: string): Promise<string[]> {
  return (await dns.lookup(host, { all: true })).map((a) => a.address);
}

/** A name's addresses (an address is its own); none for a name that does not resolve. */
async function resolve(host: string, lookup: (host: string) => Promise<string[]>): Promise<string[]> {
  if (net.isIP(host.split('/')[0] ?? '')) return [host];
  try {
    return await lookup(host);
  } catch {
    return [];
  }
}

/**
 * An address as the fence can allow it: loopback only as 127.0.0.1 with ports (the host's
 * loopback, through the NAT); ::1 and other loopback addresses cannot be reached at all.
 */
function reachable(address: string, ports: number[] | undefined): EgressRule[] {
  const [ip] = address.split('/');
  if (ip === '::1' || (ip!.startsWith('127.') && ip !== '127.0.0.1')) return [];
  if (ip === '127.0.0.1' && !ports?.length) return [];
  return [{ cidr: address, ports }];
}

/** The allow-list as rules, and its names with their addresses. */
async function allowRules(entries: EgressAllowEntry[], lookup: (host: string) => Promise<string[]>): Promise<{ rules: EgressRule[]; names: Record<string, string[]> }> {
  const rules: EgressRule[] = [];
  const names: Record<string, string[]> = {};
  for (const e of entries) {
    const addresses = await resolve(e.host, lookup);
    if (!net.isIP(e.host.split('/')[0] ?? '') && addresses.length > 0) names[e.host.toLowerCase()] = addresses;
    for (const address of addresses) rules.push(...reachable(address, e.ports));
  }
  return { rules, names };
}
