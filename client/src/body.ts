/**
 * What the client accepts as a request body, and how each kind goes on the wire. Nothing here
 * uses Node: the transport turns a stream into what it sends (http.ts a Node Readable,
 * fetchTransport.ts a web ReadableStream).
 */
import { utf8, type RequestBody } from './transport.ts';

/**
 * A stream of bytes in any of the forms code usually has one: a web ReadableStream, a Blob
 * (a File in a browser), any async iterable of bytes (a Node Readable is one).
 */
export type ByteStream = ReadableStream<Uint8Array> | AsyncIterable<Uint8Array> | Blob;

/** Content for a file: text, bytes, a stream, or any other value (stored as JSON). */
export type FileData = string | Uint8Array | ArrayBuffer | ByteStream | object | number | boolean | null;

export interface WireBody {
  body: RequestBody;
  contentType: string;
}

/** Bytes, unless `value` is none of the byte forms. */
export function asBytes(value: unknown): Uint8Array | undefined {
  if (value instanceof Uint8Array) return value;
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  return undefined;
}

/** A stream as the transports take it, unless `value` is no kind of stream. */
export function asStream(value: unknown): Blob | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array> | undefined {
  if (typeof Blob !== 'undefined' && value instanceof Blob) return value;
  if (typeof ReadableStream !== 'undefined' && value instanceof ReadableStream) return value as ReadableStream<Uint8Array>;
  // A Node Readable is an async iterable of its chunks too.
  if (value !== null && typeof value === 'object' && Symbol.asyncIterator in value) return value as AsyncIterable<Uint8Array>;
  return undefined;
}

/** JSON text of a value; undefined (and functions, symbols) have none. */
export function jsonText(value: unknown): Uint8Array {
  const text = JSON.stringify(value);
  if (text === undefined) throw new TypeError(`${typeof value} cannot be sent as JSON`);
  return utf8(text);
}

/**
 * The body of a file upload: strings as UTF-8 text, bytes as they are, streams as they
 * come (never gathered in memory), anything else as JSON.
 */
export function fileBody(data: FileData): WireBody {
  if (typeof data === 'string') return { body: utf8(data), contentType: 'text/plain; charset=utf-8' };
  const b = asBytes(data);
  if (b) return { body: b, contentType: 'application/octet-stream' };
  const s = asStream(data);
  if (s) return { body: s, contentType: 'application/octet-stream' };
  return { body: jsonText(data), contentType: 'application/json' };
}
