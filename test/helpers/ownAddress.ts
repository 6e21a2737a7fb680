/**
 * A public address of this machine's own, for the address rule's tests (docs/security.md, "One
 * address rule"): an interface the test makes (`ip link add`, a dummy one, or a veth pair where
 * the kernel has no dummy driver), holding an address of the stand-in internet
 * (198.51.100.0/24), which no range refuses. The machine's real addresses are never used.
 * remove() deletes it (its address goes with it); so do the process's exit and its signals, and
 * the next start deletes one a killed run left behind.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { alive } from './netns.ts';

const IP = ['/usr/sbin/ip', '/usr/bin/ip', '/sbin/ip', '/bin/ip'].find((f) => fs.existsSync(f));
const PREFIX = 'ahown';

export interface OwnAddress {
  address: string;
  remove(): void;
}

function ip(...args: string[]): void {
  execFileSync(IP!, args, { stdio: ['ignore', 'ignore', 'pipe'], timeout: 10_000 });
}

/** Deletes the interfaces of runs whose process is gone. */
function sweep(): void {
  for (const name of fs.readdirSync('/sys/class/net')) {
    const m = new RegExp(`^${PREFIX}(\\d+)[ab]$`).exec(name);
    if (m && !alive(Number(m[1]))) {
      try {
        ip('link', 'del', name);
      } catch {
        // Gone meanwhile (a veth's peer goes with it).
      }
    }
  }
}

/**
 * Gives this machine `address` (198.51.100.x) on an interface of the test's own; a string
 * saying why not where it cannot be done (no `ip`, not root, no dummy or veth driver).
 */
export function addOwnAddress(address: string): OwnAddress | string {
  if (!IP) return 'ip (iproute2) is not installed';
  if (!/^198\.51\.100\.\d{1,3}$/.test(address)) throw new Error(`${address}: only the stand-in internet, 198.51.100.0/24`);
  sweep();
  const name = `${PREFIX}${process.pid}a`;
  const peer = `${PREFIX}${process.pid}b`;
  let made = false;
  let why = '';
  for (const kind of [['type', 'dummy'], ['type', 'veth', 'peer', 'name', peer]]) {
    try {
      ip('link', 'add', name, ...kind);
      made = true;
      break;
    } catch (err) {
      why += `${kind[1]}: ${String((err as { stderr?: Buffer }).stderr ?? err).trim()}; `;
    }
  }
  if (!made) return `this machine cannot be given an interface of the test's own (${why.trim()})`;
  let removed = false;
  const remove = () => {
    if (removed) return;
    removed = true;
    process.off('exit', remove);
    try {
      ip('link', 'del', name);
    } catch {
      // Already gone.
    }
  };
  const onSignal = (signal: NodeJS.Signals) => {
    remove();
    process.kill(process.pid, signal);
  };
  process.once('exit', remove);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    ip('addr', 'add', `${address}/32`, 'dev', name);
    ip('link', 'set', name, 'up');
    // A veth is running (and so listed by os.networkInterfaces) only with its peer up.
    if (fs.existsSync(`/sys/class/net/${peer}`)) ip('link', 'set', peer, 'up');
  } catch (err) {
    remove();
    return `the address could not be set up: ${String((err as { stderr?: Buffer }).stderr ?? err).trim()}`;
  }
  return {
    address,
    remove: () => {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      remove();
    },
  };
}

/** A listener on an address of this machine's own (addOwnAddress), and what reached it. */
export interface OwnListener {
  address: string;
  /** `http://address:port`. */
  url: string;
  /** `METHOD /path` of every request that reached it. */
  heard: string[];
  /** Stops listening and removes the address. */
  close(): Promise<void>;
}

/**
 * Listens on `address`, given to this machine (addOwnAddress), answering every request 501 with
 * a text a port scan would read back; a string saying why not where the address cannot be made.
 */
export async function ownListener(address: string): Promise<OwnListener | string> {
  const own = addOwnAddress(address);
  if (typeof own === 'string') return own;
  const heard: string[] = [];
  const server = http.createServer((req, res) => {
    heard.push(`${req.method} ${req.url}`);
    res.writeHead(501).end('Unsupported method (a port scan would read this)');
  });
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, own.address, resolve);
    });
  } catch (err) {
    own.remove();
    throw err;
  }
  return {
    address: own.address,
    url: `http://${own.address}:${(server.address() as AddressInfo).port}`,
    heard,
    close: async () => {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
      own.remove();
    },
  };
}
