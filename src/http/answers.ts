import type { FastifyError } from 'fastify';
import { AppError, type ErrorCode } from '../errors.ts';
import { isWellFormed, NOT_WELL_FORMED } from '../wellFormed.ts';
import type { ErrorEnvelope } from '../../client/src/types.ts';

/**
 * The API's error answers, framework-free: the one place that turns an error into a status,
 * headers and the JSON envelope (docs/errors.md). Fastify's error handler (errorHandler.ts), the
 * direct call path (directCalls.ts) and the SDK gate of running algorithms (hostRequests.ts)
 * all answer through here, so a client sees one shape whichever way its request went.
 */

/** Fastify's own client errors (bad JSON, body limits...), mapped to our codes by status. */
const FASTIFY_STATUS_CODES: Record<number, ErrorCode> = {
  400: 'invalid_body',
  404: 'route_not_found',
  405: 'method_not_allowed',
  413: 'payload_too_large',
  415: 'unsupported_media_type',
};

/**
 * Header values must be printable ASCII; a message naming a non-ASCII path is
 * percent-encoded there (the JSON body carries it as it is). Character by character (`u`: a
 * surrogate pair is one), and a lone surrogate, which encodeURIComponent throws on, as U+FFFD.
 */
export function headerSafe(message: string): string {
  return message.replace(/[^\x20-\x7e]/gu, (c) => (isWellFormed(c) ? encodeURIComponent(c) : '%EF%BF%BD')).slice(0, 1000);
}

/** Any error in the contract's terms: ours as they are, the framework's by kind, anything else a 500. */
export function toAppError(err: unknown): AppError {
  if (err instanceof AppError) return err;
  const fe = err as FastifyError;
  if (fe?.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || (fe instanceof SyntaxError && fe.statusCode === 400)) {
    return new AppError('invalid_json', 'the request body is not valid JSON');
  }
  if (fe?.code === 'ERR_STREAM_PREMATURE_CLOSE' || fe?.code === 'ECONNRESET') {
    // The client went away mid-request (usually mid-upload): its mistake or its network's.
    return new AppError('invalid_body', 'the request ended before its body was complete');
  }
  if (fe?.code === 'FST_ERR_CTP_EMPTY_JSON_BODY') {
    return new AppError('invalid_json', 'the request body is empty; send a JSON object');
  }
  if (err instanceof URIError) {
    // A string of the request reached encodeURIComponent or decodeURIComponent unchecked (the
    // checks where text comes in should have refused it, more precisely): still the client's.
    return new AppError('invalid_body', `the request ${NOT_WELL_FORMED}, or a malformed percent-encoding`);
  }
  const status = typeof fe?.statusCode === 'number' ? fe.statusCode : 500;
  const code = status >= 400 && status < 500 ? FASTIFY_STATUS_CODES[status] ?? 'invalid_body' : undefined;
  if (code) return new AppError(code, fe.message || 'bad request');
  return new AppError('internal_error', 'internal error; the server log has the details');
}

/** The envelope's text: `{"error":{"code","message","id"?,...extra}}`. */
export function errorDocument(code: ErrorCode, message: string, id?: string, extra?: Record<string, unknown>): string {
  return JSON.stringify({ error: { code, message, ...(id === undefined ? {} : { id }), ...extra } } satisfies ErrorEnvelope);
}

export interface ErrorAnswer {
  error: AppError;
  status: number;
  /** Header names and values, in the order they are sent (before Content-Type). */
  headers: [string, string][];
  /** The JSON envelope (not sent for HEAD). */
  body: string;
  /** What to log, for an answer in the 5xx range: the underlying failure, not our wording of it. */
  logged: unknown;
}

/**
 * How `err` is answered to request `id`: the status, `X-Error-Message` (the message, for clients
 * that read only headers), a `WWW-Authenticate` challenge on 401 unless `challenged` (a route
 * that speaks another scheme, git's Basic, set its own), and `Connection: close` when the body
 * was too large (the rest of it is not read).
 */
export function errorAnswer(err: unknown, id: string, challenged = false): ErrorAnswer {
  const e = toAppError(err);
  const headers: [string, string][] = [['x-error-message', headerSafe(e.message)]];
  if (e.status === 401 && !challenged) headers.push(['www-authenticate', 'Simple realm="algohost"']);
  if (e.code === 'payload_too_large') headers.push(['connection', 'close']);
  if (e.headers) headers.push(...e.headers);
  // A URIError is logged too: it is a check missing where the text came in.
  const logged = e.status >= 500 ? (e.code === 'internal_error' ? err : (e.cause ?? e)) : err instanceof URIError ? err : undefined;
  return { error: e, status: e.status, headers, body: errorDocument(e.code, e.message, id, e.extra), logged };
}
