/**
 * What the client throws. Everything derives from AlgohostError and carries a `code`, so a
 * caller can branch on `err.code` whatever went wrong:
 * - ApiError: the server refused the request (an HTTP status and a stable code from
 *   docs/errors.md);
 * - AlgorithmError: the call reached the algorithm, which failed (the call envelope's
 *   `error`, HTTP 200 per the contract);
 * - NetworkError: no answer (connection refused, reset, the client's own timeout).
 */
import type { FailureMetadata } from './types.ts';

export type { FailureMetadata };

/** The server's error codes (docs/errors.md); a test keeps this list in step with the server's. */
export const API_ERROR_CODES = [
  'auth_required', 'algo_not_allowed', 'invalid_authorization', 'invalid_api_key', 'api_key_revoked',
  'invalid_credentials', 'no_session', 'csrf_token_invalid', 'download_link_invalid', 'cross_site_request',
  'key_permission_denied', 'forbidden', 'permission_escalation', 'nested_call_refused', 'write_denied',
  'connector_denied', 'connector_address_refused', 'not_found', 'route_not_found', 'unknown_user',
  'unknown_connector', 'key_not_found', 'algorithm_not_found', 'build_not_found', 'version_not_found', 'request_not_found', 'subscription_not_found', 'trigger_not_found',
  'method_not_allowed', 'already_exists', 'type_conflict', 'directory_not_empty', 'no_build',
  'already_published', 'idempotency_key_in_use', 'deprecated_route', 'event_expired', 'payload_too_large', 'storage_quota_exceeded', 'unsupported_media_type',
  'range_not_satisfiable', 'malformed_request', 'headers_too_large', 'request_timeout', 'invalid_path',
  'too_many_keys', 'too_many_connectors', 'too_many_subscriptions', 'too_many_triggers',
  'too_many_streams', 'too_many_uploads', 'too_many_builds', 'too_many_git_requests', 'reserved_path', 'invalid_json', 'invalid_body', 'invalid_acl',
  'invalid_marker', 'invalid_query', 'invalid_username', 'invalid_password', 'invalid_algorithm_name', 'invalid_key_name',
  'invalid_permissions', 'invalid_version', 'invalid_archive', 'network_not_allowed', 'invalid_connector',
  'call_depth_exceeded', 'acl_not_supported', 'invalid_subscription', 'invalid_trigger', 'invalid_idempotency_key', 'idempotency_key_reused', 'user_exists', 'too_many_attempts', 'rate_limited', 'concurrency_limited', 'compute_quota_exceeded', 'queue_full', 'delete_incomplete', 'internal_error',
  'connector_error', 'connector_unreachable', 'connector_timeout', 'shutting_down', 'server_busy', 'metadata_unavailable', 'storage_unavailable',
] as const;

/**
 * A code the server documents, or another string: a newer server may add codes, and answers
 * without a body (HEAD) or from something in between (a proxy) get `http_<status>`.
 */
export type ApiErrorCode = (typeof API_ERROR_CODES)[number] | (string & {});

/** `error_type`s the runtimes use (docs/algorithms.md, compat.md); others may appear. */
export type AlgorithmErrorType =
  | 'AlgorithmError' | 'InputError' | 'UnsupportedError' | 'InitializationError' | 'LoadingError'
  | 'OutOfMemoryError' | 'TooLargeError' | 'ParsingError' | 'EntityNotFoundError' | 'TimeoutError'
  | 'SystemExit' | (string & {});

export class AlgohostError extends Error {
  /** Stable and machine-readable: an API code, an algorithm's error_type, or a network code. */
  readonly code: string;

  constructor(message: string, code: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'AlgohostError';
    this.code = code;
  }
}

/** The server answered with an error status. */
export class ApiError extends AlgohostError {
  declare readonly code: ApiErrorCode;
  readonly status: number;
  /** The request id the server logged this under (`error.id`); quote it to an operator. */
  readonly requestId: string | undefined;
  /** A recursive delete that failed part-way: how many files it deleted before (`error.deleted`). */
  readonly deleted: number | undefined;

  constructor(status: number, code: ApiErrorCode, message: string, extra: { requestId?: string; deleted?: number } = {}) {
    super(message, code);
    this.name = 'ApiError';
    this.status = status;
    this.requestId = extra.requestId;
    this.deleted = extra.deleted;
  }
}

/** The algorithm failed: its exception, a timeout, running out of memory, no such version... */
export class AlgorithmError extends AlgohostError {
  declare readonly code: AlgorithmErrorType;
  readonly errorType: AlgorithmErrorType;
  /** Only when the caller may see the source (its owner, or open source). */
  readonly stacktrace: string | undefined;
  readonly metadata: FailureMetadata;

  constructor(message: string, errorType: AlgorithmErrorType, stacktrace?: string, metadata: FailureMetadata = {}) {
    super(message, errorType);
    this.name = 'AlgorithmError';
    this.errorType = errorType;
    this.stacktrace = stacktrace;
    this.metadata = metadata;
  }
}

/**
 * No answer from the server. `code` is the system's (`ECONNREFUSED`, `ECONNRESET`...) or
 * `request_timeout` when the client's own `timeoutMs` ran out.
 */
export class NetworkError extends AlgohostError {
  constructor(message: string, code: string, cause?: unknown) {
    super(message, code, cause === undefined ? undefined : { cause });
    this.name = 'NetworkError';
  }
}
