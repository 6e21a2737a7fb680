/**
 * What the client accepts as a request body, and how each kind goes on the wire.
 */
import { Readable } from 'node:stream';
import type { ReadableStream as NodeWebStream } from 'node:stream/web';

/** A stream of bytes in any of the forms Node code usually has one. */
export type ByteStream = Readable | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array> | Blob;

/** Content for a file: text, bytes, a stream, or any other value (stored as JSON). */
export type FileData = string | Uint8Array | ArrayBuffer | ByteStream | object | number | boolean | null;

export interface WireBody {
  body: Buffer | Readable;
  contentType: string;
}

const bytes = (u8: Uint8Array) => Buffer.from(u8.buffer, u8.byteOffset, u8.byteLength);

/** Bytes, unless `value` is none of the byte forms. */
export function asBytes(value: unknown): Buffer | undefined {
  if (Buffer.isBuffer(value)) return value;
  if (value instanceof Uint8Array) return bytes(value);
  if (value instanceof ArrayBuffer) return Buffer.from(value);
  return undefined;
}

/** A Node Readable, unless `value` is no kind of stream. */
export function asStream(value: unknown): Readable | undefined {
  if (value instanceof Readable) return value;
  if (value instanceof ReadableStream) return Readable.fromWeb(value as NodeWebStream<Uint8Array>);
  if (value instanceof Blob) return Readable.fromWeb(value.stream() as NodeWebStream<Uint8Array>);
  if (value !== null && typeof value === 'object' && Symbol.asyncIterator in value) return Readable.from(value as AsyncIterable<Uint8Array>, { objectMode: false });
  return undefined;
}

/** JSON text of a value; undefined (and functions, symbols) have none. */
export function jsonText(value: unknown): Buffer {
  const text = JSON.stringify(value);
  if (text === undefined) throw new TypeError(`${typeof value} cannot be sent as JSON`);
  return Buffer.from(text, 'utf8');
}

/**
 * The body of a file upload: strings as UTF-8 text, bytes as they are, streams as they
 * come (never gathered in memory), anything else as JSON.
 */
export function fileBody(data: FileData): WireBody {
  if (typeof data === 'string') return { body: Buffer.from(data, 'utf8'), contentType: 'text/plain; charset=utf-8' };
  const b = asBytes(data);
  if (b) return { body: b, contentType: 'application/octet-stream' };
  const s = asStream(data);
  if (s) return { body: s, contentType: 'application/octet-stream' };
  return { body: jsonText(data), contentType: 'application/json' };
}
