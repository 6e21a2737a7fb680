import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import proxyAddr from '@fastify/proxy-addr';
import type { ExportSettings } from './tracing.ts';
import { MAX_WEIGHT } from './fairQueue.ts';

/**
 * The only module that reads `process.env`. Everything else receives a `Config` (or the part
 * of it it needs). SETTINGS, at the end, is the one table of them: how each is read and checked,
 * its default, and what it means for operators; docs/configuration.md's table is generated from
 * it (`npm run docs:config`).
 */
export interface Config {
  /** ALGOHOST_HOME: where metadata (SQLite), file contents and the server secret live. */
  home: string;
  /** Where `home` came from: an admin command only makes a new home when asked (src/home.ts). */
  homeFrom: 'flag' | 'env' | 'default';
  /** ALGOHOST_HOST: interface to listen on. Loopback by default: exposing is a decision. */
  host: string;
  /** ALGOHOST_PORT: TCP port; 0 picks a free one (tests). */
  port: number;
  /** ALGOHOST_LOG_LEVEL: pino level (fatal, error, warn, info, debug, trace, silent). */
  logLevel: string;
  /** ALGOHOST_MAX_UPLOAD_BYTES: largest file a single PUT may store. */
  maxUploadBytes: number;
  /** ALGOHOST_SHUTDOWN_TIMEOUT_MS: how long SIGTERM waits for in-flight requests. */
  shutdownTimeoutMs: number;
  /** ALGOHOST_PUBLIC_URL: the address users reach us at, used in printed examples. */
  publicUrl: string | undefined;
  /**
   * ALGOHOST_TRUST_PROXY: the HTTP proxies in front of the server whose X-Forwarded-* headers
   * are believed (fastify's `trustProxy`): their addresses or ranges. `false` (default): the
   * client is the TCP peer.
   */
  trustProxy: false | string[];
  /** ALGOHOST_DEMO: create the `demo` user on first start of an empty home (`--no-demo`). */
  demo: boolean;
  /**
   * ALGOHOST_SANDBOX: what algorithms and builds run in. Bubblewrap: `auto` warns without a
   * working one, `required` (or `bwrap`) refuses to start. `gvisor`: gVisor's runsc (a kernel of
   * its own between the algorithm and the host's), refusing to start where it cannot run.
   */
  sandbox: 'auto' | 'required' | 'gvisor';
  /** ALGOHOST_BWRAP: the bubblewrap binary. */
  bwrapPath: string;
  /** ALGOHOST_RUNSC: gVisor's runsc, with ALGOHOST_SANDBOX=gvisor. */
  runscPath: string;
  /** ALGOHOST_WORKERS: warm algorithm workers alive at once, all algorithms together. */
  maxWorkers: number;
  /** ALGOHOST_WORKERS_PER_VERSION: workers of one algorithm version at once (its parallel calls). */
  workersPerVersion: number;
  /** ALGOHOST_WORKER_IDLE_MS: an idle worker is stopped after this long. */
  workerIdleMs: number;
  /** ALGOHOST_PRESTART: pre-started workers kept ready per language, for cold starts (0: none). */
  prestart: number;
  /** ALGOHOST_PRESTART_MAX_CPU: spares are started only while the host's CPUs are busy less than this percent of their time (100: whatever the load). */
  prestartMaxCpu: number;
  /** ALGOHOST_QUEUE: calls waiting for a worker on a node at once, all callers together (more: 503). */
  queue: number;
  /** ALGOHOST_QUEUE_PER_CALLER: calls of one caller waiting for a worker on a node at once (more: 429 queue_full). */
  queuePerCaller: number;
  /** ALGOHOST_WORKER_MEMORY_MB: memory an algorithm may use (V8 heap for Node, address space for Python). */
  workerMemoryMb: number;
  /** ALGOHOST_MAX_SOURCE_BYTES: largest source archive (compressed) an upload may send. */
  maxSourceBytes: number;
  /** ALGOHOST_BUILD_TIMEOUT_MS: longest a dependency install (npm, pip) may take. */
  buildTimeoutMs: number;
  /**
   * ALGOHOST_ALGORITHM_NETWORK: `nat` (default) gives algorithms with `network_access: full` the
   * internet behind the egress fence (a namespace of their own, public addresses only); `none`
   * refuses that setting; `host` shares the host's network, loopback included (warned about).
   */
  algorithmNetwork: 'none' | 'nat' | 'host';
  /**
   * ALGOHOST_ALGORITHM_EGRESS_ALLOW: what the egress fence lets sandboxes reach besides the
   * internet (algorithms) or their registries (builds), even on private or loopback addresses.
   */
  egressAllow: EgressAllowEntry[];
  /**
   * ALGOHOST_CREDENTIALS_KEY: 32 bytes in base64 encrypting connected accounts' credentials;
   * derived from the home's secret file when unset.
   */
  credentialsKey: Buffer | undefined;
  /** ALGOHOST_CONNECTOR_TIMEOUT_MS: how long a connected account's provider may take to answer (or stay silent mid-transfer). */
  connectorTimeoutMs: number;
  /**
   * ALGOHOST_CONNECTOR_NETWORK: `public` (default) refuses connected accounts whose endpoint
   * resolves to a loopback, private or link-local address, so users cannot make the server
   * reach its own network; `any` allows them (a MinIO on the LAN, tests on loopback).
   */
  connectorNetwork: 'public' | 'any';
  /** ALGOHOST_DROPBOX_API_URL and ALGOHOST_DROPBOX_CONTENT_URL: Dropbox's API hosts (a stand-in's in tests). */
  dropboxApiUrl: string;
  dropboxContentUrl: string;
  /** How builds reach package registries (npm, pip): see BuildNetworkConfig. */
  build: BuildNetworkConfig;
  /**
   * ALGOHOST_DATABASE_URL (postgres://user:password@host:port/database) puts the metadata on
   * PostgreSQL, shared by every server that names it; unset, it is SQLite in the home.
   * ALGOHOST_DATABASE_POOL: connections each server keeps open to it.
   */
  database: { url: string; poolSize: number } | undefined;
  /**
   * ALGOHOST_BLOBS (s3://bucket/prefix?endpoint=...&region=...&force_path_style=true) keeps
   * hosted file contents in an S3-compatible store; unset, on the home's disk.
   */
  blobs: S3BlobsConfig | undefined;
  /**
   * ALGOHOST_NATS_URL: the message bus that joins API nodes (`serve --role api`) and worker
   * nodes (`algohost worker`); unset for the all-in-one server (docs/cluster.md).
   */
  natsUrl: string | undefined;
  /**
   * How a node proves itself to the NATS server and checks it (ALGOHOST_NATS_CREDS,
   * ALGOHOST_NATS_CA, ALGOHOST_NATS_CERT, ALGOHOST_NATS_KEY); a user and password or a token
   * come in ALGOHOST_NATS_URL itself.
   */
  natsAuth: NatsAuthConfig;
  /**
   * ALGOHOST_CLUSTER_SECRET: the key every message between the nodes of a cluster is sealed
   * with (src/cluster/seal.ts); needed by every node of one.
   */
  clusterSecret: string | undefined;
  /**
   * ALGOHOST_NODE_NAME: this node's name on the cluster bus, which a NATS user of its own may
   * be bound to (docs/cluster.md); undefined: a random one at each start.
   */
  nodeName: string | undefined;
  /** ALGOHOST_ASYNC_RESULT_TTL_S: how long the answer of a call with output=void is kept for GET /v1/requests/:id. */
  asyncResultTtlS: number;
  /** ALGOHOST_EVENT_RETENTION_H: how long events are kept for the live stream to resume from (docs/events.md). */
  eventRetentionH: number;
  /** ALGOHOST_TRIGGER_RUNS_PER_EVENT: trigger runs one event may cause across its whole chain (docs/events.md). */
  triggerRunsPerEvent: number;
  /** ALGOHOST_TRIGGER_MAX_QUEUED: runs one user's triggers may have queued at once (docs/events.md). */
  triggerMaxQueued: number;
  /** ALGOHOST_MAX_TRIGGERS_PER_USER: triggers one user may have (0: no cap). */
  maxTriggersPerUser: number;
  /** ALGOHOST_MAX_STREAMS_PER_USER: live event streams one user may hold open at once, every API node together (0: no cap). */
  maxStreamsPerUser: number;
  /** ALGOHOST_MAX_STREAMS: live event streams a node holds open at once, every user's together (0: no cap). */
  maxStreams: number;
  /** ALGOHOST_MAX_UPLOADS_PER_USER: uploads (PUT of a file) one user may have in flight at once (0: no cap). */
  maxUploadsPerUser: number;
  /** ALGOHOST_MAX_BUILDS_PER_USER: compiles one user may have running or waiting for a build slot at once (0: no cap). */
  maxBuildsPerUser: number;
  /** ALGOHOST_MAX_GIT_REQUESTS_PER_USER: git requests (clone, fetch, push) one user may have under way at once (0: no cap). */
  maxGitRequestsPerUser: number;
  /** ALGOHOST_MAX_KEYS_PER_USER: API keys (not revoked) one user may have (0: no cap). */
  maxKeysPerUser: number;
  /** ALGOHOST_MAX_CONNECTORS_PER_USER: connected accounts one user may have (0: no cap). */
  maxConnectorsPerUser: number;
  /** ALGOHOST_MAX_SUBSCRIPTIONS_PER_USER: webhook subscriptions one user may have (0: no cap). */
  maxSubscriptionsPerUser: number;
  /** ALGOHOST_MAX_PENDING_DELIVERIES: webhook deliveries one subscription may have pending; events past it are counted as overflow. */
  maxPendingDeliveries: number;
  /** ALGOHOST_MAX_SESSIONS_PER_USER: console sessions one user may have; a sign-in past it ends their oldest (0: no cap). */
  maxSessionsPerUser: number;
  /** ALGOHOST_LIMIT_CALLS_PER_MIN: calls a user may make a minute unless their own limit says otherwise (0: no limit; docs/limits.md). */
  limitCallsPerMin: number;
  /** ALGOHOST_LIMIT_REQUESTS_PER_MIN: authenticated requests of every kind a user may make a minute (0: no limit; docs/limits.md). */
  limitRequestsPerMin: number;
  /** ALGOHOST_LIMIT_REQUEST_BURST: requests at once after a quiet spell (0: three seconds' worth of the rate). */
  limitRequestBurst: number;
  /** ALGOHOST_LIMIT_BURST: calls at once after a quiet spell (the bucket's size; 0: three seconds' worth of the rate). */
  limitBurst: number;
  /** ALGOHOST_LIMIT_CONCURRENCY: a user's calls under way at once (0: no limit). */
  limitConcurrency: number;
  /** ALGOHOST_LIMIT_COMPUTE_SECONDS_PER_MONTH: compute seconds a user's calls may use a calendar month (UTC; 0: no quota). */
  limitComputeSecondsPerMonth: number;
  /** ALGOHOST_LIMIT_STORAGE_BYTES: bytes of hosted files (data://) a user may keep (0: no quota). */
  limitStorageBytes: number;
  /** ALGOHOST_LIMIT_SHARE: a user's share of the workers when calls wait for one (calls of theirs served a turn; 1 to 1000). */
  limitShare: number;
  /** ALGOHOST_SESSION_TTL_S: how long a console sign-in lasts. */
  sessionTtlS: number;
  /** ALGOHOST_ASYNC_ATTEMPTS: how many times an async call is started at most when the node running it is lost. */
  asyncAttempts: number;
  /**
   * ALGOHOST_SWEEP_INTERVAL_MS: where servers share the metadata store, how often each live one
   * removes what a dead one left in flight (pending file contents, builds it was running).
   */
  sweepIntervalMs: number;
  /**
   * ALGOHOST_METRICS_ADDR: where this node serves Prometheus metrics on a listener of its own
   * (docs/metrics.md); undefined: none.
   */
  metricsAddr: { host: string; port: number } | undefined;
  /** ALGOHOST_METRICS_TOKEN: the Bearer token that opens GET /metrics on the public port; undefined: not served there. */
  metricsToken: string | undefined;
  /**
   * OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (and OTEL_SERVICE_NAME,
   * the OTLP headers, OTEL_BSP_SCHEDULE_DELAY, OTEL_SDK_DISABLED): where spans are exported over
   * OTLP/HTTP (docs/traces.md); undefined: not exported (the trace context is carried all the same).
   */
  traces: ExportSettings | undefined;
  /**
   * ALGOHOST_TEST_OPENAPI_CHECK: a testing aid. Every answer is checked against the OpenAPI
   * document (docs/openapi.md); what does not match is logged at error level and written to
   * `<home>/openapi-violations.jsonl`, which the test helpers read when a server stops.
   */
  testOpenapiCheck: boolean;
}

/** One entry of ALGOHOST_ALGORITHM_EGRESS_ALLOW: an address, a CIDR range or a host name, on some ports or all. */
export interface EgressAllowEntry {
  /** An IP address, a CIDR range, or a DNS name (resolved when the server starts). */
  host: string;
  ports?: number[] | undefined;
}

/** Files a node gives the NATS server or checks it with; each a path, read at connection time. */
export interface NatsAuthConfig {
  /** A .creds file (a user JWT and its NKey seed), as `nsc` makes them. */
  creds: string | undefined;
  /** PEM: the CA the NATS server's certificate must chain to (TLS then required). */
  ca: string | undefined;
  /** PEM: this node's client certificate and key, for a server that verifies clients. */
  cert: string | undefined;
  key: string | undefined;
}

/** Where hosted file contents live on S3: a bucket, a key prefix and how to reach them. */
export interface S3BlobsConfig {
  bucket: string;
  /** Key prefix, '' or ending in '/'. */
  prefix: string;
  endpoint: string | undefined;
  region: string;
  forcePathStyle: boolean;
  /** From the URL's access_key_id/secret_access_key, else AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY. */
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken: string | undefined;
  /** The URL without its secret, for logs and /health. */
  display: string;
}

/**
 * What builds need to reach package registries where users are: behind a TLS-intercepting
 * proxy, a private mirror, an HTTP(S) proxy. Each defaults to the host's own configuration.
 */
export interface BuildNetworkConfig {
  /** PEM files builds trust: the host's CA bundle, then ALGOHOST_BUILD_CA_FILE (else NODE_EXTRA_CA_CERTS). */
  caFiles: string[];
  /** The file among caFiles that ALGOHOST_BUILD_CA_FILE named, if it did (for messages). */
  caFileSetting: string | undefined;
  /** ALGOHOST_BUILD_NPM_REGISTRY: the npm registry. */
  npmRegistry: string | undefined;
  /** ALGOHOST_BUILD_NPMRC (used whole), else the host's npmrc with its credentials left out. */
  npmrc: { file: string; sanitize: boolean } | undefined;
  /** ALGOHOST_BUILD_PIP_INDEX_URL: pip's index. */
  pipIndexUrl: string | undefined;
  /** ALGOHOST_BUILD_PIP_CONF (used whole), else the host's pip.conf with URL credentials left out. */
  pipConf: { file: string; sanitize: boolean } | undefined;
  /** ALGOHOST_BUILD_HTTP_PROXY / ALGOHOST_BUILD_HTTPS_PROXY / ALGOHOST_BUILD_NO_PROXY, else the host's HTTP_PROXY, HTTPS_PROXY, NO_PROXY. */
  httpProxy: string | undefined;
  httpsProxy: string | undefined;
  noProxy: string | undefined;
}

const GiB = 1024 ** 3;

export const DEFAULTS = {
  home: './.algohost',
  host: '127.0.0.1',
  port: 8080,
  logLevel: 'info',
  maxUploadBytes: 5 * GiB,
  shutdownTimeoutMs: 30_000,
  sweepIntervalMs: 60_000,
  asyncResultTtlS: 86_400,
  eventRetentionH: 24,
  triggerRunsPerEvent: 50,
  triggerMaxQueued: 1000,
  maxTriggersPerUser: 50,
  maxStreamsPerUser: 10,
  maxStreams: 1000,
  maxUploadsPerUser: 100,
  maxBuildsPerUser: 5,
  maxGitRequestsPerUser: 5,
  maxKeysPerUser: 100,
  maxConnectorsPerUser: 50,
  maxSubscriptionsPerUser: 50,
  maxPendingDeliveries: 10_000,
  maxSessionsPerUser: 20,
  limitCallsPerMin: 0,
  limitRequestsPerMin: 0,
  limitRequestBurst: 0,
  limitBurst: 0,
  limitConcurrency: 0,
  limitComputeSecondsPerMonth: 0,
  limitStorageBytes: 0,
  limitShare: 1,
  sessionTtlS: 43_200,
  asyncAttempts: 3,
  demo: true,
  sandbox: 'auto',
  bwrapPath: '/usr/bin/bwrap',
  runscPath: '/usr/bin/runsc',
  maxWorkers: 16,
  workersPerVersion: 4,
  workerIdleMs: 5 * 60_000,
  prestart: 2,
  prestartMaxCpu: 90,
  queue: 1000,
  queuePerCaller: 100,
  workerMemoryMb: 512,
  maxSourceBytes: 50 * 1024 * 1024,
  buildTimeoutMs: 10 * 60_000,
  algorithmNetwork: 'nat',
  connectorTimeoutMs: 30_000,
  connectorNetwork: 'public',
  dropboxApiUrl: 'https://api.dropboxapi.com',
  dropboxContentUrl: 'https://content.dropboxapi.com',
  databasePoolSize: 10,
} as const;

export class ConfigError extends Error {}

function int(name: string, raw: string | undefined, fallback: number, min: number, max: number): number {
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(`${name} must be a whole number, got "${raw}"`);
  const n = Number(raw);
  if (n < min || n > max) throw new ConfigError(`${name} must be between ${min} and ${max}, got ${n}`);
  return n;
}

function bool(name: string, raw: string | undefined, fallback: boolean): boolean {
  if (raw === undefined || raw === '') return fallback;
  const v = raw.toLowerCase();
  if (['1', 'true', 'yes', 'on'].includes(v)) return true;
  if (['0', 'false', 'no', 'off'].includes(v)) return false;
  throw new ConfigError(`${name} must be true or false, got "${raw}"`);
}

const LOG_LEVELS = new Set(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']);

/** Command-line flags win over the environment, which wins over the defaults. */
export interface ConfigOverrides {
  home?: string | undefined;
  host?: string | undefined;
  port?: string | undefined;
  demo?: boolean | undefined;
}

export function loadConfig(overrides: ConfigOverrides = {}, env: NodeJS.ProcessEnv = process.env): Config {
  const config: Partial<Record<keyof Config, unknown>> = {};
  for (const [key, setting] of Object.entries(SETTINGS) as [keyof Config, Setting<unknown>][]) config[key] = setting.read(env, overrides);
  return config as Config;
}

/** One row of the table of settings in docs/configuration.md. */
export interface SettingDoc {
  /** Its variables (two for a pair documented together). */
  vars: string[];
  /** The command-line flag that overrides it, if any. */
  flag?: string;
  /** The default, as the table shows it (Markdown). */
  shown: string;
  /** What it does, for operators (Markdown). */
  meaning: string;
}

/** A setting: how it is read, and the rows that document its variables (none for a derived one). */
interface Setting<T> {
  read(env: NodeJS.ProcessEnv, overrides: ConfigOverrides): T;
  docs: SettingDoc[];
}

/** A default shown as code in the table. */
const code = (value: string | number | boolean) => `\`${value}\``;

/** Where docs/configuration.md's table of settings begins and ends (scripts/docs-config.ts writes it). */
export const SETTINGS_BEGIN = '<!-- settings:begin (generated from src/config.ts by `npm run docs:config`; edit there) -->';
export const SETTINGS_END = '<!-- settings:end -->';

/** docs/configuration.md's table of settings, in Markdown, as SETTINGS documents them. */
export function settingsTable(): string {
  const rows = Object.values(SETTINGS).flatMap((s: Setting<unknown>) => s.docs);
  return [
    '| variable | flag | default | meaning |',
    '|---|---|---|---|',
    ...rows.map((r) => `| ${r.vars.map((v) => `\`${v}\``).join(', ')} |${r.flag ? ` \`${r.flag}\` ` : ' '}| ${r.shown} | ${r.meaning} |`),
  ].join('\n');
}

function logLevel(raw: string | undefined): string {
  const level = raw || DEFAULTS.logLevel;
  if (!LOG_LEVELS.has(level)) throw new ConfigError(`ALGOHOST_LOG_LEVEL must be one of ${[...LOG_LEVELS].join(', ')}, got "${level}"`);
  return level;
}

/** nats://host:port (or tls://), with optional user:password; more than one separated by commas. */
function natsUrl(raw: string): string {
  for (const one of raw.split(',')) {
    let u: URL;
    try {
      u = new URL(one.trim());
    } catch {
      throw new ConfigError(`ALGOHOST_NATS_URL must be nats://HOST:PORT (or tls://), got "${one.replace(/\/\/[^@/]*@/, '//***@').slice(0, 100)}"`);
    }
    if (u.protocol !== 'nats:' && u.protocol !== 'tls:') throw new ConfigError(`ALGOHOST_NATS_URL must be nats://HOST:PORT (or tls://), got "${u.protocol}//..."`);
  }
  return raw;
}

/** The files beside ALGOHOST_NATS_URL, each checked readable at start (a typo stops the node in one line). */
function natsAuth(env: NodeJS.ProcessEnv): NatsAuthConfig {
  const file = (name: string) => (env[name] ? readableFile(name, env[name]) : undefined);
  const auth = { creds: file('ALGOHOST_NATS_CREDS'), ca: file('ALGOHOST_NATS_CA'), cert: file('ALGOHOST_NATS_CERT'), key: file('ALGOHOST_NATS_KEY') };
  if ((auth.cert === undefined) !== (auth.key === undefined)) throw new ConfigError('ALGOHOST_NATS_CERT and ALGOHOST_NATS_KEY go together: a client certificate and its key');
  return auth;
}

/** At least 32 characters: `openssl rand -hex 32`. */
function clusterSecret(raw: string | undefined): string | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (raw.length < 32) throw new ConfigError(`ALGOHOST_CLUSTER_SECRET must have at least 32 characters (openssl rand -hex 32 gives 64), got ${raw.length}`);
  return raw;
}

/** A node's name: one token of a NATS subject, as the permissions of its NATS user name it. */
/** `HOST:PORT` (an IPv6 host in brackets), port 0 for any free one. */
function metricsAddr(raw: string | undefined): { host: string; port: number } | undefined {
  if (raw === undefined || raw === '') return undefined;
  const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([^:\s[\]]+)):(\d{1,5})$/.exec(raw);
  const port = m ? Number(m[3]) : NaN;
  if (!m || port > 65535) throw new ConfigError(`ALGOHOST_METRICS_ADDR must be HOST:PORT (e.g. 127.0.0.1:9464, [::1]:9464), got ${JSON.stringify(raw)}`);
  return { host: (m[1] ?? m[2])!, port };
}

function metricsToken(raw: string | undefined): string | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (raw.length < 32 || !/^[\x21-\x7e]+$/.test(raw)) throw new ConfigError(`ALGOHOST_METRICS_TOKEN must be at least 32 printable characters without spaces (openssl rand -hex 32 gives 64), got ${raw.length}`);
  return raw;
}

/**
 * The OpenTelemetry SDK's settings for an OTLP/HTTP traces exporter, read as its specification
 * says (https://opentelemetry.io/docs/specs/otel/protocol/exporter/): a signal's own endpoint as
 * it is, the general endpoint with `v1/traces` appended; headers as `key=value,…` (URL-encoded
 * values), the signal's own over the general ones.
 */
function traceExport(env: NodeJS.ProcessEnv): ExportSettings | undefined {
  if (bool('OTEL_SDK_DISABLED', env.OTEL_SDK_DISABLED, false)) return undefined;
  const own = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT;
  let url: string;
  if (own !== undefined && own !== '') url = otlpUrl('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', own);
  else if (base !== undefined && base !== '') {
    const b = otlpUrl('OTEL_EXPORTER_OTLP_ENDPOINT', base);
    url = `${b}${b.endsWith('/') ? '' : '/'}v1/traces`;
  } else return undefined;
  const protocol = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL || env.OTEL_EXPORTER_OTLP_PROTOCOL;
  if (protocol !== undefined && protocol !== '' && protocol !== 'http/json' && protocol !== 'http/protobuf') {
    throw new ConfigError(`OTEL_EXPORTER_OTLP_PROTOCOL: algohost exports over OTLP/HTTP (JSON) only, got "${protocol}"; point the endpoint at the collector's HTTP port (4318)`);
  }
  const headers = { ...otlpHeaders('OTEL_EXPORTER_OTLP_HEADERS', env.OTEL_EXPORTER_OTLP_HEADERS), ...otlpHeaders('OTEL_EXPORTER_OTLP_TRACES_HEADERS', env.OTEL_EXPORTER_OTLP_TRACES_HEADERS) };
  const serviceName = env.OTEL_SERVICE_NAME || 'algohost';
  const maxQueueSize = int('OTEL_BSP_MAX_QUEUE_SIZE', env.OTEL_BSP_MAX_QUEUE_SIZE, 2048, 1, 1_000_000);
  return {
    url,
    headers,
    serviceName,
    scheduleDelayMs: int('OTEL_BSP_SCHEDULE_DELAY', env.OTEL_BSP_SCHEDULE_DELAY, 5000, 1, 3_600_000),
    maxQueueSize,
    // The SDK takes no batch larger than its queue.
    maxExportBatchSize: Math.min(maxQueueSize, int('OTEL_BSP_MAX_EXPORT_BATCH_SIZE', env.OTEL_BSP_MAX_EXPORT_BATCH_SIZE, 512, 1, 1_000_000)),
    exportTimeoutMs: int('OTEL_BSP_EXPORT_TIMEOUT', env.OTEL_BSP_EXPORT_TIMEOUT, 30_000, 1, 3_600_000),
    sampler: traceSampler(env),
  };
}

const SAMPLERS = ['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'] as const;

function traceSampler(env: NodeJS.ProcessEnv): ExportSettings['sampler'] {
  const name = env.OTEL_TRACES_SAMPLER || 'parentbased_always_on';
  if (!(SAMPLERS as readonly string[]).includes(name)) throw new ConfigError(`OTEL_TRACES_SAMPLER must be one of ${SAMPLERS.join(', ')}, got "${name}"`);
  const arg = env.OTEL_TRACES_SAMPLER_ARG;
  const ratio = arg === undefined || arg === '' ? 1 : Number(arg);
  if (!Number.isFinite(ratio) || ratio < 0 || ratio > 1) throw new ConfigError(`OTEL_TRACES_SAMPLER_ARG must be a ratio from 0 to 1 (e.g. 0.1), got "${arg}"`);
  return { name: name as ExportSettings['sampler']['name'], ratio };
}

function otlpUrl(name: string, raw: string): string {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new ConfigError(`${name} must be an http:// or https:// address (e.g. http://127.0.0.1:4318), got "${raw}"`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new ConfigError(`${name} must be an http:// or https:// address (e.g. http://127.0.0.1:4318), got "${raw}"`);
  return raw;
}

function otlpHeaders(name: string, raw: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (raw === undefined || raw.trim() === '') return out;
  for (const pair of raw.split(',')) {
    const eq = pair.indexOf('=');
    const key = eq < 0 ? '' : pair.slice(0, eq).trim();
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(key)) throw new ConfigError(`${name} must be key=value pairs separated by commas (e.g. authorization=Bearer%20TOKEN), got a pair without a valid key`);
    try {
      out[key.toLowerCase()] = decodeURIComponent(pair.slice(eq + 1).trim());
    } catch {
      throw new ConfigError(`${name}: the value of ${key} is not valid URL encoding`);
    }
  }
  return out;
}

function nodeName(raw: string | undefined): string | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(raw)) throw new ConfigError(`ALGOHOST_NODE_NAME must be 1 to 64 letters, digits, '-' or '_' (it is part of NATS subjects), got ${JSON.stringify(raw)}`);
  return raw;
}

/**
 * `algohost move`'s two sides: the home as it runs on one machine (whatever the environment
 * says of shared backends), and the shared deployment named by --to/--blobs, else by
 * ALGOHOST_DATABASE_URL and ALGOHOST_BLOBS.
 */
export function loadMoveConfig(
  options: { home?: string | undefined; to?: string | undefined; blobs?: string | undefined },
  env: NodeJS.ProcessEnv = process.env,
): { source: Config; target: Config } {
  const to = options.to ?? env.ALGOHOST_DATABASE_URL;
  const blobs = options.blobs ?? env.ALGOHOST_BLOBS;
  if (!to || !blobs) throw new ConfigError('move needs --to postgres://… and --blobs s3://… (or ALGOHOST_DATABASE_URL and ALGOHOST_BLOBS)');
  const rest = { ...env };
  delete rest.ALGOHOST_DATABASE_URL;
  delete rest.ALGOHOST_BLOBS;
  const source = loadConfig({ home: options.home }, rest);
  const target = loadConfig({ home: options.home }, { ...rest, ALGOHOST_DATABASE_URL: to, ALGOHOST_BLOBS: blobs });
  // The target's servers keep their trees under their own homes; the move reads this one's.
  return { source, target: { ...target, home: source.home } };
}

function databaseUrl(raw: string): string {
  let u: URL | undefined;
  try {
    u = new URL(raw);
  } catch {
    u = undefined;
  }
  if (!u || (u.protocol !== 'postgres:' && u.protocol !== 'postgresql:') || u.pathname.length < 2) {
    throw new ConfigError('ALGOHOST_DATABASE_URL must look like postgres://user:password@host:5432/database');
  }
  return raw;
}

const S3_URL_SETTINGS = new Set(['endpoint', 'region', 'force_path_style', 'access_key_id', 'secret_access_key', 'session_token']);

function s3Blobs(raw: string, env: NodeJS.ProcessEnv): S3BlobsConfig {
  const usage = 'ALGOHOST_BLOBS must look like s3://bucket/prefix?endpoint=http://host:9000&region=us-east-1&force_path_style=true';
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new ConfigError(usage);
  }
  if (u.protocol !== 's3:' || u.hostname === '') throw new ConfigError(usage);
  for (const key of u.searchParams.keys()) {
    if (!S3_URL_SETTINGS.has(key)) throw new ConfigError(`ALGOHOST_BLOBS: unknown setting "${key}"; known: ${[...S3_URL_SETTINGS].join(', ')}`);
  }
  const q = (k: string) => u.searchParams.get(k) || undefined;
  const endpoint = q('endpoint') ?? (env.AWS_ENDPOINT_URL_S3 || env.AWS_ENDPOINT_URL || undefined);
  if (endpoint !== undefined) httpUrl('ALGOHOST_BLOBS endpoint', endpoint, '');
  const accessKeyId = q('access_key_id') ?? env.AWS_ACCESS_KEY_ID;
  const secretAccessKey = q('secret_access_key') ?? env.AWS_SECRET_ACCESS_KEY;
  if (!accessKeyId || !secretAccessKey) {
    throw new ConfigError('ALGOHOST_BLOBS needs credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or access_key_id and secret_access_key in the URL)');
  }
  const prefix = decodeURIComponent(u.pathname).replace(/^\/+|\/+$/g, '');
  const shown = new URL(raw);
  if (shown.searchParams.has('secret_access_key')) shown.searchParams.set('secret_access_key', '***');
  return {
    bucket: u.hostname,
    prefix: prefix === '' ? '' : `${prefix}/`,
    endpoint,
    region: q('region') ?? (env.AWS_REGION || env.AWS_DEFAULT_REGION || 'us-east-1'),
    forcePathStyle: bool('ALGOHOST_BLOBS force_path_style', q('force_path_style'), endpoint !== undefined),
    accessKeyId,
    secretAccessKey,
    sessionToken: q('session_token') ?? (env.AWS_SESSION_TOKEN || undefined),
    display: shown.toString(),
  };
}

/** The host's CA bundle, where the usual distributions keep it. */
const SYSTEM_CA_BUNDLES = ['/etc/ssl/certs/ca-certificates.crt', '/etc/pki/tls/certs/ca-bundle.crt', '/etc/ssl/cert.pem'];

function readableFile(name: string, file: string): string {
  const resolved = path.resolve(file);
  try {
    fs.accessSync(resolved, fs.constants.R_OK);
    if (!fs.statSync(resolved).isFile()) throw new Error('not a file');
  } catch {
    throw new ConfigError(`${name} must name a readable file, got "${file}"`);
  }
  return resolved;
}

const firstExisting = (files: (string | undefined)[]) => files.find((f): f is string => f !== undefined && f !== '' && fs.existsSync(f));

function buildNetwork(env: NodeJS.ProcessEnv): BuildNetworkConfig {
  const home = env.HOME;
  const caSetting = env.ALGOHOST_BUILD_CA_FILE ? readableFile('ALGOHOST_BUILD_CA_FILE', env.ALGOHOST_BUILD_CA_FILE) : undefined;
  if (caSetting && !fs.readFileSync(caSetting, 'utf8').includes('-----BEGIN CERTIFICATE-----')) {
    throw new ConfigError(`ALGOHOST_BUILD_CA_FILE must hold PEM certificates (-----BEGIN CERTIFICATE-----), and ${caSetting} has none`);
  }
  const extra = caSetting ?? firstExisting([env.NODE_EXTRA_CA_CERTS]);
  const system = firstExisting(SYSTEM_CA_BUNDLES);
  const npmrcSetting = env.ALGOHOST_BUILD_NPMRC ? readableFile('ALGOHOST_BUILD_NPMRC', env.ALGOHOST_BUILD_NPMRC) : undefined;
  const hostNpmrc = firstExisting([env.NPM_CONFIG_USERCONFIG, env.npm_config_userconfig, home && path.join(home, '.npmrc')]);
  const pipSetting = env.ALGOHOST_BUILD_PIP_CONF ? readableFile('ALGOHOST_BUILD_PIP_CONF', env.ALGOHOST_BUILD_PIP_CONF) : undefined;
  const xdg = env.XDG_CONFIG_HOME || (home && path.join(home, '.config'));
  const hostPip = firstExisting([env.PIP_CONFIG_FILE, xdg && path.join(xdg, 'pip', 'pip.conf'), home && path.join(home, '.pip', 'pip.conf'), '/etc/pip.conf']);
  const proxy = (name: string, ...host: (string | undefined)[]) => {
    const raw = env[name] || host.find((v) => v);
    return raw ? httpUrl(env[name] ? name : `${name} (from the host's proxy variables)`, raw, raw) : undefined;
  };
  return {
    caFiles: [...new Set([system, extra].filter((f): f is string => f !== undefined))],
    caFileSetting: caSetting,
    npmRegistry: env.ALGOHOST_BUILD_NPM_REGISTRY ? `${httpUrl('ALGOHOST_BUILD_NPM_REGISTRY', env.ALGOHOST_BUILD_NPM_REGISTRY, '')}/` : undefined,
    npmrc: npmrcSetting ? { file: npmrcSetting, sanitize: false } : hostNpmrc ? { file: path.resolve(hostNpmrc), sanitize: true } : undefined,
    pipIndexUrl: env.ALGOHOST_BUILD_PIP_INDEX_URL ? `${httpUrl('ALGOHOST_BUILD_PIP_INDEX_URL', env.ALGOHOST_BUILD_PIP_INDEX_URL, '')}/` : undefined,
    pipConf: pipSetting ? { file: pipSetting, sanitize: false } : hostPip ? { file: path.resolve(hostPip), sanitize: true } : undefined,
    httpProxy: proxy('ALGOHOST_BUILD_HTTP_PROXY', env.HTTP_PROXY, env.http_proxy),
    httpsProxy: proxy('ALGOHOST_BUILD_HTTPS_PROXY', env.HTTPS_PROXY, env.https_proxy),
    noProxy: env.ALGOHOST_BUILD_NO_PROXY ?? (env.NO_PROXY || env.no_proxy || undefined),
  };
}

function credentialsKey(raw: string | undefined): Buffer | undefined {
  if (raw === undefined || raw === '') return undefined;
  const key = Buffer.from(raw, 'base64');
  if (key.length !== 32 || key.toString('base64') !== raw.trim()) {
    throw new ConfigError('ALGOHOST_CREDENTIALS_KEY must be 32 bytes in base64 (openssl rand -base64 32)');
  }
  return key;
}

function connectorNetwork(raw: string | undefined): 'public' | 'any' {
  if (raw === undefined || raw === '' || raw === 'public') return 'public';
  if (raw === 'any') return 'any';
  throw new ConfigError(`ALGOHOST_CONNECTOR_NETWORK must be public or any, got "${raw}"`);
}

function trustProxy(raw: string | undefined): false | string[] {
  const v = raw?.trim() ?? '';
  if (v === '' || v === 'false') return false;
  const everyone = (what: string) =>
    new ConfigError(`ALGOHOST_TRUST_PROXY=${what} would believe the X-Forwarded-For of any client that reaches the server directly; give only the proxies' own addresses or ranges (10.0.0.5, 10.0.0.0/24, loopback)`);
  // fastify itself trusts no hop count (the nearest peer could be any client).
  if (v === 'true' || /^\d+$/.test(v)) throw everyone(v);
  const entries = v.split(',').map((x) => x.trim());
  for (const e of entries) {
    if (e === '') throw new ConfigError(`ALGOHOST_TRUST_PROXY has an empty entry: "${v}"; list the proxies' addresses or ranges, comma-separated`);
    let trusts: (address: string, hop: number) => boolean;
    try {
      trusts = proxyAddr.compile(e); // as fastify will read it
    } catch (err) {
      if (/\/0+$/.test(e)) throw everyone(e); // proxy-addr refuses a /0 range; say why
      throw new ConfigError(`ALGOHOST_TRUST_PROXY must list IP addresses or CIDR ranges (10.0.0.0/8), loopback, linklocal or uniquelocal, comma-separated; "${e}": ${(err as Error).message}`);
    }
    // A range that holds every IPv4 address (::ffff:0.0.0.0/96 does, and proxy-addr takes it).
    if (trusts('1.0.0.1', 0) && trusts('223.255.255.254', 0)) throw everyone(e);
  }
  return entries;
}

function httpUrl(name: string, raw: string | undefined, fallback: string): string {
  if (raw === undefined || raw === '') return fallback;
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new ConfigError(`${name} must be an http:// or https:// address, got "${raw}"`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new ConfigError(`${name} must be an http:// or https:// address, got "${raw}"`);
  return raw.replace(/\/+$/, '');
}

function networkMode(raw: string | undefined): 'none' | 'nat' | 'host' {
  if (raw === undefined || raw === '') return DEFAULTS.algorithmNetwork;
  if (raw === 'none' || raw === 'nat' || raw === 'host') return raw;
  throw new ConfigError(`ALGOHOST_ALGORITHM_NETWORK must be nat, none or host, got "${raw}"`);
}

const HOST_NAME = /^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;

/**
 * ALGOHOST_ALGORITHM_EGRESS_ALLOW: entries separated by commas, each `ADDRESS`, `CIDR`, `NAME`,
 * or any of them with `:PORT` (IPv6 in brackets when a port follows: `[fd00::5]:443`).
 */
function egressAllow(raw: string | undefined): EgressAllowEntry[] {
  if (raw === undefined || raw.trim() === '') return [];
  return raw.split(',').map((item) => {
    const entry = item.trim();
    const bad = (why: string) => new ConfigError(`ALGOHOST_ALGORITHM_EGRESS_ALLOW: "${entry}" ${why}; entries are ADDRESS, CIDR or NAME, with :PORT or without (IPv6 with a port in brackets: [fd00::5]:443)`);
    let host = entry;
    let port: string | undefined;
    const bracketed = /^\[([^\]]+)\](?::(\d+))?$/.exec(entry);
    if (bracketed) [, host = '', port] = bracketed;
    else if ((entry.match(/:/g) ?? []).length === 1) [host = '', port] = entry.split(':');
    const [address, prefix] = host.split('/');
    const family = host.includes('%') ? 0 : net.isIP(address ?? '');
    if (family === 0) {
      if (prefix !== undefined || !HOST_NAME.test(host)) throw bad('is not an address, a range or a host name');
    } else if (prefix !== undefined && (!/^\d{1,3}$/.test(prefix) || Number(prefix) > (family === 4 ? 32 : 128))) {
      throw bad('has no valid prefix length');
    }
    if (port !== undefined && (!/^\d{1,5}$/.test(port) || Number(port) < 1 || Number(port) > 65535)) throw bad('has no valid port');
    return { host, ports: port === undefined ? undefined : [Number(port)] };
  });
}

function sandboxMode(raw: string | undefined): 'auto' | 'required' | 'gvisor' {
  if (raw === undefined || raw === '' || raw === 'auto') return 'auto';
  if (raw === 'required' || raw === 'bwrap') return 'required';
  if (raw === 'gvisor') return 'gvisor';
  throw new ConfigError(`ALGOHOST_SANDBOX must be auto, required (or bwrap) or gvisor, got "${raw}"`);
}

/**
 * Every setting: how it is read (flags win over the environment, which wins over DEFAULTS) and,
 * for each variable, the row of docs/configuration.md's table that documents it. That table is
 * generated from this one (`npm run docs:config`; test/docs.test.ts fails when it is stale), so
 * the code and the operators' page cannot drift apart. Read in this order.
 */
const SETTINGS: { [K in keyof Config]: Setting<Config[K]> } = {
  home: {
    read: (env, o) => path.resolve(o.home ?? (env.ALGOHOST_HOME || DEFAULTS.home)),
    docs: [
      { vars: ["ALGOHOST_HOME"], flag: "--home DIR", shown: code(DEFAULTS.home), meaning: "Where everything the server keeps lives: `metadata.sqlite` (users, keys, data and algorithm metadata), `data/` (file contents), `algorithms/` (sources and builds), `secret` (the server secret, mode 0600), `demo-key`. Back up the whole directory. The admin commands find it as described under \"The home directory\" below." },
    ],
  },
  homeFrom: {
    read: (env, o) => (o.home !== undefined ? 'flag' : env.ALGOHOST_HOME ? 'env' : 'default'),
    docs: [],
  },
  port: {
    read: (env, o) => int(o.port !== undefined ? '--port' : 'ALGOHOST_PORT', o.port ?? env.ALGOHOST_PORT, DEFAULTS.port, 0, 65535),
    docs: [
      { vars: ["ALGOHOST_PORT"], flag: "--port N", shown: code(DEFAULTS.port), meaning: "TCP port. `0` picks a free port (the ready line says which)." },
    ],
  },
  host: {
    read: (env, o) => o.host ?? (env.ALGOHOST_HOST || DEFAULTS.host),
    docs: [
      { vars: ["ALGOHOST_HOST"], flag: "--host H", shown: code(DEFAULTS.host), meaning: "Interface to listen on. Loopback by default, so a first start exposes nothing; set `0.0.0.0` to serve other machines (behind TLS)." },
    ],
  },
  logLevel: {
    read: (env) => logLevel(env.ALGOHOST_LOG_LEVEL),
    docs: [
      { vars: ["ALGOHOST_LOG_LEVEL"], shown: code(DEFAULTS.logLevel), meaning: "`fatal`, `error`, `warn`, `info`, `debug`, `trace` or `silent`. Logs are JSON lines (pino) on stdout; at `info` there are two lines per request. No log line ever contains an API key." },
    ],
  },
  maxUploadBytes: {
    read: (env) => int('ALGOHOST_MAX_UPLOAD_BYTES', env.ALGOHOST_MAX_UPLOAD_BYTES, DEFAULTS.maxUploadBytes, 1, Number.MAX_SAFE_INTEGER),
    docs: [
      { vars: ["ALGOHOST_MAX_UPLOAD_BYTES"], shown: code(DEFAULTS.maxUploadBytes) + ' (5 GiB)', meaning: "Largest file one PUT may store. Checked against Content-Length up front and counted while streaming (chunked uploads)." },
    ],
  },
  shutdownTimeoutMs: {
    read: (env) => int('ALGOHOST_SHUTDOWN_TIMEOUT_MS', env.ALGOHOST_SHUTDOWN_TIMEOUT_MS, DEFAULTS.shutdownTimeoutMs, 0, 3_600_000),
    docs: [
      { vars: ["ALGOHOST_SHUTDOWN_TIMEOUT_MS"], shown: code(DEFAULTS.shutdownTimeoutMs), meaning: "On SIGTERM/SIGINT the server stops accepting, finishes requests in flight and exits 0; if they are still running after this long it exits 1." },
    ],
  },
  trustProxy: {
    read: (env) => trustProxy(env.ALGOHOST_TRUST_PROXY),
    docs: [
      { vars: ["ALGOHOST_TRUST_PROXY"], shown: "unset: the client is the TCP peer", meaning: "The HTTP proxies (load balancers, TLS terminators) in front of the server, whose `X-Forwarded-For`, `X-Forwarded-Proto` and `X-Forwarded-Host` are believed: their own addresses or CIDR ranges, comma-separated (`10.0.0.5, fd00::/8`; the names `loopback`, `linklocal` and `uniquelocal` stand for those ranges). The client's address is then the nearest one in `X-Forwarded-For` that is not a trusted proxy; it is what console sign-ins are counted by (docs/auth.md) and what request lines log, and the proxy's scheme and host make the links the API writes (`self_link`, `next_link`). The proxy must append the address it saw to `X-Forwarded-For` (nginx: `proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;`) and set the other two, and no client may be inside a trusted range: a client there, or behind a proxy that passes a client's own headers on, can name any address. `true`, a number of proxies and ranges of every address are refused: each would believe a client that reaches the server directly. A TCP (layer-4) balancer adds no header: leave it unset." },
    ],
  },
  publicUrl: {
    read: (env) => env.ALGOHOST_PUBLIC_URL || undefined,
    docs: [
      { vars: ["ALGOHOST_PUBLIC_URL"], shown: "the listening address", meaning: "The address users reach the server at, used in the examples printed at start." },
    ],
  },
  sandbox: {
    read: (env) => sandboxMode(env.ALGOHOST_SANDBOX),
    docs: [
      { vars: ["ALGOHOST_SANDBOX"], shown: code(DEFAULTS.sandbox), meaning: "Algorithms run in bubblewrap sandboxes. At start the server checks that bwrap works; without it, `auto` starts anyway and says loudly, at start and in `GET /health` (`\"sandbox\": {\"enabled\": false, \"warning\": ...}`), that algorithms are not sandboxed; `required` (or `bwrap`) refuses to start. `gvisor`: algorithms and builds run under gVisor's `runsc` (`apt-get install runsc`; the server must be root) instead, a kernel of its own between them and the host's, with the same mounts, user, limits and network (docs/security.md); each sandbox starts slower (docs/performance.md). The server runs one at start, and refuses to start, saying why, where it cannot: it never falls back to bubblewrap. `GET /health` says which is in use (`\"sandbox\": {\"enabled\": true, \"kind\": \"gvisor\"}`)." },
    ],
  },
  bwrapPath: {
    read: (env) => env.ALGOHOST_BWRAP || DEFAULTS.bwrapPath,
    docs: [
      { vars: ["ALGOHOST_BWRAP"], shown: code(DEFAULTS.bwrapPath), meaning: "The bubblewrap binary." },
    ],
  },
  runscPath: {
    read: (env) => env.ALGOHOST_RUNSC || DEFAULTS.runscPath,
    docs: [
      { vars: ["ALGOHOST_RUNSC"], shown: code(DEFAULTS.runscPath), meaning: "gVisor's `runsc` binary, used with `ALGOHOST_SANDBOX=gvisor` (run with `--platform=ptrace`)." },
    ],
  },
  demo: {
    read: (env, o) => o.demo ?? bool('ALGOHOST_DEMO', env.ALGOHOST_DEMO, DEFAULTS.demo),
    docs: [
      { vars: ["ALGOHOST_DEMO"], flag: "--no-demo", shown: code(DEFAULTS.demo), meaning: "On the first start of an empty home, create the user `demo`, write its key to `$ALGOHOST_HOME/demo-key` (mode 0600), and publish the demo algorithms `demo/Hello`, `demo/Stats`, `demo/Reverse` and `demo/WordCount`." },
    ],
  },
  maxWorkers: {
    read: (env) => int('ALGOHOST_WORKERS', env.ALGOHOST_WORKERS, DEFAULTS.maxWorkers, 1, 10_000),
    docs: [
      { vars: ["ALGOHOST_WORKERS"], shown: code(DEFAULTS.maxWorkers), meaning: "Warm algorithm workers alive at once, all algorithms together. Each is a sandboxed process holding its algorithm in memory; at the limit, an idle worker of another version is stopped to make room, else calls wait." },
    ],
  },
  workersPerVersion: {
    read: (env) => int('ALGOHOST_WORKERS_PER_VERSION', env.ALGOHOST_WORKERS_PER_VERSION, DEFAULTS.workersPerVersion, 1, 10_000),
    docs: [
      { vars: ["ALGOHOST_WORKERS_PER_VERSION"], shown: code(DEFAULTS.workersPerVersion), meaning: "Workers of one algorithm version at once: how many of its calls run in parallel." },
    ],
  },
  workerIdleMs: {
    read: (env) => int('ALGOHOST_WORKER_IDLE_MS', env.ALGOHOST_WORKER_IDLE_MS, DEFAULTS.workerIdleMs, 100, 86_400_000),
    docs: [
      { vars: ["ALGOHOST_WORKER_IDLE_MS"], shown: code(DEFAULTS.workerIdleMs), meaning: "An idle worker is stopped after this long (the next call starts a new one: a cold start)." },
    ],
  },
  prestart: {
    read: (env) => int('ALGOHOST_PRESTART', env.ALGOHOST_PRESTART, DEFAULTS.prestart, 0, 64),
    docs: [
      { vars: ["ALGOHOST_PRESTART"], shown: code(DEFAULTS.prestart), meaning: "Pre-started workers kept ready per language (Node, Python) once a call of that language has needed a worker: sandboxed runners without a build, each given the one build it will ever run at a cold start, which then costs the build's load rather than a sandbox's and an interpreter's start (docs/limits.md, \"Cold starts\"). Algorithms with the network and builds of more than 5,000 files start a worker of their own as before. Under bubblewrap only; `0`: none." },
    ],
  },
  prestartMaxCpu: {
    read: (env) => int('ALGOHOST_PRESTART_MAX_CPU', env.ALGOHOST_PRESTART_MAX_CPU, DEFAULTS.prestartMaxCpu, 1, 100),
    docs: [
      { vars: ["ALGOHOST_PRESTART_MAX_CPU"], shown: code(DEFAULTS.prestartMaxCpu), meaning: "Pre-started workers are started (and a taken one replaced) only while the host's CPUs, all together, are busy less than this percent of their time over the last quarter second (/proc/stat): when cold starts come faster than the CPUs can pay them, a worker started ahead only takes its start's CPU from the calls running now (docs/limits.md, \"Cold starts\"). `100`: whatever the load." },
    ],
  },
  queue: {
    read: (env) => int('ALGOHOST_QUEUE', env.ALGOHOST_QUEUE, DEFAULTS.queue, 1, 1_000_000),
    docs: [
      { vars: ["ALGOHOST_QUEUE"], shown: code(DEFAULTS.queue), meaning: "Calls waiting for a worker on a node (a server, or a worker node of a cluster) at once, all callers together; one more is answered 503 `server_busy`. Calls wait per caller and are served in turns across callers (docs/limits.md, \"Fair shares\")." },
    ],
  },
  queuePerCaller: {
    read: (env) => int('ALGOHOST_QUEUE_PER_CALLER', env.ALGOHOST_QUEUE_PER_CALLER, DEFAULTS.queuePerCaller, 1, 1_000_000),
    docs: [
      { vars: ["ALGOHOST_QUEUE_PER_CALLER"], shown: code(DEFAULTS.queuePerCaller), meaning: "Calls of one caller (a user, every key of theirs together) waiting for a worker on a node at once; one more of theirs is answered 429 `queue_full` at once, while other callers' calls still queue. Also bounds a caller's calls with `output=void` waiting to run on a server without a cluster (docs/limits.md, \"Fair shares\")." },
    ],
  },
  workerMemoryMb: {
    read: (env) => int('ALGOHOST_WORKER_MEMORY_MB', env.ALGOHOST_WORKER_MEMORY_MB, DEFAULTS.workerMemoryMb, 64, 1_048_576),
    docs: [
      { vars: ["ALGOHOST_WORKER_MEMORY_MB"], shown: code(DEFAULTS.workerMemoryMb), meaning: "Memory an algorithm may use: the V8 heap of a Node worker, the address space of a Python worker (plus 256 MiB for the interpreter)." },
    ],
  },
  maxSourceBytes: {
    read: (env) => int('ALGOHOST_MAX_SOURCE_BYTES', env.ALGOHOST_MAX_SOURCE_BYTES, DEFAULTS.maxSourceBytes, 1024, 4 * GiB),
    docs: [
      { vars: ["ALGOHOST_MAX_SOURCE_BYTES"], shown: code(DEFAULTS.maxSourceBytes) + ' (50 MiB)', meaning: "Largest source archive an upload may send (compressed). Unpacked, an archive may hold at most 256 MiB, 20,000 entries and 100 MiB per file." },
    ],
  },
  algorithmNetwork: {
    read: (env) => networkMode(env.ALGOHOST_ALGORITHM_NETWORK),
    docs: [
      { vars: ["ALGOHOST_ALGORITHM_NETWORK"], shown: code(DEFAULTS.algorithmNetwork), meaning: "What an algorithm whose settings say `network_access: \"full\"` gets. `nat`: the internet and nothing of ours, behind the egress fence (docs/security.md): a network namespace of its own with user-mode NAT (slirp4netns) and a filter (nftables) that refuses loopback, private (RFC 1918), CGNAT, link-local (cloud metadata), multicast and reserved addresses, IPv6's equivalents, the host's own addresses and the deployment's database, S3 store and NATS, whatever a name resolves to; DNS goes through the NAT's forwarder to the host's resolver. Builds then reach only their registries and proxy (`ALGOHOST_BUILD_NPM_REGISTRY`, `ALGOHOST_BUILD_PIP_INDEX_URL`, `ALGOHOST_BUILD_HTTPS_PROXY`...) and `ALGOHOST_ALGORITHM_EGRESS_ALLOW`, by the names these give (resolved when a build starts: a build has no DNS). Needs `nftables` and `slirp4netns` (and, for a server that is not root, `/dev/net/tun` it may open): where the fence cannot be made, the server says why at start and in `/health`, and behaves as `none`. `none`: that setting is refused (400 `network_not_allowed`) and versions published with it run without network; builds are fenced as with `nat` where the fence works. `host`: they share the **host's** network namespace, loopback included, so they can reach every service on the host and its network (and cloud metadata addresses), and so can builds: the server warns at every start. Worker nodes apply their own value to the jobs they run." },
    ],
  },
  egressAllow: {
    read: (env) => egressAllow(env.ALGOHOST_ALGORITHM_EGRESS_ALLOW),
    docs: [
      { vars: ["ALGOHOST_ALGORITHM_EGRESS_ALLOW"], shown: "empty", meaning: "What the egress fence lets algorithms and builds reach that it would refuse: entries separated by commas, each an address, a CIDR range or a host name (resolved at start), with `:PORT` or without (IPv6 in brackets when a port follows): `10.0.5.20:5432,192.168.7.0/24,[fd00::7]:443,models.internal:443`. `127.0.0.1:PORT` means a port of the host's own loopback. Checked first: it opens even the deployment's own addresses, so name ports, not hosts, where you can." },
    ],
  },
  credentialsKey: {
    read: (env) => credentialsKey(env.ALGOHOST_CREDENTIALS_KEY),
    docs: [
      { vars: ["ALGOHOST_CREDENTIALS_KEY"], shown: "derived from `$ALGOHOST_HOME/secret`", meaning: "32 bytes in base64 (`openssl rand -base64 32`) that encrypt connected accounts' credentials (AES-256-GCM). Unset, a key is derived from the home's secret file (with `ALGOHOST_DATABASE_URL`, from the secret in the database), so a backup of the home restores them; set it to keep that key out of the home, and **do set it on PostgreSQL**, or a copy of the database alone can decrypt the credentials it holds. Every server of a deployment needs the same value. Changing it makes stored credentials unreadable: accounts must be connected again." },
    ],
  },
  buildTimeoutMs: {
    read: (env) => int('ALGOHOST_BUILD_TIMEOUT_MS', env.ALGOHOST_BUILD_TIMEOUT_MS, DEFAULTS.buildTimeoutMs, 1000, 86_400_000),
    docs: [
      { vars: ["ALGOHOST_BUILD_TIMEOUT_MS"], shown: code(DEFAULTS.buildTimeoutMs), meaning: "Longest a dependency install (npm, pip) of a build may take." },
    ],
  },
  build: {
    read: (env) => buildNetwork(env),
    docs: [
      { vars: ["ALGOHOST_BUILD_CA_FILE"], shown: "`NODE_EXTRA_CA_CERTS`, if the host sets it", meaning: "A PEM file of CA certificates that builds trust **in addition to** the host's bundle (`/etc/ssl/certs/ca-certificates.crt` or the distribution's equivalent, always included): the CA of a TLS-intercepting proxy, or of a private registry. npm gets the combined bundle as `cafile`, pip as `cert`. A file without a certificate stops the server at start." },
      { vars: ["ALGOHOST_BUILD_NPM_REGISTRY"], shown: "the npmrc's `registry`, else `https://registry.npmjs.org/`", meaning: "The npm registry builds install from (a mirror, Verdaccio, Artifactory...)." },
      { vars: ["ALGOHOST_BUILD_NPMRC"], shown: "the host's npmrc, credentials left out", meaning: "An npmrc file builds use **whole** (registries, scopes, tokens). Its tokens are readable by the install scripts of every build: give it a read-only token. Unset, the server user's own npmrc (`NPM_CONFIG_USERCONFIG`, else `~/.npmrc`) is used without its credential lines (`_auth`, `_authToken`, `_password`, `username`, `email`, `certfile`, `keyfile`), so the operator's personal token never reaches users' builds." },
      { vars: ["ALGOHOST_BUILD_PIP_INDEX_URL"], shown: "the pip.conf's `index-url`, else `https://pypi.org/simple/`", meaning: "The Python package index builds install from. A `--index-url` (or `--no-index`) in an algorithm's own `requirements.txt` still wins." },
      { vars: ["ALGOHOST_BUILD_PIP_CONF"], shown: "the host's pip.conf, credentials left out", meaning: "A pip.conf builds use whole. Unset, the host's own (`PIP_CONFIG_FILE`, else `~/.config/pip/pip.conf`, `~/.pip/pip.conf`, `/etc/pip.conf`: the first that exists) is used with user names and passwords taken out of its URLs." },
      { vars: ["ALGOHOST_BUILD_HTTP_PROXY", "ALGOHOST_BUILD_HTTPS_PROXY"], shown: "the host's `HTTP_PROXY`, `HTTPS_PROXY` (either case)", meaning: "The proxy builds reach registries through (`http://proxy:3128`). Set for npm (`proxy`, `https-proxy`), pip and install scripts (`http_proxy`, `https_proxy`)." },
      { vars: ["ALGOHOST_BUILD_NO_PROXY"], shown: "the host's `NO_PROXY` (either case)", meaning: "Hosts reached without the proxy (`localhost,.internal`)." },
    ],
  },
  connectorTimeoutMs: {
    read: (env) => int('ALGOHOST_CONNECTOR_TIMEOUT_MS', env.ALGOHOST_CONNECTOR_TIMEOUT_MS, DEFAULTS.connectorTimeoutMs, 100, 3_600_000),
    docs: [
      { vars: ["ALGOHOST_CONNECTOR_TIMEOUT_MS"], shown: code(DEFAULTS.connectorTimeoutMs), meaning: "How long a connected account's provider (S3, WebDAV, Dropbox) may take to answer one request, or stay silent in the middle of a transfer, before the request fails with `connector_timeout` (504). A long transfer that keeps moving is never cut." },
    ],
  },
  connectorNetwork: {
    read: (env) => connectorNetwork(env.ALGOHOST_CONNECTOR_NETWORK),
    docs: [
      { vars: ["ALGOHOST_CONNECTOR_NETWORK"], shown: code(DEFAULTS.connectorNetwork), meaning: "`public` holds connected accounts, webhook URLs and the package indexes a build's source names to the address rule (docs/security.md, \"One address rule\"): no endpoint that is, or resolves to, a loopback, private (RFC 1918, unique-local), CGNAT or link-local address (cloud metadata services live there), an address of the server's own interfaces (public ones included) or of the deployment's services (database, S3, NATS, OTLP collector, metrics listener): users cannot make the server reach its own network. `any` lifts the rule: set it when accounts or webhooks point at a MinIO, Nextcloud or receiver on your LAN, and only if every user may reach that network. The endpoint is checked when an account's client is made or a subscription is given, before every delivery, and every new connection's resolved address again (DNS rebinding is refused too). The egress fence around algorithms keeps its own setting, `ALGOHOST_ALGORITHM_EGRESS_ALLOW`." },
    ],
  },
  database: {
    read: (env) =>
      env.ALGOHOST_DATABASE_URL
        ? { url: databaseUrl(env.ALGOHOST_DATABASE_URL), poolSize: int('ALGOHOST_DATABASE_POOL', env.ALGOHOST_DATABASE_POOL, DEFAULTS.databasePoolSize, 1, 1000) }
        : undefined,
    docs: [
      { vars: ["ALGOHOST_DATABASE_URL"], shown: "unset: SQLite in the home", meaning: "`postgres://user:password@host:5432/database`: keep the metadata (users, keys, data's directory tree and ACLs, algorithms, builds, versions, connected accounts) in PostgreSQL, shared by every server that names it (docs/deployment.md). The database must exist; the server creates its tables at start (migrations run once, under an advisory lock, however many servers start together; `algohost migrate` runs them alone). A database that refuses the connection, the password or the name stops the server at start with one line naming this setting. The server secret then lives in the database (`meta.server_secret`) so that all servers share it." },
      { vars: ["ALGOHOST_DATABASE_POOL"], shown: code(DEFAULTS.databasePoolSize), meaning: "Connections each server keeps to that database (plus one that listens for other servers' changes)." },
    ],
  },
  sweepIntervalMs: {
    read: (env) => int('ALGOHOST_SWEEP_INTERVAL_MS', env.ALGOHOST_SWEEP_INTERVAL_MS, DEFAULTS.sweepIntervalMs, 100, 86_400_000),
    docs: [
      { vars: ["ALGOHOST_SWEEP_INTERVAL_MS"], shown: code(DEFAULTS.sweepIntervalMs), meaning: "With `ALGOHOST_DATABASE_URL`: how often each server removes what a server of the deployment that died (and was not restarted) left in flight: file contents it was writing or releasing, and builds it was running (they fail, saying to compile again). A live server's work is never touched. A restarted server sweeps at start anyway. The same sweep removes this node's local files of algorithms deleted through another server; worker nodes sweep for that too." },
    ],
  },
  blobs: {
    read: (env) => (env.ALGOHOST_BLOBS ? s3Blobs(env.ALGOHOST_BLOBS, env) : undefined),
    docs: [
      { vars: ["ALGOHOST_BLOBS"], shown: "unset: `$ALGOHOST_HOME/data`", meaning: "`s3://bucket/prefix?endpoint=http://host:9000&region=us-east-1&force_path_style=true`: keep hosted file contents in an S3-compatible bucket (AWS S3, MinIO, Ceph, R2...) under `prefix/blobs/`. `endpoint` is left out for AWS itself; `force_path_style` defaults to true when an endpoint is given. Credentials come from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`), or from `access_key_id`/`secret_access_key` in the URL; the region from `region`, else `AWS_REGION`. The bucket must exist: a missing bucket, refused credentials or an unreachable endpoint stop the server at start with one line naming this setting. Give the bucket an `AbortIncompleteMultipartUpload` lifecycle rule (a day is plenty): it removes the invisible parts of a large upload whose server was killed mid-way." },
    ],
  },
  natsUrl: {
    read: (env) => (env.ALGOHOST_NATS_URL ? natsUrl(env.ALGOHOST_NATS_URL) : undefined),
    docs: [
      { vars: ["ALGOHOST_NATS_URL"], shown: "unset: no cluster", meaning: "`nats://host:4222` (or `tls://`, with `user:password@` or `token@` if the server wants them; several servers separated by commas, with the same credentials): the NATS server (with JetStream) that joins the nodes of a cluster (docs/cluster.md). Needed by `algohost serve --role api` and `algohost worker`, which also need `ALGOHOST_DATABASE_URL` and `ALGOHOST_BLOBS`; ignored by a plain `algohost serve`, which runs everything itself. A URL that is not nats:// or tls://, or a server that does not answer at start, stops the node with one line naming this setting; once connected, a node reconnects by itself for as long as the server is away." },
    ],
  },
  natsAuth: {
    read: (env) => natsAuth(env),
    docs: [
      { vars: ["ALGOHOST_NATS_CREDS"], shown: "unset", meaning: "A `.creds` file (a user JWT and its NKey seed, as `nsc` makes them) this node signs in to the NATS server with. Or put `user:password@` (or a `token@`) in `ALGOHOST_NATS_URL`. docs/cluster.md has the server configuration (accounts, users, permissions per role) to use them with. A server that refuses the node's credentials stops it at start with one line." },
      { vars: ["ALGOHOST_NATS_CA"], shown: "unset: the system's CAs", meaning: "A PEM file of the CA the NATS server's certificate must chain to. Set, or with a `tls://` URL, the connection must be TLS: a server that offers none is refused." },
      { vars: ["ALGOHOST_NATS_CERT", "ALGOHOST_NATS_KEY"], shown: "unset", meaning: "PEM files of this node's client certificate and its key, for a NATS server that verifies clients (`verify: true`). Set both or neither." },
    ],
  },
  clusterSecret: {
    read: (env) => clusterSecret(env.ALGOHOST_CLUSTER_SECRET),
    docs: [
      { vars: ["ALGOHOST_CLUSTER_SECRET"], shown: "unset", meaning: "At least 32 characters (`openssl rand -hex 32`), the same on every node of a cluster: every message between nodes is sealed with a key derived from it (an HMAC over subject, time and bytes), and a node drops any message not sealed with it, for its subject, within 30 seconds, once (docs/security.md). Needed by `serve --role api`, `algohost worker` and `algohost cluster status`, which stop at start without it. Keep it like a password: whoever has it (and can reach the bus) can give workers jobs. The nodes' clocks must agree to within 30 seconds (NTP)." },
    ],
  },
  nodeName: {
    read: (env) => nodeName(env.ALGOHOST_NODE_NAME),
    docs: [
      { vars: ["ALGOHOST_NODE_NAME"], shown: "unset: a random name at each start", meaning: "This node's name on the cluster bus (1 to 64 letters, digits, `-`, `_`), unique in the cluster: it names the node in `algohost cluster status` and in the subjects it takes jobs, beats and answers on. A worker node with a NATS user of its own (docs/cluster.md) must be given the name that user's permissions name: with any other, the NATS server refuses its subscriptions and it stops at start." },
    ],
  },
  eventRetentionH: {
    read: (env) => int('ALGOHOST_EVENT_RETENTION_H', env.ALGOHOST_EVENT_RETENTION_H, DEFAULTS.eventRetentionH, 1, 24 * 90),
    docs: [
      { vars: ["ALGOHOST_EVENT_RETENTION_H"], shown: code(DEFAULTS.eventRetentionH), meaning: "How long events are kept, in hours (1 to 90 days): a live stream (`GET /v1/users/:user/events`) resumes with `Last-Event-ID` after an event kept that long; an older one answers 410 `event_expired` (docs/events.md)." },
    ],
  },
  triggerRunsPerEvent: {
    read: (env) => int('ALGOHOST_TRIGGER_RUNS_PER_EVENT', env.ALGOHOST_TRIGGER_RUNS_PER_EVENT, DEFAULTS.triggerRunsPerEvent, 1, 100_000),
    docs: [
      { vars: ["ALGOHOST_TRIGGER_RUNS_PER_EVENT"], shown: code(DEFAULTS.triggerRunsPerEvent), meaning: "How many trigger runs one event may cause across its whole chain (the runs it fires, the runs their writes fire, and so on, every depth and status counted, whoever's triggers they are): past it one `trigger.failed` names the budget and nothing more of the chain is run or recorded. By default as many as a user may have triggers (docs/events.md)." },
    ],
  },
  triggerMaxQueued: {
    read: (env) => int('ALGOHOST_TRIGGER_MAX_QUEUED', env.ALGOHOST_TRIGGER_MAX_QUEUED, DEFAULTS.triggerMaxQueued, 1, 10_000_000),
    docs: [
      { vars: ["ALGOHOST_TRIGGER_MAX_QUEUED"], shown: code(DEFAULTS.triggerMaxQueued), meaning: "How many runs one user's triggers may have queued at once (waiting for a node, or for the user's own call limits). An event that would queue one more records that run as failed (`not run: … already queued`, with a `trigger.failed` that fires nothing) instead of growing the backlog (docs/events.md)." },
    ],
  },
  maxTriggersPerUser: {
    read: (env) => int('ALGOHOST_MAX_TRIGGERS_PER_USER', env.ALGOHOST_MAX_TRIGGERS_PER_USER, DEFAULTS.maxTriggersPerUser, 0, 1_000_000),
    docs: [
      { vars: ["ALGOHOST_MAX_TRIGGERS_PER_USER"], shown: code(DEFAULTS.maxTriggersPerUser), meaning: "Triggers one user may have; one more is refused 409 `too_many_triggers` (docs/security.md, \"What one user can hold\"). Each event fires at most this many runs of one user's triggers, and `ALGOHOST_TRIGGER_RUNS_PER_EVENT` bounds its whole chain. `0`: no cap." },
    ],
  },
  limitRequestsPerMin: {
    read: (env) => int('ALGOHOST_LIMIT_REQUESTS_PER_MIN', env.ALGOHOST_LIMIT_REQUESTS_PER_MIN, DEFAULTS.limitRequestsPerMin, 0, 10_000_000),
    docs: [
      { vars: ["ALGOHOST_LIMIT_REQUESTS_PER_MIN"], shown: code(DEFAULTS.limitRequestsPerMin), meaning: "Authenticated requests of every kind (data, management, events, calls) a user may make a minute, every key of theirs together, unless `algohost user limits --requests-per-min` gives them their own: a token bucket refilled at this rate, across API nodes. Past it a request is answered 429 `rate_limited` (policy `requests`) with `Retry-After` and `RateLimit` headers, before its body is read: a refused upload stores nothing. Requests an algorithm makes through the SDK during a call are not counted (the call is). 0: no limit (docs/limits.md, \"Requests\")." },
    ],
  },
  limitRequestBurst: {
    read: (env) => int('ALGOHOST_LIMIT_REQUEST_BURST', env.ALGOHOST_LIMIT_REQUEST_BURST, DEFAULTS.limitRequestBurst, 0, 10_000_000),
    docs: [
      { vars: ["ALGOHOST_LIMIT_REQUEST_BURST"], shown: code(DEFAULTS.limitRequestBurst), meaning: "How many requests may come at once after a quiet spell: the size of the requests-per-minute bucket. 0: three seconds' worth of the rate (at least 1)." },
    ],
  },
  maxStreamsPerUser: {
    read: (env) => int('ALGOHOST_MAX_STREAMS_PER_USER', env.ALGOHOST_MAX_STREAMS_PER_USER, DEFAULTS.maxStreamsPerUser, 0, 1_000_000),
    docs: [
      { vars: ["ALGOHOST_MAX_STREAMS_PER_USER"], shown: code(DEFAULTS.maxStreamsPerUser), meaning: "Live event streams (`GET /v1/users/:user/events`) one user may hold open at once, every key and session of theirs together; one more is refused 429 `too_many_streams` before it starts. On PostgreSQL counted on every API node together (docs/security.md, \"What one user can hold\"). `0`: no cap." },
    ],
  },
  maxStreams: {
    read: (env) => int('ALGOHOST_MAX_STREAMS', env.ALGOHOST_MAX_STREAMS, DEFAULTS.maxStreams, 0, 1_000_000),
    docs: [
      { vars: ["ALGOHOST_MAX_STREAMS"], shown: code(DEFAULTS.maxStreams), meaning: "Live event streams one API node holds open at once, every user's together; one more is refused 503 `server_busy` (a balancer may send it to another node). Each holds a socket and a listener of the node's feed: 1,000 is a third of what slowed one node for everyone in a test (docs/security.md, \"What one user can hold\"). `0`: no cap." },
    ],
  },
  maxUploadsPerUser: {
    read: (env) => int('ALGOHOST_MAX_UPLOADS_PER_USER', env.ALGOHOST_MAX_UPLOADS_PER_USER, DEFAULTS.maxUploadsPerUser, 0, 1_000_000),
    docs: [
      { vars: ["ALGOHOST_MAX_UPLOADS_PER_USER"], shown: code(DEFAULTS.maxUploadsPerUser), meaning: "Uploads (a file's `PUT`, to hosted data or a connected account) one user may have in flight at once, every key, session and algorithm of theirs together; one more is refused 429 `too_many_uploads` before a byte is read. On PostgreSQL counted on every API node together (docs/security.md, \"What one user can hold\"). `0`: no cap." },
    ],
  },
  maxBuildsPerUser: {
    read: (env) => int('ALGOHOST_MAX_BUILDS_PER_USER', env.ALGOHOST_MAX_BUILDS_PER_USER, DEFAULTS.maxBuildsPerUser, 0, 1_000_000),
    docs: [
      { vars: ["ALGOHOST_MAX_BUILDS_PER_USER"], shown: code(DEFAULTS.maxBuildsPerUser), meaning: "Compiles (`POST …/compile`, and a git push's build) one user may have running or waiting for a build slot at once; one more is refused 429 `too_many_builds` before it waits. A user's builds run one at a time anyway: the rest only hold their requests. On PostgreSQL counted on every API node together. `0`: no cap." },
    ],
  },
  maxGitRequestsPerUser: {
    read: (env) => int('ALGOHOST_MAX_GIT_REQUESTS_PER_USER', env.ALGOHOST_MAX_GIT_REQUESTS_PER_USER, DEFAULTS.maxGitRequestsPerUser, 0, 1_000_000),
    docs: [
      { vars: ["ALGOHOST_MAX_GIT_REQUESTS_PER_USER"], shown: code(DEFAULTS.maxGitRequestsPerUser), meaning: "Git requests (clone, fetch, push; each runs a git process, a push its build too) one user may have under way at once, by the user whose key git authenticated with; one more is refused 429 `too_many_git_requests`. On PostgreSQL counted on every API node together. `0`: no cap." },
    ],
  },
  maxKeysPerUser: {
    read: (env) => int('ALGOHOST_MAX_KEYS_PER_USER', env.ALGOHOST_MAX_KEYS_PER_USER, DEFAULTS.maxKeysPerUser, 0, 1_000_000),
    docs: [
      { vars: ["ALGOHOST_MAX_KEYS_PER_USER"], shown: code(DEFAULTS.maxKeysPerUser), meaning: "API keys one user may have, revoked ones not counted; one more is refused 409 `too_many_keys` (docs/security.md, \"What one user can hold\"). `0`: no cap." },
    ],
  },
  maxConnectorsPerUser: {
    read: (env) => int('ALGOHOST_MAX_CONNECTORS_PER_USER', env.ALGOHOST_MAX_CONNECTORS_PER_USER, DEFAULTS.maxConnectorsPerUser, 0, 1_000_000),
    docs: [
      { vars: ["ALGOHOST_MAX_CONNECTORS_PER_USER"], shown: code(DEFAULTS.maxConnectorsPerUser), meaning: "Connected accounts (`objstore://`, `filehost://`) one user may have; one more is refused 409 `too_many_connectors`. `0`: no cap." },
    ],
  },
  maxSubscriptionsPerUser: {
    read: (env) => int('ALGOHOST_MAX_SUBSCRIPTIONS_PER_USER', env.ALGOHOST_MAX_SUBSCRIPTIONS_PER_USER, DEFAULTS.maxSubscriptionsPerUser, 0, 1_000_000),
    docs: [
      { vars: ["ALGOHOST_MAX_SUBSCRIPTIONS_PER_USER"], shown: code(DEFAULTS.maxSubscriptionsPerUser), meaning: "Webhook subscriptions one user may have; one more is refused 409 `too_many_subscriptions`. Each holds at most 10,000 deliveries pending (docs/events.md). `0`: no cap." },
    ],
  },
  maxPendingDeliveries: {
    read: (env) => int('ALGOHOST_MAX_PENDING_DELIVERIES', env.ALGOHOST_MAX_PENDING_DELIVERIES, DEFAULTS.maxPendingDeliveries, 1, 10_000_000),
    docs: [
      { vars: ["ALGOHOST_MAX_PENDING_DELIVERIES"], shown: code(DEFAULTS.maxPendingDeliveries), meaning: "Webhook deliveries one subscription may have pending (waiting to be sent or retried); an event past it is not queued for that subscription but counted on it (`overflowed`), never dropped unsaid. A user holds at most this times `ALGOHOST_MAX_SUBSCRIPTIONS_PER_USER` (docs/security.md, \"What one user can hold\")." },
    ],
  },
  maxSessionsPerUser: {
    read: (env) => int('ALGOHOST_MAX_SESSIONS_PER_USER', env.ALGOHOST_MAX_SESSIONS_PER_USER, DEFAULTS.maxSessionsPerUser, 0, 1_000_000),
    docs: [
      { vars: ["ALGOHOST_MAX_SESSIONS_PER_USER"], shown: code(DEFAULTS.maxSessionsPerUser), meaning: "Console sessions one user may have at once; a sign-in past it ends their oldest session rather than be refused. `0`: no cap (each still ends after `ALGOHOST_SESSION_TTL_S`)." },
    ],
  },
  limitCallsPerMin: {
    read: (env) => int('ALGOHOST_LIMIT_CALLS_PER_MIN', env.ALGOHOST_LIMIT_CALLS_PER_MIN, DEFAULTS.limitCallsPerMin, 0, 10_000_000),
    docs: [
      { vars: ["ALGOHOST_LIMIT_CALLS_PER_MIN"], shown: code(DEFAULTS.limitCallsPerMin), meaning: "Calls a user may make a minute (every key of theirs together), unless `algohost user limits` gives them their own: a token bucket refilled at this rate. Past it a call is answered 429 `rate_limited` with `Retry-After` and `RateLimit` headers. 0: no limit (docs/limits.md)." },
    ],
  },
  limitBurst: {
    read: (env) => int('ALGOHOST_LIMIT_BURST', env.ALGOHOST_LIMIT_BURST, DEFAULTS.limitBurst, 0, 10_000_000),
    docs: [
      { vars: ["ALGOHOST_LIMIT_BURST"], shown: code(DEFAULTS.limitBurst), meaning: "How many calls may come at once after a quiet spell: the size of the calls-per-minute bucket. 0: three seconds' worth of the rate (at least 1)." },
    ],
  },
  limitConcurrency: {
    read: (env) => int('ALGOHOST_LIMIT_CONCURRENCY', env.ALGOHOST_LIMIT_CONCURRENCY, DEFAULTS.limitConcurrency, 0, 1_000_000),
    docs: [
      { vars: ["ALGOHOST_LIMIT_CONCURRENCY"], shown: code(DEFAULTS.limitConcurrency), meaning: "How many calls a user may have under way at once, unless `algohost user limits` gives them their own; one more is answered 429 `concurrency_limited`. Calls with `output=void` queue instead and are not counted. 0: no limit (docs/limits.md)." },
    ],
  },
  limitComputeSecondsPerMonth: {
    read: (env) => int('ALGOHOST_LIMIT_COMPUTE_SECONDS_PER_MONTH', env.ALGOHOST_LIMIT_COMPUTE_SECONDS_PER_MONTH, DEFAULTS.limitComputeSecondsPerMonth, 0, Number.MAX_SAFE_INTEGER),
    docs: [
      { vars: ["ALGOHOST_LIMIT_COMPUTE_SECONDS_PER_MONTH"], shown: code(DEFAULTS.limitComputeSecondsPerMonth), meaning: "Compute seconds (the usage records' unit: the algorithms' own time, nested calls included) a user's calls may use in a calendar month (UTC), unless `algohost user limits` gives them their own. Once used up, a call is answered 429 `compute_quota_exceeded` with `Retry-After` until the first of next month; calls already under way run to their end. 0: no quota (docs/limits.md)." },
    ],
  },
  limitShare: {
    read: (env) => int('ALGOHOST_LIMIT_SHARE', env.ALGOHOST_LIMIT_SHARE, DEFAULTS.limitShare, 1, MAX_WEIGHT),
    docs: [
      { vars: ["ALGOHOST_LIMIT_SHARE"], shown: code(DEFAULTS.limitShare), meaning: "A user's share of the workers while calls wait for one, unless `algohost user limits` gives them their own (`--share`): the calls of theirs served in each turn of the round robin across callers. A user of share 4 gets four calls started for every one of a user of share 1 while both have calls waiting; nobody is ever passed over. 1 to 1000 (docs/limits.md, \"Shares\")." },
    ],
  },
  limitStorageBytes: {
    read: (env) => int('ALGOHOST_LIMIT_STORAGE_BYTES', env.ALGOHOST_LIMIT_STORAGE_BYTES, DEFAULTS.limitStorageBytes, 0, Number.MAX_SAFE_INTEGER),
    docs: [
      { vars: ["ALGOHOST_LIMIT_STORAGE_BYTES"], shown: code(DEFAULTS.limitStorageBytes), meaning: "Bytes of hosted files (`data://`) a user may keep, unless `algohost user limits` gives them their own. An upload that would take them past it is refused 413 `storage_quota_exceeded` before its body is stored (connected storage is the provider's business). 0: no quota (docs/limits.md)." },
    ],
  },
  asyncResultTtlS: {
    read: (env) => int('ALGOHOST_ASYNC_RESULT_TTL_S', env.ALGOHOST_ASYNC_RESULT_TTL_S, DEFAULTS.asyncResultTtlS, 1, 365 * 86_400),
    docs: [
      { vars: ["ALGOHOST_ASYNC_RESULT_TTL_S"], shown: code(DEFAULTS.asyncResultTtlS), meaning: "How long the answer of an async call (`output=void`) is kept for `GET /v1/requests/:id` after the call ends, in seconds (1 to 365 days)." },
    ],
  },
  sessionTtlS: {
    read: (env) => int('ALGOHOST_SESSION_TTL_S', env.ALGOHOST_SESSION_TTL_S, DEFAULTS.sessionTtlS, 60, 30 * 86_400),
    docs: [
      { vars: ["ALGOHOST_SESSION_TTL_S"], shown: code(DEFAULTS.sessionTtlS), meaning: "How long a web console sign-in lasts, in seconds (1 minute to 30 days; 12 hours by default). After it the console asks for the password again. Signing out, or changing the password, ends sessions at once on every node." },
    ],
  },
  asyncAttempts: {
    read: (env) => int('ALGOHOST_ASYNC_ATTEMPTS', env.ALGOHOST_ASYNC_ATTEMPTS, DEFAULTS.asyncAttempts, 1, 100),
    docs: [
      { vars: ["ALGOHOST_ASYNC_ATTEMPTS"], shown: code(DEFAULTS.asyncAttempts), meaning: "How many times an async call is started at most when the node running it is lost (a cluster's worker node, or a server killed mid-call); after that its answer is a `WorkerLostError` envelope." },
    ],
  },
  metricsAddr: {
    read: (env) => metricsAddr(env.ALGOHOST_METRICS_ADDR),
    docs: [
      { vars: ["ALGOHOST_METRICS_ADDR"], shown: "unset: no listener", meaning: "`HOST:PORT` where this node (all-in-one, API or worker) serves Prometheus metrics at `GET /metrics`, on a listener of its own without authentication: keep it on loopback or a network only the monitoring reaches (e.g. `127.0.0.1:9464`). Port `0` picks a free one (the ready line says which). docs/metrics.md lists the metrics." },
    ],
  },
  metricsToken: {
    read: (env) => metricsToken(env.ALGOHOST_METRICS_TOKEN),
    docs: [
      { vars: ["ALGOHOST_METRICS_TOKEN"], shown: "unset: no /metrics on the public port", meaning: "At least 32 characters (`openssl rand -hex 32`): `GET /metrics` on the public port then answers to `Authorization: Bearer TOKEN` (Prometheus's `authorization` / `bearer_token_file`), and 401 without it (`auth_required`; `invalid_authorization` for another token or an API key). Unset, the public port has no `/metrics` (404). Either or both of the two settings may be given (a worker node, with no public port, needs `ALGOHOST_METRICS_ADDR`); with neither, the node counts nothing." },
    ],
  },
  traces: {
    read: (env) => traceExport(env),
    docs: [
      { vars: ["OTEL_EXPORTER_OTLP_ENDPOINT"], shown: "unset: no spans exported", meaning: "The OpenTelemetry collector's OTLP/HTTP base address, e.g. `http://127.0.0.1:4318` (Jaeger, Grafana Tempo, an OpenTelemetry Collector): spans of requests, calls, runs on workers, builds, async calls and webhook deliveries are exported to `<it>/v1/traces` as OTLP JSON (docs/traces.md). Unset, nothing of OpenTelemetry is loaded; requests still carry a W3C `traceparent` on every hop and log lines their `trace_id`. Set it on every node (API and worker) whose spans you want." },
      { vars: ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"], shown: "unset", meaning: "The traces URL itself (used as it is, no `/v1/traces` appended), over `OTEL_EXPORTER_OTLP_ENDPOINT`. Either turns exporting on." },
      { vars: ["OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"], shown: "unset", meaning: "Headers sent with every export, `key=value,key2=value2` with URL-encoded values (e.g. `authorization=Bearer%20TOKEN`); the second's over the first's." },
      { vars: ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"], shown: "`http/json`", meaning: "algohost exports OTLP/HTTP with JSON bodies: `http/json` or `http/protobuf` (both go to the collector's HTTP port, which takes either) are accepted, `grpc` stops the start with a clear message." },
      { vars: ["OTEL_SERVICE_NAME"], shown: "`algohost`", meaning: "The `service.name` of this node's spans. Every node also says `algohost.role` (all, api, worker) and `service.instance.id` (its node name in a cluster)." },
      { vars: ["OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"], shown: "`parentbased_always_on`, `1`", meaning: "Which traces are recorded and exported: `parentbased_always_on` (every trace, but a caller's traceparent whose sampled flag is off is followed), `parentbased_traceidratio` with a ratio in the second (e.g. `0.1`: one trace in ten, decided by the trace id, so every node keeps or drops the same traces), `traceidratio`, `always_on`, `always_off`, `parentbased_always_off`. Exporting every span of a busy node costs CPU (docs/traces.md, docs/performance.md): sample above a few thousand calls a second. Unsampled requests still carry their traceparent and log their trace_id." },
      { vars: ["OTEL_BSP_SCHEDULE_DELAY"], shown: code(5000), meaning: "Milliseconds between exports of the finished spans (batched); the rest is sent when the node stops." },
      { vars: ["OTEL_BSP_MAX_QUEUE_SIZE"], shown: code(2048), meaning: "Finished spans waiting to be sent, at most: past it, spans are dropped rather than requests slowed." },
      { vars: ["OTEL_BSP_MAX_EXPORT_BATCH_SIZE"], shown: code(512), meaning: "Spans per export request, at most (and a batch is sent as soon as this many wait)." },
      { vars: ["OTEL_BSP_EXPORT_TIMEOUT"], shown: code(30000), meaning: "Milliseconds an export request may take before its spans are given up." },
      { vars: ["OTEL_SDK_DISABLED"], shown: "`false`", meaning: "`true`: export nothing, whatever the endpoints say." },
    ],
  },
  dropboxApiUrl: {
    read: (env) => httpUrl('ALGOHOST_DROPBOX_API_URL', env.ALGOHOST_DROPBOX_API_URL, DEFAULTS.dropboxApiUrl),
    docs: [
      { vars: ["ALGOHOST_DROPBOX_API_URL"], shown: code(DEFAULTS.dropboxApiUrl), meaning: "Where Dropbox's RPC endpoints are. Only changed to point at a stand-in (tests)." },
    ],
  },
  dropboxContentUrl: {
    read: (env) => httpUrl('ALGOHOST_DROPBOX_CONTENT_URL', env.ALGOHOST_DROPBOX_CONTENT_URL, DEFAULTS.dropboxContentUrl),
    docs: [
      { vars: ["ALGOHOST_DROPBOX_CONTENT_URL"], shown: code(DEFAULTS.dropboxContentUrl), meaning: "Where Dropbox's content (upload, download) endpoints are. Only changed to point at a stand-in (tests)." },
    ],
  },
  testOpenapiCheck: {
    read: (env) => bool('ALGOHOST_TEST_OPENAPI_CHECK', env.ALGOHOST_TEST_OPENAPI_CHECK, false),
    docs: [
      { vars: ["ALGOHOST_TEST_OPENAPI_CHECK"], shown: "`false`", meaning: "A testing aid, not for production: every answer the server gives is checked against its OpenAPI document (route, method, status, and a JSON body against its schema); an answer that does not match is logged at error level and appended to `HOME/openapi-violations.jsonl`. The test helpers turn it on for every server they start and fail a test whose server answered off the document (docs/openapi.md)." },
    ],
  },
};
