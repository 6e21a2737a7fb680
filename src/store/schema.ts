import type { ColumnType, Generated } from 'kysely';

/**
 * Table types for Kysely. Times are integer milliseconds since the epoch (portable between
 * SQLite and PostgreSQL, and cheap to compare); JSON is stored as text.
 */
/** A user's own call limits (docs/limits.md): null is the operator's default, 0 no limit. */
export interface UserLimitsTable {
  user_id: number;
  calls_per_min: number | null;
  burst: number | null;
  concurrency: number | null;
  compute_seconds_per_month: number | null;
  storage_bytes: number | null;
  share: number | null;
  requests_per_min: number | null;
  request_burst: number | null;
  updated_at: number;
}

/**
 * The token bucket of one limit scope (`u<user>`, `k<key>`) shared by the API nodes of a
 * deployment on PostgreSQL (src/limits/shared.ts): nodes take tokens from it a few at a time.
 */
export interface LimitBucketsTable {
  scope: string;
  tokens: number;
  /** When it was last refilled (ms; the taking node's clock). */
  at: number;
  /** What the last take was given. */
  granted: number;
}

/** The calls under way of one limit scope, every node's together (src/limits/shared.ts). */
export interface LimitSlotsTable {
  scope: string;
  in_flight: number;
}

/** The calls under way a node holds of a scope: given back when it is found dead. */
export interface LimitHoldsTable {
  scope: string;
  /** The node's store instance (MetadataStore.instance). */
  instance: string;
  n: number;
}

/** Compute milliseconds per caller and UTC month (`YYYY-MM`): the user's (key_id '') and each API key's (docs/limits.md). */
export interface ComputeMonthsTable {
  user_id: number;
  month: string;
  key_id: string;
  ms: number;
}

/** The bytes of a user's hosted files, changed with their rows (docs/limits.md). */
export interface UserStorageTable {
  user_id: number;
  bytes: number;
}

export interface UsersTable {
  id: Generated<number>;
  username: string;
  /** Lower-cased username: names are unique without regard to case. */
  username_lc: string;
  created_at: number;
  /** `scrypt$...` (auth/passwords.ts); null: the user has no password and cannot sign in to the console. */
  password_hash: string | null;
}

export interface ApiKeysTable {
  /** Public identifier of a key (safe to show and log), not the secret. */
  id: string;
  user_id: number;
  name: string;
  /** SHA-256 of the secret key, hex. The key itself is never stored. */
  key_hash: string;
  /** First characters of the key, so a person can tell keys apart. */
  prefix: string;
  /** KeyPermissions as JSON. */
  permissions: string;
  created_at: number;
  revoked_at: number | null;
}

export type NodeKind = 'dir' | 'file';

export interface NodesTable {
  id: Generated<number>;
  owner_id: number;
  /** Parent path inside the owner's space without leading or trailing slash; '' for collections. */
  dir: string;
  name: string;
  kind: NodeKind;
  /** Read ACL (JSON array of strings); only on collections, inherited by everything inside. */
  acl: string | null;
  blob_id: string | null;
  size: number;
  created_at: number;
  modified_at: number;
}

export interface PendingBlobsTable {
  /** A blob that may exist on disk while no node refers to it yet (or any more). */
  blob_id: string;
  created_at: number;
  /** The process writing or releasing it (MetadataStore.instance); null in rows of older homes. */
  holder: string | null;
}

export interface MetaTable {
  key: string;
  value: string;
}

export interface AlgorithmsTable {
  id: Generated<number>;
  owner_id: number;
  name: string;
  /** Lower-cased name: unique per owner without regard to case. */
  name_lc: string;
  /** AlgorithmDetails as JSON. */
  details: string;
  /** AlgorithmSettings as JSON. */
  settings: string;
  created_at: number;
  updated_at: number;
  /** Content hash of the uploaded source; null until a source is uploaded (the template). */
  source_hash: string | null;
  /** The build the last compile produced, when it succeeded: what a publish publishes. */
  build_hash: string | null;
  /** JSON `{sample_input?, release_notes?}` from create/update: defaults for the next publish. */
  version_info: string | null;
}

export type BuildStatus = 'building' | 'succeeded' | 'failed';

export interface BuildsTable {
  id: Generated<number>;
  algorithm_id: number;
  /** 40 hex: the hash of the build's content (source and language); `version_info.git_hash`. */
  hash: string;
  status: BuildStatus;
  language: string;
  /** 'node' | 'python': which runner loads the entry. */
  runner: string | null;
  /** Entry file relative to the build directory. */
  entry: string | null;
  logs: string;
  started_at: number;
  finished_at: number | null;
  /** The process running the build (MetadataStore.instance), while it runs. */
  holder: string | null;
  /** README.md of the source built (256 KiB at most); null when it had none. Set when the build ends. */
  readme?: string | null;
}

export interface VersionsTable {
  id: Generated<number>;
  algorithm_id: number;
  build_id: number;
  major: number;
  minor: number;
  patch: number;
  callability: 'public' | 'private';
  release_notes: string;
  /** JSON text or null. */
  sample_input: string | null;
  /** The algorithm's settings when it was published (a version keeps how it runs). */
  settings: string;
  created_at: number;
}

export interface ConnectorsTable {
  id: Generated<number>;
  user_id: number;
  /** As the user wrote it; `label_lc` is unique per user. */
  label: string;
  label_lc: string;
  protocol: 'objstore' | 'filehost';
  provider: string;
  /** 0 or 1: at most one default account per user and protocol. */
  is_default: number;
  /** What the account exposes: `*`, or a path prefix ending in `/*`. */
  path: string;
  writeable: number;
  /** The credentials' non-secret fields (endpoint, region, url, username) as JSON. */
  public_cred: string;
  /** The whole credentials, encrypted (credentials.ts). */
  sealed_cred: string;
  created_at: number;
  updated_at: number;
}

export interface ArtifactsTable {
  /** No foreign key: the rows outlive a deleted algorithm until its blobs are released. */
  algorithm_id: number;
  kind: 'source' | 'build';
  hash: string;
  blob_id: string;
  size: number;
  /** Of the stored tarball, checked when another server fetches it. */
  sha256: string;
  created_at: number;
}

/** A call with output=void, from its acceptance to its answer (asyncCalls.ts). */
export interface AsyncRequestsTable {
  /** The request id the caller was given. */
  id: string;
  user_id: number;
  /** The caller's key: checked again (revoked?) and its permissions read when the call runs. */
  key_id: string;
  owner: string;
  name: string;
  version: string | null;
  content_type: 'json' | 'text' | 'binary';
  /** Emptied once the call is done. */
  input: Buffer | null;
  timeout_s: number;
  stdout: number;
  status: 'queued' | 'running' | 'done';
  /** Times it was started (a node that died mid-call leaves it to be started again). */
  attempts: number;
  /** The process running it now (MetadataStore.instance). */
  holder: string | null;
  /** The answer a sync call would have had: its HTTP status and JSON body. */
  response_status: number | null;
  response: string | null;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  /** The W3C traceparent of the span that made it (docs/traces.md): what carries its trace on; null: none (made before traces). */
  traceparent: Traceparent;
}

/**
 * Recent failed sign-ins per user name and client address (auth/sessions.ts), in the store so
 * that every API node counts the same tries. A row lives for the window it counts; sign-ins
 * remove expired rows.
 */
export interface SigninFailuresTable {
  username_lc: string;
  /** The client's address (an IPv6 one as its /64), or '' for the name over every address. */
  address: string;
  /** When the window began (the first failure in it), ms since the epoch. */
  since: number;
  /** Tries counted in the window, each as it arrived (a right password takes its own back). */
  count: number;
}

export interface SessionsTable {
  /** SHA-256 of the session cookie's value, hex. The value itself is never stored. */
  id_hash: string;
  user_id: number;
  /** Sent back by the console in X-CSRF-Token with each request the cookie authenticates. */
  csrf_token: string;
  created_at: number;
  expires_at: number;
}

export interface UsageTable {
  /** UTC day, `YYYY-MM-DD`. */
  day: string;
  caller_id: number;
  owner_id: number;
  owner: string;
  name: string;
  /** The version that ran (`1.2.3`), or the build id of an owner's unpublished build. */
  version: string;
  /** `ok`, `error` (the algorithm failed or could not start), `timeout`. */
  outcome: string;
  calls: number;
  duration_ms: number;
  bytes_in: number;
  bytes_out: number;
}

/**
 * The outbox of events (src/events/outbox.ts): each written in the transaction of the change it
 * tells of. `id` orders them across users (writes are serialised, so ids commit in order);
 * `seq` counts a user's own events from 1.
 */
/** A traceparent column: optional when a row is written (old rows have none). */
type Traceparent = ColumnType<string | null, string | null | undefined, string | null>;

export interface EventsTable {
  id: Generated<number>;
  /** The CloudEvent's id (`evt_…`), what a consumer sees and resumes from. */
  event_id: string;
  user_id: number;
  seq: number;
  type: string;
  /** The canonical URI the event is about (`data://alice/inbox/a.txt`). */
  subject: string;
  /** When the change was made, ms. */
  time: number;
  /** The event's `data`, JSON. */
  data: string;
  /** The W3C traceparent of the span that made it (docs/traces.md): what carries its trace on; null: none (made before traces). */
  traceparent: Traceparent;
}

/** A user's webhook subscription (src/events/webhooks.ts). */
export interface SubscriptionsTable {
  /** `sub_` and 24 hex digits. */
  id: string;
  user_id: number;
  url: string;
  /** Type patterns, JSON array (empty: every type). */
  types: string;
  /** A path pattern, `data://user/…`, or null. */
  path: string | null;
  enabled: number;
  /** Why it was turned off: by its owner (null), or by us after days of failures. */
  disabled_reason: string | null;
  /** Sealed JSON: [{ secret, expires_at }] (the current one first; a rotated one signs beside it for 24 h). */
  secrets: string;
  /** Since when every delivery to it has failed (ms), or null. */
  failing_since: number | null;
  /** Deliveries not queued because its queue was full. */
  overflowed: number;
  created_at: number;
  updated_at: number;
}

export interface DeliveriesTable {
  /** `msg_` and 24 hex digits: the `webhook-id`, the same on every attempt. */
  id: string;
  subscription_id: string;
  event_id: string;
  event_type: string;
  /** The body sent: the CloudEvent's JSON. */
  payload: string;
  status: 'pending' | 'delivered' | 'failed';
  attempts: number;
  /** When the next attempt is due (ms). */
  next_at: number;
  /** A node sending it holds it until then (ms); 0 when nobody does. */
  claimed_until: number;
  last_status: number | null;
  last_error: string | null;
  created_at: number;
  finished_at: number | null;
  /** The W3C traceparent of the span that made it (docs/traces.md): what carries its trace on; null: none (made before traces). */
  traceparent: Traceparent;
}

export interface DeliveryAttemptsTable {
  delivery_id: string;
  attempt: number;
  at: number;
  /** The endpoint's HTTP status, or null when there was none (refused, timed out). */
  status: number | null;
  latency_ms: number;
  error: string | null;
}

/** A user's trigger (src/events/triggers.ts): run an algorithm on each event its filter wants. */
export interface TriggersTable {
  /** `trg_` and 24 hex digits. */
  id: string;
  user_id: number;
  /** Type patterns, JSON array (empty: every type). */
  types: string;
  /** A path pattern, `data://user/…`, or null. */
  path: string | null;
  /** `owner/name[/version]` as given, resolved at each run. */
  algorithm: string;
  /** The input template, JSON (a string template is sent as text, anything else as JSON). */
  input: string;
  /** The output path template, or null (the result is dropped). */
  output: string | null;
  /** The owner's key whose permissions the runs have. */
  key_id: string;
  timeout_s: number;
  enabled: number;
  /** Why it was turned off: by its owner (null), or by us (its key is gone). */
  disabled_reason: string | null;
  created_at: number;
  updated_at: number;
}

/** One run of a trigger, for one event. */
export interface TriggerRunsTable {
  /** `run_` and 24 hex digits. */
  id: string;
  trigger_id: string;
  event_id: string;
  event_type: string;
  subject: string;
  /** 1 for an event nobody's trigger made; one more than the run whose write made the event. */
  depth: number;
  /** The triggers whose runs led here, this one last, JSON array. */
  chain: string;
  status: 'queued' | 'running' | 'succeeded' | 'failed';
  attempts: number;
  /** A node running it holds it until then (ms); 0 when nobody does. */
  claimed_until: number;
  content_type: 'json' | 'text' | 'binary';
  /** The rendered input; emptied once the run is done. */
  input: Buffer | null;
  /** The rendered output path, or null. */
  output: string | null;
  /** The request id of its call (`GET /v1/requests/:id` once done). */
  request_id: string;
  http_status: number | null;
  error: string | null;
  created_at: number;
  started_at: number | null;
  finished_at: number | null;
  /** The W3C traceparent of the span that made it (docs/traces.md): what carries its trace on; null: none (made before traces). */
  traceparent: Traceparent;
  /** The `event_id` of the event that began its chain (one no trigger's run made); null: made before budgets. */
  root: string | null;
  /** Why a queued run waits (its owner's call limits); null when it waits for nothing but a node. */
  waiting: string | null;
}

/** One chain of trigger runs: what its first event has caused so far (src/events/triggers.ts). */
export interface TriggerChainsTable {
  /** The `event_id` of the event that began it. */
  root: string;
  user_id: number;
  /** Runs recorded for it, every depth and status. */
  runs: number;
  /** 1 once a run was refused for the budget (its one `trigger.failed` raised). */
  spent: number;
  created_at: number;
}

/** An `Idempotency-Key` and the answer it stands for (src/http/idempotency.ts), kept 24 h. */
export interface IdempotencyKeysTable {
  user_id: number;
  key: string;
  /** What the first request was (method, path, a digest of its body): a reuse for another request is refused. */
  fingerprint: string;
  status: 'running' | 'done';
  /** The process answering it while running (MetadataStore.instance). */
  holder: string | null;
  response_status: number | null;
  /** The answer's body, as sent. */
  response: string | null;
  created_at: number;
}

export interface Schema {
  user_limits: UserLimitsTable;
  limit_buckets: LimitBucketsTable;
  limit_slots: LimitSlotsTable;
  limit_holds: LimitHoldsTable;
  compute_months: ComputeMonthsTable;
  user_storage: UserStorageTable;
  triggers: TriggersTable;
  trigger_runs: TriggerRunsTable;
  trigger_chains: TriggerChainsTable;
  idempotency_keys: IdempotencyKeysTable;
  subscriptions: SubscriptionsTable;
  deliveries: DeliveriesTable;
  delivery_attempts: DeliveryAttemptsTable;
  events: EventsTable;
  sessions: SessionsTable;
  signin_failures: SigninFailuresTable;
  usage: UsageTable;
  async_requests: AsyncRequestsTable;
  artifacts: ArtifactsTable;
  connectors: ConnectorsTable;
  builds: BuildsTable;
  versions: VersionsTable;
  algorithms: AlgorithmsTable;
  users: UsersTable;
  api_keys: ApiKeysTable;
  nodes: NodesTable;
  pending_blobs: PendingBlobsTable;
  meta: MetaTable;
}
