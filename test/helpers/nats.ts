import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { within, WAIT_MS } from './process.ts';
import { makeCa, makeClientCert } from './tls.ts';

/** The roles of docs/cluster.md's NATS configuration with one user each on a secure server (worker nodes have one each: workerUrl). */
export type NatsUser = 'api' | 'admin';

/** The worker nodes a secure server has users for (docs/cluster.md's worker block, once per name). */
export const WORKER_NAMES = Array.from({ length: 12 }, (_, i) => `worker-${i + 1}`);

export interface NatsServer {
  /** nats://127.0.0.1:PORT, or tls://127.0.0.1:PORT for a secure one (no credentials: anonymous). */
  url: string;
  /** The URL with a role's user and password (a secure server), else `url`. */
  urlFor(user: NatsUser): string;
  /** The URL with the user and password of worker node `name` (one of WORKER_NAMES) on a secure server, else `url`. */
  workerUrl(name: string): string;
  /**
   * What the next worker node started needs of the bus: a name of its own (WORKER_NAMES in
   * turn), ALGOHOST_NODE_NAME, and its user's URL.
   */
  nextWorker(): { ALGOHOST_NODE_NAME: string; ALGOHOST_NATS_URL: string };
  /** A secure server's CA (ALGOHOST_NATS_CA), else undefined. */
  ca: string | undefined;
  /** With `verifyClients`: a client certificate the server takes (ALGOHOST_NATS_CERT, ALGOHOST_NATS_KEY). */
  client: { cert: string; key: string } | undefined;
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
 * The nats-server configuration docs/cluster.md ships (its users and their permissions), as the
 * docs have it, with its worker node's user (the block for `worker-1`, between the
 * `worker-1 begin`/`end` comments) made once for each of `workers`, as the docs tell operators to.
 */
export function documentedNatsConf(workers: string[] = ['worker-1']): string {
  const doc = fs.readFileSync(path.join(import.meta.dirname, '..', '..', 'docs', 'cluster.md'), 'utf8');
  const m = /<!-- nats-conf:begin -->\n```\n([\s\S]*?)```\n<!-- nats-conf:end -->/.exec(doc);
  if (!m) throw new Error('docs/cluster.md has no nats-conf block');
  const block = /( *# worker-1 begin\n)([\s\S]*?)( *# worker-1 end\n)/.exec(m[1]!);
  if (!block) throw new Error("docs/cluster.md's nats-conf block has no worker-1 begin/end block");
  const each = workers.map((w) => block[2]!.replaceAll('worker-1', w).replaceAll('WORKER_1', passwordVar(w))).join('');
  return m[1]!.replace(block[0], each);
}

/** The variable a worker's password is in, in the configuration (`WORKER_1` for worker-1). */
const passwordVar = (name: string) => name.toUpperCase().replaceAll('-', '_');

/**
 * Debian's nats-server with JetStream, on a loopback port, its storage in a temp directory,
 * in a process of its own (stopped by pid). `secure`: as docs/cluster.md says to run it, with
 * its users and permissions per role, and TLS (a throwaway CA's certificate) required.
 */
export async function startNats(options: { secure?: boolean; verifyClients?: boolean } = {}): Promise<NatsServer> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-nats-'));
  // Each starts with a letter: nats-server parses a variable's value as a configuration value,
  // and one like 6e3f… is read as a malformed number (the server would not start).
  const password = () => `pw${crypto.randomBytes(12).toString('hex')}`;
  const passwords = { api: password(), admin: password() };
  const workers = new Map(WORKER_NAMES.map((w) => [w, password()]));
  const tls = options.secure || options.verifyClients ? makeCa(dir, 'nats') : undefined;
  const client = tls && options.verifyClients ? makeClientCert(dir, 'nats', 'node') : undefined;
  const env: Record<string, string> = tls
    ? {
        ALGOHOST_NATS_API_PASSWORD: passwords.api,
        ALGOHOST_NATS_ADMIN_PASSWORD: passwords.admin,
        ...Object.fromEntries([...workers].map(([w, p]) => [`ALGOHOST_NATS_${passwordVar(w)}_PASSWORD`, p])),
      }
    : {};
  if (tls) {
    fs.writeFileSync(
      path.join(dir, 'nats.conf'),
      [
        `tls {\n  cert_file: "${tls.cert}"\n  key_file: "${tls.key}"\n  timeout: 5${client ? `\n  ca_file: "${tls.ca}"\n  verify: true` : ''}\n}`,
        documentedNatsConf(WORKER_NAMES),
      ].join('\n'),
    );
  }
  let child: ChildProcess;
  const launch = async (port: number): Promise<number> => {
    const args = ['-js', '-a', '127.0.0.1', '-p', String(port), '-sd', dir, ...(tls ? ['-c', path.join(dir, 'nats.conf')] : [])];
    child = spawn(NATS_SERVER, args, { stdio: ['ignore', 'ignore', 'pipe'], env });
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
  const scheme = tls ? 'tls' : 'nats';
  const url = `${scheme}://127.0.0.1:${port}`;
  let started = 0;
  const workerUrl = (name: string) => {
    if (!tls) return url;
    const p = workers.get(name);
    if (!p) throw new Error(`no NATS user for worker node ${name}: one of ${WORKER_NAMES.join(', ')}`);
    return `${scheme}://algohost-${name}:${p}@127.0.0.1:${port}`;
  };
  const server: NatsServer = {
    url,
    urlFor: (user) => (tls ? `${scheme}://algohost-${user}:${passwords[user]}@127.0.0.1:${port}` : url),
    workerUrl,
    nextWorker() {
      const name = WORKER_NAMES[started++ % WORKER_NAMES.length]!;
      return { ALGOHOST_NODE_NAME: name, ALGOHOST_NATS_URL: workerUrl(name) };
    },
    ca: tls?.ca,
    client,
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
