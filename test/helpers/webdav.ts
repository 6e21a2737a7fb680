/**
 * A real WebDAV server on loopback for tests: `rclone serve webdav` over a temporary
 * directory. Every wait is bounded, the child is killed by its own pid, and a child still
 * running when the test process exits is killed then (no orphans).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export interface WebDavServer {
  /** http://127.0.0.1:PORT/ */
  url: string;
  /** The directory served: tests may create fixtures in it and inspect it directly. */
  root: string;
  pid: number;
  stop(): Promise<void>;
}

const START_MS = 15_000;
const STOP_MS = 5_000;
const PORT_ATTEMPTS = 5;

let missing: string | undefined | null = null;

/** Why WebDAV tests cannot run here (the skip reason), or undefined when rclone is installed. */
export function rcloneMissing(): string | undefined {
  if (missing === null) {
    const r = spawnSync('rclone', ['version'], { stdio: 'ignore', timeout: 10_000 });
    missing = r.error || r.status !== 0 ? 'rclone is not installed (apt-get install rclone)' : undefined;
  }
  return missing;
}

const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

/** A port that was free a moment ago (rclone may still lose it to another process: we retry). */
async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Waits for rclone's "Server started" line (its own, unlike a connect that another process could answer). */
function ready(child: ChildProcess, stderr: () => string): Promise<'ready' | 'exited'> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => done(() => reject(new Error(`rclone did not start within ${START_MS} ms: ${stderr()}`))), START_MS);
    const onData = () => {
      if (/Server started on/.test(stderr())) done(() => resolve('ready'));
    };
    const onExit = () => done(() => resolve('exited'));
    function done(settle: () => void) {
      clearTimeout(timer);
      child.stderr!.off('data', onData);
      child.off('exit', onExit);
      settle();
    }
    child.stderr!.on('data', onData);
    child.once('exit', onExit);
  });
}

async function kill(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), STOP_MS);
  await exited;
  clearTimeout(timer);
}

/** Starts `rclone serve webdav` on a temporary directory; with `user`, it requires Basic auth. */
export async function startWebDav(opts: { user?: string; pass?: string } = {}): Promise<WebDavServer> {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-webdav-'));
  // rclone reads RCLONE_* settings from the environment: the tests' server must not.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('RCLONE_')));
  let last = '';
  for (let attempt = 0; attempt < PORT_ATTEMPTS; attempt++) {
    const port = await freePort();
    const args = ['serve', 'webdav', root, '--addr', `127.0.0.1:${port}`, '--config', '/dev/null',
      // Fixtures written straight into `root` must show at once, not after the 5 min default.
      '--dir-cache-time', '0s'];
    if (opts.user !== undefined) args.push('--user', opts.user, '--pass', opts.pass ?? '');
    const child = spawn('rclone', args, { stdio: ['ignore', 'ignore', 'pipe'], env });
    running.add(child);
    child.once('exit', () => running.delete(child));
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => {
      if (stderr.length < 64 * 1024) stderr += chunk.toString();
    });
    let outcome: 'ready' | 'exited';
    try {
      outcome = await ready(child, () => stderr);
    } catch (err) {
      await kill(child);
      fs.rmSync(root, { recursive: true, force: true });
      throw err;
    }
    if (outcome === 'ready') {
      return {
        url: `http://127.0.0.1:${port}/`,
        root,
        pid: child.pid!,
        async stop() {
          await kill(child);
          fs.rmSync(root, { recursive: true, force: true });
        },
      };
    }
    last = stderr;
    if (!/address already in use/i.test(stderr)) break;
  }
  fs.rmSync(root, { recursive: true, force: true });
  throw new Error(`rclone serve webdav did not start: ${last.slice(0, 2000)}`);
}
