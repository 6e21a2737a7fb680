import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { within, WAIT_MS } from './process.ts';

export interface NatsServer {
  /** nats://127.0.0.1:PORT */
  url: string;
  port: number;
  pid: number;
  /** Kills it (its JetStream files stay)... */
  halt(): Promise<void>;
  /** ...and starts it again on the same port and files. */
  resume(): Promise<void>;
  stop(): Promise<void>;
}

export const NATS_SERVER = '/usr/sbin/nats-server';

/** Why NATS tests cannot run here, or undefined when they can. */
export function natsUnavailable(): string | undefined {
  return fs.existsSync(NATS_SERVER) ? undefined : `${NATS_SERVER} is missing (apt-get install nats-server)`;
}

/**
 * Debian's nats-server with JetStream, on a loopback port, its storage in a temp directory,
 * in a process of its own (stopped by pid).
 */
export async function startNats(): Promise<NatsServer> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-nats-'));
  let child: ChildProcess;
  const launch = async (port: number): Promise<number> => {
    child = spawn(NATS_SERVER, ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', dir], { stdio: ['ignore', 'ignore', 'pipe'], env: {} });
    let log = '';
    const listening = new Promise<number>((resolve, reject) => {
      child.stderr!.setEncoding('utf8').on('data', (s: string) => {
        log += s;
        const m = /Listening for client connections on 127\.0\.0\.1:(\d+)/.exec(log);
        if (m) resolve(Number(m[1]));
      });
      child.once('exit', (code, signal) => reject(new Error(`nats-server exited (${code ?? signal}) before it listened:\n${log}`)));
    });
    try {
      return await within(listening, WAIT_MS, 'nats-server did not start');
    } catch (err) {
      child.kill('SIGKILL');
      throw err;
    }
  };
  const kill = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
    }
  };
  const port = await launch(-1);
  const server: NatsServer = {
    url: `nats://127.0.0.1:${port}`,
    port,
    pid: child!.pid!,
    halt: kill,
    async resume() {
      await launch(port);
      server.pid = child.pid!;
    },
    async stop() {
      await kill();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
  return server;
}
