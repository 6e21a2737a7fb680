/**
 * A network of the test's own, for trying an egress fence without touching the host's network:
 * two network namespaces (`ip netns add`) joined by a veth pair created directly inside them
 * (neither end ever exists in the host's namespace; no host address, route or sysctl changes).
 *
 *   server    198.51.100.2/24 (2001:db8:100::2/64), default route via 198.51.100.1; its `lo`
 *             also holds 10.1.2.3, 169.254.169.254 (and fd99::1) with "leak" listeners, TCP and
 *             UDP on 0.0.0.0/[::]:leakPort. Code under test runs here (run()); `ip netns exec`
 *             mounts /etc/netns/<server>/resolv.conf (nameserver 198.51.100.1) over
 *             /etc/resolv.conf for it.
 *   internet  198.51.100.1/24 (2001:db8:100::1/64), no default route, forwarding off: TCP 7001
 *             and UDP 7002 answering "INTERNET <proto> from <peer>", DNS on 53 (UDP and TCP):
 *             good.test → 198.51.100.1 / 2001:db8:100::1, loop.test → 127.0.0.1 / ::1,
 *             priv.test → 10.1.2.3 / fd99::1, meta.test → 169.254.169.254,
 *             api.test → 198.51.100.2 / 2001:db8:100::2, NXDOMAIN otherwise.
 *
 * The stand-ins are test/helpers/internet_servers.py. stop() (also run at exit, SIGINT, SIGTERM)
 * kills every process it started, by process group, and any left in the namespaces, and deletes
 * both; namespaces a crashed run left behind are deleted by the next start.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const IP = ['/usr/sbin/ip', '/usr/bin/ip', '/sbin/ip', '/bin/ip'].find((f) => fs.existsSync(f));
const PYTHON = '/usr/bin/python3';
const SCRIPT = path.join(import.meta.dirname, 'internet_servers.py');
const SERVER_PREFIX = 'algohost-srv-';
const INTERNET_PREFIX = 'algohost-inet-';
const OURS = /^algohost-(?:srv|inet)-[0-9a-f]+-(\d+)$/;
/** A namespace of a dead process is left alone this long (it may belong to another pid namespace). */
const STALE_MS = 2 * 60_000;
const WAIT_MS = 10_000;

const INTERNET_ADDRESS = '198.51.100.1';
const SERVER_ADDRESS = '198.51.100.2';
const INTERNET_ADDRESS6 = '2001:db8:100::1';
const SERVER_ADDRESS6 = '2001:db8:100::2';
const PORTS = { tcp: 7001, udp: 7002, dns: 53 } as const;

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface TestNetwork {
  /** Name of the "server" namespace (algohost-srv-<hex>-<pid>). */
  server: string;
  /** Name of the "internet" namespace (algohost-inet-<hex>-<pid>). */
  internet: string;
  internetAddress: '198.51.100.1';
  serverAddress: '198.51.100.2';
  /** Whether the IPv6 addresses (2001:db8:100::1/::2, fd99::1 on the server's lo) are set up. */
  ipv6: boolean;
  /** Servers on 198.51.100.1 (and [2001:db8:100::1]) inside `internet`. */
  ports: { tcp: number; udp: number; dns: 53 };
  /** Listeners inside the server namespace on 127.0.0.1, ::1, 10.1.2.3, 169.254.169.254, fd99::1, 198.51.100.2 (any address): TCP and UDP. */
  leakPort: number;
  /** Runs argv in the server namespace (`ip netns exec`), env added to this process's (less NODE_TEST_*); its process group is SIGKILLed after timeoutMs (default 30 s). */
  run(argv: string[], opts?: { env?: Record<string, string>; timeoutMs?: number }): Promise<RunResult>;
  /** What the stand-ins answered so far: "INTERNET tcp from 198.51.100.2", "LEAK udp 10.1.2.3:PORT from 10.1.2.3", "DNS udp A good.test from … -> 198.51.100.1". */
  log(): Promise<string[]>;
  /** Kills every process started and deletes both namespaces; idempotent. */
  stop(): Promise<void>;
}

function ip(...args: string[]): string {
  if (!IP) throw new Error('ip (iproute2) is not installed');
  try {
    return execFileSync(IP, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: WAIT_MS });
  } catch (err) {
    const stderr = (err as { stderr?: string }).stderr?.trim();
    throw new Error(`ip ${args.join(' ')} failed${stderr ? `: ${stderr}` : ''}`, { cause: err });
  }
}

function quietly(fn: () => unknown): void {
  try {
    fn();
  } catch {
    // already gone
  }
}

let unavailable: { reason: string | undefined } | undefined;

/** Why test networks cannot be made here (not root, no `ip`, `ip netns add` fails), else undefined. */
export function netnsUnavailable(): string | undefined {
  unavailable ??= { reason: probe() };
  return unavailable.reason;
}

function probe(): string | undefined {
  if (process.platform !== 'linux') return 'network namespaces are Linux only';
  if (process.getuid?.() !== 0) return 'making network namespaces needs root';
  if (!IP) return 'ip (iproute2) is not installed';
  if (!fs.existsSync(PYTHON)) return `${PYTHON} is not installed`;
  const name = `algohost-probe-${crypto.randomBytes(4).toString('hex')}`;
  try {
    ip('netns', 'add', name);
  } catch (err) {
    return (err as Error).message;
  }
  quietly(() => ip('netns', 'del', name));
  return undefined;
}

/** Kills whatever still runs in `ns` (processes that entered it outside our process groups). */
function killInside(ns: string): void {
  let pids: number[] = [];
  quietly(() => {
    pids = ip('netns', 'pids', ns).split('\n').filter(Boolean).map(Number);
  });
  for (const pid of pids) if (pid > 1 && pid !== process.pid) quietly(() => process.kill(pid, 'SIGKILL'));
}

function deleteNamespace(ns: string): void {
  killInside(ns);
  quietly(() => ip('netns', 'del', ns));
  fs.rmSync(path.join('/etc/netns', ns), { recursive: true, force: true });
}

/** Whether process `pid` is alive (EPERM: alive, another user's). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Deletes namespaces a crashed run left: ours by name, whose process is gone, made a while ago. */
function sweep(): void {
  let names: string[] = [];
  quietly(() => {
    names = ip('netns', 'list').split('\n').map((l) => l.split(' ')[0] ?? '');
  });
  for (const ns of names) {
    const pid = Number(OURS.exec(ns)?.[1] ?? NaN);
    if (!Number.isInteger(pid) || pid === process.pid || alive(pid)) continue;
    let age = 0;
    quietly(() => (age = Date.now() - fs.statSync(path.join('/run/netns', ns)).mtimeMs));
    if (age > STALE_MS) deleteNamespace(ns);
  }
  // Their log directories (os.tmpdir()/algohost-netns-<pid>-XXXXXX).
  let dirs: string[] = [];
  quietly(() => (dirs = fs.readdirSync(os.tmpdir())));
  for (const d of dirs) {
    const pid = Number(/^algohost-netns-(\d+)-/.exec(d)?.[1] ?? NaN);
    if (!Number.isInteger(pid) || pid === process.pid || alive(pid)) continue;
    const full = path.join(os.tmpdir(), d);
    quietly(() => {
      if (Date.now() - fs.statSync(full).mtimeMs > STALE_MS) fs.rmSync(full, { recursive: true, force: true });
    });
  }
}

// ---- cleanup at exit ---------------------------------------------------------------------------

const live = new Set<{ stopNow(): void }>();
let hooked = false;

function stopAllNow(): void {
  for (const n of [...live]) n.stopNow();
}

function onSignal(signal: NodeJS.Signals): void {
  stopAllNow();
  // Only ours: do what the signal would have done without it.
  if (process.listenerCount(signal) === 1) {
    process.removeListener(signal, onSignal);
    process.kill(process.pid, signal);
  }
}

function hookExit(): void {
  if (hooked) return;
  hooked = true;
  process.on('exit', stopAllNow);
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
}

/** This process's environment without node:test's own (a node child would think itself a test file). */
function inherited(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('NODE_TEST')));
}

function killGroup(child: ChildProcess): void {
  if (child.pid && child.exitCode === null && child.signalCode === null) quietly(() => process.kill(-child.pid!, 'SIGKILL'));
}

// ---- the network ---------------------------------------------------------------------------------

export async function startTestNetwork(): Promise<TestNetwork> {
  const reason = netnsUnavailable();
  if (reason) throw new Error(`no test network here: ${reason}`);
  hookExit();
  sweep();
  try {
    return await build();
  } catch (err) {
    // Once seen: a namespace made a moment before could not be entered (EINVAL); another
    // process deleting namespaces at the same time is the likely cause. Try once more, afresh.
    if (!(err instanceof Error) || !err.message.startsWith('ip ')) throw err;
    try {
      return await build();
    } catch (again) {
      throw new Error(`${(again as Error).message} (and before that: ${err.message})`, { cause: again });
    }
  }
}

async function build(): Promise<TestNetwork> {
  const tag = crypto.randomBytes(3).toString('hex');
  const server = `${SERVER_PREFIX}${tag}-${process.pid}`;
  const internet = `${INTERNET_PREFIX}${tag}-${process.pid}`;
  const [vServer, vInternet] = [`ahs${tag}`, `ahi${tag}`]; // ≤ 15 characters
  const leakPort = 20_000 + crypto.randomInt(20_000);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `algohost-netns-${process.pid}-`));
  const logFile = path.join(dir, 'servers.log');
  const etc = path.join('/etc/netns', server);
  const children = new Set<ChildProcess>();
  let stopped = false;

  const stopNow = () => {
    stopped = true;
    live.delete(handle);
    for (const c of children) killGroup(c);
    for (const ns of [server, internet]) deleteNamespace(ns);
    fs.rmSync(etc, { recursive: true, force: true });
    fs.rmSync(dir, { recursive: true, force: true });
  };
  const handle = { stopNow };
  live.add(handle);

  const stop = async () => {
    if (stopped) return;
    stopped = true;
    const exits = [...children].map(
      (c) => new Promise<void>((resolve) => (c.exitCode !== null || c.signalCode !== null ? resolve() : c.once('exit', () => resolve()))),
    );
    for (const c of children) killGroup(c);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.all(exits), new Promise((resolve) => (timer = setTimeout(resolve, 2_000)))]);
    clearTimeout(timer);
    stopNow();
  };

  /** Starts internet_servers.py in `ns`; resolves once it printed "ready". */
  const standIn = (ns: string, args: string[]) =>
    new Promise<void>((resolve, reject) => {
      const child = spawn(IP!, ['netns', 'exec', ns, PYTHON, '-u', SCRIPT, ...args, '--log', logFile], {
        stdio: ['ignore', 'pipe', 'pipe'],
        detached: true,
        env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' },
      });
      children.add(child);
      let stderr = '';
      let stdout = '';
      const fail = (why: string) => {
        clearTimeout(timer);
        reject(new Error(`internet_servers.py ${args[0]} in ${ns} ${why}${stderr.trim() ? `: ${stderr.trim().slice(-2000)}` : ''}`));
      };
      const timer = setTimeout(() => fail(`did not print "ready" within ${WAIT_MS / 1000} s`), WAIT_MS);
      child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
      child.stdout!.setEncoding('utf8').on('data', (d: string) => {
        stdout += d;
        if (stdout.split('\n').includes('ready')) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once('error', (err) => fail(`could not start (${err.message})`));
      child.once('exit', (code, signal) => fail(`exited (${code ?? signal})`));
    });

  try {
    ip('netns', 'add', server);
    ip('netns', 'add', internet);
    ip('link', 'add', 'name', vServer, 'netns', server, 'type', 'veth', 'peer', 'name', vInternet, 'netns', internet);
    ip('-n', internet, 'addr', 'add', `${INTERNET_ADDRESS}/24`, 'dev', vInternet);
    ip('-n', server, 'addr', 'add', `${SERVER_ADDRESS}/24`, 'dev', vServer);
    for (const [ns, dev] of [[internet, vInternet], [server, vServer]] as const) {
      ip('-n', ns, 'link', 'set', 'lo', 'up');
      ip('-n', ns, 'link', 'set', dev, 'up');
    }
    ip('-n', server, 'route', 'add', 'default', 'via', INTERNET_ADDRESS);
    for (const a of ['10.1.2.3/32', '169.254.169.254/32']) ip('-n', server, 'addr', 'add', a, 'dev', 'lo');
    let ipv6 = true;
    try {
      ip('-n', internet, 'addr', 'add', `${INTERNET_ADDRESS6}/64`, 'dev', vInternet, 'nodad');
      ip('-n', server, 'addr', 'add', `${SERVER_ADDRESS6}/64`, 'dev', vServer, 'nodad');
      ip('-n', server, '-6', 'route', 'add', 'default', 'via', INTERNET_ADDRESS6);
      ip('-n', server, 'addr', 'add', 'fd99::1/128', 'dev', 'lo', 'nodad');
    } catch {
      ipv6 = false;
    }
    fs.mkdirSync(etc, { recursive: true });
    fs.writeFileSync(path.join(etc, 'resolv.conf'), `nameserver ${INTERNET_ADDRESS}\noptions timeout:2 attempts:1\n`);
    fs.writeFileSync(logFile, '');

    await Promise.all([
      standIn(internet, [
        'internet',
        '--addr', INTERNET_ADDRESS,
        ...(ipv6 ? ['--addr6', INTERNET_ADDRESS6] : []),
        '--tcp', String(PORTS.tcp),
        '--udp', String(PORTS.udp),
      ]),
      standIn(server, ['leak', '--port', String(leakPort)]),
    ]);

    const run: TestNetwork['run'] = (argv, opts = {}) =>
      new Promise((resolve, reject) => {
        if (stopped) return reject(new Error('the test network is stopped'));
        const child = spawn(IP!, ['netns', 'exec', server, ...argv], {
          stdio: ['ignore', 'pipe', 'pipe'],
          detached: true,
          env: { ...inherited(), ...opts.env },
        });
        children.add(child);
        let stdout = '';
        let stderr = '';
        child.stdout!.setEncoding('utf8').on('data', (d: string) => (stdout += d));
        child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
        const timeoutMs = opts.timeoutMs ?? 30_000;
        let grace: NodeJS.Timeout | undefined;
        const timer = setTimeout(() => {
          killGroup(child);
          stderr += `\n[netns.ts: killed after ${timeoutMs} ms]`;
        }, timeoutMs);
        const done = (code: number | null) => {
          clearTimeout(timer);
          clearTimeout(grace);
          children.delete(child);
          resolve({ code, stdout, stderr });
        };
        child.once('error', (err) => {
          clearTimeout(timer);
          children.delete(child);
          reject(err);
        });
        // A descendant that left the process group may hold the pipes open: stop waiting for them.
        child.once('exit', (code) => {
          grace = setTimeout(() => {
            child.stdout!.destroy();
            child.stderr!.destroy();
            done(code);
          }, 1_000);
        });
        child.once('close', (code) => done(code));
      });

    return {
      server,
      internet,
      internetAddress: INTERNET_ADDRESS,
      serverAddress: SERVER_ADDRESS,
      ipv6,
      ports: { ...PORTS },
      leakPort,
      run,
      log: async () => {
        try {
          return (await fs.promises.readFile(logFile, 'utf8')).split('\n').filter(Boolean);
        } catch {
          return [];
        }
      },
      stop,
    };
  } catch (err) {
    await stop();
    throw err;
  }
}
