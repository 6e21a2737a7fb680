import fs from 'node:fs';
import path from 'node:path';
import { pidAlive } from './cgroup.ts';
import type { RunnerKind } from './contract.ts';
import type { Worker } from './worker.ts';
import { HostCpu } from './hostCpu.ts';

/**
 * Pre-started workers ("spares"; docs/runtime-protocol.md, "Pre-started workers"): sandboxed
 * runner processes of each language, started before any call needs them, each waiting for the
 * one build it will ever run. A cold start then costs the build's load, not the sandbox's and
 * the interpreter's start.
 *
 * Each spare has a directory of its own, empty when it starts, bound read-only at its /algo as
 * a build's directory is for a worker started for it. When a build takes the spare, the build's
 * files are linked into that directory (hard links: no bytes copied; a copy where the two are
 * on different file systems), where the sandbox sees them at once, still read-only; then one
 * `load` frame names the entry file, and the runner loads it as a runner started for the build
 * would. The directory goes when the worker exits.
 *
 * - A spare is taken once, by one build, and becomes that build's worker (the pool's, under its
 *   key): it is never given back, never given another build, and dies with that worker. So
 *   algorithms of different owners never share a process, and neither do two builds.
 * - Builds with the network start as before (a fenced sandbox has a namespace of its own, made
 *   at launch), and so do builds of more than MAX_BUILD_ENTRIES files.
 * - Spares of a language are started once a call of that language needed a worker (a server
 *   whose algorithms are all Python keeps no Node spare), and replaced as they are taken.
 */
export interface SpareOptions {
  /** Spares kept ready per language (ALGOHOST_PRESTART); 0: none. */
  perRunner: number;
  /**
   * Where the spares' directories are made (`<runner>-<pid>-<n>`): on the builds' file system,
   * for hard links. Those of a process that is gone are removed when the first spare is made.
   */
  dir: string;
  /**
   * Spares are started only while the host's CPUs are busy less than this share of their time
   * (ALGOHOST_PRESTART_MAX_CPU ÷ 100; 1: whatever the load): when cold starts come faster than the CPUs can
   * pay them, a spare started ahead only takes its start's CPU from the calls running now, and
   * the next cold start pays its own anyway (bench:catalog's mix). One taken is replaced once
   * the CPUs have room.
   */
  cpuMax?: number;
  /** What says how busy the CPUs are (hostCpu.ts's HostCpu by default; tests give their own). */
  cpu?: { busy(): number };
}

/** Most files, directories and links a build given to a spare may have (more: it starts as before). */
export const MAX_BUILD_ENTRIES = 5000;
/** How long after a spare was taken its replacement is started. */
const REFILL_DELAY_MS = 100;
/** After a spare failed to start, the next try waits this long (doubling, up to a minute). */
const RETRY_MS = 1000;
/** While the CPUs are too busy for a spare, whether they still are is asked again this often. */
export const HOLD_MS = 250;

export interface SpareLog {
  warn(obj: object, msg: string): void;
}

/** Starts a sandboxed runner with `dir` at its /algo, waiting for its build. */
export type SpareLauncher = (runner: RunnerKind, dir: string) => Promise<Worker>;

interface Spare {
  worker: Worker;
  dir: string;
}

export class Spares {
  private readonly ready = new Map<RunnerKind, Spare[]>();
  private readonly starting = new Map<RunnerKind, number>();
  /** Languages whose spares are kept (asked for once). */
  private readonly wanted = new Set<RunnerKind>();
  private readonly retry = new Map<RunnerKind, { at: number; delay: number }>();
  private closed = false;
  private made = 0;
  /** Spares taken by builds since start (tests, the benchmark). */
  taken = 0;
  private readonly trees = new Map<string, Tree | null>();
  private readonly cpu: { busy(): number } | undefined;
  /** Languages whose refill waits for the CPUs (a timer set). */
  private readonly held = new Set<RunnerKind>();
  /** Spares not started, or started later, because the CPUs were busy (tests, the benchmark). */
  heldBack = 0;

  constructor(
    private readonly launch: SpareLauncher,
    readonly options: SpareOptions,
    private readonly log?: SpareLog,
  ) {
    this.cpu = (options.cpuMax ?? 1) < 1 ? (options.cpu ?? new HostCpu()) : undefined;
  }

  /**
   * Made when the first spare is (the admin commands open the same services and never start
   * one); the directories of spares whose server died are removed then.
   */
  private prepared: Promise<void> | undefined;
  private prepare(): Promise<void> {
    this.prepared ??= (async () => {
      await fs.promises.mkdir(this.options.dir, { recursive: true, mode: 0o755 });
      for (const name of await fs.promises.readdir(this.options.dir)) {
        const pid = Number(name.split('-')[1]);
        if (Number.isSafeInteger(pid) && pid > 0 && pid !== process.pid && !pidAlive(pid)) {
          await fs.promises.rm(path.join(this.options.dir, name), { recursive: true, force: true });
        }
      }
    })();
    return this.prepared;
  }

  /** Spares ready now, per language (tests, /health). */
  counts(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [runner, list] of this.ready) out[runner] = list.filter((s) => !s.worker.dead).length;
    return out;
  }

  /**
   * A spare given the build in `buildDir`, loading it from `entry` (Worker.loadAhead: its next
   * call waits for the load, and throws SpareLoadError if the load hangs or kills it), or
   * undefined: none is ready, the build has too many files, or the spare failed (the caller then
   * starts a worker for the build as before). Asking keeps spares of `runner` from now on.
   */
  async take(runner: RunnerKind, buildDir: string, entry: string, timeoutMs: number): Promise<Worker | undefined> {
    if (this.closed || this.options.perRunner === 0) return undefined;
    if (!this.wanted.has(runner)) {
      this.wanted.add(runner);
      this.refill(runner);
    }
    const tree = this.treeOf(buildDir);
    if (tree === null) return undefined;
    const list = this.ready.get(runner) ?? [];
    let spare = list.pop();
    while (spare?.worker.dead) spare = list.pop();
    if (spare === undefined) return undefined;
    try {
      await linkTree(tree, buildDir, spare.dir);
      spare.worker.loadAhead(entry, timeoutMs);
      this.taken++;
      return spare.worker;
    } catch (err) {
      spare.worker.kill();
      this.log?.warn({ err, runner }, 'a pre-started worker could not be given a build; starting one for it instead');
      return undefined;
    } finally {
      // Its replacement is started a moment later, once this call has most likely been answered:
      // a spawn holds the event loop for milliseconds (tens on a busy machine).
      setTimeout(() => this.refill(runner), REFILL_DELAY_MS).unref();
    }
  }

  /** What a build holds (scanTree), looked at once per build: builds never change. */
  private treeOf(buildDir: string): Tree | null {
    const known = this.trees.get(buildDir);
    if (known !== undefined) return known;
    let tree: Tree | null;
    try {
      tree = scanTree(buildDir);
    } catch {
      tree = null;
    }
    this.trees.set(buildDir, tree);
    // Oldest first: a thousand builds' lists of files at most.
    for (const k of this.trees.keys()) {
      if (this.trees.size <= 1000) break;
      this.trees.delete(k);
    }
    return tree;
  }

  /** Starts spares of `runner` until as many are ready or starting as are kept. */
  private refill(runner: RunnerKind): void {
    const retry = this.retry.get(runner);
    if (this.closed || (retry !== undefined && Date.now() < retry.at)) return;
    const list = this.ready.get(runner) ?? [];
    this.ready.set(runner, list);
    if (list.length + (this.starting.get(runner) ?? 0) >= this.options.perRunner) return;
    if (this.cpu !== undefined && this.cpu.busy() >= this.options.cpuMax!) {
      // Asked again in a moment; one timer per language however often a spare is taken meanwhile.
      if (!this.held.has(runner)) {
        this.held.add(runner);
        this.heldBack++;
        setTimeout(() => {
          this.held.delete(runner);
          this.refill(runner);
        }, HOLD_MS).unref();
      }
      return;
    }
    for (let n = list.length + (this.starting.get(runner) ?? 0); n < this.options.perRunner; n++) {
      this.starting.set(runner, (this.starting.get(runner) ?? 0) + 1);
      const dir = path.join(this.options.dir, `${runner}-${process.pid}-${++this.made}`);
      const started = this.prepare()
        .then(() => fs.promises.mkdir(dir, { mode: 0o755 }))
        .then(() => this.launch(runner, dir));
      started.then(
        (worker) => {
          this.starting.set(runner, this.starting.get(runner)! - 1);
          this.retry.delete(runner);
          const spare = { worker, dir };
          // Its directory goes with it, whether it was taken or not.
          void worker.done.then(() => {
            void fs.promises.rm(dir, { recursive: true, force: true });
            const i = list.indexOf(spare);
            if (i >= 0) {
              // Died while it waited (killed from outside): replaced.
              list.splice(i, 1);
              this.refill(runner);
            }
          });
          if (this.closed) void worker.stop();
          else list.push(spare);
        },
        (err: unknown) => {
          this.starting.set(runner, this.starting.get(runner)! - 1);
          void fs.promises.rm(dir, { recursive: true, force: true });
          const delay = Math.min(60_000, (retry?.delay ?? RETRY_MS / 2) * 2);
          this.retry.set(runner, { at: Date.now() + delay, delay });
          this.log?.warn({ err, runner }, `a pre-started ${runner} worker could not be started; trying again in ${delay / 1000} s`);
          setTimeout(() => this.refill(runner), delay).unref();
        },
      );
    }
  }

  /** Stops every spare waiting; none is started after. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.cpu instanceof HostCpu) this.cpu.stop();
    const stops: Promise<void>[] = [];
    for (const list of this.ready.values()) stops.push(...list.splice(0).map((s) => s.worker.stop()));
    await Promise.all(stops);
  }
}

/** A build's entries, relative to its directory. */
export interface Tree {
  dirs: string[];
  files: string[];
  links: string[];
}

/**
 * The entries of the build in `dir` (read at once: directory reads without a stat each, once per
 * build, and at most MAX_BUILD_ENTRIES of them); null when it has more than that, or anything
 * but directories, files and symbolic links (a socket).
 */
export function scanTree(dir: string): Tree | null {
  const tree: Tree = { dirs: [], files: [], links: [] };
  const walk = (rel: string): boolean => {
    for (const e of fs.readdirSync(path.join(dir, rel), { withFileTypes: true })) {
      const child = rel === '' ? e.name : path.join(rel, e.name);
      if (tree.dirs.length + tree.files.length + tree.links.length >= MAX_BUILD_ENTRIES) return false;
      if (e.isDirectory()) {
        tree.dirs.push(child);
        if (!walk(child)) return false;
      } else if (e.isFile()) tree.files.push(child);
      else if (e.isSymbolicLink()) tree.links.push(child);
      else return false;
    }
    return true;
  };
  return walk('') ? tree : null;
}

/** Builds of at most this many entries are linked at once (a few µs each), larger ones a step at a time. */
const LINK_AT_ONCE = 256;

/**
 * Puts the build in `from` (its entries: `tree`) into the empty directory `to`: its directories
 * made, its files hard linked (copied across file systems), its symbolic links made again as
 * they are (the build is at /algo in either kind of worker, so a link means the same).
 */
export async function linkTree(tree: Tree, from: string, to: string): Promise<void> {
  if (tree.dirs.length + tree.files.length + tree.links.length <= LINK_AT_ONCE) return linkTreeNow(tree, from, to);
  const modeOf = async (rel: string) => (await fs.promises.stat(path.join(from, rel))).mode & 0o7777;
  for (const d of tree.dirs) await fs.promises.mkdir(path.join(to, d), { mode: await modeOf(d) });
  await Promise.all([
    ...tree.files.map(async (f) => {
      try {
        await fs.promises.link(path.join(from, f), path.join(to, f));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw err;
        await fs.promises.copyFile(path.join(from, f), path.join(to, f));
        await fs.promises.chmod(path.join(to, f), await modeOf(f));
      }
    }),
    ...tree.links.map(async (l) => fs.promises.symlink(await fs.promises.readlink(path.join(from, l)), path.join(to, l))),
  ]);
}


/** linkTree for a small build, without a trip to the thread pool per entry (each costs far more than the work). */
function linkTreeNow(tree: Tree, from: string, to: string): void {
  const modeOf = (rel: string) => fs.statSync(path.join(from, rel)).mode & 0o7777;
  for (const d of tree.dirs) fs.mkdirSync(path.join(to, d), { mode: modeOf(d) });
  for (const f of tree.files) {
    try {
      fs.linkSync(path.join(from, f), path.join(to, f));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw err;
      fs.copyFileSync(path.join(from, f), path.join(to, f));
      fs.chmodSync(path.join(to, f), modeOf(f));
    }
  }
  for (const l of tree.links) fs.symlinkSync(fs.readlinkSync(path.join(from, l)), path.join(to, l));
}
