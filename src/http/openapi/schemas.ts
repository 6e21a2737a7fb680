import { ERROR_CODES, type ErrorCode } from '../../errors.ts';
import { MAX_WEIGHT } from '../../fairQueue.ts';

/**
 * The JSON schemas (2020-12, as OpenAPI 3.1 takes them) of what the API sends and takes:
 * `components.schemas` of the document (document.ts). They follow client/src/types.ts, the
 * types the routes' answers `satisfy`; during the tests every JSON answer is validated against
 * them (check.ts), so a field the code stops sending, or a type it changes, fails a test.
 * Objects stay open (no `additionalProperties: false`): a field added is not a break for a client.
 */

export type Schema = Record<string, unknown>;

const ref = (name: string): Schema => ({ $ref: `#/components/schemas/${name}` });
const str: Schema = { type: 'string' };
const strOrNull: Schema = { type: ['string', 'null'] };
const time: Schema = { type: 'string', format: 'date-time' };
const timeOrNull: Schema = { type: ['string', 'null'], format: 'date-time' };
const int: Schema = { type: 'integer' };
const bool: Schema = { type: 'boolean' };
const obj = (properties: Record<string, Schema>, required: string[] = Object.keys(properties), extra: Schema = {}): Schema => ({
  type: 'object',
  properties,
  required,
  ...extra,
});
/** A page of the original management API: `results`, with `marker` and `next_link` for the next. */
const page = (item: string): Schema => obj({ marker: strOrNull, next_link: strOrNull, results: { type: 'array', items: ref(item) } });
const results = (item: string): Schema => obj({ results: { type: 'array', items: ref(item) } });

/** The codes of one HTTP status (errors.ts is the source). */
export function codesOf(status: number): ErrorCode[] {
  return (Object.keys(ERROR_CODES) as ErrorCode[]).filter((c) => ERROR_CODES[c] === status);
}

/** Every status an error code has. */
export const ERROR_STATUSES: number[] = [...new Set(Object.values(ERROR_CODES) as number[])].sort((a, b) => a - b);

const LANGUAGE: Schema = { type: 'string', enum: ['python3', 'javascript', 'typescript'] };

const details = obj({ label: str, summary: str, tagline: str });
const settings = obj({
  language: LANGUAGE,
  source_visibility: { type: 'string', enum: ['open', 'closed'] },
  license: str,
  network_access: { type: 'string', enum: ['isolated', 'full'] },
  pipeline_enabled: bool,
  algorithm_callability: { type: 'string', enum: ['public', 'private'] },
  royalty_microcredits: { type: 'number' },
  algorithm_environment: strOrNull,
});
const algorithmProps = {
  id: str,
  name: str,
  owner: str,
  details: ref('AlgorithmDetails'),
  settings: ref('AlgorithmSettings'),
  resource_type: { const: 'algorithm' },
  self_link: str,
  created_at: time,
  updated_at: time,
};
const build = obj({
  build_id: str,
  commit_sha: str,
  status: { type: 'string', enum: ['in-progress', 'succeeded', 'failed'] },
  language: LANGUAGE,
  entry: strOrNull,
  started_at: timeOrNull,
  finished_at: timeOrNull,
  resource_type: { const: 'algorithm_build' },
  version_info: obj({ git_hash: str }),
});
const keyLimits = obj({ calls_per_min: int, burst: int, concurrency: int, compute_seconds_per_month: int, storage_bytes: int, requests_per_min: int }, [], { description: 'Limits of this key of its own, besides its user\'s (docs/limits.md).' });
const requestState = obj(
  { requests_per_min: { type: ['integer', 'null'] }, request_burst: { type: ['integer', 'null'] }, remaining: { type: ['integer', 'null'] }, reset_s: { type: ['number', 'null'] } },
  ['requests_per_min', 'request_burst', 'remaining', 'reset_s'],
  { description: 'Every authenticated request, a minute (docs/limits.md, "Requests").' },
);
const permissions = obj(
  {
    allow_algo: bool,
    algo_acl: { type: 'array', items: str },
    allow_web_algo: bool,
    referer_host: strOrNull,
    allow_data: bool,
    allow_data_write: bool,
    allow_algo_management: bool,
    limits: { oneOf: [ref('KeyLimits'), { type: 'null' }] },
  },
  ['allow_algo', 'algo_acl', 'allow_web_algo', 'referer_host', 'allow_data', 'allow_data_write', 'allow_algo_management'],
);
const keyProps = { id: str, name: str, prefix: str, created_at: time, permissions: ref('KeyPermissions') };
const callMetadata = obj(
  { content_type: { type: 'string', enum: ['void', 'text', 'json', 'binary'] }, duration: { type: 'number' }, stdout: str, stdout_truncated: bool },
  ['content_type', 'duration'],
);
const failureMetadata = obj({ duration: { type: 'number' }, stdout: str, stdout_truncated: bool }, []);
const backendHealth = obj({ driver: str, location: str, ok: bool, ms: { type: 'number' }, error: str }, ['driver', 'location', 'ok']);
const usageFigures = obj({ calls: int, seconds: { type: 'number' }, bytes_in: int, bytes_out: int, errors: int, timeouts: int });
const usageSection = obj({ total: ref('UsageFigures'), days: { type: 'array', items: { allOf: [ref('UsageFigures'), obj({ day: str, algorithm: str, version: str })] } } });
const limitState = obj({
  calls_per_min: { type: ['integer', 'null'] },
  burst: { type: ['integer', 'null'] },
  concurrency: { type: ['integer', 'null'] },
  remaining: { type: ['number', 'null'] },
  reset_s: { type: ['number', 'null'] },
  in_flight: int,
}, ['calls_per_min', 'burst', 'concurrency']);
const subscriptionProps = {
  id: str,
  url: str,
  types: { type: 'array', items: str },
  path: strOrNull,
  enabled: bool,
  disabled_reason: strOrNull,
  failing_since: timeOrNull,
  overflowed: int,
  created_at: time,
  updated_at: time,
};
const languageInfo = obj({ name: str, display_name: str, configuration: { type: 'string', description: 'A JSON document as a string, as the original API gives it.' } });

/** `components.schemas`. */
export const SCHEMAS: Record<string, Schema> = {
  ErrorEnvelope: obj(
    {
      error: obj(
        {
          code: ref('ErrorCode'),
          message: { type: 'string', description: 'For a person; also in the X-Error-Message header.' },
          id: { type: 'string', description: 'The request id, as the server log has it.' },
          deleted: { type: 'integer', description: 'Files deleted before a delete failed (spec 4.5, 4.9).' },
        },
        ['code', 'message'],
        // Some codes say more, each its own fields: a limit's name and figures (docs/limits.md).
        { additionalProperties: true },
      ),
    },
    ['error'],
    { description: 'Every error answer outside an algorithm call (docs/errors.md).' },
  ),
  ErrorCode: { type: 'string', enum: Object.keys(ERROR_CODES), description: 'Stable error codes (src/errors.ts, docs/errors.md); each has one HTTP status.' },
  AlgorithmDetails: details,
  AlgorithmSettings: settings,
  Algorithm: obj(algorithmProps),
  AlgorithmVersion: obj({
    ...algorithmProps,
    version_info: obj({ semantic_version: str, git_hash: str, release_notes: str, sample_input: {} }, ['semantic_version', 'git_hash']),
    published_at: timeOrNull,
  }),
  AlgorithmPage: page('Algorithm'),
  AlgorithmVersionPage: page('AlgorithmVersion'),
  AlgorithmChanges: obj(
    {
      name: { type: 'string', description: 'On create only.' },
      details: { type: 'object', description: 'Any of AlgorithmDetails\' fields.' },
      settings: { type: 'object', description: 'Any of AlgorithmSettings\' fields.' },
      version_info: { type: 'object' },
      source: { type: 'object', description: 'Sent empty by the Python client; other values are refused.' },
      scmsCredentials: { type: 'object', description: 'Sent empty by the Python client; other values are refused.' },
    },
    [],
  ),
  PublishRequest: obj(
    {
      details: { type: 'object' },
      settings: { type: 'object' },
      version_info: obj({ version_type: { type: 'string', enum: ['major', 'minor', 'revision'] }, release_notes: str, sample_input: {} }, []),
      source: { type: 'object' },
      scmsCredentials: { type: 'object' },
    },
    [],
  ),
  SourceUpload: obj({ source: obj({ hash: str, files: int, bytes: int }) }),
  Build: build,
  BuildPage: page('Build'),
  BuildLogs: obj({ logs: str }),
  CompileResult: obj({
    ...algorithmProps,
    version_info: obj({ git_hash: str }),
    compilation: obj({ successful: bool, output: str }),
    build: ref('Build'),
  }),
  VersionReadme: obj({ version: str, readme: { type: ['string', 'null'], description: 'Markdown as its author wrote it.' } }),
  LanguageInfo: languageInfo,
  Environment: obj({
    id: str,
    environment_specification_id: str,
    display_name: str,
    description: str,
    created_at: { type: 'string', description: 'As the original API writes it: an ISO 8601 time without a zone (UTC).' },
    language: ref('LanguageInfo'),
    machine_type: { const: 'CPU' },
  }),
  KeyLimits: keyLimits,
  KeyPermissions: permissions,
  KeyRecord: obj(keyProps),
  KeyPage: page('KeyRecord'),
  CreatedKey: obj({ ...keyProps, api_key: { type: 'string', description: 'The key itself, shown this once.' } }),
  NewKey: obj({ name: str, permissions: { type: 'object', description: 'Any of KeyPermissions\' fields; none beyond the asking key\'s own.' } }, ['name']),
  KeyChanges: obj({ name: str, permissions: { type: 'object' } }, []),
  WhoAmI: obj({ username: str, key_id: str, permissions: ref('KeyPermissions') }),
  ConnectedAccount: obj({
    label: str,
    protocol: { type: 'string', enum: ['objstore', 'filehost'] },
    provider: { type: 'string', enum: ['s3', 'webdav', 'dropbox'] },
    is_default: bool,
    path: str,
    writeable: bool,
    cred_data: { type: 'object', description: 'Credential fields, their secret values never shown.' },
    created_at: time,
    updated_at: time,
  }),
  ConnectedAccountPage: page('ConnectedAccount'),
  ConnectedAccountInput: obj(
    {
      label: str,
      protocol: { type: 'string', enum: ['objstore', 'filehost'] },
      provider: { type: 'string', enum: ['s3', 'webdav', 'dropbox'] },
      is_default: bool,
      cred_data: { type: 'object', additionalProperties: { type: ['string', 'boolean'] } },
      path: str,
      writeable: bool,
    },
    [],
    { description: 'On create, label, protocol and cred_data are needed; on change, label, protocol and provider stay as they are.' },
  ),
  DataAcl: obj({ read: { type: 'array', items: str, description: '[] private, ["user://*"] public, ["algo://.my/*"] the owner\'s algorithms.' } }),
  ListingPage: obj(
    {
      folders: { type: 'array', items: obj({ name: str }) },
      files: { type: 'array', items: obj({ filename: str, last_modified: time, size: int }) },
      marker: { type: 'string', description: 'More entries remain: pass it back as `marker`.' },
      acl: ref('DataAcl'),
    },
    [],
  ),
  NewDirectory: obj({ name: str, acl: ref('DataAcl') }, ['name']),
  DirectoryChanges: obj({ acl: ref('DataAcl') }, []),
  DataUriResult: obj({ result: { type: 'string', description: 'The Data URI of the file or directory.' } }),
  DeleteResult: obj({ result: obj({ deleted: int }) }),
  CallEnvelope: {
    description: 'Spec 2.2: a call\'s result or the algorithm\'s error, with metadata. HTTP 200 either way.',
    oneOf: [ref('CallSuccess'), ref('CallFailure')],
  },
  CallSuccess: obj({ result: { description: 'Encoded as metadata.content_type says: null (void), a string (text), any JSON (json), Base64 (binary).' }, metadata: callMetadata }),
  CallFailure: obj({
    error: obj({ message: str, error_type: str, stacktrace: str, stack_trace: str }, ['message']),
    metadata: failureMetadata,
  }),
  AsyncCallAccepted: obj({ async: { const: true }, request_id: str }),
  AsyncRequest: obj({
    request_id: str,
    status: { type: 'string', enum: ['queued', 'running', 'done'] },
    algorithm: str,
    attempts: int,
    created_at: time,
    started_at: timeOrNull,
    finished_at: timeOrNull,
    http_status: { type: ['integer', 'null'] },
    response: { anyOf: [ref('CallEnvelope'), ref('ErrorEnvelope'), { type: 'null' }] },
  }),
  Health: obj(
    {
      status: { type: 'string', enum: ['ok', 'unavailable'] },
      sandbox: obj({ enabled: bool, kind: { type: 'string', enum: ['bubblewrap', 'gvisor'] }, warning: str }, ['enabled']),
      network: obj({ mode: { type: 'string', enum: ['none', 'nat', 'host'] }, warning: str }, ['mode']),
      metadata: backendHealth,
      blobs: backendHealth,
      nats: backendHealth,
      role: { type: 'string', enum: ['api', 'worker'] },
      running: int,
      free: int,
    },
    ['status', 'sandbox', 'metadata', 'blobs'],
  ),
  UsageFigures: usageFigures,
  UsageReport: obj({ user: str, from: str, to: str, as_caller: usageSection, as_owner: usageSection }),
  LimitState: limitState,
  ComputeQuotaState: obj({ seconds_per_month: { type: ['integer', 'null'] }, used_s: { type: 'number' }, remaining_s: { type: ['number', 'null'] }, period_start: time, resets_at: time, reset_s: { type: 'number' } }, ['seconds_per_month', 'used_s', 'remaining_s', 'period_start', 'resets_at', 'reset_s'], { description: 'Compute seconds this calendar month (UTC).' }),
  StorageQuotaState: obj({ bytes: { type: ['integer', 'null'] }, used_bytes: int, remaining_bytes: { type: ['integer', 'null'] } }, ['bytes', 'used_bytes', 'remaining_bytes'], { description: 'Hosted bytes stored.' }),
  Limits: {
    allOf: [
      ref('LimitState'),
      obj(
        {
          share: { type: 'integer', minimum: 1, maximum: MAX_WEIGHT, description: 'Your share of the workers while calls wait for one: your calls served a turn (docs/limits.md, "Shares").' },
          compute: ref('ComputeQuotaState'),
          storage: ref('StorageQuotaState'),
          requests: requestState,
          key: { oneOf: [{ allOf: [ref('LimitState'), obj({ compute: ref('ComputeQuotaState'), storage: ref('StorageQuotaState'), requests: requestState })] }, { type: 'null' }], description: 'The asking key\'s own limits, null when it has none.' },
        },
        ['share', 'compute', 'storage', 'requests', 'key'],
      ),
    ],
    description: 'null is no limit (docs/limits.md).',
  },
  SignIn: obj({ username: str, password: str }),
  SessionInfo: obj({ username: str, csrf_token: str, expires_at: time }),
  DownloadRequest: obj({ path: { type: 'string', description: 'The /v1/data/... path of one file.' } }),
  DownloadLink: obj({ url: str, expires_at: time }),
  PasswordChange: obj({ current_password: str, password: str }),
  CloudEvent: obj(
    {
      specversion: { const: '1.0' },
      id: str,
      source: str,
      type: str,
      subject: str,
      time,
      datacontenttype: { const: 'application/json' },
      sequence: str,
      data: { type: 'object' },
    },
    ['specversion', 'id', 'source', 'type', 'subject', 'time', 'data'],
  ),
  Subscription: obj(subscriptionProps),
  SubscriptionWithSecret: obj({ ...subscriptionProps, secret: { type: 'string', description: 'The signing secret (Standard Webhooks), shown on create and rotation only.' } }),
  SubscriptionList: results('Subscription'),
  SubscriptionInput: obj({ url: str, types: { type: 'array', items: str }, path: strOrNull, enabled: bool }, [], { description: 'url is needed on create.' }),
  DeliveryAttempt: obj({ attempt: int, at: time, status_code: { type: ['integer', 'null'] }, latency_ms: { type: 'number' }, error: strOrNull }),
  Delivery: obj({
    id: str,
    event_id: str,
    event_type: str,
    status: { type: 'string', enum: ['pending', 'delivered', 'failed'] },
    attempts: { type: 'array', items: ref('DeliveryAttempt') },
    next_attempt_at: timeOrNull,
    created_at: time,
  }),
  DeliveryList: results('Delivery'),
  Trigger: obj({
    id: str,
    types: { type: 'array', items: str },
    path: strOrNull,
    algorithm: str,
    input: {},
    output: strOrNull,
    key: strOrNull,
    timeout: { type: 'number' },
    enabled: bool,
    disabled_reason: strOrNull,
    created_at: time,
    updated_at: time,
  }),
  TriggerList: results('Trigger'),
  TriggerInput: obj(
    { types: { type: 'array', items: str }, path: strOrNull, algorithm: str, input: {}, output: strOrNull, key: str, timeout: { type: 'number' }, enabled: bool },
    [],
    { description: 'algorithm is needed on create.' },
  ),
  TriggerRun: obj({
    id: str,
    event_id: str,
    event_type: str,
    subject: str,
    depth: int,
    status: { type: 'string', enum: ['queued', 'running', 'succeeded', 'failed'] },
    attempts: int,
    request_id: str,
    output: strOrNull,
    http_status: { type: ['integer', 'null'] },
    error: strOrNull,
    waiting: { type: ['string', 'null'], description: "Why a queued run waits: its owner's calls a minute or at once (`rate_limited: …`, `concurrency_limited: …`); null otherwise." },
    created_at: time,
    started_at: timeOrNull,
    finished_at: timeOrNull,
  }),
  TriggerRunList: results('TriggerRun'),
};
