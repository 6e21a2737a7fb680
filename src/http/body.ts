import type { IncomingMessage } from 'node:http';
import type { Readable } from 'node:stream';
import { AppError } from '../errors.ts';

/**
 * Reads a request body into memory, refusing it with `tooLarge()` as soon as it passes
 * `limit` bytes (chunked bodies too). On refusal the stream is paused, not destroyed: the
 * 413 still reaches the client, and the connection is closed after it (errorHandler).
 */
export function readLimited(stream: Readable, limit: number, tooLarge: () => AppError): Promise<Buffer> {
  return new Promise((resolve, reject) => void new LimitedRead(stream, limit, tooLarge, resolve, reject));
}

/**
 * A request body that has already arrived whole, taken from the stream's buffer without
 * waiting for its events (a call's input that came with its headers, seen a microtask after
 * the request event); undefined when it has not (or is over `limit`): read it with readLimited.
 */
export function bufferedBody(req: IncomingMessage, limit: number): Buffer | undefined {
  const length = Number(req.headers['content-length']);
  // Nothing read yet, and all of the declared length waits in the buffer: that is the body
  // (what follows a Content-Length body is the connection's next request, never buffered here).
  if (req.readableFlowing !== null || !(length <= limit) || req.readableLength !== length) return undefined;
  const body = length === 0 ? Buffer.alloc(0) : (req.read() as Buffer);
  // Flowing from here on, so that the stream ends (and is not left to be dumped) as it would
  // have for a reader; it runs after this microtask, and nothing is left to flow.
  req.resume();
  return body;
}

/** One body being read by readLimited (a class: no function objects of its own per request but its three listeners). */
class LimitedRead {
  private readonly chunks: Buffer[] = [];
  private size = 0;
  private readonly onData: (chunk: Buffer) => void;
  private readonly onEnd: () => void;
  private readonly onError: (err: Error) => void;

  constructor(
    private readonly stream: Readable,
    private readonly limit: number,
    private readonly tooLarge: () => AppError,
    private readonly resolve: (body: Buffer) => void,
    private readonly reject: (err: Error) => void,
  ) {
    this.onData = this.data.bind(this);
    this.onEnd = this.done.bind(this, undefined);
    this.onError = this.done.bind(this);
    stream.on('data', this.onData).on('end', this.onEnd).on('error', this.onError);
  }

  private data(chunk: Buffer): void {
    this.size += chunk.length;
    if (this.size > this.limit) {
      this.stream.pause();
      this.done(this.tooLarge());
      return;
    }
    this.chunks.push(chunk);
  }

  private done(err: Error | undefined): void {
    this.stream.off('data', this.onData).off('end', this.onEnd).off('error', this.onError);
    if (err) this.reject(err);
    // A body that came in one piece is that piece (the usual small call input).
    else this.resolve(this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.size));
  }
}

/** Reads a small request body (a directory name, an ACL) with a hard size limit. */
export async function readSmallBody(stream: Readable, limit = 64 * 1024): Promise<string> {
  const body = await readLimited(stream, limit, () => new AppError('payload_too_large', `this request body may be at most ${limit} bytes`));
  return body.toString('utf8');
}

/** Parses a JSON object body; refuses anything else, naming what was wrong. */
export function parseJsonObject(text: string, allowed: readonly string[]): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new AppError('invalid_json', text.trim() === '' ? 'the request body is empty; send a JSON object' : 'the request body is not valid JSON');
  }
  return checkObject(value, allowed);
}

/**
 * A parsed body must be a JSON object with only the `allowed` fields. No body at all is `{}`
 * (an optional body left out); JSON `null` is a body, and not an object: refused like a list.
 */
export function checkObject(value: unknown, allowed: readonly string[]): Record<string, unknown> {
  if (value === undefined) return {};
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new AppError('invalid_body', `the request body must be a JSON object, not ${value === null ? 'null' : Array.isArray(value) ? 'a list' : `a ${typeof value}`}`);
  }
  for (const key of Object.keys(value)) {
    if (!allowed.includes(key)) {
      throw new AppError('invalid_body', `unknown field "${key.slice(0, 40)}"; this request takes ${allowed.join(', ')}`);
    }
  }
  return value as Record<string, unknown>;
}
