/**
 * Runs algohost as a real process (`bin/algohost.mjs`), for tests that need what an
 * in-process server cannot give: kill -9, SIGTERM, the first-start banner, the admin CLI.
 * Every wait is bounded; every child is killed by its own pid, never by name.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import { once } from 'node:events';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { backendEnv } from './backends.ts';
import { OPENAPI_CHECK_ENV, openapiViolations } from './openapi.ts';

export const NODE = process.execPath;
export const BIN = path.resolve(import.meta.dirname, '..', '..', 'bin', 'algohost.mjs');

/** Longest a single wait (start, exit, CLI run) may take before the test fails. */
export const WAIT_MS = 15_000;

/** The parent's environment without what slows node down or would leak settings in. */
export function childEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (k === 'NODE_EXTRA_CA_CERTS' || k === 'NODE_OPTIONS' || k.startsWith('NODE_TEST') || k.startsWith('ALGOHOST_')) continue;
    env[k] = v;
  }
  return { ...env, ALGOHOST_LOG_LEVEL: 'warn', ...extra };
}

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface ServerProcess {
  child: ChildProcess;
  pid: number;
  /** http://127.0.0.1:PORT, from the ready line. */
  url: string;
  home: string;
  stdout(): string;
  stderr(): string;
  /** Resolves when the process has exited (never rejects). */
  exited: Promise<Exit>;
  /** Waits until `pattern` appears on the stream, failing after `timeoutMs`. */
  waitFor(stream: 'stdout' | 'stderr', pattern: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>;
  /** Sends `signal` (if still running) and waits for the exit, failing after `timeoutMs`. */
  kill(signal?: NodeJS.Signals, timeoutMs?: number): Promise<Exit>;
}

function isRunning(child: ChildProcess): boolean {
  return child.exitCode === null && child.signalCode === null;
}

/** Rejects with `message` after `ms` unless `promise` settles first. */
export async function within<T>(promise: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${message} (after ${ms} ms)`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Starts `algohost serve --port 0 --home HOME` and resolves once it printed its ready line.
 * `demo: false` (the default) passes --no-demo.
 */
export async function startServerProcess(options: {
  home: string;
  demo?: boolean;
  env?: Record<string, string>;
  timeoutMs?: number;
  /** More arguments for serve (`--role api`). */
  args?: string[];
}): Promise<ServerProcess> {
  const args = [BIN, 'serve', '--port', '0', '--host', '127.0.0.1', '--home', options.home, ...(options.args ?? [])];
  if (!options.demo) args.push('--no-demo');
  // Every answer is checked against the OpenAPI document (docs/openapi.md); kill() fails on one off it.
  const child = spawn(NODE, args, { env: childEnv({ ...OPENAPI_CHECK_ENV, ...(await backendEnv(options.home)), ...options.env }), stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  const changed = new Set<() => void>();
  const notify = () => {
    for (const fn of changed) fn();
  };
  child.stdout!.setEncoding('utf8').on('data', (s: string) => {
    out += s;
    notify();
  });
  child.stderr!.setEncoding('utf8').on('data', (s: string) => {
    err += s;
    notify();
  });
  const exited = new Promise<Exit>((resolve) => {
    child.once('exit', (code, signal) => {
      resolve({ code, signal });
      notify();
    });
  });

  const waitFor = (stream: 'stdout' | 'stderr', pattern: RegExp, timeoutMs = WAIT_MS) =>
    new Promise<RegExpMatchArray>((resolve, reject) => {
      const check = () => {
        const m = (stream === 'stdout' ? out : err).match(pattern);
        if (m) {
          done();
          resolve(m);
        } else if (!isRunning(child)) {
          done();
          reject(new Error(`server exited (${child.exitCode ?? child.signalCode}) before printing ${pattern} on ${stream}; stderr:\n${err}\nstdout:\n${out.slice(-2000)}`));
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`no ${pattern} on ${stream} within ${timeoutMs} ms; stderr:\n${err}`));
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        changed.delete(check);
      };
      changed.add(check);
      check();
    });

  const kill = async (signal: NodeJS.Signals = 'SIGKILL', timeoutMs = WAIT_MS) => {
    if (isRunning(child)) child.kill(signal);
    const exit = await within(exited, timeoutMs, `server pid ${child.pid} did not exit after ${signal}`);
    const violations = openapiViolations(options.home);
    if (violations.length > 0) throw new Error(`answers off the OpenAPI document (docs/openapi.md):\n${violations.join('\n')}`);
    return exit;
  };

  try {
    const m = await waitFor('stderr', /algohost is ready at (http:\/\/127\.0\.0\.1:\d+)/, options.timeoutMs ?? WAIT_MS);
    return {
      child,
      pid: child.pid!,
      url: m[1]!,
      home: options.home,
      stdout: () => out,
      stderr: () => err,
      exited,
      waitFor,
      kill,
    };
  } catch (e) {
    if (isRunning(child)) child.kill('SIGKILL');
    throw e;
  }
}

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/** Runs `algohost ARGS --home HOME` to completion (killed after `timeoutMs`); `env` adds to the test's backends. */
/** Runs the admin CLI on `home`; `stdin`, when given, is piped to it (then closed). */
export async function runCli(args: string[], home: string, timeoutMs = WAIT_MS, env: Record<string, string> = {}, stdin?: string): Promise<CliResult> {
  const child = spawn(NODE, [BIN, ...args, '--home', home], { env: childEnv({ ...(await backendEnv(home)), ...env }), stdio: [stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
  if (stdin !== undefined) child.stdin!.end(stdin);
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (s: string) => (stdout += s));
  child.stderr!.setEncoding('utf8').on('data', (s: string) => (stderr += s));
  const closed = new Promise<Exit>((resolve) => child.once('close', (code, signal) => resolve({ code, signal })));
  try {
    const { code, signal } = await within(closed, timeoutMs, `algohost ${args.join(' ')} did not finish`);
    return { code, signal, stdout, stderr };
  } finally {
    if (isRunning(child)) child.kill('SIGKILL');
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export function sha256(data: Uint8Array): string {
  return crypto.createHash('sha256').update(data).digest('hex');
}

/** `data` in `chunkSize` pieces, waiting `delayMs` before each, and awaiting `gate` (if any) once `pauseAt` bytes were yielded. */
export async function* slowly(
  data: Buffer,
  options: { chunkSize?: number; delayMs?: number; pauseAt?: number; gate?: Promise<void> } = {},
): AsyncGenerator<Buffer> {
  const chunkSize = options.chunkSize ?? 64 * 1024;
  for (let at = 0; at < data.length; at += chunkSize) {
    if (options.gate && options.pauseAt !== undefined && at >= options.pauseAt) {
      await options.gate;
      options.gate = undefined;
    }
    if (options.delayMs) await sleep(options.delayMs);
    yield data.subarray(at, Math.min(at + chunkSize, data.length));
  }
}

export type UploadOutcome = { ok: true; status: number; body: string } | { ok: false; error: Error };

export interface Upload {
  /** Body bytes handed to the socket so far. */
  sent: number;
  /** The whole body was written and the request ended. */
  bodyDone: boolean;
  /** Set once an answer (any status) or an error arrived. */
  outcome: UploadOutcome | undefined;
  /** Settles with the answer or the connection error; never rejects. */
  result: Promise<UploadOutcome>;
}

/**
 * A request with a chunked body from `body`, written as the generator yields (honouring
 * back-pressure), so the caller controls how long the upload stays in flight.
 */
export function streamRequest(
  url: string,
  key: string,
  body: AsyncIterable<Buffer>,
  options: { method?: string; agent?: http.Agent | false } = {},
): Upload {
  const req = http.request(url, {
    method: options.method ?? 'PUT',
    agent: options.agent ?? false,
    headers: { authorization: `Simple ${key}`, 'content-type': 'application/octet-stream' },
  });
  const upload: Upload = { sent: 0, bodyDone: false, outcome: undefined, result: undefined as unknown as Promise<UploadOutcome> };
  upload.result = new Promise<UploadOutcome>((resolve) => {
    const settle = (o: UploadOutcome) => {
      if (upload.outcome) return;
      upload.outcome = o;
      resolve(o);
    };
    req.on('error', (error) => settle({ ok: false, error }));
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (s: string) => (text += s));
      res.on('end', () => settle({ ok: true, status: res.statusCode ?? 0, body: text }));
      res.on('error', (error) => settle({ ok: false, error }));
      res.on('aborted', () => settle({ ok: false, error: new Error('response aborted') }));
    });
  });
  const closed = once(req, 'close').catch(() => undefined);
  void (async () => {
    try {
      for await (const chunk of body) {
        if (req.destroyed || upload.outcome) return;
        upload.sent += chunk.length;
        if (!req.write(chunk)) await Promise.race([once(req, 'drain'), closed]);
      }
      if (!req.destroyed) {
        req.end();
        upload.bodyDone = true;
      }
    } catch (e) {
      req.destroy(e as Error);
    }
  })();
  return upload;
}

/** GET with an API key; the status and the whole body. */
export async function getBytes(url: string, key: string): Promise<{ status: number; body: Buffer }> {
  const res = await fetch(url, { headers: { authorization: `Simple ${key}` } });
  return { status: res.status, body: Buffer.from(await res.arrayBuffer()) };
}

/** Every regular file under `dir` (recursively); [] when `dir` does not exist. */
export function filesUnder(dir: string): string[] {
  if (!fs.existsSync(dir)) return [];
  return fs
    .readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => path.join(e.parentPath, e.name));
}

/** One GET on a fresh connection; 'refused' when nobody listens, 'reset' when dropped. Fails after `timeoutMs`. */
export function freshRequest(url: string, timeoutMs = 5_000): Promise<{ status: number } | 'refused' | 'reset'> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { agent: false, timeout: timeoutMs }, (res) => {
      res.resume();
      resolve({ status: res.statusCode ?? 0 });
    });
    req.on('timeout', () => {
      req.destroy();
      reject(new Error(`no answer from ${url} within ${timeoutMs} ms (connection hung)`));
    });
    req.on('error', (e: NodeJS.ErrnoException) => {
      if (e.code === 'ECONNREFUSED') resolve('refused');
      else if (e.code === 'ECONNRESET') resolve('reset');
      else reject(e);
    });
  });
}

export interface LineStarted {
  child: ChildProcess;
  /** The first line the child printed on stdout: where it listens, as it says. */
  line: string;
  /** Kills the child (SIGKILL, by its pid) and waits for it to exit. */
  stop(): Promise<void>;
}

/**
 * Starts a helper process (a stand-in server) that announces readiness by printing one line on
 * stdout, and waits for that line, at most `timeoutMs`. A child that exits first or says
 * nothing in time is killed, and the start fails saying so.
 */
export async function spawnUntilFirstLine(
  command: string,
  args: string[],
  options: { what: string; env: NodeJS.ProcessEnv; cwd?: string; timeoutMs?: number },
): Promise<LineStarted> {
  const child = spawn(command, args, { env: options.env, cwd: options.cwd, stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await exited;
    }
  };
  let buffered = '';
  const line = new Promise<string>((resolve, reject) => {
    child.stdout!.setEncoding('utf8').on('data', (s: string) => {
      buffered += s;
      const nl = buffered.indexOf('\n');
      if (nl >= 0) resolve(buffered.slice(0, nl));
    });
    child.once('exit', (code, signal) => reject(new Error(`${options.what} exited (${code ?? signal}) before it was ready`)));
  });
  try {
    return { child, line: await within(line, options.timeoutMs ?? WAIT_MS, `${options.what} did not start`), stop };
  } catch (err) {
    await stop();
    throw err;
  }
}
