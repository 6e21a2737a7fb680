/**
 * Process trees from /proc (Linux): the descendants of a process (by the ppid field of
 * /proc/PID/stat) and what each of them holds in memory (VmRSS from /proc/PID/status, Pss
 * from /proc/PID/smaps_rollup). Used to weigh an idle sandboxed worker, whose tree is
 * bwrap (the outer one, what our spawn started: bash and prlimit exec into it) → bwrap (pid 1
 * of the sandbox's pid namespace) → the interpreter.
 */
import fs from 'node:fs';
import { processCpu } from './procs.ts';

export interface ProcMem {
  pid: number;
  ppid: number;
  comm: string;
  /** Resident set size, bytes (VmRSS). */
  rss: number;
  /** Proportional set size, bytes (shared pages divided among their users); NaN when unreadable. */
  pss: number;
}

function stat(pid: number): { ppid: number; comm: string } | undefined {
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const close = s.lastIndexOf(')');
    const comm = s.slice(s.indexOf('(') + 1, close);
    const ppid = Number(s.slice(close + 2).split(' ')[1]);
    return { ppid, comm };
  } catch {
    return undefined;
  }
}

/** Every live process's parent, by pid. */
function parents(): Map<number, number> {
  const out = new Map<number, number>();
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const s = stat(Number(name));
    if (s) out.set(Number(name), s.ppid);
  }
  return out;
}

/** The direct children of `pid`. */
export function childrenOf(pid: number): number[] {
  return [...parents()].filter(([, ppid]) => ppid === pid).map(([p]) => p);
}

/** `pid`'s descendants (children, their children, …), parents before children. */
export function descendants(pid: number): number[] {
  const all = [...parents()];
  const out: number[] = [];
  for (let frontier = [pid]; frontier.length > 0; ) {
    const next = all.filter(([, ppid]) => frontier.includes(ppid)).map(([p]) => p);
    out.push(...next);
    frontier = next;
  }
  return out;
}

function kbField(text: string, field: string): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text);
  return m ? Number(m[1]) * 1024 : NaN;
}

export function procMem(pid: number): ProcMem | undefined {
  const s = stat(pid);
  if (!s) return undefined;
  let rss = NaN;
  let pss = NaN;
  try {
    rss = kbField(fs.readFileSync(`/proc/${pid}/status`, 'utf8'), 'VmRSS');
  } catch {
    // gone
  }
  try {
    pss = kbField(fs.readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8'), 'Pss');
  } catch {
    // not ours to read, or gone
  }
  return { pid, ppid: s.ppid, comm: s.comm, rss, pss };
}

/** `root` and its descendants with their memory. */
export function treeMem(root: number): ProcMem[] {
  return [root, ...descendants(root)].map(procMem).filter((m): m is ProcMem => m !== undefined);
}

const CLK_TCK = 100;

/** utime + stime + cutime + cstime (its own CPU and that of its children it has reaped), seconds. */
function cpuWithReaped(pid: number): number {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / CLK_TCK;
  } catch {
    return 0;
  }
}

/**
 * Every CPU second spent so far by `root`, its live descendants, and every descendant that
 * has exited and been reaped (counted in its parent's cutime and cstime): nothing is counted
 * twice, nothing that ran under `root` is missed (except children not yet reaped).
 */
export function treeCpuAll(root: number): number {
  return [root, ...descendants(root)].reduce((n, p) => n + cpuWithReaped(p), 0);
}

/** CPU seconds (user + system) of `root` and its live descendants so far. */
export function treeCpu(root: number): { self: number; children: number } {
  return { self: processCpu(root), children: descendants(root).reduce((n, p) => n + processCpu(p), 0) };
}

/**
 * CPU nanoseconds each live thread of `pid` has run, by thread id (sum_exec_runtime, the first
 * field of /proc/PID/task/TID/schedstat): exact where /proc/PID/stat counts 10 ms ticks, which is
 * too coarse for the µs per call of short runs. Empty once the process is gone.
 */
export function threadCpuNs(pid: number): Map<number, number> {
  const out = new Map<number, number>();
  try {
    for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
      try {
        out.set(Number(tid), Number(fs.readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]));
      } catch {
        // the thread has just exited
      }
    }
  } catch {
    // the process is gone
  }
  return out;
}

/** CPU nanoseconds every live thread of `pid` has run (threadCpuNs, summed). 0 once the process is gone. */
export function processCpuNs(pid: number): number {
  let ns = 0;
  for (const n of threadCpuNs(pid).values()) ns += n;
  return ns;
}

/** processCpuNs of `root` and of its live descendants, in seconds (like treeCpu). */
export function treeCpuExact(root: number): { self: number; children: number } {
  return { self: processCpuNs(root) / 1e9, children: descendants(root).reduce((n, p) => n + processCpuNs(p), 0) / 1e9 };
}
