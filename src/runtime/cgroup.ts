/**
 * Memory and process-count limits for workers through cgroups, detected at run time.
 *
 * Layout: under the cgroup this server runs in (per hierarchy), one parent group
 * `algohost-<pid>/` for this server process, and in it one leaf group per worker. A worker's
 * sandbox joins its leaf before it execs bwrap (the shell prelude in sandbox.ts writes its own
 * pid to `procsFiles`), so every process inside inherits it; the bwrap cgroup namespace then
 * makes that leaf the sandbox's cgroup root.
 *
 * - cgroup v1 (a hierarchy per controller, as here): `/sys/fs/cgroup/memory/<our path>/` and
 *   `/sys/fs/cgroup/pids/<our path>/`. A process joins one group per hierarchy.
 * - cgroup v2 (one unified hierarchy): our own cgroup's directory must pass `memory` and `pids`
 *   down (`cgroup.subtree_control`). v2 forbids that while the directory holds processes (the
 *   "no internal processes" rule): if the only process in it is this server, the server moves
 *   itself into a leaf `algohost-<pid>/server/` and enables the controllers; if other processes
 *   share our cgroup (a shell, a supervisor), v2 support is reported unavailable with the reason.
 * - neither: nothing happens; workers keep their rlimits and V8 heap cap.
 *
 * Once detection says a controller is in use, failures to create a worker's group throw: a
 * worker never starts without the limits this host supports.
 */
import fs from 'node:fs';
import path from 'node:path';

export type Controller = 'memory' | 'pids';
const CONTROLLERS: readonly Controller[] = ['memory', 'pids'];

export interface CgroupSupport {
  memory: boolean;
  pids: boolean;
  /** The cgroup version in use (1 if any controller is on a v1 hierarchy), null if none. */
  version: 1 | 2 | null;
  /** Why a controller is not used (missing, not writable, not delegated...). */
  reason?: string;
}

export interface CgroupLimits {
  /** Memory of everything in the group together (RSS, page cache, tmpfs pages, kernel memory). */
  memoryBytes?: number;
  /** Tasks (processes and threads) in the group at once. */
  maxPids?: number;
}

/** One worker's group: created before the worker starts, removed once it is gone. */
export interface WorkerCgroup {
  readonly name: string;
  readonly version: 1 | 2;
  /** The cgroup.procs files a process writes its own pid to, to join (one per hierarchy). */
  readonly procsFiles: readonly string[];
  /** The group's directories (one per hierarchy). */
  readonly dirs: readonly string[];
  readonly limits: Readonly<CgroupLimits>;
  /**
   * Whether the kernel's OOM killer killed a process of this group because the group hit its
   * memory limit (v1: `oom_kill` in memory.oom_control; v2: `oom_kill` in memory.events).
   * Still answers after remove() (the last value read before the group went away).
   */
  oomKilled(): boolean;
  /** The group's highest memory use so far (v1 memory.max_usage_in_bytes, v2 memory.peak). */
  peakMemoryBytes(): number | undefined;
  /** Tasks in the group now (pids.current), if the pids controller is in use. */
  pidsCurrent(): number | undefined;
  /** The pids (as this server sees them) of the processes in the group now. */
  processes(): number[];
  /**
   * Kills whatever is left in the group and removes it, retrying for a few seconds while
   * its processes are reaped (a group with processes cannot be removed). Never rejects:
   * resolves whether the group is gone. Idempotent.
   */
  remove(): Promise<boolean>;
}

interface Hierarchy {
  version: 1 | 2;
  controllers: Controller[];
  /** The cgroup this server runs in. */
  base: string;
  /** `algohost-<pid>` under base. */
  parent: string;
}

/** Where the manager looks: the real /proc and /sys, or a fake tree for tests. */
export interface CgroupEnvironment {
  /** Contents of /proc/self/mountinfo. */
  mountinfo: () => string;
  /** Contents of /proc/self/cgroup. */
  selfCgroup: () => string;
  pid: number;
  /** Prefixed to every mount point (a fake tree in tests); '' for the real system. */
  root: string;
  /** Whether a pid is alive (stale-group cleanup). */
  alive: (pid: number) => boolean;
  /** Registers the best-effort cleanup on exit. */
  onExit: (fn: () => void) => void;
}

const PARENT_PREFIX = 'algohost-';
const STALE = /^algohost-(\d+)$/;
/** How long the exit cleanup waits for killed workers to leave their groups. */
const EXIT_WAIT_MS = 500;
/** Waits between attempts to remove a group whose processes are still being reaped. */
const REMOVE_DELAYS_MS = [0, 2, 5, 10, 20, 50, 100, 200, 300, 500, 1000, 1000, 1000, 1000];

/** Whether a process of this pid exists (EPERM: it does, someone else's). */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The real /proc and /sys/fs/cgroup of this process. */
export const systemCgroupEnvironment: CgroupEnvironment = {
  mountinfo: () => fs.readFileSync('/proc/self/mountinfo', 'utf8'),
  selfCgroup: () => fs.readFileSync('/proc/self/cgroup', 'utf8'),
  pid: process.pid,
  root: '',
  alive: pidAlive,
  onExit: (fn) => process.once('exit', fn),
};

interface Mount {
  /** The mount's root within its hierarchy (not / when a container sees only its subtree). */
  root: string;
  mountPoint: string;
  fsType: string;
  superOptions: string[];
}

/** mountinfo escapes space, tab, newline and backslash as octal. */
const unescape = (s: string) => s.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8)));

function parseMountinfo(text: string): Mount[] {
  const mounts: Mount[] = [];
  for (const line of text.split('\n')) {
    const sep = line.indexOf(' - ');
    if (sep < 0) continue;
    const before = line.slice(0, sep).split(' ');
    const after = line.slice(sep + 3).split(' ');
    if (before.length < 5 || after.length < 3) continue;
    mounts.push({ root: unescape(before[3]!), mountPoint: unescape(before[4]!), fsType: after[0]!, superOptions: after[2]!.split(',') });
  }
  return mounts;
}

/** /proc/self/cgroup: `id:controllers:path` (v2: `0::path`). */
function parseSelfCgroup(text: string): { controllers: string[]; path: string }[] {
  const out: { controllers: string[]; path: string }[] = [];
  for (const line of text.split('\n')) {
    const m = /^(\d+):([^:]*):(.*)$/.exec(line);
    if (m) out.push({ controllers: m[2] === '' ? [] : m[2]!.split(','), path: m[3]! });
  }
  return out;
}

/** Our cgroup's directory under a mount, or why it is not visible there. */
function dirUnder(env: CgroupEnvironment, mount: Mount, cgroupPath: string): string | { reason: string } {
  let rel = cgroupPath;
  if (mount.root !== '/') {
    if (cgroupPath !== mount.root && !cgroupPath.startsWith(mount.root + '/')) {
      return { reason: `our cgroup ${cgroupPath} is outside what ${mount.mountPoint} shows (${mount.root})` };
    }
    rel = cgroupPath.slice(mount.root.length);
  }
  return path.join(env.root + mount.mountPoint, rel);
}

const read = (file: string) => fs.readFileSync(file, 'utf8');
const write = (file: string, data: string) => fs.writeFileSync(file, data);
const words = (s: string) => s.split(/\s+/).filter(Boolean);
const errMsg = (err: unknown) => (err as NodeJS.ErrnoException).code ?? (err as Error).message;

function mkdirOk(dir: string): void {
  try {
    fs.mkdirSync(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
}

/** Removes a cgroup directory and its child groups, deepest first. Best effort. */
function removeTree(dir: string): boolean {
  let entries: fs.Dirent[] = [];
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return !fs.existsSync(dir);
  }
  for (const e of entries) if (e.isDirectory()) removeTree(path.join(dir, e.name));
  try {
    fs.rmdirSync(dir);
    return true;
  } catch {
    return false;
  }
}

/** The key of a line like `oom_kill 3` in a flat-keyed cgroup file, undefined if absent. */
function keyed(file: string, key: string): number | undefined {
  try {
    const m = new RegExp(`^${key} (\\d+)$`, 'm').exec(read(file));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

function numberIn(file: string): number | undefined {
  try {
    const n = Number(read(file).trim());
    return Number.isFinite(n) ? n : undefined;
  } catch {
    return undefined;
  }
}

export class CgroupManager {
  private detected: { support: CgroupSupport; hierarchies: Hierarchy[] } | undefined;
  private seq = 0;
  /** Groups created and not yet removed: the exit cleanup's list. */
  private readonly live = new Set<string>();

  constructor(private readonly env: CgroupEnvironment = systemCgroupEnvironment) {}

  /** What this host supports; the first call sets the parent groups up (cached). */
  detect(): CgroupSupport {
    this.detected ??= this.probe();
    return this.detected.support;
  }

  /** The parent groups (`algohost-<pid>`) in use, one per hierarchy. */
  parents(): string[] {
    this.detect();
    return this.detected!.hierarchies.map((h) => h.parent);
  }

  private probe(): { support: CgroupSupport; hierarchies: Hierarchy[] } {
    const reasons: string[] = [];
    let mounts: Mount[];
    let self: { controllers: string[]; path: string }[];
    try {
      mounts = parseMountinfo(this.env.mountinfo());
      self = parseSelfCgroup(this.env.selfCgroup());
    } catch (err) {
      return { support: { memory: false, pids: false, version: null, reason: `cannot read /proc/self: ${errMsg(err)}` }, hierarchies: [] };
    }

    // Per controller: a v1 hierarchy of its own if one is mounted, else the unified one.
    const byBase = new Map<string, { version: 1 | 2; controllers: Controller[] }>();
    for (const c of CONTROLLERS) {
      const v1 = mounts.find((m) => m.fsType === 'cgroup' && m.superOptions.includes(c));
      if (v1) {
        const entry = self.find((e) => e.controllers.includes(c));
        if (!entry) {
          reasons.push(`${c}: no entry in /proc/self/cgroup`);
          continue;
        }
        const dir = dirUnder(this.env, v1, entry.path);
        if (typeof dir !== 'string') {
          reasons.push(`${c}: ${dir.reason}`);
          continue;
        }
        const h = byBase.get(dir) ?? { version: 1, controllers: [] };
        h.controllers.push(c);
        byBase.set(dir, h);
        continue;
      }
      const unified = self.find((e) => e.controllers.length === 0 && e.path.startsWith('/'));
      const v2 = mounts.filter((m) => m.fsType === 'cgroup2');
      let found = false;
      for (const m of v2) {
        if (!unified) break;
        const dir = dirUnder(this.env, m, unified.path);
        if (typeof dir !== 'string') continue;
        let available: string[] = [];
        try {
          available = words(read(path.join(dir, 'cgroup.controllers')));
        } catch {
          continue;
        }
        if (!available.includes(c)) continue;
        const h = byBase.get(dir) ?? { version: 2, controllers: [] };
        h.controllers.push(c);
        byBase.set(dir, h);
        found = true;
        break;
      }
      if (!found) reasons.push(`${c}: no cgroup v1 hierarchy and not delegated to our cgroup v2 group`);
    }

    const hierarchies: Hierarchy[] = [];
    for (const [base, h] of byBase) {
      const parent = path.join(base, `${PARENT_PREFIX}${this.env.pid}`);
      this.removeStale(base);
      const r = h.version === 1 ? this.prepareV1(base, parent, h.controllers) : this.prepareV2(base, parent, h.controllers);
      if (typeof r === 'string') {
        reasons.push(r);
        continue;
      }
      hierarchies.push({ version: h.version, controllers: r, base, parent });
    }
    if (hierarchies.length > 0) this.env.onExit(() => this.cleanupOnExit(hierarchies));

    const has = (c: Controller) => hierarchies.some((h) => h.controllers.includes(c));
    const version = hierarchies.length === 0 ? null : hierarchies.some((h) => h.version === 1) ? 1 : 2;
    const support: CgroupSupport = { memory: has('memory'), pids: has('pids'), version };
    if (reasons.length > 0) support.reason = reasons.join('; ');
    return { support, hierarchies };
  }

  /** v1: the parent is a plain directory; each controller's files must be there. */
  private prepareV1(base: string, parent: string, controllers: Controller[]): Controller[] | string {
    const marker: Record<Controller, string> = { memory: 'memory.limit_in_bytes', pids: 'pids.max' };
    try {
      mkdirOk(parent);
    } catch (err) {
      return `${controllers.join(',')}: cannot create ${parent}: ${errMsg(err)}`;
    }
    // The pids root group has no pids.max, but its children do: check in the parent.
    const ok = controllers.filter((c) => fs.existsSync(path.join(parent, marker[c])));
    if (ok.length === 0) {
      removeTree(parent);
      return `${controllers.join(',')}: ${parent} has no ${controllers.map((c) => marker[c]).join(', ')}`;
    }
    return ok;
  }

  /**
   * v2: our group must pass the controllers down to `algohost-<pid>`, which passes them to
   * the worker leaves. Enabling them in a group that holds processes fails (EBUSY): if this
   * server is the only process there, it moves into the leaf `algohost-<pid>/server` first.
   */
  private prepareV2(base: string, parent: string, controllers: Controller[]): Controller[] | string {
    const subtree = (dir: string) => {
      try {
        return words(read(path.join(dir, 'cgroup.subtree_control')));
      } catch {
        return [];
      }
    };
    const enable = (dir: string, cs: Controller[]) => {
      const missing = cs.filter((c) => !subtree(dir).includes(c));
      if (missing.length > 0) write(path.join(dir, 'cgroup.subtree_control'), missing.map((c) => `+${c}`).join(' '));
    };
    try {
      mkdirOk(parent);
    } catch (err) {
      return `cgroup v2: cannot create ${parent}: ${errMsg(err)}`;
    }
    try {
      try {
        enable(base, controllers);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EBUSY') throw err;
        const procs = words(read(path.join(base, 'cgroup.procs'))).map(Number);
        const others = procs.filter((p) => p !== this.env.pid);
        if (others.length > 0) {
          throw new Error(
            `${base} holds other processes (${others.slice(0, 5).join(', ')}${others.length > 5 ? ', ...' : ''}), so cgroup v2's no-internal-processes rule ` +
              'forbids enabling controllers for child groups; run the server in a cgroup of its own (systemd Delegate=yes, or as the container\'s only process)',
            { cause: err },
          );
        }
        const leaf = path.join(parent, 'server');
        mkdirOk(leaf);
        write(path.join(leaf, 'cgroup.procs'), String(this.env.pid));
        try {
          enable(base, controllers);
        } catch (err2) {
          try {
            write(path.join(base, 'cgroup.procs'), String(this.env.pid));
            fs.rmdirSync(leaf);
          } catch {
            /* stays in the leaf: harmless */
          }
          throw err2;
        }
      }
      enable(parent, controllers);
      return controllers;
    } catch (err) {
      removeTree(parent); // leaves the server's leaf (and so the parent) if the server moved in
      const why = (err as NodeJS.ErrnoException).code ? `cannot enable them in ${base}/cgroup.subtree_control: ${errMsg(err)}` : (err as Error).message;
      return `cgroup v2 ${controllers.join(',')}: ${why}`;
    }
  }

  /** `algohost-<pid>` groups of servers that are gone (and whatever they left inside). */
  private removeStale(base: string): void {
    let names: string[] = [];
    try {
      names = fs.readdirSync(base);
    } catch {
      return;
    }
    for (const name of names) {
      const m = STALE.exec(name);
      if (!m || Number(m[1]) === this.env.pid || this.env.alive(Number(m[1]))) continue;
      // Only empty groups go: rmdir refuses a group that still holds processes, and we never
      // kill processes we did not start.
      removeTree(path.join(base, name));
    }
  }

  /**
   * A group for one worker, with its limits set, or undefined if this host supports no
   * cgroup controller. Throws if the host supports them and the group cannot be made.
   */
  create(name: string | undefined, limits: CgroupLimits): WorkerCgroup | undefined {
    this.detect();
    const hierarchies = this.detected!.hierarchies;
    if (hierarchies.length === 0) return undefined;
    const leaf = name ?? `w${++this.seq}`;
    if (!/^[A-Za-z0-9._-]+$/.test(leaf) || leaf === 'server') throw new Error(`bad cgroup name ${leaf}`);
    const made: string[] = [];
    try {
      for (const h of hierarchies) {
        const dir = path.join(h.parent, leaf);
        fs.mkdirSync(dir);
        made.push(dir);
        this.live.add(dir);
        setLimits(h, dir, limits);
      }
    } catch (err) {
      for (const dir of made) if (removeTree(dir)) this.live.delete(dir);
      throw new Error(`cannot create the worker's cgroup ${leaf}: ${(err as Error).message}`, { cause: err });
    }
    return new Group(leaf, hierarchies, made, limits, this.live);
  }

  /**
   * On exit: kill what is left in our groups, remove them and the parents (best effort,
   * synchronous). Killed processes take a few milliseconds to leave their group: wait for
   * that, briefly (EXIT_WAIT_MS at most); what is still there then goes at the next start.
   */
  private cleanupOnExit(hierarchies: Hierarchy[]): void {
    for (const dir of this.live) killAll(dir);
    const deadline = Date.now() + EXIT_WAIT_MS;
    for (;;) {
      for (const dir of this.live) if (removeTree(dir)) this.live.delete(dir);
      if (this.live.size === 0 || Date.now() >= deadline) break;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5); // a synchronous sleep
    }
    for (const h of hierarchies) removeTree(h.parent);
  }
}

function setLimits(h: Hierarchy, dir: string, limits: CgroupLimits): void {
  const file = (f: string) => path.join(dir, f);
  if (h.controllers.includes('memory') && limits.memoryBytes !== undefined) {
    const bytes = String(Math.floor(limits.memoryBytes));
    if (h.version === 1) {
      write(file('memory.limit_in_bytes'), bytes);
      // memory+swap: without it, swap would extend the limit (present with swap accounting).
      if (fs.existsSync(file('memory.memsw.limit_in_bytes'))) write(file('memory.memsw.limit_in_bytes'), bytes);
    } else {
      write(file('memory.max'), bytes);
      if (fs.existsSync(file('memory.swap.max'))) write(file('memory.swap.max'), '0');
      // One OOM kill takes the whole sandbox, not just its largest process.
      if (fs.existsSync(file('memory.oom.group'))) write(file('memory.oom.group'), '1');
    }
  }
  if (h.controllers.includes('pids') && limits.maxPids !== undefined) write(file('pids.max'), String(Math.floor(limits.maxPids)));
}

function procsOf(dir: string): number[] {
  try {
    return words(read(path.join(dir, 'cgroup.procs'))).map(Number);
  } catch {
    return [];
  }
}

class Group implements WorkerCgroup {
  readonly version: 1 | 2;
  readonly procsFiles: readonly string[];
  private readonly memoryDir: { dir: string; version: 1 | 2 } | undefined;
  private readonly pidsDir: string | undefined;
  private removed = false;
  private lastOom = false;
  private lastPeak: number | undefined;
  private removing: Promise<boolean> | undefined;

  constructor(
    readonly name: string,
    hierarchies: Hierarchy[],
    readonly dirs: readonly string[],
    readonly limits: Readonly<CgroupLimits>,
    private readonly live: Set<string>,
  ) {
    this.version = hierarchies.some((h) => h.version === 1) ? 1 : 2;
    this.procsFiles = dirs.map((d) => path.join(d, 'cgroup.procs'));
    const mi = hierarchies.findIndex((h) => h.controllers.includes('memory'));
    this.memoryDir = mi < 0 ? undefined : { dir: dirs[mi]!, version: hierarchies[mi]!.version };
    const pi = hierarchies.findIndex((h) => h.controllers.includes('pids'));
    this.pidsDir = pi < 0 ? undefined : dirs[pi];
  }

  oomKilled(): boolean {
    const m = this.memoryDir;
    if (m === undefined || this.removed) return this.lastOom;
    // v1: memory.failcnt is no signal: it counts every time the limit was hit (reclaim too),
    // and stays 0 when memory+swap is limited (memsw.failcnt counts then). oom_kill counts kills.
    const n = m.version === 1 ? keyed(path.join(m.dir, 'memory.oom_control'), 'oom_kill') : keyed(path.join(m.dir, 'memory.events'), 'oom_kill');
    if (n !== undefined) this.lastOom = n > 0;
    return this.lastOom;
  }

  peakMemoryBytes(): number | undefined {
    const m = this.memoryDir;
    if (m === undefined || this.removed) return this.lastPeak;
    const n = numberIn(path.join(m.dir, m.version === 1 ? 'memory.max_usage_in_bytes' : 'memory.peak'));
    if (n !== undefined) this.lastPeak = n;
    return this.lastPeak;
  }

  pidsCurrent(): number | undefined {
    return this.pidsDir === undefined ? undefined : numberIn(path.join(this.pidsDir, 'pids.current'));
  }

  processes(): number[] {
    return [...new Set(this.dirs.flatMap(procsOf))];
  }

  remove(): Promise<boolean> {
    this.removing ??= this.removeLoop();
    return this.removing;
  }

  private async removeLoop(): Promise<boolean> {
    let left = [...this.dirs];
    for (const delay of REMOVE_DELAYS_MS) {
      if (delay > 0) await new Promise((r) => setTimeout(r, delay));
      // What a successful removal would lose: read it now (final once the group is empty).
      this.oomKilled();
      this.peakMemoryBytes();
      left = left.filter((dir) => {
        killAll(dir);
        try {
          fs.rmdirSync(dir);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== 'ENOENT') return true;
        }
        this.live.delete(dir);
        return false;
      });
      if (left.length === 0) {
        this.removed = true;
        return true;
      }
    }
    return false; // the exit cleanup tries again
  }
}

/** Kills every process left in a group (v2: cgroup.kill where the kernel has it). */
function killAll(dir: string): void {
  const procs = procsOf(dir);
  if (procs.length === 0) return;
  try {
    write(path.join(dir, 'cgroup.kill'), '1');
    return;
  } catch {
    /* v1, or a kernel before 5.14 */
  }
  for (const p of procs) {
    try {
      process.kill(p, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
}

const manager = new CgroupManager();

/** What this host supports (checked once; sets up `algohost-<pid>` and removes stale ones). */
export function detectCgroups(): CgroupSupport {
  return manager.detect();
}

/** The `algohost-<pid>` parent group(s) of this server, one per hierarchy (empty without cgroups). */
export function cgroupParents(): string[] {
  return manager.parents();
}

/**
 * A group for one worker with its limits set; undefined where the host supports no cgroup
 * controller. `name` defaults to a fresh `w<n>`. Throws if the group cannot be created.
 */
export function createWorkerCgroup(name: string | undefined, limits: CgroupLimits): WorkerCgroup | undefined {
  return manager.create(name, limits);
}
