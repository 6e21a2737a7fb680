/**
 * @algohost/client/browser: the client for browsers (the web console), over fetch. The same
 * classes as the Node entry (index.ts), with what needs Node left out: no packDirectory (tar
 * of a directory), no environment, no node:http. Bytes are Uint8Arrays and body streams web
 * ReadableStreams; uploads take Blobs (a File from an `<input>`) and Uint8Arrays.
 *
 *   // A page served by the server itself: its origin, its session cookie, the CSRF header.
 *   const client = new BrowserClient({ headers: () => ({ 'x-csrf-token': csrfToken }) });
 *   const algos = [];
 *   for await (const a of client.algorithms('alice')) algos.push(a);
 *   await client.file('data://.my/photos/cat.jpg').put(input.files[0]);
 *
 * Nothing this file imports may use a Node built-in: test/client-browser.test.ts bundles it
 * with esbuild for the browser, which fails on one.
 */
import { Algo } from './algo.ts';
import { BaseClient, DEFAULT_BASE_URL, VERSION } from './core.ts';
import { DataDir as DataDirOf } from './dir.ts';
import { DataFile as DataFileOf } from './file.ts';
import { FetchTransport, type FetchTransportOptions } from './fetchTransport.ts';
import { Connectors, Keys, Subscriptions, Triggers } from './management.ts';
import type { Platform, Transport, WebPlatform } from './transport.ts';

export interface BrowserClientOptions extends FetchTransportOptions {
  /** A transport of your own instead of a FetchTransport made from the options above. */
  transport?: Transport<WebPlatform>;
}

/** The client over fetch (FetchTransport): reads give Uint8Arrays and web ReadableStreams. */
export class BrowserClient extends BaseClient<WebPlatform> {
  /** Whether requests carry an API key (without one, a session cookie must authenticate them). */
  readonly hasApiKey: boolean;

  constructor(options: BrowserClientOptions = {}) {
    super(options.transport ?? new FetchTransport(options));
    this.hasApiKey = options.transport === undefined && options.apiKey !== undefined;
  }
}

/** Same as `new BrowserClient(options)`. */
export function createBrowserClient(options: BrowserClientOptions = {}): BrowserClient {
  return new BrowserClient(options);
}

/** A file (`client.file(uri)`); in the browser entry its reads give Uint8Arrays and web ReadableStreams. */
export const DataFile = DataFileOf;
export type DataFile<P extends Platform = WebPlatform> = DataFileOf<P>;
/** A directory (`client.dir(uri)`). */
export const DataDir = DataDirOf;
export type DataDir<P extends Platform = WebPlatform> = DataDirOf<P>;

export { DEFAULT_BASE_URL, VERSION };
export { Algo, BaseClient, Keys, Connectors, Subscriptions, Triggers, FetchTransport };
export { ACLS, aclLevel } from './dir.ts';
export { AlgohostError, ApiError, AlgorithmError, NetworkError, API_ERROR_CODES } from './errors.ts';
export { parseDataUri, parseAlgoRef } from './uri.ts';
export { verifyWebhook, WebhookVerificationError, WEBHOOK_TOLERANCE_S } from './webhook.ts';
export type { VerifyWebhookOptions, WebhookErrorCode, WebhookHeaders } from './webhook.ts';
export { SseParser } from './events.ts';
export type { EventStreamOptions, SseMessage } from './events.ts';
export type { FetchTransportOptions };
export type { AlgoInput, AlgoResponse, AsyncCallResponse, PipeOptions, RawResponse } from './algo.ts';
export type { AclLevel, DataEntry, DirEntry, FileEntry } from './dir.ts';
export type { FileInfo, ReadOptions, WriteOptions } from './file.ts';
export type { ByteStream, FileData } from './body.ts';
export type { HttpRequest, HttpResponse, Platform, RequestBody, RequestOptions, Transport, WebPlatform } from './transport.ts';
export type { AlgorithmErrorType, ApiErrorCode } from './errors.ts';
export type { DataUri, AlgoRef } from './uri.ts';
export type * from './types.ts';
