/**
 * A network of the test's own, so that what sandboxes can reach is tried without touching the
 * host's: two network namespaces made here (`ip netns`), joined by a veth pair.
 *
 *   "server"   198.51.100.2/24 (2001:db8:100::2), default route via the internet host; its own
 *              loopback also holds 10.1.2.3 (a private address), 169.254.169.254 (cloud
 *              metadata) and fd99::1 (ULA), with a "leak" listener on every address
 *              (standins.py leak): reaching it from a sandbox means the fence let it through.
 *              The code under test runs here (`run`), with /etc/netns/<server>/resolv.conf
 *              naming the internet host as its resolver.
 *   "internet" 198.51.100.1/24 (2001:db8:100::1), a documentation range standing in for the
 *              internet: TCP 7001 and UDP 7002 answering "INTERNET …", DNS on 53
 *              (good.test → 198.51.100.1, loop.test → 127.0.0.1, priv.test → 10.1.2.3,
 *              meta.test → 169.254.169.254, api.test → 198.51.100.2). Nothing lies beyond it.
 *
 * Traffic goes only to loopback and into these namespaces; both are deleted by stop(), at
 * process exit, or by the next run if a crash left them.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

export const IP = ['/usr/sbin/ip', '/usr/bin/ip', '/sbin/ip', '/bin/ip'].find((f) => fs.existsSync(f)) ?? '/usr/sbin/ip';
const PYTHON = '/usr/bin/python3';
const STANDINS = path.join(import.meta.dirname, 'standins.py');
const PREFIX = 'ahtest-';

export const INTERNET = { address: '198.51.100.1', address6: '2001:db8:100::1', tcp: 7001, udp: 7002 } as const;
export const SERVER_ADDRESS = '198.51.100.2';

/** Why test networks cannot be made here, or undefined. */
export function testNetworkUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return 'making network namespaces needs root';
  if (!fs.existsSync(IP)) return 'ip (iproute2) is not installed';
  if (!fs.existsSync(PYTHON)) return `${PYTHON} is not installed`;
  return undefined;
}

export interface TestNetwork {
  server: string;
  internet: string;
  /** The port of the leak listeners in the server namespace. */
  leakPort: number;
  /** Runs `argv` in the server namespace; its whole process group is killed after `timeoutMs`. */
  run(argv: string[], options?: { env?: Record<string, string>; timeoutMs?: number }): Promise<{ code: number | null; stdout: string; stderr: string }>;
  /** What the stand-ins answered so far (INTERNET …, LEAK …, DNS …). */
  log(): string[];
  stop(): Promise<void>;
}

const ip = (...args: string[]) => execFileSync(IP, args, { stdio: ['ignore', 'ignore', 'pipe'], timeout: 10_000 });

const live = new Set<{ stop(): Promise<void>; stopNow(): void }>();
process.once('exit', () => {
  for (const n of live) n.stopNow();
});

/** Namespaces a crashed run left (named by PREFIX), removed before a new one is made. */
function sweep(): void {
  let names: string[] = [];
  try {
    names = execFileSync(IP, ['netns', 'list'], { encoding: 'utf8' })
      .split('\n')
      .map((l) => l.split(' ')[0]!)
      .filter((n) => n.startsWith(PREFIX));
  } catch {
    return;
  }
  for (const n of names) {
    if (n.endsWith(`-${process.pid}`)) continue;
    const pid = Number(n.split('-').pop());
    let alive = false;
    try {
      process.kill(pid, 0);
      alive = true;
    } catch {
      // its process is gone
    }
    if (alive) continue;
    try {
      ip('netns', 'del', n);
    } catch {
      // already gone
    }
    fs.rmSync(path.join('/etc/netns', n), { recursive: true, force: true });
  }
}

export async function startTestNetwork(): Promise<TestNetwork> {
  sweep();
  const tag = crypto.randomBytes(3).toString('hex');
  const server = `${PREFIX}s${tag}-${process.pid}`;
  const internet = `${PREFIX}i${tag}-${process.pid}`;
  const [vs, vi] = [`ahs${tag}`, `ahi${tag}`];
  const children: ChildProcess[] = [];
  const lines: string[] = [];
  const etc = path.join('/etc/netns', server);
  const stopNow = () => {
    for (const c of children) {
      try {
        process.kill(-c.pid!, 'SIGKILL');
      } catch {
        // gone
      }
    }
    for (const n of [server, internet]) {
      try {
        ip('netns', 'del', n);
      } catch {
        // gone
      }
    }
    fs.rmSync(etc, { recursive: true, force: true });
  };
  const handle = { stopNow, stop: async () => stopNow() };
  live.add(handle);
  const standIn = (ns: string, args: string[]) =>
    new Promise<void>((resolve, reject) => {
      const child = spawn(IP, ['netns', 'exec', ns, PYTHON, '-u', STANDINS, ...args], { stdio: ['ignore', 'pipe', 'pipe'], detached: true, env: {} });
      children.push(child);
      let err = '';
      const timer = setTimeout(() => reject(new Error(`standins.py ${args.join(' ')} did not start: ${err}`)), 10_000);
      child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
      let buffered = '';
      child.stdout!.setEncoding('utf8').on('data', (d: string) => {
        buffered += d;
        const parts = buffered.split('\n');
        buffered = parts.pop()!;
        for (const l of parts) {
          if (l === 'ready') {
            clearTimeout(timer);
            resolve();
          } else lines.push(l);
        }
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`standins.py ${args.join(' ')} exited (${code}): ${err}`));
      });
    });
  try {
    ip('netns', 'add', server);
    ip('netns', 'add', internet);
    ip('link', 'add', vs, 'type', 'veth', 'peer', 'name', vi);
    ip('link', 'set', vs, 'netns', server);
    ip('link', 'set', vi, 'netns', internet);
    ip('-n', internet, 'addr', 'add', `${INTERNET.address}/24`, 'dev', vi);
    ip('-n', internet, 'addr', 'add', `${INTERNET.address6}/64`, 'dev', vi, 'nodad');
    ip('-n', server, 'addr', 'add', `${SERVER_ADDRESS}/24`, 'dev', vs);
    ip('-n', server, 'addr', 'add', '2001:db8:100::2/64', 'dev', vs, 'nodad');
    for (const [ns, dev] of [[internet, vi], [server, vs]] as const) {
      ip('-n', ns, 'link', 'set', 'lo', 'up');
      ip('-n', ns, 'link', 'set', dev!, 'up');
    }
    ip('-n', server, 'route', 'add', 'default', 'via', INTERNET.address);
    ip('-n', server, '-6', 'route', 'add', 'default', 'via', INTERNET.address6);
    for (const a of ['10.1.2.3/32', '169.254.169.254/32']) ip('-n', server, 'addr', 'add', a, 'dev', 'lo');
    ip('-n', server, 'addr', 'add', 'fd99::1/128', 'dev', 'lo');
    fs.mkdirSync(etc, { recursive: true });
    fs.writeFileSync(path.join(etc, 'resolv.conf'), `nameserver ${INTERNET.address}\n`);
    const leakPort = 20_000 + crypto.randomInt(20_000);
    await Promise.all([standIn(internet, ['internet']), standIn(server, ['leak', String(leakPort)])]);
    return {
      server,
      internet,
      leakPort,
      log: () => [...lines],
      stop: async () => {
        live.delete(handle);
        stopNow();
      },
      run: (argv, options = {}) =>
        new Promise((resolve) => {
          const child = spawn(IP, ['netns', 'exec', server, ...argv], { stdio: ['ignore', 'pipe', 'pipe'], detached: true, env: { ...process.env, ...options.env } });
          children.push(child);
          let stdout = '';
          let stderr = '';
          child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
          child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
          const timer = setTimeout(() => {
            try {
              process.kill(-child.pid!, 'SIGKILL');
            } catch {
              // gone
            }
          }, options.timeoutMs ?? 120_000);
          child.once('close', (code) => {
            clearTimeout(timer);
            resolve({ code, stdout, stderr });
          });
        }),
    };
  } catch (err) {
    live.delete(handle);
    stopNow();
    throw err;
  }
}
