/**
 * Servers under test, each a child process started the same way: node --expose-gc with the
 * loader bin/algohost.mjs runs the sources with (bin/loader.mjs) and the memory probe preloaded,
 * an IPC channel for the probe, stdout (logs) to a file.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { GcCounts, MemWindow, ProbeReply, ProbeRequest } from './memProbe.ts';

export const REPO = fileURLToPath(new URL('..', import.meta.url));
const PROBE = new URL('./memProbe.ts', import.meta.url).href;
/** The TypeScript loader of bin/algohost.mjs: servers measured as they run in production. */
const LOADER = new URL('../bin/loader.mjs', import.meta.url).href;

export interface ServerProc {
  name: string;
  port: number;
  pid: number;
  /** CPU seconds (user + system, all threads) the server has used so far; 0 without /proc. */
  cpu(): number;
  /** The server's garbage collections so far (counted by the probe). */
  gcCounts(): Promise<GcCounts>;
  /** Runs `fn` inside a memory window of the server (GC, sample every 5 ms, GC). */
  measureMemory<T>(fn: () => Promise<T>): Promise<{ result: T; window: MemWindow }>;
  stop(): Promise<void>;
}

export interface SpawnOptions {
  /** Node script and its arguments, relative to the repository. */
  args: string[];
  env?: Record<string, string>;
  /** Where the child's stdout (its log) goes. */
  logFile: string;
  /** 'tsx': run the sources through tsx's loader instead (bench/callsAB.ts --base-loader tsx: what the loader costs). */
  loader?: 'tsx';
}

export async function spawnServer(name: string, options: SpawnOptions): Promise<ServerProc> {
  const log = fs.openSync(options.logFile, 'a');
  const child: ChildProcess = spawn(process.execPath, ['--expose-gc', '--import', options.loader ?? LOADER, '--import', PROBE, ...options.args], {
    cwd: REPO,
    env: { ...process.env, ...options.env },
    stdio: ['ignore', log, 'pipe', 'ipc'],
  });
  fs.closeSync(log);
  let stderr = '';
  let exited = false;
  const exit = new Promise<void>((resolve) => child.once('exit', () => ((exited = true), resolve())));

  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} did not start in 60 s; stderr:\n${stderr}`)), 60_000);
    child.stderr!.setEncoding('utf8');
    child.stderr!.on('data', (text: string) => {
      stderr = (stderr + text).slice(-20_000);
      const m = /is ready at (http:\/\/127\.0\.0\.1:\d+)/.exec(stderr);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited (code ${code}) before it was ready; stderr:\n${stderr}`));
    });
  });

  let nextId = 1;
  const waiting = new Map<number, (reply: ProbeReply) => void>();
  child.on('message', (reply: ProbeReply) => {
    waiting.get(reply.id)?.(reply);
    waiting.delete(reply.id);
  });
  const ask = (probe: ProbeRequest['probe']) =>
    new Promise<ProbeReply>((resolve, reject) => {
      const id = nextId++;
      const timer = setTimeout(() => reject(new Error(`${name}: the memory probe did not answer "${probe}"`)), 30_000);
      waiting.set(id, (reply) => {
        clearTimeout(timer);
        resolve(reply);
      });
      child.send({ probe, id } satisfies ProbeRequest);
    });

  return {
    name,
    port: Number(new URL(url).port),
    pid: child.pid!,
    cpu: () => processCpu(child.pid!),
    async gcCounts() {
      const reply = await ask('gc');
      if (reply.probe !== 'gc') throw new Error(`${name}: unexpected probe reply`);
      return reply.counts;
    },
    async measureMemory(fn) {
      await ask('start');
      const result = await fn();
      const reply = await ask('stop');
      if (reply.probe !== 'stopped') throw new Error(`${name}: unexpected probe reply`);
      return { result, window: reply.window };
    },
    async stop() {
      if (exited) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exit;
      clearTimeout(timer);
    },
  };
}

const CLK_TCK = 100;

/** CPU seconds (user + system) a process has used so far, from /proc/PID/stat (Linux). */
export function processCpu(pid: number): number {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
  } catch {
    return 0;
  }
}
