import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import type { Readable, Writable } from 'node:stream';
import { FILTER_RANGES } from '../addressRule.ts';

/**
 * The egress fence (docs/security.md, "What an algorithm can reach"): a sandbox that may use the
 * network gets a network namespace of its own, reaching out through user-mode NAT
 * (slirp4netns), with a packet filter (nftables) inside the namespace that lets it reach the
 * internet and nothing of ours. No root daemon, no bridge, nothing changed on the host.
 *
 * How a fenced sandbox starts (each step a process of the server's own user):
 * 1. `unshare --user --map-root-user --net` makes the namespace; in it, with the capabilities
 *    it holds there and nowhere else, a small shell (the holder) loads the ruleset the server
 *    writes on fd 5 (`nft -f`), brings `lo` up, says `ready` on fd 6, and waits for `go` on fd 7;
 * 2. the server attaches slirp4netns to the holder's namespace (`tap0`, 10.0.2.100, the gateway
 *    10.0.2.2 standing for the host's loopback, DNS forwarded by 10.0.2.3) and waits until it has
 *    configured it;
 * 3. the server says `go`; the holder closes its pipes and execs bubblewrap, which shares that
 *    namespace (`--share-net`) but makes a user namespace nested in the holder's (`--unshare-user`,
 *    uid 65534, every capability dropped): the sandbox cannot change the rules, the routes or
 *    the interface, and has no raw sockets.
 * A server that dies before `go` leaves the holder to read end-of-file and exit before bubblewrap
 * runs; slirp4netns exits when the server closes (or loses) its end of the exit pipe.
 *
 * What the filter lets out, in order: the sandbox's own loopback; the host loopback's allowed
 * TCP ports (127.0.0.1:PORT in an allow-list, translated to the NAT's gateway); DNS to the
 * forwarder; nothing else of the NAT's network (10.0.2.0/24, every address of which but the
 * forwarder is the host's loopback); the allowed (the operator's ALGOHOST_ALGORITHM_EGRESS_ALLOW,
 * a build's registries and proxy), by address and port; then nothing that is the host's or the
 * deployment's own (its addresses, its database, S3 store, NATS); and, for algorithms, every
 * other address but the ones no one may reach: loopback, 0/8, private (RFC 1918), CGNAT, link-local (cloud metadata), multicast,
 * reserved, and in IPv6 the same and what embeds them (the address rule's ranges, src/addressRule.ts). A build reaches only what is allowed.
 * A name that resolves to a refused address is refused when it is connected to: the filter
 * sees addresses, not names (DNS rebinding gains nothing).
 */

/** Where the tools live (Debian's packages: util-linux, nftables, iproute2, slirp4netns). */
export interface FenceTools {
  unshare: string;
  nft: string;
  ip: string;
  slirp4netns: string;
}

export const FENCE_TOOLS: FenceTools = {
  unshare: '/usr/bin/unshare',
  nft: '/usr/sbin/nft',
  ip: firstExisting(['/usr/sbin/ip', '/usr/bin/ip', '/sbin/ip', '/bin/ip']) ?? '/usr/sbin/ip',
  slirp4netns: '/usr/bin/slirp4netns',
};

function firstExisting(files: string[]): string | undefined {
  return files.find((f) => fs.existsSync(f));
}

/** An address or range the filter lets through, on some ports or all. */
export interface EgressRule {
  /** `a.b.c.d/n` or an IPv6 CIDR. */
  cidr: string;
  /** TCP and UDP ports; all when absent. */
  ports?: number[] | undefined;
}

export interface FencePolicy {
  /** `public`: every address but the ones no one may reach (algorithms); `allowed`: only `allow` (builds). */
  reach: 'public' | 'allowed';
  /** Let through first, whatever else says (127.0.0.1 means the host's loopback, on the rule's ports). */
  allow: EgressRule[];
  /** Refused, whatever `reach` says: the host's own addresses, the deployment's services. */
  deny: string[];
  /**
   * With `allowed` (builds): the names the sandbox may resolve, with the addresses they had when
   * the policy was made, for its /etc/hosts. Such a sandbox has no DNS at all: a query for any
   * name would reach the host's resolver, and through it whoever serves that name (a channel
   * out, however narrow).
   */
  names?: Record<string, string[]> | undefined;
}

/**
 * The /etc/hosts of a sandbox behind a fence that allows only what it names (a build): its
 * names, and localhost.
 */
export function fencedHosts(policy: FencePolicy): string {
  const lines = ['127.0.0.1 localhost', '::1 localhost ip6-localhost'];
  for (const [name, addresses] of Object.entries(policy.names ?? {}).sort(([a], [b]) => a.localeCompare(b))) {
    // Names come from the operator's settings; a line break or a space in one would add a line or a name.
    if (!/^[A-Za-z0-9.-]+$/.test(name)) continue;
    for (const a of addresses) if (/^[0-9A-Fa-f.:]+$/.test(a)) lines.push(`${a} ${name}`);
  }
  return lines.join('\n') + '\n';
}

/** Where a fenced sandbox without DNS looks names up: its /etc/hosts alone. */
export const FILES_ONLY_NSSWITCH = 'hosts: files\n';

/**
 * Ranges no sandbox reaches (unless allowed by name): the address rule's (src/addressRule.ts),
 * IPv4 (Azure's platform endpoint among them, a public address) and IPv6, whose forms that
 * carry an IPv4 address are refused whole.
 */
export const REFUSED_V4 = FILTER_RANGES.v4;
export const REFUSED_V6 = FILTER_RANGES.v6;

/** slirp4netns's fixed addresses: the host's loopback as seen from the namespace, its DNS forwarder, the namespace's own. */
const SLIRP_HOST = '10.0.2.2';
const SLIRP_DNS = '10.0.2.3';
const SLIRP_GUEST = '10.0.2.100';
const SLIRP_NET = '10.0.2.0/24';

/** The sandbox's resolv.conf: the NAT's DNS forwarder, which asks the host's own resolver. */
export const FENCED_RESOLV_CONF = `nameserver ${SLIRP_DNS}\noptions timeout:2 attempts:2\n`;

/** A CIDR or an address, checked: nothing but an address and a prefix length reaches the ruleset. */
export function parseCidr(text: string): { address: string; prefix: number; family: 4 | 6 } {
  const [address, bits, extra] = text.split('/');
  const family = net.isIP(address ?? '');
  // A zone (fe80::1%eth0) names an interface of the host: nothing a rule can say.
  if (extra !== undefined || (family !== 4 && family !== 6) || address!.includes('%')) throw new Error(`"${text}" is not an IP address or CIDR range`);
  const max = family === 4 ? 32 : 128;
  const prefix = bits === undefined ? max : Number(bits);
  if (!/^\d{1,3}$/.test(bits ?? String(max)) || prefix > max) throw new Error(`"${text}" has no valid prefix length (0 to ${max})`);
  return { address: address!, prefix, family };
}

const cidrText = (c: { address: string; prefix: number; family: 4 | 6 }) => (c.prefix === (c.family === 4 ? 32 : 128) ? c.address : `${c.address}/${c.prefix}`);

/** Whether an IPv4 address is in 127.0.0.0/8 (and so means the host's own loopback in a rule). */
const isLoopback = (c: { address: string; family: 4 | 6 }) => (c.family === 4 ? c.address.startsWith('127.') : c.address === '::1');

/**
 * The nftables ruleset a fenced namespace is given (loaded by `nft -f` in the holder). Every
 * address in it has been through parseCidr, every port is a whole number: nothing a user wrote
 * reaches it as text.
 */
export function nftRuleset(policy: FencePolicy): string {
  const loopback: string[] = [];
  const lines: string[] = [];
  const nat: string[] = [];
  const ports = (r: EgressRule) => {
    if (!r.ports || r.ports.length === 0) return '';
    for (const p of r.ports) if (!Number.isInteger(p) || p < 1 || p > 65535) throw new Error(`port ${p} is not a port`);
    return ` meta l4proto { tcp, udp } th dport { ${r.ports.join(', ')} }`;
  };
  for (const rule of policy.allow) {
    const c = parseCidr(rule.cidr);
    if (isLoopback(c)) {
      // The host's loopback: only 127.0.0.1, only on named ports (a registry on the host), reached
      // through the NAT's gateway; the sandbox's own 127.0.0.1 answers everything else.
      if (c.family === 6 || !rule.ports?.length) throw new Error(`"${rule.cidr}": a loopback address is allowed only as 127.0.0.1 with a port (127.0.0.1:4873)`);
      ports(rule);
      for (const p of rule.ports) nat.push(`    ip daddr 127.0.0.1 tcp dport ${p} dnat to ${SLIRP_HOST}:${p}`);
      // TCP only: what is translated, and what a registry speaks.
      loopback.push(`    ip daddr ${SLIRP_HOST} tcp dport { ${rule.ports.join(', ')} } accept`);
    } else {
      lines.push(`    ${c.family === 4 ? 'ip' : 'ip6'} daddr ${cidrText(c)}${ports(rule)} accept`);
    }
  }
  const deny = policy.deny.map(parseCidr);
  const set = (family: 4 | 6, items: string[]) => (items.length === 0 ? [] : [`    ${family === 4 ? 'ip' : 'ip6'} daddr { ${items.join(', ')} } reject with icmpx admin-prohibited`]);
  const denied = [...set(4, deny.filter((c) => c.family === 4).map(cidrText)), ...set(6, deny.filter((c) => c.family === 6).map(cidrText))];
  const tail =
    policy.reach === 'public'
      ? [...set(4, REFUSED_V4), ...set(6, REFUSED_V6)]
      : ['    reject with icmpx admin-prohibited'];
  const out = [
    'table inet algohost_fence {',
    '  chain out {',
    '    type filter hook output priority filter; policy accept;',
    '    oif "lo" accept',
    // IPv6 neighbour discovery on the link, or IPv6 breaks before it starts.
    '    icmpv6 type { nd-router-solicit, nd-neighbor-solicit, nd-neighbor-advert } ip6 hoplimit 255 accept',
    ...loopback,
    // DNS only for what may reach the internet anyway: a build resolves nothing (FencePolicy.names).
    ...(policy.reach === 'public' ? [`    ip daddr ${SLIRP_DNS} meta l4proto { tcp, udp } th dport 53 accept`] : []),
    // The NAT's own network: every address of it but the forwarder is the host's loopback, so
    // it is refused before any allowed range (10.0.0.0/8, say) could open it.
    `    ip daddr ${SLIRP_NET} reject with icmpx admin-prohibited`,
    ...lines,
    ...denied,
    ...tail,
    '  }',
    '}',
  ];
  if (nat.length > 0) {
    out.push(
      'table ip algohost_fence_nat {',
      '  chain out {',
      '    type nat hook output priority -100; policy accept;',
      ...nat,
      '  }',
      '  chain post {',
      '    type nat hook postrouting priority 100; policy accept;',
      `    oifname "tap0" ip saddr 127.0.0.0/8 snat to ${SLIRP_GUEST}`,
      '  }',
      '}',
    );
  }
  return out.join('\n') + '\n';
}

/** The descriptors the holder reads and writes (3 is the worker's channel, 4 bwrap's seccomp program). */
export const FENCE_FD = { rules: 5, ready: 6, go: 7 } as const;

/**
 * The holder: says its namespace is made (the NAT may attach meanwhile), loads the rules,
 * brings lo up, lets 127.0.0.1 be translated to the host (when the rules say so), says ready,
 * waits for go, closes its pipes and becomes the sandbox.
 */
const HOLDER =
  `echo ns >&${FENCE_FD.ready}; ` +
  // Read from stdin, not /dev/fd/N: Node's pipes are sockets, which cannot be opened by path.
  `"$NFT" -f - <&${FENCE_FD.rules} || exit 90; exec ${FENCE_FD.rules}<&-; ` +
  `"$IP" link set lo up || exit 91; ` +
  `if [ "$LOCALNET" = 1 ]; then echo 1 > /proc/sys/net/ipv4/conf/all/route_localnet || exit 93; fi; ` +
  `echo ready >&${FENCE_FD.ready}; exec ${FENCE_FD.ready}>&-; ` +
  `read go <&${FENCE_FD.go} && [ "$go" = go ] || exit 92; exec ${FENCE_FD.go}<&-; ` +
  `unset NFT IP LOCALNET; exec "$@"`;

/**
 * The holder's command line, to put before bubblewrap's (its environment: holderEnv); with
 * `mount`, its namespaces include a mount namespace, where what follows may mount (sandbox.ts
 * stages a sandbox's directories there).
 */
export function holderArgs(tools: FenceTools = FENCE_TOOLS, mount = false): string[] {
  return [tools.unshare, '--user', '--map-root-user', '--net', ...(mount ? ['--mount'] : []), '--', '/bin/sh', '-c', HOLDER, 'holder'];
}

/** What the holder needs in its environment (cleared before bubblewrap runs). */
export function holderEnv(policy: FencePolicy, tools: FenceTools = FENCE_TOOLS): Record<string, string> {
  const localnet = policy.allow.some((r) => isLoopback(parseCidr(r.cidr)));
  return { NFT: tools.nft, IP: tools.ip, ...(localnet ? { LOCALNET: '1' } : {}) };
}

/** How long the namespace and its NAT may take to be ready. */
const RAISE_MS = 10_000;

/**
 * Raises the fence around a process started with holderArgs and FENCE_FD's pipes: feeds it the
 * rules, waits for it, attaches the NAT, says go. Resolves once bubblewrap may start; rejects
 * (and the caller kills the process) if any step fails. The NAT stops when the process exits.
 */
export async function raiseFence(child: ChildProcess, policy: FencePolicy, tools: FenceTools = FENCE_TOOLS): Promise<void> {
  const stdio = child.stdio as unknown as (Readable | Writable | null)[];
  const rules = stdio[FENCE_FD.rules] as Writable;
  const ready = stdio[FENCE_FD.ready] as Readable;
  const go = stdio[FENCE_FD.go] as Writable;
  for (const s of [rules, go]) s.on('error', () => undefined);
  const exited = new Promise<never>((_, reject) =>
    child.once('exit', (code, signal) => reject(new Error(`the sandbox's network could not be set up (${fenceExit(code) ?? `exit ${code ?? signal}`})`))),
  );
  exited.catch(() => undefined);
  rules.end(nftRuleset(policy));
  // The holder says `ns` once its namespace exists (the NAT is attached meanwhile: nothing runs
  // in the namespace before `go`), then `ready` once the filter is in.
  let text = '';
  const heard = (word: string) =>
    new Promise<void>((resolve, reject) => {
      const check = () => (text.includes(`${word}\n`) ? resolve() : undefined);
      ready.on('data', check);
      ready.once('end', () => (text.includes(`${word}\n`) ? resolve() : reject(new Error("the sandbox's network namespace was not made"))));
      check();
    });
  ready.setEncoding('utf8').on('data', (s: string) => (text += s));
  const filtered = heard('ready');
  filtered.catch(() => undefined);
  await within(Promise.race([heard('ns'), exited]), 'the network namespace');
  const nat = startNat(child.pid!, tools);
  // The NAT lives as long as the sandbox: closing its exit pipe ends it.
  child.once('exit', () => nat.stop());
  try {
    await within(Promise.race([Promise.all([nat.ready, filtered]), exited]), 'the network namespace and slirp4netns');
  } catch (err) {
    nat.stop();
    throw err;
  }
  ready.destroy();
  go.end('go\n');
}

function within<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took longer than ${RAISE_MS / 1000} s to be ready`)), RAISE_MS);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}

function fenceExit(code: number | null): string | undefined {
  switch (code) {
    case 90:
      return 'nft could not load the filter: is nftables installed, and may this user make user namespaces?';
    case 91:
      return 'the namespace has no loopback';
    case 92:
      return 'it was never told to go on';
    case 93:
      return 'route_localnet could not be set';
    default:
      return undefined;
  }
}

/** slirp4netns attached to `pid`'s network namespace: resolves `ready` once it has configured tap0. */
function startNat(pid: number, tools: FenceTools): { ready: Promise<void>; stop: () => void } {
  // fd 3: slirp writes 1 when ready; fd 4: slirp exits when it reads end-of-file there.
  const child = spawn(tools.slirp4netns, ['--configure', '--mtu=65520', '--ready-fd=3', '--exit-fd=4', '--enable-sandbox', '--enable-seccomp', String(pid), 'tap0'], {
    stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'],
    env: {},
    detached: true,
  });
  let err = '';
  child.stderr!.setEncoding('utf8').on('data', (s: string) => (err = (err + s).slice(-2000)));
  const exitPipe = child.stdio[4] as Writable;
  exitPipe.on('error', () => undefined);
  const ready = new Promise<void>((resolve, reject) => {
    (child.stdio[3] as Readable).once('data', () => resolve());
    child.once('error', (e) => reject(new Error(`slirp4netns could not start: ${e.message}`)));
    child.once('exit', (code) => reject(new Error(`slirp4netns exited (${code}) before the network was up: ${err.trim().split('\n').pop() ?? ''}`)));
  });
  ready.catch(() => undefined);
  let stopped = false;
  return {
    ready,
    stop: () => {
      if (stopped) return;
      stopped = true;
      exitPipe.destroy();
      // It exits on its own once the pipe is closed; a stuck one does not outlive this.
      const t = setTimeout(() => child.kill('SIGKILL'), 2000);
      t.unref();
      child.once('exit', () => clearTimeout(t));
    },
  };
}

export interface FenceSupport {
  available: boolean;
  reason?: string;
}

/**
 * Whether fenced sandboxes can be made here: the tools are installed, and a user and network
 * namespace with a filter in it can be made by this user (checked by making one).
 */
export function probeFence(tools: FenceTools = FENCE_TOOLS): FenceSupport {
  // Asked once per process for the usual tools: it makes a namespace (some 30 ms).
  if (tools === FENCE_TOOLS) return (probed ??= probeOnce(tools));
  return probeOnce(tools);
}

let probed: FenceSupport | undefined;

function probeOnce(tools: FenceTools): FenceSupport {
  for (const [name, file, pkg] of [
    ['unshare', tools.unshare, 'util-linux'],
    ['nft', tools.nft, 'nftables'],
    ['ip', tools.ip, 'iproute2'],
    ['slirp4netns', tools.slirp4netns, 'slirp4netns'],
  ] as const) {
    if (!fs.existsSync(file)) return { available: false, reason: `${name} is not installed at ${file} (apt-get install ${pkg})` };
  }
  const r = spawnSync(tools.unshare, ['--user', '--map-root-user', '--net', '--', '/bin/sh', '-c', `"$NFT" -f - && "$IP" link set lo up`], {
    input: nftRuleset({ reach: 'public', allow: [], deny: [] }),
    env: { NFT: tools.nft, IP: tools.ip },
    timeout: 10_000,
    stdio: ['pipe', 'ignore', 'pipe'],
  });
  if (r.status !== 0) return { available: false, reason: `a filtered network namespace cannot be made here: ${String(r.stderr).trim().split('\n').pop() || r.error?.message || `exit ${r.status}`}` };
  if (!canOpenTun()) return { available: false, reason: '/dev/net/tun cannot be opened by this user (slirp4netns needs it: mode 0666, or run the server as root)' };
  return { available: true };
}

function canOpenTun(): boolean {
  try {
    fs.closeSync(fs.openSync('/dev/net/tun', 'r+'));
    return true;
  } catch {
    return false;
  }
}
