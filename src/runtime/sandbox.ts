import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import type { Writable } from 'node:stream';
import { seccompProgram } from './seccomp.ts';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createWorkerCgroup, type WorkerCgroup } from './cgroup.ts';
import crypto from 'node:crypto';
import { FENCE_FD, FENCE_TOOLS, FENCED_RESOLV_CONF, fencedHosts, FILES_ONLY_NSSWITCH, holderArgs, holderEnv, raiseFence, type FencePolicy } from './egressFence.ts';
import { CHANNEL_TO_STDIN, gvisorBundle, removeBundle, SANDBOX_HOSTNAME, type BindMount, type GvisorOptions } from './gvisor.ts';

import type { RunnerKind } from './contract.ts';

/** What one sandboxed worker may use. */
export interface SandboxLimits {
  /**
   * Memory cap (MiB): the V8 heap of Node workers; the address space of Python workers
   * (plus PYTHON_AS_SLACK_MB for the interpreter's own mappings).
   */
  heapMb: number;
  /** Size of the private /tmp (bytes). */
  tmpBytes: number;
  /** Largest file the worker may write (bytes), anywhere it can write. */
  maxFileBytes: number;
  /** Open files at once. */
  maxOpenFiles: number;
  /**
   * Tasks (processes and threads: Node alone runs about a dozen) the worker may have at once,
   * enforced by the cgroup pids controller where the host has one. Not RLIMIT_NPROC: that
   * counts every process of the real uid on the whole host.
   */
  maxPids: number;
  /**
   * Memory of the whole worker in MiB (every process in it, heap or not, its /tmp pages and
   * the page cache it fills), enforced by the cgroup memory controller where the host has
   * one. Default: heapMb + NON_HEAP_MB + the size of /tmp (see workerMemoryBytes).
   */
  memoryMb?: number;
}

export const DEFAULT_LIMITS: SandboxLimits = {
  heapMb: 512,
  tmpBytes: 256 * 1024 * 1024,
  maxFileBytes: 256 * 1024 * 1024,
  maxOpenFiles: 256,
  maxPids: 128,
};

/** Memory a worker needs beyond its heap cap: Node's or Python's own, buffers, native code. */
export const NON_HEAP_MB = 256;

/**
 * The cgroup memory limit of a worker: `memoryMb`, or heapMb + NON_HEAP_MB plus the size of
 * its /tmp, because tmpfs pages are charged to the group of whoever wrote them: without it, a
 * worker filling its /tmp as allowed would be killed for it.
 */
export function workerMemoryBytes(limits: SandboxLimits): number {
  return limits.memoryMb !== undefined ? limits.memoryMb * 1024 * 1024 : (limits.heapMb + NON_HEAP_MB) * 1024 * 1024 + limits.tmpBytes;
}

export interface SandboxSpec {
  runner: RunnerKind;
  /** Directory holding the algorithm's built files; mounted read-only at /algo. */
  algoDir: string;
  /** Entry file, relative to algoDir. */
  entry: string;
  /** `network_access: full`; otherwise the worker has no network at all. */
  network: boolean;
  /**
   * With `network`: a network namespace of its own behind the egress fence (egressFence.ts),
   * letting out what this policy says. Without one, `network` is the host's own network.
   */
  fence?: FencePolicy | undefined;
  limits: SandboxLimits;
  /** Run without bubblewrap (only where none works and the operator allowed it). */
  unsandboxed?: boolean;
  /** Only load the entry file and check it exports apply (builds), without running load(). */
  check?: boolean;
  /**
   * A pre-started worker (spares.ts): `algoDir` is empty when it starts (the build's files are
   * put there later, and appear at /algo, read-only as ever), and `entry` unused: the runner
   * waits for a `load` frame naming it.
   */
  spare?: boolean;
  /** The seccomp filter (seccomp.ts); on unless false. */
  seccomp?: boolean;
  /** The bubblewrap binary (ALGOHOST_BWRAP); /usr/bin/bwrap when unset. */
  bwrap?: string | undefined;
  /** Run it under gVisor (ALGOHOST_SANDBOX=gvisor) instead of bubblewrap: same mounts, limits, network. */
  gvisor?: GvisorOptions | undefined;
  /**
   * Put the worker in a cgroup of its own with `limits.maxPids` and workerMemoryBytes(limits)
   * where the host supports cgroups (default true; false: rlimits and the heap cap only).
   */
  cgroup?: boolean;
}

/** A build step (installing dependencies, say): a command run with /algo writable. */
export interface ToolSpec {
  /** Mounted read-write at /algo; the command runs there. */
  algoDir: string;
  /** The command, given where the algorithm directory is (`/algo` inside the sandbox). */
  argv: (algo: string) => string[];
  network: boolean;
  /** With `network`: the egress fence's policy (SandboxSpec.fence). */
  fence?: FencePolicy | undefined;
  limits: SandboxLimits;
  unsandboxed?: boolean;
  /** Host files made visible read-only inside (host path → sandbox path), e.g. a compiler. */
  binds?: Record<string, string>;
  /** Variables set on top of the cleared environment (a build's registry, CA and proxy settings). */
  env?: Record<string, string>;
  /** The bubblewrap binary (ALGOHOST_BWRAP); /usr/bin/bwrap when unset. */
  bwrap?: string | undefined;
  /** Under gVisor instead of bubblewrap (SandboxSpec.gvisor). */
  gvisor?: GvisorOptions | undefined;
}

const RUNNERS_DIR = fileURLToPath(new URL('./runners', import.meta.url));
const BWRAP = '/usr/bin/bwrap';
const PRLIMIT = '/usr/bin/prlimit';
const NODE = '/usr/bin/node';
const PYTHON = '/usr/bin/python3';
/** Address space Python needs beyond what the algorithm may allocate (interpreter, libraries). */
const PYTHON_AS_SLACK_MB = 256;
const SH = '/bin/bash'; // dash cannot redirect descriptors above 9
/**
 * Descriptors the server inherited from whatever started it (a supervisor's log pipe, say)
 * are not close-on-exec and would pass into every sandbox: close all above 3 (fd 3 is the
 * channel), then exec the rest of the command line.
 */
const CLOSE_FDS = 'keep=$1; shift; for f in /proc/self/fd/*; do n=${f##*/}; [ "$n" -gt "$keep" ] 2>/dev/null && eval "exec $n>&-"; done; ';
const CLOSE_INHERITED_FDS = CLOSE_FDS + 'exec "$@"';
/**
 * Before that, the shell joins the worker's cgroup (its first argument: how many cgroup.procs
 * files follow), so that prlimit, bwrap and everything inside inherit it. A failed join ends
 * the worker with exit code 125 and a message: it never runs without its limits.
 */
const JOIN_CGROUPS = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || { echo "algohost: cannot join the worker\'s cgroup ($1): not starting it without its limits" >&2; exit 125; }; shift; n=$((n-1)); done; ';
const PRELUDE = JOIN_CGROUPS + CLOSE_INHERITED_FDS;
/** The same for gVisor, which takes the channel as the container's stdin (gvisor.ts says why). */
const GVISOR_PRELUDE = JOIN_CGROUPS + CLOSE_FDS + CHANNEL_TO_STDIN + 'exec "$@"';
/**
 * Tasks and memory a gVisor worker's cgroup has on top of its limits: runsc, its gofer and its
 * Sentry are Go programs with threads of their own (some 30 tasks and 70 MiB with an idle
 * algorithm), all in the worker's group.
 */
const GVISOR_TASKS = 128;
const GVISOR_MEMORY_MB = 128;
/** Nobody: the sandbox's user inside its own user namespace. */
const SANDBOX_UID = 65534;

export interface SandboxSupport {
  available: boolean;
  reason?: string;
  /**
   * Set where bubblewrap works but the sandbox's directories cannot be staged (STAGE): why its
   * mount table then shows where they are on the host.
   */
  hostPaths?: string;
}

/** Whether bubblewrap is installed and can create a sandbox here (checked by running it). */
export function probeSandbox(bwrap: string = BWRAP): SandboxSupport {
  if (!fs.existsSync(bwrap)) return { available: false, reason: `${bwrap} is not installed (apt-get install bubblewrap)` };
  const r = spawnSync(bwrap, [...namespaceArgs(false), ...SYSTEM_FS, '--', '/usr/bin/true'], {
    timeout: 10_000,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  if (r.status !== 0) return { available: false, reason: `bubblewrap cannot create a sandbox here: ${String(r.stderr).trim() || r.error?.message}` };
  const staging = probeStaging();
  return staging.available ? { available: true } : { available: true, hostPaths: staging.reason! };
}

/** The system's programs and libraries, read-only (Debian's merged /usr). */
const SYSTEM_FS = ['--ro-bind', '/usr', '/usr', '--symlink', 'usr/lib', '/lib', '--symlink', 'usr/lib64', '/lib64', '--symlink', 'usr/bin', '/bin', '--symlink', 'usr/sbin', '/sbin'];

/**
 * New namespaces for everything (user, pid, ipc, uts, cgroup, mount, and network unless
 * allowed), an unprivileged uid with no capabilities, a new session (no access to the
 * server's terminal), and death with the parent. bwrap is pid 1 of the sandbox's pid
 * namespace: killing it kills every process inside, so nothing outlives a worker.
 */
function namespaceArgs(network: boolean): string[] {
  return [
    '--unshare-all',
    ...(network ? ['--share-net'] : []),
    '--unshare-user',
    // No nested user namespaces: inside one, code would hold every capability again.
    '--disable-userns',
    '--uid', String(SANDBOX_UID),
    '--gid', String(SANDBOX_UID),
    '--cap-drop', 'ALL',
    // A UTS namespace of its own (--unshare-all) starts with the host's name: it gets its own.
    '--hostname', SANDBOX_HOSTNAME,
    '--die-with-parent',
    '--new-session',
  ];
}

interface Launch {
  algoDir: string;
  writable: boolean;
  network: boolean;
  /** With `network`: behind the egress fence, in a namespace of its own. */
  fence?: FencePolicy | undefined;
  limits: SandboxLimits;
  /** Extra rlimits, by name without RLIMIT_ (Python's address space: AS). */
  rlimits: Record<string, number>;
  binds?: Record<string, string>;
  /** Variables added to the cleared environment. */
  env?: Record<string, string>;
  argv: (mounts: { algo: string; runner: string }) => string[];
  /** The cgroup.procs files the process joins first. */
  cgroupProcs?: readonly string[];
  /** The seccomp program to load (seccomp.ts), or none. */
  seccomp?: Buffer | undefined;
  /** The bubblewrap binary (ALGOHOST_BWRAP); /usr/bin/bwrap when unset. */
  bwrap?: string | undefined;
  /** gVisor instead of bubblewrap (gvisor.ts). */
  gvisor?: GvisorOptions | undefined;
}

/** The shell prelude's arguments: the cgroup.procs files to join, counted. */
/** The prelude's arguments: the cgroup.procs files to join, then the highest fd to keep. */
function joinArgs(l: Launch, keep: number): string[] {
  const files = l.cgroupProcs ?? [];
  return [String(files.length), ...files, String(keep)];
}

/** Whether a launch goes behind the egress fence (its own namespace, the holder's pipes on FENCE_FD). */
const fenced = (l: Launch): l is Launch & { fence: FencePolicy } => l.network && l.fence !== undefined;

let etcDir: string | undefined;
/**
 * A file of `text` for a sandbox's /etc (its resolv.conf, hosts, nsswitch.conf), written once
 * per content in a directory of the server's own, readable by the sandbox's user.
 */
function etcFile(text: string): string {
  if (etcDir === undefined || !fs.existsSync(etcDir)) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-net-'));
    fs.chmodSync(dir, 0o755);
    etcDir = dir;
    // Gone with the process (a sandbox running then has its files open already).
    process.once('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  }
  const file = path.join(etcDir, crypto.createHash('sha256').update(text).digest('hex').slice(0, 32));
  if (!fs.existsSync(file)) {
    // Whole or not at all: another launch may read it meanwhile.
    const tmp = `${file}.${process.pid}.${crypto.randomBytes(4).toString('hex')}`;
    fs.writeFileSync(tmp, text, { mode: 0o644 });
    fs.renameSync(tmp, file);
  }
  return file;
}

/**
 * What a sandbox with the network sees of names: the host's resolver and /etc/hosts (the host's
 * network); the NAT's DNS forwarder (an algorithm behind the fence); or no DNS, only an
 * /etc/hosts of the names it may reach (a build behind the fence).
 */
function nameBinds(l: Launch): BindMount[] {
  const hostFile = (f: string): BindMount => ({ source: f, dest: f, optional: true });
  if (!fenced(l)) return [hostFile('/etc/resolv.conf'), hostFile('/etc/hosts')];
  if (l.fence.reach === 'public') return [{ source: etcFile(FENCED_RESOLV_CONF), dest: '/etc/resolv.conf' }, hostFile('/etc/hosts')];
  return [{ source: etcFile(fencedHosts(l.fence)), dest: '/etc/hosts' }, { source: etcFile(FILES_ONLY_NSSWITCH), dest: '/etc/nsswitch.conf' }];
}

/**
 * What a sandbox has of the host's files besides the system's /usr: the algorithm at /algo
 * (read-only, except for build steps), the runners at /runner, a build's binds, and with the
 * network what it needs of /etc to resolve names and check certificates. The same for
 * bubblewrap and gVisor.
 */
function bindsOf(l: Launch): BindMount[] {
  return [
    { source: path.resolve(l.algoDir), dest: '/algo', writable: l.writable },
    { source: RUNNERS_DIR, dest: '/runner' },
    ...Object.entries(l.binds ?? {}).map(([source, dest]) => ({ source, dest })),
    ...(l.network ? [...nameBinds(l), { source: '/etc/ssl', dest: '/etc/ssl', optional: true }] : []),
  ];
}

const UNSHARE = FENCE_TOOLS.unshare;
/** The overlay's options: two layers, each named by a descriptor of the shell that mounts it. */
const OVERLAY = 'ro,nosuid,nodev,lowerdir=/proc/self/fd/10:/proc/self/fd/11';
/** A build step's writable overlay, relative to its stage (the upper layer's name follows). */
const WRITABLE_OVERLAY = 'rw,nosuid,nodev,userxattr,lowerdir=empty,upperdir=../';
/**
 * A sandbox's /proc/self/mountinfo lists each bind mount with where its source is on the host's
 * file system: the build's directory in the server's home, a spare's named with the server's pid,
 * the runners in the install directory. bubblewrap cannot change that (it is where the directory
 * is on its file system, however it is reached). So bubblewrap runs in a user and mount
 * namespace of its own (made by `unshare`, or the egress fence's holder), where this shell first
 * mounts each directory the sandbox gets read-only over itself as a read-only overlay of two
 * layers named by descriptor: the directory, and an empty one (an overlay without an upper
 * layer needs two). bubblewrap binds the overlay, and the sandbox's table says
 * `/ /algo ... - overlay overlay ro,...,lowerdir=/proc/self/fd/10:/proc/self/fd/11`.
 *
 * The mounts are that namespace's alone: the server and other sandboxes see the directories as
 * they are, and a spare's build, linked into its directory once it is taken, appears through the
 * overlay (its directory is empty until then, and nothing in the sandbox has looked in it).
 * A build step's /algo is written to, so it cannot be a read-only overlay: it is a writable one
 * (`-w STAGE BASE`), whose upper layer is the build's directory itself, and whose empty lower
 * layer and work directory are in STAGE, beside it (writableStage). Its options are given
 * relative to STAGE, so the table says `upperdir=../out,workdir=work`: nothing of where the build
 * is. Where that overlay cannot be made (a file system without user xattrs), /algo is bound as
 * it is, and the build goes on.
 *
 * Arguments: the empty directory, optionally `-w STAGE BASE`, the directories, `--`, the command.
 * Run by bash: dash cannot redirect descriptors above 9 (those below are the launch's).
 */
const STAGE =
  'exec 11<"$1" || exit 94; shift; ' +
  `if [ "$1" = -w ]; then ( cd "$2" && /usr/bin/mount -t overlay -o ${WRITABLE_OVERLAY}"$3",workdir=work overlay "../$3" ) 2>/dev/null; shift 3; fi; ` +
  `while [ "$1" != -- ]; do exec 10<"$1" && /usr/bin/mount -t overlay -o ${OVERLAY} overlay "$1" || { echo "algohost: cannot stage $1 for the sandbox" >&2; exit 94; }; shift; done; ` +
  'shift; exec 10<&- 11<&-; exec "$@"';

let emptyDir: string | undefined;
/** The empty layer of every overlay (STAGE): a directory of the server's own, removed at exit. */
function emptyLayer(): string {
  if (emptyDir === undefined || !fs.existsSync(emptyDir)) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-empty-'));
    fs.chmodSync(dir, 0o755);
    emptyDir = dir;
    process.once('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  }
  return emptyDir;
}

let staging: SandboxSupport | undefined;
/**
 * Whether a sandbox's directories can be staged here (overlays in a user namespace: Linux 5.11
 * and later), checked once by staging the runners. Where they cannot, bubblewrap binds them as
 * they are (probeSandbox says so).
 */
function probeStaging(): SandboxSupport {
  staging ??= (() => {
    const r = spawnSync(UNSHARE, ['--user', '--map-root-user', '--mount', '--', SH, '-c', STAGE, 'stage', emptyLayer(), RUNNERS_DIR, '--', '/usr/bin/true'], {
      timeout: 10_000,
      stdio: ['ignore', 'ignore', 'pipe'],
      env: {},
      cwd: '/',
    });
    if (r.status === 0) return { available: true };
    const why = String(r.stderr).trim().split('\n').filter(Boolean).pop() || r.error?.message || `exit ${r.status ?? r.signal}`;
    return { available: false, reason: `the sandbox's directories cannot be mounted as overlays in a user namespace (Linux 5.11 or later), so its /proc/self/mountinfo shows where they are on the host: ${why}` };
  })();
  return staging;
}

/**
 * The host directories a launch's read-only binds come from, to be staged (STAGE): a bound
 * directory itself, a bound file's directory (a build's esbuild binary, its /etc files). Not a
 * build step's writable /algo (an overlay without an upper layer is read-only), nor the host's
 * own /usr and /etc files (their paths say nothing of this host).
 */
function stagedDirs(l: Launch): string[] {
  const dirs = new Set<string>();
  for (const b of bindsOf(l)) {
    if (b.writable || b.optional || /^\/(usr|etc)(\/|$)/.test(b.source)) continue;
    let dir: string;
    try {
      // Where it really is: bwrap follows a link (esbuild's, say) to it, through the overlay.
      dir = fs.realpathSync(b.source);
      if (!fs.statSync(dir).isDirectory()) dir = path.dirname(dir);
    } catch {
      continue; // bwrap says it is missing
    }
    if (dir !== '/') dirs.add(dir);
  }
  return [...dirs];
}

/**
 * Where a build step's writable overlay (STAGE's `-w`) keeps its empty layer and work directory:
 * `<build dir>.stage`, beside the build's directory (the work directory must be on its file
 * system), made before the step and removed after it. Undefined for a read-only /algo, or a
 * directory whose name an overlay's options could not carry.
 */
function writableStage(l: Launch): { dir: string; base: string } | undefined {
  if (!l.writable) return undefined;
  const algo = path.resolve(l.algoDir);
  const base = path.basename(algo);
  return /^[A-Za-z0-9._-]+$/.test(base) ? { dir: `${algo}.stage`, base } : undefined;
}

/** What runs bubblewrap: the stage (STAGE) in a user and mount namespace of its own, or, behind the fence, in the holder's. */
function stageArgs(l: Launch): string[] {
  if (!probeStaging().available) return fenced(l) ? holderArgs() : [];
  const ns = fenced(l) ? holderArgs(FENCE_TOOLS, true) : [UNSHARE, '--user', '--map-root-user', '--mount', '--'];
  const w = writableStage(l);
  return [...ns, SH, '-c', STAGE, 'stage', emptyLayer(), ...(w ? ['-w', w.dir, w.base] : []), ...stagedDirs(l), '--'];
}

const bwrapBind = (b: BindMount): string[] => [b.optional ? '--ro-bind-try' : b.writable ? '--bind' : '--ro-bind', b.source, b.dest];

/** bwrap reads the seccomp program from this descriptor (a pipe the server fills). */
const SECCOMP_FD = 4;

/**
 * bwrap reads its options from a pipe on this descriptor (`--args`), the one after every other
 * the launch passes (the channel, SECCOMP_FD, the fence's): bwrap is pid 1 of the sandbox, whose
 * /proc/1/cmdline the algorithm can read, and its options name host paths (the build
 * directory, the runners, binds). Its command line is `bwrap --args N -- <command>`.
 */
const argsFd = (l: Launch): number => (fenced(l) ? FENCE_FD.go : l.seccomp ? SECCOMP_FD : 3) + 1;

/**
 * The command line of one sandboxed process. The file system is built from nothing: the
 * system's /usr read-only (interpreters and libraries), /proc, a minimal /dev, a size-capped
 * private tmpfs /tmp (the only writable place), the algorithm at /algo (read-only, except for
 * build steps) and the runners at /runner. The server's home, other algorithms and the host's
 * /etc, /root and /home do not exist inside. The environment is cleared.
 */
function bwrapCommand(l: Launch): { file: string; args: string[]; options: Buffer } {
  const lim = l.limits;
  const fsArgs = [
    ...SYSTEM_FS,
    '--proc', '/proc',
    '--dev', '/dev',
    '--size', String(lim.tmpBytes), '--tmpfs', '/tmp',
    ...bindsOf(l).flatMap(bwrapBind),
    // bwrap builds the tree on a writable tmpfs root: make that root read-only, so /tmp
    // (a mount of its own) stays the only writable place.
    '--remount-ro', '/',
    '--chdir', l.writable ? '/algo' : '/tmp',
    '--clearenv',
    ...ENV.flatMap(([k, v]) => ['--setenv', k, v]),
    ...Object.entries(l.env ?? {}).flatMap(([k, v]) => ['--setenv', k, v]),
  ];
  const options = [...namespaceArgs(l.network), ...(l.seccomp ? ['--seccomp', String(SECCOMP_FD)] : []), ...fsArgs];
  return {
    file: SH,
    args: [
      '-c', PRELUDE, 'sandbox', ...joinArgs(l, argsFd(l)), ...prlimitArgs(l), '--',
      // Behind the fence, bwrap shares the namespace the holder made (--share-net), never the host's.
      ...stageArgs(l),
      l.bwrap ?? BWRAP, '--args', String(argsFd(l)), '--', ...l.argv({ algo: '/algo', runner: '/runner' }),
    ],
    // NUL-terminated, for the pipe on argsFd(l).
    options: Buffer.from(options.map((o) => `${o}\0`).join('')),
  };
}

const ENV: ReadonlyArray<[string, string]> = [
  ['HOME', '/tmp'],
  ['PATH', '/usr/bin:/bin'],
  ['LANG', 'C.UTF-8'],
];

function prlimitArgs(l: Launch): string[] {
  return [PRLIMIT, ...Object.entries(rlimitsOf(l)).map(([name, value]) => `--${name.toLowerCase()}=${value}`)];
}

/** Every rlimit of a launch: the file size, open files, no core dumps, and its own (Python's AS). */
function rlimitsOf(l: Launch): Record<string, number> {
  return { FSIZE: l.limits.maxFileBytes, NOFILE: l.limits.maxOpenFiles, CORE: 0, ...l.rlimits };
}

/**
 * The command line of one sandbox under gVisor, and its bundle (gvisor.ts): the same mounts,
 * environment, user and rlimits as bubblewrap's, the channel on the container's stdin. The shell
 * joins the cgroups first, as for bubblewrap; behind the fence, runsc is what the holder execs.
 */
function gvisorCommand(l: Launch & { gvisor: GvisorOptions }): { file: string; args: string[]; bundle: ReturnType<typeof gvisorBundle> } {
  const bundle = gvisorBundle(
    {
      binds: bindsOf(l),
      tmpBytes: l.limits.tmpBytes,
      argv: l.argv({ algo: '/algo', runner: '/runner' }),
      env: [...ENV, ...Object.entries(l.env ?? {})],
      cwd: l.writable ? '/algo' : '/tmp',
      rlimits: rlimitsOf(l),
      network: l.network,
      seccomp: l.seccomp !== undefined,
    },
    l.gvisor,
  );
  const keep = fenced(l) ? FENCE_FD.go : 3;
  return { file: SH, args: ['-c', GVISOR_PRELUDE, 'sandbox', ...joinArgs(l, keep), '--', ...bundle.prefix, ...(fenced(l) ? holderArgs() : []), ...bundle.command], bundle };
}

function runnerArgv(spec: SandboxSpec): Launch['argv'] {
  const l = spec.limits;
  const mode = spec.check ? ['--check'] : [];
  return ({ algo, runner }) => {
    // A spare is told where its build will go instead of its entry file.
    const target = spec.spare ? ['--spare', algo] : [path.posix.join(algo, spec.entry)];
    switch (spec.runner) {
      case 'node':
        return [NODE, `--max-old-space-size=${l.heapMb}`, path.posix.join(runner, 'node', 'runner.mjs'), ...mode, ...target];
      case 'python':
        // -I: no user site, no PYTHON* variables, the script's directory not on sys.path.
        // -B: never write bytecode caches (read-only in the sandbox; next to the runner without).
        return [PYTHON, '-I', '-B', '-X', 'utf8', path.posix.join(runner, 'python', 'runner.py'), ...mode, ...target];
    }
  };
}

function workerLaunch(spec: SandboxSpec): Launch {
  return {
    algoDir: spec.algoDir,
    writable: false,
    network: spec.network,
    fence: spec.fence,
    limits: spec.limits,
    rlimits: spec.runner === 'python' ? { AS: (spec.limits.heapMb + PYTHON_AS_SLACK_MB) * 1024 * 1024 } : {},
    argv: runnerArgv(spec),
    bwrap: spec.bwrap,
    gvisor: spec.gvisor,
    seccomp: spec.seccomp === false ? undefined : seccompProgram(),
  };
}

/**
 * The command line of one worker (exported for tests and the docs), joining the cgroups
 * whose cgroup.procs files are given first; bubblewrap's options are to be written to a pipe
 * on descriptor `optionsFd`, the seccomp program (when on) to one on SECCOMP_FD (4).
 */
export function sandboxCommand(spec: SandboxSpec, cgroupProcs: readonly string[] = []): { file: string; args: string[]; options: Buffer; optionsFd: number } {
  const l = { ...workerLaunch(spec), cgroupProcs };
  return { ...bwrapCommand(l), optionsFd: argsFd(l) };
}

/**
 * Without bubblewrap (ALGOHOST_SANDBOX=auto on a host where it does not work): the same
 * command with its rlimits, a cleared environment and a private working directory, but no
 * isolation at all. The server says so loudly at start and in /health.
 */
function spawnUnsandboxed(l: Launch): ChildProcess {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-worker-'));
  const argv = l.argv({ algo: path.resolve(l.algoDir), runner: RUNNERS_DIR.replace(/\/$/, '') });
  const env = { ...Object.fromEntries(ENV.map(([k, v]) => [k, k === 'HOME' ? tmp : v])), ...l.env };
  const child = spawn(SH, ['-c', PRELUDE, 'worker', ...joinArgs(l, 3), ...prlimitArgs(l), '--', ...argv], {
    stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
    env,
    cwd: l.writable ? l.algoDir : tmp,
    detached: true,
  });
  child.once('exit', () => fs.rm(tmp, { recursive: true, force: true }, () => undefined));
  return child;
}

function launch(l: Launch, unsandboxed: boolean | undefined): ChildProcess {
  if (unsandboxed) {
    if (fenced(l)) throw new Error('a sandbox behind the egress fence needs bubblewrap');
    return spawnUnsandboxed({ ...l, seccomp: undefined });
  }
  if (l.gvisor) return launchGvisor({ ...l, gvisor: l.gvisor });
  const stage = probeStaging().available ? writableStage(l) : undefined;
  if (stage) {
    fs.mkdirSync(path.join(stage.dir, 'empty'), { recursive: true });
    fs.mkdirSync(path.join(stage.dir, 'work'), { recursive: true });
  }
  const { file, args, options } = bwrapCommand(l);
  const stdio: ('pipe' | 'ignore')[] = ['ignore', 'pipe', 'pipe', 'pipe'];
  if (l.seccomp || fenced(l)) stdio.push(l.seccomp ? 'pipe' : 'ignore');
  if (fenced(l)) stdio.push('pipe', 'pipe', 'pipe');
  stdio.push('pipe'); // argsFd(l): bwrap's options
  // cwd '/': the shells export PWD, which bwrap (the sandbox's pid 1, whose /proc/1/environ is
  // readable inside) would otherwise hold as the server's working directory.
  const child = spawn(file, args, { stdio, env: fenced(l) ? holderEnv(l.fence) : {}, cwd: '/', detached: true });
  const optionsPipe = child.stdio[argsFd(l)] as Writable;
  optionsPipe.on('error', () => undefined); // as the seccomp pipe's
  optionsPipe.end(options);
  if (l.seccomp) {
    const pipe = child.stdio[SECCOMP_FD] as Writable;
    pipe.on('error', () => undefined); // bwrap died before reading it: the exit says why
    pipe.end(l.seccomp);
  }
  if (fenced(l)) fence(child, l.fence);
  if (stage) child.once('exit', () => fs.rm(stage.dir, { recursive: true, force: true }, () => undefined));
  return child;
}

/** Raises the egress fence around a sandbox started behind its holder; kills it if that fails. */
function fence(child: ChildProcess, policy: FencePolicy): void {
  raiseFence(child, policy).catch((err: Error) => {
    failures.set(child, err.message);
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // Gone already.
    }
  });
}

/**
 * A sandbox under gVisor: the same descriptors as bubblewrap's (the channel on fd 3, the fence's
 * pipes), no options or seccomp pipe (gVisor's Sentry is the filter). Its bundle and runsc's
 * state go once it has exited.
 */
function launchGvisor(l: Launch & { gvisor: GvisorOptions }): ChildProcess {
  const { file, args, bundle } = gvisorCommand(l);
  const stdio: ('pipe' | 'ignore')[] = ['ignore', 'pipe', 'pipe', 'pipe'];
  if (fenced(l)) stdio.push('ignore', 'pipe', 'pipe', 'pipe');
  let child: ChildProcess;
  try {
    child = spawn(file, args, { stdio, env: fenced(l) ? holderEnv(l.fence) : {}, cwd: '/', detached: true });
  } catch (err) {
    removeBundle(bundle, l.gvisor);
    throw err;
  }
  const cleanup = () => removeBundle(bundle, l.gvisor);
  child.once('exit', cleanup);
  child.once('error', () => {
    if (child.pid === undefined) cleanup();
  });
  if (fenced(l)) fence(child, l.fence);
  return child;
}

const failures = new WeakMap<ChildProcess, string>();

/** Why a sandbox could not be started around its process (its network could not be fenced), if that is why it died. */
export function sandboxFailure(child: ChildProcess): string | undefined {
  return failures.get(child);
}

const cgroups = new WeakMap<ChildProcess, WorkerCgroup>();

/**
 * The cgroup of a worker started by spawnSandbox, if it has one: `oomKilled()` tells whether
 * the kernel killed it for exceeding its memory limit (ask once it has exited), and
 * `peakMemoryBytes()` its highest memory use. Both still answer after the group is removed.
 */
export function cgroupOf(child: ChildProcess): WorkerCgroup | undefined {
  return cgroups.get(child);
}

/**
 * Starts a worker process: stdin closed, stdout and stderr piped, fd 3 the channel. Where
 * the host supports cgroups (and unless `spec.cgroup` is false), the worker runs in a group
 * of its own with its memory and task limits (see cgroupOf), removed once it has exited.
 * Throws if the host supports cgroups and the group cannot be created.
 */
export function spawnSandbox(spec: SandboxSpec): ChildProcess {
  const group = spec.cgroup === false ? undefined : groupLimits(spec.limits, spec.gvisor !== undefined);
  return launchInCgroup(workerLaunch(spec), spec.unsandboxed, group);
}

/** A worker's cgroup limits (with gVisor's own processes on top, under gVisor). */
function groupLimits(limits: SandboxLimits, gvisor: boolean): { memoryBytes: number; maxPids: number } {
  const extra = gvisor ? { memoryBytes: GVISOR_MEMORY_MB * 1024 * 1024, maxPids: GVISOR_TASKS } : { memoryBytes: 0, maxPids: 0 };
  return { memoryBytes: workerMemoryBytes(limits) + extra.memoryBytes, maxPids: limits.maxPids + extra.maxPids };
}

/** Launches in a cgroup of its own with these limits (where the host has cgroups), removed at exit. */
function launchInCgroup(l: Launch, unsandboxed: boolean | undefined, limits: { memoryBytes: number; maxPids: number } | undefined): ChildProcess {
  const group = limits === undefined ? undefined : createWorkerCgroup(undefined, limits);
  if (group === undefined) return launch(l, unsandboxed);
  let child: ChildProcess;
  try {
    child = launch({ ...l, cgroupProcs: group.procsFiles }, unsandboxed);
  } catch (err) {
    void group.remove();
    throw err;
  }
  cgroups.set(child, group);
  const remove = () => void group.remove();
  child.once('exit', remove);
  // A process that could not be spawned at all emits 'error' and no 'exit'.
  child.once('error', () => {
    if (child.pid === undefined) remove();
  });
  return child;
}

/** Starts a build step with /algo writable; stdout and stderr piped. */
export function spawnTool(spec: ToolSpec): ChildProcess {
  // Build steps run the owner's install scripts: they get a cgroup too, with build-sized limits.
  return launchInCgroup(
    { algoDir: spec.algoDir, writable: true, network: spec.network, fence: spec.fence, limits: spec.limits, rlimits: {}, binds: spec.binds, env: spec.env, bwrap: spec.bwrap, gvisor: spec.gvisor, seccomp: seccompProgram(), argv: ({ algo }) => spec.argv(algo) },
    spec.unsandboxed,
    groupLimits(spec.limits, spec.gvisor !== undefined),
  );
}
