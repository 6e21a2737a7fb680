/**
 * The client's two transports, for the suites that run the same tests over each: `node`
 * (AlgohostClient over node:http, the default in Node) and `fetch` (the browser entry's
 * BrowserClient over the global fetch, which Node 20 has too).
 */
import assert from 'node:assert/strict';
import { AlgohostClient, type BaseClient, type Platform } from '../../client/src/index.ts';
import { BrowserClient, type FetchTransportOptions } from '../../client/src/browser.ts';

export const TRANSPORTS = ['node', 'fetch'] as const;
export type TransportKind = (typeof TRANSPORTS)[number];

/** Either client: what a test may do with both. */
export type AnyClient = BaseClient<Platform>;

export interface ClientSpec {
  baseUrl: string;
  apiKey?: string;
  timeoutMs?: number;
}

/** A client of `kind` for `spec` (the node one ignores the environment, as the suites always did). */
export function makeClient(kind: TransportKind, spec: ClientSpec, fetchOptions: Omit<FetchTransportOptions, keyof ClientSpec> = {}): AnyClient {
  if (kind === 'node') return new AlgohostClient({ ...spec, env: {} });
  return new BrowserClient({ ...spec, ...fetchOptions });
}

/**
 * Bytes a client handed out, checked to be its platform's kind (a Buffer from the node
 * transport, a plain Uint8Array from fetch), as a Buffer to compare with.
 */
export function bytesOf(kind: TransportKind, value: unknown): Buffer {
  assert.ok(value instanceof Uint8Array, `expected bytes, got ${typeof value}`);
  if (kind === 'node') {
    assert.ok(Buffer.isBuffer(value), 'the node transport hands out Buffers');
    return value;
  }
  assert.ok(!Buffer.isBuffer(value), 'the fetch transport hands out plain Uint8Arrays (a browser has no Buffer)');
  return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
}
