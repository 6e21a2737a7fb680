/**
 * The wire contract: every JSON record the server sends and every request body it takes,
 * with the server's field names (snake_case, as on the wire and in the original service's
 * API). This file is the one definition of them: the client reads answers with these types,
 * and the server (src/) imports them (`import type`, so nothing of the client runs there) to
 * type what its routes answer. A field changed here makes tsc fail wherever either side
 * disagrees. docs/algorithms.md, docs/auth.md, docs/connectors.md and docs/data.md describe
 * them.
 *
 * Types only: no code, no imports, nothing of Node or the browser.
 */

// ---- Algorithms ----

/** Human-facing description of an algorithm (compat.md: the original's `details`). */
export interface AlgorithmDetails {
  label: string;
  summary: string;
  tagline: string;
}

export type Language = 'python3' | 'javascript' | 'typescript';

/** How an algorithm is built and run (compat.md: the original's `settings`). */
export interface AlgorithmSettings {
  language: Language;
  source_visibility: 'open' | 'closed';
  license: string;
  network_access: 'isolated' | 'full';
  /** May call other algorithms. */
  pipeline_enabled: boolean;
  algorithm_callability: 'public' | 'private';
  royalty_microcredits: number;
  /** Informational: the original service's environment name, kept as sent. */
  algorithm_environment: string | null;
  /**
   * The owner's cap on this algorithm's calls under way, every caller's together (docs/limits.md);
   * absent: none. Read from the algorithm as it is now, whatever version is called.
   */
  max_concurrency?: number;
}

/** Body of create and update: what is not sent keeps its value (or default). */
export interface AlgorithmChanges {
  details?: Partial<AlgorithmDetails>;
  /** `language` also takes the original service's names (`python3-1`, `nodejs`...). */
  settings?: Partial<Omit<AlgorithmSettings, 'language' | 'max_concurrency'>> & { language?: Language | (string & {}); /** null: no cap. */ max_concurrency?: number | null };
}

export interface Algorithm {
  id: string;
  name: string;
  owner: string;
  details: AlgorithmDetails;
  settings: AlgorithmSettings;
  resource_type: 'algorithm';
  self_link: string;
  created_at: string;
  updated_at: string;
}

/** What a source upload stored: a content hash of the tree, its file count and size. */
export interface SourceInfo {
  hash: string;
  files: number;
  bytes: number;
}

/** The answer of `PUT /v1/algorithms/<owner>/<name>/source`. */
export interface SourceUpload {
  source: SourceInfo;
}

export interface Build {
  /** 40 hex digits: also a version selector for the owner (`owner/name/<build_id>`). */
  build_id: string;
  commit_sha: string;
  status: 'in-progress' | 'succeeded' | 'failed';
  language: Language;
  entry: string | null;
  started_at: string | null;
  finished_at: string | null;
  resource_type: 'algorithm_build';
  version_info: { git_hash: string };
}

/** The answer of `GET .../builds/<id>/logs`. */
export interface BuildLogs {
  logs: string;
}

/** A compile's answer: the algorithm, the build, and whether it built (the log either way). */
export interface CompileResult extends Algorithm {
  version_info: { git_hash: string };
  compilation: { successful: boolean; output: string };
  build: Build;
}

export type VersionType = 'major' | 'minor' | 'revision';

export interface PublishRequest {
  /** Sent along, these update the algorithm before it is published. */
  details?: Partial<AlgorithmDetails>;
  settings?: AlgorithmChanges['settings'];
  version_info?: { version_type?: VersionType; release_notes?: string; sample_input?: unknown };
}

/** A published version: the algorithm as published, with the version's facts. */
export interface AlgorithmVersion extends Algorithm {
  version_info: {
    semantic_version: string;
    git_hash: string;
    release_notes: string;
    sample_input: unknown;
  };
  published_at: string | null;
}

/** `GET .../versions/<version>/readme`: the README.md of the version's source, as written (Markdown), or null. */
export interface VersionReadme {
  /** The version's number. */
  version: string;
  readme: string | null;
}

/** A page of a list answer (compat.md): `marker` and `next_link` are null on the last. */
export interface Page<T> {
  marker: string | null;
  next_link: string | null;
  results: T[];
}

// ---- Users and API keys ----

/** What an API key may do (docs/auth.md; field names from the original service's key records). */
export interface KeyPermissions {
  /** May call algorithms at all. */
  allow_algo: boolean;
  /** Which algorithms: `algo://*`, `algo://owner/*` or `algo://owner/name/*`. */
  algo_acl: string[];
  /** May call algorithms from a browser (`/v1/web/algo`). */
  allow_web_algo: boolean;
  /** Browser calls only from this host (`example.com` or `*.example.com`); null: any. */
  referer_host: string | null;
  /** May read data (hosted and connected). */
  allow_data: boolean;
  /** May create, change and delete data. */
  allow_data_write: boolean;
  /** May manage algorithms, this user's keys and connected accounts. */
  allow_algo_management: boolean;
  /**
   * This key's own call limits, lower than its user's (docs/limits.md): calls with it are held
   * to both. Absent or null: the user's alone.
   */
  limits?: KeyLimits | null;
}

/** A key's own call limits; a field left out is the user's. */
export interface KeyLimits {
  /** Calls a minute (a token bucket). */
  calls_per_min?: number;
  /** Calls at once after a quiet spell; three seconds' worth of the rate when left out. */
  burst?: number;
  /** Calls under way at once. */
  concurrency?: number;
  /** Compute seconds calls with this key may use a calendar month (UTC); counted per key. */
  compute_seconds_per_month?: number;
  /** Uploads with this key are refused once they would take the user's stored bytes past this. */
  storage_bytes?: number;
  /** Authenticated requests of every kind a minute with this key (a token bucket of three seconds' worth). */
  requests_per_min?: number;
}

/** The call limits of a user or key and what is left of them now (GET /v1/users/:user/limits); null: no limit. */
export interface CallLimitsState {
  calls_per_min: number | null;
  burst: number | null;
  concurrency: number | null;
  /** Calls that may be made now (null: no rate limit). */
  remaining: number | null;
  /** Seconds until the bucket is full again (null: no rate limit). */
  reset_s: number | null;
  /** Calls under way. */
  in_flight: number;
}

/** Compute seconds per calendar month (UTC): the quota, what this month's calls used, and when it starts again. */
export interface ComputeQuotaState {
  /** null: no quota. */
  seconds_per_month: number | null;
  used_s: number;
  /** null: no quota. */
  remaining_s: number | null;
  /** This month's first instant (ISO 8601, UTC). */
  period_start: string;
  /** Next month's first instant, when the count starts again. */
  resets_at: string;
  /** Seconds until then. */
  reset_s: number;
}

/** Bytes of hosted files (data://): the quota and what is stored. */
export interface StorageQuotaState {
  /** null: no quota. */
  bytes: number | null;
  /** The user's hosted files, every byte (a key's share is not counted apart). */
  used_bytes: number;
  /** null: no quota. */
  remaining_bytes: number | null;
}

/** `GET /v1/users/:user/limits`: the user's limits and quotas, and the asking key's own (null when it has none). */
export interface UserLimits extends CallLimitsState {
  /** The user's share of the workers while calls wait for one: calls of theirs served a turn (1 unless the operator gives more). */
  share: number;
  compute: ComputeQuotaState;
  storage: StorageQuotaState;
  /** Every authenticated request (docs/limits.md, "Requests"). */
  requests: RequestLimitsState;
  key: (CallLimitsState & { compute: ComputeQuotaState; storage: StorageQuotaState; requests: RequestLimitsState }) | null;
}

/** The rate of every authenticated request and what is left of it now; null: no limit. */
export interface RequestLimitsState {
  requests_per_min: number | null;
  request_burst: number | null;
  /** Requests that may be made now before 429. */
  remaining: number | null;
  /** Seconds until the bucket is full again. */
  reset_s: number | null;
}

export interface KeyRecord {
  id: string;
  name: string;
  /** The key's first 8 characters, to tell keys apart. */
  prefix: string;
  created_at: string;
  permissions: KeyPermissions;
}

/** A new key: the only time its secret (`api_key`) is shown. */
export interface CreatedKey extends KeyRecord {
  api_key: string;
}

/** Body of a key's creation; without `permissions` it gets the acting key's. */
export interface NewKey {
  name: string;
  permissions?: Partial<KeyPermissions>;
}

export interface KeyChanges {
  name?: string;
  /** Merged over the current permissions; a key cannot grant what it lacks. */
  permissions?: Partial<KeyPermissions>;
}

/** `GET /v1/user`: whose key this is, and what it may do. */
export interface WhoAmI {
  username: string;
  key_id: string;
  permissions: KeyPermissions;
}

// ---- Connected accounts ----

export type ConnectorProtocol = 'objstore' | 'filehost';
export type ConnectorProvider = 's3' | 'webdav' | 'dropbox';

/** A connected account as the server shows it: `cred_data` without its secret fields. */
export interface ConnectedAccount {
  label: string;
  protocol: ConnectorProtocol;
  provider: ConnectorProvider;
  is_default: boolean;
  /** `*`, or a prefix ending in `/*`. */
  path: string;
  writeable: boolean;
  /** The credentials' non-secret fields only (endpoint, region, url, username...). */
  cred_data: Record<string, string | boolean>;
  created_at: string;
  updated_at: string;
}

/** A new account (docs/connectors.md lists `cred_data` per provider). */
export interface NewConnectedAccount {
  label: string;
  protocol: ConnectorProtocol;
  provider?: ConnectorProvider;
  is_default?: boolean;
  cred_data: Record<string, string | boolean>;
  path?: string;
  writeable?: boolean;
}

/** Changes to an account; `cred_data` is merged over what is stored. */
export interface ConnectedAccountChanges {
  is_default?: boolean;
  path?: string;
  writeable?: boolean;
  cred_data?: Record<string, string | boolean>;
}

// ---- Data (docs/data.md) ----

/** Who may read a collection (spec 2.5); the server accepts three forms only (dir.ts's ACLS). */
export interface DataAcl {
  read: string[];
}

/** One page of a directory listing (spec 2.4): empty arrays are left out. */
export interface ListingPage {
  folders?: { name: string }[];
  files?: { filename: string; last_modified: string; size: number }[];
  /** Present while more entries remain: send it back as `?marker=` for the next page. */
  marker?: string;
  /** With `?acl=true`, on a collection. */
  acl?: DataAcl;
}

/** Body of `POST` to a directory: the new directory inside it (`acl`: collections only). */
export interface NewDirectory {
  name: string;
  acl?: DataAcl;
}

/** Body of `PATCH` on a collection. */
export interface DirectoryChanges {
  acl: DataAcl;
}

/** The answer of a file's `PUT`, a directory's `POST` and `PATCH`: the entry's Data URI (`.my` resolved). */
export interface DataUriResult {
  result: string;
}

/** The answer of a `DELETE` in data: how many files it deleted. */
export interface DeleteResult {
  result: { deleted: number };
}

// ---- Calls (docs/algorithms.md: the envelope, spec 2.2) ----

/** What a result is: `void` (null), `text`, `json`, or `binary` (base64 in the envelope). */
export type ContentType = 'void' | 'text' | 'json' | 'binary';

/** Metadata of a failed call: the envelope's `metadata` (duration, and stdout when asked). */
export interface FailureMetadata {
  /** The algorithm's own compute time, in seconds. */
  duration?: number;
  /** The owner, with `stdout=true`: what the algorithm printed (at most 1 MiB). */
  stdout?: string;
  stdout_truncated?: boolean;
}

export interface CallMetadata extends FailureMetadata {
  content_type: ContentType;
  /** The algorithm's own compute time, in seconds. */
  duration: number;
}

/** Why a call failed: `error_type` says what kind of failure (AlgorithmErrorType in errors.ts). */
export interface CallError {
  message: string;
  error_type: string;
  /** Only when the caller may see the source (its owner, or open source). */
  stacktrace?: string;
  /** The same, under the name the Python client reads. */
  stack_trace?: string;
}

/** A call's answer: its result, or its error (both with HTTP 200). */
export type CallEnvelope = CallSuccess | CallFailure;

export interface CallSuccess {
  /** A string (text), base64 text (binary), null (void) or the JSON value. */
  result: unknown;
  metadata: CallMetadata;
}

export interface CallFailure {
  error: CallError;
  metadata: FailureMetadata;
}

/** The immediate answer of a call with `output=void`. */
export interface AsyncCallAccepted {
  async: true;
  request_id: string;
}

/** `GET /v1/requests/:id`: an async call's state and, once done, its answer. */
export interface AsyncRequest {
  request_id: string;
  status: 'queued' | 'running' | 'done';
  /** `owner/name[/version]` as called. */
  algorithm: string;
  /** How many times the call was started (a node lost mid-call starts it again). */
  attempts: number;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  /** The status a sync call would have answered with (200 for every envelope); null until done. */
  http_status: number | null;
  /** The body a sync call would have answered with; null until done. */
  response: CallEnvelope | ErrorEnvelope | null;
}

// ---- Errors (docs/errors.md) ----

/** Every error answer's body (HEAD answers have none: their message is in X-Error-Message). */
export interface ErrorEnvelope {
  error: {
    /** A stable code (docs/errors.md; API_ERROR_CODES in errors.ts). */
    code: string;
    message: string;
    /** The request id the server logged this under. */
    id?: string;
    /** A recursive delete that failed part-way: how many files it deleted before. */
    deleted?: number;
  };
}

// ---- The server ----

/** One backend's answer to `/health`'s check. */
export interface BackendHealth {
  /** `sqlite`, `postgres`, `local`, `s3`, `nats`... */
  driver: string;
  location: string;
  ok: boolean;
  /** How long it took to answer, in milliseconds. */
  ms?: number;
  error?: string;
}

/** `GET /health` (docs/deployment.md): 200 when every backend answers, 503 otherwise. */
export interface Health {
  status: 'ok' | 'unavailable';
  /** `kind`: which sandbox algorithms run in (ALGOHOST_SANDBOX), when they are. */
  sandbox: { enabled: boolean; kind?: 'bubblewrap' | 'gvisor'; warning?: string };
  /**
   * What algorithms that ask for the network get: `nat` (the internet behind the egress fence),
   * `none`, or `host` (the host's own network: a warning); `warning` says why, when it is not what
   * the operator asked for or is unsafe.
   */
  network?: { mode: 'none' | 'nat' | 'host'; warning?: string };
  metadata: BackendHealth;
  blobs: BackendHealth;
  /** In a cluster. */
  nats?: BackendHealth;
  /** A node of a cluster: `api` or `worker`. */
  role?: 'api' | 'worker';
  /** A worker node: calls running, and room for more. */
  running?: number;
  free?: number;
}

/** `GET /v1/users/:user/usage` (docs/usage.md): compute seconds and calls, by UTC day and algorithm version. */
export interface UsageFigures {
  calls: number;
  /** Compute seconds: the sum of the calls' durations. */
  seconds: number;
  bytes_in: number;
  bytes_out: number;
  /** Calls that failed (the algorithm threw, crashed, ran out of memory, or could not start). */
  errors: number;
  timeouts: number;
}

export interface UsageDay extends UsageFigures {
  day: string;
  /** `owner/name` */
  algorithm: string;
  version: string;
}

export interface UsageSection {
  total: UsageFigures;
  days: UsageDay[];
}

export interface UsageReport {
  user: string;
  from: string;
  to: string;
  as_caller: UsageSection;
  as_owner: UsageSection;
}

/** A console session, as `POST /v1/session` and `GET /v1/session` answer it (docs/auth.md). */
export interface SessionInfo {
  username: string;
  /** Send it back in `X-CSRF-Token` with every request the session cookie authenticates. */
  csrf_token: string;
  expires_at: string;
}

/**
 * `POST /v1/session/downloads` (`{"path": "/v1/data/..."}`, console sessions only): a link that
 * downloads that one file with this session for a minute, where a browser navigation (which
 * cannot carry `X-CSRF-Token`) saves it to disk as it arrives.
 */
export interface DownloadLink {
  /** The path with its `?download=` ticket: a GET of it needs the session's cookie too. */
  url: string;
  expires_at: string;
}

// ---- Events, webhooks and triggers (docs/events.md) ----

/**
 * An event, a CloudEvents 1.0 object in its JSON form: what the live stream's `data:` lines,
 * webhook deliveries' bodies and triggers' inputs carry.
 */
export interface CloudEvent<D = Record<string, unknown>> {
  specversion: '1.0';
  /** `evt_` and 24 hex digits; the same event seen twice has the same id. */
  id: string;
  /** The user it belongs to: `/v1/users/<name>`. */
  source: string;
  /** `data.file.created`, `algorithm.version.published`, `call.completed`, ... (docs/events.md's catalogue). */
  type: string;
  /** The canonical URI of what changed: `data://alice/inbox/a.txt`, `algo://alice/Echo/1.0.0`. */
  subject: string;
  /** ISO 8601: when the change was made. */
  time: string;
  datacontenttype: 'application/json';
  /** The user's own count of events, 20 digits (absent on a subscription's `webhook.test` event). */
  sequence?: string;
  data: D;
}

/** A list answer that is not paged: `{ results }`. */
export interface Results<T> {
  results: T[];
}

/** A webhook subscription as its owner sees it (never its secret). */
export interface Subscription {
  /** `sub_` and 24 hex digits. */
  id: string;
  url: string;
  /** Event type patterns (`data.file.*`, `data.**`); empty: every type. */
  types: string[];
  /** A path pattern of the owner's data (`data://.my/inbox/**`), or null: any. */
  path: string | null;
  enabled: boolean;
  /** Why it was turned off (an endpoint failing for days), or null. */
  disabled_reason: string | null;
  /** Since when every delivery has failed, or null. */
  failing_since: string | null;
  /** Events not queued because its queue of pending deliveries was full. */
  overflowed: number;
  created_at: string;
  updated_at: string;
}

/** A subscription made, or its secret rotated: the only time the secret (`whsec_…`) is shown. */
export interface SubscriptionWithSecret extends Subscription {
  secret: string;
}

/** Body of `POST /v1/users/:user/subscriptions`. */
export interface NewSubscription {
  url: string;
  types?: string[];
  path?: string | null;
}

/** Body of `PATCH …/subscriptions/:id`: what is not sent stays; `enabled: true` also clears `disabled_reason`. */
export interface SubscriptionChanges {
  url?: string;
  types?: string[];
  path?: string | null;
  enabled?: boolean;
}

/** One attempt to send a delivery. */
export interface DeliveryAttempt {
  attempt: number;
  at: string;
  /** The endpoint's status, or null when it did not answer. */
  status_code: number | null;
  latency_ms: number;
  error: string | null;
}

/** One event's delivery to one subscription; its id is the `webhook-id` header, the same on every attempt. */
export interface Delivery {
  /** `msg_` and 24 hex digits. */
  id: string;
  event_id: string;
  event_type: string;
  status: 'pending' | 'delivered' | 'failed';
  attempts: DeliveryAttempt[];
  next_attempt_at: string | null;
  created_at: string;
}

/** A trigger: runs an algorithm on each event its filter wants. */
export interface Trigger {
  /** `trg_` and 24 hex digits. */
  id: string;
  types: string[];
  path: string | null;
  /** `owner/name[/version]`, resolved at each run. */
  algorithm: string;
  /** The input template: a string is sent as text, an object or array as JSON (`{{subject}}`, `{{name}}`, `{{data.size}}`...). */
  input: unknown;
  /** Where the result is written (`data://.my/out/{{name}}`), or null: dropped. */
  output: string | null;
  /** The id of the owner's API key whose permissions the runs get; null for a trigger made from a console session (the user's own authority). */
  key: string | null;
  /** Seconds each run may take. */
  timeout: number;
  enabled: boolean;
  disabled_reason: string | null;
  created_at: string;
  updated_at: string;
}

/** Body of `POST /v1/users/:user/triggers`. */
export interface NewTrigger {
  types?: string[];
  path?: string | null;
  algorithm: string;
  input?: unknown;
  output?: string | null;
  /** Default: the key making the request. */
  key?: string;
  timeout?: number;
  enabled?: boolean;
}

/** Body of `PATCH …/triggers/:id`: what is not sent stays. */
export type TriggerChanges = Partial<NewTrigger>;

/** One run of a trigger, for one event. */
export interface TriggerRun {
  /** `run_` and 24 hex digits. */
  id: string;
  event_id: string;
  event_type: string;
  subject: string;
  /** 1 for an event no trigger made; one more than the run whose write made the event. */
  depth: number;
  status: 'queued' | 'running' | 'succeeded' | 'failed';
  attempts: number;
  /** Its call (`GET /v1/requests/:id`). */
  request_id: string;
  /** The rendered output path, or null. */
  output: string | null;
  http_status: number | null;
  error: string | null;
  /** Why a queued run waits: its owner's calls a minute or at once (`rate_limited: …`); null otherwise. */
  waiting: string | null;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
}
