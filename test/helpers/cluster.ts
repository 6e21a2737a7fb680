/**
 * A cluster on loopback for one test server (`npm run test:cluster`, docs/cluster.md): a
 * nats-server of its own with JetStream, two worker nodes (`algohost worker`) and a second API
 * node (`serve --role api`) as real processes, an API node in this process (so tests can still
 * reach its services), and a TCP load balancer in front that hands connections to the two API
 * nodes in turn. All of them on the test server's own PostgreSQL database and S3 prefix.
 *
 * Each test server gets its own NATS server because workers fetch builds from the database and
 * blob store they were started on: one worker pool shared by test servers with different
 * databases would be asked for builds it cannot find.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import type { NatsConnection } from '@nats-io/transport-node';
import { connectNats } from '../../src/cluster/nats.ts';
import { apiNodeParts } from '../../src/main.ts';
import { loadConfig, type Config } from '../../src/config.ts';
import type { ServiceOptions } from '../../src/services.ts';
import { BIN, childEnv, NODE, startServerProcess, within, WAIT_MS, type ServerProcess } from './process.ts';
import { startNats, type NatsServer } from './nats.ts';

/** Longest a node may take to start: longer than WAIT_MS, as builds of the other file running beside may load the machine. */
const START_MS = 4 * WAIT_MS;

export interface WorkerProcess {
  child: ChildProcess;
  home: string;
  /** Its log (pino, on stdout) and its messages (stderr), together. */
  output(): string;
  exited: Promise<number | null>;
}

/**
 * Every process started here: killed when the test process exits or is stopped, whatever
 * happens to it. The workers and the second API node do not keep the test process alive; the
 * NATS server, its connection and the balancer do, until the test server is closed.
 */
const children = new Set<ChildProcess>();
const natsPids = new Set<NatsServer>();
const workerHomes = new Set<string>();
function killAll(): void {
  for (const c of children) c.kill('SIGKILL');
  for (const h of workerHomes) fs.rmSync(h, { recursive: true, force: true });
  for (const n of natsPids) {
    try {
      process.kill(n.pid, 'SIGKILL');
    } catch {
      // Already gone.
    }
  }
}
process.once('exit', killAll);
let onSignals = false;
/**
 * On SIGTERM and SIGINT, kill what clusters started and exit: installed by the first cluster
 * started, not on import, so that a process that only imports these helpers (a benchmark,
 * through server.ts) keeps its own signal handling.
 */
function killAllOnSignals(): void {
  if (onSignals) return;
  onSignals = true;
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => {
      killAll();
      process.exit(128 + (signal === 'SIGTERM' ? 15 : 2));
    });
  }
}

function detach(child: ChildProcess): void {
  children.add(child);
  child.unref();
  for (const s of [child.stdout, child.stderr]) (s as unknown as { unref?: () => void } | null)?.unref?.();
}

/** `algohost worker` with `env` (the cluster's settings) on a new home; resolves once it is ready. */
export async function startWorker(env: Record<string, string>, args: string[] = []): Promise<WorkerProcess> {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'algohost-worker-'));
  workerHomes.add(home);
  const child = spawn(NODE, [BIN, 'worker', '--home', home, '--host', '127.0.0.1', ...args], { env: childEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
  detach(child);
  let out = '';
  child.stdout!.setEncoding('utf8').on('data', (s: string) => (out += s));
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => {
      children.delete(child);
      resolve(code);
    }),
  );
  const ready = new Promise<void>((resolve, reject) => {
    child.stderr!.setEncoding('utf8').on('data', (s: string) => {
      out += s;
      if (out.includes('algohost worker is ready')) resolve();
    });
    void exited.then((code) => reject(new Error(`the worker exited (${code}) before it was ready:\n${out}`)));
  });
  try {
    await within(ready, START_MS, 'the worker did not start').catch((e: Error) => {
      throw new Error(`${e.message}; its output:\n${out}`);
    });
  } catch (e) {
    child.kill('SIGKILL');
    fs.rmSync(home, { recursive: true, force: true });
    throw e;
  }
  return { child, home, output: () => out, exited };
}

/** Kills a worker by pid and removes its home. */
export async function stopWorker(w: WorkerProcess): Promise<void> {
  w.child.kill('SIGKILL');
  await w.exited;
  fs.rmSync(w.home, { recursive: true, force: true });
  workerHomes.delete(w.home);
}

/**
 * A TCP load balancer on 127.0.0.1 port 0: each connection goes to the next of `targets` in
 * turn (as a layer-4 balancer in front of API nodes does), bytes passed through untouched.
 */
export async function roundRobin(targets: string[]): Promise<{ url: string; close(): Promise<void> }> {
  const ports = targets.map((t) => Number(new URL(t).port));
  let next = 0;
  const sockets = new Set<net.Socket>();
  // Half-open allowed: a client that ends its side after its request still gets the answer.
  const server = net.createServer({ allowHalfOpen: true }, (client) => {
    const upstream = net.connect({ port: ports[next++ % ports.length]!, host: '127.0.0.1', allowHalfOpen: true });
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.once('close', () => sockets.delete(s));
      s.setNoDelay(true);
    }
    // A side that fails closes the other, after what it had sent is passed on (a server that
    // answers 413 and resets the upload's connection: the client still reads the 413).
    client.on('error', () => upstream.destroy());
    upstream.on('error', () => client.end(() => client.destroy()));
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

export interface TestCluster {
  /** What the in-process API node is made with (its NatsExecutor, JetStream queue, bus). */
  parts: ServiceOptions;
  nats: NatsServer;
  workers: WorkerProcess[];
  /** The second API node, or undefined when the test tunes its server in ways only this process can take. */
  second: ServerProcess | undefined;
  /** After the in-process node listens: puts the balancer in front of it (and the second node). */
  front(local: string): Promise<string>;
  close(): Promise<void>;
}

/**
 * The cluster around an in-process API node on `config` (whose settings `env` are): NATS, two
 * workers and, unless `single`, a second API node on a home of its own with the same backends.
 */
export async function startTestCluster(config: Config, env: Record<string, string>, secondHome: string, single: boolean): Promise<TestCluster> {
  killAllOnSignals();
  // As docs/cluster.md says to run one: each role signs in as its own user, over TLS, and every
  // message is sealed with the cluster's secret.
  const nats = await startNats({ secure: true });
  natsPids.add(nats);
  const workers: WorkerProcess[] = [];
  let nc: NatsConnection | undefined;
  let second: ServerProcess | undefined;
  let balancer: Awaited<ReturnType<typeof roundRobin>> | undefined;
  const secret = crypto.randomBytes(32).toString('hex');
  const common = { ...env, ALGOHOST_NATS_CA: nats.ca!, ALGOHOST_CLUSTER_SECRET: secret };
  const apiEnv = { ...common, ALGOHOST_NATS_URL: nats.urlFor('api') };
  const close = async () => {
    await balancer?.close();
    await second?.kill();
    await Promise.all(workers.map(stopWorker));
    await nc?.close();
    await nats.stop();
    natsPids.delete(nats);
    fs.rmSync(secondHome, { recursive: true, force: true });
  };
  try {
    const [w1, w2, api] = await Promise.allSettled([
      startWorker({ ...common, ...nats.nextWorker() }),
      startWorker({ ...common, ...nats.nextWorker() }),
      single ? undefined : startServerProcess({ home: secondHome, env: apiEnv, args: ['--role', 'api'], timeoutMs: START_MS }),
    ]);
    for (const w of [w1, w2]) if (w.status === 'fulfilled') workers.push(w.value);
    if (api.status === 'fulfilled' && api.value) {
      second = api.value;
      detach(second.child);
    }
    for (const r of [w1, w2, api]) if (r.status === 'rejected') throw r.reason;
    const apiConfig = loadConfig({ home: config.home }, apiEnv);
    const node = `test-api-${crypto.randomBytes(4).toString('hex')}`;
    nc = await connectNats(apiConfig.natsUrl!, apiConfig.natsAuth, 'algohost test api', 'api', node);
    const parts = await apiNodeParts(nc, { ...config, natsUrl: apiConfig.natsUrl, natsAuth: apiConfig.natsAuth, clusterSecret: secret }, pino({ level: 'error' }), node);
    return {
      parts,
      nats,
      workers,
      second,
      async front(local) {
        balancer = await roundRobin(second ? [local, second.url] : [local]);
        return balancer.url;
      },
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
