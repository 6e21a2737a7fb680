/**
 * What the benchmark scripts (bench/data.ts, bench/algo.ts) share: the run's work directory,
 * the servers it started and their cleanup, the log, number formatting, interleaved
 * repetitions, the machine's CPU noise, the report's common lines and tables, and the
 * rewriting of the script's generated block of docs/performance.md.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { REPO, type ServerProc } from './procs.ts';

export const QUICK = process.env.BENCH_QUICK === '1';
export const MiB = 1024 * 1024;
export const WORK_ROOT = path.join(REPO, 'bench', '.work');
export const DOC = path.join(REPO, 'docs', 'performance.md');

// ---- formatting ----------------------------------------------------------------------------

export const fmt = (n: number, digits = 1) => n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
export const mib = (bytes: number) => fmt(bytes / MiB, 1);
export const pct = (r: number, digits = 0) => `${fmt(r * 100, digits)} %`;
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
export const verdict = (ok: boolean) => (ok ? 'PASS' : '**FAIL**');
/** One line of the report's "Every repetition" block. */
/** Draws one of `items` at random, each as often as its `weight`. */
export function picker<T extends { weight: number }>(items: T[]): () => T {
  const total = items.reduce((a, x) => a + x.weight, 0);
  return () => {
    let r = Math.random() * total;
    for (const a of items) if ((r -= a.weight) < 0) return a;
    return items[items.length - 1]!;
  };
}

/** An algorithm of a benchmark's catalogue: its language, how long it sleeps, how popular it is. */
export interface CatalogAlgo {
  name: string;
  runner: 'node' | 'python';
  sleepMs: number;
  weight: number;
}

/**
 * A marketplace's catalogue (issue 24): `n` algorithms, Node when even, Python when odd,
 * sleeping 5–50 ms, of Zipf popularity with exponent `s` (algorithm of rank r: 1 / r^s; ranks
 * shuffled over languages and sleeps), named A000, A001…
 */
export function zipfCatalog(n: number, s: number): CatalogAlgo[] {
  const catalog: CatalogAlgo[] = Array.from({ length: n }, (_, i) => ({ name: `A${String(i).padStart(3, '0')}`, runner: i % 2 === 0 ? 'node' : 'python', sleepMs: 5 + ((i * 37) % 46), weight: 0 }));
  const ranks = catalog.map((_, i) => i);
  for (let i = ranks.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [ranks[i], ranks[j]] = [ranks[j]!, ranks[i]!];
  }
  catalog.forEach((a, i) => (a.weight = 1 / (ranks[i]! + 1) ** s));
  return catalog;
}

/** A catalogue algorithm's files: its sleep, then its input back. */
export function catalogFiles(a: Pick<CatalogAlgo, 'name' | 'runner' | 'sleepMs'>): Record<string, string> {
  if (a.runner === 'node') return { 'src/index.js': a.sleepMs === 0 ? 'export function apply(input) { return input; }\n' : `export async function apply(input) { await new Promise((r) => setTimeout(r, ${a.sleepMs})); return input; }\n` };
  return { [`src/${a.name}.py`]: a.sleepMs === 0 ? 'def apply(input):\n    return input\n' : `import time\n\ndef apply(input):\n    time.sleep(${a.sleepMs / 1000})\n    return input\n` };
}

export const perRep = (label: string, xs: number[], digits = 0) => `${label}: ${xs.map((x) => fmt(x, digits)).join(', ')}`;

// ---- the run -------------------------------------------------------------------------------

export interface Bench {
  /** `data`, `algo`: the npm script is `bench:<name>`. */
  name: string;
  /** This run's directory under bench/.work/, removed by cleanup(). */
  work: string;
  /** The servers started; cleanup() stops them. */
  procs: ServerProc[];
  /** What else to stop at cleanup (a database, an S3 server): after the servers, last deferred first. */
  defer(stop: () => unknown): void;
  /** A progress line on stderr: `[bench:<name> HH:MM:SS] line`. */
  log(line: string): void;
  /** Stops the servers and what was deferred, and removes the work directory (and bench/.work/ when empty); runs once. */
  cleanup(): Promise<void>;
  /** Runs `main`, cleaning up on SIGINT and at the end; a failure sets exit code 1. */
  run(main: () => Promise<void>): Promise<void>;
}

export function createBench(name: string): Bench {
  const work = path.join(WORK_ROOT, `${name}-${process.pid}`);
  const procs: ServerProc[] = [];
  const deferred: (() => unknown)[] = [];
  let cleaned = false;

  async function cleanup(): Promise<void> {
    if (cleaned) return;
    cleaned = true;
    for (const p of procs) await p.stop().catch(() => undefined);
    for (const stop of deferred.reverse()) {
      try {
        await stop();
      } catch (err) {
        log(`stopping: ${(err as Error).message}`);
      }
    }
    fs.rmSync(work, { recursive: true, force: true });
    try {
      fs.rmdirSync(WORK_ROOT);
    } catch {
      // other runs' leftovers, or not empty: leave it
    }
  }

  function log(line: string): void {
    process.stderr.write(`[bench:${name} ${new Date().toISOString().slice(11, 19)}] ${line}\n`);
  }

  async function run(main: () => Promise<void>): Promise<void> {
    process.once('SIGINT', () => {
      void cleanup().then(() => process.exit(130));
    });
    try {
      await main();
    } catch (err) {
      process.exitCode = 1;
      process.stderr.write(`bench:${name} failed: ${(err as Error).stack ?? String(err)}\n`);
    } finally {
      await cleanup();
    }
  }

  return { name, work, procs, defer: (stop) => void deferred.push(stop), log, cleanup, run };
}

/** Runs `fn` for each item, `reps` times, rotating the order every repetition. */
export async function interleaved<T, R>(reps: number, items: T[], fn: (item: T, rep: number) => Promise<R>): Promise<Map<T, R[]>> {
  const out = new Map<T, R[]>(items.map((t) => [t, []]));
  for (let rep = 0; rep < reps; rep++) {
    for (let i = 0; i < items.length; i++) {
      const t = items[(i + rep) % items.length]!;
      out.get(t)!.push(await fn(t, rep));
    }
  }
  return out;
}

// ---- machine noise -------------------------------------------------------------------------

const CLK_TCK = 100; // /proc/stat's unit

/** Seconds of CPU the whole machine spent busy and in steal, from /proc/stat (Linux). */
export function machineCpu(): { busy: number; steal: number; total: number } | undefined {
  try {
    const f = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    const [user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0] = f;
    const busy = user + nice + system + irq + softirq;
    return { busy: busy / CLK_TCK, steal: steal / CLK_TCK, total: (busy + idle + iowait + steal) / CLK_TCK };
  } catch {
    return undefined;
  }
}

/**
 * The machine is shared: wait (at most `maxMs`) until the CPUs were at least 85 % idle over
 * 2 s, so the run does not start in the middle of someone else's work. Answers the idle
 * fraction seen last.
 */
export async function waitForQuiet(maxMs: number, log: (line: string) => void): Promise<number> {
  const deadline = Date.now() + maxMs;
  for (let first = true; ; first = false) {
    const a = machineCpu();
    await sleep(2000);
    const b = machineCpu();
    if (!a || !b) return NaN;
    const idle = 1 - (b.busy - a.busy + b.steal - a.steal) / (b.total - a.total);
    if (idle >= 0.85 || Date.now() >= deadline) return idle;
    if (first) log(`the CPUs are only ${pct(idle)} idle: waiting up to ${maxMs / 1000} s for other work to finish`);
  }
}

/**
 * Starts watching the machine's CPU time and the benchmark's own (`ownCpu`, seconds); the
 * function returned describes, when called, how much of the CPUs others and steal took since.
 */
export function noiseMeter(ownCpu: () => number): () => string {
  const cpu0 = machineCpu();
  const own0 = ownCpu();
  return () => {
    const cpu1 = machineCpu();
    const own1 = ownCpu();
    if (!cpu0 || !cpu1) return 'not measured (no /proc)';
    const wall = cpu1.total - cpu0.total;
    const others = Math.max(0, cpu1.busy - cpu0.busy - (own1 - own0));
    return `other processes used ${pct(others / wall)} and steal took ${pct((cpu1.steal - cpu0.steal) / wall)} of the CPUs while measuring (the benchmark's own processes: ${pct((own1 - own0) / wall)})`;
  };
}

// ---- report --------------------------------------------------------------------------------

export interface Row {
  measure: string;
  ours: string;
  /** The baseline's value. */
  base: string;
  ratio: string;
  target: string;
  result: string;
}

/** The results table; `baseTitle` and `ratioTitle` head the baseline's and the ratio's columns. */
export function table(rows: Row[], baseTitle: string, ratioTitle: string): string {
  const lines = [`| Measure | Ours | ${baseTitle} | ${ratioTitle} | Target | Result |`, '|---|---:|---:|---:|---|---|'];
  for (const r of rows) lines.push(`| ${r.measure} | ${r.ours} | ${r.base} | ${r.ratio} | ${r.target} | ${r.result} |`);
  return lines.join('\n');
}

/** The commit measured, and whether the server's code differed from it. */
export function codeVersion(): string {
  try {
    const head = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: REPO, encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', 'src', 'bin', 'package.json'], { cwd: REPO, encoding: 'utf8' }).trim();
    return dirty ? `${head} with uncommitted changes in src/, bin/ or package.json` : head;
  } catch {
    return 'unknown (no git)';
  }
}

/** Cores, CPU model, RAM, kernel and this Node; each script appends what else matters to it. */
export function machineBase(): string {
  const cpu = os.cpus()[0]?.model ?? 'unknown CPU';
  return `${os.availableParallelism()} cores (nproc) · ${cpu} · ${fmt(os.totalmem() / 1024 ** 3, 0)} GiB RAM · Linux ${os.release()} · Node ${process.version}`;
}

/** The report's Date and Noise lines. */
export function runLines(o: { seconds: number; load0: number; load1: number; idleAtStart: number; noise: string }): string[] {
  return [
    `- **Date:** ${new Date().toISOString().replace('T', ' ').slice(0, 16)} UTC; the run took ${fmt(o.seconds, 0)} s (1-minute load average before: ${fmt(o.load0, 2)}, after: ${fmt(o.load1, 2)}).`,
    `- **Noise:** CPUs ${pct(o.idleAtStart)} idle over the 2 s before measuring; ${o.noise}.`,
  ];
}

/** The report's Command line; `after` follows the command (before the full stop). */
export function commandLine(name: string, after = ''): string {
  return `- **Command:** \`npm run bench:${name}\`${QUICK ? ' with BENCH_QUICK=1 (shortened: not for quoting)' : ''}${after}.`;
}

// ---- docs/performance.md -------------------------------------------------------------------

/** The markers around the block `npm run bench:<name>` generates in docs/performance.md. */
export function docMarkers(name: string): { begin: string; end: string } {
  return {
    begin: `<!-- bench:${name}:begin (generated by \`npm run bench:${name}\`; edit outside these markers) -->`,
    end: `<!-- bench:${name}:end -->`,
  };
}

export interface DocBlock {
  begin: string;
  end: string;
  /** The document to start from when there is none. */
  initial: string;
  /** A heading (`## …`) the block goes under when it has no markers yet; without it, at the end. */
  section?: string;
}

/**
 * Replaces the text from `begin` to `end` (markers included; `block` carries its own) in
 * `file`, keeping everything else. Without the markers the block goes right under `section`
 * where the document has that heading, else at the end (under `section` when given).
 */
export function writeDocBlock(block: string, where: DocBlock, file = DOC): void {
  const { begin, end, section } = where;
  let doc = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : where.initial;
  const a = doc.indexOf(begin);
  const b = doc.indexOf(end);
  if (a >= 0 && b > a) doc = doc.slice(0, a) + block + doc.slice(b + end.length);
  else if (section !== undefined && doc.includes(`\n${section}\n`)) {
    const at = doc.indexOf(`\n${section}\n`) + section.length + 2;
    doc = doc.slice(0, at) + '\n' + block + '\n' + doc.slice(at);
  } else doc = doc.trimEnd() + (section !== undefined ? `\n\n${section}\n\n` : '\n\n') + block + '\n';
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, doc);
}

/**
 * A benchmark's report: `lines` to stdout, and to docs/performance.md between its markers under
 * `section`, after `heading` and followed by `setup` lines, the code, the machine, the run's
 * date and noise and its command line (with the arguments it was given).
 */
export function writeReport(o: {
  name: string;
  section: string;
  heading: string;
  lines: string[];
  setup: string[];
  code?: string;
  run: { seconds: number; load0: number; idleAtStart: number; noise: string };
  log: (line: string) => void;
}): void {
  const { begin, end } = docMarkers(o.name);
  const args = process.argv.slice(2);
  const block = [
    begin,
    o.heading,
    '',
    ...o.lines,
    ...o.setup,
    `- **Code:** ${o.code ?? codeVersion()}.`,
    `- **Machine:** ${machineBase()}.`,
    ...runLines({ ...o.run, load1: os.loadavg()[0]! }),
    commandLine(o.name, args.length ? ` with \`${args.join(' ')}\`` : ''),
    '',
    end,
  ].join('\n');
  process.stdout.write('\n' + o.lines.join('\n') + '\n');
  writeDocBlock(block, { begin, end, initial: '# Performance\n', section: o.section });
  o.log(`wrote ${path.relative(REPO, DOC)} (${fmt(o.run.seconds, 0)} s)`);
}

