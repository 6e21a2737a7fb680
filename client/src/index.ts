/**
 * @algohost/client: a typed, promise-based client for algohost and the algorithm-execution
 * and data API it serves (also usable against the original service's address).
 *
 *   const client = new AlgohostClient();                 // ALGOHOST_API(_KEY), ALGORITHMIA_API(_KEY)
 *   const { result } = await client.algo('demo/Hello/0.1.*').pipe('you');
 *   await client.file('data://.my/notes/today.txt').put('hi');
 *   for await (const e of client.dir('data://.my/notes').list()) console.log(e.type, e.name);
 */
import type http from 'node:http';
import { Algo } from './algo.ts';
import { BaseClient, DEFAULT_BASE_URL, VERSION } from './core.ts';
import { DataDir as DataDirOf } from './dir.ts';
import { DataFile as DataFileOf } from './file.ts';
import { NodeTransport, type NodePlatform } from './http.ts';
import { Connectors, Keys, Subscriptions, Triggers } from './management.ts';
import { fromEnv, processEnv, type Env } from './env.ts';
import type { Platform } from './transport.ts';

export { DEFAULT_BASE_URL, VERSION };

export interface ClientOptions {
  /** API key (`sim...`). Default: ALGOHOST_API_KEY, then ALGORITHMIA_API_KEY. */
  apiKey?: string;
  /** Server address, without `/v1`. Default: ALGOHOST_API, then ALGORITHMIA_API, then DEFAULT_BASE_URL. */
  baseUrl?: string;
  /** Where the defaults above are read; `process.env` unless given (tests pass their own). */
  env?: Env;
  /** Default for every request's `timeoutMs` (none: algorithm calls may run 50 minutes). */
  timeoutMs?: number;
  /** An http(s).Agent of your own (proxies, connection limits); Node's global agent otherwise. */
  agent?: http.Agent;
}

/** The client in Node, over node:http (NodeTransport). Browsers use BrowserClient (browser.ts). */
export class AlgohostClient extends BaseClient<NodePlatform> {
  /** Whether a key was given or found in the environment (without one, requests answer 401). */
  readonly hasApiKey: boolean;

  constructor(options: ClientOptions = {}) {
    const env = fromEnv(options.env ?? processEnv());
    const apiKey = options.apiKey ?? env.apiKey;
    super(new NodeTransport({
      baseUrl: options.baseUrl ?? env.baseUrl ?? DEFAULT_BASE_URL,
      apiKey,
      timeoutMs: options.timeoutMs,
      agent: options.agent,
      userAgent: `algohost-client/${VERSION} node/${process.versions.node}`,
    }));
    this.hasApiKey = apiKey !== undefined;
  }
}

/** Same as `new AlgohostClient(options)`. */
export function createClient(options: ClientOptions = {}): AlgohostClient {
  return new AlgohostClient(options);
}

/** A file (`client.file(uri)`); in Node its reads give Buffers and Readables. */
export const DataFile = DataFileOf;
export type DataFile<P extends Platform = NodePlatform> = DataFileOf<P>;
/** A directory (`client.dir(uri)`). */
export const DataDir = DataDirOf;
export type DataDir<P extends Platform = NodePlatform> = DataDirOf<P>;

export { Algo, Keys, Connectors, Subscriptions, Triggers };
export { ACLS, aclLevel } from './dir.ts';
export { packDirectory } from './pack.ts';
export { AlgohostError, ApiError, AlgorithmError, NetworkError, API_ERROR_CODES } from './errors.ts';
export { parseDataUri, parseAlgoRef } from './uri.ts';
export { verifyWebhook, WebhookVerificationError, WEBHOOK_TOLERANCE_S } from './webhook.ts';
export type { VerifyWebhookOptions, WebhookErrorCode, WebhookHeaders } from './webhook.ts';
export { SseParser } from './events.ts';
export type { EventStreamOptions, SseMessage } from './events.ts';
export type { AlgoInput, AlgoResponse, AsyncCallResponse, PipeOptions, RawResponse } from './algo.ts';
export type { AclLevel, DataEntry, DirEntry, FileEntry } from './dir.ts';
export type { FileInfo, ReadOptions, WriteOptions } from './file.ts';
export type { ByteStream, FileData } from './body.ts';
export type { RequestOptions } from './transport.ts';
export type { HttpRequest, HttpResponse, Platform, RequestBody, Transport, WebPlatform } from './transport.ts';
export { NodeTransport, type NodePlatform, type NodeTransportOptions } from './http.ts';
export { FetchTransport, type FetchTransportOptions } from './fetchTransport.ts';
export { BaseClient } from './core.ts';
export type { Env } from './env.ts';
export type { PackOptions } from './pack.ts';
export type { AlgorithmErrorType, ApiErrorCode } from './errors.ts';
export type { DataUri, AlgoRef } from './uri.ts';
export type * from './types.ts';
