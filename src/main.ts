import fs from 'node:fs';
import { consoleAssets } from './console/assets.ts';
import path from 'node:path';
import pino from 'pino';
import { ConfigError, type Config } from './config.ts';
import { buildApp, LOG_OPTIONS } from './app.ts';
import { createServices, type Bus, type ServiceOptions, type Services } from './services.ts';
import { publishDemoAlgorithms } from './algorithms/demo.ts';
import { FULL_PERMISSIONS } from './auth/permissions.ts';
import { HomeLock } from './home.ts';
import os from 'node:os';
import type { NatsConnection } from '@nats-io/transport-node';
import { connectNats, nodeNameOf, requireCluster, requireClusterKey } from './cluster/nats.ts';
import { NatsExecutor } from './cluster/natsExecutor.ts';
import { WorkerNode } from './cluster/workerNode.ts';
import { JetStreamQueue } from './cluster/asyncQueue.ts';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { healthReport, networkWarning } from './health.ts';
import { listenMetrics } from './http/metrics.ts';

const DEMO_USER = 'demo';

/**
 * `algohost serve`: open the home, recover from any crash, create the demo user on a new
 * home, listen, and on SIGTERM/SIGINT stop taking requests, finish the ones in flight, exit.
 */
export async function serve(config: Config, out: NodeJS.WritableStream = process.stderr, role: 'all' | 'api' = 'all'): Promise<void> {
  // A port taken by another program stops the start before anything is made: the home, its
  // demo user and key are made only by a start that can serve them.
  const portTaken = await listenProblem(config.port, config.host);
  if (portTaken) throw listenError(portTaken, config);
  const metricsTaken = config.metricsAddr && (await listenProblem(config.metricsAddr.port, config.metricsAddr.host));
  if (metricsTaken) throw metricsListenError(metricsTaken, config.metricsAddr!);
  const logger = pino({ level: config.logLevel, ...LOG_OPTIONS });
  // An API node sends every call to worker nodes over NATS (docs/cluster.md).
  const cluster = role === 'api' ? requireCluster(config, 'serve --role api') : undefined;
  const node = nodeNameOf(config);
  const nc = cluster ? await connectNats(cluster.url, config.natsAuth, `algohost api ${os.hostname()}`, 'api', node) : undefined;
  // Before anything touches the home: recovery below empties uploads in progress and fails
  // running builds, which would break a server already running on it.
  const { lock, services } = await openNode(config, nc, async () => ({ log: logger, ...(nc ? await apiNodeParts(nc, config, logger, node) : {}) }));
  const giveUp = async (err: Error): Promise<never> => {
    await services.close();
    await nc?.close();
    lock.release();
    throw err;
  };
  // An API node runs no algorithm: only builds, which need the sandbox too.
  const sandboxProblem = checkSandbox(services, config, logger, out);
  if (sandboxProblem) return giveUp(sandboxProblem);
  checkNetwork(services, logger, out, role === 'api');
  const { removed } = await services.hosted.recover();
  if (removed > 0) logger.info({ removed }, 'removed file contents left unreferenced by an interrupted write');
  await services.builds.recover();
  const requeued = await services.asyncCalls.recover();
  if (requeued > 0) logger.info({ requeued }, 'async calls a stopped server left unfinished are run again');
  const sweeper = startSweeper(services, logger);
  const demoKey = config.demo ? await firstStartDemo(services, logger) : undefined;

  const app = buildApp(services, { logger, ...(role === 'api' ? { role } : {}) });
  let address: string;
  try {
    address = await app.listen({ port: config.port, host: config.host });
  } catch (err) {
    await app.close();
    return giveUp(listenError(err as NodeJS.ErrnoException, config));
  }
  // The metrics listener (ALGOHOST_METRICS_ADDR), after the public port: a busy port stops the start the same way.
  let metricsServer: Awaited<ReturnType<typeof listenMetrics>> | undefined;
  if (config.metricsAddr) {
    try {
      metricsServer = await listenMetrics(services.metrics, config.metricsAddr, logger);
    } catch (err) {
      await app.close();
      return giveUp(metricsListenError(err as NodeJS.ErrnoException, config.metricsAddr));
    }
  }
  const base = config.publicUrl ?? address;
  // Built now rather than for the first visitor (a second or so of CPU, once).
  consoleAssets().catch((err: unknown) => logger.error({ err }, 'the web console could not be built; its pages answer 500 until it can'));
  const keyFile = path.join(config.home, 'demo-key');
  const lines = [`algohost is ready at ${address}`, `home: ${config.home}`, `web console: ${base}/ (sign in with a password: algohost user password NAME sets one)`];
  if (metricsServer) lines.push(`metrics: ${metricsServer.url}`);
  if (config.metricsToken) lines.push(`metrics: ${base}/metrics (Authorization: Bearer, the token of ALGOHOST_METRICS_TOKEN)`);
  if (demoKey) {
    lines.push(`Created user "${DEMO_USER}"; its API key (shown once here, kept in ${keyFile}): ${demoKey}`);
  }
  if (fs.existsSync(keyFile)) {
    const auth = `-H "Authorization: Simple $(cat ${keyFile})"`;
    lines.push(
      'Try it:',
      `  curl ${auth} -H 'Content-Type: text/plain' -d 'world' ${base}/v1/algo/${DEMO_USER}/Hello`,
      `  curl ${auth} ${base}/v1/data/.my`,
    );
  }
  out.write(lines.join('\n') + '\n');

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'stopping: finishing requests in flight');
    const timer = setTimeout(() => {
      logger.error({ timeoutMs: config.shutdownTimeoutMs }, 'requests still running at the shutdown timeout; exiting anyway');
      process.exit(1);
    }, config.shutdownTimeoutMs);
    timer.unref();
    // server.close() only closes connections idle at that moment; one that finishes its
    // request later stays open under keep-alive and would hold the drain until the timeout.
    const reaper = setInterval(() => app.server.closeIdleConnections(), 100);
    reaper.unref();
    await app.close();
    clearInterval(reaper);
    metricsServer?.close();
    await sweeper?.stop();
    await services.close();
    await nc?.drain();
    stopped(lock, logger);
  };
  onSignals(stop);
}

/** SIGTERM and SIGINT both stop the process through `stop`. */
function onSignals(stop: (signal: string) => Promise<void>): void {
  process.once('SIGTERM', () => void stop('SIGTERM'));
  process.once('SIGINT', () => void stop('SIGINT'));
}

/** The end of a clean stop: the home's lock released, the log flushed, exit 0. */
function stopped(lock: HomeLock, logger: pino.Logger): never {
  lock.release();
  logger.info('stopped');
  logger.flush();
  process.exit(0);
}

/** What /health asks of the NATS connection: the server it is on, and a round trip to it. */
function natsBus(nc: NatsConnection): Bus {
  return {
    location: () => nc.getServer(),
    ping: async () => {
      if (nc.isClosed()) throw new Error('the connection is closed');
      await nc.flush();
    },
  };
}

/** A worker node's only HTTP: GET /health (for its process manager or load balancer's checks). */
async function listenHealth(services: Services, port: number, host: string, logger: pino.Logger): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/health') {
      res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { code: 'route_not_found', message: 'a worker node serves GET /health only' } }));
      return;
    }
    const load = services.runtime.pool.load();
    void healthReport(services, { role: 'worker', running: load.running, free: load.free }).then(
      ({ status, body }) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body)),
      (err: unknown) => {
        logger.error({ err }, 'the health report failed');
        res.writeHead(500, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { code: 'internal_error', message: 'internal error; the server log has the details' } }));
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  server.unref();
  return server;
}

/**
 * The home's lock, then the services on it (with what `options` makes first). A failure leaves
 * nothing held: the lock released, the NATS connection closed.
 */
async function openNode(config: Config, nc: NatsConnection | undefined, options: () => Promise<ServiceOptions>): Promise<{ lock: HomeLock; services: Services }> {
  try {
    const made = await options();
    const lock = HomeLock.acquire(config.home);
    try {
      return { lock, services: await createServices(config, made) };
    } catch (err) {
      lock.release();
      throw err;
    }
  } catch (err) {
    await nc?.close();
    throw err;
  }
}

/**
 * What makes a node an API node (docs/cluster.md): its calls run on worker nodes over NATS, and
 * its async calls wait in JetStream, which any API node consumes. Tests build their in-process
 * API nodes with it too (test/helpers/cluster.ts).
 */
export async function apiNodeParts(nc: NatsConnection, config: Config, logger: pino.Logger, node: string): Promise<ServiceOptions> {
  const key = requireClusterKey(config, 'serve --role api');
  return { executor: new NatsExecutor(nc, logger, key, node), asyncQueue: await openAsyncQueue(nc, config, logger), bus: natsBus(nc) };
}

/** The cluster's async queue, or one line saying why there is none (JetStream off). */
async function openAsyncQueue(nc: NatsConnection, config: Config, logger: pino.Logger): Promise<JetStreamQueue> {
  try {
    return await JetStreamQueue.open(nc, logger, config.asyncAttempts, config.queuePerCaller);
  } catch (err) {
    throw new ConfigError(`ALGOHOST_NATS_URL: the NATS server has no JetStream to keep async calls in (start nats-server with -js): ${(err as Error).message}`);
  }
}

/**
 * Refuses to run unsandboxed when ALGOHOST_SANDBOX=required, else warns (once, loudly). With
 * gvisor, refuses to start where runsc cannot run: the operator asked for a kernel boundary, and
 * bubblewrap is not one.
 */
function checkSandbox(services: Services, config: Config, logger: pino.Logger, out: NodeJS.WritableStream): ConfigError | undefined {
  if (services.sandbox.available) return undefined;
  if (config.sandbox === 'gvisor') return new ConfigError(`ALGOHOST_SANDBOX=gvisor, but ${services.sandbox.reason}`);
  if (config.sandbox === 'required') return new ConfigError(`ALGOHOST_SANDBOX=required, but ${services.sandbox.reason}`);
  const warning = `WARNING: algorithms are NOT sandboxed: ${services.sandbox.reason}. Set ALGOHOST_SANDBOX=required to refuse to start like this.`;
  logger.warn(warning);
  out.write(warning + '\n');
  return undefined;
}

/** Says, at every start, when sandboxes' network is not the fence working (ALGOHOST_ALGORITHM_NETWORK). */
function checkNetwork(services: Services, logger: pino.Logger, out: NodeJS.WritableStream, apiNode = false): void {
  const warning = networkWarning(services, apiNode);
  if (!warning) return;
  logger.warn(warning);
  out.write(`WARNING: ${warning}\n`);
}

/**
 * `algohost worker`: a worker node. Runs algorithms for the API nodes of its cluster, taking
 * jobs from NATS; serves no HTTP. Its home holds only what this machine keeps for itself (the
 * builds it fetched, its lock). On SIGTERM it takes no new job, finishes the ones it has, exits.
 */
export async function worker(config: Config, out: NodeJS.WritableStream = process.stderr, healthPort?: number): Promise<void> {
  const logger = pino({ level: config.logLevel, ...LOG_OPTIONS });
  const cluster = requireCluster(config, 'algohost worker');
  const name = nodeNameOf(config);
  const nc = await connectNats(cluster.url, config.natsAuth, `algohost worker ${name} on ${os.hostname()}`, 'worker', name);
  const { lock, services } = await openNode(config, nc, async () => ({ bus: natsBus(nc), log: logger }));
  let health: http.Server | undefined;
  let metricsServer: Awaited<ReturnType<typeof listenMetrics>> | undefined;
  const node = new WorkerNode(nc, services.runtime, logger, () => services.runtime.pool.load(), cluster.key, services.network.allowsNetwork, name);
  try {
    const problem = checkSandbox(services, config, logger, out);
    if (problem) throw problem;
    checkNetwork(services, logger, out);
    if (healthPort !== undefined) health = await listenHealth(services, healthPort, config.host, logger);
    if (config.metricsAddr) metricsServer = await listenMetrics(services.metrics, config.metricsAddr, logger).catch((err: NodeJS.ErrnoException) => Promise.reject(metricsListenError(err, config.metricsAddr!)));
    await node.start();
  } catch (err) {
    health?.close();
    metricsServer?.close();
    await services.close();
    await nc.close();
    lock.release();
    throw err;
  }
  const sweeper = startSweeper(services, logger, 'worker');
  const where = (health ? `, /health at http://${config.host}:${(health.address() as AddressInfo).port}` : '') + (metricsServer ? `, metrics at ${metricsServer.url}` : '');
  out.write(`algohost worker is ready: NATS server ${nc.getServer()}, home ${config.home}${where}\n`);

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal, running: node.busy }, 'stopping: taking no new jobs, finishing the ones running');
    const timer = setTimeout(() => {
      logger.error({ timeoutMs: config.shutdownTimeoutMs }, 'jobs still running at the shutdown timeout; exiting anyway');
      process.exit(1);
    }, config.shutdownTimeoutMs);
    timer.unref();
    await node.drain();
    await sweeper?.stop();
    health?.close();
    metricsServer?.close();
    await nc.drain();
    await services.close();
    stopped(lock, logger);
  };
  onSignals(stop);
}

/**
 * Where servers share the metadata store, one that dies and is not restarted leaves its work
 * in flight (pending file contents, a build it was running) to the others: every live server
 * runs the same sweep as at start, now and then. And a deletion removes the algorithm's files on
 * the server that ran it only: every server (and worker node) prunes its own copies of deleted
 * algorithms in the sweep. One machine needs none (its restart recovers; its deletions are all).
 * A worker node only prunes.
 */
function startSweeper(services: Services, logger: pino.Logger, role: 'server' | 'worker' = 'server'): { stop(): Promise<void> } | undefined {
  if (services.store.dialect === 'sqlite') return undefined;
  let running: Promise<void> | undefined;
  const sweep = async () => {
    try {
      const pruned = await services.pruneAlgorithms(Math.min(services.config.sweepIntervalMs, 60_000));
      if (pruned > 0) logger.info({ pruned }, 'removed the local files of algorithms deleted through other servers');
    } catch (err) {
      logger.warn({ err }, 'pruning the local files of deleted algorithms failed; trying again later');
    }
    if (role === 'worker') return;
    try {
      const { removed } = await services.hosted.sweep();
      if (removed > 0) logger.info({ removed }, 'removed file contents a stopped server left pending');
      await services.builds.failInterrupted();
      const requeued = await services.asyncCalls.recover();
      if (requeued > 0) logger.info({ requeued }, 'async calls a stopped server left unfinished are run again');
      const freed = await services.limits.limiter.forgetDead();
      if (freed > 0) logger.info({ freed }, 'calls under way that stopped servers held against their callers\' concurrency limits are given back');
    } catch (err) {
      // The store is away for the moment (503s say so to clients): the next round tries again.
      logger.warn({ err }, 'sweep of stopped servers\' leftovers failed; trying again later');
    }
  };
  const timer = setInterval(() => {
    running ??= sweep().finally(() => (running = undefined));
  }, services.config.sweepIntervalMs);
  timer.unref();
  return {
    async stop() {
      clearInterval(timer);
      await running;
    },
  };
}

/** ALGOHOST_METRICS_ADDR that cannot be listened on, in one line. */
function metricsListenError(err: NodeJS.ErrnoException, addr: { host: string; port: number }): Error {
  const where = `ALGOHOST_METRICS_ADDR ${addr.host}:${addr.port}`;
  switch (err.code) {
    case 'EADDRINUSE':
      return new ConfigError(`${where}: the port is already in use by another program; stop it or choose another`);
    case 'EACCES':
      return new ConfigError(`${where}: the port needs privileges this process does not have; choose one above 1023`);
    case 'EADDRNOTAVAIL':
    case 'ENOTFOUND':
      return new ConfigError(`${where}: ${addr.host} is not an address of this machine`);
    default:
      return err;
  }
}

/** What a person does about a port the server cannot listen on, in one line. */
/**
 * Why listening on host:port fails now (EADDRINUSE, EACCES, ...), or undefined: tried, and let go
 * at once (port 0 always works). The real listen still answers for a port taken meanwhile.
 */
function listenProblem(port: number, host: string): Promise<NodeJS.ErrnoException | undefined> {
  if (port === 0) return Promise.resolve(undefined);
  const probe = net.createServer();
  return new Promise((resolve) => {
    probe.once('error', (err: NodeJS.ErrnoException) => resolve(err));
    probe.listen({ port, host, exclusive: true }, () => probe.close(() => resolve(undefined)));
  });
}

function listenError(err: NodeJS.ErrnoException, config: Config): Error {
  const where = `port ${config.port} on ${config.host}`;
  const fix = 'choose another with --port N or ALGOHOST_PORT';
  switch (err.code) {
    case 'EADDRINUSE':
      return new ConfigError(`${where} is already in use by another program; stop it or ${fix}`);
    case 'EACCES':
      return new ConfigError(`${where} needs privileges this process does not have; ${fix} (above 1023)`);
    case 'EADDRNOTAVAIL':
    case 'ENOTFOUND':
      return new ConfigError(`${config.host} is not an address of this machine; set --host H or ALGOHOST_HOST`);
    default:
      return err;
  }
}

/** On a home that was never started before: create `demo` and keep its key (mode 0600). */
async function firstStartDemo(services: Services, logger: pino.Logger): Promise<string | undefined> {
  const db = services.store.db;
  const done = await db.selectFrom('meta').select('value').where('key', '=', 'demo_created').executeTakeFirst();
  if (done) return undefined;
  const anyUser = await db.selectFrom('users').select('id').limit(1).executeTakeFirst();
  if (anyUser) return undefined;
  const { apiKey, user } = await services.users.create(DEMO_USER);
  const principal = { userId: user.id, username: user.username, keyId: 'server', permissions: { ...FULL_PERMISSIONS } };
  const scratch = await services.builds.files.scratch('demo-');
  try {
    await publishDemoAlgorithms(principal, services, scratch);
  } catch (err) {
    // A server without its demo is still a server: say why and carry on.
    logger.warn({ err }, 'could not publish the demo algorithms');
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
  fs.writeFileSync(path.join(services.config.home, 'demo-key'), apiKey + '\n', { mode: 0o600 });
  await db.insertInto('meta').values({ key: 'demo_created', value: new Date().toISOString() }).execute();
  return apiKey;
}
