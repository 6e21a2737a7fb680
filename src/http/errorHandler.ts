import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { AppError, type ErrorCode } from '../errors.ts';

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
 * percent-encoded there (the JSON body carries it as it is).
 */
export function headerSafe(message: string): string {
  return message.replace(/[^\x20-\x7e]/g, (c) => encodeURIComponent(c)).slice(0, 1000);
}

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
  const status = typeof fe?.statusCode === 'number' ? fe.statusCode : 500;
  const code = status >= 400 && status < 500 ? FASTIFY_STATUS_CODES[status] ?? 'invalid_body' : undefined;
  if (code) return new AppError(code, fe.message || 'bad request');
  return new AppError('internal_error', 'internal error; the server log has the details');
}

/** The one place where errors become responses: status, JSON envelope, X-Error-Message. */
export function sendError(err: unknown, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const appErr = toAppError(err);
  if (appErr.status >= 500) {
    request.log.error({ err: appErr.code === 'internal_error' ? err : (appErr.cause ?? appErr) }, 'request failed');
  }
  reply.code(appErr.status);
  reply.header('x-error-message', headerSafe(appErr.message));
  // A route that speaks another scheme (git's Basic) has set its own challenge.
  if (appErr.status === 401 && !reply.hasHeader('www-authenticate')) reply.header('www-authenticate', 'Simple realm="algohost"');
  if (appErr.code === 'payload_too_large') reply.header('connection', 'close');
  const body = { error: { code: appErr.code, message: appErr.message, id: request.id, ...appErr.extra } };
  return reply.type('application/json').send(request.method === 'HEAD' ? undefined : body);
}
