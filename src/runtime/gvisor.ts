import { spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DENIED_X86_64 } from './seccomp.ts';

/**
 * gVisor (`ALGOHOST_SANDBOX=gvisor`): the same sandbox as bubblewrap's (sandbox.ts), its mounts,
 * user, limits and network, given to gVisor's `runsc` as an OCI bundle, so that the algorithm's
 * system calls are served by gVisor's own kernel (the Sentry), not the host's. sandbox.ts builds
 * the launch (what is mounted where, the command, the environment, the limits); this module
 * writes it as a bundle and says how to run it.
 *
 * How it runs: `runsc run` (not `runsc do`), with a read-only root file system of our own (an
 * empty skeleton: the mount points and Debian's merged-/usr links), the mounts bubblewrap gives
 * (/usr, /algo, /runner read-only, a size-capped tmpfs /tmp, /proc, gVisor's own /dev), no
 * capabilities (not even in the bounding set), no new privileges, the rlimits bubblewrap's
 * prlimit sets (enforced by gVisor), seccomp.ts's filter applied by gVisor to the algorithm's
 * calls (`--oci-seccomp`), with new user namespaces refused as bubblewrap's --disable-userns
 * does, and `--network=none`, or `--network=host` for a sandbox with the network: then the Sentry's
 * sockets are host sockets of the namespace runsc was started in, which for an algorithm is the
 * egress fence's (runsc is exec'd by the fence's holder, as bubblewrap is).
 *
 * The user: uid 0 of gVisor's own user namespace, without a single capability. Under bubblewrap
 * the sandbox's uid 65534 is the server's user outside, so it owns, within its mounts, what the
 * server owns: the build directories (mode 0700) included. gVisor has no such mapping here (an
 * OCI uidMappings entry makes this runsc fail: "cannot create gofer process: fork/exec
 * /proc/self/exe: invalid argument"), and a uid other than the files' owner could not read a
 * build or write a build step's /algo. uid 0 without capabilities is that owner and nothing
 * more: it cannot change user, chown, mount, or read what the server's user could not.
 *
 * The control channel: a runner speaks to the server on fd 3, a Unix socket. `runsc do` and
 * `runsc run` pass a container only its stdin, stdout and stderr (this runsc has no
 * --preserve-fds). The channel goes in as the container's stdin instead (the server's shell moves
 * fd 3 to fd 0 before it execs runsc): gVisor imports a host socket given as stdio as a socket
 * the container reads and writes both ways. Inside, a shell moves it back to fd 3 and gives the
 * runner /dev/null as its stdin, so the runners are the same as under bubblewrap, and the
 * algorithm's stdout and stderr stay the pipes they always are. The alternative, a Unix socket
 * bound into the container with `--host-uds=open`, was not taken: it needs a socket file per
 * sandbox, a listener and an accept the server must match to its sandbox, and it lets the
 * container connect to any host socket that is mounted in; stdin needs none of that.
 *
 * Processes: `runsc run` starts a gofer (same process group) and the sandbox (a session of its
 * own, started `--attached`: it dies with `runsc run`). Killing the worker's process group kills
 * runsc and its gofer, and so the sandbox; `setpriv --pdeathsig` kills runsc with the server.
 * Every sandbox has a state directory of its own (`--root`) in the server's temporary directory;
 * once runsc has exited, a container it did not delete itself (it was killed) is deleted with
 * `runsc delete --force` and the bundle removed. The worker's cgroup (runsc runs with
 * --ignore-cgroups, so every process of it stays there) is the last net: removing it kills
 * whatever is left.
 */

export const RUNSC = '/usr/bin/runsc';
/** Debian's runsc (2022) knows ptrace and kvm; ptrace needs nothing of the host but ptrace itself. */
const PLATFORM = 'ptrace';
const SETPRIV = '/usr/bin/setpriv';

/** What sandbox.ts asks of gVisor. */
export interface GvisorOptions {
  /** The runsc binary (ALGOHOST_RUNSC). */
  runsc: string;
}

/** A host path mounted in the sandbox (bubblewrap's --ro-bind, --bind, --ro-bind-try). */
export interface BindMount {
  source: string;
  dest: string;
  writable?: boolean;
  /** Mounted only if it exists on the host. */
  optional?: boolean;
}

/** One sandbox, as sandbox.ts describes it. */
export interface GvisorLaunch {
  /** What is mounted besides /usr, /proc, /dev and /tmp. */
  binds: BindMount[];
  /** Size of /tmp (bytes). */
  tmpBytes: number;
  argv: string[];
  env: ReadonlyArray<readonly [string, string]>;
  cwd: string;
  /** RLIMIT_* name (without the prefix) → value, soft and hard. */
  rlimits: Record<string, number>;
  /** The network of the namespace runsc runs in (the fence's, or the host's); none otherwise. */
  network: boolean;
  /** seccomp.ts's filter, applied by gVisor (x86_64 only, as seccomp.ts). */
  seccomp: boolean;
}

/**
 * The host name a sandbox has, under bubblewrap and gVisor alike (a UTS namespace of its own):
 * the host's would say which machine of the deployment it runs on.
 */
export const SANDBOX_HOSTNAME = 'sandbox';

/** The sandbox's user inside gVisor (see above). */
export const GVISOR_UID = 0;

const CLONE_NEWUSER = 0x10000000;
const EPERM = 1;

/**
 * seccomp.ts's refusals as an OCI seccomp profile, which gVisor applies to the algorithm's system
 * calls, and a new user namespace refused (clone with CLONE_NEWUSER; unshare is refused whole).
 * clone3, whose flags a filter cannot see, is not implemented by this gVisor (ENOSYS: libc falls
 * back to clone); refusing it here would not do, as glibc's threads then fail to start.
 */
function seccompProfile(): Record<string, unknown> {
  return {
    defaultAction: 'SCMP_ACT_ALLOW',
    architectures: ['SCMP_ARCH_X86_64'],
    syscalls: [
      { names: Object.keys(DENIED_X86_64), action: 'SCMP_ACT_ERRNO', errnoRet: EPERM },
      { names: ['clone'], action: 'SCMP_ACT_ERRNO', errnoRet: EPERM, args: [{ index: 0, value: CLONE_NEWUSER, valueTwo: CLONE_NEWUSER, op: 'SCMP_CMP_MASKED_EQ' }] },
    ],
  };
}

/** The descriptor the runner expects its channel on. */
const CHANNEL_FD = 3;
/** Inside the sandbox: the channel arrives as stdin; move it to fd 3, and give the runner /dev/null. */
const CHANNEL_FROM_STDIN = `exec ${CHANNEL_FD}<&0 0</dev/null; exec "$@"`;
/** On the host, the last thing before runsc: the channel (fd 3) becomes stdin. */
export const CHANNEL_TO_STDIN = `exec 0<&${CHANNEL_FD} ${CHANNEL_FD}<&-; `;

let base: string | undefined;
/** The server's directory for gVisor: the root skeleton and a bundle per sandbox. Removed at exit. */
function baseDir(): string {
  if (base === undefined || !fs.existsSync(base)) {
    base = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-gvisor-'));
    fs.chmodSync(base, 0o711);
    const made = base;
    process.once('exit', () => fs.rmSync(made, { recursive: true, force: true }));
  }
  return base;
}

/** The directory every bundle's (read-only) root file system is: empty but for mount points and links. */
export function gvisorBase(): string {
  return baseDir();
}

let rootfs: string | undefined;
function rootDir(): string {
  if (rootfs === undefined || !fs.existsSync(rootfs)) {
    const dir = path.join(baseDir(), 'rootfs');
    for (const d of ['usr', 'proc', 'dev', 'tmp', 'etc']) fs.mkdirSync(path.join(dir, d), { recursive: true, mode: 0o755 });
    for (const [link, target] of [['lib', 'usr/lib'], ['lib64', 'usr/lib64'], ['bin', 'usr/bin'], ['sbin', 'usr/sbin']] as const) {
      if (!fs.existsSync(path.join(dir, link))) fs.symlinkSync(target, path.join(dir, link));
    }
    rootfs = dir;
  }
  return rootfs;
}

/**
 * Makes the mount point of `dest` in the root skeleton (a directory, or an empty file for a file),
 * if it has none yet: the root is read-only to the sandbox, so gVisor cannot make it itself.
 */
function mountPoint(dest: string, source: string): void {
  const at = path.join(rootDir(), path.normalize(dest));
  if (!at.startsWith(rootDir() + path.sep)) throw new Error(`mount point ${dest} is outside the root`);
  if (fs.existsSync(at)) return;
  let isDir = true;
  try {
    isDir = fs.statSync(source).isDirectory();
  } catch {
    // A missing optional source is not mounted: its point is never used.
  }
  fs.mkdirSync(isDir ? at : path.dirname(at), { recursive: true, mode: 0o755 });
  if (!isDir) fs.closeSync(fs.openSync(at, 'a', 0o644));
}

/** The OCI runtime spec (config.json) of one sandbox. */
export function ociSpec(g: GvisorLaunch): Record<string, unknown> {
  const mounts: Record<string, unknown>[] = [
    { destination: '/proc', type: 'proc', source: 'proc' },
    { destination: '/tmp', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', `size=${g.tmpBytes}`, 'mode=1777'] },
    { destination: '/usr', type: 'bind', source: '/usr', options: ['rbind', 'ro'] },
  ];
  for (const b of g.binds) {
    if (b.optional && !fs.existsSync(b.source)) continue;
    mountPoint(b.dest, b.source);
    mounts.push({ destination: b.dest, type: 'bind', source: b.source, options: ['rbind', b.writable ? 'rw' : 'ro'] });
  }
  const none: string[] = [];
  return {
    ociVersion: '1.0.2',
    process: {
      terminal: false,
      user: { uid: GVISOR_UID, gid: GVISOR_UID },
      args: ['/bin/sh', '-c', CHANNEL_FROM_STDIN, 'sandbox', ...g.argv],
      env: g.env.map(([k, v]) => `${k}=${v}`),
      cwd: g.cwd,
      capabilities: { bounding: none, effective: none, inheritable: none, permitted: none, ambient: none },
      rlimits: Object.entries(g.rlimits).map(([type, limit]) => ({ type: `RLIMIT_${type}`, hard: limit, soft: limit })),
      noNewPrivileges: true,
    },
    root: { path: rootDir(), readonly: true },
    hostname: SANDBOX_HOSTNAME,
    mounts,
    // With the network, runsc's --network=host uses the namespace it is in: no new one.
    linux: {
      namespaces: [{ type: 'pid' }, { type: 'ipc' }, { type: 'uts' }, { type: 'mount' }, ...(g.network ? [] : [{ type: 'network' }])],
      ...(g.seccomp ? { seccomp: seccompProfile() } : {}),
    },
  };
}

/** One sandbox's bundle: its directory, container id and the command that runs it. */
export interface GvisorBundle {
  dir: string;
  id: string;
  /** `setpriv --pdeathsig KILL` and runsc's command line (after the fence's holder, if any). */
  prefix: string[];
  command: string[];
}

/** Writes a sandbox's bundle (its config.json, a state directory of its own) and says how to run it. */
export function gvisorBundle(g: GvisorLaunch, options: GvisorOptions): GvisorBundle {
  const dir = fs.mkdtempSync(path.join(baseDir(), 'b-'));
  const id = `algohost-${crypto.randomBytes(8).toString('hex')}`;
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(ociSpec(g)), { mode: 0o600 });
  return { dir, id, prefix: [SETPRIV, '--pdeathsig', 'KILL', '--'], command: runscArgs(options.runsc, dir, id, g.network, g.seccomp) };
}

function runscArgs(runsc: string, dir: string, id: string, network: boolean, seccomp: boolean): string[] {
  return [
    runsc,
    '--root', path.join(dir, 'state'),
    `--platform=${PLATFORM}`,
    `--network=${network ? 'host' : 'none'}`,
    // The worker's cgroup (sandbox.ts) holds runsc and everything it starts, with its limits.
    '--ignore-cgroups',
    // runsc's own messages go to stderr (the worker keeps its tail), never into the algorithm's stdout.
    '--log-fd=2',
    ...(seccomp ? ['--oci-seccomp'] : []),
    'run', '--bundle', dir, id,
  ];
}

/**
 * Once runsc has exited: deletes the container if runsc did not (it was killed; `delete --force`
 * also kills a sandbox still running), then removes the bundle. Never throws.
 */
export function removeBundle(b: GvisorBundle, options: GvisorOptions): void {
  const state = path.join(b.dir, 'state');
  let left = false;
  try {
    left = fs.readdirSync(state).length > 0;
  } catch {
    // No state: runsc never got as far as creating the container.
  }
  const rm = () => fs.rm(b.dir, { recursive: true, force: true }, () => undefined);
  if (!left) return rm();
  const del = spawn(options.runsc, ['--root', state, 'delete', '--force', b.id], { stdio: 'ignore', env: {} });
  del.once('error', rm);
  del.once('exit', rm);
}

export interface GvisorSupport {
  available: boolean;
  reason?: string;
}

const probes = new Map<string, GvisorSupport>();

/**
 * Whether gVisor can run a sandbox here, checked once per runsc binary by running one: a real
 * `runsc run` of a bundle like a worker's, answering on its channel.
 */
export function probeGvisor(runsc: string = RUNSC): GvisorSupport {
  let known = probes.get(runsc);
  if (known === undefined) {
    known = probeOnce(runsc);
    probes.set(runsc, known);
  }
  return known;
}

function probeOnce(runsc: string): GvisorSupport {
  if (!fs.existsSync(runsc)) return { available: false, reason: `${runsc} is not installed (apt-get install runsc)` };
  if (!fs.existsSync(SETPRIV)) return { available: false, reason: `${SETPRIV} is not installed (apt-get install util-linux)` };
  let b: GvisorBundle;
  try {
    b = gvisorBundle({ binds: [], tmpBytes: 1024 * 1024, argv: ['/bin/sh', '-c', 'echo ok >&3'], env: [['PATH', '/usr/bin:/bin']], cwd: '/tmp', rlimits: { NOFILE: 64 }, network: false, seccomp: process.arch === 'x64' }, { runsc });
  } catch (err) {
    return { available: false, reason: `its bundle could not be written: ${(err as Error).message}` };
  }
  // The channel goes in as a worker's does: fd 3 (a socket pair) becomes runsc's stdin.
  const r = spawnSync('/bin/bash', ['-c', CHANNEL_TO_STDIN + 'exec "$@"', 'probe', ...b.prefix, ...b.command], {
    timeout: 30_000,
    stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
    env: {},
    cwd: '/',
  });
  removeBundle(b, { runsc });
  if (r.status === 0 && String(r.output[3]).trim() === 'ok') return { available: true };
  const why = String(r.stderr).trim().split('\n').filter(Boolean).pop() || r.error?.message || `exit ${r.status ?? r.signal}`;
  const root = process.getuid?.() === 0 ? '' : ` (the server runs as uid ${process.getuid?.()}; runsc needs root)`;
  return { available: false, reason: `runsc cannot run a sandbox here${root}: ${why}` };
}
