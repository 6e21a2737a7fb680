import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { AppError } from '../errors.ts';
import { errorAnswer } from './answers.ts';

/**
 * Requests Node's HTTP parser refuses before any request listener sees them (the server's
 * `clientError` event): a control character in a header, a malformed request line or chunked
 * body, headers over the size limit, a head that took too long. Fastify's own handler answers
 * these with a body of its own shape, no code, no request id and a trace-level log line; this
 * one answers them in our envelope (answers.ts), with a request id made for them, and logs
 * each at info with that id, so a client quoting the id can be found in the log.
 */

/** What llhttp's error codes mean, in the words a client can act on. */
const PARSER_ERRORS: Record<string, string> = {
  HPE_INVALID_HEADER_TOKEN: 'a header holds a character HTTP does not allow there (a control character, or a space or colon in a header name)',
  HPE_INVALID_METHOD: 'the request method is not one HTTP knows',
  HPE_INVALID_URL: 'the request line\'s target is not a valid URL',
  HPE_INVALID_VERSION: 'the request line\'s HTTP version is not valid',
  HPE_INVALID_CONSTANT: 'the request line is not valid HTTP',
  HPE_INVALID_CONTENT_LENGTH: 'Content-Length is not a valid length',
  HPE_UNEXPECTED_CONTENT_LENGTH: 'Content-Length and Transfer-Encoding were both sent',
  HPE_INVALID_TRANSFER_ENCODING: 'Transfer-Encoding is not valid (chunked must be the last encoding)',
  HPE_INVALID_CHUNK_SIZE: 'a chunk size of the chunked body is not valid',
  HPE_INVALID_EOF_STATE: 'the connection ended in the middle of the request',
  HPE_LF_EXPECTED: 'a line of the request head does not end with CRLF',
  HPE_CR_EXPECTED: 'a line of the request head does not end with CRLF',
};

/** The error a parser failure is answered with: our code, and a message naming the part at fault. */
export function clientErrorOf(err: NodeJS.ErrnoException): AppError {
  if (err.code === 'HPE_HEADER_OVERFLOW') return new AppError('headers_too_large', 'the request\'s headers are larger than this server takes (16 KiB in all)');
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') return new AppError('request_timeout', 'the request did not arrive whole in time');
  const what = (err.code !== undefined && PARSER_ERRORS[err.code]) || 'the request is not well-formed HTTP';
  // The parser's code too, for whoever reads the answer beside Node's documentation.
  return new AppError('malformed_request', /^HPE_[A-Z_]+$/.test(err.code ?? '') ? `${what} (${err.code})` : what);
}

/** The HTTP/1.1 answer to a refused request, as bytes for the socket (the connection is closed after it). */
export function clientErrorResponse(err: NodeJS.ErrnoException, id: string): string {
  const a = errorAnswer(clientErrorOf(err), id);
  const body = Buffer.from(a.body);
  const reason = { 400: 'Bad Request', 408: 'Request Timeout', 431: 'Request Header Fields Too Large' }[a.status] ?? 'Error';
  const lines = [`HTTP/1.1 ${a.status} ${reason}`, 'Content-Type: application/json; charset=utf-8', `Content-Length: ${body.length}`, 'X-Content-Type-Options: nosniff', 'Connection: close'];
  for (const [name, value] of a.headers) if (name !== 'connection') lines.push(`${name}: ${value}`);
  return `${lines.join('\r\n')}\r\n\r\n${a.body}`;
}

/**
 * Fastify's `clientErrorHandler`: answers and logs a request the parser refused, with a request
 * id from `requestId` (the one fastify's requests get theirs from). The log line names the parser's
 * code and the peer, never the bytes it read (they may hold an Authorization header).
 */
export function clientErrorHandler(requestId: () => string) {
  // Fastify calls it with `this` the app, whose logger it takes.
  return function (this: FastifyInstance, err: NodeJS.ErrnoException, socket: Socket): void {
    // A connection reset, or already closed: there is no one to answer.
    if (err.code === 'ECONNRESET' || socket.destroyed) return;
    const id = requestId();
    const e = clientErrorOf(err);
    this.log.info({ reqId: id, code: e.code, parserError: err.code, remoteAddress: socket.remoteAddress, remotePort: socket.remotePort, status: e.status }, `request refused by the HTTP parser: ${e.message}`);
    // As Node itself does: answer only when no answer of an earlier request on this connection
    // has begun (pipelined requests), or the bytes would corrupt that one.
    const inFlight = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
    if (socket.writable && (!inFlight || !inFlight.headersSent)) socket.write(clientErrorResponse(err, id));
    // Closed once the answer is written; the app's lingering close (linger.ts) reads and drops
    // what the client still sends (the rest of oversized headers), so no reset eats the answer.
    socket.destroySoon();
  };
}
