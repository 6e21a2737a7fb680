/**
 * Every error a client can see has a stable code, one HTTP status and a message a person can
 * act on. The list below is the single source of truth; docs/errors.md mirrors it and a test
 * checks that every code here is documented there.
 */
export const ERROR_CODES = {
  auth_required: 401,
  algo_not_allowed: 401,
  invalid_authorization: 401,
  invalid_api_key: 401,
  api_key_revoked: 401,
  invalid_credentials: 401,
  no_session: 401,
  csrf_token_invalid: 403,
  download_link_invalid: 403,
  cross_site_request: 403,
  key_permission_denied: 403,
  forbidden: 403,
  permission_escalation: 403,
  nested_call_refused: 403,
  write_denied: 403,
  connector_denied: 403,
  connector_address_refused: 403,
  not_found: 404,
  route_not_found: 404,
  unknown_user: 404,
  unknown_connector: 404,
  key_not_found: 404,
  algorithm_not_found: 404,
  build_not_found: 404,
  version_not_found: 404,
  request_not_found: 404,
  subscription_not_found: 404,
  trigger_not_found: 404,
  method_not_allowed: 405,
  already_exists: 409,
  too_many_keys: 409,
  too_many_connectors: 409,
  too_many_subscriptions: 409,
  too_many_triggers: 409,
  type_conflict: 409,
  directory_not_empty: 409,
  no_build: 409,
  already_published: 409,
  idempotency_key_in_use: 409,
  request_timeout: 408,
  deprecated_route: 410,
  event_expired: 410,
  payload_too_large: 413,
  storage_quota_exceeded: 413,
  unsupported_media_type: 415,
  headers_too_large: 431,
  range_not_satisfiable: 416,
  invalid_path: 400,
  reserved_path: 400,
  malformed_request: 400,
  invalid_json: 400,
  invalid_body: 400,
  invalid_acl: 400,
  invalid_marker: 400,
  invalid_query: 400,
  invalid_username: 400,
  invalid_password: 400,
  invalid_algorithm_name: 400,
  invalid_key_name: 400,
  invalid_permissions: 400,
  invalid_version: 400,
  invalid_archive: 400,
  network_not_allowed: 400,
  invalid_connector: 400,
  call_depth_exceeded: 400,
  acl_not_supported: 400,
  invalid_subscription: 400,
  invalid_trigger: 400,
  invalid_idempotency_key: 400,
  idempotency_key_reused: 422,
  user_exists: 409,
  too_many_attempts: 429,
  rate_limited: 429,
  concurrency_limited: 429,
  compute_quota_exceeded: 429,
  queue_full: 429,
  too_many_streams: 429,
  too_many_uploads: 429,
  too_many_builds: 429,
  too_many_git_requests: 429,
  delete_incomplete: 500,
  internal_error: 500,
  connector_error: 502,
  connector_unreachable: 502,
  connector_timeout: 504,
  shutting_down: 503,
  server_busy: 503,
  metadata_unavailable: 503,
  storage_unavailable: 503,
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;

export class AppError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  /** Extra fields merged into the error object of the response (e.g. `deleted`). */
  readonly extra: Record<string, unknown> | undefined;
  /** Headers the answer carries besides the error's (a limit's Retry-After and RateLimit fields). */
  headers: [string, string][] | undefined;

  constructor(code: ErrorCode, message: string, extra?: Record<string, unknown>, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'AppError';
    this.code = code;
    this.status = ERROR_CODES[code];
    this.extra = extra;
  }
}

export function isAppError(err: unknown): err is AppError {
  return err instanceof AppError;
}
