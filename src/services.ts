import os from 'node:os';
import path from 'node:path';
import type { Config } from './config.ts';
import type { MetadataStore } from './store/db.ts';
import { openMetadataStore } from './store/backends.ts';
import { blobDriver, openBlobStore } from './data/blobBackends.ts';
import { AlgorithmArtifacts } from './algorithms/artifacts.ts';
import { ServerSecret, SECRET_KEY } from './secret.ts';
import { sharedMetaValue } from './store/meta.ts';
import { KeyService } from './auth/keyService.ts';
import { UserService } from './auth/users.ts';
import { SessionService } from './auth/sessions.ts';
import type { BlobStore } from './data/blobStore.ts';
import { HostedConnector, type HostedOptions } from './data/connectors/hosted.ts';
import { DataService } from './data/dataService.ts';
import { MarkerCodec } from './data/marker.ts';
import { AlgorithmRegistry } from './algorithms/registry.ts';
import { probeSandbox, DEFAULT_LIMITS, type SandboxSupport } from './runtime/sandbox.ts';
import { probeGvisor } from './runtime/gvisor.ts';
import { AlgorithmRuntime, DEFAULT_RUNTIME, type RuntimeOptions } from './runtime/runtime.ts';
import type { Spares } from './runtime/spares.ts';
import { DEFAULT_POOL, type WorkerPool } from './runtime/pool.ts';
import type { Executor } from './runtime/contract.ts';
import { AsyncCalls, LocalQueue, type AsyncQueue } from './algorithms/asyncCalls.ts';
import { Builder } from './algorithms/builder.ts';
import { BuildNetwork } from './algorithms/buildNetwork.ts';
import { BuildService } from './algorithms/builds.ts';
import { AlgorithmFiles } from './algorithms/files.ts';
import { ReleaseService } from './algorithms/releases.ts';
import { Environments } from './algorithms/environments.ts';
import { GitRepos } from './algorithms/gitRepos.ts';
import { CallService, MAX_DETACHED } from './algorithms/calls.ts';
import { SandboxNetwork } from './runtime/networkPolicy.ts';
import { AddressRule } from './addressRule.ts';
import type { FenceSupport } from './runtime/egressFence.ts';
import { UsageRecorder, type UsageOptions } from './algorithms/usage.ts';
import { ConnectedAccounts } from './data/accounts/accounts.ts';
import { CredentialBox } from './data/accounts/credentials.ts';
import { Webhooks, type WebhookOptions } from './events/webhooks.ts';
import { Triggers, type TriggerOptions } from './events/triggers.ts';
import { appendEvents } from './events/outbox.ts';
import { Pressure } from './concurrency.ts';
import { CallLimiter, defaultBurst, Limits, REQUESTS } from './limits/limits.ts';
import { ComputeMeter } from './limits/compute.ts';
import { AlgorithmSlots } from './limits/algorithmSlots.ts';
import { SharedLimitStore } from './limits/shared.ts';
import { BUILDS, GIT, HeldSlots, STREAMS, UPLOADS, type HeldCaps, type HeldKind } from './limits/held.ts';
import { ConnectedStorage, type ConnectedStorageOptions } from './data/accounts/storage.ts';
import { NO_METRICS, PromMetrics, type Metrics } from './metrics.ts';
import { openTracer, type Tracer } from './tracing.ts';

/** Everything the HTTP layer and the commands need, built from one Config. */
export interface Services {
  config: Config;
  store: MetadataStore;
  /** Where hosted file contents live (disk, or S3). */
  blobs: BlobStore;
  keys: KeyService;
  users: UserService;
  /** Console sign-in: passwords and sessions. */
  sessions: SessionService;
  hosted: HostedConnector;
  data: DataService;
  algorithms: AlgorithmRegistry;
  environments: Environments;
  /** Each algorithm's source as a git repository (clone, fetch, push). */
  git: GitRepos;
  builds: BuildService;
  /** Algorithm source and build trees stored for the other servers of a shared deployment. */
  artifacts: AlgorithmArtifacts;
  releases: ReleaseService;
  runtime: AlgorithmRuntime;
  calls: CallService;
  /** Calls counted per day, caller and version (algorithms/usage.ts); written on close too. */
  usage: UsageRecorder;
  asyncCalls: AsyncCalls;
  /**
   * Removes this home's files of algorithms deleted since (through another server, when servers
   * share the store: a deletion removes only the files of the server that ran it). Directories
   * younger than `minAgeMs` are left for the next time. How many went.
   */
  pruneAlgorithms(minAgeMs: number): Promise<number>;
  bus: Bus | undefined;
  accounts: ConnectedAccounts;
  /**
   * Which sandbox algorithms run in (ALGOHOST_SANDBOX: bubblewrap, or gVisor), and whether it
   * works here (checked once at start by running one).
   */
  sandbox: SandboxSupport & { kind: 'bubblewrap' | 'gvisor' };
  /** What sandboxes with the network get here (the egress fence, or why not; ALGOHOST_ALGORITHM_NETWORK). */
  network: SandboxNetwork;
  /** Webhook subscriptions and their deliveries (docs/events.md); API nodes run its dispatcher. */
  webhooks: Webhooks;
  /** Triggers and their runs (docs/events.md); API nodes run its dispatcher. */
  triggers: Triggers;
  /** This process's load from requests (the HTTP layer counts them); background work paces itself by it. */
  pressure: Pressure;
  /** The call limits in force (docs/limits.md). */
  limits: Limits;
  /** What this node counts for Prometheus (docs/metrics.md); NO_METRICS unless the config serves them. */
  metrics: Metrics;
  /** This node's spans (docs/traces.md): exported over OTLP/HTTP when the config says where, ids only otherwise. */
  tracing: Tracer;
  close(): Promise<void>;
}

/** What /health asks of a cluster's NATS connection. */
export interface Bus {
  location(): string;
  ping(): Promise<void>;
}

export interface ServiceOptions {
  /** Tuning for tests and benchmarks (page size, delete batch); defaults otherwise. */
  hosted?: Partial<Omit<HostedOptions, 'maxUploadBytes'>>;
  /** Webhook retries and clock (tests shorten them). */
  webhooks?: Partial<Omit<WebhookOptions, 'network'>>;
  /** Trigger runs' clock and share (tests). */
  triggers?: TriggerOptions;
  /** Worker pool and limits for tests and benchmarks; the config's otherwise. */
  runtime?: Partial<RuntimeOptions>;
  /** Connected-account tuning for tests (page size, S3 part size). */
  connected?: Pick<ConnectedStorageOptions, 'pageSize' | 's3PartSize'>;
  /** What runs calls when not this machine's pool (an API node's NatsExecutor); closed with the services. */
  executor?: Executor;
  /** The cluster's message bus, for /health. */
  bus?: Bus;
  /** Where calls with output=void wait (an API node's JetStream queue); the process's own by default. */
  asyncQueue?: AsyncQueue;
  /** Usage recording for tests and benchmarks (flush interval, off); every second otherwise. */
  usage?: UsageOptions;
  /** Whether the egress fence can be made here; checked by making one otherwise (probeFence). */
  networkProbe?: () => FenceSupport;
  /** This process's load meter (tests give one that reads any request as saturation); a default one otherwise. */
  pressure?: Pressure;
  /** The clock of the call limits and quotas (tests move it, across a month's end too); Date.now otherwise. */
  now?: () => number;
  /** Metrics on or off whatever the config says (benchmarks compare the two). */
  metrics?: Metrics;
  /** Tracing exported or not whatever the config says (benchmarks compare the two). */
  tracing?: Tracer;
  /** Where the services warn of what they recover from on their own (the server's logger; none for the admin commands). */
  log?: ServiceLog;
}

/** The warnings the services log (pino's signature). */
export interface ServiceLog {
  warn(obj: object, msg: string): void;
}

/**
 * Opens the home: metadata store, blob store, secret. The admin CLI uses the same
 * function, so server and CLI always agree on where and how things are stored.
 */
export async function createServices(config: Config, options: ServiceOptions = {}): Promise<Services> {
  const store = await openMetadataStore(config);
  // Counted only where they can be read (a listener, or the public port with a token).
  const metrics = options.metrics ?? (config.metricsAddr || config.metricsToken ? new PromMetrics() : NO_METRICS);
  // A worker node (on a bus, without the cluster's queue) runs no async calls and serves no API.
  const worker = options.bus !== undefined && options.asyncQueue === undefined;
  let blobs: BlobStore;
  let secret: ServerSecret;
  let tracing: Tracer;
  try {
    // The OpenTelemetry SDK is loaded only when spans are exported (tracing.ts).
    tracing = options.tracing ?? (await openTracer(config.traces, { 'algohost.role': worker ? 'worker' : options.executor ? 'api' : 'all', 'service.instance.id': config.nodeName, 'host.name': os.hostname() }));
    blobs = openBlobStore(config);
    await blobs.check();
    secret = store.dialect === 'sqlite' ? ServerSecret.loadOrCreate(config.home) : ServerSecret.fromShared(await sharedMetaValue(store.db, SECRET_KEY, ServerSecret.fresh));
  } catch (err) {
    await store.close();
    throw err;
  }
  const markers = new MarkerCodec(secret.derive('list-marker'));
  const hosted: HostedConnector = new HostedConnector(
    store,
    blobs,
    markers,
    // The storage quota of an upload's principal: the lower of their user's and their key's (docs/limits.md).
    { maxUploadBytes: config.maxUploadBytes, storageQuota: (principal) => limits.storageQuota(principal), metrics, ...options.hosted },
    // `users` is made below (it purges through `hosted`); this runs only once requests come.
    (name) => users.findByName(name),
  );
  // Secrets at rest (connector credentials, webhook secrets), each sealed to its row.
  const box = new CredentialBox(config.credentialsKey ?? secret.derive('connector-credentials'));
  const accounts = new ConnectedAccounts(store, box, config.maxConnectorsPerUser);
  // The one address rule (docs/security.md): where the server may connect on a user's behalf.
  // ALGOHOST_CONNECTOR_NETWORK=any lifts it for accounts, webhooks and builds' own indexes; the fence keeps it.
  const addressRule = await AddressRule.open(config);
  const userAddresses = config.connectorNetwork === 'public' ? addressRule : undefined;
  const connected = new ConnectedStorage(accounts, markers, {
    maxUploadBytes: config.maxUploadBytes,
    timeoutMs: config.connectorTimeoutMs,
    addressRule: userAddresses,
    dropboxApiUrl: config.dropboxApiUrl,
    dropboxContentUrl: config.dropboxContentUrl,
    // Changes made through accounts raise the data events too, each written once the provider
    // has made the change (docs/events.md): there is no transaction to share with it.
    events: async (events) => {
      await store.write((trx) => appendEvents(trx, events));
    },
    ...options.connected,
  });
  // What one user may hold open at once (docs/security.md "What one user can hold"): counted in
  // the database where it is shared, as calls at once are (below), so the caps hold across API nodes.
  const heldShared =
    store.dialect === 'postgres'
      ? { store: new SharedLimitStore(store), instance: store.instance, log: (err: unknown) => options.log?.warn({ err }, 'a held slot (a stream, upload, compile or git request) could not be given back in the database; the sweep gives it back if this node stops') }
      : undefined;
  const held = (kind: HeldKind, caps: HeldCaps) => new HeldSlots(kind, caps, heldShared);
  const data = new DataService((principal, name) => connected.connector(principal, name), held(UPLOADS, { perUser: config.maxUploadsPerUser }));
  data.register('data', hosted);
  const files = new AlgorithmFiles(path.join(config.home, 'algorithms'));
  // Where servers share the file store, sources and builds are stored in it too.
  const artifacts = new AlgorithmArtifacts(store, blobs, files, blobDriver(config) !== 'local');
  const users: UserService = new UserService(
    store,
    (trx, ownerId) => hosted.purgeOwner(trx, ownerId),
    (blobIds) => hosted.releaseBlobs(blobIds),
    async (ids) => {
      for (const id of ids) {
        await files.removeAlgorithm(id);
        await artifacts.removeAlgorithm(id);
      }
    },
    held(STREAMS, { perUser: config.maxStreamsPerUser, perNode: config.maxStreams }),
  );
  // ALGOHOST_SANDBOX=gvisor: every sandbox (workers and builds) under gVisor's runsc, never
  // without it (the server refuses to start where it cannot run, in main).
  const gvisor = config.sandbox === 'gvisor' ? { runsc: config.runscPath } : undefined;
  const sandbox = gvisor ? { ...probeGvisor(gvisor.runsc), kind: 'gvisor' as const } : { ...probeSandbox(config.bwrapPath), kind: 'bubblewrap' as const };
  // Without a working bubblewrap, algorithms run unsandboxed only when the operator did not
  // require it (the server refuses to start otherwise, in main).
  const unsandboxed = !sandbox.available && !gvisor;
  // What sandboxes with the network get: the egress fence where it can be made (docs/security.md).
  const network = await SandboxNetwork.open(config, { probe: unsandboxed ? () => ({ available: false, reason: `there is no sandbox: ${sandbox.reason}` }) : options.networkProbe, addresses: addressRule });
  // Whether algorithms may have the network: this node's fence decides where it runs them; where
  // calls run on worker nodes (an API node), the operator's setting does, and each worker node
  // gives what its own fence can (an API node without nftables still takes network_access "full").
  const allowsNetwork = options.executor ? config.algorithmNetwork !== 'none' : network.allowsNetwork;
  const algorithms = new AlgorithmRegistry(store, markers, allowsNetwork);
  const builder = new Builder({
    unsandboxed,
    installTimeoutMs: config.buildTimeoutMs,
    bwrapPath: config.bwrapPath,
    gvisor,
    network: new BuildNetwork(config.build, path.join(config.home, 'build-settings'), userAddresses),
    fence: (endpoints) => network.buildFence(endpoints),
  });
  const builds = new BuildService(store, algorithms, files, artifacts, builder, { maxCompressedBytes: config.maxSourceBytes }, metrics, tracing, held(BUILDS, { perUser: config.maxBuildsPerUser }));
  const releases = new ReleaseService(store, algorithms, builds, markers);
  const runtime = new AlgorithmRuntime(artifacts, {
    ...DEFAULT_RUNTIME,
    pool: { ...DEFAULT_POOL, maxWorkers: config.maxWorkers, maxPerVersion: config.workersPerVersion, idleMs: config.workerIdleMs, maxQueue: config.queue, maxQueuePerCaller: config.queuePerCaller },
    limits: { ...DEFAULT_LIMITS, heapMb: config.workerMemoryMb },
    unsandboxed,
    bwrapPath: config.bwrapPath,
    gvisor,
    fence: () => network.algorithmFence(),
    metrics,
    spares: { perRunner: config.prestart, dir: path.join(config.home, 'run', 'spares'), cpuMax: config.prestartMaxCpu / 100 },
    log: options.log,
    tracing,
    // A worker node's runs have spans of their own (children of the API node's call spans).
    runSpans: worker,
    ...options.runtime,
  });
  // Compute per caller and month (the compute quota's), counted with the usage and written in its flushes.
  const meter = new ComputeMeter(store.db, options.now);
  const usage = new UsageRecorder(store, { meter, ...options.usage });
  // On PostgreSQL (one or more API nodes) the buckets and counts are the database's, so the
  // limits, and owners' caps on their algorithms, hold across nodes (docs/limits.md "Across API
  // nodes"); on SQLite, this process's.
  const shared =
    store.dialect === 'postgres'
      ? { store: new SharedLimitStore(store), instance: store.instance, log: (err: unknown) => options.log?.warn({ err }, 'a call limit\'s slot could not be given back in the database; the sweep gives it back if this node stops') }
      : undefined;
  const limits = new Limits(
    { callsPerMin: config.limitCallsPerMin, burst: config.limitCallsPerMin === 0 ? 0 : config.limitBurst || defaultBurst(config.limitCallsPerMin), concurrency: config.limitConcurrency },
    new CallLimiter(options.now, shared),
    { computeSecondsPerMonth: config.limitComputeSecondsPerMonth, storageBytes: config.limitStorageBytes },
    meter,
    new AlgorithmSlots(shared),
    config.limitShare,
    { callsPerMin: config.limitRequestsPerMin, burst: config.limitRequestsPerMin === 0 ? 0 : config.limitRequestBurst || defaultBurst(config.limitRequestsPerMin), concurrency: 0 },
    new CallLimiter(options.now, shared, REQUESTS),
  );
  const calls = new CallService(releases, options.executor ?? runtime, allowsNetwork, usage, limits, metrics, tracing, options.executor !== undefined);
  // A version published has a worker started ahead of its first call where the one it follows is warm (docs/limits.md, "Cold starts").
  releases.onPublished = (principal, owner, name, version, after) => {
    calls.warmPublished(principal, owner, name, version, after).catch((err: unknown) => options.log?.warn({ err, algorithm: `${owner}/${name}`, version }, 'a version just published could not be warmed; its first call starts a worker'));
  };
  const keys = new KeyService(store, config.maxKeysPerUser);
  const asyncQueue = options.asyncQueue ?? new LocalQueue(undefined, MAX_DETACHED, config.queue, config.queuePerCaller);
  const asyncCalls = new AsyncCalls(store, calls, keys, asyncQueue, {
    resultTtlMs: config.asyncResultTtlS * 1000,
    maxAttempts: config.asyncAttempts,
    tracing,
  });
  const pressure = options.pressure ?? new Pressure();
  // A worker node has no async queue to show.
  watch(metrics, { pool: runtime.pool, spares: runtime.spares, store, asyncQueue: worker ? undefined : asyncQueue, local: options.executor === undefined, bus: options.bus });
  return {
    config,
    store,
    blobs,
    keys,
    users,
    sessions: new SessionService(store, config.sessionTtlS * 1000, config.maxSessionsPerUser),
    hosted,
    data,
    algorithms,
    environments: new Environments((prefix) => files.scratch(prefix)),
    git: new GitRepos(algorithms, builds, files, { maxBodyBytes: config.maxSourceBytes, timeoutMs: config.buildTimeoutMs + 120_000, held: held(GIT, { perUser: config.maxGitRequestsPerUser }) }),
    builds,
    artifacts,
    releases,
    runtime,
    calls,
    usage,
    asyncCalls,
    async pruneAlgorithms(minAgeMs) {
      const local = await files.localIds(minAgeMs);
      if (local.length === 0) return 0;
      const alive = await algorithms.existing(local);
      let removed = 0;
      for (const id of local) {
        if (alive.has(id)) continue;
        artifacts.forget(id);
        await files.removeAlgorithm(id);
        removed++;
      }
      return removed;
    },
    bus: options.bus,
    accounts,
    sandbox,
    network,
    webhooks: new Webhooks(store, box, { addressRule: userAddresses, pressure, metrics, tracing, maxSubscriptions: config.maxSubscriptionsPerUser, maxPending: config.maxPendingDeliveries, ...options.webhooks }),
    triggers: new Triggers(store, calls, keys, data, { pressure, tracing, runsPerEvent: config.triggerRunsPerEvent, maxQueued: config.triggerMaxQueued, maxTriggers: config.maxTriggersPerUser, ...options.triggers }),
    pressure,
    limits,
    metrics,
    tracing,
    close: async () => {
      await asyncCalls.close();
      await options.executor?.close();
      await runtime.close();
      // After the calls in flight have ended (and been counted), before the store closes.
      await usage.close();
      connected.close();
      blobs.close();
      await store.close();
      // The last spans, sent once everything that makes them has stopped.
      await tracing.close();
    },
  };
}

/**
 * The gauges read from state the parts keep, when Prometheus scrapes (docs/metrics.md): this
 * node's pool where it runs algorithms, the cluster's async queue where it has one, the
 * database pool where it is PostgreSQL.
 */
function watch(metrics: Metrics, parts: { pool: WorkerPool; spares: Spares | undefined; store: MetadataStore; asyncQueue: AsyncQueue | undefined; local: boolean; bus: Bus | undefined }): void {
  if (!metrics.enabled) return;
  const { pool, store, asyncQueue, bus } = parts;
  if (bus) {
    metrics.gauge('algohost_nats_rtt_seconds', 'Round trip to the NATS server (a PING answered), measured when scraped; absent when it takes over 2 s', [], async () => {
      const began = performance.now();
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('no answer within 2 s')), 2_000)));
      try {
        await Promise.race([bus.ping(), late]);
      } finally {
        clearTimeout(timer);
      }
      return (performance.now() - began) / 1000;
    });
  }
  if (parts.local) {
    metrics.gauge('algohost_workers', "This node's workers, by state: idle (warm, waiting for a call) or busy", ['state'], () => {
      const s = pool.stats();
      return [
        { labels: { state: 'idle' }, value: s.idle },
        { labels: { state: 'busy' }, value: s.total - s.idle },
      ];
    });
    metrics.gauge('algohost_worker_free_slots', 'Calls this node could start now without waiting (idle workers of other versions count: they are stopped to make room)', [], () => pool.load().free);
    metrics.gauge('algohost_pool_queue_depth', "Calls waiting for a worker of this node's pool", [], () => pool.stats().waiting);
    const spares = parts.spares;
    if (spares !== undefined) {
      metrics.gauge('algohost_worker_spares', 'Pre-started workers ready for a cold start, by runtime (ALGOHOST_PRESTART per runtime once it has been called)', ['runtime'], () =>
        Object.entries(spares.counts()).map(([runtime, value]) => ({ labels: { runtime }, value })),
      );
    }
  }
  if (asyncQueue?.depth) {
    const depth = asyncQueue.depth.bind(asyncQueue);
    const help = asyncQueue.durable
      ? "Async calls (output=void) in the cluster's JetStream queue, by state: pending (not yet taken) or running (taken, not yet acknowledged); the whole cluster's, the same on every API node"
      : 'Async calls (output=void) of this node, by state: pending (none wait here: a full queue refuses) or running';
    metrics.gauge('algohost_async_queue_calls', help, ['state'], async () => {
      const d = await depth();
      return [
        { labels: { state: 'pending' }, value: d.pending },
        { labels: { state: 'running' }, value: d.running },
      ];
    });
  }
  const dbPool = store.poolStats?.bind(store);
  if (dbPool) {
    metrics.gauge('algohost_db_connections', "This node's PostgreSQL pool, by state: in_use or idle", ['state'], () => {
      const p = dbPool();
      return [
        { labels: { state: 'in_use' }, value: p.total - p.idle },
        { labels: { state: 'idle' }, value: p.idle },
      ];
    });
    metrics.gauge('algohost_db_waiting', "Queries waiting for a connection of this node's PostgreSQL pool", [], () => dbPool().waiting);
  }
}
