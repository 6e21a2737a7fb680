import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export type RunnerKind = 'node';

/** What one sandboxed worker may use. */
export interface SandboxLimits {
  /** V8 heap cap for Node workers (MiB). */
  heapMb: number;
  /** Size of the private /tmp (bytes). */
  tmpBytes: number;
  /** Largest file the worker may write (bytes), anywhere it can write. */
  maxFileBytes: number;
  /** Open files at once. */
  maxOpenFiles: number;
}

export const DEFAULT_LIMITS: SandboxLimits = {
  heapMb: 512,
  tmpBytes: 256 * 1024 * 1024,
  maxFileBytes: 256 * 1024 * 1024,
  maxOpenFiles: 256,
};

export interface SandboxSpec {
  runner: RunnerKind;
  /** Directory holding the algorithm's built files; mounted read-only at /algo. */
  algoDir: string;
  /** Entry file, relative to algoDir. */
  entry: string;
  /** `network_access: full`; otherwise the worker has no network at all. */
  network: boolean;
  limits: SandboxLimits;
}

const RUNNERS_DIR = fileURLToPath(new URL('./runners/', import.meta.url));
const BWRAP = '/usr/bin/bwrap';
const PRLIMIT = '/usr/bin/prlimit';
const NODE = '/usr/bin/node';
const SH = '/bin/bash'; // dash cannot redirect descriptors above 9
/**
 * Descriptors the server inherited from whatever started it (a supervisor's log pipe, say)
 * are not close-on-exec and would pass into every sandbox: close all above 3 (fd 3 is the
 * channel), then exec the rest of the command line.
 */
const CLOSE_INHERITED_FDS = 'for f in /proc/self/fd/*; do n=${f##*/}; [ "$n" -gt 3 ] 2>/dev/null && eval "exec $n>&-"; done; exec "$@"';
/** Nobody: the sandbox's user inside its own user namespace. */
const SANDBOX_UID = 65534;

export interface SandboxSupport {
  available: boolean;
  reason?: string;
}

/** Whether bubblewrap is installed and can create a sandbox here (checked by running it). */
export function probeSandbox(bwrap: string = BWRAP): SandboxSupport {
  if (!fs.existsSync(bwrap)) return { available: false, reason: `${bwrap} is not installed (apt-get install bubblewrap)` };
  const r = spawnSync(bwrap, [...namespaceArgs(false), ...SYSTEM_FS, '--', '/usr/bin/true'], {
    timeout: 10_000,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  if (r.status !== 0) return { available: false, reason: `bubblewrap cannot create a sandbox here: ${String(r.stderr).trim() || r.error?.message}` };
  return { available: true };
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
    '--die-with-parent',
    '--new-session',
  ];
}

/**
 * The command line of one worker. The file system is built from nothing: the system's /usr
 * read-only (interpreters and libraries), /proc, a minimal /dev, a size-capped private
 * tmpfs /tmp (the only writable place), the algorithm read-only at /algo and the runner at
 * /runner. The server's home, other algorithms and the host's /etc, /root and /home do not
 * exist inside. The environment is cleared.
 */
export function sandboxCommand(spec: SandboxSpec): { file: string; args: string[] } {
  const l = spec.limits;
  const fsArgs = [
    ...SYSTEM_FS,
    '--proc', '/proc',
    '--dev', '/dev',
    '--size', String(l.tmpBytes), '--tmpfs', '/tmp',
    '--ro-bind', path.resolve(spec.algoDir), '/algo',
    '--ro-bind', path.join(RUNNERS_DIR, spec.runner), '/runner',
    ...(spec.network ? ['--ro-bind-try', '/etc/resolv.conf', '/etc/resolv.conf', '--ro-bind-try', '/etc/ssl', '/etc/ssl', '--ro-bind-try', '/etc/hosts', '/etc/hosts'] : []),
    // bwrap builds the tree on a writable tmpfs root: make that root read-only, so /tmp
    // (a mount of its own) stays the only writable place.
    '--remount-ro', '/',
    '--chdir', '/tmp',
    '--clearenv',
    '--setenv', 'HOME', '/tmp',
    '--setenv', 'PATH', '/usr/bin:/bin',
    '--setenv', 'LANG', 'C.UTF-8',
  ];
  const entry = path.posix.join('/algo', spec.entry);
  const command = [NODE, `--max-old-space-size=${l.heapMb}`, '/runner/runner.mjs', entry];
  return {
    file: SH,
    args: ['-c', CLOSE_INHERITED_FDS, 'sandbox', PRLIMIT, `--fsize=${l.maxFileBytes}`, `--nofile=${l.maxOpenFiles}`, '--core=0', '--', BWRAP, ...namespaceArgs(spec.network), ...fsArgs, '--', ...command],
  };
}

/** Starts a sandboxed worker process: stdin closed, stdout and stderr piped, fd 3 the channel. */
export function spawnSandbox(spec: SandboxSpec): ChildProcess {
  const { file, args } = sandboxCommand(spec);
  return spawn(file, args, { stdio: ['ignore', 'pipe', 'pipe', 'pipe'], env: {}, detached: true });
}
